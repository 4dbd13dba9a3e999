"""SpecTr: k-sequential selection (Sun et al., NeurIPS 2023), identical drafts only.

K i.i.d. drafts ``X_1..X_K ~ p``, target ``q``. For a constant ``rho >= 1``:

* visit the drafts in order and accept ``X_i`` with probability
  ``min(1, q(X_i) / (rho p(X_i)))``;
* if none is accepted, output a sample of the residual (below).

With ``beta(rho) = sum_x min(p(x), q(x)/rho)`` the probability of accepting some draft
is ``1 - (1 - beta)^K`` and the mass placed on ``x`` by acceptance is
``min(p(x), q(x)/rho) (1 - (1 - beta)^K) / beta``. That is at most ``q(x)`` for every
``x`` -- so the residual ``(q - that) / (1 - beta)^K`` is a valid distribution -- iff

    g(rho) = 1 - (1 - beta(rho))^K - rho beta(rho) <= 0.

``g`` is decreasing, ``g(1) >= 0 >= g(K)``, so the best (smallest) valid ``rho*`` in
``[1, K]`` is the root of ``1 - (1 - beta)^K = rho beta``; acceptance is
``1 - (1 - beta(rho*))^K``.

Finding rho*. The paper bisects ``g`` on ``[1, K]``, one pass over the vocabulary per step:
:func:`bisect_rho` does just that, the readable reference that the tests hold the solver
below to. The solver (a deviation, the same root) is faster. ``beta`` is piecewise of
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

from mspec.schemes.selection import SchemeError, Selection, SelectionScheme, sample_index


class SpecTr(SelectionScheme):
    """K-sequential selection with the optimal constant ``rho*``.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` (or ``(K, V)`` with K equal rows).
        target: ``(V,)``.
        num_drafts: K.

    Attributes:
        rho: ``rho*`` in ``[1, K]``.
        beta: ``beta(rho*) = sum_x min(p(x), q(x)/rho*)``.
    """

    name = "spectr"
    supports_non_identical = False

    def __init__(self, *, draft, target, num_drafts=None):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        self.rho, self.beta = solve_rho(self.draft, self.target, self.num_drafts)
        self._residual = None

    def _acceptance(self) -> float:
        return _accepted(self.beta, self.num_drafts)

    def residual(self) -> np.ndarray:
        """Distribution of the output when every draft is rejected, shape ``(V,)``."""
        if self._residual is None:
            p, q, k = self.draft, self.target, self.num_drafts
            if self.beta <= 0.0:  # p and q disjoint (or beta below rounding, then rho = K)
                self._residual = q
            else:
                scale = _scale(self.beta, k)
                if not scale <= self.rho:  # solve_rho certifies this; never clip it away
                    raise SchemeError(self._bug(f"rho = {self.rho!r} below its certificate {scale!r}"))
                # acceptance mass min(p, q/rho) * scale, written so that it is <= q exactly:
                # scale/rho <= 1, so q * (scale/rho) <= q, and the minimum is at most that
                res = q - np.minimum(p * scale, q * (scale / self.rho))
                total = res.sum()
                self._residual = res / total if total > 0.0 else q
        return self._residual

    def accept_probs(self, tokens: np.ndarray) -> np.ndarray:
        """``min(1, q(x) / (rho* p(x)))`` for each drafted token."""
        with np.errstate(over="ignore"):  # q / (rho p) overflows for a subnormal p: 1
            return np.minimum(1.0, self.target[tokens] / (self.rho * self.draft[tokens]))

    def _conditional(self, tokens):
        dist = np.zeros(self.vocab_size)
        stay = 1.0
        for x, a in zip(tokens, self.accept_probs(tokens)):
            dist[x] += stay * a
            stay *= 1.0 - a
        if stay > 0.0:
            dist += stay * self.residual()
        return dist

    def _sample(self, tokens, rng: np.random.Generator) -> int:
        p, q = self.draft, self.target
        for x in tokens:
            if rng.random() * self.rho * p[x] < q[x]:
                return int(x)
        # At rho* the residual is > 0 at a rejected drafted token (ratio q/p < rho) only up
        # to rounding (q (1 - scale/rho) with scale/rho = 1 to ~1e-16), so such a token is
        # (almost surely) not returned here.
        return sample_index(self.residual(), rng)


_EPS = float(np.finfo(float).eps)
#: ``_piece_root`` returns once the root's bracket is at most this many ulps wide ...
ROOT_BRACKET_ULPS = 4.0
#: ... or once a Newton step is at most this many ulps (converged to rounding)
NEWTON_STEP_ULPS = 2.0
#: step cap of ``_piece_root``: it bisects at least every other step, so ~2 (52 +
#: log2 K) < 200 steps close any bracket in [1, K] to ROOT_BRACKET_ULPS
MAX_ROOT_STEPS = 200


def _accepted(beta: float, k: int) -> float:
    """``1 - (1 - beta)^k`` for ``beta`` in ``[0, 1]``, accurate for tiny ``beta``."""
    if k == 1:
        return beta
    if beta >= 1.0:
        return 1.0
    return -math.expm1(k * math.log1p(-beta))


def _scale(beta: float, k: int) -> float:
    """``(1 - (1 - beta)^k) / beta`` for ``beta > 0``; at most ``k`` (also after rounding)."""
    return min(_accepted(beta, k) / beta, float(k))


def solve_rho(draft: np.ndarray, target: np.ndarray, num_drafts: int) -> tuple[float, float]:
    """Smallest ``rho`` in ``[1, K]`` with ``1 - (1 - beta(rho))^K <= rho beta(rho)``.

    Args:
        draft: validated ``(V,)`` draft distribution ``p``.
        target: validated ``(V,)`` target distribution ``q``.
        num_drafts: K >= 1.

    Returns:
        ``(rho, beta(rho))``, with ``_scale(beta, K) <= rho`` exactly in floating point
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


def bisect_rho(draft: np.ndarray, target: np.ndarray, num_drafts: int) -> float:
    """``rho*`` by the paper's plain bisection: the readable reference of :func:`solve_rho`.

    ``g(rho) = 1 - (1 - beta(rho))^K - rho beta(rho)`` decreases from ``g(1) >= 0`` to
    ``g(K) <= 0``: halve ``[1, K]``, keeping ``g > 0`` at the left end, until the midpoint
    rounds to an end; return the right end (the valid side).

    Args:
        draft: validated ``(V,)`` draft distribution ``p``.
        target: validated ``(V,)`` target distribution ``q``.
        num_drafts: K >= 1.
    """

    def g(rho):
        beta = min(float(np.minimum(draft, target / rho).sum()), 1.0)
        return _accepted(beta, num_drafts) - rho * beta

    lo, hi = 1.0, float(num_drafts)
    if g(lo) <= 0.0:
        return lo
    while lo < (mid := 0.5 * (lo + hi)) < hi:
        lo, hi = (mid, hi) if g(mid) > 0.0 else (lo, mid)
    return hi


def _root(pb, qb, a_fix, b_fix, k) -> float:
    """The root of ``g`` in ``[1, K]`` (up to rounding), from the sorted band of breakpoints."""
    kf = float(k)
    beta1 = min(a_fix + float(pb.sum()) + b_fix, 1.0)  # at rho = 1 the band is on the p side
    if _accepted(beta1, k) <= beta1:  # g(1) <= 0: beta(1) is 0 or 1 (up to rounding)
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
        return _accepted(min(a + b / x, 1.0), k) - (x * a + b)

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
        if hi - lo <= ROOT_BRACKET_ULPS * _EPS * hi:
            return hi
        step = gx / dgx if dgx < 0.0 else math.inf
        nx = x - step
        if it % 2 == 1:  # bisect unless the last two steps halved the bracket
            if hi - lo > 0.5 * width:
                nx = math.inf
            width = hi - lo
        if not lo < nx < hi:
            nx = 0.5 * (lo + hi)
        elif abs(step) <= NEWTON_STEP_ULPS * _EPS * x:  # Newton converged
            return nx
        x = nx
    return hi


def _settle(rho, pb, qb, a_fix, b_fix, k) -> tuple[float, float]:
    """Step ``rho`` up (1, 2, 4, ... ulps, at most to K) until ``_scale(beta) <= rho``."""
    kf = float(k)
    step = rho * _EPS
    while True:
        beta = min(a_fix + b_fix / rho + float(np.minimum(pb, qb / rho).sum()), 1.0)
        if beta <= 0.0:  # disjoint supports (or beta below the smallest float)
            return float(rho), 0.0
        if _scale(beta, k) <= rho or rho >= kf:  # _scale <= K: always true at rho = K
            return float(rho), beta
        rho = min(rho + step, kf)
        step *= 2.0


def spectr_sample(drafts, *, draft, target, rng: np.random.Generator) -> Selection:
    """One SpecTr selection with K = ``len(drafts)`` identical drafts from ``draft`` ``(V,)``."""
    return SpecTr(draft=draft, target=target, num_drafts=len(drafts)).sample(drafts, rng)


def spectr_acceptance(*, draft, target, num_drafts) -> float:
    """Exact SpecTr acceptance ``1 - (1 - beta(rho*))^K``."""
    return SpecTr(draft=draft, target=target, num_drafts=num_drafts).acceptance()
