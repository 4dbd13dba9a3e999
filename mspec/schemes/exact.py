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

import numpy as np

from mspec.schemes.selection import SelectionScheme

#: default cap on the number of draft tuples enumerated
MAX_TUPLES = 200_000


def output_distribution(scheme: SelectionScheme, *, max_tuples: int = MAX_TUPLES) -> tuple[np.ndarray, float]:
    """Exact law of the output token and exact acceptance of a built scheme.

    Args:
        scheme: a built :class:`~mspec.schemes.selection.SelectionScheme`.
        max_tuples: refuse to enumerate more draft tuples than this.

    Returns:
        ``(dist, acceptance)`` with ``dist`` of shape ``(V,)``.
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
    for tokens in itertools.product(*supports):
        weight = math.prod(row[x] for row, x in zip(rows, tokens))
        cond, accept = scheme.conditional(np.array(tokens))
        dist += weight * cond
        acceptance += weight * accept
    return dist, float(acceptance)
