import sys

from .lean import exec_if_lean

failed = exec_if_lean(sys.argv[1:])  # where the cores are full and the compile light: nvcc (lean.py)
if failed is not None:
    sys.exit(failed)

from .cli import main  # noqa: E402 - (after the lean path, which imports nothing of the rest)

sys.exit(main())
