"""The timer of the speed benchmarks: seconds per call, several functions interleaved.

A speed goal is a ratio to a baseline measured in the same run (e.g. one single-draft step).
:func:`call_times` times the functions in alternating short chunks of calls, so that a drift
of the machine's speed (other processes, frequency scaling) falls evenly on all of them and
their ratios stay fair; :func:`median_time` is the one-function case.

>>> times = call_times({"sum": lambda: sum(range(100))}, repeats=20)
>>> len(times["sum"])
20
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["CHUNK", "DRAFTED_TUPLES", "call_times", "cycling", "median_time", "median_times"]

#: calls of one function in a row before the next function's turn: short enough to
#: interleave the functions many times in a run, long enough that the switch costs nothing
CHUNK = 10
#: drafted tuples a timed selection step cycles through (:func:`cycling`), so that its time
#: averages over steps that accept a draft and steps that build the residual
DRAFTED_TUPLES = 256


def call_times(functions: dict, *, repeats: int, chunk: int = CHUNK, warmup: int = 1) -> dict[str, list[float]]:
    """Seconds of each call of each function, timed in interleaved chunks.

    Args:
        functions: name -> function of no arguments.
        repeats: timed calls per function, rounded down to whole chunks (at least one chunk).
        chunk: calls of one function in a row.
        warmup: untimed calls of each function first (caches, lazy imports, allocations).

    Returns:
        name -> the seconds of each timed call, in call order.
    """
    for fn in functions.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in functions}
    for _ in range(max(1, repeats // chunk)):
        for name, fn in functions.items():
            for _ in range(chunk):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return times


def median_times(functions: dict, *, repeats: int, chunk: int = CHUNK, warmup: int = 1) -> dict[str, float]:
    """Median seconds per call of each function (:func:`call_times`)."""
    times = call_times(functions, repeats=repeats, chunk=chunk, warmup=warmup)
    return {name: float(np.median(t)) for name, t in times.items()}


def median_time(fn: Callable[[], object], *, repeats: int, warmup: int = 3) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` calls, after ``warmup`` calls."""
    return median_times({"fn": fn}, repeats=repeats, chunk=max(1, repeats), warmup=warmup)["fn"]


def cycling(step: Callable, items: Sequence) -> Callable[[], object]:
    """A function of no arguments that calls ``step`` on the next of ``items`` each time,
    starting over after the last (e.g. a selection step on a new drafted tuple each call)."""
    upcoming = itertools.cycle(items)
    return lambda: step(next(upcoming))
