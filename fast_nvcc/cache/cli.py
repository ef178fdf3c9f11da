"""``fast_nvcc cache stats|clear``: the step cache's size, hit rates per tool, and emptying it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from ..errors import FastNvccError
from .handlers import open_cache


def build_parser():
    """``fast_nvcc cache``'s options (docs/options.md names each: tests/test_options_doc.py)."""
    import argparse

    parser = argparse.ArgumentParser(prog="fast_nvcc cache", description="fast_nvcc's per-step compile cache")
    parser.add_argument("action", choices=("stats", "clear"))
    parser.add_argument("--json", action="store_true", help="stats as JSON")
    return parser


def main(argv: Sequence[str]) -> int:
    try:
        options = build_parser().parse_args(list(argv))
        cache = open_cache(os.environ)
    except FastNvccError as exc:
        print(f"fast_nvcc: error: {exc}", file=sys.stderr)
        return 2
    if options.action == "clear":
        cache.clear()
        print(f"cleared {cache.directory}")
        return 0
    stats = cache.stats()
    cache.close()
    if options.json:
        print(json.dumps(stats, indent=2))
        return 0
    print(f"cache directory  {stats['directory']}")
    print(f"entries          {stats['entries']}")
    print(f"size             {_human(stats['bytes'])} of {_human(stats['limit'])}")
    if stats["tools"]:
        print(f"\nsteps run with the step cache\n{'tool':12} {'hits':>8} {'misses':>8} {'hit rate':>9}")
        for tool, counts in stats["tools"].items():
            total = counts["hits"] + counts["misses"]
            rate = f"{100 * counts['hits'] / total:.0f}%" if total else "-"
            print(f"{tool:12} {counts['hits']:8d} {counts['misses']:8d} {rate:>9}")
    return 0


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{size} B"
        size /= 1024
    return f"{size:.1f} GiB"
