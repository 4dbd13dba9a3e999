"""Work estimated from (V, K) before it is done: a scheme that would take more than a few
seconds to build warns (standalone) or is refused (inside a decoder, once per position), and
an enumeration of draft tuples projects its time from the first ones and warns.

Paper notation: drafts from p (``draft``), target q (``target``). No test here times anything
it asserts on: the estimates are functions of (V, K), and the projection test uses a scheme
that sleeps a known time per tuple.
"""

import time
import warnings

import numpy as np
import pytest

import mspec
from mspec.schemes.canonical import CanonicalScheme
from mspec.schemes.optimal_lp import OptimalLP
from mspec.schemes.selection import SLOW_SECONDS, SlowSchemeWarning
from mspec.schemes.specinfer import SpecInfer


def uniform_and_peaked(vocab):
    target = np.arange(1, vocab + 1, dtype=float)
    return np.full(vocab, 1.0 / vocab), target / target.sum()


@pytest.mark.parametrize("name, vocab, k", [("canonical", 50, 3), ("canonical", 300, 2), ("optimal-lp", 20, 3),
                                            ("optimal-lp", 50, 2)])
def test_slow_lp_schemes_are_refused_per_position_with_the_estimate(name, vocab, k):
    cls = mspec.get_scheme(name)
    seconds = cls.estimate_seconds(vocab_size=vocab, num_drafts=k)
    assert seconds > SLOW_SECONDS
    with pytest.raises(ValueError, match=rf"{name}' at V = {vocab}, K = {k} takes about .* once per position.*"
                                         r"use scheme 'optimal'"):
        cls.check_scale(vocab_size=vocab, num_drafts=k)


@pytest.mark.parametrize("name, vocab, k", [("canonical", 20, 2), ("canonical", 8, 3), ("optimal-lp", 8, 3),
                                            ("optimal-lp", 12, 2)])
def test_small_lps_pass(name, vocab, k):
    cls = mspec.get_scheme(name)
    assert cls.estimate_seconds(vocab_size=vocab, num_drafts=k) < 1.0
    cls.check_scale(vocab_size=vocab, num_drafts=k)


def test_estimates_grow_with_v_and_k_and_every_scheme_has_one():
    for name, cls in mspec.SCHEMES.items():
        small = cls.estimate_seconds(vocab_size=10, num_drafts=2)
        assert 0 <= small <= cls.estimate_seconds(vocab_size=20, num_drafts=2), name
        assert small <= cls.estimate_seconds(vocab_size=10, num_drafts=3), name
    # the schemes without an LP: passes over V, milliseconds at LLM vocabularies
    for name in ("single", "specinfer", "spectr", "optimal", "is", "is-ratio"):
        assert mspec.get_scheme(name).estimate_seconds(vocab_size=50272, num_drafts=8) < 0.1, name
    assert CanonicalScheme.estimate_seconds(vocab_size=20, num_drafts=3, weights=np.ones(1)) < 0.1  # no LP


@pytest.mark.parametrize("name, vocab, k", [("canonical", 160, 2), ("optimal-lp", 20, 3)])
def test_building_a_slow_scheme_warns_first(name, vocab, k):
    """The warning comes before the LP: as an error it stops the build at once."""
    draft, target = uniform_and_peaked(vocab)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowSchemeWarning)
        with pytest.raises(SlowSchemeWarning, match=r"takes about .* s to build.*'optimal'.* is faster"):
            mspec.make_scheme(name, draft=draft, target=target, num_drafts=k)


def test_a_fast_build_does_not_warn():
    draft, target = uniform_and_peaked(12)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowSchemeWarning)
        OptimalLP(draft=draft, target=target, num_drafts=2)
        CanonicalScheme(draft=draft, target=target, num_drafts=2)


class SleepySpecInfer(SpecInfer):
    """SpecInfer whose conditional law takes at least 1 ms: a known cost per draft tuple."""

    def _conditional(self, tokens):
        time.sleep(1e-3)
        return super()._conditional(tokens)


def test_a_long_enumeration_warns_with_its_projection():
    # 100^2 = 10,000 tuples at >= 1 ms each: >= 10 s projected after the first tuples
    draft, target = uniform_and_peaked(100)
    rule = SleepySpecInfer(draft=draft, target=target, num_drafts=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowSchemeWarning)
        with pytest.raises(SlowSchemeWarning, match=r"enumerating 10,000 draft tuples .* takes about"):
            mspec.output_distribution(rule)
    # control: 25 tuples of the same scheme project well under the limit
    small = SleepySpecInfer(draft=uniform_and_peaked(5)[0], target=uniform_and_peaked(5)[1], num_drafts=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowSchemeWarning)
        law, _ = mspec.output_distribution(small)
    np.testing.assert_allclose(law, small.target, atol=1e-12)


def test_a_slow_build_warns_and_still_builds():
    """The warning is advice: the scheme is built (a few seconds here) and exact."""
    draft, target = uniform_and_peaked(20)
    with pytest.warns(SlowSchemeWarning, match="takes about"):
        rule = OptimalLP(draft=draft, target=target, num_drafts=3)
    assert rule.acceptance() == pytest.approx(mspec.optimal_acceptance(draft=draft, target=target, num_drafts=3),
                                              abs=1e-9)
