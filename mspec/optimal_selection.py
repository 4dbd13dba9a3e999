"""Exactly optimal multi-draft selection at the full vocabulary (identical drafts, any K).

Beyond the paper: its practical IS scheme truncates the optimal LP (``s`` tokens, an
alphabet of ~40) because the LP has ``V^K`` variables. Here is an exact optimum at any
``V`` and ``K``, built from three facts (proofs in the book, chapter 6, section
"Optimal at vocabulary scale"; the tests check each numerically).

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
``min_S [q(S) + 1 - p(S)^K]`` of :mod:`mspec.closed_form`. (``v_t`` is taken as
``r^K (1 - (1 - p_t / r)^K)``, ``r`` = 1 - the prefix's mass, relatively exact: a difference
of ``f`` values keeps only ~1e-16 absolute. Where some ``q_t < 1e-290`` the slopes, which
would overflow, are those of ``q`` scaled by an exact power of two.)

**2. Selection by random keys.** Give each draft a random *key* in ``[0, 1]`` and select
the draft with the smallest key. If the key of a draft of token ``t`` is uniform on a set
``M_t`` of length ``p_t``, and the sets ``M_t`` tile ``[0, 1]``, every key is uniform on
``[0, 1]`` and token ``t`` is selected with probability

    x(t) = integral over M_t of  K (1 - y)^(K-1) dy  =  nu(M_t),

the ``nu``-measure of ``M_t`` (``nu`` has distribution function ``g``). So realising
``x`` is a tiling problem: find sets ``M_t`` with length ``p_t`` and ``nu``-mass ``x_t``.

**3. The tiling, piece by piece, greedily.** Pieces of the minorant are tight
(``x(prefix) = f(prefix)`` at their ends), so piece ``j`` gets its own interval
``[u_j, u_j + P_j]`` of key space (earlier pieces first). Inside a piece, take the tokens
in order of ``x_t / p_t`` descending; each takes the interval of length ``p_t`` of the
still-free part of the piece, *measured with the used parts squeezed out*, whose
``nu``-mass is exactly ``x_t``. This greedy never gets stuck (book: the free part keeps
majorising what is left). In practice each new token wraps as a shell around the block
of the tokens before it (a *window* ``[S, S + c]`` that grows on both sides); when a
token's share is too small for that, it opens a new block further down, leaving a gap
that later shells fill from below. So the free space is a stack of gaps above the
active block plus everything below it, each token is one scalar root solve, and long
runs of shells are solved together, vectorised.

**4. Faster: slots and a pool (the default, ``tiling="pool"``).** Keys need not come from
sets: if a draft of token ``t`` draws its key with density ``w_t(y) / p_t`` and the shares
``w_t(y)`` add up to 1 at every key, keys are still uniform and P(select t) is the
``nu``-integral of ``w_t``. In a piece of mean density ``g``, tokens denser than ``g`` own
*front slots* in ``x/p`` order from the top, sparser ones *back slots* from the bottom,
and each puts the rest of its length into one shared *pool* between them. The slot edges
solve ``H(C) - g C = sum (x - g p)`` over the tokens so far (prefix sums, one vectorised
root solve), which makes the pool's mean density exactly ``g`` and every token's
``nu``-mass exactly ``x_t`` (``_PoolPiece``). A token that would need a slot longer
than itself shares one with the tokens before it (a group, spread evenly; a run of such
tokens makes one group at once). Next to a nearly tight prefix or suffix the members
instead fill the group's slot by water-filling and *tile* it: the slot is then tight, a
piece of its own, realised again by slots and a pool (the greedy of fact 3 only where
that fails); if no group works, the piece falls back to the greedy. Pieces of up to 4096
atoms solve all their edges in one vectorised Newton iteration; larger ones only the
edges that a chord bound cannot clear.

Sampling needs only the drafted tokens' key laws, so pieces are built lazily, only those
the drafts reach.

**5. No sort: ratio buckets as atoms (the default from V = 4096 on, ``atoms="buckets"``).**
Facts 1-4 work for any *atoms* (sets of tokens that share one key law, scaled by ``p_t``,
so ``x_t = p_t x_a / P_a``). Bucket the tokens by the exponent and first 6 mantissa bits of
``q/p`` (one pass, no sort; ratios in a bucket lie in ``[r_lo, r_hi)``, within a factor
``1 + 2^-6``), and solve the bucket problem (each bucket one atom, target stand-in
``P_b`` times its middle ratio). Any such rule is lossless (keys stay uniform). It is
*optimal* when a certificate holds: buckets with level ``x_a / P_a <= r_lo`` (``x <= q`` on
all their tokens) come first and end at a piece boundary (tight), and all later buckets
have level ``>= r_hi`` (``x >= q``): then ``sum min(q, x) = f(T) + q(rest) >= P*``. The
pieces from the first bucket that is not "under" to the last that is not "over" are split
into tokens, sorted, and solved exactly as one segment of key space (tight at both ends),
which makes the certificate hold by construction. A large segment is bucketed again with
6 more bits per level (the same argument inside the segment) while that certifies some of
it; the rest is sorted. An optimum of 1 (``x = q`` on one huge piece) would end in a full sort; fact 6 avoids it.
The ``x`` is a different optimal one from fact 1's; ``atoms="tokens"`` gives that one.

**6. An optimum of 1 without a sort: tokens spread inside their bucket.** When ``x = q``
is feasible (certified from the buckets alone: every prefix in ``q/p`` order has
``q(C) <= f(C)``, checked at the bucket ends and at the worst point inside each bucket
that its ratio range allows), the whole vocabulary is one piece of mean density ``g = 1``.
Build its slots and pool with the *buckets* as units (fact 4, ``x_a = Q_a``). Inside
bucket ``a`` token ``t`` takes the fraction ``l_t / own_a`` of the bucket's own (slot)
part and the rest of its length, ``p_t - l_t``, in the pool, with
``l_t = p_t (b_t - g) / (d_a - g)``, ``b_t = q_t / p_t`` and ``d_a`` the mean density of the
bucket's own part. Then ``sum_t l_t = own_a`` and token ``t``'s ``nu``-mass is
``l_t d_a + (p_t - l_t) g = p_t b_t = q_t``. It needs ``0 <= l_t <= p_t``: every bucket lies
on one side of ``g = 1`` (a power of two is a bucket edge), and ``b_t <= d_a`` (front) or
``b_t >= d_a`` (back), checked with the bucket's ratio range. A bucket that owns (nearly) all
its length fails it; such buckets sit in tiled groups next to a nearly tight suffix or
prefix, whose slots are then water-filled and tiled by the buckets' *tokens* in place
(the group keeps its length and ``nu``-mass, so nothing else changes). A failing bucket
elsewhere is expanded into token units and the slots are built again; if that needs too
many tokens, fact 5. Fact 6 is tried first when the bucket sums allow an optimum of 1,
with 4-bit buckets (merged from the 6-bit ones: fewer units), then with the 6-bit ones.

**Certified, with an exact fallback.** What the fast path builds is checked before any key
is drawn from it (``_PoolPiece.certify``, vectorised): every piece of slots and a pool,
and fact 6's spread, must have finite slot edges, keys that stay uniform and every atom's
``nu``-mass ``x``, to ``CERTIFY_TOLERANCE`` (absolute ``nu``-measure; a piece that solves its
edges lazily, by its ends and then atom by atom as they are used). Where rounding breaks
it (a tiny ill-conditioned piece, powers that underflow near key 1, a root that did not
converge) the piece falls back to the greedy tiling, checked in full, and the spread to
fact 5; each fallback is recorded in ``OptimalSelection.fallbacks``. If even the greedy
fails its check, :class:`~mspec.selection.SchemeError` -- never a silently wrong law.

Exactness: the output law is exactly ``q`` (single-draft speculative sampling from the
induced ``x``) and the acceptance is the closed-form optimum, as far as the key laws realise
``x``. Keys are floats in ``[0, 1]``, which resolve ~1e-16 of their size, and that is the
guarantee, for both tilings: a token of a piece that ends at key ``e`` has a key law of
length ``p_t`` to within ``8 eps e`` and of ``nu``-mass ``x_t`` to within ``32 K eps e``
(``eps = 2^-52``; plus ``16 K 2^-1074`` at subnormal values, or 1e-300 where some
``0 < q_t < 1e-290``). So a piece low in key space (large ``q/p``: e.g. the tokens of tiny
``p`` under a draft colder than the target) is exact relative to its own tokens, and near
key 1 the error is ~1e-15 absolute. (Pieces used to be exact only to ~1e-15 absolute, so a
piece far shorter than its keys' scale got an ``x`` its keys could not hold: empty key laws,
one constant key for all its drafts.) A token whose ``p_t`` is below the spacing of the keys
where it lies (~1e-16 near key 1) can get a law of float length 0 (the greedy: a point),
selected with about ``p_t h(point) ~ x_t``. Non-identical drafts are not covered: ``f`` is
then ``1 - prod_i (1 - p_i(A))``, not a function of one additive mass, and uniform keys
cannot reach its polytope (book section); use ``"optimal-lp"`` (small V) or ``"is"``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import isotonic_regression

from .selection import SchemeError, SelectionScheme, residual_and_mass, sample_index

#: (unused: a run of shells now moves a window that rounding put a little off the one before
#: back into place, see _Piece._shell_run) window positions closer than this counted as equal
WINDOW_TOLERANCE = 1e-13
#: most safeguarded-Newton steps for a window position
NEWTON_STEPS = 80
#: a slot edge's Newton iteration stops at a step this small (relative): the error after it
#: is about its square; the iterates can flip between floats a few ulps apart, so not 2e-16
NEWTON_STEP_TOLERANCE = 1e-15
#: stop when every window's nu-mass is this close to its target ...
NU_TOLERANCE = 1e-15
#: ... or its bracket is this narrow
WIDTH_TOLERANCE = 1e-15
#: after this many shells in a row, solve the following ones together (vectorised)
SHELL_RUN = 16
#: first number of tokens such a run tries at once (then x4 while no new block is needed)
FIRST_CHUNK = 32
#: a slot may exceed its token's length by this fraction (rounding) before the pool
#: construction is refused for the piece
SLOT_TOLERANCE = 1e-12
#: how pieces are realised: "pool" (slots and a shared pool, vectorised; the greedy where
#: that is not valid) or "greedy" (always the greedy tiling)
TILINGS = ("pool", "greedy")
#: most tokens in one group (a token needing more falls back to the greedy for its piece)
MAX_GROUP = 4096
#: a piece of at most this many atoms solves all its slot edges at once
ALL_EDGES_BELOW = 4096
#: tiled groups are realised as pieces of slots and a pool down to this depth (then greedily)
MAX_DEPTH = 8
#: absolute rounding of a slot edge (the edges are solved to ~1e-16)
EDGE_TOLERANCE = 1e-15
#: what the atoms of the selection are: "tokens" (the lexicographically optimal x),
#: "buckets" (ratio buckets where that keeps the optimum, fact 5) or "auto"
ATOMS = ("auto", "tokens", "buckets")
#: "auto" uses buckets from this vocabulary size on (below it sorting is cheap anyway)
BUCKET_MIN_VOCAB = 4096
#: mantissa bits of q/p that name a bucket: ratios in one bucket differ by a factor < 1 + 2^-6
BUCKET_BITS = 6
#: fact 6 tries coarser buckets first (fewer units: cheaper; 6 bits if they fail)
SPREAD_BITS = 4
#: relative margin of the bucket certificate (float rounding of q/p and of x never flips it)
CERTIFICATE_MARGIN = 1e-12
#: fact 6 checks at most this many buckets token by token where the bucket bound is too loose
SPREAD_EXACT_BUCKETS = 4
#: fact 6 expands buckets into tokens in at most this many rounds, and at most this many tokens
SPREAD_ROUNDS = 4
SPREAD_EXPAND_TOKENS = 1024
#: ... and tiles groups of buckets token by token (in place) up to this many tokens in all
SPREAD_GROUP_TOKENS = 16384
#: a split segment of at most this many tokens is sorted rather than bucketed again
SORT_BELOW = 2048
#: finest buckets of a split segment (6 more mantissa bits per level)
MAX_BUCKET_BITS = 30
#: a piece of slots and a pool (and fact 6's spread) must realise every atom's nu-mass x,
#: and keep keys uniform, to this (absolute nu-measure; rounding leaves ~1e-15, slots may
#: exceed their token by SLOT_TOLERANCE), or the scheme falls back to the greedy tiling,
#: recorded in ``OptimalSelection.fallbacks``; the greedy fallback, the exact path of last
#: resort, is held to GREEDY_CERTIFY_FACTOR times it (else SchemeError)
CERTIFY_TOLERANCE = 1e-12
GREEDY_CERTIFY_FACTOR = 10.0
#: below this u* (a piece within ~1e-12 of key 1) powers of u may underflow: slot edges are
#: then solved with overflow tolerated and clamped into their branch
DELICATE_U = 1e-12


def lex_optimal_induced(*, draft: np.ndarray, target: np.ndarray, num_drafts: int):
    """The lexicographically optimal induced distribution (fact 1 of the module docstring).

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
            order = _argsort_positive(ratio)[::-1]
        else:
            main = np.flatnonzero(both)
            ratio = np.divide(target[main], draft[main])
            order = main[_argsort_positive(ratio)[::-1]]
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
    x_sorted, blocks, top = _lex_pieces(p_sorted, np.take(target, order), num_drafts)
    return order, x_sorted, blocks, top


def _lex_pieces(masses: np.ndarray, targets: np.ndarray, num_drafts: int, start: float = 0.0):
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
    if n and top[n] > 0.0:
        top[1:] *= float(masses.sum()) / top[n]
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
    iso = isotonic_regression(slopes, weights=weights, increasing=True)
    v = np.multiply(slopes, weights, out=slopes)  # v again (to rounding)
    x_sorted = np.multiply(iso.x, weights, out=targets)
    blocks = np.append(np.asarray(iso.blocks, dtype=np.int64)[:-1], n)
    # each block is tight: its x sums to its atoms' v up to rounding; make it exact
    sums = np.add.reduceat(x_sorted, blocks[:-1])
    want = np.add.reduceat(v, blocks[:-1])
    scale = np.divide(want, sums, out=np.ones_like(sums), where=sums > 0)
    if blocks.size - 1 <= 8:  # few pieces: scale in place, piece by piece (no n-long temporary)
        for a, b, c in zip(blocks[:-1], blocks[1:], scale):
            x_sorted[a:b] *= c
    else:
        x_sorted *= np.repeat(scale, np.diff(blocks))
    return x_sorted, blocks, top


#: up to this K, :func:`_key_masses` sums the K positive terms of the polynomial form
#: (3 array operations per term); above it, log1p/expm1 are cheaper
POLYNOMIAL_KEY_MASSES_UP_TO = 4


def _key_masses(masses: np.ndarray, top: np.ndarray, num_drafts: int) -> np.ndarray:
    """``v_t = nu([top_t, top_t + p_t])``, the ``nu``-mass of each atom's keys, relatively exact.

    With ``r = 1 - top_t`` and ``u = max(r - p_t, 0)`` (the key interval is cut at 1),
    ``v_t = r^K - u^K = (r - u) (r^(K-1) + r^(K-2) u + ... + u^(K-1))``: a sum of positive
    terms (no cancellation, unlike a difference of ``f = 1 - (1 - top)^K``, which keeps only
    ~1e-16 absolute: the slopes of small atoms were noise). For larger K the same value as
    ``r^K (1 - (1 - p_t / r)^K)`` through log1p/expm1.

    Args:
        masses: ``(n,)`` draft masses (overwritten: it becomes ``v``).
        top: ``(n + 1,)`` key starts, clipped to 1.
        num_drafts: K.
    """
    r = np.subtract(1.0, top[:-1])
    u = np.subtract(r, masses)
    np.maximum(u, 0.0, out=u)
    length = np.minimum(masses, r, out=masses)  # r - u, exactly: p, or r where the keys end
    if num_drafts <= POLYNOMIAL_KEY_MASSES_UP_TO:
        h = np.ones_like(r)  # h = r^(K-1) + r^(K-2) u + ... + u^(K-1), by Horner in r
        u_power = u.copy() if num_drafts > 2 else u  # u^m
        for m in range(1, num_drafts):
            h *= r
            if m > 1:
                u_power *= u
            h += u_power
        return np.multiply(length, h, out=length)
    with np.errstate(divide="ignore", invalid="ignore"):  # (r = 0 past the keys: v = 0)
        share = np.divide(length, r, out=u)  # in [0, 1]; NaN where r = 0
        share[~(share <= 1.0)] = 1.0
        np.negative(share, out=share)
        np.log1p(share, out=share)
        share *= num_drafts
        np.expm1(share, out=share)  # (1 - p / r)^K - 1, in [-1, 0]
    share *= _power(r, num_drafts)
    return np.negative(share, out=length)


def _argsort_positive(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values)`` (ascending, exact) for positive floats, about 3x faster at V ~ 50k.

    The bit patterns of positive float64 numbers sort like the numbers. Two stable 16-bit
    passes (numpy's radix sort) order them by their top 32 bits; the final stable sort on
    the values themselves then only fixes the few runs that tie there, which is linear
    time for nearly sorted input.
    """
    bits = values.view(np.uint64)
    order = np.argsort((bits >> np.uint64(32)).astype(np.uint16), kind="stable")
    order = order[np.argsort((bits[order] >> np.uint64(48)).astype(np.uint16), kind="stable")]
    return order[np.argsort(values[order], kind="stable")]


def _power(base: np.ndarray, k: int) -> np.ndarray:
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


class _Piece:
    """Greedy tiling of one piece, built lazily token by token (fact 3).

    Coordinates: ``m`` in ``[0, P]`` is draft mass below the top of the piece; the piece
    starts at global key ``u``, so ``nu`` of ``[a, b]`` is ``R(a) - R(b)`` with
    ``R(m) = (1 - u - m)^K``.

    State of the greedy: the used blocks lie above ``frontier`` and everything below it is
    still free; the free gaps between blocks form a stack (``gap_start``/``gap_end``, the
    last one nearest the active block). A token either wraps the active block as a shell
    -- its top part eats the stack from the bottom of the nearest gap upwards, its bottom
    part eats from ``frontier`` down -- or, when even the bottom alone would give it too
    much ``nu``, opens a new block further down, leaving a new gap. Each step is a scalar
    root solve; long runs of shells go to a vectorised solve of all their windows at
    once (:meth:`_shell_run`). Each tiled token keeps its key set as intervals
    (``frag_start``/``frag_end``, rows ``first[i]:first[i] + count[i]``).

    Rounding: windows are measured without cancellation (:meth:`_window`), a new block is
    placed by the token's own density ``x / p``, targets are scaled to what the free keys
    hold (:meth:`_scale`, so that roundings do not pile up on the last token), a window that
    rounding put a little off the one before is moved back, and a token below the keys'
    resolution is a point that opens no block (module docstring, "Exactness").
    """

    def __init__(self, masses: np.ndarray, targets: np.ndarray, start: float, num_drafts: int):
        self.masses, self.targets, self.start, self.k = masses, targets, start, num_drafts
        self.size = masses.size
        self.length = float(masses.sum())
        self.base = 1.0 - start
        # a run of shells solves windows of prefix sums: in extended precision, since a float
        # cumsum over ~1e4 tokens drifts by ~1e-12, which the last token would absorb
        self.cum_mass = np.concatenate([[0.0], np.cumsum(masses, dtype=np.longdouble).astype(float)])
        self.cum_target = np.concatenate([[0.0], np.cumsum(targets, dtype=np.longdouble).astype(float)])
        self.rest_target = np.append(np.cumsum(targets[::-1], dtype=np.longdouble)[::-1].astype(float), 0.0)
        self.point_x = 0.0  # x of the tokens tiled as points (no float length; see _scale)
        self._used = [0.0, 0.0]  # nu of the sets so far, and its rounding (Kahan)
        # a piece short against its keys' scale (as in _PoolPiece.build) takes nu without
        # cancellation, and tolerances relative to its own length and nu-mass
        self.fine = self.length < 0.5 * self.base
        self.nu_tol = NU_TOLERANCE * (float(self.nu(self.length)) if self.fine else 1.0)
        self.width_tol = WIDTH_TOLERANCE * (self.length if self.fine else 1.0)
        self._p, self._x = masses.tolist(), targets.tolist()
        self.done = 0  # tokens tiled so far
        self.blocks = 0  # blocks opened (a shell never opens one)
        self.shell_run = 0  # consecutive shells just tiled
        self.gap_start: list[float] = []
        self.gap_end: list[float] = []
        self.frontier = 0.0
        self.first = np.zeros(self.size, dtype=np.int64)
        self.count = np.zeros(self.size, dtype=np.int64)
        self._frag_start: list[float] = []
        self._frag_end: list[float] = []

    @property
    def phases(self) -> int:
        """Blocks the tiling opened so far (1 when every token after the first is a shell)."""
        return self.blocks

    def nu(self, m):
        if self.fine:  # -base^K expm1(K log1p(-m / base)): relative rounding (m <= length < base)
            return -(self.base**self.k) * np.expm1(self.k * np.log1p(-np.asarray(m) / self.base))
        return self.base**self.k - np.maximum(self.base - m, 0.0) ** self.k

    def _density(self, m: float) -> float:
        r = self.base - m
        return self.k * r ** (self.k - 1) if r > 0.0 else 0.0

    def ensure(self, i: int) -> None:
        """Tile tokens ``0..i`` (local indices)."""
        while self.done <= i:
            if self.shell_run >= SHELL_RUN:
                self._shell_run()
                self.shell_run = 0
                continue
            self._step()

    def _solve(self, fn, slope, lo: float, hi: float, increasing: bool, tol: float | None = None) -> float:
        """Root of the monotone ``fn`` on ``[lo, hi]`` (clamped): Newton in a bracket, to
        ``|fn| <= tol`` (default: the piece's) or a bracket of the piece's width tolerance."""
        tol = self.nu_tol if tol is None else tol
        f_lo, f_hi = fn(lo), fn(hi)
        if (f_lo >= 0.0) if increasing else (f_lo <= 0.0):
            return lo
        if (f_hi <= 0.0) if increasing else (f_hi >= 0.0):
            return hi
        z = 0.5 * (lo + hi)
        for _ in range(NEWTON_STEPS):
            val = fn(z)
            if abs(val) <= tol or hi - lo <= self.width_tol:
                d = slope(z)  # one more Newton step: the residual drops to rounding, of either sign
                step = z - val / d if d != 0.0 else z
                z = step if lo <= step <= hi else z
                break
            if (val < 0.0) == increasing:
                lo = z
            else:
                hi = z
            d = slope(z)
            step = z - val / d if d != 0.0 else lo - 1.0
            z = step if lo < step < hi else 0.5 * (lo + hi)
        return z

    def _window(self, a: float, size: float) -> float:
        """``nu([a, a + size])`` (piece coordinates), relatively exact: ``w^K (1 - (1 - size /
        w)^K)`` with ``w = base - a``. (A difference of powers loses a tiny window to rounding,
        and so do its float ends, ``a + size``: a token's window was then placed by noise,
        where the density is off by up to ~1e-16 / size -- a first token of 1e-16 anywhere.)"""
        w = self.base - a
        if not (w > 0.0 and size > 0.0):
            return 0.0
        share = size / w
        return w**self.k if share >= 1.0 else -(w**self.k) * math.expm1(self.k * math.log1p(-share))

    def _mean_density(self, a: float, size: float) -> float:
        """``nu([a, a + size]) / size`` without cancellation (nor subnormal ``nu``)."""
        w = self.base - a
        if not w > 0.0:
            return 0.0
        share = size / w
        if share < 1e-10:  # (two terms of the series: the rest is below rounding)
            return self.k * w ** (self.k - 1) * (1.0 - 0.5 * (self.k - 1) * share)
        return self._window(a, size) / size

    def _mean_slope(self, a: float, size: float) -> float:
        """The derivative of :meth:`_mean_density` in ``a``."""
        w = self.base - a
        if not w > 0.0:
            return 0.0
        if size < 1e-10 * w:
            return -self.k * (self.k - 1) * w ** (self.k - 2) if self.k > 1 else 0.0
        return (self._density(a + size) - self._density(a)) / size

    def _scale(self, i: int) -> float:
        """The free space's ``nu`` over what tokens ``i..`` should hold: their targets are
        scaled by it (by at most 1e-6). Else the roundings and tolerances of earlier root
        solves would all land on the piece's last token (~1e-12 over ~1e4 tokens). (A token
        below the keys' resolution is a point, which takes no length but is selected with
        ``~p h(point) ~ x``: its ``x`` counts as used.)"""
        free = self._window(0.0, self.length) - self._used[0]
        rest = float(self.rest_target[i])
        return min(max((free - self.point_x) / rest, 1.0 - 1e-6), 1.0 + 1e-6) if rest > 0.0 else 1.0

    def _use(self, nu: float) -> None:
        """Add the ``nu`` of new sets to the used keys' (compensated: ~1e4 terms)."""
        used, rounding = self._used
        step = nu - rounding
        total = used + step
        self._used = [total, (total - used) - step]

    def _step(self) -> None:
        """Tile token ``done`` by itself (a shell or a new block)."""
        i, nu, dens = self.done, self._window, self._density
        p, top = self._p[i], self.frontier
        x = self._x[i] * (self._scale(i) if i else 1.0)
        self.first[i] = len(self._frag_start)
        bottom_only = nu(top, min(p, self.length - top))
        if i == 0 or bottom_only > x + min(self.nu_tol, NU_TOLERANCE * x) or not self.gap_start:
            # a new block [top + g, top + g + p]; its mean density falls as the gap g grows:
            # solved to the token's own density x / p, which picks where the block goes
            g = self._solve(lambda g: self._mean_density(top + g, p) - x / p,
                            lambda g: self._mean_slope(top + g, p),
                            0.0, max(self.length - top - p, 0.0), increasing=False,
                            tol=NU_TOLERANCE * x / p)
            if self.start + (top + g) == self.start + (top + g + p):
                # below the keys' resolution there: a point, which opens no block (a block
                # would anchor the shells after it, at a density that p and x this small do
                # not resolve: the first token of 4e-323 put them 2% off)
                self._frag_start.append(top + g)
                self._frag_end.append(top + g)
                self.point_x += x
            else:
                if g > 0.0:
                    self.gap_start.append(top)
                    self.gap_end.append(top + g)
                self._frag_start.append(top + g)
                self._frag_end.append(top + g + p)
                self.frontier = top + g + p
                self.blocks += 1
                self.shell_run = 0
                self._use(nu(top + g, p))
        else:
            # a shell: length a from the nearest gaps (eaten upwards), p - a below frontier
            used, nu_used = 0.0, 0.0  # length and nu of whole gaps eaten so far
            while True:
                a_gap, e_gap = self.gap_start[-1], self.gap_end[-1]
                room = min(e_gap - a_gap, p - used)

                def total(a, e=e_gap, used=used, nu_used=nu_used):
                    return nu_used + nu(e - a, a) + nu(top, p - used - a) - x

                if total(room) < 0.0 and room == e_gap - a_gap and len(self.gap_start) > 1:
                    used, nu_used = used + room, nu_used + nu(a_gap, room)
                    self._frag_start.append(a_gap)
                    self._frag_end.append(e_gap)
                    self.gap_start.pop()
                    self.gap_end.pop()
                    continue
                a = self._solve(total, lambda a, e=e_gap, used=used: dens(e - a) - dens(top + p - used - a),
                                0.0, room, increasing=True)
                if a > 0.0:
                    self._frag_start.append(e_gap - a)
                    self._frag_end.append(e_gap)
                self.gap_end[-1] = e_gap - a
                if self.gap_end[-1] <= self.gap_start[-1]:
                    self.gap_start.pop()
                    self.gap_end.pop()
                below = p - used - a
                if below > 0.0:
                    self._frag_start.append(top)
                    self._frag_end.append(top + below)
                self.frontier = top + below
                self._use(nu_used + nu(e_gap - a, a) + nu(top, below))
                break
            if len(self._frag_start) == self.first[i]:  # p below the keys' resolution: a point
                self._frag_start.append(top)
                self._frag_end.append(top)
                self.point_x += x
            self.shell_run += 1
        self.count[i] = len(self._frag_start) - self.first[i]
        self.done = i + 1

    def _shell_run(self) -> None:
        """Tile a run of shells at once: the windows ``[S, S + c]`` (squeezed coordinates)
        of all prefixes of the run, until a token needs a new block."""
        gap_start = np.array(self.gap_start + [self.frontier])
        gap_end = np.array(self.gap_end + [self.length])
        lengths = gap_end - gap_start
        squeezed = np.concatenate([[0.0], np.cumsum(lengths)])  # squeezed start of each gap
        nu_before = np.concatenate([[0.0], np.cumsum(self.nu(gap_end) - self.nu(gap_start))])
        free, last = squeezed[-1], gap_start.size - 1
        seam = squeezed[-2]  # the active block sits here, squeezed out

        def where(z):  # gap index and original position of squeezed coordinate z >= 0
            j = np.minimum(np.searchsorted(squeezed, z, side="right") - 1, last)
            return j, gap_start[j] + np.minimum(z - squeezed[j], lengths[j])

        def nu_and_density(z):  # nu of the first z of free length, and the density at z
            j, m = where(z)
            rest = np.maximum(base - m, 0.0)
            if self.fine:  # (no cancellation in a short piece)
                return nu_before[j] + (self.nu(m) - gap_nu0[j]), k * rest ** (k - 1)
            return nu_before[j] + gap_nu0[j] - rest**k, k * rest ** (k - 1)

        base, k = self.base, self.k
        # nu(m) - nu(gap start) = gap_nu0 - rest^k (fine: gap_nu0 = nu(gap start))
        gap_nu0 = self.nu(gap_start) if self.fine else np.maximum(base - gap_start, 0.0) ** k
        first = self.done
        scale = self._scale(first)  # (the run's windows make up for the rounding before it)
        begin, chunk = first, FIRST_CHUNK
        prev_s = prev_b = seam
        while True:
            end = min(self.size, begin + chunk)
            c = self.cum_mass[begin + 1 : end + 1] - self.cum_mass[first]  # window length
            c_first = self.cum_mass[begin] - self.cum_mass[first]  # (the window before)
            d = (self.cum_target[begin + 1 : end + 1] - self.cum_target[first]) * scale  # its nu-mass
            # window [S, S + c] with nu-mass d; its nu falls as S grows. Newton inside a
            # shrinking bracket (bisection when a step leaves it).
            lo, hi = np.zeros_like(c), np.maximum(free - c, 0.0)
            # no root inside [0, free - c] (a prefix past the end of this run): clamp
            at_top = nu_and_density(c)[0] - d
            at_bottom = nu_and_density(hi + c)[0] - nu_and_density(hi)[0] - d
            open_ = (at_top > 0) & (at_bottom < 0)
            s = np.where(at_top <= 0, 0.0, np.where(at_bottom >= 0, hi, np.clip(seam - 0.5 * c, lo, hi)))
            for _ in range(NEWTON_STEPS):
                nu_b, dens_b = nu_and_density(s + c)
                nu_t, dens_t = nu_and_density(s)
                gap = np.where(open_, nu_b - nu_t - d, 0.0)
                converged = np.all((np.abs(gap) <= self.nu_tol) | (hi - lo <= self.width_tol))
                if not converged:
                    lo = np.where(gap > 0, s, lo)
                    hi = np.where(gap < 0, s, hi)
                with np.errstate(divide="ignore", invalid="ignore"):
                    step = s - gap / (dens_b - dens_t)
                inside = (step >= lo) & (step <= hi)
                if converged:  # one more Newton step: residuals at rounding, of either sign
                    s = np.where((gap != 0) & inside, step, s)
                    break
                s = np.where(gap == 0, s, np.where(inside, step, 0.5 * (lo + hi)))
            # a shell needs the window to grow on both sides; else a new block starts. A
            # short window's root is ill-conditioned (its nu moves little with S), so a
            # window a little off the one before is rounding: it is moved into the range that
            # contains that one, S in [S' - p, S'] (the token's length stays exact, its nu
            # moves by at most the tolerance; before, steps up to WINDOW_TOLERANCE were kept
            # and the token's set grew by them: ~1e-13 of length and nu)
            clamped, last_s = s.copy(), prev_s
            for n, (raw, p_n) in enumerate(zip(s.tolist(), np.diff(c, prepend=c_first).tolist())):
                last_s = min(max(raw, last_s - p_n), last_s)
                clamped[n] = last_s
            bad = np.abs(s - clamped) * np.abs(dens_b - dens_t) > self.nu_tol
            s = clamped
            b = s + c
            s_prev = np.concatenate([[prev_s], s[:-1]])
            b_prev = np.concatenate([[prev_b], b[:-1]])
            n_ok = int(np.argmax(bad)) if bad.any() else s.size
            self._store(begin, where, s[:n_ok], s_prev[:n_ok], b_prev[:n_ok], b[:n_ok], squeezed, gap_start, lengths)
            self.done = begin + n_ok
            if n_ok:
                prev_s, prev_b = float(s[n_ok - 1]), float(b[n_ok - 1])
            if n_ok < s.size or end == self.size:
                break
            begin, chunk = end, chunk * 4
        self._use(float(nu_and_density(prev_b)[0] - nu_and_density(prev_s)[0]))
        # the run's window [prev_s, prev_b] is used: eat [prev_s, seam) from the stack
        # (bottom of the nearest gap upwards) and [seam, prev_b) below the frontier
        eat = max(seam - prev_s, 0.0)
        while eat > 0.0 and self.gap_start:
            room = self.gap_end[-1] - self.gap_start[-1]
            if eat >= room:
                eat -= room
                self.gap_start.pop()
                self.gap_end.pop()
            else:
                self.gap_end[-1] -= eat
                eat = 0.0
        self.frontier += max(prev_b - seam, 0.0)

    def _store(self, begin, where, s, s_prev, b_prev, b, squeezed, gap_start, lengths):
        """Record key sets (two squeezed intervals each) in original coordinates."""
        if s.size == 0:
            return
        z0 = np.stack([s, b_prev], axis=1)  # (n, 2): top and bottom interval of each token
        z1 = np.stack([np.maximum(s_prev, s), np.maximum(b, b_prev)], axis=1)
        j = np.clip(np.searchsorted(squeezed, z0, side="right") - 1, 0, gap_start.size - 1)
        simple = z1 <= squeezed[j] + lengths[j] + 1e-300  # inside one gap: one fragment
        lo = gap_start[j] + (z0 - squeezed[j])
        hi = gap_start[j] + np.minimum(z1 - squeezed[j], lengths[j])
        starts: list[float] = []
        ends: list[float] = []
        for n in range(s.size):
            self.first[begin + n] = len(self._frag_start) + len(starts)
            for side in (0, 1):
                if z1[n, side] <= z0[n, side]:
                    continue
                if simple[n, side]:
                    starts.append(lo[n, side])
                    ends.append(hi[n, side])
                    continue
                k = j[n, side]
                while k < gap_start.size and squeezed[k] < z1[n, side]:
                    a = max(z0[n, side], squeezed[k])
                    e = min(z1[n, side], squeezed[k] + lengths[k])
                    if e > a:
                        starts.append(gap_start[k] + a - squeezed[k])
                        ends.append(gap_start[k] + e - squeezed[k])
                    k += 1
            if len(self._frag_start) + len(starts) == self.first[begin + n]:
                # the window did not grow in floats (p below the keys' resolution): a point
                starts.append(lo[n, 1])
                ends.append(lo[n, 1])
                self.point_x += self._x[begin + n]
            self.count[begin + n] = len(self._frag_start) + len(starts) - self.first[begin + n]
        self._frag_start.extend(starts)
        self._frag_end.extend(ends)

    def fragments(self, i: int, mass: float = 0.0) -> list[tuple[float, float, float]]:
        """Key set of local token ``i`` as global intervals ``(start, end, 1.0)``."""
        self.ensure(i)
        a = self.first[i]
        return [(self.start + self._frag_start[r], self.start + self._frag_end[r], 1.0)
                for r in range(a, a + self.count[i])]

    def sample_key(self, i: int, mass: float, uniform: float) -> float:
        """Global key of a draft of local token ``i`` from one uniform number."""
        self.ensure(i)
        a = self.first[i]
        starts = self._frag_start[a : a + self.count[i]]
        ends = self._frag_end[a : a + self.count[i]]
        w = uniform * sum(e - s for s, e in zip(starts, ends))
        for s, e in zip(starts, ends):
            if w < e - s:
                return self.start + s + w
            w -= e - s
        return self.start + ends[-1]


class _PoolPiece:
    """Slots and a shared pool: a vectorised realisation of one piece (fact 4).

    Coordinates as in :class:`_Piece` (``m`` in ``[0, P]`` below the top of the piece,
    ``H(m) = nu([0, m])`` and density ``h = H'``, decreasing). ``g`` is the piece's mean
    density ``H(P) / P``. Tokens denser than ``g`` (``b_t = x_t / p_t > g``) get *front slots*
    ``[C_{t-1}, C_t]`` in ``b`` order from the top, tokens sparser than ``g`` get *back slots*
    from the bottom, and every token puts the rest of its length, ``r_t = p_t - |slot|``,
    into one shared *pool* -- the interval between the front and the back slots -- spread
    uniformly over it. A key of token ``t`` is uniform on its slot with probability
    ``|slot| / p_t``, else uniform on the pool. The slot edges solve, with prefix sums only,

        H(C_t) - g C_t = sum_{u <= t} (x_u - g p_u)                 (front, in b order)
        g D_t - (H(P) - H(P - D_t)) = sum_{u >= t} (g p_u - x_u)    (back, from the end)

    because the pool's mean density is then exactly ``g`` and each token gets
    ``nu(slot) + r_t g = x_t``. A token must not need a slot longer than itself
    (``r_t >= 0``); where one does, it shares one slot with the tokens before it: a
    *group* of tokens spreads uniformly over the union of their slots, token ``t`` owning
    ``l_t = p_t (b_t - g) / (mean density of the slot - g)`` of it (the same equations at
    the group's edges). Where spreading evenly fails too (next to a nearly tight prefix or
    suffix), the group's slot is tiled by the greedy (:meth:`_Side._tile_group`).
    :meth:`build` returns ``None`` if even that fails, and the caller falls back to the
    greedy :class:`_Piece` for the whole piece.
    """

    #: where certificate failures of the tiled groups' pieces are noted (the scheme's
    #: ``fallbacks``), and their tolerance (None: CERTIFY_TOLERANCE); set by the owner
    notes: list | None = None
    tolerance: float | None = None
    #: built lazily (not every slot edge solved): certified by its ends, then atom by atom
    #: (the atoms certified so far: ``checked``); set by the owner
    lazy: bool = False

    def __init__(self, start, length, n, front, back, num_drafts, depth=0):
        self.start, self.length, self.n, self.k = start, length, n, num_drafts
        self.front, self.back = front, back
        self.depth = depth  # how many tiled groups this piece lies inside
        self._tilings: dict[tuple[bool, int], _Piece | _PoolPiece] = {}
        self.pool_start = float(front.edge(front.size)) if front.size else 0.0
        pool_end = length - (float(back.edge(back.size)) if back.size else 0.0)
        self.pool_len = max(pool_end - self.pool_start, 0.0)
        self.phases = 0  # no greedy blocks
        self._slots: dict[int, tuple[float, float, float]] = {}  # local token -> _slot(token)

    @classmethod
    def build(cls, masses: np.ndarray, targets: np.ndarray, start: float, num_drafts: int, depth: int = 0,
              all_edges: bool = False):
        """The piece's slots and pool, or ``None`` when some token needs a slot longer than
        itself even in a group. ``depth``: tiled groups around the piece (0: a whole piece);
        ``all_edges``: solve every slot edge at once (for a caller that needs them all)."""
        k, base = num_drafts, 1.0 - start
        length = float(masses.sum())
        n = masses.size

        def big_h(m):  # nu([0, m]) of the piece
            return base**k - np.maximum(base - m, 0.0) ** k

        def window(lo, hi):  # nu([lo, hi]) of the piece
            return big_h(hi) - big_h(lo)

        # A piece short against its keys' scale (length < base / 2, base = 1 - start): nu as a
        # difference of powers of u = base - m keeps only ~1e-16 base^K absolute, which is
        # not small against the piece's nu there -- its mean density g would not be that of
        # its x (relatively exact, from _lex_pieces), and the u-space slot edges would be
        # exact only to ~1e-16 base, not to ~1e-16 of the piece. Such a piece gets nu without
        # cancellation and its edges refined in m itself.
        fine = length < 0.5 * base and k > 1
        if fine:
            def big_h(m):  # -base^K expm1(K log1p(-m / base)): relative rounding
                return -(base**k) * np.expm1(k * np.log1p(-np.minimum(m, base) / base))

            def window(lo, hi):
                w = base - lo
                return -(w**k) * np.expm1(k * np.log1p(-(hi - lo) / w))

        total = float(big_h(length))
        g = total / length if length > 0 else 0.0
        dens = targets / masses
        # the densities are sorted descending: front is a prefix, back a suffix
        n_front, n_back = (int(np.sum(dens > g)), int(np.sum(dens < g))) if k > 1 else (0, 0)
        # with u = base - m the edge equations read u^K - g u = const; h = g at u_star
        u_star = min(max((g / k) ** (1.0 / (k - 1)), base - length), base) if k > 1 else base
        phi_star = u_star**k - g * u_star
        top_value, bottom = base**k - g * base, base - length
        bottom_value = bottom**k - g * bottom
        front = _Side(
            masses[:n_front], targets[:n_front], g,
            want=np.cumsum(targets[:n_front] - g * masses[:n_front]),  # Phi(C_t) = H(C_t) - g C_t
            root=(lambda want: np.maximum(top_value - want, phi_star), lambda u: base - u, k, True, base),
            window_nu=window,
            extent=base - u_star, most=top_value - phi_star, denser=True)
        back = _Side(  # measured from the bottom of the piece, the sparsest token first
            masses[n - n_back:][::-1], targets[n - n_back:][::-1], g,
            want=np.cumsum((g * masses[n - n_back:] - targets[n - n_back:])[::-1]),  # Psi(D_t)
            root=(lambda want: np.maximum(bottom_value - want, phi_star), lambda u: u - bottom, k, False, bottom),
            window_nu=lambda lo, hi: window(length - hi, length - lo),
            extent=u_star - bottom, most=bottom_value - phi_star, denser=False)
        if fine:  # Phi(C) = H(C) - g C from the top, Psi(D) = g D - nu([P - D, P]) from the bottom
            front.refine = (lambda c: big_h(c) - g * c, lambda c: k * (base - c) ** (k - 1) - g, length)
            back.refine = (lambda d: g * d + (bottom + d) ** k * np.expm1(k * np.log1p(-d / (bottom + d))),
                           lambda d: g - k * (bottom + d) ** (k - 1), length)
        if all_edges or fine:  # (fine: every edge refined and checked, no chord bounds)
            _Side.solve_all(front, back)
        if not (front.settle() and back.settle()):
            return None
        return cls(start, length, n, front, back, k, depth)

    def _slot(self, i: int):
        """``(lo, hi, own)``: local token ``i``'s slot in piece coordinates, and the length
        of it the token owns (0 for a slot that rounds to nothing). Kept once computed (a
        drafted token's slot is read by its certificate and by every key drawn from it)."""
        slot = self._slots.get(i)
        if slot is None:
            if i < self.front.size:
                lo, hi, own = self.front.slot(i)
            elif self.n - 1 - i < self.back.size:
                lo, hi, own = self.back.slot(self.n - 1 - i)
                lo, hi = self.length - hi, self.length - lo
            else:
                lo = hi = own = 0.0
            slot = self._slots[i] = (lo, hi, own) if hi > lo else (lo, lo, 0.0)
        return slot

    def _group_tiling(self, i: int):
        """``(tiling, position, own)`` if local token ``i`` is in a tiled group, else None.

        A tiled group's slot is tiled exactly by its members (lengths ``own``, ``nu``-masses
        ``held``): a piece of its own, realised like any piece -- slots and a pool inside
        the slot (which needs no sequential greedy, however many members), or the greedy
        where that fails."""
        if i < self.front.size:
            side, j, front = self.front, i, True
        elif self.n - 1 - i < self.back.size:
            side, j, front = self.back, self.n - 1 - i, False
        else:
            return None
        first = side.group_first(j)
        if first < 0 or first not in side.tiled:
            return None
        own, held, tokens = side.tiled[first]
        key = (front, first)
        if key not in self._tilings:
            self._tilings[key] = self.tile_slot(front, first, side.group_end(j), own, held)
        position = int(j - first if front else tokens.size - 1 - (j - first))
        return self._tilings[key], position, float(own[position])

    def tile_slot(self, front: bool, first: int, end: int, own: np.ndarray, held: np.ndarray):
        """The piece that tiles the slot of group ``first..end-1`` of the front (or back)
        with members of lengths ``own`` and ``nu``-masses ``held``, densest first (they fill
        it exactly and pass the greedy's prefix test): slots and a pool, else the greedy."""
        side = self.front if front else self.back
        top = self.start + float(side.edge(first) if front else self.length - side.edge(end))  # densest end
        sub = None
        if self.depth < MAX_DEPTH and own.size > 1 and own.min() > 0.0:
            sub = _PoolPiece.build(own, held, top, self.k, self.depth + 1)
        why = sub.certify(own, held, tolerance=self.tolerance) if sub is not None else None
        if why is not None:  # (rounding broke it: the greedy, checked in full, noted)
            sub = _Piece(own, held, top, self.k)
            failed = _certify_greedy(sub, own, held)
            if self.notes is not None:
                self.notes.append(f"group of {own.size} at depth {self.depth + 1}: slots and pool -> greedy: {why}"
                                  + (f"; the greedy: {failed}" if failed else ""))
            if failed is not None:
                raise SchemeError(f"scheme 'optimal' could not certify its key laws ({why}; the greedy "
                                  f"fallback: {failed}); please report the draft and target. 'specinfer' is "
                                  "exact on every input and can stand in meanwhile")
        if isinstance(sub, _PoolPiece):
            sub.notes, sub.tolerance = self.notes, self.tolerance
        return sub if sub is not None else _Piece(own, held, top, self.k)

    def fragments(self, i: int, mass: float) -> list[tuple[float, float, float]]:
        """Key law of local token ``i`` (draft mass ``mass``): ``(start, end, weight)``, with
        weight = the share of the keys there that belong to the token."""
        lo, hi, own = self._slot(i)
        share = max(mass - own, 0.0)
        out = []
        tiled = self._group_tiling(i)
        if tiled is not None:
            out += tiled[0].fragments(tiled[1], tiled[2])
        elif own > 0.0:
            out.append((self.start + lo, self.start + hi, own / (hi - lo)))
        if share > 0.0 and self.pool_len > 0.0:
            a = self.start + self.pool_start
            out.append((a, a + self.pool_len, share / self.pool_len))
        return out

    def sample_key(self, i: int, mass: float, uniform: float) -> float:
        """Global key of a draft of local token ``i`` from one uniform number."""
        lo, hi, own = self._slot(i)
        share = max(mass - own, 0.0)
        w = uniform * (own + share)
        if w < own or share <= 0.0 or self.pool_len <= 0.0:
            tiled = self._group_tiling(i)
            if tiled is not None:
                return tiled[0].sample_key(tiled[1], tiled[2], min(w / own, 1.0) if own > 0.0 else 0.0)
            return float(self.start + lo + (min(w / own, 1.0) * (hi - lo) if own > 0.0 else 0.0))
        return float(self.start + self.pool_start + (w - own) / share * self.pool_len)

    def certify(self, masses: np.ndarray, targets: np.ndarray, skip=(), tolerance: float | None = None):
        """``None`` if the slots and pool realise the atoms to float rounding, else what fails.

        The construction is exact in exact arithmetic; rounding can break it where its edge
        equations are ill-conditioned (a piece far shorter than 1e-8, keys whose powers
        underflow) or a root does not converge. So check, vectorised, the key laws as
        :meth:`sample_key` draws them: finite slot edges; keys that stay uniform -- the
        ``nu``-measure of the keys where the shares do not add up to 1 (a slot longer than
        its owners, reversed edges, slots past the piece or over each other, a pool its
        shares do not fill) -- and every atom's ``nu``-mass ``p_t nu(law) / |law|``, both
        to ``tolerance`` (absolute; default ``CERTIFY_TOLERANCE``: float keys resolve
        ~1e-16). A tiled group's own piece is certified when it is built (:meth:`tile_slot`);
        its members' ``nu``-masses here are the ones it is built for. ``skip``: groups (keys
        ``(front, first)``) whose members the caller checks instead.

        Args:
            masses: ``(n,)`` the atoms' draft masses, in piece order (as built).
            targets: ``(n,)`` their ``x``.
        """
        tol = CERTIFY_TOLERANCE if tolerance is None else tolerance
        n, length, k, pool_len = self.n, self.length, self.k, self.pool_len
        base = 1.0 - self.start
        dense = k * base ** (k - 1) if k > 1 else 1.0  # the largest nu-density in (and next to) the piece
        ends = [float(side.edges[-1] if side.solved else side.edge(side.size)) for side in (self.front, self.back)]
        defect = dense * max(ends[0] + ends[1] - length, 0.0)  # nu of keys not covered once
        if pool_len > 0.0:
            top, bottom = base - ends[0], max(base - ends[0] - pool_len, 0.0)
            nu_pool = max(top, 0.0) ** k - bottom**k
            density = nu_pool / pool_len
        owned_sum, worst = 0.0, 0.0
        for front, side in ((True, self.front), (False, self.back)):
            m = side.size
            if not m:
                continue
            edges = side.edges if side.solved else side.edge(np.arange(m + 1))
            width = edges[1:] - edges[:-1]
            narrowest, last = float(width.min()), float(edges[-1])
            if not (math.isfinite(narrowest) and math.isfinite(last)):  # (a NaN or inf edge shows here)
                return "slot edges not finite"
            defect += dense * (max(-narrowest, 0.0) * m + max(last - length, 0.0))
            u = np.subtract(base, edges) if front else np.add(edges, base - length)
            power = _power(np.maximum(u, 0.0, out=u), k)  # (1 - key)^K at every edge
            nu_slot = power[:-1] - power[1:] if front else power[1:] - power[:-1]
            side_masses = side.masses
            over = None
            if side._first is None:  # one token per slot: it owns all of it unless too long
                owned, held, over = width, nu_slot, width - side_masses
                if narrowest < 0.0 or float(over.max()) > 0.0:  # (reversed: counted above)
                    over = None
                    owned = np.maximum(np.minimum(width, side_masses), 0.0)
                    part = np.divide(owned, width, out=np.zeros(m), where=width > 0.0)
                    defect += float(np.sum(np.where(width > 0.0, (1.0 - part) * nu_slot, 0.0)))
                    held = part * nu_slot
            else:  # a group's members share the group's slot
                grouped = side._first >= 0
                first, end = np.maximum(side._first, 0), side._end
                lo = np.where(grouped, edges[first], edges[:-1])
                hi = np.where(grouped, edges[end], edges[1:])
                slot_nu = np.where(grouped, (power[first] - power[end]) * (1.0 if front else -1.0), nu_slot)
                owned = np.where(hi > lo, np.where(grouped, side._own, np.minimum(width, side_masses)), 0.0)
                part = np.divide(owned, hi - lo, out=np.zeros(m), where=hi > lo)
                held = part * slot_nu
                defect += float(np.sum(np.where(grouped | ~(hi > lo), 0.0, (1.0 - part) * slot_nu)))
                heads = np.flatnonzero(side._first == np.arange(m))
                g_width = edges[end[heads]] - edges[heads]
                g_own = np.bincount(side._first[grouped], weights=side._own[grouped], minlength=m)[heads]
                defect += float(np.sum(np.abs(g_width - g_own) * np.divide(
                    slot_nu[heads], g_width, out=np.zeros(heads.size), where=g_width > 0.0)))
            checked = None
            for first_, (_, t_held, tokens) in side.tiled.items():
                if held is nu_slot:
                    held = held.copy()
                held[tokens] = t_held  # (the group's own piece realises these)
                if (front, first_) in skip:
                    checked = np.ones(m, dtype=bool) if checked is None else checked
                    checked[first_ : int(side._end[first_])] = False
            owned_sum += last - float(edges[0]) if over is not None else float(owned.sum())
            if pool_len > 0.0 and over is not None:  # (the usual case: every slot owned in full)
                over *= density
                error = np.abs(np.subtract(held, over, out=over) - side.targets)  # (p_t - own_t = -over_t)
            elif pool_len > 0.0:  # a key is drawn from the slot w.p. own / p_t, else from the pool
                error = np.abs(held + (side_masses - owned) * density - side.targets)
            else:
                error = self._without_pool(side_masses, side.targets, owned, held, dense)
            worst = max(worst, float(error.max() if checked is None else error[checked].max(initial=0.0)))
        middle = slice(self.front.size, n - self.back.size)  # (density exactly g: the pool only)
        if middle.start < middle.stop:
            if pool_len > 0.0:
                error = np.abs(masses[middle] * density - targets[middle])
            else:
                zero = np.zeros(middle.stop - middle.start)
                error = self._without_pool(masses[middle], targets[middle], zero, zero, dense)
            worst = max(worst, float(error.max()))
        if pool_len > 0.0:  # the shares p_t - own_t must fill the pool
            defect += abs((length - owned_sum) / pool_len - 1.0) * nu_pool
        if not defect <= tol:  # (also a NaN)
            return f"keys not uniform on nu-measure {defect:.3g}"
        if not worst <= tol:
            return f"a key law's nu-mass is off by {worst:.3g}"
        return None

    @staticmethod
    def _without_pool(masses, targets, owned, held, dense):
        """|nu-mass - x| of atoms whose keys come from their slots only (no pool): an empty
        law (p_t below the keys' resolution) is a point, of nu-mass at most p_t dense."""
        real = np.divide(masses * held, owned, out=masses * dense, where=owned > 0.0)
        return np.where(owned > 0.0, np.abs(real - targets), np.maximum(real, targets))

    def certify_ends(self, tolerance: float | None = None):
        """What :meth:`certify` checks without solving every slot edge, for a piece built
        lazily (more than ``ALL_EDGES_BELOW`` atoms; solving all its edges would cost more than
        building it): finite ends of the slots, front and back slots apart. Its atoms are
        then certified one by one, before any key is drawn from them (:meth:`certify_atom`)."""
        tol = CERTIFY_TOLERANCE if tolerance is None else tolerance
        k, base = self.k, 1.0 - self.start
        dense = k * base ** (k - 1) if k > 1 else 1.0
        ends = [float(side.edge(side.size)) if side.size else 0.0 for side in (self.front, self.back)]
        if not all(math.isfinite(e) for e in ends):
            return "slot edges not finite"
        if not dense * max(ends[0] + ends[1] - self.length, 0.0) <= tol:
            return "front and back slots overlap"
        return None

    def certify_atom(self, i: int, mass: float, target: float, tolerance: float | None = None):
        """:meth:`certify` for local atom ``i`` alone (draft mass ``mass``, ``x`` ``target``):
        finite, ordered slot edges, the part of its slot that nobody owns and its ``nu``-mass,
        to ``tolerance`` (a tiled group's piece is built, and so certified, here)."""
        tol = CERTIFY_TOLERANCE if tolerance is None else tolerance
        k, base = self.k, 1.0 - self.start
        dense = k * base ** (k - 1) if k > 1 else 1.0
        if i < self.front.size:
            side, j = self.front, i
        elif self.n - 1 - i < self.back.size:
            side, j = self.back, self.n - 1 - i
        else:
            side = None  # (density exactly g: the pool only)
        defect, held = 0.0, 0.0
        lo, hi, own = self._slot(i)
        if side is not None:
            raw = side.pair(j)
            if not (math.isfinite(raw[0]) and math.isfinite(raw[1])):
                return "slot edges not finite"
            defect += dense * max(raw[0] - raw[1], 0.0)
            if hi > lo:
                nu_slot = (base - lo) ** k - max(base - hi, 0.0) ** k
                first = side.group_first(j)
                if first >= 0:  # the group's slot: its members must own all of it
                    owned = float(side._own[first : side.group_end(j)].sum())
                    defect += abs(1.0 - owned / (hi - lo)) * nu_slot
                else:
                    defect += (1.0 - own / (hi - lo)) * nu_slot
                tiled = self._group_tiling(i)
                if tiled is not None:
                    own_all, held_all, _ = side.tiled[first]
                    held = float(held_all[tiled[1]])
                else:
                    held = own / (hi - lo) * nu_slot
        if self.pool_len > 0.0:
            start = self.pool_start
            density = ((base - start) ** k - max(base - start - self.pool_len, 0.0) ** k) / self.pool_len
            error = abs(held + max(mass - own, 0.0) * density - target)
        else:
            error = abs(mass * held / own - target) if own > 0.0 else max(mass * dense, target)
        if not defect <= tol:
            return f"keys not uniform on nu-measure {defect:.3g}"
        if not error <= tol:
            return f"a key law's nu-mass is off by {error:.3g}"
        return None


def _certify_piece(piece, masses: np.ndarray, targets: np.ndarray, tolerance: float | None = None):
    """``_PoolPiece.certify`` for either kind of piece (the greedy: :func:`_certify_greedy`)."""
    if isinstance(piece, _PoolPiece):
        return piece.certify(masses, targets, tolerance=tolerance)
    tol = CERTIFY_TOLERANCE if tolerance is None else tolerance
    return _certify_greedy(piece, masses, targets, GREEDY_CERTIFY_FACTOR * tol)


def _certify_greedy(piece, masses: np.ndarray, targets: np.ndarray, tolerance: float | None = None):
    """``None`` if the greedy tiling ``piece`` (a :class:`_Piece`, tiled in full here) realises
    its atoms, else what fails: as ``_PoolPiece.certify``, every atom's ``nu``-mass
    ``p_t nu(sets) / |sets|`` and the ``nu``-measure of the keys not covered exactly once
    (gaps, overlaps, sets outside the piece, lengths other than ``p_t``), to ``tolerance``."""
    tol = GREEDY_CERTIFY_FACTOR * CERTIFY_TOLERANCE if tolerance is None else tolerance
    k, lo, hi = piece.k, piece.start, piece.start + piece.length

    def nu(a, b):
        return (1.0 - a) ** k - (1.0 - b) ** k

    starts, ends, defect = [], [], 0.0
    for i in range(piece.size):
        sets = np.array([f[:2] for f in piece.fragments(i)], dtype=float).reshape(-1, 2)
        a, b = sets[:, 0], sets[:, 1]
        drawn, held = float(np.sum(b - a)), float(np.sum(nu(a, b)))
        # (an empty set, p_t below the keys' resolution, is a point: nu-mass p_t x density)
        error = abs(float(masses[i]) * held / drawn - float(targets[i])) if drawn > 0.0 else max(
            float(masses[i]) * k * (1.0 - lo) ** (k - 1), float(targets[i]))
        if not error <= tol:
            return f"greedy: the set of atom {i} has a nu-mass off by {error:.3g}"
        if drawn > 0.0:
            defect += abs(float(masses[i]) / drawn - 1.0) * held  # (keys drawn at density 1 / |sets|)
        starts.append(a)
        ends.append(b)
    a, b = np.concatenate(starts), np.concatenate(ends)
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    reach = np.maximum.accumulate(b)  # the union of the sets, as merged intervals
    new = np.flatnonzero(np.concatenate([[True], a[1:] > reach[:-1]]))
    u0, u1 = a[new], reach[np.append(new[1:] - 1, a.size - 1)]
    union = float(np.sum(nu(u0, u1)))
    inside = float(np.sum(nu(np.clip(u0, lo, hi), np.clip(u1, lo, hi))))
    defect += float(np.sum(nu(a, b))) - union + union - inside + float(nu(lo, hi)) - inside
    if not defect <= tol:
        return f"greedy: keys not uniform on nu-measure {defect:.3g}"
    return None


class _Side:
    """The front (or back) slots of a :class:`_PoolPiece`, built lazily.

    Tokens come from the most extreme density inwards and ``edges`` are measured from that
    end of the piece: token ``i``'s own slot is ``[edges[i], edges[i + 1]]`` where
    ``edges[i + 1]`` solves ``Phi(edge) = want[i]`` (``Phi`` concave, rising on
    ``[0, extent]`` up to ``most``). Only the edges that are needed are solved: a token
    provably fits its slot when the window of length ``p_t`` that starts at an *upper
    bound* of its first edge (the chord of ``Phi``) already holds enough (front) or
    little enough (back) ``nu``; the others are checked exactly, and the ones that do not
    fit are grouped with the tokens before them (:meth:`settle`).
    """

    def __init__(self, masses, targets, g, *, want, root, window_nu, extent, most, denser):
        self.masses, self.targets, self.g, self.want = masses, targets, g, want
        # edges[i + 1] = to_edge(u) where u^K - g u = rhs_of(want[i]) on the branch rising
        # (or not), whose far end is far
        self.rhs_of, self.to_edge, self.k, self.rising, self.far = root
        self.window_nu, self.denser = window_nu, denser
        self.extent, self.most = extent, most
        self.size = masses.size
        self.edges = np.full(self.size + 1, np.nan)
        self.edges[0] = 0.0
        self.solved = self.size == 0  # all edges known
        # (phi, slope, most): the edge equation phi(edge) = want without cancellation, edges
        # in [0, most], to refine the u-space roots (a piece short against its keys' scale,
        # see _PoolPiece.build); None: not needed
        self.refine = None
        # groups: (first, end, own) of every token, as arrays made at the first group
        # (first = -1: no group); first -> (own lengths, nu-masses, tokens) of a tiled
        # group, densest first
        self._first = self._end = self._own = None
        self.tiled: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def group_first(self, i: int) -> int:
        """First token of token ``i``'s group, -1 if it has none."""
        return -1 if self._first is None else int(self._first[i])

    def group_end(self, i: int) -> int:
        return int(self._end[i])

    def group_spans(self) -> list[tuple[int, int]]:
        """``(first, end)`` of every group."""
        if self._first is None:
            return []
        firsts = np.unique(self._first[self._first >= 0])
        return [(int(s), int(self._end[s])) for s in firsts]

    def edge(self, i):
        """``edges[i]`` (an int or an index array), solving the missing ones."""
        idx = np.atleast_1d(i)
        missing = idx[np.isnan(self.edges[idx])]
        if missing.size:  # (a repeated index is solved twice, to the same value)
            roots = _power_root(self.rhs_of(self.want[missing - 1]), self.g, self.k, self.rising, self.far)
            self.edges[missing] = self._refined(np.clip(self.to_edge(roots), 0.0, self.extent), missing - 1)
            if idx.size == self.edges.size:  # all of them: ordered (roots of neighbours can
                np.maximum.accumulate(self.edges, out=self.edges)  # cross by rounding, ~1e-28)
        return self.edges[i]

    def _refined(self, edges: np.ndarray, rows) -> np.ndarray:
        """``edges`` (of ``want[rows]``), refined where the side has an exact edge equation."""
        if self.refine is None:
            return edges
        return _concave_root(edges, self.want[rows], *self.refine, self.g)

    @staticmethod
    def solve_all(front: "_Side", back: "_Side") -> None:
        """Every edge of both sides, in one Newton iteration (one call's overhead, not two)."""
        if front.size + back.size <= 16:
            for side in (front, back):
                side.edge(np.arange(side.size + 1))
                side.solved = True
            return
        rhs = [side.rhs_of(side.want) for side in (front, back)]
        roots = _power_root_both(rhs[0], rhs[1], front.g, front.k, front.far, back.far)
        for side, part in zip((front, back), (roots[: front.size], roots[front.size :])):
            side.edges[1:] = side._refined(np.clip(side.to_edge(part), 0.0, side.extent), slice(None))
            np.maximum.accumulate(side.edges, out=side.edges)  # (rounding can cross neighbours)
            side.solved = True

    def settle(self) -> bool:
        """Find the tokens that need a group, and group them; False if impossible."""
        if self.size == 0:
            return True
        masses = self.masses
        if self.solved:  # every edge is known: check every slot
            widths = np.diff(self.edges)
            too_long = np.flatnonzero(widths > masses * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE)
            return self._group_all(too_long)
        if self.size <= 64 or self.extent <= 0.0 or self.most <= 0.0:
            suspects = np.arange(self.size)
        else:
            before = np.concatenate([[0.0], self.want[:-1]])
            bound = self.extent * np.clip(before / self.most, 0.0, 1.0)  # >= edges[:-1] (chord)
            held = self.window_nu(bound, bound + masses)
            fits = held >= self.targets if self.denser else held <= self.targets
            suspects = np.flatnonzero(~fits)
        too_long = suspects
        if suspects.size:
            needed = np.zeros(self.size + 1, dtype=bool)  # both edges of each suspect, once
            needed[suspects] = needed[suspects + 1] = True
            self.edge(np.flatnonzero(needed))
            widths = self.edges[suspects + 1] - self.edges[suspects]
            too_long = suspects[widths > masses[suspects] * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE]
        return self._group_all(too_long)

    def _group_all(self, too_long: np.ndarray) -> bool:
        """Group the tokens ``too_long`` (ascending) with their neighbours; False if impossible."""
        if not too_long.size:
            return True
        dens = self.targets / self.masses
        i = 0
        while i < too_long.size:
            t = int(too_long[i])
            if self.group_first(t) >= 0:  # already in the group of an earlier token
                i += 1
                continue
            reach = 1  # the group reaches this many tokens back (and forward), doubling
            while True:
                s = max(t - reach, 0)
                s = max(self.group_first(s), 0) if self.group_first(s) >= 0 else s  # never split a group
                # the too-long tokens after t, each within reach of the one before: one group
                # (next to a nearly tight prefix or suffix they come in long runs)
                steps = np.diff(too_long[i:])
                last = i + (int(np.argmax(steps > reach)) if np.any(steps > reach) else steps.size)
                e = int(too_long[last]) + 1
                if any(self._group(s, end, dens) for end in dict.fromkeys((e, min(e + reach, self.size)))):
                    break
                if (s == 0 and e + reach >= self.size) or reach >= MAX_GROUP:
                    return False  # give up: the greedy fallback for the piece
                reach *= 2
            i = int(np.searchsorted(too_long, self.group_end(t)))
        return True

    def _group(self, s: int, e: int, dens) -> bool:
        """Make tokens ``s..e-1`` a group, spread evenly or else tiled; False if neither works."""
        masses, g = self.masses[s:e], self.g
        lo, hi = float(self.edge(s)), float(self.edge(e))
        if hi <= lo:
            return False
        d = float(self.window_nu(lo, hi)) / (hi - lo)
        with np.errstate(divide="ignore", invalid="ignore"):  # (d = g: no spreading; tiled below)
            own = masses * (dens[s:e] - g) / (d - g)
        if np.all(own <= masses * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE):
            own *= (hi - lo) / own.sum()  # the group owns exactly its width
            self._members(s, e, np.minimum(own, masses))
            return True
        return self._tile_group(s, e, lo, hi)

    def _tile_group(self, s: int, e: int, lo: float, hi: float) -> bool:
        """Tiling instead of spreading: tokens ``s..e-1`` whose uniform group fails (a nearly
        tight prefix or suffix, whose densest keys the spreading would dilute) tile their
        joint slot ``[lo, hi]`` with the greedy (fact 3).

        Token ``t`` owns ``own_t <= p_t`` of the slot, where it needs the ``nu``-mass
        ``x_t - g (p_t - own_t)`` (the rest of its length is in the pool), i.e. the mean
        density ``g + p_t (b_t - g) / own_t`` (front; back: ``g - p_t (g - b_t) / own_t``).
        *Water-filling*: the most extreme tokens own all their length (density ``b_t``), the
        others share one level ``|density - g| = A``, with ``A`` set so that the owned
        lengths fill the slot. Densities then fall monotonically from the slot's denser end,
        and the greedy's prefix test holds whenever every prefix of the group (from this
        side's end) is at least as long as its own slots -- always for a group that starts
        at the end (``s = 0``), by the prefix lemma. The test is checked, not assumed."""
        filled = self.fill_slot(self.masses[s:e], self.targets[s:e], lo, hi)
        if filled is None:
            return False
        own, held, order = filled
        self._members(s, e, np.minimum(own, self.masses[s:e]))
        self.tiled[s] = (own[order], held[order], s + order)
        return True

    def fill_slot(self, masses, targets, lo: float, hi: float):
        """Water-filling (:meth:`_tile_group`) of members with ``masses``/``targets`` (this
        side's order) into the slot ``[lo, hi]``, checked for the greedy's prefix test.

        Returns:
            ``None`` if it fails, else ``(own, held, order)``: each member's owned length
            and ``nu``-mass, and the members densest first.
        """
        width = hi - lo
        total = float(masses.sum())
        if width > total * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE:
            return None  # the tokens cannot own more than their length
        gap = np.abs(targets / masses - self.g) * masses  # p_t |b_t - g|, side order
        if width >= total:
            own = masses.copy()
        else:
            # j tokens own fully: A_j = (gap of the others) / (width - their length); the
            # first j with A_j >= |b_j - g| is the level (|b - g| falls along the side)
            owned_before = np.concatenate([[0.0], np.cumsum(masses)[:-1]])
            gap_after = np.cumsum(gap[::-1])[::-1]
            with np.errstate(divide="ignore", invalid="ignore"):  # full tokens past the width
                level = np.where(owned_before < width, gap_after / (width - owned_before), -1.0)
            j = int(np.argmax(level >= gap / masses))
            own = np.concatenate([masses[:j], gap[j:] / level[j]])
        own *= width / own.sum()  # exactly the slot's width
        held = targets - self.g * (masses - own)
        order = np.arange(masses.size) if self.denser else np.arange(masses.size)[::-1]  # densest first
        reach = np.cumsum(own[order])
        room = self.window_nu(lo, lo + reach) if self.denser else self.window_nu(hi - reach, hi)
        if np.any(held < 0.0) or np.any(own > masses * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE) or np.any(
            np.cumsum(held[order]) > room + EDGE_TOLERANCE
        ):
            return None
        return own, held, order

    def _members(self, s: int, e: int, own: np.ndarray) -> None:
        """Record tokens ``s..e-1`` as one group owning ``own`` of its slot (it may swallow
        earlier groups: their tilings go)."""
        if self._first is None:
            self._first = np.full(self.size, -1, dtype=np.int64)
            self._end = np.zeros(self.size, dtype=np.int64)
            self._own = np.zeros(self.size)
        self._first[s:e], self._end[s:e], self._own[s:e] = s, e, own
        for first in [f for f in self.tiled if s <= f < e]:
            del self.tiled[first]

    def slot(self, i: int):
        """``(lo, hi, own)`` of token ``i``, measured from this side's end."""
        s = self.group_first(i)
        if s >= 0:
            return float(self.edge(s)), float(self.edge(int(self._end[i]))), float(self._own[i])
        lo, hi = self.pair(i)
        return lo, hi, min(hi - lo, float(self.masses[i]))

    def pair(self, i: int) -> tuple[float, float]:
        """``(edges[i], edges[i + 1])`` as floats, solving them if missing."""
        lo, hi = float(self.edges[i]), float(self.edges[i + 1])
        if lo != lo or hi != hi:  # (NaN: not solved yet)
            lo, hi = map(float, self.edge(np.array([i, i + 1])))
        return lo, hi


def _concave_root(z: np.ndarray, want: np.ndarray, phi, slope, most: float, g: float) -> np.ndarray:
    """Solve ``phi(z) = want`` in ``[0, most]`` for a concave ``phi`` rising from ``phi(0) = 0``,
    from guesses ``z``.

    For the slot edges of a piece short against its keys' scale (:meth:`_PoolPiece.build`):
    ``phi`` is evaluated without cancellation, the guesses are the u-space roots. Newton
    from below a root climbs to it monotonically (the tangent lies above a concave
    function), and one step from above lands below it; a guess past the maximum restarts
    from 0. An entry stops when its residual is at the rounding of ``phi`` (``~g z``): the
    root is then as exact as the data (near the maximum ill-conditioned, but never past it;
    a piece so short that ``phi`` is all rounding gets edges that are noise, but inside it).
    """
    z = np.clip(np.array(z, dtype=float).reshape(-1), 0.0, most)
    want = np.broadcast_to(np.asarray(want, dtype=float).reshape(-1), z.shape)
    with np.errstate(invalid="ignore"):
        z[~(slope(z) > 0.0)] = 0.0
    active = np.arange(z.size)
    for _ in range(NEWTON_STEPS):
        if not active.size:
            break
        zi, wi = z[active], want[active]
        value = phi(zi) - wi
        rate = slope(zi)
        stop = (np.abs(value) <= 4e-16 * (2.0 * g * zi + np.abs(wi))) | ~(rate > 0.0)
        step = np.divide(value, rate, out=np.zeros_like(value), where=~stop)
        z[active] = np.clip(zi - step, 0.0, most)
        stop |= np.abs(step) <= 1e-16 * zi
        active = active[~stop]
    return z


def _power_root(rhs: np.ndarray, g: float, k: int, rising: bool, start: float) -> np.ndarray:
    """Solve ``u^K - g u = rhs`` elementwise on its rising (``u >= u_star``) or falling branch.

    ``K = 2`` is the quadratic formula. Otherwise Newton's method from a point beyond the
    root (:func:`_newton_starts`; never further than ``start``, the far end of the branch):
    ``u^K - g u`` is convex, so the iterates move monotonically to the root without
    overshooting. Converged entries leave the iteration. A right-hand side at (or, by
    rounding, below) the minimum ``phi*`` is the minimum point ``u*`` itself (a double root,
    where Newton would only creep).
    """
    rhs = np.asarray(rhs, dtype=float)
    if k == 2:
        root = np.sqrt(np.maximum(g * g + 4.0 * rhs, 0.0))
        return 0.5 * (g + root) if rising else 0.5 * (g - root)
    u_star = (g / k) ** (1.0 / (k - 1))
    phi_star = u_star**k - g * u_star
    low, high = min(u_star, start), max(u_star, start)  # the branch: every root lies in it
    floor = min(high, 0.5)  # (steps relative to the roots' scale, also for a piece near key 1)
    if not u_star > 0.0:  # g underflowed (a piece within ~1e-20 of key 1): u^K = rhs
        return _inside(np.power(np.maximum(rhs, 0.0), 1.0 / k).reshape(-1), low, high, start).reshape(rhs.shape)
    if rhs.size <= 8:  # a few roots: the same iteration on Python floats (no array overhead)
        out = np.empty(rhs.shape)
        flat = out.reshape(-1)
        for i, r in enumerate(rhs.reshape(-1).tolist()):
            z = _newton_start(r, g, k, rising, start, u_star, phi_star) if r > phi_star else u_star
            for _ in range(NEWTON_STEPS if r > phi_star else 0):
                power = z ** (k - 1)
                slope = k * power - g
                value = power * z - g * z - r
                step = value / slope if slope != 0.0 else 0.0
                # (inside the branch: where u^K underflows, value / slope is rounding noise)
                z = min(max(z - step, low), high)
                if abs(step) <= NEWTON_STEP_TOLERANCE * max(abs(z), floor) or abs(value) <= 4e-16 * (
                    abs(r) + abs(z) * (abs(power) + g)
                ):
                    break
            flat[i] = z
        return out
    starts = np.where(rhs <= phi_star, u_star, _newton_starts(rhs, g, k, rising, start))
    if u_star > DELICATE_U:
        return _newton(starts.reshape(-1), rhs.reshape(-1), g, k, 1.0 if rising else -1.0, phi_star).reshape(rhs.shape)
    with np.errstate(over="ignore", invalid="ignore"):  # (rounding noise near key 1: _inside)
        roots = _newton(starts.reshape(-1), rhs.reshape(-1), g, k, 1.0 if rising else -1.0, phi_star)
    return _inside(roots, low, high, start).reshape(rhs.shape)


def _power_root_both(rising_rhs: np.ndarray, falling_rhs: np.ndarray, g: float, k: int, rising_start: float,
                     falling_start: float) -> np.ndarray:
    """:func:`_power_root` on the rising branch for ``rising_rhs`` and on the falling one for
    ``falling_rhs``, concatenated, with one Newton iteration for all."""
    if k == 2:
        return np.concatenate([_power_root(rising_rhs, g, k, True, rising_start),
                               _power_root(falling_rhs, g, k, False, falling_start)])
    u_star = (g / k) ** (1.0 / (k - 1))
    if not u_star > 0.0:  # (g underflowed)
        return np.concatenate([_power_root(rising_rhs, g, k, True, rising_start),
                               _power_root(falling_rhs, g, k, False, falling_start)])
    phi_star = u_star**k - g * u_star
    rhs = np.concatenate([rising_rhs, falling_rhs])
    starts = np.concatenate([_newton_starts(rising_rhs, g, k, True, rising_start),
                             _newton_starts(falling_rhs, g, k, False, falling_start)])
    sign = np.concatenate([np.ones(rising_rhs.size), -np.ones(falling_rhs.size)])
    if u_star > DELICATE_U:
        return _newton(np.where(rhs <= phi_star, u_star, starts), rhs, g, k, sign, phi_star)
    with np.errstate(over="ignore", invalid="ignore"):
        roots = _newton(np.where(rhs <= phi_star, u_star, starts), rhs, g, k, sign, phi_star)
    n = rising_rhs.size
    return np.concatenate([_inside(roots[:n], min(u_star, rising_start), max(u_star, rising_start), rising_start),
                           _inside(roots[n:], min(u_star, falling_start), max(u_star, falling_start), falling_start)])


def _inside(roots: np.ndarray, low: float, high: float, start: float) -> np.ndarray:
    """``roots`` kept inside their branch ``[low, high]`` (a NaN becomes ``start``, its far
    end). Where ``u^K`` underflows (a piece within ~1e-20 of key 1 at K = 16; ``u* <=
    DELICATE_U``) Newton's steps are rounding noise and may leave the branch; the nu-masses
    there are below 1e-300, so any point of the branch is as good (and the piece's
    certificate checks). Elsewhere Newton from these starts stays inside by convexity."""
    if roots.size and not (roots.min() >= low and roots.max() <= high):  # (also catches a NaN)
        roots = np.clip(np.where(np.isnan(roots), start, roots), low, high)
    return roots


def _newton(starts: np.ndarray, rhs: np.ndarray, g: float, k: int, sign, phi_star: float) -> np.ndarray:
    """Newton's method for ``u^K - g u = rhs`` from ``starts`` (beyond the roots), on the
    branch where the slope has the sign ``sign`` (+1 rising, -1 falling; a scalar or per
    entry); entries with ``rhs <= phi*`` keep their start (``u*``)."""
    u = np.array(starts, dtype=float)
    active = np.flatnonzero(rhs > phi_star)
    z, r = u[active], rhs[active]
    sign = sign if np.isscalar(sign) else sign[active]
    # the slope keeps its branch's sign (it is 0 only at u*, which the iterates never pass)
    tiny = np.finfo(float).tiny
    # the rounding level of each residual u^K - g u - rhs (its scale taken at the start, which
    # is close to the root): below it the root is as good as the data (near u* the root is
    # ill-conditioned, and Newton would only creep by rounding noise / slope)
    noise = 4e-16 * (np.abs(r) + z * (_power(z.copy(), k - 1) + g))
    # steps count relative to the roots' scale (1/2 as a floor; less for a piece near key 1,
    # where every u is tiny)
    floor = 0.5 if not z.size or z[0] >= 0.5 else min(float(z.max()), 0.5)  # (one piece: one scale)
    for step_count in range(NEWTON_STEPS):
        if not active.size:
            break
        power = _power(z * z, (k - 1) // 2) * (z if k % 2 == 0 else 1.0) if k > 2 else z.copy()
        slope = k * power - g
        slope *= sign
        np.maximum(slope, tiny, out=slope)
        slope *= sign
        value = power - g
        value *= z
        value -= r
        if step_count >= 8:  # the stragglers: converged entries leave one by one
            settled = np.abs(value) <= noise
        elif step_count >= 2 and np.all(np.abs(value) <= noise):  # (from these starts Newton needs 3+ steps)
            break
        step = np.divide(value, slope, out=value)
        z -= step
        if step_count >= 8:
            done = settled | (np.abs(step) <= NEWTON_STEP_TOLERANCE * np.maximum(z, floor))
            if done.all():
                break
            if done.any():
                u[active[done]] = z[done]
                keep = ~done
                active, z, r, noise = active[keep], z[keep], r[keep], noise[keep]
                sign = sign if np.isscalar(sign) else sign[keep]
        elif step_count >= 2 and np.abs(step).max() <= NEWTON_STEP_TOLERANCE * floor:
            break
    u[active] = z
    return u


def _newton_starts(rhs: np.ndarray, g: float, k: int, rising: bool, start: float) -> np.ndarray:
    """Starting points for :func:`_power_root`: beyond the root on its branch, and close.

    ``phi(u) = u^K - g u`` has its minimum ``phi*`` at ``u* = (g / K)^(1 / (K - 1))``, and
    its third derivative is >= 0. On the rising branch ``phi`` lies above its quadratic
    Taylor polynomial at ``u*``, so that polynomial's root is beyond the root; so is each
    step of ``u = (rhs + g u)^(1/K)`` from ``start`` (better far from ``u*``). On the
    falling branch the polynomial's root lies between the root and ``u*``; one Newton step
    from there (a tangent lies below a convex function) lands beyond the root; so does
    ``-rhs / g`` plus one fixed-point step, better far from ``u*`` (the larger of the two
    is taken). Either way no further than ``start``, the far end of the branch, which is
    beyond the root too.
    """
    u_star = (g / k) ** (1.0 / (k - 1))
    phi_star = u_star**k - g * u_star
    curve = k * (k - 1) * u_star ** (k - 2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        half = np.sqrt(np.maximum(2.0 * (rhs - phi_star), 0.0) / curve)
        if rising:  # (not at u* itself, where the slope is 0 up to rounding)
            # far from u*, better: two steps of u = (rhs + g u)^(1/K) from the far end, which
            # fall monotonically to the root (the map's slope g / (K u^(K-1)) is below 1 there)
            far = np.full(rhs.shape, float(start))
            for _ in range(2):
                far = np.power(np.maximum(rhs + g * far, 0.0), 1.0 / k)
            return np.minimum(np.minimum(u_star + np.maximum(half, 1e-6 * u_star), start), far)
        z = u_star - half
        power = _power(z.copy(), k - 1)
        slope = k * power - g
        z = z - np.where(slope < 0.0, ((power - g) * z - rhs) / slope, np.inf)
        # far from u*, better: u0 = -rhs / g and one step of u = (u^K - rhs) / g from it
        # (phi(u0) - rhs = u0^K >= 0, so u0 and the step, u0 + u0^K / g, stay below the root)
        small = -rhs / g
        small += _power(small.copy(), k) / g
        out = np.maximum(np.where(np.isfinite(z), np.maximum(z, start), start), small)
        # (g underflowing to 0 makes small infinite or NaN: the far end is beyond the root too)
        return np.where(out <= u_star, out, start)


def _newton_start(rhs: float, g: float, k: int, rising: bool, start: float, u_star: float, phi_star: float) -> float:
    """:func:`_newton_starts` for one ``rhs > phi*``, on Python floats."""
    curve = k * (k - 1) * u_star ** (k - 2)  # 0 where u* underflows: start at the far end
    half = math.sqrt(max(2.0 * (rhs - phi_star), 0.0) / curve) if curve > 0.0 else math.inf
    if rising:
        return min(u_star + max(half, 1e-6 * u_star), start)
    if not half <= 1.0:  # (z < 0 <= start; and z ** K could overflow, an error on floats)
        return start
    z = u_star - half
    slope = k * z ** (k - 1) - g
    if not slope < 0.0:
        return start
    z -= (z**k - g * z - rhs) / slope
    return max(z, start) if math.isfinite(z) else start


class _Spread:
    """Fact 6: ``x = q`` (an optimum of 1) on one piece whose *units* are ratio buckets, and
    every token of a bucket spread over the bucket's own part and the pool.

    Token ``t`` of unit ``u`` owns ``l_t = (q_t - g p_t) c_u`` of the unit's own part
    (``c_u = own_u / (Q_u - g P_u)``, so the ``l_t`` add up to ``own_u``) and puts
    ``p_t - l_t`` into the pool. A bucket whose own part is not dense (front) or sparse
    (back) enough for all its tokens -- typically a top bucket that owns all its length --
    is *expanded*: its tokens become units of their own (sorted; such buckets are few).

    Attributes:
        piece: the :class:`_PoolPiece` over the units.
        masses, x: ``(n,)`` ``P_u`` and ``Q_u`` of the units, ``q/p`` descending.
        top: ``(n + 1,)`` draft mass before each unit.
        c: ``(n,)`` ``c_u`` above.
        g: the piece's mean density (1 up to rounding).
        unit_of_atom: ``(buckets,)`` the unit of each bucket (-1: expanded).
        expanded: ``{token: unit}`` for the tokens of expanded buckets.
    """

    def __init__(self, piece, masses, x, top, c, g, unit_of_atom, expanded, local=None):
        self.piece, self.masses, self.x, self.top, self.c, self.g = piece, masses, x, top, c, g
        self.unit_of_atom, self.expanded = unit_of_atom, expanded
        # token -> (group, position, own) for the tokens of groups tiled token by token;
        # group -> [(front, first, end, own, held), its piece once built]
        self.local, self._groups = local if local is not None else ({}, {})

    @classmethod
    def build(cls, targets, masses, k, bucket_mass, desc, atom_of_bucket, bounds):
        """The spread rule, or ``None`` when ``x = q`` is not certified feasible or some
        token would need more than its length (then fact 5 goes on)."""
        r_lo, r_hi = bounds
        n = bucket_mass.size
        occupied = np.flatnonzero(atom_of_bucket >= 0)
        q_a = np.bincount(desc, weights=targets, minlength=atom_of_bucket.size)[occupied]
        p_a = bucket_mass
        # x = q is feasible iff q(C) <= f(C) for every prefix C in q/p order, i.e. for the
        # rest R = V \ C: q(R) >= p(R)^K. Rests are summed from the tail, so that the tiny
        # masses there keep their digits.
        p_rest = np.concatenate([np.cumsum(p_a[::-1])[::-1], [0.0]])  # p of buckets a.. n-1
        q_rest = np.concatenate([np.cumsum(q_a[::-1])[::-1], [0.0]])
        c = np.minimum(p_rest, 1.0) ** k  # 1 - f at the bucket ends
        margin = 1.0 + CERTIFICATE_MARGIN
        # at the bucket ends (the first is 1 = 1) ...
        if np.any(q_rest[1:-1] < c[1:-1] * margin):
            return None
        # ... and inside bucket a, after draft mass s of it: q(R) >= q_rest[a + 1] +
        # max(Q_a - r_hi s, r_lo (P_a - s)), a convex bound whose kink is its worst point
        # against the chord of the convex 1 - f
        with np.errstate(divide="ignore", invalid="ignore"):
            kink = np.clip((q_a - r_lo * p_a) / (r_hi - r_lo), 0.0, p_a)
        bound = q_rest[1:] + np.maximum(q_a - r_hi * kink, r_lo * (p_a - kink))
        chord = c[:-1] + (c[1:] - c[:-1]) * (kink / p_a)
        loose = np.flatnonzero(bound < chord * margin)
        if loose.size > SPREAD_EXACT_BUCKETS:
            return None
        tokens_of = {}  # bucket atom -> its tokens, q/p descending (for exact checks and expansion)

        def fetch(atoms):  # the tokens of these bucket atoms, in one pass over the vocabulary
            need = sorted({int(a) for a in atoms} - tokens_of.keys())
            if need:
                chosen = np.zeros(atom_of_bucket.size, dtype=bool)
                chosen[occupied[need]] = True
                inside = np.flatnonzero(chosen[desc])
                inside = inside[np.lexsort((masses[inside] / targets[inside], desc[inside]))]
                cuts = np.searchsorted(desc[inside], occupied[need])
                for a, part in zip(need, np.split(inside, cuts[1:])):
                    tokens_of[a] = part

        def tokens_in(a):
            if a not in tokens_of:
                fetch([a])
            return tokens_of[a]

        counts = []  # tokens per bucket atom, counted when first needed

        def count(atoms):
            if not counts:
                counts.append(np.bincount(desc, minlength=atom_of_bucket.size)[occupied])
            return int(counts[0][np.asarray(atoms, dtype=np.int64)].sum())

        fetch(loose)
        for a in loose:  # too loose (typically the top bucket): check its tokens exactly
            inside = tokens_in(a)
            s = np.cumsum(masses[inside])[:-1]
            u = np.cumsum(targets[inside])[:-1]
            if np.any(q_rest[a] - u < np.maximum(p_rest[a] - s, 0.0) ** k * margin):
                return None
        expand: list[int] = []
        for _ in range(SPREAD_ROUNDS):
            unit_of_atom = np.arange(n)
            if expand:  # each expanded bucket becomes its tokens, in place
                extra = np.zeros(n, dtype=np.int64)
                for a in expand:
                    extra[a] = tokens_in(a).size - 1
                unit_of_atom = unit_of_atom + np.concatenate([[0], np.cumsum(extra)[:-1]])
                cuts = np.sort(expand)
                parts_p, parts_q, parts_lo, parts_hi, prev = [], [], [], [], 0
                for a in cuts:
                    t = tokens_in(a)
                    ratio = targets[t] / masses[t]
                    parts_p += [p_a[prev:a], masses[t]]
                    parts_q += [q_a[prev:a], targets[t]]
                    parts_lo += [r_lo[prev:a], ratio]
                    parts_hi += [r_hi[prev:a], ratio]
                    prev = a + 1
                u_p = np.concatenate(parts_p + [p_a[prev:]])
                u_q = np.concatenate(parts_q + [q_a[prev:]])
                u_lo = np.concatenate(parts_lo + [r_lo[prev:]])
                u_hi = np.concatenate(parts_hi + [r_hi[prev:]])
                tokens = np.concatenate([tokens_in(a) for a in cuts])
                firsts = np.repeat(unit_of_atom[cuts], [tokens_in(a).size for a in cuts])
                starts = np.repeat(np.cumsum([0] + [tokens_in(a).size for a in cuts])[:-1], [tokens_in(a).size for a in cuts])
                expanded = dict(zip(tokens.tolist(), (firsts + np.arange(tokens.size) - starts).tolist()))
                unit_of_atom[cuts] = -1
            else:
                u_p, u_q, u_lo, u_hi, expanded = p_a, q_a, r_lo, r_hi, {}
            built = cls._tile(u_p, u_q, u_lo, u_hi, k)
            if built is None:
                return None
            piece, own, gap, g, bad = built
            local = None
            if bad.size:  # in tiled groups: tile those groups token by token, in place
                def unit_tokens(units, atom_of_unit=_inverse(unit_of_atom, u_p.size),
                                token_of_unit={v: t for t, v in expanded.items()}):
                    atoms = atom_of_unit[units]
                    fetch(atoms[atoms >= 0])  # (one pass over the vocabulary)
                    return [tokens_in(int(a)) if a >= 0 else np.array([token_of_unit[int(u)]])
                            for a, u in zip(atoms, units)]

                local = cls._tile_groups_by_token(piece, bad, unit_tokens, targets, masses)
            if bad.size == 0 or local is not None:
                top = np.concatenate([[0.0], np.cumsum(u_p)])
                return cls(piece, u_p, u_q, top, own / gap, g, unit_of_atom, expanded, local)
            # expand the buckets whose units do not fit (a token unit always fits)
            new = [int(a) for a in np.flatnonzero(np.isin(unit_of_atom, bad))]
            if not new or count(expand + new) > SPREAD_EXPAND_TOKENS:
                return None
            expand += new
            fetch(expand)
        return None

    @staticmethod
    def _tile_groups_by_token(piece, bad, unit_tokens, targets, masses):
        """``(local, groups)`` when every unit in ``bad`` lies in a tiled group: each such
        group's slot is water-filled and tiled by the *tokens* of its units (the group's
        total length and ``nu``-mass, so the rest of the piece is unchanged); else ``None``."""
        n = piece.n
        keys = {}
        for u in bad.tolist():
            front = u < piece.front.size
            side = piece.front if front else piece.back
            first = side.group_first(u if front else n - 1 - u)
            if first < 0 or first not in side.tiled:
                return None
            keys[(front, first)] = side
        local, groups, total = {}, {}, 0
        for key, side in keys.items():
            front, first = key
            end = side.group_end(first)
            units = np.arange(first, end) if front else n - 1 - np.arange(first, end)  # this side's order
            tokens = np.concatenate([t if front else t[::-1] for t in unit_tokens(units)])
            total += tokens.size
            if total > SPREAD_GROUP_TOKENS:
                return None
            filled = side.fill_slot(masses[tokens], targets[tokens], float(side.edge(first)), float(side.edge(end)))
            if filled is None:
                return None
            own, held, order = filled
            groups[key] = [(front, first, end, own[order], held[order]), None]
            local.update(zip(tokens[order].tolist(), zip([key] * tokens.size, range(tokens.size), own[order].tolist())))
        return local, groups

    def certify(self, tolerance=None, notes=None):
        """``None`` if the spread realises ``x = q`` to float rounding, else what fails: the
        units' piece (``_PoolPiece.certify``, ``x`` of a unit = its ``Q``) and the pieces
        of the groups tiled token by token (built here). ``notes``: where the piece notes the
        fallbacks of its tiled groups (built later, lazily)."""
        self.piece.notes, self.piece.tolerance = notes, tolerance
        why = self.piece.certify(self.masses, self.x, skip=self._groups.keys(), tolerance=tolerance)
        if why is not None:
            return why
        for key, entry in self._groups.items():
            _, _, _, own, held = entry[0]
            why = _certify_piece(self._group_piece(key), own, held, tolerance)
            if why is not None:
                return f"group tiled by tokens: {why}"
        return None

    def _group_piece(self, key):
        """The piece tiling a group token by token, built at its first use."""
        entry = self._groups[key]
        if entry[1] is None:
            entry[1] = self.piece.tile_slot(*entry[0])
        return entry[1]

    @staticmethod
    def _tile(u_p, u_q, u_lo, u_hi, k):
        """Slots and pool over the units; ``None``, or ``(piece, own, gap, g, bad)`` with the
        units whose tokens would not fit (``bad``)."""
        n = u_p.size
        piece = _PoolPiece.build(u_p, u_q, 0.0, k, all_edges=True)
        if piece is None or piece.pool_len <= 0.0:
            return None
        g = piece.front.g
        n_front, n_back = piece.front.size, piece.back.size
        if n_front + n_back != n:
            return None  # a unit of mean density exactly g owns nothing
        own = np.zeros(n)
        for side, units in ((piece.front, np.arange(n_front)), (piece.back, n - 1 - np.arange(n_back))):
            if side.size:
                edges = side.edge(np.arange(side.size + 1))
                width = np.diff(edges)
                side_own = np.where(width > 0.0, np.minimum(width, side.masses), 0.0)
                if side._first is not None:  # members of a group own their share of the group's slot
                    members = np.flatnonzero(side._first >= 0)
                    first, end = side._first[members], side._end[members]
                    side_own[members] = np.where(edges[end] > edges[first], side._own[members], 0.0)
                own[units] = side_own
        front = np.arange(n) < n_front
        gap = u_q - g * u_p  # > 0 in front, < 0 at the back
        if np.any(own <= 0.0) or np.any(np.where(front, gap <= 0.0, gap >= 0.0)):
            return None
        mean = g + gap / own  # d_u, the mean density of unit u's own part
        # 0 <= l_t <= p_t: every token on its unit's side of g, and b_t <= d_u (front) or
        # b_t >= d_u (back); the ratios of unit u lie in [u_lo, u_hi]
        tol = SLOT_TOLERANCE
        side_ok = np.where(front, u_lo >= g * (1.0 - tol), u_hi <= g * (1.0 + tol))
        if not np.all(side_ok):
            return None
        fits = np.where(front, u_hi <= mean * (1.0 + tol), u_lo >= mean * (1.0 - tol))
        return piece, own, gap, g, np.flatnonzero(~fits)

    def unit_of(self, token: int, atom: int) -> int:
        """The unit of ``token`` (of bucket atom ``atom``)."""
        unit = int(self.unit_of_atom[atom])
        return unit if unit >= 0 else self.expanded[int(token)]

    def units(self, atom_of_token: np.ndarray) -> np.ndarray:
        """The unit of every token, from the bucket atom of every token."""
        out = self.unit_of_atom[atom_of_token]
        for t, u in self.expanded.items():
            out[t] = u
        return out

    def own(self, u: int, mass: float, target: float) -> float:
        """``l_t``: how much of unit ``u``'s own part a token owns."""
        return min(max((target - self.g * mass) * float(self.c[u]), 0.0), mass)

    def fragments(self, token: int, u: int, mass: float, target: float) -> list[tuple[float, float, float]]:
        """Key law of ``token`` of unit ``u``: its share of the unit's own part (or of its
        group's slot, tiled token by token) and of the pool, as ``(start, end, weight)``."""
        piece = self.piece
        if token in self.local:
            key, position, l_t = self.local[token]
            out = self._group_piece(key).fragments(position, l_t) if l_t > 0.0 else []
            if mass - l_t > 0.0:
                out.append((piece.start + piece.pool_start, piece.start + piece.pool_start + piece.pool_len,
                            (mass - l_t) / piece.pool_len))
            return out
        l_t = self.own(u, mass, target)
        unit_own = piece._slot(u)[2]
        out = [(s, e, w * l_t / unit_own) for s, e, w in piece.fragments(u, unit_own)] if l_t > 0.0 else []
        if mass - l_t > 0.0:
            out.append((piece.start + piece.pool_start, piece.start + piece.pool_start + piece.pool_len,
                        (mass - l_t) / piece.pool_len))
        return out

    def sample_key(self, token: int, u: int, mass: float, target: float, uniform: float) -> float:
        """Global key of a draft of ``token`` (of unit ``u``) from one uniform number."""
        piece = self.piece
        if token in self.local:
            key, position, l_t = self.local[token]
            w = uniform * mass
            if w < l_t:
                return self._group_piece(key).sample_key(position, l_t, w / l_t)
            return float(piece.start + piece.pool_start + (w - l_t) / (mass - l_t) * piece.pool_len)
        l_t = self.own(u, mass, target)
        w = uniform * mass
        if w < l_t:
            return piece.sample_key(u, piece._slot(u)[2], w / l_t)
        return float(piece.start + piece.pool_start + (w - l_t) / (mass - l_t) * piece.pool_len)


class _Atoms:
    """The atoms of a selection rule, in ``q/p``-descending order, with their pieces.

    An atom is a set of tokens that share one key law (normalised by the atom's draft
    mass), so token ``t`` of atom ``a`` gets ``x_t = p_t x_a / P_a``. Atoms are single tokens
    (:meth:`tokens`, the lexicographically optimal ``x``) or ratio buckets with single
    tokens where buckets would lose acceptance (:meth:`buckets`, fact 5).

    Attributes:
        masses: ``(n,)`` draft mass ``P_a`` of each atom.
        x: ``(n,)`` ``x`` of each atom (every block tight).
        blocks: ``(m + 1,)`` block (piece) starts, ``n`` appended.
        top: ``(n + 1,)`` draft mass of the atoms before each atom.
        bucket_atoms: number of atoms that are buckets (0 for :meth:`tokens`).
        token_atoms: number of atoms that are single tokens.
        spread: ``None``, or the :class:`_Spread` of fact 6 (then ``x = q`` and the tokens
            of a bucket spread over its own part and the pool in their own proportions).
    """

    def __init__(self, masses, x, blocks, top, atom_of, ranks, token_x, bucket_atoms=0, spread=None,
                 positive=False):
        self.masses, self.x, self.blocks, self.top = masses, x, blocks, top
        self.positive = positive  # every p and q > 0 (checked)
        self.spread = spread  # a _Spread (fact 6): tokens of an atom do not share one key law
        # atom_of(t): atom of token t (-1: none); ranks(): all of them, (V,);
        # token_x(): x of every token, (V,) (0 where p = 0 or q = 0)
        self.atom_of, self.ranks, self.token_x = atom_of, ranks, token_x
        self.bucket_atoms = bucket_atoms
        self.token_atoms = masses.size - bucket_atoms

    @classmethod
    def tokens(cls, draft, target, k):
        order, x, blocks, top = lex_optimal_induced(draft=draft, target=target, num_drafts=k)
        rank = np.full(draft.size, -1, dtype=np.int64)
        rank[order] = np.arange(order.size)
        def token_x():
            out = np.zeros(draft.size)
            out[order] = x
            return out

        atoms = cls(np.take(draft, order), x, blocks, top, lambda t: int(rank[t]), lambda: rank, token_x)
        atoms.order = order
        return atoms

    @classmethod
    def buckets(cls, draft, target, k, fallbacks=None, tolerance=None):
        """Ratio buckets as atoms (fact 5). ``None`` (use :meth:`tokens`) if ``q/p``
        overflows or no token has ``p > 0`` and ``q > 0``. A spread (fact 6) that fails its
        certificate (``tolerance``: :meth:`_Spread.certify`) is noted in the list
        ``fallbacks`` and fact 5 goes on."""
        # the usual case (softmax outputs): every p, q > 0, seen from the buckets themselves
        # (a zero p makes q/p infinite or NaN, a zero q makes it 0: the extreme bucket keys)
        main, pm, qm = None, draft, target
        sums = _bucket_sums(qm, pm, BUCKET_BITS, positive=True)
        if sums is None:  # some p or q is 0 (or q/p overflowed): only tokens with p, q > 0
            main = np.flatnonzero((draft > 0) & (target > 0))
            pm, qm = draft[main], target[main]
            if pm.size == 0:  # no token with p > 0 and q > 0: nothing to bucket
                return None
            sums = _bucket_sums(qm, pm, BUCKET_BITS)
            if sums is None:  # q/p overflowed
                return None
        if main is None and _may_be_one(sums[2], sums[3], k):  # try fact 6 first: no bucket problem
            # with coarser buckets (fewer units, cheaper), else these
            for level in (_coarser(sums, BUCKET_BITS, SPREAD_BITS), sums):
                desc, occupied, bucket_mass, r_lo, r_hi, nb = level[:6]
                atom_of_bucket = np.full(nb, -1, dtype=np.int64)
                atom_of_bucket[occupied] = np.arange(occupied.size)
                spread = _Spread.build(qm, pm, k, bucket_mass, desc, atom_of_bucket, (r_lo, r_hi))
                why = spread.certify(tolerance, fallbacks) if spread is not None else None
                if why is not None:  # (rounding broke it: the next level, else fact 5)
                    if fallbacks is not None:
                        fallbacks.append(f"spread (fact 6, {spread.masses.size} units) -> next: {why}")
                    spread = None
                if spread is not None:  # fact 6: an optimum of 1, no sort; the atoms are its units
                    n_units = spread.masses.size
                    return cls(spread.masses, spread.x, np.array([0, n_units]), spread.top,
                               lambda t, a=atom_of_bucket, d=desc, s=spread: s.unit_of(t, int(a[d[t]])),
                               lambda a=atom_of_bucket, d=desc, s=spread: s.units(a[d]), lambda: target.copy(),
                               bucket_atoms=n_units - len(spread.expanded), spread=spread, positive=True)
        masses, x, blocks, top, desc, atom_of_bucket, uncertified, bounds = _bucket_level(
            qm, pm, k, 0.0, BUCKET_BITS, sums=sums)
        n_buckets = masses.size
        split_pos = split_atoms = None  # positions (ascending) and atoms of the split tokens
        if uncertified is not None:
            j0, j1, a0, a1, inside, b0, b1 = uncertified
            # one piece over everything is x = q up to the buckets' rounding (an optimum of 1
            # that fact 6 could not serve): finer buckets cannot certify any of it, so sort
            whole = blocks.size == 2 and a0 == 0 and a1 == masses.size
            bits = MAX_BUCKET_BITS + 1 if whole else BUCKET_BITS + BUCKET_BITS
            if j0 == j1 and not whole:
                # one piece: x = s q on its tokens, s = its x over its true q. Buckets narrower
                # than a factor 1 + |s - 1| certify it, so a few more bits than log2(1/|s - 1|)
                # are enough (often 8 or 9 instead of 12: far fewer atoms)
                slope_gap = abs(float(x[a0:a1].sum()) / float(qm[inside].sum()) - 1.0)
                if slope_gap > 0.0:
                    bits = min(max(math.ceil(-math.log2(slope_gap)) + 1, BUCKET_BITS + 1), bits)
            sub = _split_segment(qm[inside], pm[inside], k, float(top[a0]), bits)
            masses, x, blocks, top = _splice(masses, x, blocks, top, j0, j1, a0, a1, sub[:4])
            atom_of_bucket[atom_of_bucket >= a1] += sub[0].size - (a1 - a0)
            atom_of_bucket[b0 : b1 + 1] = -2  # split: look the token up
            split_pos, split_atoms = inside, a0 + sub[4]
            n_buckets += sub[5] - (a1 - a0)
        position = None if main is None else np.full(draft.size, -1, dtype=np.int64)
        if position is not None:
            position[main] = np.arange(main.size)

        def atom_of(t):
            i = t if position is None else position[t]
            if i < 0:
                return -1
            a = int(atom_of_bucket[desc[i]])
            return a if a != -2 else int(split_atoms[np.searchsorted(split_pos, i)])

        def full(values, fill):  # values per counted token -> (V,)
            if main is None:
                return values
            out = np.full(draft.size, fill, dtype=values.dtype)
            out[main] = values
            return out

        def ranks():
            out = atom_of_bucket[desc]
            if split_pos is not None:
                out[split_pos] = split_atoms
            return full(out, -1)

        def token_x():  # one V-long array: x_t = p_t * level of its atom
            level = x / masses
            # per bucket; the markers -1 (empty) and -2 (split: set per token below) are
            # never used as indices (level[-2] would be another atom's, or out of bounds)
            kept = atom_of_bucket >= 0
            per_bucket = np.zeros(atom_of_bucket.size)
            per_bucket[kept] = level[atom_of_bucket[kept]]
            out = per_bucket[desc]
            out *= pm
            if split_pos is not None:
                out[split_pos] = pm[split_pos] * level[split_atoms]
            return full(out, 0.0)

        return cls(masses, x, blocks, top, atom_of, ranks, token_x, bucket_atoms=n_buckets, positive=main is None)


def _inverse(unit_of_atom: np.ndarray, n_units: int) -> np.ndarray:
    """``atom_of_unit``: the bucket atom of each unit (-1 for a token unit)."""
    out = np.full(n_units, -1, dtype=np.int64)
    kept = unit_of_atom >= 0
    out[unit_of_atom[kept]] = np.flatnonzero(kept)
    return out


def _bucket_sums(targets, masses, bits, most=None, positive=False):
    """Bucket tokens by ``bits`` mantissa bits of ``q/p`` (one pass, no sort).

    Returns:
        ``None`` if ``q/p`` overflowed (or the buckets would span ``most`` keys or more, or,
        with ``positive``, some ratio is 0, subnormal, infinite or NaN), else ``(desc,
        occupied, bucket_mass, r_lo, r_hi, n_keys, top_key)``: each token's bucket (0 holds
        the largest ratios), the buckets that hold tokens, their draft masses and ratio
        ranges ``[r_lo, r_hi)``, the number of bucket keys and the largest key.
    """
    shift = np.uint64(52 - bits)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # (p = 0 or overflow: seen below)
        ratio = np.divide(targets, masses)
    key = np.right_shift(ratio.view(np.uint64), shift, out=ratio.view(np.uint64)).view(np.int64)  # rises with q/p
    hi, lo = int(key.max()), int(key.min())
    if hi >= int(np.float64(np.inf).view(np.uint64) >> shift) or (most is not None and hi - lo >= most):
        return None
    if positive and lo < 1 << bits:  # exponent bits 0: a ratio of 0 (or subnormal)
        return None
    desc = np.subtract(hi, key, out=key)  # bucket 0 holds the largest ratios
    nb = hi - lo + 1
    mass_b = np.bincount(desc, weights=masses, minlength=nb)
    occupied = np.flatnonzero(mass_b)  # p > 0 on every counted token
    edge = (hi - occupied).astype(np.uint64)
    r_lo, r_hi = (edge << shift).view(np.float64), ((edge + np.uint64(1)) << shift).view(np.float64)
    return desc, occupied, mass_b[occupied], r_lo, r_hi, nb, hi


def _coarser(sums, bits: int, coarse_bits: int):
    """:func:`_bucket_sums` with ``coarse_bits`` instead of ``bits``, from the finer sums
    (one pass over the vocabulary for the tokens' buckets; the rest over the buckets)."""
    desc, occupied, bucket_mass, _, _, _, hi = sums
    drop = bits - coarse_bits
    top = hi >> drop
    # (in place: a fresh V-long temporary can cost more in page faults than the arithmetic)
    coarse_desc = np.subtract(hi, desc)
    np.right_shift(coarse_desc, drop, out=coarse_desc)  # the coarse key ...
    np.subtract(top, coarse_desc, out=coarse_desc)  # ... counted from the top
    of_bucket = top - ((hi - occupied) >> drop)  # non-decreasing along the occupied buckets
    starts = np.flatnonzero(np.diff(of_bucket, prepend=-1))
    coarse_occupied = of_bucket[starts]
    edge = (top - coarse_occupied).astype(np.uint64)
    shift = np.uint64(52 - coarse_bits)
    r_lo, r_hi = (edge << shift).view(np.float64), ((edge + np.uint64(1)) << shift).view(np.float64)
    return (coarse_desc, coarse_occupied, np.add.reduceat(bucket_mass, starts), r_lo, r_hi,
            int(coarse_occupied[-1]) + 1, top)


def _may_be_one(bucket_mass, r_lo, k) -> bool:
    """False when the buckets alone show that the optimum is below 1: ``x = q`` needs
    ``q(C) <= f(C)`` for every prefix ``C`` in ``q/p`` order, and ``q`` of a bucket prefix
    is at least ``sum r_lo P``. (True says nothing: fact 6 checks it exactly.)"""
    top = np.minimum(np.cumsum(bucket_mass), 1.0)
    least = np.cumsum(r_lo * bucket_mass)
    return not np.any(least > (1.0 - (1.0 - top) ** k) * (1.0 + 1e-9))


def _bucket_level(targets, masses, k, start, bits, most=None, sums=None):
    """One level of fact 5: bucket tokens by ``bits`` mantissa bits of ``q/p``, solve the
    bucket problem on keys from ``start``, and find the buckets the certificate cannot pass.

    Args:
        targets: ``(n,)`` target masses of the tokens (positive).
        masses: ``(n,)`` their draft masses (positive).
        k: K.
        start: draft mass before these tokens (they are tight at both ends).
        bits: mantissa bits of ``q/p`` that name a bucket.
        most: give up (``None``) if the buckets would span more than this many keys.

    Returns:
        ``None`` if ``q/p`` overflowed (or ``most`` was exceeded), else ``(masses, x, blocks, top, desc,
        atom_of_bucket, uncertified, (r_lo, r_hi))``: the bucket atoms (largest ratios
        first), each token's bucket ``desc``, the atom of each bucket, ``None`` or ``(j0,
        j1, a0, a1, inside, b0, b1)``: the pieces ``j0..j1`` (atoms ``a0..a1-1``, buckets
        ``b0..b1``) to split, with the tokens ``inside`` them, and each atom's ratio range.
    """
    sums = sums if sums is not None else _bucket_sums(targets, masses, bits, most)
    if sums is None:
        return None
    desc, occupied, bucket_mass, r_lo, r_hi, nb = sums[:6]
    # the bucket problem: every ratio rounded to its bucket's middle (any positive
    # stand-in for q keeps x feasible; the certificate below uses the true ratios)
    # (r_lo + r_hi overflows for ratios near the float maximum, e.g. a subnormal p: halves first)
    middle = 0.5 * r_lo + 0.5 * np.minimum(r_hi, np.finfo(float).max)
    x, blocks, top = _lex_pieces(bucket_mass.copy(), bucket_mass * middle, k, start)
    # certificate: token t of bucket a has x_t / q_t = level_a / r_t, r_t in [r_lo, r_hi)
    level = x / bucket_mass
    under = level <= r_lo * (1.0 - CERTIFICATE_MARGIN)  # x_t <= q_t for every token
    over = level >= r_hi * (1.0 + CERTIFICATE_MARGIN)  # x_t >= q_t for every token
    not_under, not_over = np.flatnonzero(~under), np.flatnonzero(~over)
    atom_of_bucket = np.full(nb, -1, dtype=np.int64)
    atom_of_bucket[occupied] = np.arange(occupied.size)
    uncertified = None
    if not_under.size and not_over.size and not_under[0] <= not_over[-1]:
        # the pieces from the first bucket that may be under-served to the last that may
        # be over-served: split into tokens, solved as one segment (tight at both ends)
        j0 = int(np.searchsorted(blocks, not_under[0], side="right")) - 1
        j1 = int(np.searchsorted(blocks, not_over[-1], side="right")) - 1
        a0, a1 = int(blocks[j0]), int(blocks[j1 + 1])
        b0, b1 = int(occupied[a0]), int(occupied[a1 - 1])
        if a0 == 0 and a1 == occupied.size:  # everything (typically an optimum of 1)
            inside = np.arange(desc.size)
        else:
            inside = np.flatnonzero(desc == b0 if b0 == b1 else (desc >= b0) & (desc <= b1))
        uncertified = (j0, j1, a0, a1, inside, b0, b1)
    return bucket_mass, x, blocks, top, desc, atom_of_bucket, uncertified, (r_lo, r_hi)


def _split_segment(targets, masses, k, start, bits):
    """Solve the tokens of a split segment: finer buckets while they help, else exactly.

    The segment is tight at both ends, so it is a problem of its own on the keys from
    ``start``. Its tokens are bucketed again with 6 more bits per level while the segment
    is large and the finer buckets certify some of it; the rest is sorted and solved with
    every token its own atom.

    Returns:
        ``(masses, x, blocks, top, local, n_buckets)``: the segment's atoms, the atom of
        each of its tokens (in input order) and how many atoms are buckets.
    """
    n = masses.size
    level = None
    if n > SORT_BELOW and bits <= MAX_BUCKET_BITS:
        level = _bucket_level(targets, masses, k, start, bits, most=2 * n + 1024)
    if level is not None:
        a_masses, x, blocks, top, desc, atom_of_bucket, uncertified, _ = level
        if uncertified is None:
            return a_masses, x, blocks, top, atom_of_bucket[desc], a_masses.size
        j0, j1, a0, a1, inside, _, _ = uncertified
        # if finer buckets certify nothing, more bits will not help (x = q on the whole
        # segment, typically an optimum of 1): sort instead
        if inside.size < n:
            sub = _split_segment(targets[inside], masses[inside], k, float(top[a0]), bits + BUCKET_BITS)
            n_buckets = a_masses.size - (a1 - a0) + sub[5]
            a_masses, x, blocks, top = _splice(a_masses, x, blocks, top, j0, j1, a0, a1, sub[:4])
            atom_of_bucket[atom_of_bucket >= a1] += sub[0].size - (a1 - a0)
            local = atom_of_bucket[desc]
            local[inside] = a0 + sub[4]
            return a_masses, x, blocks, top, local, n_buckets
    order = _argsort_positive(np.divide(targets, masses))[::-1]
    x, blocks, top = _lex_pieces(masses[order], targets[order], k, start)
    local = np.empty(n, dtype=np.int64)
    local[order] = np.arange(n)
    return masses[order], x, blocks, top, local, 0


def _splice(masses, x, blocks, top, j0, j1, a0, a1, sub):
    """Replace atoms ``a0..a1-1`` (pieces ``j0..j1``) by a solved segment ``sub``."""
    s_masses, s_x, s_blocks, s_top = sub
    n_sub = s_masses.size
    masses = np.concatenate([masses[:a0], s_masses, masses[a1:]])
    x = np.concatenate([x[:a0], s_x, x[a1:]])
    top = np.concatenate([top[:a0], s_top[:-1], top[a1:]])
    blocks = np.concatenate([blocks[: j0 + 1], a0 + s_blocks[1:-1], blocks[j1 + 1 :] - (a1 - a0) + n_sub])
    return masses, x, blocks, top


class OptimalSelection(SelectionScheme):
    """Exactly optimal selection for K identical drafts at any vocabulary size.

    Acceptance equals the closed-form optimum ``min_S [q(S) + 1 - p(S)^K]``; the output
    law is exactly the target. See the module docstring for the construction.

    Args:
        draft: ``(V,)`` draft distribution ``p`` (K identical drafts; ``(K, V)`` with equal
            rows is accepted).
        target: ``(V,)`` target distribution ``q``.
        num_drafts: K.
        tiling: how each piece's key laws are built: ``"pool"`` (default: slots and a
            shared pool, vectorised, with the greedy as the fallback) or ``"greedy"``
            (the greedy tiling by sets, token by token; used by the book to teach it).
        atoms: what shares a key law: ``"tokens"`` (each token its own atom: ``x`` is the
            lexicographically optimal induced distribution of fact 1, which needs a sort of
            the vocabulary), ``"buckets"`` (tokens whose ``q/p`` agree to 6 bits share one,
            except next to ``x = q``, where tokens are split out and solved exactly; same
            optimal acceptance, a different optimal ``x``; fact 5) or ``"auto"`` (the
            default: buckets from V = 4096 on).

        certify_tolerance: the fast path certifies what it builds (every piece of slots and a
            pool, and fact 6's spread: finite slot edges, keys that stay uniform and every
            atom's ``nu``-mass ``x``, to this absolute ``nu``-measure; default
            ``CERTIFY_TOLERANCE``). What fails falls back to an exact slower path -- the
            greedy tiling for the piece (itself checked in full, at ``GREEDY_CERTIFY_FACTOR *
            CERTIFY_TOLERANCE``; if even that fails, :class:`~mspec.selection.SchemeError`),
            fact 5 for the spread -- and is recorded in ``fallbacks``. A negative value fails
            every certificate, i.e. forces the fallbacks (for tests).

    Attributes:
        atoms: the atoms (``masses``, ``x``, ``blocks``, ``top``, ``bucket_atoms``,
            ``token_atoms``).
        blocks: block (piece) starts over the atoms.
        top: draft mass before each atom.
        fallbacks: ``list[str]``, one line per fast-path result that failed its certificate
            and was replaced by the exact slower path (empty in the usual case; benches
            count it). It grows as pieces are built, lazily, by ``sample``/``key_fragments``.
    """

    name = "optimal"
    supports_non_identical = False

    def __init__(self, *, draft, target, num_drafts=None, tiling: str = "pool", atoms: str = "auto",
                 certify_tolerance: float = CERTIFY_TOLERANCE):
        if tiling not in TILINGS:
            raise ValueError(f"tiling must be one of {TILINGS}, got {tiling!r}")
        if atoms not in ATOMS:
            raise ValueError(f"atoms must be one of {ATOMS}, got {atoms!r}")
        self.tiling = tiling
        self.certify_tolerance = float(certify_tolerance)
        self.fallbacks: list[str] = []
        rows = np.asarray(draft, dtype=object if np.ndim(draft) == 0 else None)
        if rows.ndim == 2 and rows.shape[0] > 1 and not np.all(rows == rows[0]):
            raise ValueError(
                "scheme 'optimal' needs identical drafts: pass `draft` of shape (V,) with "
                "num_drafts=K; for different draft distributions use 'optimal-lp' (exact, "
                "small V), 'is' or 'specinfer'"
            )
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        k = self.num_drafts
        p, q = self.draft, self.target
        built = None
        if atoms == "buckets" or (atoms == "auto" and self.vocab_size >= BUCKET_MIN_VOCAB):
            built = _Atoms.buckets(p, q, k, self.fallbacks, self.certify_tolerance)
        if built is not None and not (np.all(np.isfinite(built.x)) and built.x.min() >= 0.0):
            self.fallbacks.append("buckets -> tokens: an atom's x is not finite and >= 0")
            built = None
        self.atoms = built if built is not None else _Atoms.tokens(p, q, k)
        self.blocks, self.top = self.atoms.blocks, self.atoms.top
        self._pieces: dict[int, _Piece] = {}
        if self.atoms.spread is not None:  # fact 6: its one piece is already built
            self._pieces[0] = self.atoms.spread.piece
        # tokens drafted but never in the target come last, each its own interval
        # (their x does not matter: min(q, x) = 0 and the residual is 0 there)
        if self.atoms.positive:  # (known from the buckets: no q = 0)
            self.rest = np.zeros(0, dtype=np.int64)
        else:
            self.rest = np.flatnonzero((p > 0) & (q == 0)) if not q.all() else np.zeros(0, dtype=np.int64)
        self.rest_top = self.top[-1] + np.concatenate([[0.0], np.cumsum(p[self.rest])])
        self._rest_pos = {int(t): i for i, t in enumerate(self.rest)}
        self._induced_cache = None  # built at the first rejection (or when asked)
        self._residual_cache = None

    # --- lazily built V-long arrays -----------------------------------------------------
    @property
    def rank(self) -> np.ndarray:
        """``(V,)`` the atom of each token (-1 where ``p = 0`` or ``q = 0``)."""
        return self.atoms.ranks()

    @property
    def order(self) -> np.ndarray:
        """Tokens in ``q/p``-descending order, one per atom (``atoms="tokens"`` only)."""
        if not hasattr(self.atoms, "order"):
            raise AttributeError("`order` lists one token per atom: build the scheme with atoms='tokens'")
        return self.atoms.order

    @property
    def induced(self) -> np.ndarray:
        """``(V,)`` the induced distribution ``x = p_I`` of the selection step."""
        if self._induced_cache is None:
            induced = self.atoms.token_x()
            if self.rest.size:  # nu of each rest interval [a, b]: (1 - a)^K (1 - (1 - (b - a) / (1 - a))^K)
                ends = np.minimum(self.rest_top, 1.0)
                room = 1.0 - ends[:-1]
                with np.errstate(divide="ignore", invalid="ignore"):  # (no cancellation near key 0)
                    share = np.log1p(-np.diff(ends) / room)
                induced[self.rest] = np.where(room > 0.0, -(room**self.num_drafts) * np.expm1(self.num_drafts * share), 0.0)
            self._induced_cache = induced
        return self._induced_cache

    @property
    def _residual(self) -> np.ndarray:
        if self._residual_cache is None:
            self._residual_cache = residual_and_mass(self.target, self.induced)[0]
        return self._residual_cache

    def _x_of(self, token: int) -> float:
        """``x`` of one token without building the V-long ``induced``."""
        if self._induced_cache is not None:
            return float(self._induced_cache[token])
        if self.atoms.spread is not None:  # fact 6: x = q
            return float(self.target[token])
        a = self.atoms.atom_of(token)
        if a >= 0:
            mass = self.atoms.masses[a]
            return float(self.atoms.x[a] if mass == self.draft[token] else self.draft[token] * self.atoms.x[a] / mass)
        return float(self.induced[token])

    # --- key sets --------------------------------------------------------------------
    def _piece(self, j: int):
        if j not in self._pieces:
            a, b = self.blocks[j], self.blocks[j + 1]
            args = (self.atoms.masses[a:b], self.atoms.x[a:b], self.top[a], self.num_drafts)
            # (one Newton iteration for every edge beats two for the suspects, up to a size)
            piece = _PoolPiece.build(*args, all_edges=b - a <= ALL_EDGES_BELOW) if self.tiling == "pool" else None
            why = None
            if piece is not None:  # (its tiled groups' pieces are certified as they are built)
                piece.notes, piece.tolerance = self.fallbacks, self.certify_tolerance
                piece.lazy = not (piece.front.solved and piece.back.solved)  # (then: atom by atom)
                if piece.lazy:
                    piece.checked = set()
                    why = piece.certify_ends(self.certify_tolerance)
                else:
                    why = piece.certify(*args[:2], tolerance=self.certify_tolerance)
            self._pieces[j] = piece if piece is not None else _Piece(*args)
            if why is not None:
                self._greedy_instead(j, why)
        return self._pieces[j]

    def _greedy_instead(self, j: int, why: str) -> None:
        """Piece ``j`` failed its certificate (``why``): the greedy tiling instead, checked in
        full, and recorded; a :class:`SchemeError` if even that fails."""
        a, b = self.blocks[j], self.blocks[j + 1]
        args = (self.atoms.masses[a:b], self.atoms.x[a:b], self.top[a], self.num_drafts)
        self.fallbacks.append(f"piece {j} ({b - a} atoms): slots and pool -> greedy: {why}")
        self._pieces[j] = _Piece(*args)
        failed = _certify_greedy(self._pieces[j], *args[:2])
        if failed is not None:
            raise SchemeError(self._bug(
                f"key laws it could not certify (piece {j}: {why}; the greedy fallback: {failed}); "
                "atoms='tokens', tiling='greedy' may serve this pair"))

    def _locate(self, token: int, check: bool = True):
        """``(piece, local atom, atom)`` of a ranked token, else ``None``. With ``check`` the
        piece is built, and in a piece built lazily the atom is certified (or the piece
        replaced by the greedy) before its key law is used."""
        a = self.atoms.atom_of(token)
        if a < 0:
            return None
        if self.blocks.size == 2:  # one piece (fact 6 always)
            j, i = 0, a
        else:
            j = int(np.searchsorted(self.blocks, a, side="right")) - 1
            i = int(a - self.blocks[j])
        if check:
            piece = self._piece(j)
            if piece.__class__ is _PoolPiece and piece.lazy and i not in piece.checked:
                why = piece.certify_atom(i, float(self.atoms.masses[a]), float(self.atoms.x[a]), self.certify_tolerance)
                if why is None:
                    piece.checked.add(i)
                else:
                    self._greedy_instead(j, f"atom {i}: {why}")
        return j, i, a

    def key_fragments(self, token: int) -> list[tuple[float, float, float]]:
        """The key law of ``token``: intervals ``(start, end, weight)`` of ``[0, 1]``.

        A draft of ``token`` gets its key with density ``weight / p_t`` on each interval;
        ``weight`` is the share of the keys there that belong to the token (1 on a set of
        the greedy tiling and on a slot of a single-token atom, less on a pool or a bucket
        shared with other tokens). Empty if ``p_t = 0``.
        """
        where = self._locate(token)
        if where is not None and self.atoms.spread is not None:  # fact 6: the token's own split
            return self.atoms.spread.fragments(int(token), where[2], float(self.draft[token]),
                                               float(self.target[token]))
        if where is not None:
            j, i, a = where
            mass = float(self.atoms.masses[a])
            share = float(self.draft[token]) / mass
            return [(s, e, w * share) for s, e, w in self._piece(j).fragments(i, mass)]
        pos = self._rest_pos.get(int(token), -1)
        if pos >= 0:
            return [(float(self.rest_top[pos]), float(self.rest_top[pos + 1]), 1.0)]
        return []

    def realisation(self, token: int) -> str:
        """How ``token``'s key law is built: ``"pool"`` (slots and a pool), ``"greedy"``
        (greedy tiling), ``"rest"`` (``q_t = 0``: one interval after everything else) or
        ``"none"`` (``p_t = 0``: never drafted)."""
        where = self._locate(token)
        if where is not None:
            return "pool" if isinstance(self._piece(where[0]), _PoolPiece) else "greedy"
        return "rest" if int(token) in self._rest_pos else "none"

    def _sample_key(self, token: int, uniform: float) -> float:
        where = self._locate(token)
        if where is not None and self.atoms.spread is not None:
            return self.atoms.spread.sample_key(int(token), where[2], float(self.draft[token]),
                                                float(self.target[token]), uniform)
        if where is not None:
            j, i, a = where
            return self._piece(j).sample_key(i, float(self.atoms.masses[a]), uniform)
        pos = self._rest_pos[int(token)]
        return float(self.rest_top[pos] + uniform * (self.rest_top[pos + 1] - self.rest_top[pos]))

    # --- the three exact operations --------------------------------------------------
    def _acceptance(self) -> float:
        return float(np.minimum(self.target, self.induced).sum())

    def selection_probabilities(self, tokens: np.ndarray) -> np.ndarray:
        """Exact P(draft i has the smallest key), shape ``(K,)``, for validated ``tokens``.

        ``integral f_i(y) prod_{j != i} (1 - F_j(y)) dy`` with piecewise-constant key
        densities: exact by Gauss-Legendre with K nodes between breakpoints. Each token's
        law is taken as it is realised (what ``sample`` draws from), normalised by its
        realised mass -- float keys near 1 resolve only ~1e-16, so a tiny ``p_t`` is realised
        with a relative error -- and as masses per interval between breakpoints, never as a
        density (which overflows for a subnormal ``p_t``). A law of zero realised mass (``p_t``
        below the resolution of the keys) is a point mass at its start; drafts tied at one
        point share it evenly.
        """
        k = tokens.size
        unique, counts = np.unique(tokens, return_counts=True)
        for t in unique:  # every key law certified before any is read
            self._locate(int(t))
        laws, points = [], []
        for t in unique:
            frag = np.array(self.key_fragments(int(t)), dtype=float).reshape(-1, 3)
            w_max = float(frag[:, 2].max()) if frag.size else 0.0
            if w_max > 0.0 and np.isfinite(w_max):
                frag[:, 2] /= w_max  # (scaled: no overflow or underflow of weight x length)
            realised = float(np.sum(frag[:, 2] * (frag[:, 1] - frag[:, 0]))) if w_max > 0.0 else 0.0
            keep = np.isfinite(realised) and realised > 0.0
            laws.append(frag if keep else None)
            points.append(np.nan if keep else (float(frag[:, 0].min()) if frag.size else 1.0))
        points = np.array(points)
        cuts = np.unique(np.concatenate([f[:, :2].ravel() for f in laws if f is not None] + [points[~np.isnan(points)]]))
        left, right = cuts[:-1], cuts[1:]
        width = right - left
        nodes, weights = np.polynomial.legendre.leggauss(max(k, 1))
        tau = 0.5 * (nodes + 1.0)  # node positions inside each interval, in [0, 1]
        # survival[u]: P(key of token u > y) at every node of every interval, (M, N)
        survival = np.ones((unique.size, left.size, tau.size))
        mass = np.zeros((unique.size, left.size))
        before_cut = np.zeros((unique.size, cuts.size))  # F_u at each cut
        for u, frag in enumerate(laws):
            if frag is None:  # a point mass: the key exceeds y below the point only
                survival[u] = (right <= points[u])[:, None]
                continue
            # (by the interval's ends, all of them cuts: the float midpoint of a one-ulp
            # interval is one of its ends, and a fragment that short then held nothing)
            inside = (left[:, None] >= frag[None, :, 0]) & (right[:, None] <= frag[None, :, 1])
            m = (inside * frag[None, :, 2]).sum(axis=1) * width
            m /= m.sum()
            mass[u] = m
            before_cut[u, 1:] = np.minimum(np.cumsum(m), 1.0)
            survival[u] = 1.0 - (before_cut[u, :-1, None] + m[:, None] * tau[None, :])
        probs_of = np.zeros(unique.size)
        cont = np.array([f is not None for f in laws])
        for u in range(unique.size):
            if cont[u]:
                others = np.ones((left.size, tau.size))
                for v in range(unique.size):
                    c = counts[v] - (v == u)
                    if c:
                        others *= survival[v] ** c
                probs_of[u] = float(np.sum(mass[u] * (others @ (0.5 * weights))))
            else:  # no point of another draft before it, no continuous key below it
                at = points[u]
                if np.any(points[~cont] < at):
                    continue
                tied = counts[~cont][points[~cont] == at].sum()
                index = int(np.searchsorted(cuts, at))
                beyond = np.prod((1.0 - before_cut[cont, index]) ** counts[cont])
                probs_of[u] = float(beyond) / tied
        return probs_of[np.searchsorted(unique, tokens)]

    def _conditional(self, tokens):
        probs = self.selection_probabilities(tokens)
        dist = np.zeros(self.vocab_size)
        accept = 0.0
        induced = self.induced
        for t, w in zip(tokens, probs):
            # (x_t = 0 by rounding: accept where q_t > 0, as _sample does; never where q_t = 0)
            q_t, x_t = float(self.target[t]), float(induced[t])
            a = 0.0 if q_t <= 0.0 else (1.0 if q_t >= x_t else q_t / x_t)
            dist[t] += w * a
            dist += w * (1.0 - a) * self._residual
            accept += w * a
        return dist

    def _sample(self, tokens, rng: np.random.Generator) -> int:
        # pieces own consecutive key intervals, so only the drafts in the first piece that
        # any draft reaches can have the smallest key (rest tokens: one piece each, last)
        where = [self._locate(int(t), check=False) for t in tokens]
        n_pieces = self.blocks.size - 1
        piece = [w[0] if w is not None else n_pieces + self._rest_pos[int(t)] for w, t in zip(where, tokens)]
        first = min(piece)
        contenders = [i for i, j in enumerate(piece) if j == first]
        if len(contenders) == 1 or all(tokens[i] == tokens[contenders[0]] for i in contenders):
            i = contenders[0]  # (drafts of one token: any of them is that token)
        else:
            for i in contenders:  # every key law certified before any key is drawn from one
                self._locate(int(tokens[i]))
            keys = [self._sample_key(int(tokens[i]), rng.random()) for i in contenders]
            i = contenders[int(np.argmin(keys))]
        y = int(tokens[i])
        # single-draft speculative sampling from the induced x to q
        if rng.random() * self._x_of(y) < self.target[y]:
            return y
        return sample_index(self._residual, rng)


__all__ = ["OptimalSelection", "lex_optimal_induced"]
