"""--summary: where the compile's time went, in a few lines on stderr."""

from __future__ import annotations

from .run_report import RunReport, StepReport


def format_summary(report: RunReport, *, what: str = "") -> str:
    ran = [s for s in report.steps if s.state in ("done", "failed") and s.action != "check-module-id"]
    longest = sorted(ran, key=lambda s: s.seconds, reverse=True)[:3]
    head = f"fast_nvcc: {what} (exit {report.exit_code})" if what else f"fast_nvcc: exit {report.exit_code}"
    lines = [
        head,
        f"  wall {report.wall_seconds:.2f} s | steps {report.serial_seconds:.2f} s"
        f" | critical path {report.critical_path_seconds:.2f} s"
        f" | parallelism {report.parallelism:.1f} of {report.jobs} jobs",
        "  longest: " + "; ".join(f"{s.label} {s.seconds:.2f} s" for s in longest),
    ]
    if report.slot_steps:
        lines.append(
            f"  waited for slots: {report.first_step_wait_seconds:.2f} s before the first step,"
            f" {report.slot_wait_seconds:.2f} s in all ({sum(s.waited > 0.05 for s in report.slot_steps)}"
            f" of {len(report.slot_steps)} commands waited)"
        )
    held = [s for s in report.slot_steps if s.memory_waited > 0]
    if held:
        lines.append(f"  waited for memory: {report.memory_wait_seconds:.2f} s in all ({len(held)} commands held back"
                     " by the memory budget)")  # fmt: skip
    stopped = [s for s in report.steps if s.memory_stopped > 0]
    if stopped:
        lines.append(f"  stopped while memory ran short: {report.memory_stopped_seconds:.2f} s in all"
                     f" ({len(stopped)} commands)")  # fmt: skip
    reruns = [s.label for s in report.steps if s.oom_rerun]
    if reruns:
        lines.append("  killed for memory, run again: " + ", ".join(reruns))
    counts = report.cache_counts()
    if counts:
        hits = sum(h for h, _ in counts.values())
        misses = sum(m for _, m in counts.values())
        detail = ", ".join(f"{tool} {h}/{h + m}" for tool, (h, m) in counts.items())
        lines.append(f"  cache: {hits} hits, {misses} misses ({detail} hit)")
    remote = report.remote_counts()
    if remote:
        sent = [s for s in report.steps if s.remote is not None]
        waited = max(s.waited for s in sent)
        detail = ", ".join(f"{what} {n}" for what, n in sorted(remote.items()))
        lines.append(f"  sccache: {len(sent)} steps ({detail}); longest wait to start {waited:.2f} s")
    split = [s for s in report.steps if s.cores]
    if split:
        lines.append("  split steps: " + ", ".join(
            f"{s.label} {s.seconds:.2f} s on up to {s.cores} core{'s' if s.cores != 1 else ''}"
            + (f" ({s.cpu_seconds:.2f} s cpu)" if s.cpu_seconds is not None else "") for s in split))  # fmt: skip
    failed = report.failed_guesses()
    if failed:
        lost = sum(s.guess_lost for s in failed)
        twice = [f"{_guess_what(s)} ran twice {s.guess_lost:.2f} s ({s.guess_failed})" for s in failed if s.guess_lost]
        before = [s for s in failed if not s.guess_lost]
        if before:
            twice.append(", ".join(_guess_what(s) for s in before) + f" ran as printed from the start ({before[0].guess_failed})")
        lines.append(f"  failed guesses: {lost:.2f} s of work thrown away: " + "; ".join(twice))
    return "\n".join(lines) + "\n"


def _guess_what(step: StepReport) -> str:
    """What a failed guess was made for."""
    if step.action == "host-back":
        return "host compile"
    return f"cicc {step.arch}" if step.arch else "cicc"
