"""The best induced distribution ``x = p_I`` (fact 1 of :mod:`mspec.fast.optimal_selection`).

Notation (paper): K i.i.d. drafts from ``p`` (``draft``), target ``q`` (``target``),
``g(m) = 1 - (1 - m)^K`` and ``f(A) = g(p(A))`` = P(some draft lies in A).

**1. The best induced distribution (lexicographically optimal base).** Any selection rule
induces ``x = p_I`` with ``x(A) <= f(A)`` for every token set A and ``x(V) = 1``; the
canonical decomposition then accepts with probability ``sum_y min(q(y), x(y))``. Sort the
tokens by ``q/p`` descending and take the greatest convex minorant of the points
``(q(prefix), f(prefix))``; on each linear piece of slope ``s`` put ``x = s q``. The slopes
are the isotonic (non-decreasing) regression of the per-token slopes ``v_t / q_t``
(``v_t = f(prefix up to t) - f(prefix before t)``) with weights ``q_t`` -- computed by
PAVA in ``O(V)`` after an ``O(V log V)`` sort. Its acceptance equals the closed form
``min_S [q(S) + 1 - p(S)^K]`` of :mod:`mspec.schemes.closed_form`. (``v_t`` is taken as
``r^K (1 - (1 - p_t / r)^K)``, ``r`` = 1 - the prefix's mass, relatively exact: a difference
of ``f`` values keeps only ~1e-16 absolute. Where some ``q_t < 1e-290`` the slopes, which
would overflow, are those of ``q`` scaled by an exact power of two.)
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import isotonic_regression


def lex_optimal_induced(*, draft: np.ndarray, target: np.ndarray, num_drafts: int):
    """The lexicographically optimal induced distribution (fact 1, this module's docstring).

    Args:
        draft: ``(V,)`` validated draft distribution ``p``.
        target: ``(V,)`` validated target distribution ``q``.
        num_drafts: K.

    Returns:
        ``(order, x_sorted, block_starts, top)``: ``order`` are the tokens with ``p > 0`` and
        ``q > 0`` sorted by ``q/p`` descending; ``x_sorted[i]`` is ``x`` of ``order[i]``;
        pieces are ``order[block_starts[j]:block_starts[j + 1]]``; ``top[i]`` is the draft
        mass of ``order[:i]`` (length ``len(order) + 1``).
    """
    both = (draft > 0) & (target > 0)
    # descending q/p; ties may come in any order (the optimum is unique). The arrays are
    # V long: we reuse buffers (out=) where we can, since fresh large arrays cost page
    # faults that can exceed the arithmetic at V ~ 50k.
    with np.errstate(over="ignore"):  # (an infinite q/p, from a subnormal p, sorts first)
        if both.all():  # the usual case (softmax outputs): no gathering needed
            ratio = np.divide(target, draft)
            order = argsort_positive(ratio)[::-1]
        else:
            main = np.flatnonzero(both)
            ratio = np.divide(target[main], draft[main])
            order = main[argsort_positive(ratio)[::-1]]
        if order.size and target[order[0]] / draft[order[0]] == np.inf:
            # those tie at inf, but the pieces need them in q/p order too (a piece's x is
            # s q, which keeps x_t <= f(t) = K p_t only in that order). q > p * 1.8e308 >
            # 9e-16 there, so q 2^-60 stays normal (exact) and q 2^-60 / p finite.
            head = order[: int(np.count_nonzero(ratio == np.inf))]
            order[: head.size] = head[np.argsort(-(np.ldexp(target[head], -60) / draft[head]), kind="stable")]
        if order.size and target[order[-1]] / draft[order[-1]] < np.finfo(float).tiny:
            # likewise the q/p that underflow to subnormals (or 0), which keep few bits and
            # tie where they should not; q 2^600 / p is normal there (q/p < 2.3e-308)
            tail = order[order.size - int(np.count_nonzero(ratio < np.finfo(float).tiny)):]
            order[order.size - tail.size:] = tail[np.argsort(-(np.ldexp(target[tail], 600) / draft[tail]), kind="stable")]
    p_sorted = np.take(draft, order, out=ratio[: order.size])  # ratio is no longer needed
    x_sorted, blocks, top = lex_pieces(p_sorted, np.take(target, order), num_drafts)
    return order, x_sorted, blocks, top


def lex_pieces(masses: np.ndarray, targets: np.ndarray, num_drafts: int, start: float = 0.0):
    """PAVA for atoms already in ``q/p``-descending order whose keys start at ``start``.

    Args:
        masses: ``(n,)`` draft masses of the atoms (overwritten).
        targets: ``(n,)`` target masses of the atoms (overwritten: it becomes ``x``).
        num_drafts: K.
        start: draft mass of everything before the atoms (0 for the whole vocabulary).

    Returns:
        ``(x, blocks, top)``: the atoms' ``x`` (each block tight), block starts (with ``n``
        appended) and ``top`` (``(n + 1,)``, ``start`` plus the prefix masses).
    """
    n = masses.size
    top = np.empty(n + 1)
    top[0] = 0.0
    np.cumsum(masses, out=top[1:])
    # a float cumsum drifts (~1e-14 over 5e4 atoms): end it at the pairwise sum instead, so
    # that the last atoms' keys end where their masses do (with K = 1 the drift past key 1,
    # cut off from x but not from the key laws, was the error of the last token's law)
    total = float(masses.sum())
    if 0.0 < top[n] != total:  # (equal: nothing to do, always for a single atom)
        top[1:] *= total / top[n]
    if start:
        top += start
    np.minimum(top, 1.0, out=top)
    if n == 0:
        return targets, np.zeros(1, dtype=np.int64), top
    v = _key_masses(masses, top, num_drafts)  # what priority by q/p gives each atom
    weights = targets
    if targets.min() < 1e-290:  # (v <= 1: only then can a slope v_t / q_t overflow)
        # a tiny (subnormal) q_t: v_t / q_t may overflow. The isotonic regression of y with
        # weights w is that of y / c with weights c w, times c: scale q by a power of two
        # (exact) so that every slope is finite; the slopes that underflow instead are
        # below 1e-280 of the largest (x_t < 1e-280 there: rounding of x, not of its law)
        with np.errstate(divide="ignore"):  # (frexp of 0 is 0)
            shift = int(np.max(np.frexp(v)[1] - np.frexp(targets)[1])) - 1020
        weights = np.ldexp(targets, max(shift, 0))
    slopes = np.divide(v, weights, out=v)
    if n == 1:  # one atom, one block: x = v (to the rounding below, as for any block)
        return np.multiply(slopes, weights, out=targets), np.array([0, 1], dtype=np.int64), top
    iso = isotonic_regression(slopes, weights=weights, increasing=True)
    v = np.multiply(slopes, weights, out=slopes)  # v again (to rounding)
    x_sorted = np.multiply(iso.x, weights, out=targets)
    blocks = np.array(iso.blocks, dtype=np.int64)
    blocks[-1] = n  # (block starts, n appended)
    # each block is tight: its x sums to its atoms' v up to rounding; make it exact
    sums = np.add.reduceat(x_sorted, blocks[:-1])
    want = np.add.reduceat(v, blocks[:-1])
    scale = np.divide(want, sums, out=np.ones_like(sums), where=sums > 0)
    if blocks.size - 1 <= 8:  # few pieces: scale in place, piece by piece (no n-long temporary)
        for a, b, c in zip(blocks[:-1], blocks[1:], scale):
            x_sorted[a:b] *= c
    else:
        x_sorted *= np.repeat(scale, blocks[1:] - blocks[:-1])
    return x_sorted, blocks, top


#: up to this K, :func:`_key_masses` sums the K positive terms of the polynomial form
#: (3 array operations per term); above it, log1p/expm1 are cheaper
POLYNOMIAL_KEY_MASSES_UP_TO = 4


#: :func:`_key_masses` works on this many atoms at a time: four buffers of 64 KB stay in
#: cache and are reused, where V-long temporaries would cost a page fault per 4 KB
KEY_MASS_CHUNK = 8192


def _key_masses(masses: np.ndarray, top: np.ndarray, num_drafts: int) -> np.ndarray:
    """``v_t = nu([top_t, top_t + p_t])``, the ``nu``-mass of each atom's keys, relatively exact.

    With ``r = 1 - top_t`` and ``u = max(r - p_t, 0)`` (the key interval is cut at 1),
    ``v_t = r^K - u^K = (r - u) (r^(K-1) + r^(K-2) u + ... + u^(K-1))``: a sum of positive
    terms (no cancellation, unlike a difference of ``f = 1 - (1 - top)^K``, which keeps only
    ~1e-16 absolute: the slopes of small atoms were noise). For K above
    :data:`POLYNOMIAL_KEY_MASSES_UP_TO` the same value as ``r^K (1 - (1 - p_t / r)^K)``
    through log1p/expm1.

    Args:
        masses: ``(n,)`` draft masses (overwritten: it becomes ``v``).
        top: ``(n + 1,)`` key starts, clipped to 1.
        num_drafts: K.
    """
    buffers = np.empty((4, min(masses.size, KEY_MASS_CHUNK)))
    for a in range(0, masses.size, KEY_MASS_CHUNK):
        length = masses[a : a + KEY_MASS_CHUNK]  # (a view: v is written into masses)
        r, u, h, u_power = buffers[:, : length.size]
        np.subtract(1.0, top[a : a + length.size], out=r)
        if num_drafts > POLYNOMIAL_KEY_MASSES_UP_TO:
            _key_masses_log(length, r, u, num_drafts)
            continue
        np.minimum(length, r, out=length)  # p, or r where the keys end
        np.subtract(r, length, out=u)  # max(r - p, 0), exactly
        if num_drafts == 1:
            continue
        np.add(r, u, out=h)  # h = r^(K-1) + r^(K-2) u + ... + u^(K-1), by Horner in r
        for m in range(2, num_drafts):
            h *= r
            if m == 2:
                np.multiply(u, u, out=u_power)  # u^m
            else:
                u_power *= u
            h += u_power
        length *= h
    return masses


def _key_masses_log(masses: np.ndarray, r: np.ndarray, share: np.ndarray, num_drafts: int) -> None:
    """:func:`_key_masses` by ``r^K (1 - (1 - p_t / r)^K)`` through log1p/expm1, in place:
    ``masses`` becomes ``v``; ``r = 1 - top_t`` and ``share`` (a buffer) are overwritten."""
    length = np.minimum(masses, r, out=masses)
    with np.errstate(divide="ignore", invalid="ignore"):  # (r = 0 past the keys: v = 0)
        np.divide(length, r, out=share)  # in [0, 1]; NaN where r = 0
        share[~(share <= 1.0)] = 1.0
        np.negative(share, out=share)
        np.log1p(share, out=share)
        share *= num_drafts
        np.expm1(share, out=share)  # (1 - p / r)^K - 1, in [-1, 0]
    share *= power_by_squaring(r, num_drafts)
    np.negative(share, out=length)


#: :func:`argsort_positive` sorts fewer values than this with one stable sort (numpy's
#: stable sort, a timsort, is fast on short arrays and ~5x slower than its quicksort at V ~ 50k)
QUICKSORT_FROM = 1024


def argsort_positive(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` for positive floats, several times faster at V ~ 50k.

    numpy's default sort (a vectorised quicksort) orders the values but not the ties among
    equal values; each run of equal values is then put in index order (one sort of the
    keys ``run * n + index`` of the tied positions only), which is the stable order.
    """
    n = values.size
    if n < QUICKSORT_FROM:
        return np.argsort(values, kind="stable")
    order = np.argsort(values)
    ordered = values[order]
    tie = ordered[1:] == ordered[:-1]  # (positive floats: no NaN)
    if tie.any():
        starts, ends = np.concatenate(([True], ~tie)), np.concatenate((~tie, [True]))  # of the runs
        at = np.flatnonzero(~(starts & ends))  # the positions in runs of two or more
        keys = np.cumsum(starts)[at] * n + order[at]  # (run number, index)
        keys.sort()
        order[at] = keys % n
    return order


def power_by_squaring(base: np.ndarray, k: int) -> np.ndarray:
    """``base ** k`` for an integer ``k >= 1`` by squaring (much faster than pow); may
    overwrite ``base`` and return it."""
    if k == 1:
        return base
    if k & (k - 1) == 0:  # a power of two: square in place
        while k > 1:
            np.multiply(base, base, out=base)
            k >>= 1
        return base
    square, result = base, None
    while True:
        if k & 1:
            result = square.copy() if result is None else np.multiply(result, square, out=result)
        k >>= 1
        if not k:
            return result
        np.multiply(square, square, out=square)
