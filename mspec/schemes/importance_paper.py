"""The paper's IS scheme as published: rank by ``sigma``, a truncated LP, the higher rank wins.

Khisti et al., ICLR 2025, Section 4 "Faster importance weighted speculative sampling"
(Algorithm 1), **as we read it**: every point the paper leaves open is marked *(reading)* or
*(choice, ours)* below and in the code. Our variant with named deviations (a ratio priority,
a coin-flip mix, a deficit rule, ratio bins) is :mod:`mspec.schemes.importance` (``"is"``);
this module is the baseline it is measured against.

For two drafts ``X_1 ~ p_1``, ``X_2 ~ p_2`` (identical drafts: ``p_1 = p_2 = p``) and target
``q``, one :class:`PaperPairStage` selects one of the two tokens:

1. **Alphabet truncation.** Only the ``alphabet`` tokens of most mass ``q + p_1 + p_2`` are
   ranked *(reading: the paper keeps "the highest-probability tokens" without saying of which
   distribution)*; default 40, the best setting of the paper's Table 2.
2. **Ranking.** The alphabet tokens sorted by ``sigma(x) = q(x) - p_1(x) p_2(x)``, highest
   first *(choice, ours: ties go to the lower token id)*. ``L`` = the top ``s`` (default 5,
   Table 2).
3. **Truncated LP.** For ordered pairs ``(x_1, x_2)`` of distinct tokens of ``L`` the weights
   ``w(x_1, x_2) = P(select x_1)`` are LP variables maximising
   ``sum_{y in L} min(q(y), p_I(y))``. *(Implementation choice: the paper calls an LP solver;
   we solve the same LP exactly as a maximum flow, which reaches the same optimum:*
   :func:`~mspec.schemes.importance.truncated_lp_weights` *.)*
4. **Fixed rule** for every other pair ``x_1 != x_2``: the token ranked higher by ``sigma``
   is selected; an alphabet token beats a token outside the alphabet; of two tokens outside
   the alphabet the first draft's ``x_1`` is kept *(choice, ours: the paper ranks the alphabet
   only)*. ``x_1 = x_2`` selects that token.
5. **p_I in closed form** from the weights actually used. With ``P_j(after y)`` the
   ``p_j``-mass of the alphabet tokens ranked after ``y`` plus all tokens outside it (``O``):
   ``p_I(y) = p_1(y) (p_2(y) + P_2(after y)) + p_2(y) P_1(after y)`` for an alphabet token,
   ``p_I(y) = p_1(y) p_2(O)`` for ``y`` outside; the pairs inside ``L`` are then replaced by
   the LP's weights (:func:`~mspec.schemes.importance.solve_lp_pairs`). So the scheme is
   exactly lossless for any ``s`` and ``alphabet``.
6. **K > 2 drafts** *(reading of the paper's successive pairwise selection)*: ``Y_1 = X_1``;
   stage ``k`` selects between ``Y_{k-1}`` (law ``p_I^(k-1)``) and ``X_k ~ p_k`` by the same
   rule, with ``p_1 := p_I^(k-1)``, ``p_2 := p_k``. ``Y_{k-1}`` depends on ``X_1..X_{k-1}``
   only, so each stage is a valid two-draft selection.
7. **Single-draft speculative sampling** from ``p_I = p_I^(K)`` to ``q``
   (:class:`~mspec.schemes.two_step.TwoStepScheme`); ``acceptance()`` is
   ``sum_y min(q(y), p_I(y))``.

With ``s >= V`` (and so ``alphabet >= V``) every pair is an LP pair and the stage is the full
canonical LP: optimal for K = 2. With ``s < V`` the fixed rule can fall short even when
``p = q`` (it favours the high-``sigma`` tokens), so the acceptance is then below 1.
"""

from __future__ import annotations

import numpy as np

from mspec.schemes.importance import (
    DEFAULT_ALPHABET,
    DEFAULT_LP_TOKENS,
    PairwiseStages,
    alphabet_tokens,
    mass_after,
    rank_by_sigma,
    solve_lp_pairs,
)


class PaperPairStage:
    """One two-draft selection of the paper's scheme: ``x_1 ~ p1``, ``x_2 ~ p2``, toward ``target``.

    Args:
        p1: ``(V,)`` law of the first token (a draft, or the previous stage's ``p_I``).
        p2: ``(V,)`` law of the second (draft) token.
        target: ``(V,)`` target ``q``.
        s: LP tokens, ``1 <= s <= alphabet``.
        alphabet: ranked tokens, ``alphabet <= V``.

    Attributes:
        ranked: ``(alphabet,)`` the alphabet tokens, highest ``sigma`` first.
        lp_tokens: ``(s,)`` ``L = ranked[:s]``.
        w: ``(s, s)``; ``w[i, j]`` = P(select ``L_i`` | ``x_1 = L_i``, ``x_2 = L_j``); diagonal unused.
        induced: ``(V,)`` ``p_I``, the law of the selected token.
    """

    def __init__(self, p1: np.ndarray, p2: np.ndarray, target: np.ndarray, s: int, alphabet: int):
        self.p1, self.p2, self.target = p1, p2, target
        alpha = alphabet_tokens(target + (p1 + p2), alphabet)  # (reading) the mass q + p1 + p2
        sigma = target[alpha] - p1[alpha] * p2[alpha]
        self.ranked = rank_by_sigma(alpha, sigma)  # (choice, ours) ties: lower token id first
        self.lp_tokens = self.ranked[:s]
        self._rank_of = {t: i for i, t in enumerate(self.ranked.tolist())}  # alphabet token -> rank
        self.induced = self._fixed_rule_induced(s)
        # (implementation choice) the truncated LP as a maximum flow, not an LP solver
        self.w = solve_lp_pairs(p1, p2, target, self.lp_tokens, self.induced)

    def _fixed_rule_induced(self, s: int) -> np.ndarray:
        """``(V,)`` ``p_I`` of the fixed rule on every pair except two different LP tokens."""
        p1, p2, ranked = self.p1, self.p2, self.ranked
        outside = np.ones(p1.shape[0], dtype=bool)
        outside[ranked] = False
        out1, out2 = float(p1[outside].sum()), float(p2[outside].sum())
        a1, a2 = p1[ranked], p2[ranked]
        after1, after2 = mass_after(a1) + out1, mass_after(a2) + out2  # what each alphabet token beats
        # an LP token beats the LP tokens after it only as the LP says: leave those pairs out
        after1[:s], after2[:s] = after1[s - 1], after2[s - 1]
        induced = p1 * out2  # a token outside: kept as x_1 against every token outside (choice, ours)
        induced[ranked] = a1 * (a2 + after2) + a2 * after1
        return induced

    def prob_first(self, x1: int, x2: int) -> float:
        """P(select ``x1``) given ``x_1 = x1`` and ``x_2 = x2``: the pair rule."""
        if x1 == x2:
            return 1.0
        k1, k2 = self._rank_of.get(x1, -1), self._rank_of.get(x2, -1)
        s = self.w.shape[0]
        if 0 <= k1 < s and 0 <= k2 < s:  # two LP tokens: the LP's weight
            return float(self.w[k1, k2])
        if k1 >= 0 and k2 >= 0:  # two alphabet tokens: the higher sigma rank
            return 1.0 if k1 < k2 else 0.0
        if k1 >= 0 or k2 >= 0:  # an alphabet token beats a token outside
            return 1.0 if k1 >= 0 else 0.0
        return 1.0  # two tokens outside the alphabet: keep x_1 (choice, ours)


class PaperImportanceSampling(PairwiseStages):
    """The paper's IS scheme (Section 4, Algorithm 1), then single-draft speculative sampling.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K (K = 1 is single-draft speculative sampling).
        s: LP tokens per stage, an integer ``>= 1`` (default 5); values above V act as V.
        alphabet: ranked tokens per stage, an integer ``>= s`` (default 40); values above V
            act as V.

    Attributes:
        stages: the ``K - 1`` :class:`PaperPairStage` selections.
        induced: ``(V,)`` ``p_I`` of the finally selected token.
    """

    name = "is-paper"

    def __init__(self, *, draft, target, num_drafts=None, s: int = DEFAULT_LP_TOKENS,
                 alphabet: int = DEFAULT_ALPHABET):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        self._set_sizes(s, alphabet)
        self.stages: list[PaperPairStage] = []
        induced = self.draft_row(0)  # Y_1 = X_1
        for i in range(1, self.num_drafts):  # stage k: Y_{k-1} ~ p_I^(k-1) against X_k ~ p_k
            stage = PaperPairStage(induced, self.draft_row(i), self.target, self.s, self.alphabet)
            self.stages.append(stage)
            induced = stage.induced
        self.induced = induced


__all__ = ["PaperImportanceSampling", "PaperPairStage"]
