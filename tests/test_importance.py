"""The paper's IS scheme as published (``"is"``, Section 4 / Algorithm 1 as we read it).

Paper notation: drafts X_i ~ p (``draft``), target q (``target``); ``s`` LP tokens, ``alphabet``
ranked tokens. The reference below is the pair rule written out token by token.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mspec
from mspec.schemes.closed_form import optimal_acceptance
from mspec.schemes.exact import output_distribution
from mspec.fast.importance_ratio import RatioImportanceSampling
from mspec.schemes.importance import ImportanceSampling
from mspec.schemes.selection import residual
from sampling import assert_exact_law, chi2_pvalue, expected_accept_probability, sample_counts
from strategies import HOSTILE_FAMILIES, draft_target, hostile_pair, random_case, softmax_pair


# --- the readable reference: the pair rule, and p_I summed over all pairs ----------------------
def reference_prob_first(stage, x1, x2):
    """P(select x1 | x_1 = x1, x_2 = x2), straight from the rule's statement."""
    ranked, lp = list(stage.ranked), list(stage.lp_tokens)
    if x1 == x2:
        return 1.0
    if x1 in lp and x2 in lp:  # the LP decides
        return float(stage.w[lp.index(x1), lp.index(x2)])
    if x1 in ranked and x2 in ranked:  # the higher sigma rank
        return 1.0 if ranked.index(x1) < ranked.index(x2) else 0.0
    if x1 in ranked or x2 in ranked:  # the alphabet token
        return 1.0 if x1 in ranked else 0.0
    return 1.0  # two tokens outside the alphabet: x_1


def reference_induced(stage):
    """p_I of one stage: sum over every pair (x_1, x_2) of p1(x_1) p2(x_2) times the rule."""
    induced = np.zeros(stage.p1.shape[0])
    for x1 in np.flatnonzero(stage.p1):
        for x2 in np.flatnonzero(stage.p2):
            mass, b = stage.p1[x1] * stage.p2[x2], reference_prob_first(stage, int(x1), int(x2))
            induced[x1] += mass * b
            induced[x2] += mass * (1.0 - b)
    return induced


def check_ranking(stage, alphabet):
    """The alphabet holds the tokens of most mass q + p1 + p2, ranked by sigma (ties: lower id)."""
    mass = stage.target + stage.p1 + stage.p2
    ranked = stage.ranked.tolist()
    assert len(ranked) == len(set(ranked)) == alphabet
    outside = np.setdiff1d(np.arange(mass.size), ranked)
    if outside.size:
        assert mass[ranked].min() >= mass[outside].max()
    sigma = stage.target - stage.p1 * stage.p2
    assert ranked == sorted(ranked, key=lambda t: (-sigma[t], t))
    assert stage.lp_tokens.tolist() == ranked[: stage.w.shape[0]]


def build(draft, target, k, **params):
    return ImportanceSampling(draft=draft, target=target, num_drafts=k if np.ndim(draft) == 1 else None,
                                   **params)


# --- by hand -------------------------------------------------------------------------------------
def test_two_tokens_by_hand_is_the_optimum():
    rule = ImportanceSampling(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    assert rule.acceptance() == pytest.approx(0.85, abs=1e-15)  # s >= V: the full LP


def test_fixed_rule_by_hand():
    # p = q = (.5, .3, .2), s = 1: sigma = (.25, .21, .16), so L = {0} and the higher rank wins
    # every pair: p_I(2) = .2^2, p_I(1) = .3^2 + 2 (.3)(.2), p_I(0) = the rest. Even at p = q the
    # fixed rule falls short of acceptance 1 (sum min(q, p_I) = .5 + .21 + .04).
    q = np.array([0.5, 0.3, 0.2])
    rule = ImportanceSampling(draft=q, target=q, num_drafts=2, s=1)
    np.testing.assert_allclose(rule.induced, [0.75, 0.21, 0.04], atol=1e-15)
    assert rule.acceptance() == pytest.approx(0.75, abs=1e-15)
    # alphabet 1: mass q + 2p = (1.2, .9, .9) keeps token 0; the alphabet token beats the rest
    # (p_I(0) = .5 (.5 + .5) + .5 (.5)); two rest tokens: x_1 is kept (p_I(1) = .3 * .5)
    rule = ImportanceSampling(draft=q, target=[0.2, 0.3, 0.5], num_drafts=2, s=1, alphabet=1)
    np.testing.assert_allclose(rule.induced, [0.75, 0.15, 0.10], atol=1e-15)
    (stage,) = rule.stages
    assert [stage.prob_first(1, 2), stage.prob_first(2, 1), stage.prob_first(1, 0), stage.prob_first(0, 2)] == [
        1.0, 1.0, 0.0, 1.0]


def test_sigma_ties_go_to_the_lower_token_id():
    q = np.full(6, 1 / 6)  # sigma equal everywhere
    rule = ImportanceSampling(draft=q, target=q, num_drafts=2, s=2, alphabet=6)
    assert rule.stages[0].ranked.tolist() == [0, 1, 2, 3, 4, 5]
    draft = np.array([0.1, 0.2, 0.2, 0.1, 0.2, 0.2])  # q - p^2 ties between 0/3 and 1/2/4/5
    rule = ImportanceSampling(draft=draft, target=q, num_drafts=2, s=3, alphabet=6)
    assert rule.stages[0].ranked.tolist() == [0, 3, 1, 2, 4, 5]
    assert_exact_law(rule, q)


# --- (d) the closed-form p_I is the pair rule summed over all pairs -------------------------------
@pytest.mark.parametrize("identical", [True, False])
def test_closed_form_induced_equals_the_reference(identical):
    rng = np.random.default_rng(50 + identical)
    for n in range(120):
        vocab = int(rng.integers(1, 9))
        k = int(rng.integers(2, 5))
        draft, target = random_case(rng, vocab=vocab, num_drafts=k, identical=identical)
        s = int(rng.integers(1, vocab + 2))
        alphabet = int(rng.integers(min(s, vocab), vocab + 2))
        rule = build(draft, target, k, s=s, alphabet=alphabet)
        for stage in rule.stages:
            check_ranking(stage, min(alphabet, vocab))
            np.testing.assert_allclose(stage.induced, reference_induced(stage), rtol=0, atol=1e-15)
            for x1 in range(vocab):
                for x2 in range(vocab):
                    assert stage.prob_first(x1, x2) == reference_prob_first(stage, x1, x2)


@pytest.mark.parametrize("identical", [True, False])
def test_closed_form_induced_with_a_truncated_alphabet(identical):
    """V = 120, alphabet 12, s = 4, three drafts: 108 tokens outside the alphabet."""
    rng = np.random.default_rng(52)
    draft, target, logits = softmax_pair(rng, 120, scale=3)
    if not identical:
        draft = np.stack([draft, mspec.distribution_from_logits(logits + rng.normal(size=120), temperature=1.3),
                          mspec.distribution_from_logits(logits, temperature=0.7)])
    rule = build(draft, target, 3, s=4, alphabet=12)
    for stage in rule.stages:
        check_ranking(stage, 12)
        np.testing.assert_allclose(stage.induced, reference_induced(stage), rtol=0, atol=1e-15)
    assert rule.induced.sum() == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("family", HOSTILE_FAMILIES)
def test_closed_form_induced_on_hostile_inputs(family):
    rng = np.random.default_rng(53)
    for n in range(20):
        vocab, k = int(rng.integers(1, 10)), int(rng.integers(2, 4))
        draft, target = hostile_pair(rng, vocab=vocab, family=family, num_drafts=k, identical=n % 2 == 0)
        rule = build(draft, target, k, s=int(rng.integers(1, 4)), alphabet=int(rng.integers(3, 7)))
        for stage in rule.stages:
            np.testing.assert_allclose(stage.induced, reference_induced(stage), rtol=0, atol=1e-15)


# --- (a) + (e) the exact output law by enumeration; acceptance = sum min(q, p_I) ---------------------
@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("identical", [True, False])
def test_exact_law_by_enumeration(k, identical):
    rng = np.random.default_rng(10 * k + identical)
    for _ in range(40):
        vocab = int(rng.integers(1, 6))
        draft, target = random_case(rng, vocab=vocab, num_drafts=k, identical=identical)
        s = int(rng.integers(1, vocab + 2))
        rule = build(draft, target, k, s=s, alphabet=int(rng.integers(min(s, vocab), vocab + 2)))
        accept = assert_exact_law(rule, target, atol=1e-12)  # also: the enumerated acceptance
        assert rule.acceptance() == pytest.approx(accept, abs=1e-12)
        assert rule.acceptance() == np.minimum(target, rule.induced).sum()
        assert rule.acceptance() <= optimal_acceptance(draft=draft, target=target, num_drafts=k) + 1e-12


@settings(max_examples=120, deadline=None)
@given(case=draft_target(max_vocab=6, max_drafts=4), s=st.integers(1, 8), extra=st.integers(0, 3))
def test_exact_law_hypothesis(case, s, extra):
    """Zeros, one-hot, draft == target, V = 1, K = 1..4, identical or not."""
    draft, target, k = case
    rule = build(draft, target, k, s=s, alphabet=min(s, target.shape[0]) + extra)
    assert_exact_law(rule, target, atol=1e-12)
    assert abs(rule.acceptance() - expected_accept_probability(rule)) <= 1e-12


# --- (c) every size where the code changes path, on hostile inputs ---------------------------------
SIZES = {  # (V, s, alphabet)
    "s = 1": (5, 1, 3),
    "s = alphabet < V": (5, 3, 3),
    "alphabet < V": (5, 2, 4),
    "alphabet = V": (5, 2, 5),
    "alphabet > V": (4, 2, 40),
    "s > V": (3, 7, 9),
    "V = 1": (1, 5, 40),
}


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("family", HOSTILE_FAMILIES)
def test_every_path_size_on_hostile_inputs(size, family):
    vocab, s, alphabet = SIZES[size]
    rng = np.random.default_rng(len(size) * 100 + len(family))
    for k in (2, 3):
        for identical in (True, False):
            draft, target = hostile_pair(rng, vocab=vocab, family=family, num_drafts=k, identical=identical)
            rule = build(draft, target, k, s=s, alphabet=alphabet)
            assert (rule.s, rule.alphabet) == (min(s, vocab), min(alphabet, vocab))
            assert_exact_law(rule, target, atol=1e-12)


# enumerating up to 4^16 tuples takes seconds, knowingly: no SlowSchemeWarning for it
@pytest.mark.filterwarnings("ignore::mspec.SlowSchemeWarning")
@pytest.mark.parametrize(("k", "family"), [(8, "truncated"), (8, "one-hot"), (8, "tiny"), (16, "tiny")])
def test_exact_law_with_many_drafts(k, family):
    """V = 2: 2^K draft tuples (K = 16 on the subnormal family only: 65536 tuples)."""
    draft, target = hostile_pair(np.random.default_rng(k), vocab=2, family=family, num_drafts=k)
    np.testing.assert_allclose(output_distribution(build(draft, target, k))[0], target, rtol=0, atol=1e-12)


def test_wide_logits_and_sixteen_drafts():
    rng = np.random.default_rng(54)
    for scale in (1.0, 30.0, 300.0):  # logits hundreds wide: entries far below 1e-300
        logits = rng.normal(size=2000) * scale
        for t_draft in (0.01, 1.0, 5.0):
            draft = mspec.distribution_from_logits(logits + rng.normal(size=2000), temperature=t_draft)
            target = mspec.distribution_from_logits(logits, temperature=0.01 if scale == 1.0 else 1.0)
            rule = build(draft, target, 16)
            assert 0.0 <= rule.acceptance() <= optimal_acceptance(draft=draft, target=target, num_drafts=16) + 1e-9
            assert abs(rule.induced.sum() - 1.0) <= 1e-12 and rule.induced.min() >= 0.0
            for tokens in rng.choice(2000, size=(10, 16), p=draft):
                assert target[rule.sample(tokens, rng).token] > 0


# --- (f) the full LP when every pair is an LP pair; (g) p == q ------------------------------------
@pytest.mark.parametrize("scheme", [ImportanceSampling, RatioImportanceSampling])
@pytest.mark.parametrize("identical", [True, False])
def test_s_at_least_vocab_is_the_lp_optimum_for_two_drafts(scheme, identical):
    """Both IS schemes: with every pair an LP pair the stage is the full canonical LP."""
    rng = np.random.default_rng(55 + identical)
    for _ in range(40):
        vocab = int(rng.integers(1, 6))
        draft, target = random_case(rng, vocab=vocab, num_drafts=2, identical=identical)
        rule = scheme(draft=draft, target=target, num_drafts=2 if draft.ndim == 1 else None,
                      s=vocab, alphabet=vocab + 2)
        best = mspec.OptimalLP(draft=draft, target=target, num_drafts=2).acceptance()
        assert rule.acceptance() == pytest.approx(best, abs=1e-8)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_draft_equal_to_target_accepts_everything_when_the_lp_covers_every_pair(k):
    rng = np.random.default_rng(56 + k)
    for _ in range(30):
        vocab = int(rng.integers(1, 9))
        q = random_case(rng, vocab=vocab, num_drafts=1)[1]
        assert build(q, q, k, s=vocab).acceptance() == pytest.approx(1.0, abs=1e-12)
        rows = np.tile(q, (k, 1))
        assert build(rows, q, None, s=vocab + 5, alphabet=vocab + 9).acceptance() == pytest.approx(1.0, abs=1e-12)


# --- (b) seeded chi-square on samples, and a broken control ----------------------------------------
CHI2_CASE = dict(draft=np.array([0.4, 0.3, 0.2, 0.1, 0.0]), target=np.array([0.05, 0.15, 0.3, 0.2, 0.3]),
                 num_drafts=3, s=2, alphabet=3)


def test_chi_square_on_samples_and_a_wrong_residual_fails():
    rule = ImportanceSampling(**CHI2_CASE)
    assert chi2_pvalue(sample_counts(rule, 40_000, seed=6), CHI2_CASE["target"]) > 1e-3

    class WrongResidual(ImportanceSampling):  # the residual from the draft, not from p_I
        residual = property(lambda self: residual(self.target, self.draft))

    wrong = WrongResidual(**CHI2_CASE)
    assert np.abs(output_distribution(wrong)[0] - CHI2_CASE["target"]).max() > 0.01
    assert chi2_pvalue(sample_counts(wrong, 40_000, seed=6), CHI2_CASE["target"]) < 1e-6


def test_samples_use_only_the_generator_and_report_the_first_holder():
    rule = ImportanceSampling(draft=[0.5, 0.3, 0.2], target=[0.1, 0.2, 0.7], num_drafts=3, s=2)
    tokens = np.array([0, 1, 0])
    runs = [[tuple(rule.sample(tokens, np.random.default_rng(seed))) for seed in range(50)] for _ in range(2)]
    assert runs[0] == runs[1]
    hits = [rule.sample(tokens, np.random.default_rng(seed)) for seed in range(4000)]
    assert all(tokens[h.index] == h.token and h.index == list(tokens).index(h.token) for h in hits if h.accepted)
    assert np.mean([h.accepted for h in hits]) == pytest.approx(rule.conditional(tokens)[1], abs=0.03)


# --- (h) bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params, match",
    [
        (dict(s=0), "`s` must be an integer >= 1"),
        (dict(s=-2), "`s` must be an integer >= 1"),
        (dict(s=2.5), "`s` must be an integer >= 1"),
        (dict(s=True), "`s` must be an integer >= 1"),
        (dict(s=None), "`s` must be an integer >= 1"),
        (dict(alphabet=0), "`alphabet` must be an integer >= 1"),
        (dict(alphabet="40"), "`alphabet` must be an integer >= 1"),
        (dict(s=6, alphabet=4), "raise `alphabet` or lower `s`"),
    ],
)
@pytest.mark.parametrize("scheme", [ImportanceSampling, RatioImportanceSampling])
def test_bad_parameters(scheme, params, match):
    """Both IS schemes share the size checks (``PairwiseStages``): one test for both."""
    draft = np.full(10, 0.1)
    with pytest.raises(ValueError, match=match):
        scheme(draft=draft, target=draft, num_drafts=2, **params)


def test_bad_distributions_are_value_errors():
    with pytest.raises(ValueError, match="num_drafts"):
        ImportanceSampling(draft=[0.5, 0.5], target=[0.5, 0.5])
    with pytest.raises(ValueError):
        ImportanceSampling(draft=[0.5, 0.6], target=[0.5, 0.5], num_drafts=2)
    with pytest.raises(ValueError):
        ImportanceSampling(draft=[0.5, 0.5], target=[1.0, 0.0, 0.0], num_drafts=2)


def test_registry_numpy_integers_and_large_sizes_clipped():
    rule = mspec.make_scheme("is", draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2, s=100, alphabet=500)
    assert isinstance(rule, ImportanceSampling) and (rule.s, rule.alphabet) == (2, 2)
    assert mspec.SCHEMES["is"] is ImportanceSampling and mspec.SCHEMES["is-ratio"] is mspec.RatioImportanceSampling
    rule = ImportanceSampling(draft=np.full(8, 0.125), target=np.full(8, 0.125), num_drafts=3,
                                   s=np.int64(2), alphabet=np.int32(4))
    assert (rule.s, rule.alphabet) == (2, 4) and len(rule.stages) == 2
    assert ImportanceSampling(draft=[0.3, 0.7], target=[0.5, 0.5], num_drafts=1).acceptance() == pytest.approx(0.8)


def test_the_former_names_say_the_new_ones():
    """``"is-paper"`` and ``PaperImportanceSampling`` were the paper's scheme: they now raise,
    naming ``"is"`` / ``ImportanceSampling`` and our variant's names."""
    with pytest.raises(ValueError, match="'is-paper' is now called 'is'.*'is-ratio'"):
        mspec.make_scheme("is-paper", draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    with pytest.raises(AttributeError, match="now mspec.ImportanceSampling.*RatioImportanceSampling"):
        mspec.PaperImportanceSampling  # noqa: B018
    assert mspec.SCHEMES["is"] is mspec.ImportanceSampling and mspec.ImportanceSampling.__module__ == \
        "mspec.schemes.importance"
