"""2. The plan as a dataflow graph: tasks, the files between them, and the changes that let more of
them run at once (a cicc's own module_id, the host compile split around fatbinary)."""
