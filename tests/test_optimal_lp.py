"""The optimal scheme as a full optimal-transport LP (paper notation: drafts X_i ~ p, target q)."""

import numpy as np
import pytest
from hypothesis import given, settings

import mspec
import mspec.schemes.lp as lp_module
import mspec.schemes.optimal_lp as optimal_module
from mspec.schemes.closed_form import brute_force_acceptance
from mspec.schemes.exact import output_distribution
from mspec.schemes.lp import MAX_LP_VARIABLES, draft_tuples
from mspec.schemes.optimal_lp import OptimalLP, solve_optimal_lp
from sampling import assert_exact_law, chi2_pvalue, sample_counts
from strategies import draft_target, random_case, random_cases

# LP plans come from HiGHS's simplex at tolerance 1e-10; in practice they are exact to ~1e-15
LP_TOL = 1e-9


def test_two_token_example_by_hand():
    rule = OptimalLP(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    assert rule.acceptance() == pytest.approx(0.85, abs=LP_TOL)  # min_S q(S) + 1 - p(S)^2, S = {1}
    dist, accept = rule.conditional([1, 1])
    assert dist.sum() == pytest.approx(1.0)
    assert accept == pytest.approx(dist[1])


@pytest.mark.parametrize("identical", [True, False])
def test_lossless_and_optimal_by_enumeration(identical):
    for draft, target, k in random_cases(20 + identical, identical=identical):
        rule = OptimalLP(draft=draft, target=target, num_drafts=k)
        assert_exact_law(rule, target, atol=LP_TOL)
        assert rule.acceptance() == pytest.approx(
            brute_force_acceptance(draft=draft, target=target, num_drafts=k), abs=LP_TOL
        )


def test_degenerate_distributions():
    q = np.array([0.2, 0.3, 0.5])
    cases = [
        ([1.0], [1.0], 2, 1.0),  # V = 1
        (q, q, 3, 1.0),  # draft == target
        ([1.0, 0.0, 0.0], q, 2, 0.2),  # one-hot draft
        ([0.5, 0.5, 0.0], [0.0, 0.0, 1.0], 2, 0.0),  # disjoint supports
        ([0.5, 0.5, 0.0], [0.0, 1.0, 0.0], 3, 1 - 0.5**3),  # one-hot target
    ]
    for draft, target, k, value in cases:
        rule = OptimalLP(draft=draft, target=target, num_drafts=k)
        assert rule.acceptance() == pytest.approx(value, abs=LP_TOL)
        dist, accept = output_distribution(rule)
        np.testing.assert_allclose(dist, target, atol=LP_TOL)


def test_optimal_beats_the_baselines():
    rng = np.random.default_rng(22)
    for n in range(100):
        vocab = int(rng.integers(1, 6))
        k = 2 if n % 2 else 3
        draft, target = random_case(rng, vocab=vocab, num_drafts=k)
        best = OptimalLP(draft=draft, target=target, num_drafts=k).acceptance()
        for name in ("single", "specinfer", "spectr"):
            kw = dict(draft=draft, target=target) if name == "single" else dict(draft=draft, target=target, num_drafts=k)
            assert best >= mspec.make_scheme(name, **kw).acceptance() - LP_TOL, name
    # non-identical drafts: SpecInfer is the baseline that supports them
    for _ in range(50):
        draft, target = random_case(rng, vocab=4, num_drafts=2, identical=False)
        best = OptimalLP(draft=draft, target=target).acceptance()
        assert best >= mspec.SpecInfer(draft=draft, target=target).acceptance() - LP_TOL


def test_chisquare_on_samples_and_a_wrong_plan_fails():
    draft, target = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.1, 0.2, 0.3, 0.4])
    rule = OptimalLP(draft=draft, target=target, num_drafts=2)
    assert chi2_pvalue(sample_counts(rule, 20_000, seed=1), target) > 1e-3
    # deliberately wrong: send the rejected mass to the draft instead of the residual
    wrong = OptimalLP(draft=draft, target=target, num_drafts=2)
    member = np.zeros_like(wrong.plan, dtype=bool)
    for col in wrong.tuples.T:
        member[np.arange(len(member)), col] = True
    accepted = np.where(member, wrong.plan, 0.0)
    wrong.plan = accepted + (1 - accepted.sum(axis=1, keepdims=True)) * draft
    assert np.abs(output_distribution(wrong)[0] - target).max() > 0.01
    assert chi2_pvalue(sample_counts(wrong, 20_000, seed=1), target) < 1e-3


def test_sample_reports_membership():
    rng = np.random.default_rng(3)
    rule = OptimalLP(draft=[0.5, 0.5, 0.0], target=[0.2, 0.2, 0.6], num_drafts=2)
    for _ in range(200):
        tokens = rng.choice(2, size=2)
        sel = rule.sample(tokens, rng)
        assert sel.accepted == (sel.token in tokens)
        if sel.accepted:
            assert tokens[sel.index] == sel.token


def test_draft_tuples():
    tuples, probs = draft_tuples(np.array([0.5, 0.0, 0.5]), 2)
    assert tuples.tolist() == [[0, 0], [0, 2], [2, 0], [2, 2]]
    np.testing.assert_allclose(probs, 0.25)
    tuples, probs = draft_tuples(np.array([[1.0, 0.0], [0.5, 0.5]]), 2)
    assert tuples.tolist() == [[0, 0], [0, 1]]


def test_lp_plumbing_stays_importable_from_mspec_optimal():
    """Running and certifying HiGHS lives in mspec.schemes.lp; the public names are still here too."""
    for name in ("GAP_TOL", "LPFallbackWarning", "LPSolveError", "MAX_LP_VARIABLES", "SOLVER_STATUSES",
                 "cut_bound", "draft_tuples", "repair_plan"):
        assert getattr(optimal_module, name) is getattr(lp_module, name), name
    assert mspec.LPSolveError is lp_module.LPSolveError and mspec.LPFallbackWarning is lp_module.LPFallbackWarning


def test_refuses_too_big():
    with pytest.raises(ValueError, match="optimal_acceptance"):
        OptimalLP(draft=np.full(50, 0.02), target=np.full(50, 0.02), num_drafts=3)  # 50^4 > 2e6
    assert 50**4 > MAX_LP_VARIABLES
    with pytest.raises(ValueError, match="max_variables"):
        solve_optimal_lp(draft=[0.5, 0.5], target=[0.5, 0.5], num_drafts=2, max_variables=7)


def test_solver_failure_falls_back_to_a_lossless_plan_and_says_so(monkeypatch):
    class Failed:
        status, x, message = 2, None, "The problem is infeasible."

    monkeypatch.setattr(lp_module, "linprog", lambda *a, **k: Failed())
    with pytest.warns(lp_module.LPFallbackWarning, match="infeasible"):
        rule = OptimalLP(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    assert rule.solver_status == "fallback"
    np.testing.assert_allclose(rule.plan, np.tile([0.9, 0.1], (rule.plan.shape[0], 1)))  # q, whatever drafted
    np.testing.assert_allclose(output_distribution(rule)[0], [0.9, 0.1], atol=1e-15)


def test_bad_drafts_and_registry():
    rule = mspec.make_scheme("optimal-lp", draft=[0.5, 0.5, 0.0], target=[0.2, 0.2, 0.6], num_drafts=2)
    assert isinstance(rule, OptimalLP)
    with pytest.raises(ValueError, match="zero probability"):
        rule.conditional([0, 2])
    with pytest.raises(ValueError, match="exactly K = 2"):
        rule.sample([0], np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        rule.sample([0, 1], 0)


@settings(max_examples=60, deadline=None)
@given(case=draft_target(max_vocab=5, max_drafts=3))
def test_lossless_hypothesis(case):
    """Zeros, one-hot, draft == target, V = 1, K = 1..3, identical or not."""
    draft, target, k = case
    rule = OptimalLP(draft=draft, target=target, num_drafts=k)
    assert_exact_law(rule, target, atol=LP_TOL)
    assert rule.acceptance() == pytest.approx(brute_force_acceptance(draft=draft, target=target, num_drafts=k), abs=LP_TOL)


def test_worth_objective():
    """worth = 1 is the acceptance LP; a worth that favours one token is a different LP whose
    plan is still lossless; two continuations that favour different tokens of the same tight
    piece cannot both be served best by one plan (the numbers are worked out by hand)."""
    rng = np.random.default_rng(3)
    for _ in range(5):
        p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
        plain = solve_optimal_lp(draft=p, target=q, num_drafts=2)
        ones = solve_optimal_lp(draft=p, target=q, num_drafts=2, worth=np.ones((4, 2)))
        assert ones.value == pytest.approx(plain.value, abs=1e-9)
        assert ones.value == pytest.approx(mspec.optimal_acceptance(draft=p, target=q, num_drafts=2), abs=1e-9)
    # tokens a, b: p = 1/4, q = 0.45 each (q/p = 1.8); c: p = 1/2, q = 0.1. With K = 2, f({a}) =
    # 1 - (3/4)^2 = 0.4375 and f({a, b}) = 3/4, so the acceptance 0.85 needs x(a) + x(b) = 3/4
    p, q = np.array([0.25, 0.25, 0.5]), np.array([0.45, 0.45, 0.1])
    favour = [np.ones((3, 2)), np.ones((3, 2))]
    favour[0][0] += 1  # outputting a is worth one token more (its continuation is certain)
    favour[1][1] += 1  # the same for b
    best = [solve_optimal_lp(draft=p, target=q, num_drafts=2, worth=w) for w in favour]
    for plan in best:
        assert plan.value == pytest.approx(0.85 + 0.4375, abs=1e-8)  # the favoured token gets all of f({.})
        np.testing.assert_allclose(plan.tuple_probs @ plan.plan, q, atol=1e-8)  # still lossless
    both = solve_optimal_lp(draft=p, target=q, num_drafts=2, worth=(favour[0] + favour[1]) / 2)
    assert both.value == pytest.approx(0.85 + 0.75 / 2, abs=1e-8)
    assert both.value < (best[0].value + best[1].value) / 2 - 0.06  # no plan is best for both
    with pytest.raises(ValueError, match="worth must be a finite"):
        solve_optimal_lp(draft=p, target=q, num_drafts=2, worth=np.ones((3, 3)))
    with pytest.raises(ValueError, match="worth must be a finite"):
        solve_optimal_lp(draft=p, target=q, num_drafts=2, worth=np.full((3, 2), np.nan))
