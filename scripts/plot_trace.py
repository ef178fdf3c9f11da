#!/usr/bin/env python3
"""Draw a fast_nvcc --trace (Chrome trace JSON) as a Gantt chart, one row per job slot.

    python scripts/plot_trace.py trace.json out.png [--title TEXT]

Needs matplotlib (pip install matplotlib).  Used for the pictures in README.md and docs/.
"""

from __future__ import annotations

import argparse
import json
import sys

COLORS = {
    "preprocess": "#9ecae1",
    "cudafe++": "#fdae6b",
    "cicc": "#e6550d",
    "ptxas": "#31a354",
    "fatbinary": "#756bb1",
    "host-compile": "#3182bd",
    "depfile": "#bdbdbd",
    "link": "#636363",
    "nvlink": "#636363",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("output")
    parser.add_argument("--title", default="")
    options = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = json.load(open(options.trace))["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and e["tid"] != 0]
    lanes = sorted({e["tid"] for e in spans})
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(lanes) + 1.6))
    for event in spans:
        row = lanes.index(event["tid"])
        start, width = event["ts"] / 1e6, event["dur"] / 1e6
        critical = event.get("args", {}).get("critical")
        ax.barh(row, width, left=start, color=COLORS.get(event.get("cat", ""), "#cccccc"),
                edgecolor="red" if critical else "black", linewidth=2 if critical else 0.5)  # fmt: skip
        if width > 0.6:
            label = event["name"].split(" ", 1)[1]
            ax.text(start + width / 2, row, label, ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(lanes)), [f"slot {t}" for t in lanes])
    ax.invert_yaxis()
    ax.set_xlabel("seconds (red outline: the critical path)")
    ax.set_title(options.title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, list(COLORS), loc="lower right", fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(options.output, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
