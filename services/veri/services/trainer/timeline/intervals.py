"""Interval arithmetic for the step timeline: overlapping intervals counted once, idle gaps, coverage.

An interval is (start, end) in seconds with end >= start; a window is the same shape. Nothing here knows
what the intervals are (model calls, trainer phases): `record` gives them their meaning.
"""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged where they overlap or touch, sorted: time covered by any of them, once."""
    merged: list[Interval] = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def clip(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    """The parts of the intervals inside the window (empty parts left out)."""
    low, high = window
    return [(max(s, low), min(e, high)) for s, e in intervals if min(e, high) > max(s, low)]


def covered(intervals: Iterable[Interval], window: Interval) -> float:
    """Seconds of the window during which at least one interval was open."""
    return sum(e - s for s, e in union(clip(intervals, window)))


def busy_fraction(intervals: Iterable[Interval], window: Interval) -> float:
    """`covered` over the window's length, in [0, 1] (0 for an empty window)."""
    length = window[1] - window[0]
    return min(1.0, covered(intervals, window) / length) if length > 0 else 0.0


def gaps(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    """The parts of the window no interval covers: the idle gaps."""
    idle: list[Interval] = []
    at = window[0]
    for start, end in union(clip(intervals, window)):
        if start > at:
            idle.append((at, start))
        at = max(at, end)
    if window[1] > at:
        idle.append((at, window[1]))
    return idle
