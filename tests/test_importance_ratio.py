"""Our variant of the paper's IS scheme (``"is-ratio"``): truncated-LP selection with a ratio
priority, then single-draft SpS to q (the paper's own scheme: test_importance.py).

Paper notation: drafts X_i ~ p (``draft``), target q (``target``); ``s`` LP tokens,
``alphabet`` ranked tokens.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

import mspec
from mspec.schemes.closed_form import brute_force_acceptance, optimal_acceptance
from mspec.schemes.exact import output_distribution
from mspec.fast import importance_ratio
from mspec.fast.importance_ratio import RatioImportanceSampling
from mspec.schemes.importance import truncated_lp_weights
from mspec.schemes.selection import residual
from sampling import assert_exact_law, chi2_pvalue, sample_counts
from strategies import draft_target, random_case, softmax_pair


def dense_induced(stage):
    """p_I of one stage by summing over all V^2 draft pairs with ``prob_first``."""
    vocab = stage.p1.shape[0]
    induced = np.zeros(vocab)
    for x1 in np.flatnonzero(stage.p1):
        for x2 in np.flatnonzero(stage.p2):
            mass, b = stage.p1[x1] * stage.p2[x2], stage.prob_first(int(x1), int(x2))
            induced[x1] += mass * b
            induced[x2] += mass * (1 - b)
    return induced


def test_two_token_example_by_hand():
    rule = RatioImportanceSampling(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    assert rule.acceptance() == pytest.approx(0.85)  # = the optimum (s >= V)


def test_lossless_on_random_small_cases():
    rng = np.random.default_rng(40)
    for n in range(300):
        vocab = int(rng.integers(1, 7))
        k = int(rng.integers(1, 4))
        draft, target = random_case(rng, vocab=vocab, num_drafts=k, identical=n % 2 == 0)
        s = int(rng.integers(1, vocab + 2))
        alphabet = int(rng.integers(min(s, vocab), vocab + 2))
        rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=k, s=s, alphabet=alphabet)
        assert_exact_law(rule, target, atol=1e-12)
        assert rule.induced.sum() == pytest.approx(1.0, abs=1e-12)
        assert rule.acceptance() <= brute_force_acceptance(draft=draft, target=target, num_drafts=k) + 1e-12


def lp_value(l1, l2, q_l, base, w):
    """sum_L min(q, p_I) of the LP tokens under weights ``w`` (the LP's objective)."""
    coef = l1[:, None] * l2[None, :] * w  # mass moved to y from the pair (y, z)
    np.fill_diagonal(coef, 0.0)
    return np.minimum(q_l, base + coef.sum(axis=1) - coef.sum(axis=0)).sum()


def test_truncated_lp_max_flow_equals_an_lp_solver():
    """The max-flow weights reach the LP optimum found by HiGHS, on random LPs up to s = 15."""
    rng = np.random.default_rng(44)
    for n in range(200):
        s = int(rng.integers(1, 16))
        l1, l2 = rng.dirichlet(np.ones(s + 2))[:s], rng.dirichlet(np.ones(s + 2))[:s]
        l1[rng.random(s) < 0.15] = 0.0  # tokens the first draft never proposes
        q_l = rng.dirichlet(np.ones(s + 1) * rng.choice([0.2, 1.0, 5.0]))[:s]
        base = l2 * (l1.sum() - l1) + rng.random(s) * rng.choice([0.0, 0.05, 0.3])
        w = truncated_lp_weights(l1, l2, q_l, base)
        assert w.shape == (s, s) and np.all((w >= 0) & (w <= 1))
        # the same LP for HiGHS: variables w[i, j] (i != j), then u; max sum u
        i, j = np.nonzero(~np.eye(s, dtype=bool))
        coef = l1[i] * l2[j]
        a_ub = np.zeros((s, i.size + s))
        a_ub[i, np.arange(i.size)] -= coef
        a_ub[j, np.arange(i.size)] += coef
        a_ub[np.arange(s), i.size + np.arange(s)] = 1.0
        bounds = [(0, 1)] * i.size + [(0, qy) for qy in q_l]
        res = linprog(np.r_[np.zeros(i.size), -np.ones(s)], A_ub=a_ub, b_ub=base, bounds=bounds, method="highs")
        assert res.status == 0
        assert lp_value(l1, l2, q_l, base, w) == pytest.approx(-res.fun, abs=1e-12)
    # by hand: two tokens, the second draft's token has all the surplus; moving the pair
    # (0, 1) = 0.5 * 0.5 to token 0 fills its deficit of 0.2, so w[0, 1] = 0.2 / 0.25
    w = truncated_lp_weights(np.array([0.5, 0.5]), np.array([0.5, 0.5]), np.array([0.7, 0.3]), np.array([0.5, 0.5]))
    np.testing.assert_allclose(w, [[1.0, 0.8], [0.0, 1.0]], atol=1e-15)


def test_degenerate_distributions():
    q = np.array([0.2, 0.3, 0.5])
    for draft, target, k in [([1.0], [1.0], 3), (q, q, 3), ([1.0, 0, 0], q, 2), ([0.5, 0.5, 0], [0, 0, 1.0], 2)]:
        for s, alphabet in [(1, 1), (2, 2), (5, 40)]:
            rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=k, s=s, alphabet=alphabet)
            np.testing.assert_allclose(output_distribution(rule)[0], target, atol=1e-12)
    assert RatioImportanceSampling(draft=q, target=q, num_drafts=2).acceptance() == pytest.approx(1.0)


@pytest.mark.parametrize("identical", [True, False])
def test_closed_form_induced_with_a_truncated_alphabet(identical):
    """V = 120, alphabet 12, s = 4: p_I from prefix sums == p_I summed over all pairs."""
    rng = np.random.default_rng(43)
    draft, target, logits = softmax_pair(rng, 120, scale=3)
    if not identical:
        draft = np.stack([draft, mspec.distribution_from_logits(logits + rng.normal(size=120), temperature=1.3)])
    rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=None if not identical else 2, s=4, alphabet=12)
    (stage,) = rule.stages
    assert (stage.rank < 0).sum() == 120 - 12
    np.testing.assert_allclose(stage.induced, dense_induced(stage), atol=1e-15)
    assert rule.acceptance() <= optimal_acceptance(draft=draft, target=target, num_drafts=2) + 1e-9


def test_three_drafts_multistage_closed_form():
    rng = np.random.default_rng(44)
    draft, target, _ = softmax_pair(rng, 60, scale=2)
    rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=3, s=4, alphabet=10)
    assert len(rule.stages) == 2
    for stage in rule.stages:
        np.testing.assert_allclose(stage.induced, dense_induced(stage), atol=1e-15)
    assert rule.acceptance() <= optimal_acceptance(draft=draft, target=target, num_drafts=3) + 1e-12


def test_deficit_rule_by_hand():
    # Y ~ p1 = (.5, .3, .2), X ~ p2 = (.2, .3, .5), q = (.3, .3, .4). Token 0 is over-served
    # (S = {0}, A = p1(S) = .5), token 2 under-served by .2: Y = 0 gives way to X = 2 with
    # probability c(2) = min(1, .2 / (.5 * .5)) = .8. G = p2(2) c(2) = .4, so
    # p_I(0) = .5 (1 - .4) = .3 and p_I(2) = .2 + .5 * .8 * .5 = .4: exactly q.
    p1, p2, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.3, 0.3, 0.4])
    score, induced, a_mass = importance_ratio._deficit_rule(p1, p2, q)
    np.testing.assert_allclose(induced, q, atol=1e-15)
    assert score == pytest.approx(1.0) and a_mass == pytest.approx(0.5)
    assert importance_ratio._deficit_rule(q, p2, q) is None  # nothing over-served: nothing to move


def test_deficit_rule_at_later_stages():
    """Later stages switch from surplus to deficit tokens; p_I in closed form equals the sum
    over all draft pairs (LP pairs included), the law is exact, and acceptance only gains."""
    rng = np.random.default_rng(46)
    draft, target, _ = softmax_pair(rng, 60, scale=2)
    rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=6, s=4, alphabet=10)
    assert "deficit" in [stage.rule for stage in rule.stages]
    for stage in rule.stages:
        np.testing.assert_allclose(stage.induced, dense_induced(stage), atol=1e-15)
    without = RatioImportanceSampling(draft=draft, target=target, num_drafts=6, s=4, alphabet=10, deficit_rule=False)
    assert {stage.rule for stage in without.stages} == {"priority"}
    assert rule.acceptance() > without.acceptance() + 1e-3
    # exact law by enumeration on small cases where some stage uses the deficit rule
    seen = 0
    for _ in range(200):
        vocab = int(rng.integers(3, 6))
        draft, target = random_case(rng, vocab=vocab, num_drafts=3, identical=True)
        rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=3, s=2, alphabet=vocab)
        if any(stage.rule == "deficit" for stage in rule.stages):
            assert_exact_law(rule, target, atol=1e-12)
            seen += 1
    assert seen >= 5


def test_is_sits_between_single_draft_and_the_optimum_at_llm_size():
    rng = np.random.default_rng(45)
    draft, target, _ = softmax_pair(rng, 50272, scale=3)
    rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=2)
    assert rule.induced.min() >= 0 and rule.induced.sum() == pytest.approx(1.0, abs=1e-12)
    single = mspec.SingleDraft(draft=draft, target=target).acceptance()
    assert single < rule.acceptance() <= optimal_acceptance(draft=draft, target=target, num_drafts=2)


def test_chisquare_on_samples_and_a_wrong_residual_fails():
    draft, target = np.array([0.4, 0.3, 0.2, 0.1, 0.0]), np.array([0.05, 0.15, 0.3, 0.2, 0.3])
    rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=3, s=2, alphabet=3)
    assert chi2_pvalue(sample_counts(rule, 20_000, seed=6), target) > 1e-3

    class WrongResidual(RatioImportanceSampling):  # the single-draft residual, not from p_I
        residual = property(lambda self: residual(self.target, self.draft))

    wrong = WrongResidual(draft=draft, target=target, num_drafts=3, s=2, alphabet=3)
    assert np.abs(output_distribution(wrong)[0] - target).max() > 0.01
    assert chi2_pvalue(sample_counts(wrong, 20_000, seed=6), target) < 1e-3


def test_sample_index_and_acceptance_flag():
    rng = np.random.default_rng(7)
    rule = RatioImportanceSampling(draft=[0.5, 0.3, 0.2], target=[0.1, 0.2, 0.7], num_drafts=3, s=2)
    tokens = np.array([0, 1, 2])
    _, accept = rule.conditional(tokens)
    hits = [rule.sample(tokens, rng) for _ in range(20_000)]
    assert all(tokens[h.index] == h.token for h in hits if h.accepted)
    assert np.mean([h.accepted for h in hits]) == pytest.approx(accept, abs=0.015)


def test_registry_and_large_s_clipped():
    rule = mspec.make_scheme("is-ratio", draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2, s=100, alphabet=500)
    assert isinstance(rule, RatioImportanceSampling) and (rule.s, rule.alphabet) == (2, 2)


@settings(max_examples=150, deadline=None)
@given(case=draft_target(max_vocab=6, max_drafts=3), s=st.integers(1, 7), extra=st.integers(0, 3))
def test_lossless_hypothesis(case, s, extra):
    """Zeros, one-hot, draft == target, V = 1, K = 1..3, identical or not."""
    draft, target, k = case
    vocab = target.shape[0]
    alphabet = min(s, vocab) + extra
    rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=k, s=s, alphabet=alphabet)
    assert_exact_law(rule, target, atol=1e-12)
    assert rule.acceptance() <= brute_force_acceptance(draft=draft, target=target, num_drafts=k) + 1e-12


def test_priority_rule_only_is_exact_too():
    # deficit_rule=False keeps the priority rule at every stage: still the exact law.
    rng = np.random.default_rng(47)
    for _ in range(30):
        vocab = int(rng.integers(3, 6))
        draft, target = random_case(rng, vocab=vocab, num_drafts=3, identical=True)
        rule = RatioImportanceSampling(draft=draft, target=target, num_drafts=3, s=2, alphabet=vocab, deficit_rule=False)
        assert {stage.rule for stage in rule.stages} == {"priority"}
        assert_exact_law(rule, target, atol=1e-12)
