"""9. What one invocation reports: graph, table, trace, summary, the build log and the device
tools' own time traces."""
