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

Finding rho*. The paper bisects ``g`` on ``[1, K]``, one pass over the vocabulary per step;
this module does just that (:func:`bisect_rho`), then steps ``rho`` up by 1, 2, 4, ... ulps
until the certificate ``scale = (1 - (1 - beta)^K) / beta <= rho`` holds as computed, so the
residual ``q - min(p scale, q scale / rho)`` is non-negative entry by entry with nothing
clipped. ``1 - (1 - beta)^K`` is evaluated as ``-expm1(K log1p(-beta))``, accurate for tiny
``beta`` too. The same root found faster (a band of breakpoints and a bracketed Newton
iteration) is :class:`mspec.fast.spectr_newton.NewtonSpecTr`, which ``make_scheme("spectr")``
builds; the tests hold it to this class on the same inputs.
"""

from __future__ import annotations

import math

import numpy as np

from mspec.schemes.selection import SchemeError, Selection, SelectionScheme, sample_index


class SpecTr(SelectionScheme):
    """K-sequential selection with the optimal constant ``rho*``, found by bisection.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` (or ``(K, V)`` with K equal rows).
        target: ``(V,)``.
        num_drafts: K.

    Attributes:
        rho: ``rho*`` in ``[1, K]``, with its certificate ``acceptance_scale(beta, K) <= rho``.
        beta: ``beta(rho*) = sum_x min(p(x), q(x)/rho*)``.
    """

    name = "spectr"
    supports_non_identical = False

    def __init__(self, *, draft, target, num_drafts=None):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        self.rho, self.beta = self.find_rho()
        self._residual = None

    def find_rho(self) -> tuple[float, float]:
        """``(rho*, beta(rho*))``: the paper's bisection, then the step up to the certificate."""
        p, q, k = self.draft, self.target, self.num_drafts
        if np.all(q >= p):  # q >= p wherever p > 0: at rho = 1 every draft is accepted
            return 1.0, 1.0
        rho = bisect_rho(p, q, k)
        step = rho * EPS
        while True:
            beta = min(float(np.minimum(p, q / rho).sum()), 1.0)
            if beta <= 0.0:  # disjoint supports, or beta below the smallest float: rho = K is valid
                return (float(k) if np.any(np.minimum(p, q) > 0.0) else rho), 0.0
            if acceptance_scale(beta, k) <= rho or rho >= k:  # the scale is <= K: true at rho = K
                return rho, beta
            rho, step = min(rho + step, float(k)), 2.0 * step

    def _acceptance(self) -> float:
        return some_accepted(self.beta, self.num_drafts)

    def residual(self) -> np.ndarray:
        """Distribution of the output when every draft is rejected, shape ``(V,)``."""
        if self._residual is None:
            p, q, k = self.draft, self.target, self.num_drafts
            if self.beta <= 0.0:  # p and q disjoint (or beta below rounding, then rho = K)
                self._residual = q
            else:
                scale = acceptance_scale(self.beta, k)
                if not scale <= self.rho:  # find_rho certifies this; never clip it away
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


#: float64 machine epsilon: ``rho`` steps up from ``rho * EPS``
EPS = float(np.finfo(float).eps)


def some_accepted(beta: float, k: int) -> float:
    """``1 - (1 - beta)^k`` (P(some of ``k`` drafts is accepted)) for ``beta`` in ``[0, 1]``,
    accurate for tiny ``beta``."""
    if k == 1:
        return beta
    if beta >= 1.0:
        return 1.0
    return -math.expm1(k * math.log1p(-beta))


def acceptance_scale(beta: float, k: int) -> float:
    """``(1 - (1 - beta)^k) / beta`` for ``beta > 0``; at most ``k`` (also after rounding)."""
    return min(some_accepted(beta, k) / beta, float(k))


def bisect_rho(draft: np.ndarray, target: np.ndarray, num_drafts: int) -> float:
    """``rho*`` by the paper's plain bisection.

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
        return some_accepted(beta, num_drafts) - rho * beta

    lo, hi = 1.0, float(num_drafts)
    if g(lo) <= 0.0:
        return lo
    while lo < (mid := 0.5 * (lo + hi)) < hi:
        lo, hi = (mid, hi) if g(mid) > 0.0 else (lo, mid)
    return hi


def spectr_sample(drafts, *, draft, target, rng: np.random.Generator) -> Selection:
    """One SpecTr selection with K = ``len(drafts)`` identical drafts from ``draft`` ``(V,)``."""
    return SpecTr(draft=draft, target=target, num_drafts=len(drafts)).sample(drafts, rng)


def spectr_acceptance(*, draft, target, num_drafts) -> float:
    """Exact SpecTr acceptance ``1 - (1 - beta(rho*))^K``."""
    return SpecTr(draft=draft, target=target, num_drafts=num_drafts).acceptance()
