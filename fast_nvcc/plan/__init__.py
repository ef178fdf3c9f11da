"""1. nvcc's command line and its plan: the options read from it, which nvcc runs, ``nvcc --dryrun``
parsed into steps, and what nvcc itself does that is not a step (its dependency filter, its exit
codes)."""
