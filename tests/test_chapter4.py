"""What chapter 4 (the canonical decomposition) states, checked beyond its running example,
and the two-slider figure helper it uses.

Paper notation: drafts X_i ~ p_i (``draft``), target q (``target``); p_I is the law of the
selected draft (``induced``).

* **The proof of the theorem, as code.** From any lossless scheme ``pi(y | t)`` the weights
  ``beta_y(t) = pi(y | t) [y in t] + [y = x_1] (1 - sum_{z in t} pi(z | t))`` are valid and
  ``sum_y min(q(y), p_I(y)) >= P(Y in t)``.
* **Reachable induced laws.** A target r is reached exactly (optimal acceptance 1) iff
  ``r(A) <= 1 - prod_i (1 - p_i(A))`` for every set A; for V = 3 and K = 2 identical
  drafts iff ``p(y)^2 <= r(y) <= 1 - (1 - p(y))^2`` for every token.
* **The optimum is a projection.** ``P* = 1 - min over reachable r of TV(q, r)``: the
  canonical ``p_I`` is reachable and at that distance, and no reachable point of a grid
  is closer.
"""

import itertools

import numpy as np
import plotly.graph_objects as go
import pytest

import mspec
from mspec.schemes.canonical import CanonicalScheme, induced_distribution
from mspec.plots.display import with_two_precomputed_sliders


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


# --- the figure helper --------------------------------------------------------------------

def _figure(a, b):
    fig = go.Figure([go.Bar(x=["u", "v"], y=[a, b]),
                     go.Scatterternary(a=[a], b=[b], c=[1.0], mode="markers"),
                     go.Bar(x=["u"], y=[a], error_y=dict(type="data", symmetric=False,
                                                         array=[b], arrayminus=[a]))])
    fig.update_layout(title=f"a={a} b={b}")
    return fig


def test_two_sliders_carry_every_pair_and_the_left_one_resets_the_right_one():
    first, second = [1, 2, 3], [10, 20]
    fig = with_two_precomputed_sliders(_figure, first, second, labels=("A", "B"),
                                       active=(1, 0), fmt=("{}", None))
    assert list(fig.data[0].y) == [2, 10] and fig.layout.title.text == "a=2 b=10"
    left, right = fig.layout.sliders
    assert (left.active, right.active) == (1, 0)
    assert left.currentvalue.prefix == "A = " and right.currentvalue.prefix == "B = "
    assert [s.label for s in left.steps] == ["1", "2", "3"]
    assert [s.label for s in right.steps] == ["10", "20"]
    for a, step in zip(first, left.steps):
        data, layout = step.args
        assert data["y"][0] == [a, 10] and data["a"][1] == [a] and data["b"][1] == [10]
        assert data["error_y.arrayminus"][2] == [a] and data["error_y.array"][2] == [10]
        assert layout["sliders[1].active"] == 0
        assert layout["title.text"] == f"a={a} b=10"
        for b, inner in zip(second, layout["sliders[1].steps"]):
            assert inner["args"][0]["y"][0] == [a, b]
            assert inner["args"][1] == {"title.text": f"a={a} b={b}"}
    for b, step in zip(second, right.steps):  # the right slider starts at a = 2
        assert step.args[0]["y"][0] == [2, b]
        assert "sliders[1].steps" not in step.args[1]
    assert "base" not in left.steps[0].args[0]  # set in no figure: not sent
    assert "x" not in left.steps[0].args[0]  # the same in every figure: not sent


def test_two_sliders_reject_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        with_two_precomputed_sliders(_figure, [], [1], labels=("A", "B"))
    with pytest.raises(ValueError, match="active"):
        with_two_precomputed_sliders(_figure, [1], [1, 2], labels=("A", "B"), active=(0, 2))
    with pytest.raises(ValueError, match="same traces"):
        with_two_precomputed_sliders(lambda a, b: go.Figure([go.Bar(y=[1])] * (a + b)),
                                     [1, 2], [0], labels=("A", "B"))
