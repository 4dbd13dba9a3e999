"""SpecTr on hostile inputs: rho* is the exact root and the output law is exactly q.

Paper notation: drafts X_i ~ p (``draft``), target q (``target``). Every test runs on both
classes, the paper's bisection (:mod:`mspec.schemes.spectr`) and the fast Newton root
(:mod:`mspec.fast.spectr_newton`). The guarantee tested is the one stated in the latter:

* the residual is non-negative entry by entry and no acceptance mass exceeds ``q``
  (the certificate ``1 - (1 - beta)^K <= rho beta``);
* the acceptance equals an independent 40-digit bisection on ``g(rho)`` (mpmath, small V)
  or a plain float bisection (large V) to 1e-12;
* the output law equals ``q``: total variation <= 1e-12 and, per token, within
  ``1e-12 q(x) + 1e-14``; by enumerating every draft tuple (:func:`mspec.output_distribution`,
  small V, to 1e-12) and, at V up to 50272, through the implied law
  ``min(p, q/rho) (1 - (1 - beta)^K) / beta + (1 - beta)^K residual`` with ``beta``
  recomputed here.

Families: top-k/top-p truncation down to one token, temperatures 0.01..5 on either side,
wide logits, 1e-300 and subnormal entries, zeros on one side only, ratio ties,
``draft == target``, disjoint supports, K = 1..16, V = 1..50272; regressions from inputs
that broke the former piece-Newton search; a seeded chi-square with a broken control.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mspec
from mspec.distributions import distribution_from_logits
from mspec.schemes.selection import SchemeError
from mspec.fast.spectr_newton import NewtonSpecTr
from mspec.schemes.spectr import SpecTr
from sampling import chi2_pvalue, sample_counts

#: every test runs on the paper's bisection (the reference) and on the fast Newton root
pytestmark = pytest.mark.parametrize("cls", [SpecTr, NewtonSpecTr], ids=["bisection", "newton"])

TOL = 1e-12
#: absolute allowance per token: the residual is normalised by its own sum, which differs
#: from (1 - beta)^K by the rounding of sums over V (and by sum(q) - 1)
LAW_FLOOR = 1e-14
#: largest number of draft tuples enumerated per case (each is one ``conditional`` call)
MAX_TUPLES = 2000
TINY = [5e-324, 3e-321, 1e-300, 1e-200, 1e-100, 1e-30, 1e-17, 1e-10]


# -- independent references ---------------------------------------------------------------------
def _accepted(beta, k):
    """1 - (1 - beta)^k in float, accurate for tiny beta."""
    return 1.0 if beta >= 1.0 else -math.expm1(k * math.log1p(-beta))


def reference(draft, target, k, *, dps=30, steps=120):
    """``(rho*, acceptance)`` by bisection on ``g`` in ``dps``-digit arithmetic (mpmath).

    No pieces, no float rounding: every entry is converted exactly and ``beta(rho)`` is
    summed at ``dps`` digits, so this shares nothing with the implementation.
    """
    with mpmath.workdps(dps):
        ps = [mpmath.mpf(float(x)) for x in draft]
        qs = [mpmath.mpf(float(x)) for x in target]

        def beta(rho):
            return mpmath.fsum(min(a, b / rho) for a, b in zip(ps, qs))

        def accepted(b):
            return mpmath.mpf(1) if b >= 1 else -mpmath.expm1(k * mpmath.log1p(-b))

        def g(rho):
            b = beta(rho)
            return accepted(b) - rho * b

        lo, hi = mpmath.mpf(1), mpmath.mpf(k)
        if g(lo) <= 0:
            hi = lo
        else:
            for _ in range(steps):  # (K - 1) / 2^120 < 1e-35
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if g(mid) > 0 else (lo, mid)
        return float(hi), float(accepted(beta(hi)))


def float_reference_acceptance(draft, target, k, steps=80):
    """The paper's plain bisection on ``g`` in float64 (numpy sums), for large V."""

    def beta(rho):
        return float(np.minimum(draft, target / rho).sum())

    def g(rho):
        b = beta(rho)
        return _accepted(b, k) - rho * b

    lo, hi = 1.0, float(k)
    if g(lo) <= 0.0:
        return _accepted(beta(1.0), k)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if g(mid) > 0.0 else (lo, mid)
    return _accepted(beta(hi), k)


def total_variation(a, b):
    return 0.5 * float(np.abs(np.asarray(a) - np.asarray(b)).sum())


def implied_law(rule):
    """Law of the output: acceptance mass at ``rule.rho`` plus (1 - beta)^K x residual.

    ``beta`` is recomputed here (``math.fsum``), not taken from the scheme.
    """
    p, q, k = rule.draft, rule.target, rule.num_drafts
    mass = np.minimum(p, q / rule.rho)  # P(draft i is x and is accepted | reached)
    beta = math.fsum(mass)
    if beta == 0.0:
        return rule.residual(), mass
    beta = min(beta, 1.0)
    stay = 0.0 if beta == 1.0 else math.exp(k * math.log1p(-beta))
    accept_mass = mass * (_accepted(beta, k) / beta)
    return accept_mass + stay * rule.residual(), accept_mass


# -- checks -------------------------------------------------------------------------------------
def check_law(rule):
    """Residual, certificate and implied law (any V)."""
    q, k = rule.target, rule.num_drafts
    assert 1.0 <= rule.rho <= k
    assert 0.0 <= rule.beta <= 1.0
    res = rule.residual()
    assert res.shape == q.shape and np.all(np.isfinite(res))
    assert res.min() >= 0.0  # non-negative as computed, not clipped (see the next test)
    assert abs(res.sum() - 1.0) <= 1e-12
    assert np.all(res[q == 0.0] == 0.0)
    law, accept_mass = implied_law(rule)
    # certificate: acceptance never puts more than q(x) on x (beyond relative rounding)
    assert np.all(accept_mass <= q * (1.0 + TOL) + 1e-300)
    # per token: relative rounding, plus the rounding of the sums that normalise the
    # residual (spread over the residual's support; ~1e-16 in practice)
    assert np.all(np.abs(law - q) <= TOL * q + LAW_FLOOR)
    assert total_variation(law, q) <= TOL


def check_enumerated(rule):
    """Exact law by enumerating every draft tuple (small V)."""
    dist, accept = mspec.output_distribution(rule)
    assert total_variation(dist, rule.target) <= TOL
    assert np.abs(dist - rule.target).max() <= TOL
    assert abs(accept - rule.acceptance()) <= TOL


def check_reference(rule):
    """Acceptance against the 40-digit bisection; rho is on the valid side of rho*."""
    rho_ref, acc_ref = reference(rule.draft, rule.target, rule.num_drafts)
    assert abs(rule.acceptance() - acc_ref) <= TOL, (rule.acceptance(), acc_ref)
    # rho >= rho* up to rounding (a smaller rho is invalid, a larger one loses acceptance)
    assert rule.rho >= rho_ref * (1.0 - 1e-12) or abs(rule.acceptance() - acc_ref) <= 1e-15


def tuples(rule):
    return int(np.count_nonzero(rule.draft)) ** rule.num_drafts


def check_all(cls, draft, target, k, *, enumerate_up_to=MAX_TUPLES, ref=True):
    rule = cls(draft=draft, target=target, num_drafts=k)
    check_law(rule)
    if tuples(rule) <= enumerate_up_to:
        check_enumerated(rule)
    if ref:
        if rule.vocab_size <= 64:
            check_reference(rule)
        else:
            acc_ref = float_reference_acceptance(rule.draft, rule.target, k)
            assert abs(rule.acceptance() - acc_ref) <= TOL, (rule.acceptance(), acc_ref)
    return rule


# -- regressions: inputs that broke the former search -------------------------------------------
# bisection midpoint in the same linear piece returned as the root: TV 0.045 from q
MIDPOINT_K4 = (
    [0.016732377081013508, 0.20320666429470186, 0.63621505545524, 4.9030816461988995e-17,
     0.1331378712659255, 0.010708031903119326],
    [0.015299863690320594, 0.8951485408503229, 9.849093654245478e-10, 6.399377337662193e-17,
     0.08886262869509268, 0.0006889657793543775],
    4,
)
# same failure at V = 8, K = 8: acceptance 0.9518 against the optimum 0.9379, TV 0.014
MIDPOINT_K8 = (
    [0.7109876433583758, 6.877346435222968e-18, 0.2801452339717656, 8.354798456313828e-06,
     1.3170902195979543e-05, 3.030759955030261e-05, 0.008815289368739427, 9.165131569762457e-13],
    [0.9376850393900255, 1.691474899194627e-17, 1.5415620497762952e-12, 0.0001113997694209874,
     1.678430301411065e-15, 0.058278533587940225, 9.940326124078662e-05, 0.0038256239898292977],
    8,
)
# brentq raised RuntimeError("Failed to converge after 100 iterations") on these
BRENTQ_FAILURES = [
    ([1.0420453717743483e-09, 1.0178245703508035e-10, 0.0, 8.28675712528819e-100,
      0.004378663788192368, 0.9956213350679798],
     [0.49999500004999947, 5e-324, 9.99990000099999e-301, 0.49999500004999947,
      9.99990000099999e-101, 9.99990000099999e-06], 3),
    ([1.9739201926812427e-10, 4.289870265003662e-39, 3.494687829627522e-22,
      6.429061567861854e-20, 0.002106642797490126, 0.9978933570051178],
     [7.150236284128353e-245, 1.7867352092994455e-159, 0.9999949644655582,
      7.094712449166264e-191, 8.672456412086728e-82, 5.03553444177617e-06], 3),
    ([6.378999324687075e-38, 4.4660814679621554e-119, 2.782483589273564e-210,
      2.7614233251056103e-143, 6.96333178030502e-22, 1.0],
     [1.221238543066329e-30, 1.984134847045564e-11, 3.1e-321, 0.0, 0.9999942647755141,
      5.7352046446234875e-06], 3),
    ([6.317393771171511e-91, 0.6060716133776234, 0.39392838662237656, 3.5155556459943206e-21,
      7.147765820582994e-21, 3.0525919925930997e-91],
     [0.9999995830376511, 1.0646158831561705e-12, 4.169612837390448e-07, 5.856364373858016e-16,
      2.640910560452427e-29, 8.679004121225555e-22], 3),
]


def test_regression_midpoint_in_the_same_piece_k4(cls):
    draft, target, k = MIDPOINT_K4
    rule = check_all(cls, draft, target, k)
    assert tuples(rule) <= MAX_TUPLES  # enumerated
    # at rho* the acceptance mass fills q exactly on the tokens with q/p < rho
    assert rule.rho == pytest.approx(reference(draft, target, k)[0], rel=1e-12)


def test_regression_midpoint_in_the_same_piece_k8(cls):
    draft, target, k = MIDPOINT_K8
    rule = check_all(cls, draft, target, k)
    assert rule.acceptance() == pytest.approx(0.9379, abs=1e-4)


@pytest.mark.parametrize("case", range(len(BRENTQ_FAILURES)))
def test_regression_brentq_did_not_converge(cls, case):
    draft, target, k = BRENTQ_FAILURES[case]
    rule = check_all(cls, draft, target, k)
    assert tuples(rule) <= MAX_TUPLES  # enumerated


# -- the guard: a rho below the certificate is never clipped into a plausible law ---------------
def test_tampered_rho_raises_instead_of_clipping(cls):
    draft, target, k = MIDPOINT_K4
    rule = cls(draft=draft, target=target, num_drafts=k)
    rule.rho = 1.0 + 0.9 * (rule.rho - 1.0)  # invalid: acceptance would exceed q somewhere
    rule._residual = None
    with pytest.raises(SchemeError):
        rule.conditional([0, 0, 0, 0])  # all rejected w.p. > 0: needs the residual


# -- hand-made hostile families -----------------------------------------------------------------
def test_one_token_vocabulary_and_every_k(cls):
    for k in range(1, 17):
        rule = check_all(cls, [1.0], [1.0], k)
        assert rule.rho == 1.0 and rule.acceptance() == 1.0


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 16])
def test_draft_equal_target(cls, k):
    rng = np.random.default_rng(k)
    for v in (2, 5, 4096, 50272):
        q = distribution_from_logits(3.0 * rng.standard_normal(v))
        rule = check_all(cls, q, q, k, enumerate_up_to=MAX_TUPLES if v <= 5 else 0)
        assert rule.rho == 1.0 and rule.acceptance() == pytest.approx(1.0, abs=1e-15)
    # equal up to rounding only: the acceptance is still 1 to rounding
    q = rng.dirichlet(np.ones(6))
    p = q * (1.0 + 1e-15 * rng.standard_normal(6))
    rule = check_all(cls, p / p.sum(), q, k, enumerate_up_to=MAX_TUPLES)
    assert rule.acceptance() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 16])
def test_disjoint_supports_never_accept(cls, k):
    rule = check_all(cls, [0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.25, 0.75], k)
    assert rule.acceptance() == 0.0 and rule.beta == 0.0
    big = np.zeros(50272)
    big[:100], q = 0.01, np.zeros(50272)
    q[100:] = 1.0 / (50272 - 100)
    rule = check_all(cls, big, q, k, enumerate_up_to=0)
    assert rule.acceptance() == 0.0


@pytest.mark.parametrize("k", [1, 2, 4, 16])
def test_one_hot_targets(cls, k):
    for v in (2, 3, 6, 50272):
        rng = np.random.default_rng(v + k)
        p = rng.dirichlet(np.full(v, 0.5))
        q = np.zeros(v)
        q[int(rng.integers(v))] = 1.0
        check_all(cls, p, q, k, enumerate_up_to=MAX_TUPLES if v <= 6 else 0)
        # one surviving token after top-k = 1 / top-p truncation of the target's logits
        logits = 4.0 * rng.standard_normal(v)
        for trunc in ({"top_k": 1}, {"top_p": 1e-9}):
            target = distribution_from_logits(logits, **trunc)
            assert np.count_nonzero(target) == 1
            check_all(cls, distribution_from_logits(logits, temperature=2.0), target, k,
                      enumerate_up_to=MAX_TUPLES if v <= 6 else 0)


@pytest.mark.parametrize("tiny", TINY)
@pytest.mark.parametrize("side", ["draft", "target", "both"])
def test_tiny_and_subnormal_entries(cls, tiny, side):
    rng = np.random.default_rng(7)
    for v, ks in ((5, (1, 2, 3, 4)), (50272, (2, 16))):
        p, q = rng.dirichlet(np.ones(v)), rng.dirichlet(np.ones(v))
        idx = rng.choice(v, size=3, replace=False)
        if side in ("draft", "both"):
            p[idx[:2]] = tiny
        if side in ("target", "both"):
            q[idx[1:]] = tiny
        for k in ks:
            check_all(cls, p / p.sum(), q / q.sum(), k, enumerate_up_to=MAX_TUPLES if v <= 5 else 0)


@pytest.mark.parametrize("k", [2, 3, 8, 16])
def test_zeros_on_one_side_only(cls, k):
    rng = np.random.default_rng(k)
    for v in (6, 50272):
        p, q = rng.dirichlet(np.ones(v)), rng.dirichlet(np.ones(v))
        p0, q0 = p.copy(), q.copy()
        p0[: v // 3] = 0.0  # tokens the draft never proposes
        q0[v // 3: 2 * v // 3] = 0.0  # drafted tokens the target rules out
        for draft, target in ((p0, q), (p, q0), (p0, q0)):
            check_all(cls, draft / draft.sum(), target / target.sum(), k,
                      enumerate_up_to=MAX_TUPLES if v <= 6 else 0)


@pytest.mark.parametrize("k", [2, 3, 4, 8])
def test_ratio_ties(cls, k):
    # every ratio q/p is one of a few values, many tokens per value: empty pieces
    for v in (6, 50272):
        rng = np.random.default_rng(v)
        p = np.full(v, 1.0 / v)
        q = rng.choice([0.5, 1.0, 1.5, 3.0], size=v) / v
        q /= q.sum()
        check_all(cls, p, q, k, enumerate_up_to=MAX_TUPLES if v <= 6 else 0)
        # ties exactly at rho* = a breakpoint: q = c p on two groups
        p = rng.dirichlet(np.ones(v))
        q = p * np.where(np.arange(v) % 2 == 0, 2.0, 0.25)
        check_all(cls, p, q / q.sum(), k, enumerate_up_to=MAX_TUPLES if v <= 6 else 0)


def _lm_pair(rng, v, *, scale, draft_temperature, target_temperature, noise=0.5, **trunc):
    logits = scale * rng.standard_normal(v)
    target = distribution_from_logits(logits, temperature=target_temperature, **trunc)
    draft = distribution_from_logits(logits + noise * rng.standard_normal(v), temperature=draft_temperature)
    return draft, target


TEMPERATURES = [(0.01, 1.0), (1.0, 0.01), (0.1, 5.0), (5.0, 0.1), (1.5, 1.0), (0.7, 1.0), (5.0, 5.0), (0.01, 0.01)]


@pytest.mark.parametrize("temps", TEMPERATURES, ids=[f"draft{a}-target{b}" for a, b in TEMPERATURES])
def test_lm_shaped_temperatures_at_full_vocabulary(cls, temps):
    rng = np.random.default_rng(int(100 * temps[0] + temps[1]))
    for scale, k in ((3.0, 2), (8.0, 4), (20.0, 16)):
        draft, target = _lm_pair(rng, 50272, scale=scale, draft_temperature=temps[0],
                                 target_temperature=temps[1])
        check_all(cls, draft, target, k)


@pytest.mark.parametrize("trunc", [{"top_k": 1}, {"top_k": 50}, {"top_p": 0.5}, {"top_p": 0.95}],
                         ids=["top_k1", "top_k50", "top_p0.5", "top_p0.95"])
def test_lm_shaped_truncated(cls, trunc):
    rng = np.random.default_rng(len(str(trunc)))
    for k in (2, 8):
        draft, target = _lm_pair(rng, 50272, scale=3.0, draft_temperature=1.5, target_temperature=1.0, **trunc)
        check_all(cls, draft, target, k)
        # truncated draft, untruncated target: zeros on the draft side
        target, draft = _lm_pair(rng, 50272, scale=3.0, draft_temperature=1.0, target_temperature=0.7, **trunc)
        check_all(cls, draft, target, k)


def test_seeded_fuzz_lm_shaped(cls):
    """LM-shaped pairs, random temperatures / scales / K, V = 4096 and 50272."""
    rng = np.random.default_rng(2025)
    for n in range(24):
        v = 50272 if n % 4 == 0 else 4096
        draft, target = _lm_pair(rng, v, scale=float(rng.choice([1.0, 3.0, 8.0])),
                                 draft_temperature=float(rng.choice([0.3, 0.7, 1.0, 1.5, 2.0])),
                                 target_temperature=float(rng.choice([0.5, 1.0, 2.0])),
                                 noise=float(rng.choice([0.0, 0.5])))
        check_all(cls, draft, target, int(rng.integers(1, 17)))


# -- small V: enumeration + 40-digit reference --------------------------------------------------
def _hostile_vector(rng, v):
    kind = int(rng.integers(5))
    if kind == 0:
        w = rng.choice([0.0, *TINY, 1e-3, 0.1, 0.5, 1.0], size=v) * rng.random(v)
    elif kind == 1:  # wide logits
        w = np.exp(rng.standard_normal(v) * rng.choice([1.0, 8.0, 30.0]))
    elif kind == 2:
        w = rng.choice([0.0, *TINY, 1e-3, 0.1, 0.5, 1.0], size=v)
    elif kind == 3:
        w = 10.0 ** rng.uniform(-320, 0, size=v)
    else:
        w = rng.dirichlet(np.full(v, 0.5))
    if not w.sum() > 0 or not np.isfinite(w.sum()):
        w = np.zeros(v)
        w[int(rng.integers(v))] = 1.0
    return w / w.sum()


def test_seeded_fuzz_small_vocabularies(cls):
    rng = np.random.default_rng(4)
    for n in range(100):
        v = int(rng.integers(1, 7))
        draft = _hostile_vector(rng, v)
        mode = n % 5
        if mode == 0:
            target = draft.copy()
        elif mode == 1:  # ties
            target = draft * rng.choice([0.5, 1.0, 2.0], size=v)
            target = target / target.sum() if target.sum() > 0 else draft
        else:
            target = _hostile_vector(rng, v)
        k = int(rng.integers(1, 9))
        check_all(cls, draft, target, k, enumerate_up_to=500)


_entry = st.one_of(st.sampled_from([0.0, *TINY]), st.floats(min_value=1e-6, max_value=1.0))


@st.composite
def small_case(draw, max_vocab=6, max_drafts=16):
    v = draw(st.integers(1, max_vocab))

    def vector():
        w = np.array(draw(st.lists(_entry, min_size=v, max_size=v)))
        if not w.sum() > 0:
            w[draw(st.integers(0, v - 1))] = 1.0
        return w / w.sum()

    target = vector()
    draft = target.copy() if draw(st.integers(0, 7)) == 0 else vector()
    return draft, target, draw(st.integers(1, max_drafts))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_case())
def test_hypothesis_small_exact_law_and_reference(cls, case):
    draft, target, k = case
    check_all(cls, draft, target, k, enumerate_up_to=500)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_case(max_vocab=40, max_drafts=16))
def test_hypothesis_larger_vocabularies(cls, case):
    draft, target, k = case
    check_all(cls, draft, target, k, enumerate_up_to=0)


# -- samples: a seeded chi-square, and a broken control it rejects --------------------------------
class _RhoTooSmall(SpecTr):
    """The former failure mode: rho below rho*, the residual clipped into a distribution."""

    def __init__(self, **kw):
        super().__init__(**kw)
        p, q = self.draft, self.target
        self.rho = 1.0 + 0.5 * (self.rho - 1.0)
        self.beta = float(np.minimum(p, q / self.rho).sum())

    def residual(self):
        p, q, k = self.draft, self.target, self.num_drafts
        scale = (1.0 - (1.0 - self.beta) ** k) / self.beta
        res = np.maximum(q - np.minimum(p, q / self.rho) * scale, 0.0)
        return res / res.sum()


def test_chi_square_passes_spectr_and_rejects_a_wrong_rho(cls):
    kw = dict(draft=[0.5, 0.3, 0.15, 0.05], target=[0.1, 0.2, 0.3, 0.4], num_drafts=3)
    good, bad = cls(**kw), _RhoTooSmall(**kw)
    q = good.target
    assert total_variation(mspec.output_distribution(bad)[0], q) > 0.02  # the control is wrong
    n = 20000
    assert chi2_pvalue(sample_counts(good, n, seed=1), q) > 1e-3
    assert chi2_pvalue(sample_counts(bad, n, seed=1), q) < 1e-6


def test_chi_square_on_the_regression_input(cls):
    draft, target, k = MIDPOINT_K4
    rule = cls(draft=draft, target=target, num_drafts=k)
    counts = sample_counts(rule, 20000, seed=5)
    # pool the tokens with negligible target mass (expected counts << 1) into one cell
    big = rule.target > 1e-3
    pooled_counts = np.append(counts[big], counts[~big].sum())
    pooled_target = np.append(rule.target[big], rule.target[~big].sum())
    assert chi2_pvalue(pooled_counts, pooled_target) > 1e-3
