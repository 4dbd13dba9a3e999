"""Closed form of the optimal acceptance (paper notation: drafts X_i ~ p, target q).

P*(acc) = min_S [q(S) + 1 - prod_i p_i(S)]; for identical drafts the minimiser is a prefix
of the tokens sorted by q/p ascending. Checked against all 2^V subsets, against the LP,
and on the paper's Figure 2 (facts derived by hand from the theorem).
"""

import numpy as np
import pytest

import mspec
from mspec.schemes.closed_form import (
    acceptance_is_one,
    brute_force_acceptance,
    optimal_acceptance,
    optimal_subset,
    prefix_order,
)
from mspec_lab.figure2 import figure2_curves, figure2_optimal_exact
from mspec.schemes.optimal_lp import OptimalLP
from strategies import random_case, softmax_pair


def test_two_token_example_by_hand():
    # S = {1}: q(S) + 1 - p(S)^2 = 0.1 + 1 - 0.25
    assert optimal_acceptance(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2) == pytest.approx(0.85)
    mask, value = optimal_subset(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    assert value == pytest.approx(0.85)
    assert mask.tolist() == [False, True]


@pytest.mark.parametrize("num_drafts", [1, 2, 3, 4])
def test_identical_prefix_equals_all_subsets(num_drafts):
    rng = np.random.default_rng(10 + num_drafts)
    for _ in range(150):
        vocab = int(rng.integers(1, 9))
        draft, target = random_case(rng, vocab=vocab, num_drafts=num_drafts)
        fast = optimal_acceptance(draft=draft, target=target, num_drafts=num_drafts)
        slow = brute_force_acceptance(draft=draft, target=target, num_drafts=num_drafts)
        assert fast == pytest.approx(slow, abs=1e-12)
        mask, value = optimal_subset(draft=draft, target=target, num_drafts=num_drafts)
        assert value == pytest.approx(target[mask].sum() + 1 - draft[mask].sum() ** num_drafts, abs=1e-12)


def test_ties_and_zeros_in_the_ratio_order():
    # ratios: 0 (q = 0), tie at 1 (twice), +inf (p = 0); order must put p = 0 last
    draft = np.array([0.25, 0.25, 0.5, 0.0])
    target = np.array([0.0, 0.25, 0.5, 0.25])
    order = prefix_order(draft=draft, target=target)
    assert order[0] == 0 and order[-1] == 3
    for k in (2, 3):
        assert optimal_acceptance(draft=draft, target=target, num_drafts=k) == pytest.approx(
            brute_force_acceptance(draft=draft, target=target, num_drafts=k), abs=1e-15
        )


def test_descending_order_would_be_wrong():
    """The minimiser is a prefix in *ascending* q/p order: descending prefixes miss it here."""
    draft, target = np.array([0.5, 0.5]), np.array([0.9, 0.1])
    order = np.argsort(-(target / draft))
    values = [1.0] + [target[order[:n]].sum() + 1 - draft[order[:n]].sum() ** 2 for n in (1, 2)]
    assert min(values) == pytest.approx(1.0)  # misses S = {1}
    assert optimal_acceptance(draft=draft, target=target, num_drafts=2) == pytest.approx(0.85)


def test_closed_form_equals_lp_on_random_cases():
    rng = np.random.default_rng(2)
    for n in range(200):
        vocab = int(rng.integers(1, 6))
        k = 2 if n % 3 else 3
        identical = n % 2 == 0
        draft, target = random_case(rng, vocab=vocab, num_drafts=k, identical=identical)
        lp = OptimalLP(draft=draft, target=target, num_drafts=k)
        assert optimal_acceptance(draft=draft, target=target, num_drafts=k) == pytest.approx(lp.value, abs=1e-9)


def test_acceptance_one_condition_agrees_with_lp():
    rng = np.random.default_rng(3)
    ones = 0
    for n in range(120):
        vocab = int(rng.integers(1, 6))
        draft, target = random_case(rng, vocab=vocab, num_drafts=2)
        if n % 2:  # make P* = 1: q = law of min(X_1, X_2), a selection of a draft
            cdf_above = np.cumsum(draft[::-1])[::-1]  # P(X >= x)
            target = cdf_above**2 - np.append(cdf_above[1:], 0.0) ** 2
        lp_one = OptimalLP(draft=draft, target=target, num_drafts=2).value >= 1 - 1e-9
        subsets_ok = all(
            target[m].sum() >= draft[m].sum() ** 2 - 1e-12
            for m in (((np.arange(2**vocab)[:, None] >> np.arange(vocab)) & 1).astype(bool))
        )
        assert acceptance_is_one(draft=draft, target=target, num_drafts=2, tol=1e-9) == lp_one == subsets_ok
        ones += lp_one
    assert ones >= 60  # the constructed half all reach 1


def test_degenerate_cases():
    assert optimal_acceptance(draft=[1.0], target=[1.0], num_drafts=3) == 1.0  # V = 1
    q = np.array([0.2, 0.3, 0.5])
    assert optimal_acceptance(draft=q, target=q, num_drafts=2) == pytest.approx(1.0)
    # one-hot draft: every draft is token 0, so only Y = 0 can be accepted
    assert optimal_acceptance(draft=[1.0, 0, 0], target=q, num_drafts=2) == pytest.approx(0.2)
    # disjoint supports: nothing can ever be accepted
    assert optimal_acceptance(draft=[0.5, 0.5, 0], target=[0, 0, 1.0], num_drafts=2) == pytest.approx(0.0)
    # K = 1 is single-draft speculative sampling: sum min(p, q)
    p = np.array([0.6, 0.3, 0.1])
    assert optimal_acceptance(draft=p, target=q, num_drafts=1) == pytest.approx(np.minimum(p, q).sum())


def test_non_identical_and_equal_rows():
    rng = np.random.default_rng(4)
    draft, target = random_case(rng, vocab=5, num_drafts=2, identical=False)
    value = optimal_acceptance(draft=draft, target=target)
    assert value == pytest.approx(brute_force_acceptance(draft=draft, target=target), abs=1e-12)
    # K equal rows take the identical (prefix) path and agree with the 1-D form
    same = np.tile(draft[0], (3, 1))
    assert optimal_acceptance(draft=same, target=target) == pytest.approx(
        optimal_acceptance(draft=draft[0], target=target, num_drafts=3), abs=1e-15
    )


def test_large_vocabulary_identical_beats_the_baselines():
    rng = np.random.default_rng(5)
    draft, target, _ = softmax_pair(rng, 5000, scale=3)
    best = optimal_acceptance(draft=draft, target=target, num_drafts=2)
    assert best >= mspec.SpecTr(draft=draft, target=target, num_drafts=2).acceptance() - 1e-12
    assert best >= mspec.SpecInfer(draft=draft, target=target, num_drafts=2).acceptance() - 1e-12
    assert best >= mspec.SingleDraft(draft=draft, target=target).acceptance() - 1e-12
    assert best <= 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="num_drafts"):
        optimal_acceptance(draft=[0.5, 0.5], target=[0.5, 0.5])
    with pytest.raises(ValueError, match="V <= 20"):
        brute_force_acceptance(draft=np.full(21, 1 / 21), target=np.full(21, 1 / 21), num_drafts=2)
    rng = np.random.default_rng(6)
    draft = rng.dirichlet(np.ones(21), size=2)
    with pytest.raises(ValueError, match="optimal_acceptance"):
        optimal_subset(draft=draft, target=np.full(21, 1 / 21))
    # ... while optimal_acceptance falls back to the (exact) canonical LP
    assert 0 <= optimal_acceptance(draft=draft, target=np.full(21, 1 / 21)) <= 1
    with pytest.raises(ValueError, match="panel"):
        figure2_curves("middle")


# -- Figure 2 ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "panel, top, ones",
    [("left", 2 / 3, (1 / 9, 5 / 9)), ("right", 5 / 6, (5 / 18, 5 / 9))],
)
def test_figure2_facts(panel, top, ones):
    curves = figure2_curves(panel)
    grid = curves["q2"]
    assert grid[0] == 0 and grid[-1] == pytest.approx(top)
    np.testing.assert_allclose(curves["optimal"], figure2_optimal_exact(panel, grid), atol=1e-12)
    # optimal == 1 exactly on the interval derived from q(S) >= p(S)^2 (pairs: p(S)^2 = 4/9)
    lo, hi = ones
    is_one = curves["optimal"] >= 1 - 1e-12
    assert np.array_equal(is_one, (grid >= lo - 1e-12) & (grid <= hi + 1e-12))
    # end points: 8/9 (left: S = one token with q = 0) and 13/18 (right: S = {q = 1/6, q = 0})
    end = 8 / 9 if panel == "left" else 13 / 18
    assert curves["optimal"][0] == pytest.approx(end) and curves["optimal"][-1] == pytest.approx(end)
    for name in ("spectr", "specinfer", "single"):
        assert np.all(curves["optimal"] >= curves[name] - 1e-12), name
    draft = np.full(3, 1 / 3)
    for n in (0, 40, 100, 160, 200):  # the LP agrees at a few points
        target = np.clip([1 - top, grid[n], top - grid[n]], 0, None)
        assert OptimalLP(draft=draft, target=target, num_drafts=2).value == pytest.approx(curves["optimal"][n], abs=1e-9)
        assert curves["single"][n] == pytest.approx(np.minimum(draft, target).sum())


def test_figure2_lives_in_the_workshop_beside_the_closed_form():
    import mspec.schemes.closed_form

    assert not hasattr(mspec.schemes.closed_form, "figure2_curves")  # closed_form is pure math
    with pytest.raises(AttributeError, match="mspec_lab.figure2.figure2_curves"):
        mspec.figure2_curves  # noqa: B018 -- the former name says where the helper lives now


def test_figure2_custom_family_and_grid():
    curves = figure2_curves(
        draft=[0.5, 0.5], target_family=lambda t: np.array([t, 1 - t]), q2=[0.0, 0.25, 0.5], num_drafts=3
    )
    assert set(curves) == {"q2", "optimal", "spectr", "specinfer", "single"}
    # q = p at t = 0.5; at t = 0 only token 1 is wanted: accepted iff some draft is 1
    np.testing.assert_allclose(curves["optimal"][[0, 2]], [1 - 0.5**3, 1.0])
