"""Output as a picture: ``--plot``, the jobs running over time (matplotlib, optional)."""

from __future__ import annotations

from collections.abc import Sequence

from .output import extension, write_atomically
from .records import Analysis, AnalysisError, Job

PLOT_FORMATS = ("png", "svg", "pdf")


def check_plot_path(path: str) -> None:
    """Fail before the analysis when --plot cannot be drawn."""
    ext = extension(path)
    if ext not in PLOT_FORMATS:
        raise AnalysisError(f"--plot {path}: use {', '.join('.' + f for f in PLOT_FORMATS)}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise AnalysisError("--plot needs matplotlib (pip install 'fast_nvcc[plot]')") from None


def concurrency_steps(jobs: Sequence[Job]) -> tuple[list[float], list[int]]:
    """The exact concurrency curve: each instant a job starts or ends, and how many run after it."""
    events = sorted([(job.start, 1) for job in jobs] + [(job.end, -1) for job in jobs])
    times: list[float] = []
    counts: list[int] = []
    running = 0
    for time, delta in events:
        running += delta
        if times and times[-1] == time:
            counts[-1] = running
        else:
            times.append(time)
            counts.append(running)
    return times, counts


def write_plot(analysis: Analysis, path: str) -> None:
    # A Figure without pyplot draws with Agg (or the SVG/PDF backends) and touches no global
    # backend setting.
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    times, counts = concurrency_steps(analysis.build.jobs)
    figure = Figure(figsize=(10, 4), layout="constrained")
    axes = figure.add_subplot()
    axes.fill_between(times, counts, step="post", alpha=0.35, linewidth=0)
    axes.step(times, counts, where="post", linewidth=0.8, label="jobs running")
    label = f"-j {analysis.slots}" if analysis.slots_given else f"most at once ({analysis.slots})"
    axes.axhline(analysis.slots, color="tab:red", linestyle="--", linewidth=1, label=label)
    axes.set_xlim(0, max(analysis.wall, 1e-3))
    axes.set_ylim(0, max(analysis.slots, analysis.max_concurrency) * 1.1 + 0.5)
    axes.set_xlabel("seconds since the first job started")
    axes.set_ylabel("jobs running")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_title(
        f"{len(analysis.build.jobs)} jobs, wall {analysis.wall:.1f} s, "
        f"sum {analysis.job_seconds:.1f} s, parallelism {analysis.parallelism:.1f}"
    )
    axes.legend(loc="upper right")
    write_atomically(path, lambda tmp: figure.savefig(tmp, format=extension(path)))


def write_template_plot(analysis: Analysis, path: str) -> None:
    """The costliest templates as stacked bars, flame-style: one row per template, widest at
    the bottom, each bar split by the compiles' share (the width is the build's total time)."""
    from matplotlib.figure import Figure

    device = analysis.device
    if device is None:
        raise AnalysisError("--template-plot needs compiles run with --device-trace and their FAST_NVCC_LOG")
    rows = list(device.templates[: analysis.top])
    figure = Figure(figsize=(10, 0.35 * max(len(rows), 3) + 1.2), layout="constrained")
    axes = figure.add_subplot()
    for row, template in enumerate(rows):
        color = "tab:orange" if template.side == "device" else "tab:blue"
        axes.barh(row, template.seconds, height=0.9, color=color, edgecolor="white", linewidth=0.5)
        axes.text(0.002 * (rows[0].seconds or 1), row,
                  f" {template.name} [{template.side}]  ({template.seconds:.2f} s, {template.instantiations}x, "
                  f"{template.compiles} compiles)", va="center", fontsize=8)  # fmt: skip
    axes.set_yticks([])
    axes.set_ylim(-0.5, max(len(rows), 1) - 0.5)
    axes.set_xlabel("seconds of instantiation, summed over the build")
    axes.set_title(f"top {len(rows)} templates over {device.compiles} compiles (--device-trace; orange: cicc, blue: host)")
    write_atomically(path, lambda tmp: figure.savefig(tmp, format=extension(path)))
