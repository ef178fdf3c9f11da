"""4. Running one graph: the ready queue, admission to slots and memory, the processes and their
watchdog, each task's record, and its output forwarded in nvcc's order."""
