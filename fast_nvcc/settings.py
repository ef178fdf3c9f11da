"""fast_nvcc's environment variables (docs/options.md, "Environment"): what each one accepts, read
in one place.  :func:`check` runs before a compile does anything, so that a value fast_nvcc
cannot read is one line, ``fast_nvcc: error: FAST_NVCC_YIELD='of': ...``, and exit code 2,
instead of silently meaning the default (``FAST_NVCC_JOBS=abc`` once compiled on every core).
The split options and ``FAST_NVCC_REMOTE`` check their own values where they are read
(plan/split_option.py, remote/sccache.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .errors import FastNvccError

ON = ("1", "on", "yes", "true")
OFF = ("0", "off", "no", "false")
# Each on/off variable and what it means unset (or set to "").
SWITCHES = {
    "FAST_NVCC_DISABLE": False,
    "FAST_NVCC_DEVICE_TRACE": False,
    "FAST_NVCC_CACHE": False,
    "FAST_NVCC_HISTORY": True,
    "FAST_NVCC_MEMORY": True,
    "FAST_NVCC_POOL": True,
    "FAST_NVCC_SPLIT_HOST": True,
    "FAST_NVCC_LEARNED_STUB": True,
    "FAST_NVCC_YIELD": True,
    "FAST_NVCC_NICE": True,
    "FAST_NVCC_SPLIT_EARLY": False,
    "FAST_NVCC_PTX_WEIGHT": False,
    "FAST_NVCC_LONGEST_FIRST": False,
    "FAST_NVCC_LEAN": True,
}
COUNTS = ("FAST_NVCC_JOBS", "FAST_NVCC_POOL_SIZE")  # unset: one for each usable CPU
# Each of these has a function of its own below.
OTHERS = ("FAST_NVCC_STUB_PROBE", "FAST_NVCC_KEEP_DAYS", "FAST_NVCC_CACHE_SIZE")
# A path or a program, read as given; and the variables checked where they are read.
AS_GIVEN = ("FAST_NVCC_LOG", "FAST_NVCC_NVCC", "FAST_NVCC_CACHE_DIR", "FAST_NVCC_POOL_DIR", "FAST_NVCC_SCCACHE")
CHECKED_WHERE_READ = ("FAST_NVCC_SPLIT", "FAST_NVCC_SPLIT_SOURCES", "FAST_NVCC_REMOTE")
KEEP_DAYS = 60.0  # FAST_NVCC_KEEP_DAYS unset: learned stubs and history rows unused this long go
STUB_PROBE = ("idle", *ON, *OFF)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", re.IGNORECASE)


class SettingError(FastNvccError):
    pass


def switch(env: Mapping[str, str], name: str) -> bool:
    """On or off; the default where ``name`` is unset or empty."""
    value = env.get(name, "").strip().lower()
    if not value:
        return SWITCHES[name]
    if value not in ON + OFF:
        raise SettingError(f"{name}={env[name]!r}: use 1 or 0")
    return value in ON


def count(env: Mapping[str, str], name: str) -> int | None:
    """A positive whole number, or None where ``name`` is unset or empty."""
    value = env.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise SettingError(f"{name}={env[name]!r}: use a whole number of 1 or more")
    return int(value)


def stub_probe(env: Mapping[str, str]) -> str:
    """FAST_NVCC_STUB_PROBE: "on" (the default), "off", or "idle" (a split compile's probe, too,
    runs on idle cores only)."""
    value = env.get("FAST_NVCC_STUB_PROBE", "").strip().lower()
    if value not in ("", *STUB_PROBE):
        raise SettingError(f"FAST_NVCC_STUB_PROBE={env['FAST_NVCC_STUB_PROBE']!r}: use 1, 0 or idle")
    return "off" if value in OFF else "idle" if value == "idle" else "on"


def keep_days(env: Mapping[str, str]) -> float:
    """FAST_NVCC_KEEP_DAYS: days a learned entry stays unused (0: for ever)."""
    value = env.get("FAST_NVCC_KEEP_DAYS", "").strip()
    if not value:
        return KEEP_DAYS
    try:
        days = float(value)
    except ValueError:
        days = -1.0
    if not days >= 0 or days == float("inf"):
        raise SettingError(f"FAST_NVCC_KEEP_DAYS={env['FAST_NVCC_KEEP_DAYS']!r}: use a number of days (0: keep"
                           " everything)")  # fmt: skip
    return days


def cache_size(env: Mapping[str, str]) -> int | None:
    """FAST_NVCC_CACHE_SIZE in bytes, or None where it is unset or empty."""
    value = env.get("FAST_NVCC_CACHE_SIZE", "").strip()
    return size(value, "FAST_NVCC_CACHE_SIZE") if value else None


def size(text: str, name: str) -> int:
    """Bytes, from ``500M``, ``5G``, ``2.5GiB``, ``1048576``."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise SettingError(f"{name}={text!r}: use a size such as 500M or 5G")
    number, unit = match.groups()
    return int(float(number) * 1024 ** "_KMGT".index(unit.upper() or "_"))


def check(env: Mapping[str, str]) -> None:
    """Raise SettingError for the first variable set to a value fast_nvcc cannot read, whether
    or not this compile reads it (a user who set it meant something by it)."""
    for name in SWITCHES:
        switch(env, name)
    for name in COUNTS:
        count(env, name)
    stub_probe(env)
    keep_days(env)
    cache_size(env)
