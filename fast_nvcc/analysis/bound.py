"""The bound of docs/analyze.md: how soon jobs of given durations could finish on a number of
slots.  Both the model (the build's own bound, the what-if) and the device side (the template
what-if) measure against it."""

from __future__ import annotations

from collections.abc import Sequence

from .records import Bound


def wall_bound(durations: Sequence[float], *, slots: int) -> Bound:
    """Independent jobs of these durations on ``slots`` slots: no schedule finishes before
    ``lower``, and list scheduling (start any waiting job when a slot frees) finishes by
    ``upper`` (Graham 1966).  Dependencies only raise the floor, which stays a floor."""
    if not durations:
        return Bound(0.0, 0.0)
    total, longest = sum(durations), max(durations)
    return Bound(max(longest, total / slots), (total - longest) / slots + longest)
