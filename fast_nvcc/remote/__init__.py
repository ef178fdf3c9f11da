"""8. cicc and ptxas through sccache: a team cache and build servers."""
