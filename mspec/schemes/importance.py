"""The paper's IS scheme: rank by ``sigma``, a truncated LP, the higher rank wins.

Khisti et al., ICLR 2025, Section 4 "Faster importance weighted speculative sampling"
(Algorithm 1 and its Appendix I / Algorithm 2). Each point is marked with its source:
*(paper)* the paper's text, *(reimpl.)* the one public reimplementation that cites Appendix I
(GitHub Rmuk655/Distill-Spec-Research, ``verifiers/khisti.py``), *(ours)* our choice.
:mod:`mspec.fast.importance_ratio` (``"is-ratio"``, our variant) builds on these pieces.

For two drafts ``X_1 ~ p_1``, ``X_2 ~ p_2`` (identical drafts: ``p_1 = p_2 = p``) and target
``q``, one :class:`PairStage` selects one of the two tokens:

1. **Ranking.** Tokens sorted by ``sigma(x) = q(x) - p_1(x) p_2(x)``, highest first *(paper;
   ties to the lower token id: ours)*. By default (``alphabet=None``) the whole vocabulary is
   ranked *(reimpl.: no cut; the same LP, so the same acceptance at K = 2)*. ``L`` = the top ``s`` (default 5, the paper's Table 2).
2. **Alphabet truncation (option, ours).** ``alphabet=n`` ranks only the ``n`` tokens of
   most mass ``q + p_1 + p_2`` *(the paper's Table 2 ablates a truncation 10/40/50 without
   its rule; the mass and the rule for tokens outside are ours)*; ``DEFAULT_ALPHABET`` = 40.
3. **Truncated LP** *(paper)*. For ordered pairs ``(x_1, x_2)`` of distinct tokens of ``L``
   the weights ``w(x_1, x_2) = P(select x_1)`` are LP variables maximising
   ``sum_{y in L} min(q(y), p_I(y))``; solved exactly as a maximum flow, the same optimum
   *(ours: the paper calls an LP solver)*: :func:`truncated_lp_weights`.
4. **Fixed rule** for every other pair ``x_1 != x_2``: the token ranked higher by ``sigma``
   is selected *(paper)*; with an alphabet, an alphabet token beats a token outside it and
   of two tokens outside the first draft's ``x_1`` is kept *(ours)*. ``x_1 = x_2`` selects
   that token.
5. **p_I in closed form** from the weights actually used. With ``P_j(after y)`` the
   ``p_j``-mass of the ranked tokens after ``y`` plus all tokens outside the alphabet (``O``):
   ``p_I(y) = p_1(y) (p_2(y) + P_2(after y)) + p_2(y) P_1(after y)`` for a ranked token,
   ``p_I(y) = p_1(y) p_2(O)`` for ``y`` outside; the pairs inside ``L`` are then replaced by
   the LP's weights (:func:`solve_lp_pairs`). So the scheme is
   exactly lossless for any ``s`` and ``alphabet``.
6. **K > 2 drafts** *(our reading of the paper's successive pairwise selection)*:
   ``Y_1 = X_1``; stage ``k`` selects between ``Y_{k-1}`` (law ``p_I^(k-1)``) and
   ``X_k ~ p_k`` by the same rule, with ``p_1 := p_I^(k-1)``, ``p_2 := p_k``. ``Y_{k-1}``
   depends on ``X_1..X_{k-1}`` only, so each stage is a valid two-draft selection. A strict
   priority has no brake, so acceptance can *fall* as drafts are added (chapter 6).
7. **Single-draft speculative sampling** from ``p_I = p_I^(K)`` to ``q``
   (:class:`~mspec.schemes.two_step.TwoStepScheme`); ``acceptance()`` is
   ``sum_y min(q(y), p_I(y))``.

With ``s >= V`` every pair is an LP pair and the stage is the full canonical LP: optimal for
K = 2; so is a pair whose supports together hold at most ``s`` tokens (with the whole
ranking). With ``s < V`` the fixed rule can fall short even when ``p = q``.
"""

from __future__ import annotations

import numbers

import numpy as np

from mspec.schemes.two_step import TwoStepScheme


#: LP tokens ``s`` per stage by default; ``DEFAULT_ALPHABET``: the truncation of ``"is-ratio"``
#: (its default) and Table 2's setting; ``"is"`` ranks the whole vocabulary by default
DEFAULT_LP_TOKENS, DEFAULT_ALPHABET = 5, 40


def mass_after(w: np.ndarray) -> np.ndarray:
    """Mass ranked strictly after each position of the ranked alphabet, ``(alphabet,)``."""
    return np.concatenate([np.cumsum(w[::-1])[::-1][1:], [0.0]])



def _max_flow_residual(capacity: np.ndarray, *, source: int, sink: int) -> np.ndarray:
    """Residual capacities after a maximum ``source -> sink`` flow (Edmonds-Karp).

    Args:
        capacity: ``(n, n)`` non-negative edge capacities, ``capacity[u, v]`` for ``u -> v``.

    Returns:
        ``(n, n)`` residual capacities; ``capacity - residual`` is the net flow (antisymmetric).

    Shortest augmenting paths; each augmentation empties its bottleneck edge exactly
    (``c - c == 0`` in floating point), so the classical ``O(n^3)`` bound on the number of
    augmentations holds. ``n`` is ``s + 2``, a handful of nodes: plain Python lists.
    """
    n = capacity.shape[0]
    res = capacity.tolist()
    while True:
        parent = [-1] * n
        parent[source] = source
        queue = [source]
        for u in queue:  # breadth-first search for a shortest augmenting path
            row = res[u]
            for v in range(n):
                if parent[v] < 0 and row[v] > 0.0:
                    parent[v] = u
                    queue.append(v)
            if parent[sink] >= 0:
                break
        if parent[sink] < 0:
            return np.array(res)
        bottleneck, v = float("inf"), sink
        while v != source:
            u = parent[v]
            bottleneck = min(bottleneck, res[u][v])
            v = u
        v = sink
        while v != source:
            u = parent[v]
            res[u][v] -= bottleneck
            res[v][u] += bottleneck
            v = u


def truncated_lp_weights(l1, l2, q_l, base) -> np.ndarray:
    """The truncated LP: weights ``w`` on the LP tokens maximising ``sum_L min(q, p_I)``.

    Args:
        l1: ``(s,)`` first-token probabilities ``p_1`` of the LP tokens.
        l2: ``(s,)`` second-token probabilities ``p_2`` of the LP tokens.
        q_l: ``(s,)`` target probabilities of the LP tokens.
        base: ``(s,)`` ``p_I`` of the LP tokens with every pair of two LP tokens given to
            the second draft.

    Returns:
        ``(s, s)``: ``w[y, z]`` = P(select ``L_y``) given ``x_1 = L_y``, ``x_2 = L_z``, in
        ``[0, 1]`` (diagonal unused: 1).

    The LP is a maximum flow, solved exactly (deviation, ours: the paper calls an LP
    solver). ``base`` gives every pair of LP tokens to the second draft; raising
    ``w(y, z)`` moves up to ``c(y, z) = p_1(y) p_2(z)`` of ``p_I`` from ``z`` to ``y``.
    Tokens with ``base > q`` can give away their surplus ``base - q``, tokens with
    ``base < q`` gain from up to their deficit ``q - base``, and mass may pass through
    other LP tokens. So the best ``sum min(q, p_I)`` is ``sum min(q, base)`` plus the
    maximum flow from a source (edges of capacity surplus) through the graph of LP
    tokens (edge ``z -> y`` of capacity ``c(y, z)``) to a sink (edges of capacity
    deficit); ``w(y, z)`` = net flow ``z -> y`` / ``c(y, z)``.
    """
    s = q_l.shape[0]
    cap = np.zeros((s + 2, s + 2))
    coef = l1[:, None] * l2[None, :]  # coef[y, z] = P(x_1 = L_y, x_2 = L_z)
    cap[:s, :s] = coef.T  # edge z -> y carries the pair (y, z)
    np.fill_diagonal(cap, 0.0)
    cap[s, :s] = np.maximum(base - q_l, 0.0)  # source -> surplus
    cap[:s, s + 1] = np.maximum(q_l - base, 0.0)  # deficit -> sink
    net = cap - _max_flow_residual(cap, source=s, sink=s + 1)  # net flow, antisymmetric
    w = np.ones((s, s))  # the diagonal is unused
    moved = np.clip(net[:s, :s].T, 0.0, None)  # moved[y, z] = net flow z -> y
    off = ~np.eye(s, dtype=bool) & (coef > 0)
    w[~np.eye(s, dtype=bool)] = 0.0  # pairs never drafted together: any w; 0 (second wins)
    w[off] = np.clip(moved[off] / coef[off], 0.0, 1.0)
    return w


def alphabet_tokens(mass: np.ndarray, alphabet: int) -> np.ndarray:
    """The ``alphabet`` tokens of highest ``mass`` (``q + p_1 + p_2``), in no particular order.

    Args:
        mass: ``(V,)`` the score of every token.
        alphabet: how many tokens to keep; all ``V`` (``arange``) when ``alphabet >= V``.

    Returns:
        ``(min(alphabet, V),)`` token ids. Ties at the edge: whichever ``np.argpartition``
        keeps (deterministic).
    """
    vocab = mass.shape[0]
    if alphabet < vocab:
        return np.argpartition(mass, vocab - alphabet)[vocab - alphabet :]
    return np.arange(vocab)


def rank_by_sigma(tokens: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """``tokens`` sorted by the paper's ``sigma`` (``(n,)``, one per token), highest first;
    ties: the lower token id first."""
    return tokens[np.lexsort((tokens, -sigma))]


def solve_lp_pairs(p1: np.ndarray, p2: np.ndarray, target: np.ndarray, lp_tokens: np.ndarray,
                   induced: np.ndarray) -> np.ndarray:
    """The truncated LP on the pairs of two different LP tokens; adds them to ``induced``.

    Args:
        p1, p2: ``(V,)`` laws of the first and second token.
        target: ``(V,)`` target ``q``.
        lp_tokens: ``(s,)`` the LP tokens ``L``.
        induced: ``(V,)`` ``p_I`` of every pair *except* two different LP tokens; updated in
            place to the full ``p_I`` under the weights returned.

    Returns:
        ``(s, s)`` weights ``w`` (:func:`truncated_lp_weights`; ``[[1.0]]`` for ``s = 1``).
    """
    s = lp_tokens.shape[0]
    l1, l2 = p1[lp_tokens], p2[lp_tokens]
    # pairs (y, z) in L with y != z, z at y's selection cost: w(z, y) = 0 -> y selected
    induced[lp_tokens] += l2 * (l1.sum() - l1)
    w = np.ones((s, s))
    if s >= 2:
        w = truncated_lp_weights(l1, l2, target[lp_tokens], induced[lp_tokens])
        joint = l1[:, None] * l2[None, :] * w  # the diagonal cancels below
        induced[lp_tokens] += joint.sum(axis=1) - joint.sum(axis=0)
    return w




class PairStage:
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
        alpha = alphabet_tokens(target + (p1 + p2), alphabet)  # (ours) the mass q + p1 + p2
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


class PairwiseStages(TwoStepScheme):
    """K drafts as ``K - 1`` two-draft stages (the paper's multi-stage approach): ``Y_1 = X_1``,
    stage ``k`` keeps ``Y_{k-1}`` or switches to ``X_{k+1}``; ``Y_K`` goes to the single-draft step.

    A subclass sets ``stages`` (objects with ``prob_first(x1, x2)`` = P(keep ``x1``)) and
    ``induced`` in ``__init__``; ``_set_sizes`` checks ``s`` and ``alphabet``.
    """

    stages: list

    def _set_sizes(self, s, alphabet) -> None:
        """Check ``s`` and ``alphabet`` (``None``: the whole vocabulary) and set them, capped at V."""
        alphabet = self.vocab_size if alphabet is None else alphabet
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

    def selection_law(self, tokens: np.ndarray) -> dict[int, float]:
        """The stages one after another: ``{token: P(selected)}`` for validated ``tokens``."""
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

    def select(self, tokens: np.ndarray, rng: np.random.Generator) -> int:
        """Stage ``i`` keeps the running winner ``y`` or switches to draft ``i + 1``."""
        y = int(tokens[0])
        for stage, x in zip(self.stages, tokens[1:]):
            if rng.random() >= stage.prob_first(y, int(x)):
                y = int(x)
        return y


class ImportanceSampling(PairwiseStages):
    """The paper's IS scheme (Section 4, Algorithm 1), then single-draft speculative sampling.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K (K = 1 is single-draft speculative sampling).
        s: LP tokens per stage, an integer ``>= 1`` (default 5); values above V act as V.
        alphabet: ranked tokens per stage: ``None`` (default) ranks the whole vocabulary; an
            integer ``>= s`` truncates (our rule, see the module); values above V act as V.

    Attributes:
        stages: the ``K - 1`` :class:`PairStage` selections.
        induced: ``(V,)`` ``p_I`` of the finally selected token.
    """

    name = "is"

    def __init__(self, *, draft, target, num_drafts=None, s: int = DEFAULT_LP_TOKENS,
                 alphabet: int | None = None):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        self._set_sizes(s, alphabet)
        self.stages: list[PairStage] = []
        induced = self.draft_row(0)  # Y_1 = X_1
        for i in range(1, self.num_drafts):  # stage k: Y_{k-1} ~ p_I^(k-1) against X_k ~ p_k
            stage = PairStage(induced, self.draft_row(i), self.target, self.s, self.alphabet)
            self.stages.append(stage)
            induced = stage.induced
        self.induced = induced


__all__ = ["DEFAULT_ALPHABET", "DEFAULT_LP_TOKENS", "ImportanceSampling", "PairStage", "PairwiseStages",
           "alphabet_tokens", "mass_after", "rank_by_sigma", "solve_lp_pairs", "truncated_lp_weights"]
