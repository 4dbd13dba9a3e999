"""The exactly optimal scheme at vocabulary scale ("optimal", mspec.fast.optimal_selection).

Paper notation: K i.i.d. drafts from p (``draft``), target q (``target``).
"""

import itertools

import numpy as np
import pytest

import mspec
from mspec.schemes.closed_form import optimal_acceptance
from mspec.schemes.exact import output_distribution
from mspec.schemes.optimal_lp import OptimalLP
from mspec.fast.optimal_selection import FastPath, OptimalSelection, lex_optimal_induced
from mspec.fast.optimal_selection.buckets import BUCKET_BITS, bucket_level, bucket_sums, coarser_sums
from mspec.fast.optimal_selection.greedy import GreedyPiece
from mspec.fast.optimal_selection.induced import argsort_positive
from mspec.fast.optimal_selection.pool import PoolPiece
from mspec.fast.optimal_selection.roots import power_root
from mspec.fast.optimal_selection.runs import RunPiece

from sampling import chi2_pvalue, sample_counts
from strategies import bucket_case, near_tight_case, optimum_one_case, random_case, tight_bucket_case


def nu(intervals, k):
    """nu-mass of weighted key intervals ``(a, b, w)``: nu has distribution function
    g(y) = 1 - (1 - y)^K, and a token owns the share w of the keys in [a, b]."""
    return sum(w * ((1 - a) ** k - (1 - b) ** k) for a, b, w in intervals)


def length(intervals):
    return sum(w * (b - a) for a, b, w in intervals)


def assert_key_laws_tile(rule, k, tokens, atol=1e-13):
    """Each token's keys have total length p_t and nu-mass x_t, and at every key the
    shares of all tokens add up to 1 (so a key is uniform on [0, 1])."""
    laws = {t: rule.key_fragments(int(t)) for t in tokens}
    for t, law in laws.items():
        assert length(law) == pytest.approx(rule.draft[t], abs=atol)
        if rule.draft[t] > 0:
            assert nu(law, k) == pytest.approx(rule.induced[t], abs=atol)
    edges = np.unique([e for law in laws.values() for a, b, _ in law for e in (a, b)])
    mids = 0.5 * (edges[1:] + edges[:-1])
    cover = np.zeros_like(mids)
    for law in laws.values():
        for a, b, w in law:
            cover += w * ((mids > a) & (mids < b))
    # the total share at each key between consecutive edges, and how far from 1 it is,
    # integrated over the keys (rounding leaves slivers of width ~1e-16)
    return edges, cover, float(np.sum(np.abs(cover - 1.0) * np.diff(edges)))


def test_hand_built_priority():
    # p = (.5, .5), q = (.9, .1), K = 2. Ratios q/p: 1.8, 0.2. The prefix {0} gives
    # f({0}) = 1 - .5^2 = .75 and token 1 gets the remaining .25; slopes v/q = .83, 2.5
    # already increase, so two pieces: token 0 has strict priority (keys [0, .5]).
    # Drafts (0, 0): select 0, accept (q/x = .9/.75 > 1).  (1, 1): select 1, accept w.p.
    # .1/.25 = .4.  (0, 1): token 0 always wins.  Acceptance .75 + .1 = .85.
    rule = OptimalSelection(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    np.testing.assert_allclose(rule.induced, [0.75, 0.25])
    assert rule.key_fragments(0) == [(0.0, 0.5, 1.0)] and rule.key_fragments(1) == [(0.5, 1.0, 1.0)]
    assert rule.selection_probabilities(np.array([0, 1])) == pytest.approx([1.0, 0.0])
    assert rule.acceptance() == pytest.approx(0.85)


def test_hand_built_shell():
    # p = (.5, .5), q = (.6, .4), K = 2: slopes v/q = 1.25, .625 decrease, so PAVA pools them
    # into one piece of slope 1: x = q and acceptance 1. Greedy tiling: token 0 (larger
    # q/p) takes the window [S, S + .5] with nu = (1-S)^2 - (.5-S)^2 = .75 - S = .6, so
    # S = .15; token 1 wraps around it: [0, .15] and [.65, 1] (nu = .2775 + .1225 = .4).
    rule = OptimalSelection(draft=[0.5, 0.5], target=[0.6, 0.4], num_drafts=2, tiling="greedy")
    np.testing.assert_allclose(rule.induced, [0.6, 0.4])
    np.testing.assert_allclose(rule.key_fragments(0), [(0.15, 0.65, 1.0)], atol=1e-15)
    np.testing.assert_allclose(rule.key_fragments(1), [(0.0, 0.15, 1.0), (0.65, 1.0, 1.0)], atol=1e-15)
    # drafts (0, 1): token 0 wins iff its key (uniform on [.15, .65]) is below token 1's
    # (uniform on [0, .15] u [.65, 1]): P = .7 * 1 (token 1 above .65) + 0 = .7
    assert rule.selection_probabilities(np.array([0, 1])) == pytest.approx([0.7, 0.3])
    assert rule.acceptance() == pytest.approx(1.0)


def test_hand_built_slots_and_pool():
    # The same pair with the default slots-and-pool realisation. One piece, [0, 1], with
    # H(m) = 1 - (1 - m)^2 and mean density g = 1. Token 0 is denser (b = .6/.5 = 1.2):
    # front slot [0, C] with H(C) - C = C - C^2 = x - g p = .1, so C = (1 - sqrt(.6)) / 2
    # = .1127. Token 1 (b = .8): back slot [1 - D, 1] with D - D^2 = g p - x = .1, D = C.
    # Each puts the rest, .5 - C = .3873, in the pool [C, 1 - C] (length .7746, half each).
    c = (1 - np.sqrt(0.6)) / 2
    rule = OptimalSelection(draft=[0.5, 0.5], target=[0.6, 0.4], num_drafts=2)
    np.testing.assert_allclose(rule.key_fragments(0), [(0, c, 1), (c, 1 - c, 0.5)], atol=1e-15)
    np.testing.assert_allclose(rule.key_fragments(1), [(1 - c, 1, 1), (c, 1 - c, 0.5)], atol=1e-15)
    # drafts (0, 1): token 0's key is in its slot w.p. a = 2c = 1 - sqrt(.6) (always the
    # smallest), else in the pool, where it wins if token 1's key is in the back slot
    # (w.p. a) or above it in the pool (1/2): a + (1-a)(a + (1-a)/2) = 1 - .6/2 = .7 --
    # forced by x, the same as the greedy tiling.
    assert rule.selection_probabilities(np.array([0, 1])) == pytest.approx([0.7, 0.3])
    assert rule.acceptance() == pytest.approx(1.0)


def test_groups_tiled_groups_and_the_greedy_fallback():
    # A token that would need a slot longer than itself shares one with the tokens before
    # it (a group); this pair needs a group on both sides.
    draft, target = np.array([0.08, 0.03, 0.47, 0.21, 0.21]), np.array([0.03, 0.04, 0.14, 0.31, 0.48])
    rule = OptimalSelection(draft=draft, target=target, num_drafts=3)
    pieces = [rule._piece(j) for j in range(rule.blocks.size - 1)]
    assert any(isinstance(pc, PoolPiece) and pc.front.group_spans() and pc.back.group_spans() for pc in pieces)
    law, _ = output_distribution(rule)
    np.testing.assert_allclose(law, target, atol=1e-12)
    assert assert_key_laws_tile(rule, 3, range(5))[2] < 1e-13
    # Below a nearly tight prefix (front) or above a nearly tight suffix (back) a group is
    # tiled greedily inside its joint slot instead of spread evenly.
    for k, draft, target, side in [(3, [0.15, 0.1, 0.04, 0.58, 0.13], [0.32, 0.2, 0.05, 0.2, 0.23], "front"),
                                   (2, [0.39, 0.09, 0.14, 0.38], [0.25, 0.02, 0.02, 0.71], "back")]:
        draft, target = np.array(draft), np.array(target)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
        pieces = [rule._piece(j) for j in range(rule.blocks.size - 1)]
        assert any(isinstance(pc, PoolPiece) and getattr(pc, side).tiled for pc in pieces)
        np.testing.assert_allclose(output_distribution(rule)[0], target, atol=1e-12)
        assert assert_key_laws_tile(rule, k, range(draft.size))[2] < 1e-13
    # A tiled group's slot is a piece of its own, realised again by slots and a pool (depth
    # 1); where that fails, by the greedy inside the slot (forced here), still exact.
    for forced in (False, True):
        fast = FastPath(max_depth=0 if forced else FastPath().max_depth)
        for k, draft, target in [(3, [0.15, 0.1, 0.04, 0.58, 0.13], [0.32, 0.2, 0.05, 0.2, 0.23]),
                                 (2, [0.39, 0.09, 0.14, 0.38], [0.25, 0.02, 0.02, 0.71])]:
            draft, target = np.array(draft), np.array(target)
            rule = OptimalSelection(draft=draft, target=target, num_drafts=k, fast=fast)
            assert assert_key_laws_tile(rule, k, range(draft.size))[2] < 1e-13
            np.testing.assert_allclose(output_distribution(rule)[0], target, atol=1e-12)
            tilings = [t for j in range(rule.blocks.size - 1) for t in rule._piece(j)._tilings.values()]
            assert tilings and all(isinstance(t, GreedyPiece) if forced else isinstance(t, PoolPiece) and t.depth == 1
                                   for t in tilings)
    # When slots and a pool do not serve a piece, it falls back to the greedy tiling, still
    # exact (forced here: a negative tolerance fails every certificate of the fast path).
    draft, target = np.array([0.08, 0.03, 0.47, 0.21, 0.21]), np.array([0.03, 0.04, 0.14, 0.31, 0.48])
    rule = OptimalSelection(draft=draft, target=target, num_drafts=3, certify_tolerance=-1.0)
    assert "greedy" in [rule.realisation(t) for t in range(5)]
    law, accept = output_distribution(rule)
    np.testing.assert_allclose(law, target, atol=1e-12)
    assert accept == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=3), abs=1e-12)


def test_tiled_groups_fill_the_extreme_tokens_first():
    """Water-filling in a tiled group: the tokens nearest the side's end own all their length,
    the others one common share. Spreading evenly (and owning the same fraction each, the
    previous rule) fails on this LM-shaped pair; every piece is now slots and a pool."""
    logits = 4.0 * np.random.default_rng(116).gumbel(size=50)
    draft = mspec.distribution_from_logits(logits, temperature=2.4)
    target = mspec.distribution_from_logits(logits)
    rule = OptimalSelection(draft=draft, target=target, num_drafts=2)
    assert {rule.realisation(t) for t in range(50)} == {"pool"}
    shares = []
    for j in range(rule.blocks.size - 1):
        piece = rule._piece(j)
        for side in (piece.front, piece.back):
            for own, _, tokens in side.tiled.values():
                shares.append(own / side.masses[tokens])  # densest first
    assert shares and all(np.all(x <= 1 + 1e-12) for x in shares)
    # full ownership at the extreme end, partial towards the pool, in some group
    assert any(x.max() == pytest.approx(1.0) and x.min() < 0.99 for x in shares)
    np.testing.assert_allclose(output_distribution(rule)[0], target, atol=1e-12)
    assert assert_key_laws_tile(rule, 2, range(50))[2] < 1e-13


@pytest.mark.parametrize("seed", [1, 2])
def test_runs_of_too_long_tokens_are_grouped_at_once(seed):
    # Next to a nearly tight suffix most tokens need a slot longer than themselves, in long
    # runs. A run is grouped at once (not regrouped token by token: 296-490 attempts on
    # these pairs before, ~100 now), every piece is still slots and a pool, and the key laws
    # of all 1000 tokens tile [0, 1] with the right masses.
    draft, target = near_tight_case(np.random.default_rng(seed), vocab=1000, num_drafts=4)
    rule = OptimalSelection(draft=draft, target=target, num_drafts=4, atoms="tokens")
    pieces = [rule._piece(j) for j in range(rule.blocks.size - 1)]
    attempts = sum(side.group_attempts for pc in pieces for side in (pc.front, pc.back))
    assert all(isinstance(pc, PoolPiece) for pc in pieces)
    assert max(e - s for pc in pieces for side in (pc.front, pc.back) for s, e in side.group_spans()) > 50
    assert attempts < 200, attempts
    assert rule.acceptance() == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=4), abs=1e-12)
    assert assert_key_laws_tile(rule, 4, range(draft.size))[2] < 1e-12


def test_slot_edges_are_accurate_even_where_ill_conditioned():
    # u^K - g u = rhs on both branches, also within 1e-7 of the minimum u* (a double root
    # there: the root moves by ~sqrt(rounding)): the residual ends at rounding level, and
    # Newton stops there (a dozen steps at most, not NEWTON_STEPS of creeping).
    rng = np.random.default_rng(5)
    for k in (3, 4, 5, 8):
        for g in (0.4, 1.0, 1.6):
            u_star = (g / k) ** (1 / (k - 1))
            near = u_star * (1 + 1e-7 * rng.uniform(-1, 1, 50))
            for rising, u in [(True, u_star + rng.random(500) * (1.5 - u_star)), (False, rng.random(500) * u_star),
                              (True, near[near > u_star]), (False, near[near < u_star])]:
                rhs = u**k - g * u
                for chunk in (rhs, rhs[:5]):  # vectorised and scalar paths
                    z = power_root(chunk, g, k, rising, 1.5 if rising else 0.0, steps=12)
                    zl, r = z.astype(np.longdouble), chunk.astype(np.longdouble)
                    residual = np.abs(zl**k - g * zl - r)
                    assert np.all(residual <= 2e-15 * (np.abs(r) + g * zl + zl**k)), (k, g, rising)
                    assert np.all((z >= u_star * (1 - 1e-9)) if rising else (z <= u_star * (1 + 1e-9)))


def _cases(seed, count, max_vocab, ks):
    rng = np.random.default_rng(seed)
    for n in range(count):
        k = ks[n % len(ks)]
        vocab = int(rng.integers(1, max_vocab + 1))
        draft, target = random_case(rng, vocab=vocab, num_drafts=k)
        yield draft, target, k


@pytest.mark.parametrize("tiling", ["pool", "greedy"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_lossless_by_enumeration_and_acceptance_is_the_closed_form(k, tiling):
    cases = list(_cases(10 + k, 60, 6 if k < 4 else 5, [k]))
    cases.append((np.array([0.25] * 4), np.array([0.25] * 4), k))  # draft == target
    cases.append((np.array([1.0, 0.0]), np.array([0.0, 1.0]), k))  # disjoint supports
    for draft, target, kk in cases:
        rule = OptimalSelection(draft=draft, target=target, num_drafts=kk, tiling=tiling)
        law, accept = output_distribution(rule)  # through the keys, tuple by tuple
        np.testing.assert_allclose(law, target, atol=1e-12)
        best = optimal_acceptance(draft=draft, target=target, num_drafts=kk)
        assert accept == pytest.approx(best, abs=1e-12)
        assert rule.acceptance() == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("tiling", ["pool", "greedy"])
def test_key_laws_tile_the_unit_interval_with_the_right_masses(tiling):
    for draft, target, k in _cases(3, 150, 9, [2, 3, 5]):
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, tiling=tiling)
        edges, _, off = assert_key_laws_tile(rule, k, range(draft.size))
        np.testing.assert_allclose([edges[0], edges[-1]], [0.0, 1.0], atol=1e-13)
        assert off < 1e-13  # no gap, no overlap
        if tiling == "greedy":  # sets, not mixtures
            assert all(w == 1.0 for t in range(draft.size) for _, _, w in rule.key_fragments(t))


@pytest.mark.parametrize("k", [2, 4, 8])
def test_slots_and_pool_at_full_vocabulary(k):
    # LM-shaped pairs at V = 50272: the pieces the drafts reach are realised by slots and a
    # pool (no greedy walk), and the key laws have the right length and nu-mass.
    from mspec_lab.synthetic import lm_like_pair

    rng = np.random.default_rng(k)
    for seed, temperature in [(0, 0.8), (0, 1.5), (0, 2.0)]:
        draft, target = lm_like_pair(50272, seed=seed, draft_temperature=temperature)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
        tokens = np.unique(rng.choice(draft.size, size=40, p=draft))
        assert_key_laws_tile(rule, k, tokens, atol=1e-14)
        reached = [rule._piece(j) for j in rule._pieces]
        assert all(isinstance(pc, PoolPiece) for pc in reached if pc is not None)


def test_induced_distribution_is_in_the_polytope():
    # x(A) <= f(A) = 1 - (1 - p(A))^K for every set A, and x(V) = 1
    for draft, target, k in _cases(4, 40, 7, [2, 3, 4]):
        x = OptimalSelection(draft=draft, target=target, num_drafts=k).induced
        assert x.sum() == pytest.approx(1.0, abs=1e-12)
        for size in range(1, draft.size + 1):
            for subset in itertools.combinations(range(draft.size), size):
                idx = list(subset)
                assert x[idx].sum() <= 1 - (1 - draft[idx].sum()) ** k + 1e-12


def test_fast_argsort_of_positive_floats_is_an_exact_sort():
    rng = np.random.default_rng(2)
    for n in (1, 2, 17, 1000, 70_000):
        values = np.exp(rng.normal(0, 30, n))  # 1e-40 .. 1e40
        values[rng.integers(n, size=n // 3)] = values[0]  # many exact ties
        values[: min(n, 3)] = [np.inf, 5e-324, 1.0][: min(n, 3)]  # inf, a denormal
        order = argsort_positive(values)
        assert np.array_equal(np.sort(order), np.arange(n))  # a permutation
        assert np.array_equal(values[order], np.sort(values))  # sorted exactly


def test_lex_optimal_slopes_are_pooled_prefix_slopes():
    # the slopes are non-decreasing along q/p descending, and each piece is tight
    rng = np.random.default_rng(5)
    for _ in range(50):
        draft, target = random_case(rng, vocab=12, num_drafts=3)
        order, x, blocks, top = lex_optimal_induced(draft=draft, target=target, num_drafts=3)
        slopes = x / target[order]
        assert np.all(np.diff(slopes) >= -1e-12)
        f = 1 - (1 - np.minimum(top, 1)) ** 3
        ends = blocks[1:]
        np.testing.assert_allclose(np.cumsum(x)[ends - 1], f[ends], atol=1e-12)


def test_matches_the_linear_program_and_beats_the_baselines():
    for draft, target, k in _cases(6, 40, 4, [2, 3]):
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
        assert rule.acceptance() == pytest.approx(OptimalLP(draft=draft, target=target, num_drafts=k).value, abs=1e-8)
        for name in ("specinfer", "spectr", "is-ratio"):
            other = mspec.make_scheme(name, draft=draft, target=target, num_drafts=k).acceptance()
            assert rule.acceptance() >= other - 1e-12, name


@pytest.mark.parametrize("k", [2, 4, 8])
def test_full_vocabulary_acceptance_and_never_below_the_others(k):
    from mspec_lab.synthetic import lm_like_pair

    for seed, temperature in [(0, 0.8), (1, 1.5), (2, 2.0)]:
        draft, target = lm_like_pair(50272, seed=seed, draft_temperature=temperature)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
        best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
        assert rule.acceptance() == pytest.approx(best, abs=1e-9)
        for name in ("spectr", "specinfer"):
            other = mspec.make_scheme(name, draft=draft, target=target, num_drafts=k).acceptance()
            assert rule.acceptance() >= other - 1e-12, name


@pytest.mark.parametrize("atoms", ["tokens", "buckets"])
def test_chi_square_at_a_thousand_tokens(atoms):
    from mspec_lab.synthetic import lm_like_pair

    draft, target = lm_like_pair(1000, seed=3, draft_temperature=1.5)
    # pool the tail so every cell expects >= 5 samples: compare counts on the 60 most
    # likely target tokens plus one "rest" cell
    top = np.argsort(target)[::-1][:60]

    def pooled(v):
        return np.append(v[top], v.sum() - v[top].sum())

    rule = OptimalSelection(draft=draft, target=target, num_drafts=3, atoms=atoms)
    if atoms == "buckets":  # buckets of several tokens are used
        assert rule.atoms.bucket_atoms > 0 and rule.atoms.masses.size < draft.size
    counts = sample_counts(rule, 20_000, seed=7)
    assert chi2_pvalue(pooled(counts), pooled(target)) > 1e-3
    # the same sampler with a broken residual (plain target after a rejection) must fail
    broken = OptimalSelection(draft=draft, target=target, num_drafts=3, atoms=atoms)
    broken._residual_cache = target.copy()
    counts = sample_counts(broken, 20_000, seed=7)
    assert chi2_pvalue(pooled(counts), pooled(target)) < 1e-6


def test_sampling_frequencies_of_the_selection_step():
    # the drafted token with the smallest key wins: its frequency is x = p_I
    draft = np.array([0.4, 0.3, 0.2, 0.1])
    target = np.array([0.1, 0.2, 0.3, 0.4])
    rule = OptimalSelection(draft=draft, target=target, num_drafts=3)
    rng = np.random.default_rng(0)
    n = 40_000
    drafts = rng.choice(4, size=(n, 3), p=draft)
    keys = np.array([[rule._sample_key(int(t), rng.random()) for t in row] for row in drafts[:4000]])
    won = drafts[np.arange(4000), keys.argmin(axis=1)]
    freq = np.bincount(won, minlength=4) / 4000
    se = np.sqrt(rule.induced * (1 - rule.induced) / 4000)
    assert np.all(np.abs(freq - rule.induced) < 5 * se + 1e-12)


def test_bad_input_and_registry():
    assert mspec.SCHEMES["optimal"] is OptimalSelection and mspec.SCHEMES["optimal-lp"] is OptimalLP
    with pytest.raises(ValueError, match="identical drafts.*optimal-lp"):
        mspec.make_scheme("optimal", draft=[[0.5, 0.5], [0.2, 0.8]], target=[0.5, 0.5])
    same = mspec.make_scheme("optimal", draft=[[0.5, 0.5], [0.5, 0.5]], target=[0.6, 0.4])
    assert same.num_drafts == 2 and same.acceptance() == pytest.approx(1.0)
    rule = mspec.make_scheme("optimal", draft=[0.5, 0.5, 0.0], target=[0.2, 0.2, 0.6], num_drafts=2)
    with pytest.raises(ValueError, match="zero probability"):
        rule.sample([0, 2], np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        rule.sample([0, 1], 0)
    with pytest.raises(ValueError, match="num_drafts"):
        OptimalSelection(draft=[0.5, 0.5], target=[0.5, 0.5])
    with pytest.raises(ValueError, match="atoms must be one of"):
        OptimalSelection(draft=[0.5, 0.5], target=[0.5, 0.5], num_drafts=2, atoms="bucket")
    with pytest.raises(AttributeError, match="atoms='tokens'"):
        OptimalSelection(draft=[0.5, 0.5], target=[0.6, 0.4], num_drafts=2, atoms="buckets").order


@pytest.mark.model  # runs SmolLM2: on both kernel paths in CI
def test_real_language_model_distributions():
    # Next-token distributions of the offline default (SmolLM2-135M; the draft is the same
    # weights at temperature 1.5) along a real prompt: acceptance == the closed form, never
    # below the other schemes, and the drafted tokens' key laws are right.
    from mspec_lab.experiments import acceptance, inputs as common
    from mspec_lab.models import load_pair

    pair = load_pair("smollm2")
    prompt = common.load_dataset_prompts(pair, "wmt", 1, source="auto", max_chars=300)[0]
    drafts, targets, _ = acceptance.collect_distributions(pair, prompt.ids, positions=6, draft_temperature=1.5,
                                                          target_temperature=1.0, seed=0)
    rng = np.random.default_rng(0)
    spread = 0  # positions with an optimum of 1 served without a sort (fact 6)
    for draft, target in zip(np.asarray(drafts, dtype=float), np.asarray(targets, dtype=float)):
        draft, target = draft / draft.sum(), target / target.sum()
        for k in (2, 4, 8):
            rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
            spread += rule.atoms.spread is not None
            assert rule.acceptance() == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=k),
                                                      abs=1e-9)
            for name in ("spectr", "specinfer", "is-ratio"):
                other = mspec.make_scheme(name, draft=draft, target=target, num_drafts=k).acceptance()
                assert rule.acceptance() >= other - 1e-12, name
            tokens = np.unique(rng.choice(draft.size, size=k, p=draft))
            assert_key_laws_tile(rule, k, tokens, atol=1e-13)
            assert all(rule.realisation(int(t)) == "pool" for t in tokens)
    assert spread >= 3, spread


# --- fact 5: ratio buckets as atoms ------------------------------------------------------
@pytest.mark.parametrize("k", [2, 3, 4])
def test_buckets_lossless_by_enumeration_and_optimal(k):
    # Ratios in tight clusters, so several tokens share a bucket (one key law, x_t ∝ p_t).
    # Exact law by enumeration, acceptance == the closed form, key laws of the right length
    # and nu-mass tiling [0, 1]; across the cases both kinds of atom occur (buckets of
    # several tokens, and tokens split out next to x = q). Fact 6 (an optimum of 1) is
    # switched off here: it has tests of its own below.
    fact5 = FastPath(spread=False)
    rng = np.random.default_rng(40 + k)
    shared = split = 0
    for trial in range(40):
        draft, target = bucket_case(rng, vocab=6 if k < 4 else 5, zeros=trial % 4 == 0)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="buckets", fast=fact5)
        law, accept = output_distribution(rule)
        np.testing.assert_allclose(law, target, atol=1e-12)
        best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
        assert accept == pytest.approx(best, abs=1e-12) and rule.acceptance() == pytest.approx(best, abs=1e-12)
        edges, _, off = assert_key_laws_tile(rule, k, range(draft.size))
        assert off < 1e-13 and edges[-1] == pytest.approx(1.0, abs=1e-13)
        ranked = (draft > 0) & (target > 0)
        shared += rule.atoms.masses.size < ranked.sum()
        split += rule.atoms.token_atoms > 0
    assert shared >= 10 and split >= 5, (shared, split)
    # nothing to bucket (disjoint supports): the token atoms take over
    rule = OptimalSelection(draft=[1.0, 0.0], target=[0.0, 1.0], num_drafts=k, atoms="buckets")
    assert rule.atoms.bucket_atoms == 0
    law, accept = output_distribution(rule)
    np.testing.assert_allclose(law, [0.0, 1.0], atol=1e-12)
    assert accept == 0.0
    # q/p overflows to inf (a denormal draft probability): so do the token atoms
    with np.errstate(over="ignore"):
        rule = OptimalSelection(draft=[1.0, 1e-320], target=[0.5, 0.5], num_drafts=k, atoms="buckets")
        assert rule.atoms.bucket_atoms == 0
        assert rule.acceptance() == pytest.approx(0.5, abs=1e-12)


def test_buckets_alone_are_lossless_but_the_certificate_restores_the_optimum():
    # Without splitting (a certificate that passes everything) the bucket rule is still a
    # tiling of the keys -- lossless -- but next to x = q it loses acceptance. Splitting
    # those buckets into tokens is what makes "buckets" optimal.
    rng = np.random.default_rng(11)
    cases = [bucket_case(rng, vocab=6) for _ in range(40)]
    unsplit = FastPath(spread=False, bucket_margin=-1.0)  # fact 5 only; every bucket "under" and "over"
    losses = []
    for draft, target in cases:
        rule = OptimalSelection(draft=draft, target=target, num_drafts=2, atoms="buckets", fast=unsplit)
        assert rule.atoms.token_atoms == 0
        law, accept = output_distribution(rule)
        np.testing.assert_allclose(law, target, atol=1e-12)
        losses.append(optimal_acceptance(draft=draft, target=target, num_drafts=2) - accept)
    assert min(losses) > -1e-12 and max(losses) > 1e-4


def test_sample_follows_the_exact_conditional_law():
    # sample() skips the keys of drafts in later pieces and of repeated tokens; given the
    # drafted tokens, its output frequencies must still match conditional() (chi-square).
    rng = np.random.default_rng(3)
    draft, target = bucket_case(rng, vocab=6)
    spread = next(c for c in (optimum_one_case(rng, vocab=6) for _ in range(50)) if OptimalSelection(
        draft=c[0], target=c[1], num_drafts=3, atoms="buckets").atoms.spread is not None)
    for atoms, (draft, target) in (("tokens", (draft, target)), ("buckets", (draft, target)), ("buckets", spread)):
        rule = OptimalSelection(draft=draft, target=target, num_drafts=3, atoms=atoms)
        for tokens in ([0, 1, 2], [3, 3, 4], [5, 5, 5], [1, 4, 4]):
            law, _ = rule.conditional(tokens)
            counts = np.bincount([rule.sample(tokens, rng).token for _ in range(4000)], minlength=6)
            if np.count_nonzero(law > 1e-15) == 1:  # a sure output (e.g. always accepted)
                assert counts[np.argmax(law)] == 4000
            else:
                assert chi2_pvalue(counts.astype(float), law) > 1e-3, (atoms, tokens)


# --- fact 6: an optimum of 1 without a sort -------------------------------------------------
@pytest.mark.parametrize("k", [2, 3, 4])
def test_spread_lossless_by_enumeration(k):
    # x = q is feasible (optimum 1): one piece whose units are ratio buckets, every token
    # spread over its bucket's own part and the pool in its own proportion. Exact law by
    # enumeration, acceptance 1, x = q, key laws of the right length and nu-mass tiling
    # [0, 1], with buckets of several tokens.
    rng = np.random.default_rng(60 + k)
    used = 0
    for _ in range(40):
        draft, target = optimum_one_case(rng, vocab=6 if k < 4 else 5)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="buckets")
        if rule.atoms.spread is None:
            assert optimal_acceptance(draft=draft, target=target, num_drafts=k) < 1.0 - 1e-12
            continue
        used += 1
        assert rule.atoms.masses.size < draft.size  # some bucket holds several tokens
        law, accept = output_distribution(rule)
        np.testing.assert_allclose(law, target, atol=1e-12)
        assert accept == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_array_equal(rule.induced, target)
        edges, _, off = assert_key_laws_tile(rule, k, range(draft.size))
        assert off < 1e-13 and edges[-1] == pytest.approx(1.0, abs=1e-13)
    assert used >= 30, used


def test_spread_needs_each_tokens_own_share():
    # Control: let the tokens of a bucket share its law in proportion to p (as fact 5's
    # atoms do) instead of each its own l_t: keys still tile [0, 1], but x != q, and the
    # output law (which assumes x = q) is no longer q.
    rng = np.random.default_rng(62)
    worst = 0.0
    for _ in range(20):
        draft, target = optimum_one_case(rng, vocab=6)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=3, atoms="buckets")
        if rule.atoms.spread is not None:
            spread = rule.atoms.spread  # the broken control, on this one rule
            spread.own = lambda a, mass, target, s=spread: mass * float(s.piece._slot(a)[2]) / float(
                s.top[a + 1] - s.top[a])
            worst = max(worst, float(np.abs(output_distribution(rule)[0] - target).max()))
    assert worst > 1e-5


def test_spread_expands_buckets_into_tokens():
    # A bucket whose own part is not dense enough for all its tokens is expanded into token
    # units (sorted). Force it: the first tiling reports every unit of several tokens as
    # not fitting. The rule must stay exact (enumeration) with some tokens expanded.
    expand_all = FastPath(expand_buckets="all")  # every bucket that is not one ratio
    rng = np.random.default_rng(64)
    expanded = 0
    for _ in range(30):
        draft, target = optimum_one_case(rng, vocab=5)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=3, atoms="buckets", fast=expand_all)
        if rule.atoms.spread is None or not rule.atoms.spread.expanded:
            continue
        expanded += 1
        assert rule.atoms.token_atoms == len(rule.atoms.spread.expanded) > 0
        law, accept = output_distribution(rule)
        np.testing.assert_allclose(law, target, atol=1e-12)
        assert accept == pytest.approx(1.0, abs=1e-12)
        assert_key_laws_tile(rule, 3, range(draft.size))
    assert expanded >= 10, expanded


@pytest.mark.parametrize("greedy_inside", [False, True])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_spread_tiles_nearly_tight_groups_token_by_token(k, greedy_inside):
    # Next to a nearly tight suffix, buckets of fact 6 own (almost) all their length in a
    # tiled group, so their tokens cannot share the bucket's part evenly. The group's slot
    # is then water-filled and tiled by the buckets' tokens themselves (same length and
    # nu-mass in all, so the rest of the piece stays), with slots and a pool inside it or
    # (forced) the greedy. Exact by enumeration; a control with one token's owned length
    # halved breaks it.
    fast = FastPath(max_depth=0) if greedy_inside else FastPath()
    rng = np.random.default_rng(31 + k)
    found = []
    for _ in range(400):
        draft, target = tight_bucket_case(rng, num_drafts=k, buckets=int(rng.integers(3, 5)))
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="buckets", fast=fast)
        if rule.atoms.spread is None or not rule.atoms.spread.local:
            continue
        found.append(rule)
        law, accept = output_distribution(rule)
        np.testing.assert_allclose(law, target, atol=1e-12)
        assert accept == pytest.approx(1.0, abs=1e-12)
        assert assert_key_laws_tile(rule, k, range(draft.size))[2] < 1e-13
        inside = {type(rule.atoms.spread._group_piece(key)) for key in rule.atoms.spread._groups}
        assert inside == ({RunPiece} if greedy_inside else {PoolPiece}), inside
        if len(found) == 4:
            break
    assert len(found) == 4
    rule = found[0]
    token, (key, position, own) = next(iter(rule.atoms.spread.local.items()))
    rule.atoms.spread.local[token] = (key, position, own / 2)
    law = rule.key_fragments(token)
    assert abs(length(law) - rule.draft[token]) + abs(nu(law, k) - rule.target[token]) > 1e-6
    assert np.abs(output_distribution(rule)[0] - rule.target).max() > 1e-6


def test_spread_tries_coarser_buckets_first():
    # Fact 6 first tries 4-bit buckets (fewer units), derived from the 6-bit sums without
    # dividing again: the same sums as bucketing with 4 bits directly. If the coarse
    # buckets fail, the 6-bit ones serve (forced here), still exact.
    from mspec_lab.synthetic import lm_like_pair

    draft, target = lm_like_pair(50272, seed=0, draft_temperature=1.5)
    fine = bucket_sums(target, draft, 6)
    for got, want in zip(coarser_sums(fine, 6, 4), bucket_sums(target, draft, 4)):
        np.testing.assert_allclose(got, want, rtol=1e-13)  # (masses: sums in another order)
    rule = OptimalSelection(draft=draft, target=target, num_drafts=8)
    assert rule.atoms.spread is not None and rule.atoms.masses.size < fine[1].size / 2  # the coarse units
    rule = OptimalSelection(draft=draft, target=target, num_drafts=8, fast=FastPath(spread_bits=(6,)))
    assert rule.atoms.spread is not None and rule.atoms.masses.size == fine[1].size
    tokens = np.unique(np.random.default_rng(3).choice(draft.size, size=30, p=draft))
    assert_key_laws_tile(rule, 8, tokens, atol=1e-15)


@pytest.mark.parametrize("temperature", [1.2, 1.5])
def test_spread_at_full_vocabulary(temperature):
    # An optimum of 1 at V = 50272 (K = 8): no sort, and the key laws of drafted, random
    # and top tokens have length p_t and nu-mass q_t.
    from mspec_lab.synthetic import lm_like_pair

    k = 8
    draft, target = lm_like_pair(50272, seed=0, draft_temperature=temperature)
    assert optimal_acceptance(draft=draft, target=target, num_drafts=k) == pytest.approx(1.0, abs=1e-12)
    rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
    assert rule.atoms.spread is not None and rule.atoms.token_atoms < 100  # (tokens of expanded buckets)
    rng = np.random.default_rng(k)
    tokens = np.unique(np.concatenate([rng.choice(draft.size, size=40, p=draft),
                                       rng.integers(draft.size, size=40), np.argsort(-target)[:10]]))
    assert_key_laws_tile(rule, k, tokens, atol=1e-15)
    assert rule.acceptance() == pytest.approx(1.0, abs=1e-12)
    for _ in range(20):  # one piece: every draft contends, and every selection is accepted
        assert rule.sample(rng.choice(draft.size, size=k, p=draft), rng).accepted


@pytest.mark.parametrize("k", [2, 4])
def test_buckets_at_full_vocabulary_need_few_tokens_sorted(k):
    # V = 50272, LM-shaped pairs: "auto" uses buckets; only a few tokens are split out
    # (sorted) where the buckets straddle x = q, and the acceptance is still the optimum.
    from mspec_lab.synthetic import lm_like_pair

    for seed, temperature in [(0, 0.8), (1, 1.5), (2, 2.0)]:
        draft, target = lm_like_pair(50272, seed=seed, draft_temperature=temperature)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
        assert rule.atoms.bucket_atoms > 0 and rule.atoms.token_atoms < 500
        best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
        assert rule.acceptance() == pytest.approx(best, abs=1e-9)
        tokens = np.unique(np.random.default_rng(k).choice(draft.size, size=30, p=draft))
        assert_key_laws_tile(rule, k, tokens, atol=1e-14)


def test_split_segments_are_bucketed_again_and_stay_exact():
    # A split segment is bucketed again with 6 more bits per level while that certifies
    # some of it. Forcing that on small cases (no segment is too small to re-bucket) must
    # keep the exact law and the optimum; at full vocabulary, pairs whose first split is
    # large (an optimum close to, but below, 1) come out as finer buckets, not a sort.
    from mspec_lab.synthetic import lm_like_pair

    rebucket = FastPath(spread=False, sort_below=0)  # fact 5 only; every segment bucketed again
    rng = np.random.default_rng(17)
    for trial in range(30):
        draft, target = bucket_case(rng, vocab=6, groups=2)
        k = 2 + trial % 3
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="buckets", fast=rebucket)
        law, accept = output_distribution(rule)
        np.testing.assert_allclose(law, target, atol=1e-12)
        assert accept == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=k), abs=1e-12)
    for seed, temperature, k in [(1, 0.8, 8), (0, 1.0, 4)]:
        draft, target = lm_like_pair(50272, seed=seed, draft_temperature=temperature)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
        first = bucket_level(target, draft, k, 0.0, BUCKET_BITS)
        assert first[6][4].size > 20_000  # the first split covers much of the vocabulary ...
        assert rule.atoms.token_atoms < 100 and rule.atoms.bucket_atoms > 10_000  # ... finer buckets take it
        assert rule.acceptance() == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=k),
                                                  abs=1e-9)
        tokens = np.unique(np.random.default_rng(k).choice(draft.size, size=30, p=draft))
        assert_key_laws_tile(rule, k, tokens, atol=1e-14)


def test_buckets_reach_the_optimum_on_random_lm_shaped_pairs():
    # A sweep over draft temperatures, K and seeds at V = 5000 (buckets from V = 4096):
    # the acceptance is the closed form, x passes the polytope's prefix test, and x <= q
    # up to a tight point in q/p order, x >= q after it (the certificate).
    from mspec_lab.synthetic import lm_like_pair

    rng = np.random.default_rng(23)
    for trial in range(30):
        temperature, k = float(rng.uniform(0.5, 3.0)), int(rng.integers(2, 9))
        draft, target = lm_like_pair(5000, seed=trial, draft_temperature=temperature)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
        assert rule.atoms.bucket_atoms > 0 or rule.acceptance() > 1 - 1e-9  # (only an optimum of 1 sorts all)
        assert rule.acceptance() == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=k),
                                                  abs=1e-9)
        x = rule.induced
        order = np.argsort(-(x / draft), kind="stable")  # the polytope's prefix test
        f = 1 - (1 - np.minimum(np.cumsum(draft[order]), 1)) ** k
        assert np.all(np.cumsum(x[order]) <= f + 1e-12) and x.sum() == pytest.approx(1.0, abs=1e-12)
        by_ratio = np.argsort(-(target / draft), kind="stable")
        xs, qs = x[by_ratio], target[by_ratio]
        over = np.flatnonzero(xs > qs * (1 + 1e-9))
        m = over[0] if over.size else xs.size
        assert np.all(xs[m:] >= qs[m:] * (1 - 1e-9))
        assert xs[:m].sum() == pytest.approx(1 - (1 - draft[by_ratio][:m].sum()) ** k, abs=1e-12)
