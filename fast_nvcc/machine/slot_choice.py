"""Which slots a compile asks for its steps: make's jobserver where MAKEFLAGS names a usable one
(:mod:`.jobserver`), else the machine-wide pool (:class:`.slots.PoolSlots`, unless
FAST_NVCC_POOL=0), else none shared (:class:`.slots.Slots`)."""

from __future__ import annotations

from collections.abc import Mapping

from ..settings import count, switch
from .jobserver import jobserver_from_makeflags
from .pool_place import pool_directory
from .slots import PoolSlots, Slots


def slots_from_environment(env: Mapping[str, str], *, pool_size: int) -> Slots:
    """The jobserver of MAKEFLAGS if there is a usable one, else the machine-wide pool."""
    jobserver = jobserver_from_makeflags(env.get("MAKEFLAGS", ""))
    if jobserver is not None:
        return jobserver
    if not switch(env, "FAST_NVCC_POOL"):
        return Slots()
    size = count(env, "FAST_NVCC_POOL_SIZE")
    try:
        return PoolSlots(pool_directory(env), size or pool_size, poles=switch(env, "FAST_NVCC_SPLIT_EARLY"))
    except OSError as exc:
        unshared = Slots()
        unshared.description = f"no shared slots (pool directory unusable: {exc.strerror or exc})"
        return unshared
