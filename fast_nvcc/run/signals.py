"""SIGINT, SIGTERM and SIGHUP while a graph runs: each raises :class:`Interrupted` in the main
thread, so the run can stop its steps and clean up; then fast_nvcc dies of the same signal, as
nvcc would have."""

from __future__ import annotations

import os
import signal

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum


class Interruptions:
    """While held, the signals raise :class:`Interrupted`; the handlers before are put back on
    leaving (those someone else set meanwhile stay)."""

    def __enter__(self) -> Interruptions:
        self.previous = {sig: signal.signal(sig, _interrupt) for sig in _SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            if signal.getsignal(sig) is _interrupt:
                signal.signal(sig, handler)

    def die_of(self, signum: int) -> int:
        """End the process of ``signum``, as it would have ended without fast_nvcc."""
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum  # pragma: no cover - the signal ends the process


def _interrupt(signum, frame) -> None:
    raise Interrupted(signum)
