"""Single-draft speculative sampling, SpecInfer and SpecTr: exact, lossless, well-ordered.

Paper notation: drafts X_i ~ p (``draft``), target q (``target``).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from scipy.stats import chisquare

import mspec
from mspec.schemes.selection import SelectionScheme, residual
from strategies import draft_target, random_case

BASELINES = ["single", "specinfer", "spectr"]


# -- hand-built cases ---------------------------------------------------------------------------
def test_single_draft_by_hand():
    draft, target = [0.2, 0.8], [0.6, 0.4]
    rule = mspec.SingleDraft(draft=draft, target=target)
    # x = 0: q/p = 3 -> always accepted
    np.testing.assert_allclose(rule.conditional([0])[0], [1.0, 0.0])
    # x = 1: q/p = 0.5 -> accepted half the time, else residual norm(max(q - p, 0)) = [1, 0]
    np.testing.assert_allclose(rule.conditional([1])[0], [0.5, 0.5])
    # acceptance = sum min(p, q) = 0.2 + 0.4
    assert rule.acceptance() == pytest.approx(0.6)


def test_single_draft_zero_target_token_is_always_rejected():
    rule = mspec.SingleDraft(draft=[0.5, 0.5, 0.0], target=[0.25, 0.0, 0.75])
    dist, accept = rule.conditional([1])  # q(1) = 0: rejected, residual = [0, 0, 1]
    assert accept == 0.0
    np.testing.assert_allclose(dist, [0.0, 0.0, 1.0])


def test_specinfer_by_hand():
    rule = mspec.SpecInfer(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    # (1, 1): accept x_1 = 1 w.p. min(1, .1/.5) = .2; r_1 = norm(max(q - p, 0)) = [1, 0];
    #         x_2 = 1 has r_1 = 0 -> rejected; r_2 = norm(max(r_1 - p, 0)) = [1, 0]
    np.testing.assert_allclose(rule.conditional([1, 1])[0], [0.8, 0.2])
    # (0, 1): x_1 = 0 has q/p = 1.8 -> accepted
    np.testing.assert_allclose(rule.conditional([0, 1])[0], [1.0, 0.0])
    # (1, 0): .2 on x_1 = 1; otherwise x_2 = 0 has r_1/p = 2 -> accepted, so accept prob 1
    dist, accept = rule.conditional([1, 0])
    np.testing.assert_allclose(dist, [0.8, 0.2])
    assert accept == pytest.approx(1.0)
    # closed form: 1 - (1 - 0.6)(1 - 0.5) = 0.8
    assert rule.acceptance() == pytest.approx(0.8)


def test_spectr_by_hand():
    rule = mspec.SpecTr(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    # beta(rho) = .5 + .1/rho on [1, 1.8]; root of 1 - (1 - beta)^2 = rho beta
    beta = 0.5 + 0.1 / rule.rho
    assert 1 - (1 - beta) ** 2 == pytest.approx(rule.rho * beta, abs=1e-12)
    assert rule.acceptance() == pytest.approx(1 - (1 - beta) ** 2)
    # x = 0 is always accepted (q / (rho p) > 1); x = 1 w.p. .1 / (.5 rho)
    np.testing.assert_allclose(rule.accept_probs(np.array([0, 1])), [1.0, 0.2 / rule.rho])
    # between single (0.6) and the optimum min_S q(S) + 1 - p(S)^2 = 0.85 (S = {1})
    assert 0.6 < rule.acceptance() < 0.85


def test_draft_equal_target_accepts_always():
    q = np.array([0.1, 0.2, 0.3, 0.4])
    for name in BASELINES:
        k = 1 if name == "single" else 3
        rule = mspec.make_scheme(name, draft=q, target=q, num_drafts=k)
        assert rule.acceptance() == pytest.approx(1.0)


def test_vocabulary_of_one_token():
    for name in BASELINES:
        k = 1 if name == "single" else 2
        rule = mspec.make_scheme(name, draft=[1.0], target=[1.0], num_drafts=k)
        assert rule.sample([0] * k, np.random.default_rng(0)) == mspec.Selection(0, True, 0)


def test_one_hot_disjoint_never_accepts():
    rule = mspec.SpecInfer(draft=[1.0, 0.0], target=[0.0, 1.0], num_drafts=3)
    assert rule.acceptance() == 0.0
    assert rule.sample([0, 0, 0], np.random.default_rng(0)) == mspec.Selection(1, False, None)
    rule = mspec.SpecTr(draft=[1.0, 0.0], target=[0.0, 1.0], num_drafts=3)
    assert rule.acceptance() == 0.0
    assert rule.sample([0, 0, 0], np.random.default_rng(0)).token == 1


# -- exact losslessness by enumeration -------------------------------------------------------------
def _cases(identical_only=False):
    rng = np.random.default_rng(1234)
    for i in range(150):
        vocab = 1 + i % 6
        k = 1 + (i // 6) % 4
        identical = identical_only or i % 2 == 0
        draft, target = random_case(rng, vocab=vocab, num_drafts=k, identical=identical)
        yield draft, target, k


@pytest.mark.parametrize("name", BASELINES)
def test_exact_output_distribution_is_target(name):
    checked = 0
    for draft, target, k in _cases():
        if name == "single":
            draft, k = (draft if draft.ndim == 1 else draft[0]), 1
        if name == "spectr" and draft.ndim == 2:
            continue
        rule = mspec.make_scheme(name, draft=draft, target=target, num_drafts=k if draft.ndim == 1 else None)
        dist, acceptance = mspec.output_distribution(rule)
        np.testing.assert_allclose(dist, target, rtol=0, atol=1e-12)
        assert acceptance == pytest.approx(rule.acceptance(), abs=1e-12)
        checked += 1
    assert checked >= 75


@settings(max_examples=150, deadline=None)
@given(case=draft_target(identical=True))
def test_property_identical_drafts_lossless(case):
    draft, target, k = case
    for name in ["specinfer", "spectr"]:
        rule = mspec.make_scheme(name, draft=draft, target=target, num_drafts=k)
        dist, acceptance = mspec.output_distribution(rule)
        np.testing.assert_allclose(dist, target, rtol=0, atol=1e-12)
        assert acceptance == pytest.approx(rule.acceptance(), abs=1e-12)
        assert -1e-12 <= acceptance <= 1 + 1e-12


@settings(max_examples=100, deadline=None)
@given(case=draft_target(identical=False))
def test_property_specinfer_non_identical_lossless(case):
    draft, target, _ = case
    rule = mspec.SpecInfer(draft=draft, target=target)
    dist, acceptance = mspec.output_distribution(rule)
    np.testing.assert_allclose(dist, target, rtol=0, atol=1e-12)
    assert acceptance == pytest.approx(rule.acceptance(), abs=1e-12)


# -- sampling: chi-square and empirical acceptance ------------------------------------------------
DRAFT = np.array([0.35, 0.25, 0.2, 0.15, 0.05, 0.0])
TARGET = np.array([0.05, 0.1, 0.2, 0.25, 0.3, 0.1])
N_SAMPLES = 20_000  # the broken control below already fails at 20,000 (p < 1e-6)


def _sample_many(rule, draft_rows, n, seed):
    rng = np.random.default_rng(seed)
    k = len(draft_rows)
    drafts = np.stack([rng.choice(len(row), size=n, p=row) for row in draft_rows], axis=1)
    counts = np.zeros(rule.vocab_size)
    accepted = 0
    for row in drafts:
        sel = rule.sample(row, rng)
        counts[sel.token] += 1
        accepted += sel.accepted
        assert sel.accepted == (sel.token in row[:k])
    return counts, accepted / n


@pytest.mark.parametrize(
    "name,k,identical",
    [("single", 1, True), ("specinfer", 3, True), ("specinfer", 2, False), ("spectr", 3, True)],
)
def test_chi_square_and_empirical_acceptance(name, k, identical):
    draft = DRAFT if identical else np.stack([DRAFT, TARGET[::-1]])
    rule = mspec.make_scheme(name, draft=draft, target=TARGET, num_drafts=k if identical else None)
    rows = [rule.draft_row(i) for i in range(k)]
    counts, accept_rate = _sample_many(rule, rows, N_SAMPLES, seed=7)
    support = TARGET > 0
    assert counts[~support].sum() == 0
    _, pvalue = chisquare(counts[support], N_SAMPLES * TARGET[support])
    assert pvalue > 1e-3
    a = rule.acceptance()
    assert abs(accept_rate - a) < 5 * np.sqrt(a * (1 - a) / N_SAMPLES)


class _WrongResidual(mspec.SpecInfer):
    """SpecInfer that forgets to update the running target after a rejection."""

    def sample(self, drafts, rng):
        tokens = self.check_tokens(drafts)
        for i, x in enumerate(tokens):
            if rng.random() * self.draft_row(i)[x] < self.target[x]:
                return mspec.Selection(int(x), True, i)
        return mspec.Selection(int(rng.choice(self.vocab_size, p=residual(self.target, self.draft))), False, None)


def test_chi_square_catches_a_wrong_residual():
    rule = _WrongResidual(draft=DRAFT, target=TARGET, num_drafts=3)
    counts, _ = _sample_many(rule, [DRAFT] * 3, 20_000, seed=7)
    support = TARGET > 0
    _, pvalue = chisquare(counts[support], counts.sum() * TARGET[support])
    assert pvalue < 1e-6


# -- ordering facts -------------------------------------------------------------------------------
def test_multi_draft_never_below_single_draft():
    for draft, target, k in _cases(identical_only=True):
        single = mspec.single_draft_acceptance(draft=draft, target=target)
        infer = mspec.specinfer_acceptance(draft=draft, target=target, num_drafts=k)
        tr = mspec.spectr_acceptance(draft=draft, target=target, num_drafts=k)
        assert single <= infer + 1e-12
        assert single <= tr + 1e-12
        if k > 1:  # one more draft never hurts
            assert mspec.specinfer_acceptance(draft=draft, target=target, num_drafts=k - 1) <= infer + 1e-12
            assert mspec.spectr_acceptance(draft=draft, target=target, num_drafts=k - 1) <= tr + 1e-12


def test_one_draft_reduces_to_single_draft():
    rng = np.random.default_rng(5)
    for _ in range(50):
        draft, target = random_case(rng, vocab=5, num_drafts=1)
        single = mspec.SingleDraft(draft=draft, target=target)
        for name in ["specinfer", "spectr"]:
            rule = mspec.make_scheme(name, draft=draft, target=target, num_drafts=1)
            assert rule.acceptance() == pytest.approx(single.acceptance(), abs=1e-15)
            for x in np.flatnonzero(draft > 0):
                np.testing.assert_allclose(rule.conditional([x])[0], single.conditional([x])[0], atol=1e-15)


def test_samplers_agree_with_functional_api():
    draft, target = DRAFT, TARGET
    a = mspec.specinfer_sample([0, 1], draft=draft, target=target, rng=np.random.default_rng(3))
    b = mspec.SpecInfer(draft=draft, target=target, num_drafts=2).sample([0, 1], np.random.default_rng(3))
    assert a == b
    a = mspec.spectr_sample([0, 1], draft=draft, target=target, rng=np.random.default_rng(3))
    b = mspec.SpecTr(draft=draft, target=target, num_drafts=2).sample([0, 1], np.random.default_rng(3))
    assert a == b
    a = mspec.single_draft_sample(2, draft=draft, target=target, rng=np.random.default_rng(3))
    assert isinstance(a, mspec.Selection)


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(draft=[0.5, 0.5], target=[0.5, 0.5]), "num_drafts"),
        (dict(draft=[0.5, 0.5], target=[0.5, 0.5], num_drafts=0), "num_drafts"),
        (dict(draft=[0.5, 0.5], target=[0.5, 0.5], num_drafts=1.5), "num_drafts"),
        (dict(draft=[[0.5, 0.5]] * 2, target=[0.5, 0.5], num_drafts=3), "num_drafts"),
        (dict(draft=[0.5, 0.5], target=[0.2, 0.3, 0.5], num_drafts=2), "vocabulary sizes"),
        (dict(draft=[0.5, 0.6], target=[0.5, 0.5], num_drafts=2), "draft.*sum to 1"),
        (dict(draft=[0.5, 0.5], target=[1.5, -0.5], num_drafts=2), "target.*negative"),
        (dict(draft=[np.nan, 1.0], target=[0.5, 0.5], num_drafts=2), "draft.*NaN"),
        (dict(draft=[[[1.0]]], target=[1.0], num_drafts=1), "shape"),
        (dict(draft=[0.5, 0.5], target=[[0.5, 0.5]], num_drafts=1), "target.*1-D"),
        (dict(draft=[], target=[], num_drafts=1), "empty"),
    ],
)
def test_bad_distributions(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mspec.SpecInfer(**kwargs)


def test_bad_tokens_and_rng():
    rule = mspec.SpecInfer(draft=[0.5, 0.5, 0.0], target=[0.2, 0.3, 0.5], num_drafts=2)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        rule.sample([0, 3], rng)
    with pytest.raises(ValueError, match="zero probability"):
        rule.sample([0, 2], rng)
    with pytest.raises(ValueError, match="exactly K = 2"):
        rule.sample([0], rng)
    with pytest.raises(ValueError, match="integer"):
        rule.sample([0.0, 1.0], rng)
    with pytest.raises(ValueError, match="rng"):
        rule.sample([0, 1], rng=np.random.RandomState(0))


def test_scheme_specific_errors():
    with pytest.raises(ValueError, match="identical drafts"):
        mspec.SpecTr(draft=[[0.5, 0.5], [0.9, 0.1]], target=[0.5, 0.5])
    # K equal rows are accepted as identical drafts
    assert mspec.SpecTr(draft=[[0.5, 0.5], [0.5, 0.5]], target=[0.9, 0.1]).identical
    with pytest.raises(ValueError, match="exactly one draft"):
        mspec.SingleDraft(draft=[0.5, 0.5], target=[0.5, 0.5], num_drafts=2)
    with pytest.raises(ValueError, match="unknown scheme 'nope'"):
        mspec.make_scheme("nope", draft=[1.0], target=[1.0], num_drafts=1)


def test_subclasses_follow_the_base_interface():
    for cls in mspec.SCHEMES.values():
        assert issubclass(cls, SelectionScheme)
        assert cls.name in mspec.SCHEMES and mspec.SCHEMES[cls.name] is cls


def test_every_scheme_class_of_the_package_is_registered_by_its_name():
    """Every named scheme class of the paper's room and of the fast room is registered, or is the
    reference that the registered fast path of its name derives from (SpecTr's bisection)."""
    import importlib
    import inspect
    import pkgutil

    import mspec.fast
    import mspec.schemes

    found = set()
    for package in (mspec.schemes, mspec.fast):
        for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
            module = importlib.import_module(info.name)
            found |= {cls for _, cls in inspect.getmembers(module, inspect.isclass)
                      if issubclass(cls, SelectionScheme) and cls.name and cls.__module__.startswith("mspec.")}
    registered = set(mspec.SCHEMES.values())
    assert registered <= found
    assert all(any(issubclass(fast, cls) for fast in registered if fast.name == cls.name) for cls in found - registered)
    assert found - registered == {mspec.SpecTr} and mspec.SCHEMES["spectr"] is mspec.NewtonSpecTr
    rule = mspec.make_scheme("canonical", draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
    assert rule.acceptance() == pytest.approx(mspec.optimal_acceptance(draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2))
