"""The reference of ``"optimal"``: exactly optimal selection in plain floats, top to bottom.

This is the construction of the book's chapter "Optimal at vocabulary scale", written to
be read, and the oracle that the tests hold the fast path
(:class:`~mspec.fast.optimal_selection.OptimalSelection`) to. It uses no other module
of :mod:`mspec.fast.optimal_selection`.

Notation (paper): K i.i.d. drafts from ``p`` (``draft``), target ``q`` (``target``),
``g(m) = 1 - (1 - m)^K`` and ``f(A) = g(p(A))`` = P(some draft lies in the token set A).

**0. Order.** Sort the tokens with ``p > 0`` and ``q > 0`` by ``q/p``, largest first.

**1. The best induced distribution x.** Any selection induces a law ``x`` of the selected
token with ``x(A) <= f(A)`` for every A (a token of A is selected only if one was
drafted), and step 4 accepts with probability ``sum_y min(q(y), x(y))``. The best ``x``:
take the greatest convex minorant of the points ``(q(prefix), f(prefix))`` of the sorted
prefixes, and on each of its linear pieces of slope ``s`` put ``x = s q``. Its slopes are
the isotonic (non-decreasing) regression of the per-token slopes ``v_t / q_t`` with
weights ``q_t``, where ``v_t = f(prefix up to t) - f(prefix before t)``. Each piece is
tight, ``x(piece) = v(piece)``, so ``x(prefix) = f(prefix)`` at the ends of the pieces.

**2. Random keys.** Give each draft a key in ``[0, 1]`` and select the draft with the
smallest key. If a draft of token ``t`` gets its key uniformly on a set ``M_t`` of length
``p_t``, and the sets tile ``[0, 1]``, every key is uniform on ``[0, 1]`` and ``t`` is
selected with probability (one draft's key at ``y``, the K - 1 others above it)

    integral over M_t of K (1 - y)^(K-1) dy = nu(M_t),

where ``nu`` is the measure with distribution function ``g``. So realising ``x`` is a
tiling: sets ``M_t`` of length ``p_t`` and ``nu``-mass ``x_t``.

**3. The greedy tiling.** Piece ``j`` of the minorant gets its own interval of keys, from
the draft mass of the tokens before it on, earlier pieces lower. Inside a piece, take the
tokens in order; each takes, out of the piece's still-free keys, the *window* of length
``p_t`` -- measured along the free keys, the used ones squeezed out -- whose ``nu``-mass is
``x_t``. The density ``K (1 - y)^(K-1)`` falls as the window slides up the keys, so one
start solves this (a scalar root); the greedy never gets stuck (book). Tokens with
``q = 0`` take one interval each after every piece (their ``x`` is its ``nu``-mass; step 4
always rejects them), so the sets tile the keys.

**4. One single-draft step** from ``x`` to ``q``
(:class:`~mspec.schemes.two_step.TwoStepScheme`): accept the selected ``y`` with
probability ``min(1, q(y) / x(y))``, else output a sample of ``norm(max(q - x, 0))``.
The output is exactly ``q`` and the acceptance ``sum_y min(q(y), x(y))`` is the closed
form ``min_S [q(S) + 1 - p(S)^K]``.

**The exact selection law.** Draft ``i`` has the smallest key with probability
``integral F_i'(y) prod_{j != i} (1 - F_j(y)) dy`` (``F_j``: distribution function of draft
``j``'s key). Between consecutive ends of the sets every ``F_j`` is linear, so the
integrand is a polynomial of degree ``K - 1``: Gauss-Legendre with K nodes is exact.

Floats: keys are float64, which resolve ~1e-16 near key 1. A set shorter than that has
float length 0; its key is then the point where it starts (drafts tied there share it).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq, isotonic_regression

from mspec.schemes.two_step import TwoStepScheme


def ratio_order(draft: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Step 0: the tokens with ``p > 0`` and ``q > 0`` by ``q/p`` descending, shape ``(n,)``.

    Ties go to the larger token id first. Where ``q/p`` overflows (a subnormal ``p``) or
    underflows, distinct ratios round to one float; ``log q - log p`` orders those.
    """
    both = np.flatnonzero((draft > 0) & (target > 0))
    p, q = draft[both], target[both]
    with np.errstate(over="ignore", under="ignore"):
        ratio = q / p
    rounded_away = ~((ratio >= np.finfo(float).tiny) & (ratio < np.inf))
    finer = np.where(rounded_away, np.log(q) - np.log(p), 0.0)
    return both[np.lexsort((-both, -finer, -ratio))]


def nu(start, length, k: int) -> np.ndarray:
    """``nu([start, start + length]) = (1 - start)^K - (1 - start - length)^K`` (no keys past 1).

    Written ``w^K (1 - (1 - length / w)^K)`` with ``w = 1 - start``, so that a short
    interval keeps its relative precision. Elementwise over arrays.
    """
    w = np.maximum(1.0 - np.asarray(start, dtype=float), 0.0)
    share = np.minimum(np.divide(length, w, out=np.ones_like(w), where=w > 0.0), 1.0)
    with np.errstate(divide="ignore"):  # (share = 1: log1p(-1) = -inf, nu = w^K)
        return -(w**k) * np.expm1(k * np.log1p(-share))


def best_induced(masses: np.ndarray, targets: np.ndarray, k: int):
    """Step 1: the best induced distribution of the sorted tokens.

    Args:
        masses: ``(n,)`` ``p`` of the tokens in ``q/p``-descending order.
        targets: ``(n,)`` ``q`` of them.
        k: K.

    Returns:
        ``(x, pieces, top)``: ``x`` of shape ``(n,)``; ``pieces`` ``(m + 1,)`` the first token
        of each piece, ``n`` appended; ``top`` ``(n + 1,)`` the draft mass before each token.
    """
    top = np.minimum(np.concatenate([[0.0], np.cumsum(masses)]), 1.0)
    v = nu(top[:-1], masses, k)  # f(prefix up to t) - f(prefix before t)
    # weights q times a power of two (exact), so that no slope v / q overflows at a tiny q
    shift = max(0, int(np.max(np.frexp(v)[1] - np.frexp(targets)[1], initial=0)) - 1020)
    weights = np.ldexp(targets, shift)
    fit = isotonic_regression(v / weights, weights=weights, increasing=True)
    return fit.x * weights, np.asarray(fit.blocks, dtype=np.int64), top


def cut(free: list, s: float, length: float):
    """Cut the window ``[s, s + length]`` out of the free keys, positions measured along the
    free keys only (the used keys squeezed out).

    Args:
        free: the free keys as ``(start, end)`` intervals, ascending.
        s: where the window starts, ``0 <= s <=`` the free keys' length.
        length: its length.

    Returns:
        ``(window, left)``: the window as ``(start, length)`` intervals, ascending (one of
        length 0 where it has no room), and the free keys left, as ``free``.
    """
    window, left = [], []
    for a, b in free:
        width = b - a
        if s > width or length <= 0.0:  # wholly before the window, or after it
            left.append((a, b))
            s -= width
            continue
        take = min(length, width - s)
        if s > 0.0:
            left.append((a, a + s))
        window.append((a + s, take))
        if take < width - s:
            left.append((a + s + take, b))
        length, s = length - take, 0.0
    if not left and window:  # all taken: what comes next (below the keys' resolution) is a point
        left.append((window[-1][0] + window[-1][1],) * 2)
    return window, left


def greedy_tiling(masses: np.ndarray, x: np.ndarray, start: float, end: float, k: int) -> list:
    """Step 3 for one piece: each token's set of keys, greedily, token by token.

    Args:
        masses: ``(n,)`` ``p`` of the piece's tokens, in order.
        x: ``(n,)`` their ``x``.
        start, end: the piece's keys.
        k: K.

    Returns:
        one ``(r, 2)`` array of key intervals ``(start, end)`` per token.
    """
    free, sets = [(start, end)], []
    for p_t, x_t in zip(masses.tolist(), x.tolist()):

        def surplus(s, p_t=p_t, x_t=x_t):  # nu of the window at s, minus x_t: falls as s grows
            window = np.array(cut(free, s, p_t)[0]).reshape(-1, 2)
            return float(nu(window[:, 0], window[:, 1], k).sum()) - x_t

        last = max(sum(b - a for a, b in free) - p_t, 0.0)
        if surplus(0.0) <= 0.0:  # (the window at the top holds just x_t, or less by rounding)
            s = 0.0
        elif surplus(last) >= 0.0:
            s = last
        else:
            s = brentq(surplus, 0.0, last, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
        window, free = cut(free, s, p_t)
        sets.append(np.array([(a, a + w) for a, w in window]))
    return sets


def smallest_key_probabilities(sets: list, k: int) -> np.ndarray:
    """P(draft ``i`` has the smallest key), shape ``(K,)``, for exact selection laws.

    Args:
        sets: per draft, the ``(r, 2)`` key intervals of its token; its key is uniform on
            them, or the point where they start if their float length is 0.
        k: K.
    """
    sizes = np.array([float(np.sum(s[:, 1] - s[:, 0])) for s in sets])
    point = sizes <= 0.0
    cuts = np.unique(np.concatenate([s.ravel() for s in sets]))
    lo, hi = cuts[:-1], cuts[1:]
    mass = np.zeros((k, lo.size))  # P(key i in [lo, hi]): never as a density (1 / 5e-324 overflows)
    for i in np.flatnonzero(~point):
        inside = ((lo[None, :] >= sets[i][:, :1]) & (hi[None, :] <= sets[i][:, 1:])).any(axis=0)
        mass[i, inside] = (hi - lo)[inside] / sizes[i]
    below = np.concatenate([np.zeros((k, 1)), np.cumsum(mass, axis=1)], axis=1)  # F_i at the cuts
    nodes, weights = np.polynomial.legendre.leggauss(k)
    tau = 0.5 * (nodes + 1.0)  # nodes on [0, 1]
    # 1 - F_j at every node of every interval, (K, intervals, nodes); a point: 1 up to it
    above = 1.0 - below[:, :-1, None] - mass[:, :, None] * tau
    starts = np.array([s[0, 0] for s in sets])
    above[point] = (hi[None, :, None] <= starts[point, None, None])
    wins = np.zeros(k)
    for i in range(k):
        others = np.prod(np.delete(above, i, axis=0), axis=0)
        if not point[i]:
            wins[i] = float(np.sum(mass[i] * (others @ (0.5 * weights))))
            continue
        at, tied = int(np.searchsorted(cuts, starts[i])), np.sum(point & (starts == starts[i]))
        earlier = np.any(point & (starts < starts[i]))
        wins[i] = 0.0 if earlier else float(np.prod(1.0 - below[~point, at])) / tied
    return wins


def draw_key(intervals: np.ndarray, rng: np.random.Generator) -> float:
    """A key uniform on ``intervals`` (``(r, 2)``), or their start if their float length is 0."""
    lengths = intervals[:, 1] - intervals[:, 0]
    if not lengths.sum() > 0.0:
        return float(intervals[0, 0])
    u = rng.random() * lengths.sum()
    ends = np.cumsum(lengths)
    i = min(int(np.searchsorted(ends, u, side="right")), lengths.size - 1)
    return float(intervals[i, 0] + (u - (ends[i] - lengths[i])))


class ReferenceOptimalSelection(TwoStepScheme):
    """The reference of ``"optimal"`` (this module's docstring): the same acceptance and
    output law as :class:`~mspec.fast.optimal_selection.OptimalSelection`, built plainly.
    Not registered; ``OptimalSelection.reference(...)`` builds it.

    Args:
        draft: ``(V,)`` draft distribution ``p`` (K identical drafts).
        target: ``(V,)`` target distribution ``q``.
        num_drafts: K.

    Attributes:
        order: ``(n,)`` the tokens with ``p > 0`` and ``q > 0`` by ``q/p`` descending.
        pieces: ``(m + 1,)`` the first position in ``order`` of each piece, ``n`` appended.
        top: ``(n + 1,)`` the draft mass before each position in ``order``: its first key.
        induced: ``(V,)`` ``x``.
    """

    name = ""  # (not registered under a name of its own)
    supports_non_identical = False

    def __init__(self, *, draft, target, num_drafts=None):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        p, q, k = self.draft, self.target, self.num_drafts
        self.order = ratio_order(p, q)
        x, self.pieces, self.top = best_induced(p[self.order], q[self.order], k)
        self._position = np.full(self.vocab_size, -1, dtype=np.int64)
        self._position[self.order] = np.arange(self.order.size)
        rest = np.flatnonzero((p > 0.0) & (q == 0.0))  # after every piece, one interval each
        ends = np.minimum(self.top[-1] + np.concatenate([[0.0], np.cumsum(p[rest])]), 1.0)
        induced = np.zeros(self.vocab_size)
        induced[self.order] = x
        induced[rest] = nu(ends[:-1], np.diff(ends), k)
        self.induced = induced
        self._sets = {int(t): np.array([[a, b]]) for t, a, b in zip(rest, ends[:-1], ends[1:])}

    def key_set(self, token: int) -> np.ndarray:
        """``(r, 2)`` the key intervals of a draft of ``token`` (no rows if ``p_t = 0``)."""
        token = int(token)
        position = self._position[token]
        if token not in self._sets and position >= 0:  # tile the token's piece (step 3)
            j = int(np.searchsorted(self.pieces, position, side="right")) - 1
            a, b = self.pieces[j], self.pieces[j + 1]
            tokens = self.order[a:b]
            sets = greedy_tiling(self.draft[tokens], self.induced[tokens], self.top[a], self.top[b],
                                 self.num_drafts)
            self._sets.update(zip(tokens.tolist(), sets))
        return self._sets.get(token, np.zeros((0, 2)))

    def selection_law(self, tokens: np.ndarray) -> dict[int, float]:
        """P(select token ``y`` | drafted ``tokens``) as ``{y: probability}``, exactly."""
        wins = smallest_key_probabilities([self.key_set(t) for t in tokens], self.num_drafts)
        law: dict[int, float] = {}
        for t, w in zip(tokens.tolist(), wins.tolist()):
            law[t] = law.get(t, 0.0) + w
        return law

    def select(self, tokens: np.ndarray, rng: np.random.Generator) -> int:
        """Step 2: a key for each draft, from its token's set; the smallest wins."""
        keys = np.array([draw_key(self.key_set(t), rng) for t in tokens])
        first = np.flatnonzero(keys == keys.min())  # (several: drafts tied at a point)
        return int(tokens[first[rng.integers(first.size)] if first.size > 1 else first[0]])
