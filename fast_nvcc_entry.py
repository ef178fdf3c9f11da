"""Console-script entry point, outside the package on purpose.

pip installs two scripts side by side, ``fast_nvcc`` and ``fast_nvcc.py``.  Python puts a
script's directory first on sys.path, so from ``fast_nvcc`` an ``import fast_nvcc`` would find
the *script* ``fast_nvcc.py`` instead of the package.  This module has a name no script
shadows; it drops the scripts' directory from sys.path before importing the package.
"""

import os
import sys


def main() -> int:
    here = os.path.dirname(os.path.realpath(sys.argv[0]))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    shadow = sys.modules.get("fast_nvcc")
    if shadow is not None and not hasattr(shadow, "__path__"):
        del sys.modules["fast_nvcc"]
    from fast_nvcc.lean import exec_if_lean

    failed = exec_if_lean(sys.argv[1:])  # where the cores are full and the compile light: nvcc
    if failed is not None:
        return failed
    from fast_nvcc.cli import main as cli_main

    return cli_main()
