"""nvcc, given the command line unchanged.

Without a log to write, fast_nvcc becomes nvcc (exec): same output, exit code and signals.  With
one, nvcc runs as a child and the log records how it went.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from .plan.invocation import Invocation


def run_unchanged(invocation: Invocation, *, log: str | None, started: float, say: Callable[[str], None]) -> int:
    say(f"running nvcc unchanged: {invocation.passthrough}")
    sys.stdout.flush()
    sys.stderr.flush()
    nvcc, args = invocation.nvcc, invocation.args
    if not log:
        os.execv(nvcc, [nvcc, *args])
    from .report.log import append_log, log_record  # loaded only for a log (driver.py says why)
    from .report.writing import try_report

    clock = time.monotonic()
    proc = subprocess.run([nvcc, *args], check=False)
    code = proc.returncode
    record = log_record(
        nvcc=nvcc, args=args, cwd=invocation.cwd, sources=invocation.sources, outputs=[],
        exit_code=code if code >= 0 else 128 - code,
        wall_seconds=time.monotonic() - clock, started=started, mode="passthrough", reason=invocation.passthrough,
    )  # fmt: skip
    try_report(lambda: append_log(log, record), "FAST_NVCC_LOG")
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code
