"""SpecTr's fast root for rho* (``mspec.fast.spectr_newton``) against its readable reference,
the paper's plain bisection (``mspec.schemes.spectr``).

:func:`~mspec.fast.spectr_newton.solve_rho` finds ``rho*`` through a band of breakpoints, a search
over pieces and a bracketed Newton iteration; :func:`~mspec.schemes.spectr.bisect_rho` is the
paper's plain bisection on ``g(rho) = 1 - (1 - beta(rho))^K - rho beta(rho)``. On the hostile
families of ``tests/strategies.py`` the two give the same acceptance
``1 - (1 - beta(rho))^K`` to 1e-12 and, where ``g`` is not flat, the same ``rho`` to 1e-9
(``rho`` is ill-conditioned where the acceptance is within 1e-6 of 1, draft close to
target, or of 0, ``beta`` near underflow; the acceptance is not). A solver that takes the
midpoint of the root's piece for the root (a former failure) is caught.

Paper notation: K i.i.d. drafts from p (``draft``), target q (``target``).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from mspec.fast import spectr_newton
from mspec.fast.spectr_newton import NewtonSpecTr
from mspec.schemes import spectr
from mspec.schemes.spectr import SpecTr, bisect_rho

from strategies import HOSTILE_FAMILIES, hostile_cases, hostile_pair, random_case

#: acceptances within this of 0 or 1 leave rho ill-conditioned: only the acceptance is compared
FLAT = 1e-6


def acceptance_at(rule, rho):
    """``1 - (1 - beta(rho))^K`` for the rule's draft and target."""
    beta = min(float(np.minimum(rule.draft, rule.target / rho).sum()), 1.0)
    return spectr.some_accepted(beta, rule.num_drafts)


def disagreement(draft, target, k):
    """``(acceptance gap, relative rho gap)`` between the solver and the bisection; the rho
    gap is 0 where ``rho`` is ill-conditioned (see the module docstring)."""
    rule = NewtonSpecTr(draft=draft, target=target, num_drafts=k)
    rho = bisect_rho(rule.draft, rule.target, k)
    assert 1.0 <= rho <= k and 1.0 <= rule.rho <= k
    assert rule.beta == 0.0 or spectr.acceptance_scale(rule.beta, k) <= rule.rho  # the solver's certificate
    gap = abs(rule.acceptance() - acceptance_at(rule, rho))
    steep = FLAT < rule.acceptance() < 1.0 - FLAT
    return gap, abs(rule.rho - rho) / rho if steep else 0.0


def hostile(family, seed, count=40):
    """Seeded hostile ``(draft, target, K)`` of one family, V from 1 to 5000, K from 1 to 16."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        vocab = int(rng.choice([1, 2, 3, 5, 8, 50, 1000, 5000]))
        k = int(rng.choice([1, 2, 3, 4, 8, 16]))
        draft, target = hostile_pair(rng, vocab=vocab, family=family, num_drafts=k)
        yield draft, target, k


@pytest.mark.parametrize("family", HOSTILE_FAMILIES)
def test_newton_matches_the_bisection_on_hostile_families(family):
    for draft, target, k in hostile(family, seed=HOSTILE_FAMILIES.index(family)):
        gap, rho_gap = disagreement(draft, target, k)
        assert gap <= 1e-12 and rho_gap <= 1e-9, (family, k, draft.size, gap, rho_gap)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_cases(max_vocab=8, max_drafts=16))
def test_newton_matches_the_bisection_hypothesis(case):
    draft, target, k, _ = case
    gap, rho_gap = disagreement(draft, target, k)
    assert gap <= 1e-12 and rho_gap <= 1e-9


def test_newton_matches_the_bisection_on_lm_shaped_pairs():
    """The piecewise-Newton root equals the plain bisection's, rho itself to 1e-9."""
    from mspec_lab.synthetic import lm_like_pair

    rng = np.random.default_rng(11)
    cases = [lm_like_pair(v, seed=s) for v, s in [(50, 0), (1000, 1), (20000, 2)]]
    cases += [random_case(rng, vocab=6, num_drafts=1) for _ in range(100)]
    for draft, target in cases:
        for k in (2, 3, 8):
            rule = NewtonSpecTr(draft=draft, target=target, num_drafts=k)
            assert rule.rho == pytest.approx(bisect_rho(rule.draft, rule.target, k), abs=1e-9)
            # the residual is a valid distribution: acceptance never puts more than q(x) on x
            assert 1 - (1 - rule.beta) ** k <= rule.rho * rule.beta + 1e-15


def test_a_solver_that_takes_the_midpoint_of_the_piece_is_caught(monkeypatch):
    # Control: the root's piece found, but its midpoint returned for the root (the former
    # search's failure); _settle then only makes the certificate hold.
    monkeypatch.setattr(spectr_newton, "_piece_root", lambda a, b, k, lo, hi: 0.5 * (lo + hi))
    worst = max(max(disagreement(draft, target, k)) for family in ("lm", "dirichlet", "zeros-target")
                for draft, target, k in hostile(family, seed=5))
    assert worst > 1e-6


@pytest.mark.parametrize("family", HOSTILE_FAMILIES)
def test_the_two_classes_give_the_same_scheme(family):
    """The reference class (bisection) and the fast one: same acceptance to 1e-12, and the same
    seeded samples wherever ``rho`` agrees to the last few ulps (the draws compare against it)."""
    for draft, target, k in hostile(family, seed=100 + HOSTILE_FAMILIES.index(family), count=15):
        slow, fast = SpecTr(draft=draft, target=target, num_drafts=k), NewtonSpecTr(draft=draft, target=target,
                                                                                      num_drafts=k)
        assert fast.acceptance() == pytest.approx(slow.acceptance(), abs=1e-12)
        assert slow.beta == 0.0 or spectr.acceptance_scale(slow.beta, k) <= slow.rho  # its certificate
