"""The LP schemes ``optimal-lp`` and ``canonical`` on hostile inputs (paper notation: drafts
X_i ~ p = ``draft``, target q = ``target``).

Regression for: tuples of tiny probability got an all-zero plan row from HiGHS (NaN
acceptance, token id V), and inputs on which HiGHS reported "infeasible". What is tested
is the accuracy the docstrings of :mod:`mspec.schemes.optimal_lp` and :mod:`mspec.schemes.canonical`
guarantee, whatever HiGHS returns:

* plan: non-negative, zero where ``q = 0``, rows sum to 1 within ``V eps``, output law
  ``sum_t P(t) pi(.|t) = q`` within 1e-14; canonical weights: non-negative, zero unless
  drafted, rows sum to 1 within ``V eps``;
* ``value`` is the acceptance of the plan used, and the optimum within ``gap <= GAP_TOL``
  (1e-10) unless ``solver_status`` says otherwise, with an ``LPFallbackWarning``.
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mspec.schemes.lp as lp_module
from mspec.schemes.canonical import CanonicalScheme, solve_canonical, solve_canonical_lp
from mspec.schemes.closed_form import brute_force_acceptance, optimal_acceptance
from mspec.schemes.exact import output_distribution
from mspec.schemes.lp import GAP_TOL, LPFallbackWarning, cut_bound, draft_tuples, repair_plan
from mspec.schemes.optimal_lp import OptimalLP, solve_optimal_lp
from sampling import assert_exact_law, chi2_pvalue, sample_counts

# an LP scheme that cannot certify its optimum on an ordinary input is a failure here
pytestmark = pytest.mark.filterwarnings("error::mspec.schemes.lp.LPFallbackWarning")

EPS = np.finfo(np.float64).eps
LAW_TOL = 1e-14  # documented: the plan's output law equals q to this, for N <= 10^4 tuples
ROUND = 1e-14  # rounding allowed when comparing values to the closed form


def norm(x):
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum()


def membership(tuples, vocab):
    member = np.zeros((len(tuples), vocab), dtype=bool)
    for col in np.asarray(tuples).T:
        member[np.arange(len(tuples)), col] = True
    return member


def reference_acceptance(draft, target, k):
    """Closed form for identical drafts, all 2^V subsets otherwise."""
    if np.ndim(draft) == 1:
        return optimal_acceptance(draft=draft, target=target, num_drafts=k)
    return brute_force_acceptance(draft=draft, target=target, num_drafts=k)


def check_plan(rule, target):
    """The documented guarantee of an OptimalLP plan."""
    plan, probs, vocab = rule.plan, rule.tuple_probs, len(target)
    assert np.all(np.isfinite(plan)) and plan.min() >= 0.0
    assert np.all(plan[:, target == 0] == 0.0)
    assert np.abs(plan.sum(axis=1) - 1.0).max() <= vocab * EPS
    assert np.abs(probs @ plan - target).max() <= LAW_TOL
    accepted = float(probs @ np.where(membership(rule.tuples, vocab), plan, 0.0).sum(axis=1))
    assert rule.value == pytest.approx(accepted, abs=ROUND)  # the acceptance of the plan used


def check_weights(rule):
    """The documented guarantee of canonical weights: valid for every tuple."""
    vocab, k = rule.vocab_size, rule.num_drafts
    flat = rule.weights.reshape(-1, vocab)
    tuples = np.indices((vocab,) * k).reshape(k, -1).T
    assert np.all(np.isfinite(flat)) and flat.min() >= 0.0
    assert np.all(flat[~membership(tuples, vocab)] == 0.0)
    assert np.abs(flat.sum(axis=1) - 1.0).max() <= vocab * EPS


def check_both(draft, target, k, *, law_atol=1e-12):
    """Both LP schemes: exact law by enumeration, guarantees, certified optimum."""
    reference = reference_acceptance(draft, target, k)
    full = OptimalLP(draft=draft, target=target, num_drafts=k)
    canon = CanonicalScheme(draft=draft, target=target, num_drafts=k)
    for rule in (full, canon):
        assert rule.solver_status in ("optimal", "retried")
        assert 0.0 <= rule.gap <= GAP_TOL
        accept = assert_exact_law(rule, target, atol=law_atol)
        assert np.isfinite(accept)
        assert abs(rule.acceptance() - reference) <= GAP_TOL + ROUND
    check_plan(full, target)
    check_weights(canon)
    return full, canon


# --- regression: tiny-probability tuples ----------------------------------------------


@pytest.mark.parametrize("tiny", [1e-14, 1e-12, 1e-10, 1e-9, 1e-7])
def test_tiny_probability_tuples(tiny):
    draft = np.array([0.5, 0.3, 0.2 - tiny, tiny])
    target = np.array([0.1, 0.2, 0.3, 0.4])
    full, canon = check_both(draft, target, 3)
    assert np.isfinite(full.acceptance())
    # the tuples holding the tiny token (P(t) ~ tiny .. tiny^3) have valid rows, and
    # sampling from them returns a real token
    rng = np.random.default_rng(0)
    for tokens in ([3, 3, 3], [3, 0, 3], [0, 1, 3]):
        for rule in (full, canon):
            dist, accept = rule.conditional(tokens)
            assert dist.sum() == pytest.approx(1.0, abs=1e-15) and 0.0 <= accept <= 1.0
            for _ in range(20):
                assert 0 <= rule.sample(tokens, rng).token < 4


def test_dirichlet_sweep():
    """The bug report's inputs: V 3..6, K = 3, Dirichlet(1) draft and target (before the
    fix about 1 case in 7 gave NaN or LPSolveError)."""
    rng = np.random.default_rng(2025)
    for n in range(120):
        vocab = 3 + n % 4
        draft, target = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
        check_both(draft, target, 3)


def test_dirichlet_sweep_sparse():
    """Dirichlet(0.1): entries down to ~1e-40, so many tuples of P(t) far below HiGHS's tolerance."""
    rng = np.random.default_rng(7)
    smallest = 1.0
    for n in range(40):
        vocab = 3 + n % 4
        draft, target = rng.dirichlet(np.full(vocab, 0.1)), rng.dirichlet(np.full(vocab, 0.1))
        smallest = min(smallest, draft.min())
        check_both(draft, target, 3)
    assert smallest < 1e-20  # the sweep does reach the hostile range


# --- regression: inputs on which HiGHS reported "infeasible" --------------------------

HOSTILE = {
    "one-hot target": ([0.2, 0.3, 0.5], [0.0, 0.0, 1.0], 3),
    "one-hot target (first)": ([0.2, 0.3, 0.4, 0.1], [1.0, 0.0, 0.0, 0.0], 3),
    "one-hot draft": ([0.0, 1.0, 0.0], [0.2, 0.3, 0.5], 3),
    "zero in target only": ([0.2, 0.3, 0.4, 0.1], [0.0, 0.3, 0.3, 0.4], 3),
    "zeros in target only": ([0.2, 0.3, 0.4, 0.1], [0.0, 0.7, 0.0, 0.3], 2),
    "zero in draft only": ([0.2, 0.3, 0.5, 0.0], [0.1, 0.3, 0.2, 0.4], 3),
    "disjoint supports": ([0.5, 0.5, 0.0], [0.0, 0.0, 1.0], 3),
    "near-tie": ([0.2, 0.3, 0.5], [0.2, 0.3 * (1 + 1e-15), 0.5], 3),
    "near-tie, two ratios": ([0.1, 0.2, 0.3, 0.4], [0.15, 0.3 * (1 + 1e-15), 0.15, 0.4], 3),
    "1e-300 in draft": ([1e-300, 0.5, 0.5], [0.3, 0.3, 0.4], 3),
    "1e-300 in target": ([0.3, 0.3, 0.4], [1e-300, 0.5, 0.5], 3),
    "1e-300 in both": ([1e-300, 0.5, 0.5], [1e-300, 0.3, 0.7], 2),
    "subnormal in draft": ([5e-324, 0.5, 0.5], [0.3, 0.3, 0.4], 3),
    "subnormal in target": ([0.3, 0.3, 0.4], [5e-324, 0.5, 0.5], 3),
    "subnormal draft, K = 1": ([5e-324, 0.25, 0.75], [0.5, 0.25, 0.25], 1),
    "1e-160 draft (P(t) underflows)": ([1e-160, 0.4, 0.6], [0.2, 0.2, 0.6], 3),
    "draft == target": ([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], 3),
    "V = 1": ([1.0], [1.0], 3),
    "K = 1": ([0.1, 0.6, 0.3], [0.5, 0.2, 0.3], 1),
    "K = 1, tiny": ([1e-14, 0.6, 0.4 - 1e-14], [0.5, 0.2, 0.3], 1),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_inputs(name):
    draft, target, k = HOSTILE[name]
    draft, target = norm(draft), norm(target)
    full, canon = check_both(draft, target, k, law_atol=1e-14)
    if name == "draft == target" or name == "V = 1":
        assert full.acceptance() == pytest.approx(1.0, abs=ROUND)
    if name == "disjoint supports":
        assert full.acceptance() == 0.0 and canon.acceptance() == 0.0
    if name.startswith("K = 1"):
        assert full.acceptance() == pytest.approx(np.minimum(draft, target).sum(), abs=ROUND)


def test_a_tuple_whose_probability_underflows():
    """Each token has p > 0 (so it may be drafted) but P(t) underflows to 0: the conditional
    law is still a distribution (q for optimal-lp), and sampling works."""
    draft, target = norm([1e-160, 0.4, 0.6]), norm([0.2, 0.2, 0.6])
    full = OptimalLP(draft=draft, target=target, num_drafts=3)
    canon = CanonicalScheme(draft=draft, target=target, num_drafts=3)
    assert draft[0] ** 3 == 0.0 and [0, 0, 0] not in full.tuples.tolist()
    np.testing.assert_array_equal(full.conditional([0, 0, 0])[0], target)
    rng = np.random.default_rng(1)
    for rule in (full, canon):
        dist, _ = rule.conditional([0, 0, 0])
        assert dist.sum() == pytest.approx(1.0, abs=1e-15)
        assert all(rule.sample([0, 0, 0], rng).token in (0, 1, 2) for _ in range(20))


def test_non_identical_drafts_match_the_canonical_optimum():
    rng = np.random.default_rng(31)
    for n in range(40):
        k = 2 + n % 2
        vocab = 3 + n % 3
        alpha = [0.1, 1.0][n % 2]
        draft = rng.dirichlet(np.full(vocab, alpha), size=k)
        target = rng.dirichlet(np.ones(vocab))
        if n % 5 == 0:  # a tiny entry in one draft only
            draft[0, 0] = 1e-13
            draft[0] /= draft[0].sum()
        full, canon = check_both(draft, target, k)
        assert abs(full.acceptance() - canon.acceptance()) <= 2 * GAP_TOL


def test_identical_drafts_given_as_rows():
    draft, target = norm([0.5, 0.3, 0.2 - 1e-14, 1e-14]), norm([0.1, 0.2, 0.3, 0.4])
    check_both(np.tile(draft, (3, 1)), target, 3)


def test_dual_bound_and_gap_are_honest():
    """``gap`` bounds the true loss (value >= closed form - gap), and the certificate
    :func:`cut_bound` is an upper bound for any score and tight for q/p (identical drafts)."""
    rng = np.random.default_rng(4)
    for n in range(30):
        vocab, k = 3 + n % 4, 1 + n % 3
        draft, target = rng.dirichlet(np.full(vocab, 0.3)), rng.dirichlet(np.ones(vocab))
        best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
        solution = solve_optimal_lp(draft=draft, target=target, num_drafts=k)
        assert solution.value >= best - solution.gap - ROUND
        assert solution.value <= best + ROUND
        for _ in range(5):
            assert cut_bound(rng.normal(size=vocab), draft, target, k) >= best - ROUND
        assert cut_bound(np.zeros(vocab), draft, target, k) == pytest.approx(best, abs=1e-13)
        rows = rng.dirichlet(np.ones(vocab), size=2)
        exact = brute_force_acceptance(draft=rows, target=target)
        assert cut_bound(rng.normal(size=vocab), rows, target, 2) >= exact - ROUND


def test_repair_plan():
    rng = np.random.default_rng(5)
    probs = norm(rng.dirichlet(np.ones(12)) * np.logspace(0, -30, 12))
    target = norm([0.2, 0.0, 0.5, 1e-300, 0.3])
    # zeros: the product coupling
    np.testing.assert_array_equal(repair_plan(np.zeros((12, 5)), probs, target), np.tile(target, (12, 1)))
    # a feasible joint: unchanged
    joint = np.outer(probs, target)
    np.testing.assert_allclose(repair_plan(joint, probs, target), np.tile(target, (12, 1)), atol=1e-15)
    # garbage (negative, huge, NaN, inf): exactly feasible anyway
    for _ in range(20):
        garbage = rng.normal(size=(12, 5)) * 10.0 ** rng.integers(-40, 5, size=(12, 5))
        garbage[rng.random((12, 5)) < 0.1] = np.nan
        garbage[rng.random((12, 5)) < 0.05] = np.inf
        plan = repair_plan(garbage, probs, target)
        assert plan.min() >= 0.0 and np.all(plan[:, target == 0] == 0.0)
        assert np.abs(plan.sum(axis=1) - 1.0).max() <= 5 * EPS
        assert np.abs(probs @ plan - target).max() <= LAW_TOL


# --- whatever HiGHS returns -------------------------------------------------------------

REAL_LINPROG = lp_module.linprog
CASE = (norm([0.5, 0.3, 0.2 - 1e-14, 1e-14]), norm([0.1, 0.2, 0.3, 0.4]), 3)


def corrupt(kind):
    """A fake ``linprog``: the real one, with its answer damaged in the given way."""
    rng = np.random.default_rng(6)
    calls = []

    def fake(c, **kwargs):
        calls.append(kwargs.get("method"))
        res = REAL_LINPROG(c, **kwargs)
        if kind == "infeasible":
            res.status, res.x, res.message = 2, None, "The problem is infeasible."
        elif kind == "first call infeasible" and len(calls) == 1:
            res.status, res.x, res.message = 2, None, "The problem is infeasible."
        elif kind == "raises":
            raise ValueError("HiGHS exploded")
        elif kind == "nan":
            res.x = np.full_like(res.x, np.nan)
        elif kind == "zeros":
            res.x = np.zeros_like(res.x)
        elif kind == "noise":
            res.x = res.x + rng.normal(scale=1e-3, size=res.x.shape)
        elif kind == "huge":
            res.x = np.full_like(res.x, 1e6)
        elif kind == "no duals":
            res.eqlin = res.ineqlin = None
        return res

    return fake, calls


@pytest.mark.parametrize("kind", ["first call infeasible", "no duals"])
def test_retry_or_no_duals_still_certified(monkeypatch, kind):
    fake, calls = corrupt(kind)
    monkeypatch.setattr(lp_module, "linprog", fake)
    draft, target, k = CASE
    full, canon = check_both(draft, target, k)
    if kind == "first call infeasible":  # the first call is optimal-lp's; then the retry
        assert full.solver_status == "retried" and "infeasible" in full.solver_log[0]
        assert canon.solver_status == "optimal"
    assert len(calls) >= 2


@pytest.mark.parametrize("kind", ["infeasible", "raises", "nan", "zeros", "noise", "huge"])
def test_whatever_highs_returns_the_schemes_stay_lossless(monkeypatch, kind):
    """Exactly lossless whatever the solver answers; the path taken is exposed, a
    non-certified result always warns, and the reported gap is honest."""
    fake, _ = corrupt(kind)
    monkeypatch.setattr(lp_module, "linprog", fake)
    draft, target, k = CASE
    best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
    failed = kind in ("infeasible", "raises", "nan")
    for cls in (OptimalLP, CanonicalScheme):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            rule = cls(draft=draft, target=target, num_drafts=k)
        warned = [w for w in record if issubclass(w.category, LPFallbackWarning)]
        assert len(warned) == (rule.solver_status in ("suboptimal", "fallback"))  # never silent
        assert rule.solver_status == "fallback" if failed else rule.solver_status != "fallback"
        if rule.solver_status in ("optimal", "retried"):
            assert rule.gap <= GAP_TOL
        if kind == "infeasible":
            assert "infeasible" in str(warned[0].message)
            assert all("infeasible" in line for line in rule.solver_log)
        assert best - rule.gap - ROUND <= rule.acceptance() <= best + ROUND  # the gap is honest
        assert_exact_law(rule, target, atol=1e-14)
        if cls is OptimalLP:
            check_plan(rule, target)
            # the damaged plans are far from optimal, and say so
            assert rule.solver_status in ("suboptimal", "fallback") and rule.gap > 1e-3
            if failed:  # the last resort is the product coupling
                np.testing.assert_array_equal(rule.plan, np.tile(target, (len(rule.plan), 1)))
        else:
            check_weights(rule)
            if failed:
                assert len(rule.solver_log) == len(lp_module.HIGHS_ATTEMPTS)


def test_solve_functions_report_the_path(monkeypatch):
    draft, target, k = CASE
    plan = solve_optimal_lp(draft=draft, target=target, num_drafts=k)
    assert plan.solver_status == "optimal" and len(plan.solver_log) == 1
    solution = solve_canonical(draft=draft, target=target, num_drafts=k)
    assert solution.solver_status == "optimal"
    assert solve_canonical_lp(draft=draft, target=target, num_drafts=k)[0] == solution.value
    fake, _ = corrupt("infeasible")
    monkeypatch.setattr(lp_module, "linprog", fake)
    with pytest.warns(LPFallbackWarning):
        value, weights = solve_canonical_lp(draft=draft, target=target, num_drafts=2)  # K = 2 pair LP
    assert weights.shape == (4, 4, 4)
    assert value == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=2), abs=0.2)


# --- hypothesis: hostile distributions ------------------------------------------------

_hostile_weight = st.one_of(
    st.sampled_from([0.0, 5e-324, 1e-300, 1e-100, 1e-14, 1e-9]),
    st.floats(min_value=1e-3, max_value=1.0),
)


@st.composite
def hostile_distribution(draw, vocab):
    w = np.array(draw(st.lists(_hostile_weight, min_size=vocab, max_size=vocab)))
    if not w.sum() >= 1e-3:
        w[draw(st.integers(0, vocab - 1))] = 1.0
    return w / w.sum()


@st.composite
def hostile_case(draw):
    vocab, k = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    identical = draw(st.booleans())
    target = draw(hostile_distribution(vocab))
    if identical:
        draft = draw(hostile_distribution(vocab))
        if vocab >= 2 and min(draft[0], draft[1], target[0]) >= 1e-3 and draw(st.booleans()):
            target = target.copy()  # a near-tie: q/p of tokens 0 and 1 equal up to 1e-15
            target[1] = target[0] * (draft[1] / draft[0]) * (1 + 1e-15)
            target = target / target.sum()
    else:
        draft = np.stack([draw(hostile_distribution(vocab)) for _ in range(k)])
    return draft, target, k


@settings(max_examples=40, deadline=None)
@given(case=hostile_case())
def test_hostile_hypothesis(case):
    draft, target, k = case
    check_both(draft, target, k)


# --- statistical: samples follow q; a broken control is caught -----------------------

CHI_DRAFT = np.array([0.4, 0.3, 0.2, 0.1 - 1e-13, 1e-13])
CHI_TARGET = np.array([0.05, 0.15, 0.3, 0.5, 0.0])


class OneRowOffLP(OptimalLP):
    """Deliberately broken: the plan row of the likeliest tuple is replaced by the point
    mass on the token it gave least (still a distribution, so no check catches it)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        row = int(np.argmax(self.tuple_probs))
        support = np.flatnonzero(self.target > 0)
        worst = support[np.argmin(self.plan[row, support])]
        self.plan = self.plan.copy()
        self.plan[row] = 0.0
        self.plan[row, worst] = 1.0


class StaleWeightsCanonical(CanonicalScheme):
    """Deliberately broken: the likeliest tuple of two distinct tokens selects the other
    token, but p_I (acceptance test, residual) is not recomputed."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        tuples, probs = draft_tuples(self.draft, self.num_drafts)
        mixed = np.array([len(set(t)) > 1 for t in tuples.tolist()])
        t = tuple(tuples[mixed][np.argmax(probs[mixed])])
        self.weights = self.weights.copy()
        row = self.weights[t]
        drafted = sorted(set(t))
        row[drafted] = row[drafted[::-1]]


@pytest.mark.parametrize("good, broken", [(OptimalLP, OneRowOffLP), (CanonicalScheme, StaleWeightsCanonical)])
def test_chisquare_and_a_broken_control_fails(good, broken):
    kwargs = dict(draft=CHI_DRAFT, target=CHI_TARGET, num_drafts=3)
    rule = good(**kwargs)
    assert rule.solver_status == "optimal"
    assert chi2_pvalue(sample_counts(rule, 20_000, seed=11), CHI_TARGET) > 1e-3
    wrong = broken(**kwargs)
    assert np.abs(output_distribution(wrong)[0] - CHI_TARGET).max() > 0.01
    assert chi2_pvalue(sample_counts(wrong, 20_000, seed=11), CHI_TARGET) < 1e-3


def test_no_warning_on_ordinary_inputs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rng = np.random.default_rng(8)
        for _ in range(10):
            draft, target = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
            OptimalLP(draft=draft, target=target, num_drafts=3)
            CanonicalScheme(draft=draft, target=target, num_drafts=2)
