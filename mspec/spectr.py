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

Finding rho* (the paper: bisection; deviation here, same root). ``beta`` is piecewise of
the form ``A + B / rho``: with ratios ``r = q/p``, ``A = sum_{r >= rho} p`` and
``B = sum_{r < rho} q``. Only tokens with ``1 <= r < K`` ever change side -- for LM
distributions a few percent of the vocabulary -- so we extract that band once. Then,
inside a bisection bracket, we step to the root of the current piece's formula; once the
piece stops changing that root is exact (usually 2-5 steps, each a pass over the band).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from .selection import Selection, SelectionScheme, check_rng, sample_index


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

    def acceptance(self) -> float:
        return float(1.0 - (1.0 - self.beta) ** self.num_drafts)

    def residual(self) -> np.ndarray:
        """Distribution of the output when every draft is rejected, shape ``(V,)``."""
        if self._residual is None:
            p, q, k = self.draft, self.target, self.num_drafts
            if self.beta <= 0.0:  # p and q disjoint: nothing is ever accepted
                self._residual = q
            else:
                scale = (1.0 - (1.0 - self.beta) ** k) / self.beta
                # clip: at rho* the entries at rejected tokens are 0 up to rounding
                res = np.maximum(q - np.minimum(p, q / self.rho) * scale, 0.0)
                total = res.sum()
                self._residual = res / total if total > 1e-15 else q
        return self._residual

    def accept_probs(self, tokens: np.ndarray) -> np.ndarray:
        """``min(1, q(x) / (rho* p(x)))`` for each drafted token."""
        return np.minimum(1.0, self.target[tokens] / (self.rho * self.draft[tokens]))

    def conditional(self, drafts):
        tokens = self.check_tokens(drafts)
        dist = np.zeros(self.vocab_size)
        stay = 1.0
        for x, a in zip(tokens, self.accept_probs(tokens)):
            dist[x] += stay * a
            stay *= 1.0 - a
        if stay > 0.0:
            dist += stay * self.residual()
        return dist, 1.0 - stay

    def sample(self, drafts, rng: np.random.Generator) -> Selection:
        tokens = self.check_tokens(drafts)
        check_rng(rng)
        p, q = self.draft, self.target
        for i, x in enumerate(tokens):
            if rng.random() * self.rho * p[x] < q[x]:
                return Selection(int(x), True, i)
        # The residual can be > 0 at a drafted token only up to rounding (rho is the root
        # to ~1e-15), so a rejected draft is (almost surely) not returned here.
        return self.selection(tokens, sample_index(self.residual(), rng))


def solve_rho(draft: np.ndarray, target: np.ndarray, num_drafts: int) -> tuple[float, float]:
    """Smallest ``rho`` in ``[1, K]`` with ``1 - (1 - beta(rho))^K <= rho beta(rho)``.

    Args:
        draft: validated ``(V,)`` draft distribution ``p``.
        target: validated ``(V,)`` target distribution ``q``.
        num_drafts: K >= 1.

    Returns:
        ``(rho, beta(rho))``.
    """
    k = num_drafts
    p, q = draft, target
    if k == 1:
        return 1.0, float(np.minimum(p, q).sum())
    # ratio q/p. Tokens with p = 0 are never drafted and must add 0 to beta: q/0 = inf
    # always sits on the p side, 0/0 = nan on no side at all (its q is 0 anyway).
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = q / p
    # Only tokens with 1 <= ratio < K change side while rho moves over [1, K]; the others
    # always add p (ratio >= K) or q / rho (ratio < 1) to beta.
    high = ratio >= k
    band = np.flatnonzero((ratio >= 1.0) & ~high)
    r, pb, qb = ratio[band], p[band], q[band]
    a_fix = float(np.sum(p, where=high))
    # sum of q over ratio < 1, as 1 minus the rest (q sums to 1; the 0/0 tokens have q = 0)
    b_fix = max(0.0, 1.0 - float(np.sum(q, where=high)) - float(qb.sum()))

    def g(rho, a, b):  # g(rho) on a piece where beta = a + b / rho
        beta = a + b / rho
        return 1.0 - (1.0 - beta) ** k - rho * beta

    a1, b1 = a_fix + pb.sum(), b_fix  # at rho = 1 every band token is on the p side
    if g(1.0, a1, b1) <= 0.0:  # e.g. draft == target
        return 1.0, a1 + b1
    return _solve_newton(r, pb, qb, a_fix, b_fix, k, g, a1, b1)


def _solve_newton(r, pb, qb, a_fix, b_fix, k, g, a, b):
    # Safeguarded Newton over pieces: jump to the root of the current piece's formula; if
    # the piece at the new point is the same, that root is exact. Every step shrinks the
    # bracket [lo, hi] around the root (g(lo) > 0 >= g(hi)).
    upper = np.empty_like(r)  # 0/1 indicator of ratio >= rho, reused by every piece

    def piece(rho):  # beta = a + b / rho: a = sum_{ratio >= rho} p, b = sum_{ratio < rho} q
        np.greater_equal(r, rho, out=upper, casting="unsafe")
        return a_fix + float(pb @ upper), b_fix + float(qb.sum() - qb @ upper)

    lo, hi = 1.0, float(k)
    for _ in range(200):
        if g(lo, a, b) > 0.0 > g(hi, a, b):
            rho = brentq(g, lo, hi, args=(a, b), xtol=1e-15, rtol=1e-15)
        else:
            rho = 0.5 * (lo + hi)
        a_new, b_new = piece(rho)
        if a_new == a and b_new == b:
            return _settle(rho, a, b, g)
        a, b = a_new, b_new
        if g(rho, a, b) > 0.0:
            lo = rho
        else:
            hi = rho
        if hi - lo <= 1e-15 * hi:
            return _settle(hi, *piece(hi), g)
    raise RuntimeError("SpecTr rho search did not converge; please report this input")


def _settle(rho, a, b, g):
    # step to the valid side of the root (g <= 0) so the residual is non-negative
    for _ in range(8):
        if g(rho, a, b) <= 0.0:
            break
        rho = np.nextafter(rho, np.inf)
    return float(rho), float(a + b / rho)


def spectr_sample(drafts, *, draft, target, rng: np.random.Generator) -> Selection:
    """One SpecTr selection with K = ``len(drafts)`` identical drafts from ``draft`` ``(V,)``."""
    return SpecTr(draft=draft, target=target, num_drafts=len(drafts)).sample(drafts, rng)


def spectr_acceptance(*, draft, target, num_drafts) -> float:
    """Exact SpecTr acceptance ``1 - (1 - beta(rho*))^K``."""
    return SpecTr(draft=draft, target=target, num_drafts=num_drafts).acceptance()
