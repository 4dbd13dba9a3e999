"""Exact output distributions by enumerating every tuple of drafted tokens.

For a scheme with drafts ``X_i ~ p_i`` (independent) the law of the output is::

    P(Y = y) = sum_{x_1..x_K} prod_i p_i(x_i) P(Y = y | x_1..x_K)

and ``P(accept)`` is the same sum over ``P(accept | x_1..x_K)``. A scheme is lossless iff
the first sum equals the target ``q`` -- this is how the tests prove it, to 1e-12, on
small vocabularies.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings

import numpy as np

from mspec.schemes.selection import SLOW_SECONDS, SelectionScheme, SlowSchemeWarning

#: default cap on the number of draft tuples enumerated
MAX_TUPLES = 200_000
#: tuples timed before the rest are projected (and a slow enumeration warned about)
PROJECTED_AFTER = 20


def output_distribution(scheme: SelectionScheme, *, max_tuples: int = MAX_TUPLES) -> tuple[np.ndarray, float]:
    """Exact law of the output token and exact acceptance of a built scheme.

    Args:
        scheme: a built :class:`~mspec.schemes.selection.SelectionScheme`.
        max_tuples: refuse to enumerate more draft tuples than this.

    Returns:
        ``(dist, acceptance)`` with ``dist`` of shape ``(V,)``.

    Warns:
        SlowSchemeWarning: the first tuples, timed, project more than
        :data:`~mspec.schemes.selection.SLOW_SECONDS` for all of them (the estimate and a
        faster way are in the message).
    """
    rows = [scheme.draft_row(i) for i in range(scheme.num_drafts)]
    supports = [np.flatnonzero(row > 0) for row in rows]
    count = math.prod(len(s) for s in supports)
    if count > max_tuples:
        raise ValueError(
            f"enumerating {count} draft tuples exceeds max_tuples={max_tuples}; use a smaller "
            "vocabulary or fewer drafts, or raise max_tuples"
        )
    dist = np.zeros(scheme.vocab_size)
    acceptance = 0.0
    start = time.perf_counter()
    for n, tokens in enumerate(itertools.product(*supports)):
        if n == PROJECTED_AFTER:
            _warn_if_slow(scheme, count, (time.perf_counter() - start) / n)
        weight = math.prod(row[x] for row, x in zip(rows, tokens))
        cond, accept = scheme.conditional(np.array(tokens))
        dist += weight * cond
        acceptance += weight * accept
    return dist, float(acceptance)


def _warn_if_slow(scheme: SelectionScheme, count: int, seconds_per_tuple: float) -> None:
    seconds = count * seconds_per_tuple
    if seconds > SLOW_SECONDS:
        warnings.warn(f"enumerating {count:,} draft tuples of scheme {scheme.name!r} takes about {seconds:.2g} s "
                      "(projected from the first ones); scheme.acceptance() gives the acceptance alone, and "
                      "sampling (scheme.sample) the law approximately", SlowSchemeWarning, stacklevel=3)
