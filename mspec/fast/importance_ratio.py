"""Our variant of the paper's practical scheme: importance-weighted selection from a truncated LP.

The scheme as the paper publishes it (Section 4, Algorithm 1) is
:mod:`mspec.schemes.importance` (``"is"``), whose pieces this module uses (the ranking by
``sigma``, the truncated LP as a maximum flow, the pairwise stages); this module keeps the
paper's ranking and truncated LP but deviates in the fixed rule, the alphabet and the later
stages (marked below).

This is the canonical decomposition (:mod:`mspec.schemes.canonical`) with selection weights
that are cheap to find at LLM vocabulary sizes. For two drafts ``X_1 ~ p_1``, ``X_2 ~ p_2``
(identical drafts: ``p_1 = p_2 = p``) and target ``q``:

1. **LP tokens** (the paper's ranking): the ``s`` tokens of highest
   ``sigma(x) = q(x) - p_1(x) p_2(x)`` -- how much more target mass ``x`` needs than the
   event "both drafts are x" gives it -- form the set ``L``.
2. **Truncated LP.** For every ordered pair ``(x_1, x_2)`` of distinct tokens of ``L`` the
   weight ``w(x_1, x_2) = P(select x_1)`` is an LP variable. Every other pair of distinct
   tokens is decided by a fixed rule (below) whose ``p_I`` is a closed form (prefix sums in
   rank order); ``p_I`` on ``L`` is linear in ``w`` and we maximise
   ``sum_{y in L} min(q(y), p_I(y))`` (the rest of ``sum min(q, p_I)`` is fixed) with
   ``s(s - 1) + s`` variables, solved exactly as a maximum flow on ``s + 2`` nodes
   (:func:`~mspec.schemes.importance.truncated_lp_weights`).
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
``MIX_GRID``-point grid to maximise ``sum min(q, p_I)`` of the rule applied to *all* pairs.
With non-identical drafts the first stage also tries ``keep = 1`` ("keep ``x_1`` unless the
priority says otherwise") with its own best ``mix`` and uses the better; a later stage
(K > 2, whose first input is the previous winner) uses ``keep = 1`` only, and
``keep = 1``, ``mix = 0`` skips it. The LP can reproduce any mixed rule on ``L``, so the
scheme is never below single-draft acceptance, and its acceptance never falls as K grows.
(A first version ranked by ``sigma`` for the fixed rule, too: with drafts as sharp as the
target it over-selected the likely tokens and fell below a single draft.)

**Alphabet truncation** (``alphabet`` tokens, default 40): only the ``alphabet`` tokens
with the most mass ``q + p_1 + p_2`` are sorted by ratio (``L`` is taken from them); the
other ``V - alphabet`` tokens (the "rest", mostly tail tokens) are never sorted. Pairs
are decided as follows, and ``p_I`` stays an exact closed form:

* every token gets a coarse rank: one of ``RATIO_BINS = 256`` bins of about a quarter
  octave of the ratio, read off its float bits (:func:`ratio_bins`: no sort, no search);
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
greedily (our choice of stage objective).

**The deficit rule** (deviation, ours; every stage tries it, later stages nearly always
pick it): a later stage's first input ``Y`` already has a law close to ``q``, and neither
the priority nor a coin flip helps it much (with those alone the scheme fell behind SpecTr
from K = 3 on LM-shaped pairs). Instead: if ``Y = y`` is over-served (``p_1(y) > q(y)``)
and ``X = x`` under-served, select ``x`` with probability
``c(x) = min(1, (q(x) - p_1(x)) / (p_2(x) A))``, ``A`` = ``p_1`` of the over-served tokens;
else keep ``y``. No token gains more than its deficit, and ``p_I`` is a closed form.

``acceptance()`` is the two-step acceptance ``sum_y min(q(y), p_I(y))`` (step 3 accepts the
selected draft). The residual can still output another draft's token, so P(Y is a drafted
token) -- what ``Selection.accepted`` reports, as for every scheme -- can be higher.
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


#: number of ratio bins used to rank tokens outside the alphabet
RATIO_BINS = 256
#: number of mixing weights tried between the priority rule and the base rule
MIX_GRID = 11
#: bins per octave of the ratio (a power of two: read off the float's mantissa bits)
BINS_PER_OCTAVE = 4
#: the bins cover ratios from 2**-RATIO_OCTAVES to about 2**RATIO_OCTAVES (the end bins: all beyond)
RATIO_OCTAVES = RATIO_BINS // (2 * BINS_PER_OCTAVE)
#: IEEE 754 double: stored mantissa bits, and the bias of the exponent field
FLOAT64_MANTISSA_BITS, FLOAT64_EXPONENT_BIAS = 52, 1023


def ratio_bins(ratio: np.ndarray) -> np.ndarray:
    """Bin ``[0, RATIO_BINS)`` of each ratio ``q / (p_1 + p_2)`` (>= 0), non-decreasing in it.

    About a quarter octave each over ``[2^-32, 2^32]`` (below and above: the end bins), read
    off the bits of the float: its exponent and the top two bits of its mantissa, so the
    bins split each octave at 1.25, 1.5 and 1.75 (for non-negative floats the bit pattern
    sorts like the number). No logarithm, no sort, no search. Any deterministic monotone
    binning keeps the scheme lossless; finer bins only help acceptance.
    """
    # keep the exponent and the top log2(BINS_PER_OCTAVE) mantissa bits
    shift = np.uint64(FLOAT64_MANTISSA_BITS - BINS_PER_OCTAVE.bit_length() + 1)
    code = (np.ascontiguousarray(ratio, dtype=np.float64).view(np.uint64) >> shift).view(np.int64)
    code -= (FLOAT64_EXPONENT_BIAS - RATIO_OCTAVES) * BINS_PER_OCTAVE - 1  # 2**-RATIO_OCTAVES -> bin 1
    return np.clip(code, 0, RATIO_BINS - 1, out=code)  # (in place: V-long arrays are costly)


def _deficit_rule(p1: np.ndarray, p2: np.ndarray, target: np.ndarray) -> tuple | None:
    """The deficit rule (see :class:`RatioPairStage`): ``(score, p_I, A)``, or ``None`` if no
    token has a surplus (nothing to move).

    A first token ``y`` with a surplus (``p1(y) > q(y)``; the set ``S``) gives way to a
    second token ``x`` with a deficit with probability ``c(x) = min(1, (q(x) - p1(x)) /
    (p2(x) A))``, ``A = p1(S)``. So ``x`` gains ``p2(x) c(x) A <= q(x) - p1(x)`` (never more
    than its deficit) and every ``y`` in ``S`` keeps ``p1(y) (1 - G)``, ``G = sum_x p2(x) c(x)``.
    ``score`` is ``sum min(q, p_I)``. A few in-place passes over V.
    """
    surplus = p1 > target
    a_mass = float(p1[surplus].sum())  # A = p1(S)
    if a_mass <= 0.0:
        return None
    # p2 = 0, or p2 * A below the smallest float: inf or nan, cut below (as in `_take`)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        take = np.subtract(target, p1)
        take /= p2 * a_mass
    np.fmax(take, 0.0, out=take)  # 0 off the deficit tokens
    np.minimum(take, 1.0, out=take)  # c(x)
    take *= p2  # p2(x) c(x): 0 where p2 = 0
    g = float(take.sum())
    induced = np.where(surplus, p1 * (1.0 - g), p1)
    take *= a_mass
    induced += take
    return float(np.minimum(induced, target, out=take).sum()), induced, a_mass


def _per_bin(w: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Mass ``w`` per ratio bin, ``(RATIO_BINS,)``."""
    return np.bincount(where, weights=w, minlength=RATIO_BINS)


def _best_mix(target: np.ndarray, base: np.ndarray, rule: np.ndarray, grid: np.ndarray) -> tuple[float, float]:
    """The ``m`` of ``grid`` maximising ``sum min(q, (1 - m) base + m rule)``, and that sum.

    The sum is concave in ``m``, so a binary search for the first grid point after which it
    stops rising finds the best one with about ``2 log2(len(grid))`` evaluations instead of
    ``len(grid)`` (each is a pass over the vocabulary, in place).
    """
    diff = rule - base
    buf = np.empty_like(base)
    cache: dict[int, float] = {}

    def score(i):
        if i not in cache:
            np.multiply(diff, grid[i], out=buf)
            np.add(buf, base, out=buf)
            np.minimum(buf, target, out=buf)
            cache[i] = float(buf.sum())
        return cache[i]

    lo, hi = 0, len(grid) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if score(mid + 1) > score(mid):
            lo = mid + 1
        else:
            hi = mid
    return float(grid[lo]), score(lo)


class RatioPairStage:
    """One two-draft selection: ``x_1 ~ p1``, ``x_2 ~ p2``, truncated LP toward ``target``.

    Args:
        p1: ``(V,)`` distribution of the first token (a draft, or the previous stage's
            ``p_I``).
        p2: ``(V,)`` distribution of the second (draft) token.
        target: ``(V,)`` target ``q``.
        s: number of LP tokens (``1 <= s <= alphabet <= V``).
        alphabet: number of ranked tokens.
        later: a later stage of ``K > 2`` drafts (``p1`` is the previous stage's ``p_I``):
            its base rule keeps ``x_1`` (see the module docstring).

    Attributes:
        sigma: ``(V,)`` LP score ``q - p1 p2`` (the paper's).
        ratio: ``(V,)`` priority score ``q / (p1 + p2)`` of the fixed rule.
        bin: ``(V,)`` coarse rank of every token by ratio (:func:`ratio_bins`).
        ranked: ``(alphabet,)`` the alphabet tokens, highest ratio first.
        lp_tokens: ``(s,)`` the ``s`` alphabet tokens of highest ``sigma``.
        w: ``(s, s)``; ``w[i, j]`` = P(select ``lp_tokens[i]`` | ``x_1 = lp_tokens[i]``,
            ``x_2 = lp_tokens[j]``); diagonal unused.
        mix: probability with which a fixed pair follows the priority rule, else the base
            rule: select ``x_1`` with probability ``keep``.
        keep: 1/2 or 1 (see the module docstring).
        rule: ``"priority"`` (the softened priority above) or ``"deficit"`` (the deficit
            rule: a first token with a surplus gives way to a second token with a deficit;
            module docstring), whichever gives the higher ``sum min(q, p_I)``.
        induced: ``(V,)`` ``p_I`` of the selected token.
        lp_size: ``(variables, constraints)`` of the LP solved.
    """

    def __init__(self, p1: np.ndarray, p2: np.ndarray, target: np.ndarray, s: int, alphabet: int, *,
                 later: bool = False, deficit_rule: bool = True):
        self.p1, self.p2, self.target = p1, p2, target
        mass = p1 + p2
        self._rank_tokens(mass, s, alphabet)  # the LP tokens L and the priority order
        # the fixed rule for pairs outside L: the priority, softened by a base rule ...
        priority, priority_fixed = self._priority_induced()
        best, base = self._choose_base_rule(mass, priority, later=later)
        # ... or the deficit rule, whichever gives the higher sum min(q, p_I)
        self.rule, self._switch_mass = "priority", 0.0
        deficit = _deficit_rule(p1, p2, target) if deficit_rule else None
        if deficit is not None and deficit[0] > best:
            induced = self._use_deficit_rule(*deficit[1:])
        else:
            induced = self._softened_priority_induced(base, priority_fixed)
        self.induced = self._solve_truncated_lp(induced, s)  # the pairs inside L

    # -- building the stage, in order ---------------------------------------------------------
    def _rank_tokens(self, mass: np.ndarray, s: int, alphabet: int) -> None:
        """The scores ``sigma``, ``ratio`` and ``bin``, the ``ranked`` alphabet and the ``lp_tokens``."""
        self.sigma = sigma = self.target - self.p1 * self.p2
        # never-drafted tokens: inf/nan, weight 0; a subnormal mass overflows to inf (the
        # highest priority, as its exact ratio would be)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            self.ratio = ratio = np.where(mass > 0, self.target / mass, np.inf)
        alpha = alphabet_tokens(self.target + mass, alphabet)
        self.ranked = alpha[np.lexsort((alpha, -ratio[alpha]))]  # ratio desc, then id
        self.lp_tokens = rank_by_sigma(alpha, sigma[alpha])[:s]
        self._rank_of = {t: i for i, t in enumerate(self.ranked.tolist())}  # alphabet token -> rank
        self._lp_of = {t: i for i, t in enumerate(self.lp_tokens.tolist())}  # LP token -> row of w
        self.bin = ratio_bins(ratio)

    def _priority_induced(self) -> tuple[np.ndarray, np.ndarray]:
        """``p_I`` of the priority rule "higher ratio wins" on every pair, in closed form, and
        the same without the pairs of two different LP tokens (the LP decides those)."""
        p1, p2, ranked, bins = self.p1, self.p2, self.ranked, self.bin
        same = p1 is p2  # identical drafts: skip the duplicate work for p2
        a1, a2, a_bin = p1[ranked], p2[ranked], bins[ranked]
        # rest mass in bins <= b (an alphabet token in bin b beats those rest tokens); the
        # rest's histogram is all tokens' less the alphabet's (no gather of the rest)
        alpha_hist1 = _per_bin(a1, a_bin)
        alpha_hist2 = alpha_hist1 if same else _per_bin(a2, a_bin)
        rest_hist1 = np.maximum(_per_bin(p1, bins) - alpha_hist1, 0.0)
        rest_hist2 = rest_hist1 if same else np.maximum(_per_bin(p2, bins) - alpha_hist2, 0.0)
        rest_upto1, rest_upto2 = np.cumsum(rest_hist1), np.cumsum(rest_hist2)
        d1 = mass_after(a1) + rest_upto1[a_bin]  # p1-mass an alphabet token beats
        d2 = mass_after(a2) + rest_upto2[a_bin]
        # rest token r in bin b beats: rest tokens in lower bins, alphabet tokens in lower
        # bins, and -- as the first draft -- rest tokens of its own bin (itself included).
        # Computed for every token, then overwritten on the alphabet.
        alpha_below1 = np.cumsum(alpha_hist1) - alpha_hist1
        alpha_below2 = alpha_below1 if same else np.cumsum(alpha_hist2) - alpha_hist2
        beaten2 = rest_upto2 + alpha_below2  # as the first draft: own bin included
        beaten1 = rest_upto1 - rest_hist1 + alpha_below1  # as the second draft: lower bins only
        priority = np.take(beaten2, bins)
        priority *= p1
        priority += np.take(beaten1, bins) * p2
        priority[ranked] = a1 * a2 + a1 * d2 + d1 * a2
        # the same, without the pairs of two different LP tokens (the LP decides those)
        in_lp = np.isin(ranked, self.lp_tokens)
        lp1, lp2 = np.where(in_lp, a1, 0.0), np.where(in_lp, a2, 0.0)
        priority_fixed = priority.copy()
        priority_fixed[ranked] -= in_lp * (a1 * mass_after(lp2) + mass_after(lp1) * a2)
        return priority, priority_fixed

    def _choose_base_rule(self, mass: np.ndarray, priority: np.ndarray, *, later: bool) -> tuple[float, np.ndarray]:
        """How much to trust the priority rule: set ``keep`` and ``mix``; return the best
        ``sum min(q, p_I)`` and the base rule's ``p_I``.

        (Deviation, ours.) Every fixed pair follows the priority rule with probability
        ``mix`` and otherwise a *base* rule: select ``x_1`` with probability ``keep``, so that
        ``p_I = keep p1 + (1 - keep) p2``. Normally ``keep = 1/2`` (``p_I = p`` for identical
        drafts) and ``mix`` maximises ``sum min(q, p_I)`` of the rule applied to *all* pairs
        (concave in ``mix``; a search on a grid). Non-identical drafts try ``keep = 1`` too.
        A later stage uses ``keep = 1`` only: its first input, the previous winner, is already
        close to ``q``, and averaging it with a fresh draft would undo that (``keep = 1``,
        ``mix = 0`` skips the stage). The LP can reproduce any mixed rule on ``L``, so
        acceptance never falls below single-draft sampling, nor with K.
        """
        base = 0.5 * mass
        grid = np.linspace(0.0, 1.0, MIX_GRID)
        self.keep, self.mix, best = 0.5, 0.0, -np.inf
        if not later:  # the first stage: "either draft with probability 1/2" as the base rule
            self.mix, best = _best_mix(self.target, base, priority, grid)
        if self.p1 is not self.p2:  # "keep x_1" as the base rule (m = 0: skip this stage)
            mix_keep, best_keep = _best_mix(self.target, self.p1, priority, grid)
            if best_keep >= best:
                self.keep, self.mix, best = 1.0, mix_keep, best_keep
                base = self.p1
        return best, base

    def _use_deficit_rule(self, induced: np.ndarray, switch_mass: float) -> np.ndarray:
        """Switch to the deficit rule; its ``p_I`` without the pairs of two different LP tokens.

        (Deviation, ours.) If ``x_1 = y`` is over-served (``p1(y) > q(y)``) and ``x_2 = x``
        under-served, select ``x`` with probability ``c(x) = min(1, (q(x) - p1(x)) / (p2(x)
        A))``, ``A = p1(over-served)``: ``x`` never gains more than its deficit, and the
        over-served tokens give way alike. At a later stage, whose first input is already
        close to ``q``, this fills what is still missing far better than a priority.
        """
        self.rule, self.keep, self.mix, self._switch_mass = "deficit", 1.0, 0.0, switch_mass
        lp = self.lp_tokens
        l1, l2 = self.p1[lp], self.p2[lp]
        a_l = np.array([self._give(int(t)) for t in lp])
        c_l = np.array([self._take(int(t)) for t in lp])
        joint = l1[:, None] * l2[None, :]
        np.fill_diagonal(joint, 0.0)
        switch = joint * (a_l[:, None] * c_l[None, :])  # (y, x) -> x
        induced[lp] -= (joint - switch).sum(axis=1) + switch.sum(axis=0)
        return induced

    def _softened_priority_induced(self, base: np.ndarray, priority_fixed: np.ndarray) -> np.ndarray:
        """``p_I`` of the priority rule followed with probability ``mix`` (else the base rule),
        without the pairs of two different LP tokens."""
        lp = self.lp_tokens
        l1, l2 = self.p1[lp], self.p2[lp]
        keep, mix = self.keep, self.mix
        base_fixed = base.copy()
        base_fixed[lp] = keep * l1 * (1.0 - l2.sum()) + (1.0 - keep) * l2 * (1.0 - l1.sum()) + l1 * l2
        induced = np.multiply(priority_fixed, mix, out=priority_fixed)
        induced += (1.0 - mix) * base_fixed
        return induced

    def _solve_truncated_lp(self, induced: np.ndarray, s: int) -> np.ndarray:
        """Set ``w`` and ``lp_size`` by the truncated LP on ``L``; the full ``p_I``."""
        self.w = solve_lp_pairs(self.p1, self.p2, self.target, self.lp_tokens, induced)
        self.lp_size = (s * (s - 1) + s, s) if s >= 2 else (0, 0)
        return induced

    # -- selecting ---------------------------------------------------------------------------
    @property
    def rank(self) -> np.ndarray:
        """``(V,)`` position of each token in ``ranked``, -1 for the rest (built on access)."""
        rank = np.full(self.p1.shape[0], -1, dtype=np.int64)
        rank[self.ranked] = np.arange(self.ranked.size)
        return rank

    def prob_first(self, x1: int, x2: int) -> float:
        """P(select ``x1``) given ``x_1 = x1`` and ``x_2 = x2``."""
        if x1 == x2:
            return 1.0
        i1, i2 = self._lp_of.get(x1, -1), self._lp_of.get(x2, -1)
        if i1 >= 0 and i2 >= 0:
            return float(self.w[i1, i2])
        if self.rule == "deficit":
            return 1.0 - self._give(x1) * self._take(x2)
        return self.mix * self._priority_first(x1, x2) + self.keep * (1.0 - self.mix)

    def _give(self, y: int) -> float:
        """Deficit rule: 1.0 if a first token ``y`` is over-served (it gives way), else 0.0."""
        return 1.0 if self.p1[y] > self.target[y] else 0.0

    def _take(self, x: int) -> float:
        """Deficit rule: c(x), the share of second token ``x``'s deficit it may take."""
        p, q, d = float(self.p1[x]), float(self.target[x]), float(self.p2[x])
        if q <= p or d <= 0.0 or self._switch_mass <= 0.0:
            return 0.0
        # the same float operations as `_deficit_rule`, which built p_I: a product that
        # underflows to 0 means c(x) = 1 there too
        denom = d * self._switch_mass
        return 1.0 if q - p >= denom else (q - p) / denom

    def _priority_first(self, x1: int, x2: int) -> float:
        """The priority rule "higher ratio wins": 1.0 if it selects ``x1``, else 0.0."""
        k1, k2 = self._rank_of.get(x1, -1), self._rank_of.get(x2, -1)
        if k1 >= 0 and k2 >= 0:  # two alphabet tokens: the higher rank
            return 1.0 if k1 < k2 else 0.0
        b1, b2 = self.bin[x1], self.bin[x2]
        if k1 < 0 and k2 < 0:  # two rest tokens: the higher ratio bin, else the first draft's
            return 1.0 if b1 >= b2 else 0.0
        if k1 >= 0:  # alphabet vs rest: the higher ratio bin, ties to the alphabet token
            return 1.0 if b1 >= b2 else 0.0
        return 1.0 if b1 > b2 else 0.0


class RatioImportanceSampling(PairwiseStages):
    """Our variant of the paper's IS scheme: truncated-LP selection, then single-draft speculative sampling.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K (K = 1 is single-draft speculative sampling).
        s: LP tokens per stage, an integer ``>= 1`` (default ``DEFAULT_LP_TOKENS``);
            values above V act as V.
        alphabet: ranked tokens per stage, an integer ``>= s`` (default
            ``DEFAULT_ALPHABET``); values above V act as V.
        deficit_rule: whether a stage may switch to the deficit rule (our deviation, see
            :class:`RatioPairStage`) when it accepts more; ``False`` keeps the priority rule at
            every stage.

    Attributes:
        stages: the ``K - 1`` :class:`RatioPairStage` selections.
        induced: ``(V,)`` ``p_I`` of the finally selected token.
    """

    name = "is-ratio"

    def __init__(self, *, draft, target, num_drafts=None, s: int = DEFAULT_LP_TOKENS,
                 alphabet: int = DEFAULT_ALPHABET, deficit_rule: bool = True):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        self._set_sizes(s, alphabet)
        self.stages: list[RatioPairStage] = []
        induced = self.draft_row(0)
        for i in range(1, self.num_drafts):
            stage = RatioPairStage(induced, self.draft_row(i), self.target, self.s, self.alphabet, later=i > 1,
                                   deficit_rule=bool(deficit_rule))
            self.stages.append(stage)
            induced = stage.induced
        self.induced = induced


__all__ = ["RatioImportanceSampling", "RatioPairStage", "ratio_bins"]
