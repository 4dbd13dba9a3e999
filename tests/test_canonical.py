"""Canonical decomposition: select a draft with weights beta, then single-draft SpS to q.

Paper notation: drafts X_i ~ p (``draft``), target q (``target``); p_I is the law of the
selected draft (``induced``).
"""

import numpy as np
import pytest
from hypothesis import given, settings

from mspec.schemes.canonical import CanonicalScheme, _tuple_weights, induced_distribution, solve_canonical_lp
from mspec.schemes.exact import output_distribution
from mspec.schemes.optimal_lp import OptimalLP
from mspec.schemes.selection import residual
from sampling import assert_exact_law, chi2_pvalue, expected_accept_probability, sample_counts
from strategies import draft_target, random_case, random_cases


def random_weights(rng, vocab, k):
    """Random valid selection weights: Dirichlet over the distinct drafted tokens."""
    tuples = np.indices((vocab,) * k).reshape(k, -1).T
    weights = np.zeros((len(tuples), vocab))
    for n, t in enumerate(tuples):
        tokens = np.unique(t)
        weights[n, tokens] = rng.dirichlet(np.ones(len(tokens)))
    return weights.reshape((vocab,) * k + (vocab,))


def test_two_token_example_by_hand():
    rule = CanonicalScheme(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    # best: always select 0 from {0, 1}; p_I = [0.25 + 0.5, 0.25], sum min(q, p_I) = 0.85
    np.testing.assert_allclose(rule.induced, [0.75, 0.25], atol=1e-12)
    assert rule.weights[0, 1, 0] == pytest.approx(1.0) and rule.weights[1, 0, 0] == pytest.approx(1.0)
    assert rule.acceptance() == pytest.approx(0.85)


@pytest.mark.parametrize("identical", [True, False])
def test_canonical_optimum_equals_full_lp(identical):
    for draft, target, k in random_cases(30 + identical, identical=identical):
        rule = CanonicalScheme(draft=draft, target=target, num_drafts=k)
        full = OptimalLP(draft=draft, target=target, num_drafts=k)
        assert rule.acceptance() == pytest.approx(full.acceptance(), abs=1e-9)
        accept = assert_exact_law(rule, target, atol=1e-12)
        assert accept == pytest.approx(np.minimum(target, rule.induced).sum(), abs=1e-12)


def test_pair_formulation_equals_tuple_formulation():
    """K = 2 identical: V(V-1)/2 symmetric pair weights lose nothing."""
    rng = np.random.default_rng(32)
    for _ in range(60):
        vocab = int(rng.integers(1, 7))
        draft, target = random_case(rng, vocab=vocab, num_drafts=2)
        pair_value, _ = solve_canonical_lp(draft=draft, target=target, num_drafts=2)
        weights = _tuple_weights(draft, target, 2, 10**6)
        tuple_value = np.minimum(target, induced_distribution(draft, weights, 2)).sum()
        assert pair_value == pytest.approx(tuple_value, abs=1e-9)


def test_lossless_for_any_weights():
    rng = np.random.default_rng(33)
    for n in range(60):
        vocab = int(rng.integers(1, 5))
        k = 2 + n % 2
        draft, target = random_case(rng, vocab=vocab, num_drafts=k, identical=n % 4 < 2)
        weights = random_weights(rng, vocab, k)
        rule = CanonicalScheme(draft=draft, target=target, num_drafts=k, weights=weights)
        dist, in_drafts = output_distribution(rule)
        np.testing.assert_allclose(dist, target, atol=1e-12)
        accept = expected_accept_probability(rule)  # step 2's acceptance, the paper's measure
        assert accept == pytest.approx(np.minimum(target, rule.induced).sum(), abs=1e-12)
        assert accept <= in_drafts + 1e-12  # the residual may still output another draft's token
        assert rule.induced.sum() == pytest.approx(1.0)


def test_degenerate_distributions():
    q = np.array([0.2, 0.3, 0.5])
    for draft, target, k, value in [
        ([1.0], [1.0], 2, 1.0),
        (q, q, 3, 1.0),
        ([1.0, 0.0, 0.0], q, 2, 0.2),
        ([0.5, 0.5, 0.0], [0.0, 0.0, 1.0], 2, 0.0),
    ]:
        rule = CanonicalScheme(draft=draft, target=target, num_drafts=k)
        assert rule.acceptance() == pytest.approx(value, abs=1e-12)
        np.testing.assert_allclose(output_distribution(rule)[0], target, atol=1e-12)


def test_chisquare_on_samples_and_a_wrong_residual_fails():
    draft, target = np.array([[0.4, 0.3, 0.2, 0.1], [0.1, 0.1, 0.4, 0.4]]), np.array([0.05, 0.15, 0.3, 0.5])
    rule = CanonicalScheme(draft=draft, target=target)
    counts = sample_counts(rule, 100_000, seed=4)
    assert chi2_pvalue(counts, target) > 1e-3

    class WrongResidual(CanonicalScheme):  # the single-draft residual, not from p_I
        residual = property(lambda self: residual(self.target, self.draft[0]))

    wrong = WrongResidual(draft=draft, target=target)
    assert np.abs(output_distribution(wrong)[0] - target).max() > 0.005
    assert chi2_pvalue(sample_counts(wrong, 100_000, seed=4), target) < 1e-3


def test_sample_matches_conditional_acceptance():
    rng = np.random.default_rng(5)
    rule = CanonicalScheme(draft=[0.5, 0.3, 0.2], target=[0.1, 0.2, 0.7], num_drafts=2)
    tokens = np.array([0, 1])
    _, accept = rule.conditional(tokens)
    hits = [rule.sample(tokens, rng) for _ in range(20_000)]
    assert all(h.token in tokens and tokens[h.index] == h.token for h in hits if h.accepted)
    assert np.mean([h.accepted for h in hits]) == pytest.approx(accept, abs=0.015)


def test_bad_weights():
    kw = dict(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    with pytest.raises(ValueError, match="shape"):
        CanonicalScheme(**kw, weights=np.ones((2, 2)))
    good = random_weights(np.random.default_rng(0), 2, 2)
    bad = good.copy()
    bad[0, 0] = [0.5, 0.5]  # token 1 was not drafted in (0, 0)
    with pytest.raises(ValueError, match="only drafts"):
        CanonicalScheme(**kw, weights=bad)
    bad = good.copy()
    bad[0, 1] = [0.7, 0.7]
    with pytest.raises(ValueError, match="sum to 1"):
        CanonicalScheme(**kw, weights=bad)
    bad = good.copy()
    bad[0, 1] = [1.5, -0.5]
    with pytest.raises(ValueError, match=">= 0"):
        CanonicalScheme(**kw, weights=bad)
    with pytest.raises(ValueError, match="optimal_acceptance"):
        CanonicalScheme(draft=np.full(40, 1 / 40), target=np.full(40, 1 / 40), num_drafts=4)


@settings(max_examples=60, deadline=None)
@given(case=draft_target(max_vocab=5, max_drafts=3))
def test_lossless_and_optimal_hypothesis(case):
    """Zeros, one-hot, draft == target, V = 1, K = 1..3, identical or not."""
    draft, target, k = case
    rule = CanonicalScheme(draft=draft, target=target, num_drafts=k)
    assert_exact_law(rule, target, atol=1e-12)
    assert rule.acceptance() == pytest.approx(OptimalLP(draft=draft, target=target, num_drafts=k).acceptance(), abs=1e-9)
