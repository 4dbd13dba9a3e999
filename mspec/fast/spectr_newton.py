"""SpecTr's ``rho*`` found fast: :class:`NewtonSpecTr` is :class:`~mspec.schemes.spectr.SpecTr`
(Sun et al., NeurIPS 2023; same law, same acceptance) with a faster root finder, the one
``make_scheme("spectr")`` builds.

Notation as in :mod:`mspec.schemes.spectr`: K i.i.d. drafts from ``p``, target ``q``,
``beta(rho) = sum_x min(p(x), q(x)/rho)`` and ``g(rho) = 1 - (1 - beta)^K - rho beta``,
whose root in ``[1, K]`` is ``rho*``.

The paper bisects ``g`` on ``[1, K]``, one pass over the vocabulary per step:
:class:`mspec.schemes.spectr.SpecTr` does just that, the readable reference that the tests
hold this solver to. This solver (a deviation, the same root) is faster. ``beta`` is piecewise of
the form ``A + B / rho``: with ratios ``r = q/p``, ``A = sum_{r >= rho} p`` and
``B = sum_{r < rho} q``; the breakpoints are the ratios. Only tokens with ``1 <= r < K``
ever change side -- for LM distributions a few percent of the vocabulary -- so one pass
over the vocabulary (comparisons, no division) extracts that band, and only the band is
sorted. With prefix sums over the sorted band, a bisection over the breakpoints finds the
piece with ``g > 0`` at its left end and ``g <= 0`` at its right end: it holds the root.
On it ``g(rho) = 1 - (1 - A - B/rho)^K - A rho - B`` is smooth and decreasing; with ``A``
and ``B`` re-summed pairwise, a bracketed Newton iteration solves it. (A search that
only checks whether the piece changed can take a bisection midpoint inside the current
piece for the root; this one never leaves the piece's own bracket.) Finally ``rho`` steps
up by 1, 2, 4, ... ulps until the certificate below holds as computed. ``1 - (1 - beta)^K``
is evaluated as ``-expm1(K log1p(-beta))``, accurate for tiny ``beta`` too.

Accuracy guarantee (the rounding that remains). With ``beta`` as stored and
``scale = (1 - (1 - beta)^K) / beta``:

* certificate: ``scale <= rho`` holds in floating point, so the residual
  ``q - min(p scale, q scale / rho)`` is non-negative entry by entry by construction:
  nothing is clipped, for every valid input (zeros on either side, subnormal entries,
  ratio ties, one-hot targets, disjoint supports, ``draft == target``, any K >= 1). Where
  ``beta`` rounds to 0 without disjoint supports, ``rho = K``: valid for any ``beta``;
* acceptance: ``rho`` is the root up to rounding, so ``1 - (1 - beta)^K`` is within about
  ``K log2(V) 1e-16`` of the exact optimum ``1 - (1 - beta(rho*))^K`` for the given arrays;
* law: the output law (acceptance mass ``min(p, q/rho) scale`` plus ``(1 - beta)^K``
  times the normalised residual) equals ``q`` up to rounding. Per token the error is at
  most about ``K^2 log2(V) 1e-16 q(x)`` (the rounding of ``beta`` reaches the acceptance
  mass through ``scale``) plus the token's share of ``|sum(res) - (1 - beta)^K|``: the
  residual is normalised by its own sum, which differs from ``(1 - beta)^K`` by the
  rounding of sums over the vocabulary and by ``sum(q) - 1`` (at most 1e-13 after
  validation, ~1e-16 in practice). Total variation: about ``K^2 log2(V) 1e-16`` plus that
  difference. The tests assert total variation <= 1e-12 and ``|law(x) - q(x)| <= 1e-12
  q(x) + 1e-14`` for K <= 16 and V up to 50272 (observed: ~1e-15 and ~1e-16).

``rho`` itself can be ill-conditioned where ``g`` is flat (``draft`` close to ``target``:
``g`` then vanishes like ``(rho - 1)^K``); the acceptance and the law are not.
"""

from __future__ import annotations

import math

import numpy as np

from mspec.schemes.spectr import EPS, SpecTr, acceptance_scale, some_accepted


class NewtonSpecTr(SpecTr):
    """:class:`~mspec.schemes.spectr.SpecTr` with ``rho*`` from :func:`solve_rho` (registered as ``"spectr"``).

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` (or ``(K, V)`` with K equal rows).
        target: ``(V,)``.
        num_drafts: K.
    """

    def find_rho(self) -> tuple[float, float]:
        """``(rho*, beta(rho*))`` by :func:`solve_rho`, with the same certificate."""
        return solve_rho(self.draft, self.target, self.num_drafts)


#: ``_piece_root`` returns once the root's bracket is at most this many ulps wide ...
ROOT_BRACKET_ULPS = 4.0
#: ... or once a Newton step is at most this many ulps (converged to rounding)
NEWTON_STEP_ULPS = 2.0
#: step cap of ``_piece_root``: it bisects at least every other step, so ~2 (52 +
#: log2 K) < 200 steps close any bracket in [1, K] to ROOT_BRACKET_ULPS
MAX_ROOT_STEPS = 200


def solve_rho(draft: np.ndarray, target: np.ndarray, num_drafts: int) -> tuple[float, float]:
    """Smallest ``rho`` in ``[1, K]`` with ``1 - (1 - beta(rho))^K <= rho beta(rho)``.

    Args:
        draft: validated ``(V,)`` draft distribution ``p``.
        target: validated ``(V,)`` target distribution ``q``.
        num_drafts: K >= 1.

    Returns:
        ``(rho, beta(rho))``, with ``acceptance_scale(beta, K) <= rho`` exactly in floating point
        (see the module docstring for the accuracy).
    """
    k = num_drafts
    p, q = draft, target
    if k == 1:
        return 1.0, min(float(np.minimum(p, q).sum()), 1.0)
    # Three sides by ratio q/p, without dividing: ratio >= K ("high": always adds p to
    # beta; every p = 0 token is here and adds 0), 1 <= ratio < K (the band: the only
    # tokens that change side -- for LM distributions a few percent of V), ratio < 1
    # ("low": always adds q / rho).
    high = q >= p * float(k)
    ge = q >= p
    n_high, n_ge = int(np.count_nonzero(high)), int(np.count_nonzero(ge))
    if n_ge == q.size:  # q >= p wherever p > 0: at rho = 1 every draft is accepted
        return 1.0, 1.0
    band = np.flatnonzero(ge ^ high)  # high implies q >= p
    pb, qb = p[band], q[band]
    # a_fix = sum of p over high, b_fix = sum of q over low: gather the sparser of the two
    # sides and get the other from the totals (masked sums over a dense side are slow)
    if n_high <= q.size - n_ge:
        side = np.flatnonzero(high)
        a_fix = float(p[side].sum())
        b_fix = max(0.0, float(q.sum()) - float(q[side].sum()) - float(qb.sum()))
    else:
        side = np.flatnonzero(~ge)
        b_fix = float(q[side].sum())
        a_fix = max(0.0, float(p.sum()) - float(p[side].sum()) - float(pb.sum()))
    rho, beta = _settle(_root(pb, qb, a_fix, b_fix, k), pb, qb, a_fix, b_fix, k)
    if beta <= 0.0 and np.any(np.minimum(p, q) > 0.0):
        # not disjoint: beta underflowed, or the totals above cancelled a tiny low-side mass;
        # rho = K is valid whatever beta is (the acceptance mass min(p, q/K) scale <= q)
        rho = float(k)
    return rho, beta


def _root(pb, qb, a_fix, b_fix, k) -> float:
    """The root of ``g`` in ``[1, K]`` (up to rounding), from the sorted band of breakpoints."""
    kf = float(k)
    beta1 = min(a_fix + float(pb.sum()) + b_fix, 1.0)  # at rho = 1 the band is on the p side
    if some_accepted(beta1, k) <= beta1:  # g(1) <= 0: beta(1) is 0 or 1 (up to rounding)
        return 1.0
    r = qb / pb  # in [1, K] (p > 0 on the band)
    order = np.argsort(r)
    rs, ps, qs = r[order], pb[order], qb[order]
    cp, cq = np.cumsum(ps), np.cumsum(qs)
    m = rs.size
    p_total = float(cp[-1]) if m else 0.0

    def g_right(j):  # g at the right end of piece j; ties give empty pieces, harmlessly
        # piece j = 0..m runs from rs[j-1] (or 1) to rs[j] (or K); on it the first j sorted
        # tokens are on the q side
        x = float(rs[j]) if j < m else kf
        a = a_fix + (p_total - float(cp[j - 1]) if j else p_total)
        b = b_fix + (float(cq[j - 1]) if j else 0.0)
        return some_accepted(min(a + b / x, 1.0), k) - (x * a + b)

    # first piece whose right end has g <= 0 (g decreases; g(K) <= 0 up to rounding)
    lo, hi = 0, m
    while lo < hi:
        mid = (lo + hi) // 2
        if g_right(mid) <= 0.0:
            hi = mid
        else:
            lo = mid + 1
    j = lo
    # this piece's A and B, summed pairwise (the prefix sums above only locate the piece)
    return _piece_root(a_fix + float(ps[j:].sum()), b_fix + float(qs[:j].sum()), k,
                       1.0 if j == 0 else float(rs[j - 1]), float(rs[j]) if j < m else kf)


def _piece_root(a, b, k, lo, hi) -> float:
    """Root in ``[lo, hi]`` of ``g(rho) = 1 - (1 - a - b/rho)^k - a rho - b`` (decreasing).

    Newton's method kept inside a shrinking bracket, bisecting whenever Newton leaves it
    or stalls. Where the prefix sums misplaced the piece by rounding (the root sits on one
    of its ends to ~1e-16), that end is returned.
    """

    def g(rho):  # (g, g')
        beta = a + b / rho
        if beta >= 1.0:
            return 1.0 - (a * rho + b), -a
        log_rest = math.log1p(-beta)
        slope = k * math.exp((k - 1) * log_rest)  # d/dbeta of 1 - (1 - beta)^k
        return -math.expm1(k * log_rest) - (a * rho + b), -a - slope * b / (rho * rho)

    g_lo, g_hi = g(lo)[0], g(hi)[0]
    if g_lo <= 0.0:  # the root is at lo
        return lo
    if g_hi >= 0.0:  # ... at hi (the step-up in _settle then crosses it)
        return hi
    x = lo + (hi - lo) * g_lo / (g_lo - g_hi)  # secant start
    width = hi - lo
    for it in range(MAX_ROOT_STEPS):
        gx, dgx = g(x)
        if gx > 0.0:
            lo = x
        elif gx < 0.0:
            hi = x
        else:
            return x
        if hi - lo <= ROOT_BRACKET_ULPS * EPS * hi:
            return hi
        step = gx / dgx if dgx < 0.0 else math.inf
        nx = x - step
        if it % 2 == 1:  # bisect unless the last two steps halved the bracket
            if hi - lo > 0.5 * width:
                nx = math.inf
            width = hi - lo
        if not lo < nx < hi:
            nx = 0.5 * (lo + hi)
        elif abs(step) <= NEWTON_STEP_ULPS * EPS * x:  # Newton converged
            return nx
        x = nx
    return hi


def _settle(rho, pb, qb, a_fix, b_fix, k) -> tuple[float, float]:
    """Step ``rho`` up (1, 2, 4, ... ulps, at most to K) until ``acceptance_scale(beta) <= rho``."""
    kf = float(k)
    step = rho * EPS
    while True:
        beta = min(a_fix + b_fix / rho + float(np.minimum(pb, qb / rho).sum()), 1.0)
        if beta <= 0.0:  # disjoint supports (or beta below the smallest float)
            return float(rho), 0.0
        if acceptance_scale(beta, k) <= rho or rho >= kf:  # _scale <= K: always true at rho = K
            return float(rho), beta
        rho = min(rho + step, kf)
        step *= 2.0
