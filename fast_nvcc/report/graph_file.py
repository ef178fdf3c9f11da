"""--graph: the run's DAG as Graphviz source, or rendered (svg, png, pdf)."""

from __future__ import annotations

import os

from ..files import write_atomically
from .run_report import ReportError, RunReport, write_text


RENDERED_FORMATS = ("svg", "png", "pdf")


def check_graph_path(path: str) -> None:
    """Fail before compiling when --graph asks for a rendering nobody can make."""
    ext = _extension(path)
    if ext == "dot" or ext == "gv":
        return
    if ext not in RENDERED_FORMATS:
        raise ReportError(f"--graph {path}: use .dot, .gv, {', '.join('.' + f for f in RENDERED_FORMATS)}")
    import shutil

    if shutil.which("dot") is None:
        raise ReportError(
            f"--graph {path} needs Graphviz's 'dot' program (e.g. apt install graphviz); "
            "a .dot file needs nothing"
        )


def graph_source(report: RunReport, *, title: str = "") -> str:
    import graphviz

    dot = graphviz.Digraph("fast_nvcc", graph_attr={"rankdir": "LR", "label": title, "labelloc": "t"})
    dot.attr("node", shape="box", style="rounded,filled", fillcolor="white", fontname="Helvetica")
    for step in report.steps:
        label = step.label
        if step.state in ("done", "failed"):
            label += f"\n{step.seconds:.2f} s"
        attrs = {"label": label}
        if step.critical:
            attrs.update(color="red", penwidth="2.5", fillcolor="#ffe6e6")
        if step.state == "failed":
            attrs.update(fillcolor="#ff9999")
        elif step.state in ("skipped", "killed"):
            attrs.update(style="rounded,dashed", fontcolor="gray40")
        dot.node(str(step.task), **attrs)
    for task, label in report.dropped:  # an edge to it would otherwise draw a bare task number
        dot.node(str(task), label=f"{label}\nnot started", style="rounded,dotted", fontcolor="gray40")
    critical = {s.task for s in report.steps if s.critical}
    for step in report.steps:
        for pred in step.preds:
            on_path = pred in critical and step.task in critical
            dot.edge(str(pred), str(step.task), **({"color": "red", "penwidth": "2.5"} if on_path else {}))
    return dot.source


def write_graph(report: RunReport, path: str, *, title: str = "") -> None:
    source = graph_source(report, title=title)
    ext = _extension(path)
    if ext in ("dot", "gv"):
        write_text(path, source)
        return
    import graphviz

    data = graphviz.Source(source).pipe(format=ext)
    write_atomically(path, data)


def _extension(path: str) -> str:
    return os.path.splitext(path)[1].lstrip(".").lower()
