"""What memory a new step may use: the limit (the machine's and every memory cgroup this
process sits in) and what is free under it, read from /proc and the cgroups' files.  The budget
(:mod:`.memory`) reads it at most every ``MemoryBudget.SAMPLE_EVERY``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

MIB = 1 << 20
# v1's "no limit" is the largest page-aligned long; anything this high is no limit.
UNLIMITED = 1 << 60


class Cgroup(NamedTuple):
    """One memory cgroup directory this process sits in (or under)."""

    version: int  # 1 or 2
    path: str


class Level(NamedTuple):
    """One cgroup's limit and usage, in bytes (usage without reclaimable page cache)."""

    path: str
    limit: int
    used: int
    oom_kills: int


class Headroom(NamedTuple):
    """What a new step may use: ``free`` bytes now, under a ``limit`` (both the smallest of the
    machine's and every limited cgroup's), ``where`` says which one binds."""

    limit: int
    free: int
    where: str


# -- the limit ---------------------------------------------------------------------------------


def find_cgroups(proc_cgroup: str, mountinfo: str) -> list[Cgroup]:
    """The memory cgroups of a process, its own first, then each parent up to the mount's root:
    from the text of ``/proc/<pid>/cgroup`` and ``/proc/<pid>/mountinfo``.  A v1 memory
    hierarchy wins over v2 (a hybrid machine's v2 mount then holds no memory controller)."""
    v1 = v2 = None
    for line in proc_cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            v1 = path
        elif number == "0" and controllers == "":
            v2 = path
    mounts = _cgroup_mounts(mountinfo)
    for version, path in ((1, v1), (2, v2)):
        if path is None:
            continue
        for root, mountpoint, mount_version, options in mounts:
            if mount_version != version or (version == 1 and "memory" not in options):
                continue
            # Inside a container without a cgroup namespace the mount's root is the container's
            # cgroup (/docker/<id>) and /proc says the same path: strip it.
            if not (path == root or path.startswith(root.rstrip("/") + "/")):
                continue
            relative = path[len(root.rstrip("/")) :].strip("/")
            found = []
            while True:
                directory = os.path.join(mountpoint, relative) if relative else mountpoint
                found.append(Cgroup(version, directory))
                if not relative:
                    return found
                relative = os.path.dirname(relative)
    return []


def _cgroup_mounts(mountinfo: str) -> list[tuple[str, str, int, set[str]]]:
    mounts = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if not after or after[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(after[2].split(",")) if len(after) > 2 else set()
        mounts.append((_unescape(fields[3]), _unescape(fields[4]), 2 if after[0] == "cgroup2" else 1, options))
    return mounts


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def this_process_cgroups() -> list[Cgroup]:
    try:
        with open("/proc/self/cgroup") as a, open("/proc/self/mountinfo") as b:
            return find_cgroups(a.read(), b.read())
    except OSError:
        return []


def read_level(cgroup: Cgroup) -> Level | None:
    """A cgroup's limit and usage; None where its files cannot be read (not mounted here).

    The usage leaves out the page cache of files, active and inactive: the kernel reclaims it
    before it kills anything, and a build's is large and *active* (every compile reads the same
    headers; a file read twice in a v1 cgroup here showed 1.5 GB of total_active_file and
    nothing inactive).  Counting active pages as used starved a build in a cgroup of memory it
    had (docs/benchmarks.md).  Shared memory and tmpfs are on the anonymous lists, so they
    still count."""
    try:
        if cgroup.version == 1:
            limit = int(_read(cgroup.path, "memory.limit_in_bytes"))
            used = int(_read(cgroup.path, "memory.usage_in_bytes"))
            stat = _fields(_read(cgroup.path, "memory.stat"))
            cache = (stat.get("total_inactive_file", stat.get("inactive_file", 0))
                     + stat.get("total_active_file", stat.get("active_file", 0)))
            kills = _fields(_read(cgroup.path, "memory.oom_control")).get("oom_kill", 0)
        else:
            text = _read(cgroup.path, "memory.max").strip()
            limit = UNLIMITED if text == "max" else int(text)
            used = int(_read(cgroup.path, "memory.current"))
            stat = _fields(_read(cgroup.path, "memory.stat"))
            cache = stat.get("inactive_file", 0) + stat.get("active_file", 0)
            kills = _fields(_read(cgroup.path, "memory.events")).get("oom_kill", 0)
    except (OSError, ValueError):
        return None
    return Level(cgroup.path, limit, max(0, used - cache), kills)


def read_machine() -> tuple[int, int]:
    """The machine's (total, available) memory in bytes, from /proc/meminfo."""
    fields = _fields(_read("/proc", "meminfo"))
    return fields.get("MemTotal", 0) * 1024, fields.get("MemAvailable", fields.get("MemFree", 0)) * 1024


def measure_headroom(levels: Iterable[Level], machine: tuple[int, int]) -> Headroom:
    total, available = machine
    headroom = Headroom(total, available, "machine")
    for level in levels:
        if level.limit >= UNLIMITED or level.limit >= total:
            continue
        free = max(0, level.limit - level.used)
        if free < headroom.free or level.limit < headroom.limit:
            headroom = Headroom(min(level.limit, headroom.limit), min(free, headroom.free), level.path)
    return headroom


def read_headroom(cgroups: Sequence[Cgroup]) -> Headroom:
    levels = [level for level in map(read_level, cgroups) if level is not None]
    return measure_headroom(levels, read_machine())


def _read(directory: str, name: str) -> str:
    with open(os.path.join(directory, name)) as handle:
        return handle.read()


def _fields(text: str) -> dict[str, int]:
    """``key value`` lines (memory.stat, memory.events, oom_control; /proc/meminfo's ``Key:``)."""
    fields = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            fields[parts[0].rstrip(":")] = int(parts[1])
    return fields
