"""The paper's practical scheme: importance-weighted selection from a truncated LP.

This is the canonical decomposition (:mod:`mspec.canonical`) with selection weights that
are cheap to find at LLM vocabulary sizes. For two drafts ``X_1 ~ p_1``, ``X_2 ~ p_2``
(identical drafts: ``p_1 = p_2 = p``) and target ``q``:

1. **LP tokens** (the paper's ranking): the ``s`` tokens of highest
   ``sigma(x) = q(x) - p_1(x) p_2(x)`` -- how much more target mass ``x`` needs than the
   event "both drafts are x" gives it -- form the set ``L``.
2. **Truncated LP.** For every ordered pair ``(x_1, x_2)`` of distinct tokens of ``L`` the
   weight ``w(x_1, x_2) = P(select x_1)`` is an LP variable. Every other pair of distinct
   tokens is decided by a fixed rule (below) whose ``p_I`` is a closed form (prefix sums in
   rank order); ``p_I`` on ``L`` is linear in ``w`` and we maximise
   ``sum_{y in L} min(q(y), p_I(y))`` (the rest of ``sum min(q, p_I)`` is fixed) with
   ``s(s - 1) + s`` variables (HiGHS).
3. **Single-draft speculative sampling** from the *full* ``p_I`` to ``q``.

Step 3 makes the output exactly ``q``-distributed for any ``s`` and any fixed rule: ``p_I``
is computed from the weights actually used (the LP solution is clipped to ``[0, 1]``
first), so the rule and the LP's accuracy only affect acceptance, never losslessness. The
exact acceptance is ``sum_y min(q(y), p_I(y))``. With ``s >= V`` (and ``alphabet >= V``)
every pair is free and the LP is the full canonical LP, so the scheme is optimal for K = 2.

**The fixed rule** (deviation, ours: the paper's exact rule for pairs outside ``L`` is not
reproduced here). It is a *priority by ratio* ``q(x) / (p_1(x) + p_2(x))``, higher ratio
wins -- the order in which the optimal scheme serves tokens (chapter 5 of the book: the
closed form's minimising set is a prefix in this order, for identical drafts) -- softened:
each fixed pair follows the priority with probability ``mix`` and otherwise a base rule,
"select ``x_1`` with probability ``keep``" (``p_I = keep p_1 + (1 - keep) p_2``). Normally
``keep = 1/2`` ("uniform": ``p_I = p`` for identical drafts) and ``mix`` is picked from an
``MIX_GRID``-point grid to maximise ``sum min(q, p_I)`` of the rule applied to *all* pairs;
a later stage that cannot beat its input is skipped (``keep = 1``, ``mix = 0``). The LP can
reproduce any mixed rule on ``L``, so the scheme is never below single-draft acceptance,
and its acceptance never falls as K grows. (A first version ranked by ``sigma`` for the fixed rule, too: with drafts as
sharp as the target it over-selected the likely tokens and fell below a single draft.)

**Alphabet truncation** (``alphabet`` tokens, default 40): only the ``alphabet`` tokens
with the most mass ``q + p_1 + p_2`` are sorted by ratio (``L`` is taken from them); the
other ``V - alphabet`` tokens (the "rest", mostly tail tokens) are never sorted. Pairs
are decided as follows, and ``p_I`` stays an exact closed form:

* every token gets a coarse rank: one of ``RATIO_BINS = 256`` bins, uniform in
  ``log(ratio)`` (computed arithmetically: no sort, no search);
* two alphabet tokens: the higher exact ratio;
* alphabet token ``a`` vs rest token ``r``: ``a`` unless ``r`` is in a higher bin;
* two rest tokens: the one in the higher bin; within a bin, the first draft's token (for
  identical drafts that has the same ``p_I`` as picking either with probability 1/2).

Nothing is dropped: rest tokens can still be drafted, selected and output.

**K > 2 drafts** (the paper's multi-stage approach, as we read it): select between
``X_1`` and ``X_2`` as above, giving ``Y_2 ~ p_I^(2)``; then select between ``Y_2`` and
``X_3`` with the same truncated LP for two *non-identical* drafts ``(p_I^(2), p_3)``,
and so on; ``Y_K ~ p_I^(K)`` goes to step 3. ``Y_{k-1}`` is a function of
``X_1..X_k`` and independent of ``X_{k+1}``, so each stage is a valid two-draft
selection and the scheme is lossless. Each stage maximises ``sum min(q, p_I^(k))``
greedily (our choice of stage objective); for large K it can fall behind SpecTr.

"Accepted" means step 3 accepted the selected draft, as in :mod:`mspec.canonical`.
"""

from __future__ import annotations

import numbers

import numpy as np

from .optimal import run_linprog
from .selection import Selection, SelectionScheme, check_rng, residual, sample_index


#: number of ratio bins used to rank tokens outside the alphabet
RATIO_BINS = 256
#: number of mixing weights tried between the priority rule and the base rule
MIX_GRID = 11
#: bins are uniform in log(ratio) over [-RATIO_LOG_RANGE, RATIO_LOG_RANGE]
RATIO_LOG_RANGE = 30.0


def ratio_bins(ratio: np.ndarray) -> np.ndarray:
    """Bin ``[0, RATIO_BINS)`` of each ratio ``q / (p_1 + p_2)``, non-decreasing in it.

    Bins are uniform in ``log(ratio)`` over ``[-30, 30]`` (a factor of about 1.26 each),
    computed arithmetically: no sort, no search. Any deterministic monotone binning keeps
    the scheme lossless; finer bins only help acceptance.
    """
    with np.errstate(divide="ignore"):
        t = np.log(ratio)
    t = np.clip(t, -RATIO_LOG_RANGE, RATIO_LOG_RANGE)
    return np.minimum(((t + RATIO_LOG_RANGE) * (RATIO_BINS / (2 * RATIO_LOG_RANGE))).astype(np.int64), RATIO_BINS - 1)


def _mix_scores(target: np.ndarray, base: np.ndarray, rule: np.ndarray, grid: np.ndarray) -> list[float]:
    """``sum min(q, (1 - m) base + m rule)`` for each ``m`` of ``grid`` (in-place buffers)."""
    diff = rule - base
    buf = np.empty_like(base)
    scores = []
    for m in grid:
        np.multiply(diff, m, out=buf)
        buf += base
        np.minimum(buf, target, out=buf)
        scores.append(float(buf.sum()))
    return scores


class PairStage:
    """One two-draft selection: ``x_1 ~ p1``, ``x_2 ~ p2``, truncated LP toward ``target``.

    Args:
        p1: ``(V,)`` distribution of the first token (a draft, or the previous stage's
            ``p_I``).
        p2: ``(V,)`` distribution of the second (draft) token.
        target: ``(V,)`` target ``q``.
        s: number of LP tokens (``1 <= s <= alphabet <= V``).
        alphabet: number of ranked tokens.

    Attributes:
        sigma: ``(V,)`` LP score ``q - p1 p2`` (the paper's).
        ratio: ``(V,)`` priority score ``q / (p1 + p2)`` of the fixed rule.
        bin: ``(V,)`` coarse rank of every token by ratio (:func:`ratio_bins`).
        ranked: ``(alphabet,)`` the alphabet tokens, highest ratio first.
        rank: ``(V,)`` position of each token in ``ranked``, -1 for the rest.
        lp_tokens: ``(s,)`` the ``s`` alphabet tokens of highest ``sigma``.
        w: ``(s, s)``; ``w[i, j]`` = P(select ``lp_tokens[i]`` | ``x_1 = lp_tokens[i]``,
            ``x_2 = lp_tokens[j]``); diagonal unused.
        mix: probability with which a fixed pair follows the priority rule, else the base
            rule: select ``x_1`` with probability ``keep``.
        keep: 0, 1/2 or 1 (see the module docstring).
        induced: ``(V,)`` ``p_I`` of the selected token.
        lp_size: ``(variables, constraints)`` of the LP solved.
    """

    def __init__(self, p1: np.ndarray, p2: np.ndarray, target: np.ndarray, s: int, alphabet: int):
        vocab = target.shape[0]
        self.p1, self.p2 = p1, p2
        same = p1 is p2  # identical drafts: skip the duplicate work for p2
        mass = p1 + p2
        self.sigma = sigma = target - p1 * p2
        with np.errstate(divide="ignore", invalid="ignore"):  # never-drafted tokens: inf/nan, weight 0
            self.ratio = ratio = np.where(mass > 0, target / mass, np.inf)
        if alphabet < vocab:
            alpha = np.argpartition(-(target + mass), alphabet - 1)[:alphabet]
        else:
            alpha = np.arange(vocab)
        self.ranked = ranked = alpha[np.lexsort((alpha, -ratio[alpha]))]  # ratio desc, then id
        self.lp_tokens = lp = alpha[np.lexsort((alpha, -sigma[alpha]))][:s]  # sigma desc, then id
        self.rank = np.full(vocab, -1, dtype=np.int64)  # -1: rest token
        self.rank[ranked] = np.arange(alphabet)
        self.lp_index = np.full(vocab, -1, dtype=np.int64)
        self.lp_index[lp] = np.arange(s)

        # -- p_I of the priority rule "higher ratio wins", in closed form ------------------
        self.bin = bins = ratio_bins(ratio)
        rest = self.rank < 0
        r1, r_bin = p1[rest], bins[rest]
        r2 = r1 if same else p2[rest]
        a1, a2, a_bin = p1[ranked], p2[ranked], bins[ranked]
        in_lp = self.lp_index[ranked] >= 0

        def per_bin(w, where):  # mass per ratio bin, (RATIO_BINS,)
            return np.bincount(where, weights=w, minlength=RATIO_BINS)

        def after(w):  # mass ranked strictly after each alphabet position, (alphabet,)
            return np.concatenate([np.cumsum(w[::-1])[::-1][1:], [0.0]])

        # rest mass in bins <= b (an alphabet token in bin b beats those rest tokens)
        rest_hist1 = per_bin(r1, r_bin)
        rest_hist2 = rest_hist1 if same else per_bin(r2, r_bin)
        rest_upto1, rest_upto2 = np.cumsum(rest_hist1), np.cumsum(rest_hist2)
        d1 = after(a1) + rest_upto1[a_bin]  # p1-mass an alphabet token beats
        d2 = after(a2) + rest_upto2[a_bin]
        priority = np.zeros(vocab)
        priority[ranked] = a1 * a2 + a1 * d2 + d1 * a2
        # rest token r in bin b beats: rest tokens in lower bins, alphabet tokens in lower
        # bins, and -- as the first draft -- rest tokens of its own bin (itself included)
        alpha_below1 = np.cumsum(per_bin(a1, a_bin)) - per_bin(a1, a_bin)
        alpha_below2 = alpha_below1 if same else np.cumsum(per_bin(a2, a_bin)) - per_bin(a2, a_bin)
        beaten2 = rest_upto2 + alpha_below2  # as the first draft: own bin included
        beaten1 = rest_upto1 - rest_hist1 + alpha_below1  # as the second draft: lower bins only
        priority[rest] = r1 * beaten2[r_bin] + beaten1[r_bin] * r2
        # the same, without the pairs of two different LP tokens (the LP decides those)
        lp1, lp2 = np.where(in_lp, a1, 0.0), np.where(in_lp, a2, 0.0)
        priority_fixed = priority.copy()
        priority_fixed[ranked] -= in_lp * (a1 * after(lp2) + after(lp1) * a2)

        # -- how much to trust the priority rule -------------------------------------------
        # (Deviation, ours.) Every fixed pair follows the priority rule with probability
        # `mix` and otherwise a *base* rule: select x_1 with probability `keep`, so that
        # p_I = keep p1 + (1 - keep) p2. Normally keep = 1/2 (p_I = p for identical drafts)
        # and `mix` maximises sum min(q, p_I) of the rule applied to *all* pairs (concave in
        # `mix`; a grid search). A later stage that cannot beat its input is skipped
        # (keep = 1, mix = 0: the previous winner stays). The LP can reproduce any mixed
        # rule on L, so acceptance never falls below single-draft sampling, nor with K.
        l1, l2 = p1[lp], p2[lp]
        base = 0.5 * mass
        grid = np.linspace(0.0, 1.0, MIX_GRID)
        scores = _mix_scores(target, base, priority, grid)
        self.keep, self.mix = 0.5, float(grid[int(np.argmax(scores))])
        if not same and np.minimum(target, p1).sum() >= max(scores):
            self.keep, self.mix = 1.0, 0.0
            base = p1
        keep, mix = self.keep, self.mix
        base_fixed = base.copy()
        base_fixed[lp] = keep * l1 * (1.0 - l2.sum()) + (1.0 - keep) * l2 * (1.0 - l1.sum()) + l1 * l2
        induced = mix * priority_fixed + (1.0 - mix) * base_fixed

        # -- truncated LP on L -------------------------------------------------------------
        # pairs (y, z) in L with y != z, z at y's selection cost: w(z, y) = 0 -> y selected
        induced[lp] += l2 * (l1.sum() - l1)
        self.w = np.ones((s, s))
        self.lp_size = (0, 0)
        if s >= 2:
            self.w = self._solve_lp(l1, l2, target[lp], induced[lp])
            joint = l1[:, None] * l2[None, :] * self.w  # the diagonal cancels below
            induced[lp] += joint.sum(axis=1) - joint.sum(axis=0)
        self.induced = induced

    def _solve_lp(self, l1, l2, q_l, base) -> np.ndarray:
        """Maximise sum_{y in L} min(q(y), p_I(y)); returns ``w`` (s, s) clipped to [0, 1]."""
        s = q_l.shape[0]
        i, j = np.nonzero(~np.eye(s, dtype=bool))  # ordered pairs, variable n = (i[n], j[n])
        m = i.size
        coef = l1[i] * l2[j]  # P(x_1 = L_i, x_2 = L_j)
        # p_I(L_y) = base_y + sum_{n: i=y} coef w_n - sum_{n: j=y} coef w_n ; u_y - p_I <= 0
        a_ub = np.zeros((s, m + s))
        a_ub[i, np.arange(m)] -= coef
        a_ub[j, np.arange(m)] += coef
        a_ub[np.arange(s), m + np.arange(s)] = 1.0
        c = np.concatenate([np.zeros(m), -np.ones(s)])
        bounds = np.concatenate([np.tile([0.0, 1.0], (m, 1)), np.column_stack([np.zeros(s), q_l])])
        # HiGHS's default tolerances: w is clipped and p_I recomputed from it afterwards
        res = run_linprog(c, tight=False, A_ub=a_ub, b_ub=base, bounds=bounds)
        self.lp_size = (m + s, s)
        w = np.ones((s, s))
        w[i, j] = np.clip(res.x[:m], 0.0, 1.0)
        return w

    def prob_first(self, x1: int, x2: int) -> float:
        """P(select ``x1``) given ``x_1 = x1`` and ``x_2 = x2``."""
        if x1 == x2:
            return 1.0
        i1, i2 = self.lp_index[x1], self.lp_index[x2]
        if i1 >= 0 and i2 >= 0:
            return float(self.w[i1, i2])
        return self.mix * self._priority_first(x1, x2) + self.keep * (1.0 - self.mix)

    def _priority_first(self, x1: int, x2: int) -> float:
        """The priority rule "higher ratio wins": 1.0 if it selects ``x1``, else 0.0."""
        k1, k2 = self.rank[x1], self.rank[x2]
        if k1 >= 0 and k2 >= 0:  # two alphabet tokens: the higher rank
            return 1.0 if k1 < k2 else 0.0
        b1, b2 = self.bin[x1], self.bin[x2]
        if k1 < 0 and k2 < 0:  # two rest tokens: the higher ratio bin, else the first draft's
            return 1.0 if b1 >= b2 else 0.0
        if k1 >= 0:  # alphabet vs rest: the higher ratio bin, ties to the alphabet token
            return 1.0 if b1 >= b2 else 0.0
        return 1.0 if b1 > b2 else 0.0


class ImportanceSampling(SelectionScheme):
    """The paper's IS scheme: truncated-LP selection, then single-draft speculative sampling.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K (K = 1 is single-draft speculative sampling).
        s: LP tokens per stage, an integer ``>= 1``; values above V act as V.
        alphabet: ranked tokens per stage, an integer ``>= s``; values above V act as V.

    Attributes:
        stages: the ``K - 1`` :class:`PairStage` selections.
        induced: ``(V,)`` ``p_I`` of the finally selected token.
    """

    name = "is"

    def __init__(self, *, draft, target, num_drafts=None, s: int = 5, alphabet: int = 40):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        for arg, value in (("s", s), ("alphabet", alphabet)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"`{arg}` must be an integer >= 1, got {value!r}")
        vocab = self.vocab_size
        self.s, self.alphabet = min(int(s), vocab), min(int(alphabet), vocab)
        if self.s > self.alphabet:
            raise ValueError(
                f"`s` = {s} LP tokens must be <= `alphabet` = {alphabet} ranked tokens (the LP tokens "
                "are the top `s` of the alphabet); raise `alphabet` or lower `s`"
            )
        self.stages: list[PairStage] = []
        induced = self.draft_row(0)
        for i in range(1, self.num_drafts):
            stage = PairStage(induced, self.draft_row(i), self.target, self.s, self.alphabet)
            self.stages.append(stage)
            induced = stage.induced
        self.induced = induced
        positive = induced > 0
        self._accept = np.zeros(vocab)  # min(1, q / p_I); 0 where p_I = 0 (never selected)
        self._accept[positive] = np.minimum(1.0, self.target[positive] / induced[positive])
        self._residual = residual(self.target, induced)

    def acceptance(self) -> float:
        """``sum_y min(q(y), p_I(y))``."""
        return float(np.minimum(self.target, self.induced).sum())

    def selection_distribution(self, tokens) -> dict[int, float]:
        """Law of the selected token given the drafted tokens, ``{token: probability}``."""
        tokens = self.check_tokens(tokens)
        law = {int(tokens[0]): 1.0}
        for stage, x in zip(self.stages, tokens[1:]):
            x = int(x)
            new: dict[int, float] = {}
            for y, prob in law.items():
                b = stage.prob_first(y, x)
                new[y] = new.get(y, 0.0) + prob * b
                new[x] = new.get(x, 0.0) + prob * (1.0 - b)
            law = new
        return law

    def conditional(self, drafts):
        dist = np.zeros(self.vocab_size)
        accept = 0.0
        for y, prob in self.selection_distribution(drafts).items():
            dist[y] += prob * self._accept[y]
            accept += prob * self._accept[y]
        dist += (1.0 - accept) * self._residual
        return dist, float(accept)

    def sample(self, drafts, rng: np.random.Generator) -> Selection:
        tokens = self.check_tokens(drafts)
        check_rng(rng)
        y = int(tokens[0])
        for stage, x in zip(self.stages, tokens[1:]):
            if rng.random() >= stage.prob_first(y, int(x)):
                y = int(x)
        if rng.random() * self.induced[y] < self.target[y]:  # accept w.p. min(1, q(y)/p_I(y))
            return Selection(y, True, int(np.flatnonzero(tokens == y)[0]))
        return Selection(sample_index(self._residual, rng), False, None)


__all__ = ["ImportanceSampling", "PairStage", "ratio_bins"]
