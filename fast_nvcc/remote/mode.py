"""Which remote launcher an invocation asks for: ``--remote``, else FAST_NVCC_REMOTE.

Apart from the launcher (:mod:`.sccache`) because every compile asks and most run every step
here: sccache's module, its staging and its statistics load only where one is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import FastNvccError

OFF = ("", "0", "none", "off", "local")


class RemoteError(FastNvccError):
    pass


def remote_mode(option: str | None, env: Mapping[str, str]) -> str | None:
    """``--remote`` wins over FAST_NVCC_REMOTE; None means everything runs here."""
    value = option if option is not None else env.get("FAST_NVCC_REMOTE", "")
    if value.lower() in OFF:
        return None
    if value.lower() == "sccache":
        return "sccache"
    source = "--remote" if option is not None else "FAST_NVCC_REMOTE"
    raise RemoteError(f"{source}={value!r}: the remote launcher can be 'sccache' or 'none'")
