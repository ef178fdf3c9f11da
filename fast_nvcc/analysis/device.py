"""The model's device side: where cicc's and ptxas's time went across the build (--device-trace).

Sums the per-tool costs that ``load.py`` attached to each compile: templates by total
instantiation time (time, instantiations, compiles), headers by total time (a header costs each
compile that includes it), the functions that cost the most to optimise and to generate code
for per architecture, and each compile's front-end / optimiser / code-generation split.  And the
template what-if on the bound of ``bound.py``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from .bound import wall_bound
from .records import (
    Build,
    CompileSplit,
    DeviceCosts,
    FunctionCost,
    HeaderCost,
    Job,
    TemplateCost,
    TemplateWhatIf,
)

DEVICE_TOOLS = frozenset({"cicc", "ptxas"})


def side_of(tool: str) -> str:
    """'device' for cicc and ptxas, 'host' for the host compiler's own trace (clang)."""
    return "device" if tool in DEVICE_TOOLS else "host"


def sum_device_costs(build: Build, *, slots: int, what_if: Sequence[str] = ()) -> DeviceCosts | None:
    """None when no compile of the build carries --device-trace costs."""
    jobs = [job for job in build.jobs if job.record is not None and job.record.device]
    if not jobs:
        return None
    templates: dict[tuple[str, str], list] = {}
    headers: dict[tuple[str, str], list] = {}
    functions: dict[tuple[str, str, str | None, str], float] = {}
    splits = []
    for job in jobs:
        assert job.record is not None
        seen_templates: set[tuple[str, str]] = set()
        seen_headers: set[tuple[str, str]] = set()
        for tool in job.record.device:
            side = side_of(tool.tool)
            for name, seconds, count in tool.templates:
                entry = templates.setdefault((side, name), [0.0, 0, 0])
                entry[0] += seconds
                entry[1] += count
                if (side, name) not in seen_templates:
                    entry[2] += 1
                    seen_templates.add((side, name))
            for name, seconds in tool.headers:
                entry = headers.setdefault((side, name), [0.0, 0])
                entry[0] += seconds
                if (side, name) not in seen_headers:
                    entry[1] += 1
                    seen_headers.add((side, name))
            for phase, table in (("optimize", tool.optimize), ("codegen", tool.codegen)):
                for name, seconds in table:
                    key = (phase, tool.tool, tool.arch, name)
                    functions[key] = functions.get(key, 0.0) + seconds
        splits += _splits_of(job)
    return DeviceCosts(
        compiles=len(jobs),
        templates=tuple(sorted((TemplateCost(*key, s, c, k) for key, (s, c, k) in templates.items()),
                               key=lambda t: (-t.seconds, t.side, t.name))),
        headers=tuple(sorted((HeaderCost(*key, s, k) for key, (s, k) in headers.items()),
                             key=lambda h: (-h.seconds, h.side, h.name))),
        functions=tuple(sorted((FunctionCost(*key, s) for key, s in functions.items()),
                               key=lambda f: (-f.seconds, f.name))),
        splits=tuple(splits),
        what_if=tuple(template_what_if(build, p, slots=slots) for p in what_if),
    )  # fmt: skip


def _splits_of(job: Job) -> list[CompileSplit]:
    assert job.record is not None
    by_arch: dict[str | None, dict[str, float]] = {}
    order: list[str | None] = []
    for tool in job.record.device:
        # ptxas's sm_80 belongs with cicc's compute_80.
        arch = tool.arch.replace("sm_", "compute_") if tool.arch else side_of(tool.tool)
        if arch not in by_arch:
            by_arch[arch] = {}
            order.append(arch)
        for phase, seconds in tool.phases:
            by_arch[arch][phase] = by_arch[arch].get(phase, 0.0) + seconds
    return [
        CompileSplit(job.name, arch, *(by_arch[arch].get(p, 0.0) for p in ("front_end", "optimizer", "codegen", "ptxas")))
        for arch in order
    ]


def template_what_if(build: Build, pattern: str, *, slots: int) -> TemplateWhatIf:
    """The bound were the instantiations of the templates matching ``pattern`` (a glob on the
    template's name) gone from the build: each compile loses, per architecture, the time its
    cicc spent instantiating them, and a compile's architectures run side by side, so the job
    shortens by the largest of those (its cicc is taken to be on the compile's critical path,
    which makes B a floor)."""
    durations = []
    matched: set[str] = set()
    removed = 0.0
    touched = 0
    for job in build.jobs:
        seconds = job.seconds
        if job.record is not None and job.record.device:
            per_tool = []
            for tool in job.record.device:
                if side_of(tool.tool) != "device":
                    continue  # the template what-if is about cicc's work (NVRTC, its own TU)
                cost = 0.0
                for name, spent, _ in tool.templates:
                    if fnmatch.fnmatchcase(name, pattern):
                        matched.add(name)
                        cost += spent
                per_tool.append(cost)
            removed += sum(per_tool)
            cut = min(max(per_tool, default=0.0), seconds)
            if cut > 0:
                touched += 1
            seconds -= cut
        durations.append(seconds)
    return TemplateWhatIf(pattern, tuple(sorted(matched)), removed, touched, sum(durations),
                          wall_bound(durations, slots=slots))  # fmt: skip
