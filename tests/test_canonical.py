"""Canonical decomposition: select a draft with weights beta, then single-draft SpS to q.

Paper notation: drafts X_i ~ p (``draft``), target q (``target``); p_I is the law of the
selected draft (``induced``). The theorem's proof as code, beyond the book's running
example: from any lossless scheme the weights of the proof are valid and reach its acceptance;
the reachable induced laws are those of the set inequalities; the optimum is a projection.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings

import mspec
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


# --- the theorem: any lossless scheme is a two-step one; the optimum is a projection ---------

def proof_weights(scheme):
    """The chapter's construction: copy the drafted outputs of ``scheme``, the rest on x_1."""
    vocab, k = scheme.vocab_size, scheme.num_drafts
    weights = np.zeros((vocab,) * k + (vocab,))
    for t in itertools.product(range(vocab), repeat=k):
        law, _ = scheme.conditional(np.array(t))
        drafted = sorted(set(t))
        weights[t][drafted] = law[drafted]
        weights[t][t[0]] += 1.0 - weights[t].sum()
    return weights


def meets(rows, r):
    """Whether ``r(A) <= 1 - prod_i (1 - p_i(A))`` for every set A (``rows``: one per draft)."""
    n = r.size
    for m in range(1, n):
        for subset in itertools.combinations(range(n), m):
            a = list(subset)
            if r[a].sum() > 1 - np.prod([1 - row[a].sum() for row in rows]) + 1e-12:
                return False
    return True


@pytest.mark.parametrize("scheme_cls", [mspec.SpecInfer, mspec.SpecTr, mspec.OptimalLP])
def test_the_proof_turns_any_lossless_scheme_into_a_two_step_one(scheme_cls):
    rng = np.random.default_rng(4)
    for _ in range(12):
        vocab = int(rng.integers(2, 5))
        draft, target = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab) * 0.5)
        scheme = scheme_cls(draft=draft, target=target, num_drafts=2)
        weights = proof_weights(scheme)
        two_step = CanonicalScheme(draft=draft, target=target, num_drafts=2, weights=weights)
        assert two_step.acceptance() >= scheme.acceptance() - 1e-9
        law, _ = mspec.output_distribution(two_step)
        np.testing.assert_allclose(law, target, atol=1e-12)


def test_the_proof_with_different_drafts_and_three_of_them():
    rng = np.random.default_rng(5)
    for _ in range(8):
        rows, target = rng.dirichlet(np.ones(3), size=3), rng.dirichlet(np.ones(3))
        scheme = mspec.SpecInfer(draft=rows, target=target)
        p_I = induced_distribution(rows, proof_weights(scheme), 3)
        assert np.minimum(target, p_I).sum() >= scheme.acceptance() - 1e-9


def test_the_proof_applied_to_the_optimal_plan_reaches_the_optimum():
    rng = np.random.default_rng(6)
    for _ in range(10):
        draft, target = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
        lp = mspec.OptimalLP(draft=draft, target=target, num_drafts=2)
        p_I = induced_distribution(draft, proof_weights(lp), 2)
        assert np.minimum(target, p_I).sum() == pytest.approx(lp.acceptance(), abs=1e-9)


def test_reachable_targets_are_exactly_those_of_the_set_inequalities():
    rng = np.random.default_rng(7)
    seen = set()
    for _ in range(150):
        k = int(rng.integers(2, 4))
        vocab = int(rng.integers(3, 5))
        rows = rng.dirichlet(np.ones(vocab), size=k)
        r = rng.dirichlet(np.ones(vocab) * 2)
        reached = CanonicalScheme(draft=rows, target=r).acceptance() > 1 - 1e-9
        assert reached == meets(rows, r), (rows, r)
        seen.add(reached)
    assert seen == {True, False}  # both cases occur: the test can fail either way


def test_for_three_tokens_and_two_identical_drafts_the_set_is_a_box_on_the_simplex():
    rng = np.random.default_rng(8)
    for _ in range(300):
        draft, r = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))
        inside = np.all(draft**2 <= r + 1e-12) and np.all(r <= 1 - (1 - draft) ** 2 + 1e-12)
        assert inside == meets([draft, draft], r)


def box_corners(draft):
    """Corners of {r on the simplex: p^2 <= r <= 1 - (1 - p)^2} (V = 3, two identical drafts)."""
    low, high = draft**2, 1 - (1 - draft) ** 2
    corners = []
    for i, j in itertools.permutations(range(3), 2):
        for a, b in itertools.product((low[i], high[i]), (low[j], high[j])):
            r = np.zeros(3)
            r[i], r[j], r[3 - i - j] = a, b, 1 - a - b
            if np.all(r >= low - 1e-12) and np.all(r <= high + 1e-12):
                corners.append(r)
    return np.array(corners)


def test_the_optimal_induced_law_is_a_closest_reachable_point():
    rng = np.random.default_rng(9)
    for _ in range(20):
        draft, target = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))
        canon = CanonicalScheme(draft=draft, target=target, num_drafts=2)
        assert meets([draft, draft], canon.induced)
        tv = 0.5 * np.abs(canon.induced - target).sum()
        assert canon.acceptance() == pytest.approx(1 - tv, abs=1e-9)
        corners = box_corners(draft)
        # the reachable set is convex: corners and random mixtures of them lie in it
        points = np.vstack([corners, rng.dirichlet(np.ones(len(corners)), 2000) @ corners])
        assert all(meets([draft, draft], r) for r in points[:50])
        assert (0.5 * np.abs(points - target).sum(axis=1)).min() >= tv - 1e-9
