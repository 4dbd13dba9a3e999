"""The binding set of the closed form, and the labels of the interactive Figure 2.

``binding_set`` scans the ``V + 1`` prefixes of the tokens sorted by ``q/p`` ascending; it is
checked against brute force over all ``2^V`` sets (its bound must equal the smallest one: when
sets tie, any minimiser is right), on random cases with zeros and ties, and against the sets
of Figure 2 worked out by hand. A prefix of the *descending* order is shown to miss the
minimum, so the test of the order can fail.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mspec_lab.figure2 import FIGURE2_TOKENS, binding_set, cut_value, figure2_family, set_label
from mspec.schemes.closed_form import brute_force_acceptance, optimal_acceptance


def all_subsets(vocab_size):
    return [list(s) for r in range(vocab_size + 1) for s in itertools.combinations(range(vocab_size), r)]


def smallest_cut(draft, target, k):
    """The minimum of q(S) + 1 - p(S)^K over all 2^V sets, by enumeration."""
    return min(cut_value(draft=draft, target=target, subset=s, num_drafts=k) for s in all_subsets(len(target)))


def random_case(rng, vocab_size):
    """A draft/target pair with, at random, zeros on either side and tied ratios."""
    draft, target = rng.dirichlet(np.ones(vocab_size)), rng.dirichlet(np.ones(vocab_size))
    kind = rng.integers(4) if vocab_size > 1 else 0
    if kind == 1:  # zeros: tokens the draft never proposes, tokens the target never wants
        draft[rng.integers(vocab_size)] = 0.0
        target[rng.integers(vocab_size)] = 0.0
    elif kind == 2:  # ties: masses on a coarse grid, so that many q/p ratios coincide
        draft = rng.integers(1, 4, vocab_size).astype(float)
        target = rng.integers(0, 4, vocab_size).astype(float)
        target[0] += 1.0
    elif kind == 3:  # a target proportional to the draft on a block of tokens (ratio ties)
        target[: vocab_size // 2 + 1] = 0.7 * draft[: vocab_size // 2 + 1]
    return draft / draft.sum(), target / target.sum()


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_binding_set_attains_the_minimum_over_all_subsets(k):
    rng = np.random.default_rng(100 + k)
    for _ in range(150):
        vocab_size = int(rng.integers(1, 8))
        draft, target = random_case(rng, vocab_size)
        best = smallest_cut(draft, target, k)
        found = binding_set(draft=draft, target=target, num_drafts=k)
        assert cut_value(draft=draft, target=target, subset=found, num_drafts=k) == pytest.approx(best, abs=1e-12)
        assert min(best, 1.0) == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=k), abs=1e-12)
        assert min(best, 1.0) == pytest.approx(brute_force_acceptance(draft=draft, target=target, num_drafts=k),
                                               abs=1e-12)
        # a prefix of the ascending order: every token inside (with p > 0) has a ratio no
        # larger than any token outside
        inside = np.zeros(vocab_size, dtype=bool)
        inside[found] = True
        ratio = np.where(draft > 0, target / np.where(draft > 0, draft, 1.0), np.inf)
        if inside.any() and (~inside).any():
            assert ratio[inside].max() <= ratio[~inside].min() + 1e-12
        assert np.all(np.diff(found) > 0)  # sorted, distinct


def test_binding_set_is_empty_exactly_when_the_optimum_is_one():
    rng = np.random.default_rng(7)
    for _ in range(200):
        draft, target = random_case(rng, int(rng.integers(2, 6)))
        one = optimal_acceptance(draft=draft, target=target, num_drafts=2) >= 1 - 1e-12
        assert (binding_set(draft=draft, target=target, num_drafts=2).size == 0) == one
    p = np.array([0.4, 0.35, 0.25])
    assert binding_set(draft=p, target=p, num_drafts=2).size == 0  # q = p: no set binds


def test_the_order_is_ascending_not_descending():
    # p = (1/2, 1/2), q = (0.9, 0.1), K = 2: the minimiser is the low-ratio token {1},
    # with bound 0.1 + 1 - 1/4 = 0.85; every prefix of the descending order gives 1 or more
    draft, target = np.array([0.5, 0.5]), np.array([0.9, 0.1])
    assert binding_set(draft=draft, target=target, num_drafts=2).tolist() == [1]
    assert smallest_cut(draft, target, 2) == pytest.approx(0.85)
    descending = [cut_value(draft=draft, target=target, subset=[0, 1][:n], num_drafts=2) for n in range(3)]
    assert min(descending) == pytest.approx(1.0)


def test_running_example_of_chapter_4():
    draft, target = np.array([0.5, 0.3, 0.2]), np.array([0.1, 0.3, 0.6])
    assert binding_set(draft=draft, target=target, num_drafts=2).tolist() == [0, 1]
    assert cut_value(draft=draft, target=target, subset=[0, 1], num_drafts=2) == pytest.approx(0.76)


def test_ties_give_the_shortest_minimising_prefix():
    # Figure 2, left, small q2: {b} and {a, b} tie (q(a) = p(a) = 1/3); the shorter is returned
    draft, family, _ = figure2_family("left")
    target = family(0.05)
    assert cut_value(draft=draft, target=target, subset=[1], num_drafts=2) == pytest.approx(
        cut_value(draft=draft, target=target, subset=[0, 1], num_drafts=2), abs=1e-15)
    assert binding_set(draft=draft, target=target, num_drafts=2).tolist() == [1]


@pytest.mark.parametrize("panel, q2, labels", [
    ("left", [0.0, 0.05, 1 / 9, 0.3, 5 / 9, 0.6, 2 / 3], ["{b}", "{b}", "∅", "∅", "∅", "{c}", "{c}"]),
    ("right", [0.0, 0.1, 5 / 18, 0.4, 5 / 9, 0.7, 5 / 6], ["{a, b}", "{a, b}", "∅", "∅", "∅", "{a, c}", "{a, c}"]),
])
def test_figure2_binding_sets_by_hand(panel, q2, labels):
    draft, family, _ = figure2_family(panel)
    found = [binding_set(draft=draft, target=np.clip(family(x), 0, None), num_drafts=2) for x in q2]
    assert [set_label(s) for s in found] == labels


def test_set_label():
    assert set_label([]) == "∅"
    assert set_label([2, 0]) == "{a, c}"
    assert set_label(np.array([1])) == "{b}"
    assert set_label([3], names=("w", "x", "y", "z")) == "{z}"
    assert FIGURE2_TOKENS == ("a", "b", "c")


def test_bad_input():
    p, q = np.array([0.5, 0.5]), np.array([0.9, 0.1])
    with pytest.raises(ValueError, match="num_drafts"):
        binding_set(draft=p, target=q, num_drafts=None)
    with pytest.raises(ValueError, match="num_drafts"):
        binding_set(draft=p, target=q, num_drafts=0)
    with pytest.raises(ValueError, match="identical drafts"):
        binding_set(draft=np.stack([p, p]), target=q, num_drafts=2)
    with pytest.raises(ValueError, match="vocabulary sizes differ"):
        binding_set(draft=p, target=np.array([0.2, 0.3, 0.5]), num_drafts=2)
    with pytest.raises(ValueError):
        binding_set(draft=np.array([0.7, 0.7]), target=q, num_drafts=2)  # not a distribution
    with pytest.raises(ValueError, match="tol"):
        binding_set(draft=p, target=q, num_drafts=2, tol=-1.0)
    with pytest.raises(ValueError, match="tol"):
        binding_set(draft=p, target=q, num_drafts=2, tol=float("nan"))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        cut_value(draft=p, target=q, subset=[2], num_drafts=2)
    with pytest.raises(ValueError, match="distinct"):
        cut_value(draft=p, target=q, subset=[0, 0], num_drafts=2)
    with pytest.raises(ValueError, match="distinct integer"):
        cut_value(draft=p, target=q, subset=[0.5], num_drafts=2)
    with pytest.raises(ValueError, match="identical drafts"):
        cut_value(draft=np.stack([p, p]), target=q, subset=[0], num_drafts=2)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        set_label([3])
    with pytest.raises(ValueError, match="distinct integer"):
        set_label([[0, 1]])
