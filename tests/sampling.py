"""Helpers shared by the exactness (enumeration) and statistical (chi-square) tests."""

import itertools
import math

import numpy as np
from scipy.stats import chisquare

from mspec.schemes.exact import output_distribution


def sample_counts(scheme, n, seed):
    """Counts of Y over ``n`` selections with drafts drawn from the scheme's draft rows."""
    rng = np.random.default_rng(seed)
    rows = [scheme.draft_row(i) for i in range(scheme.num_drafts)]
    drafts = np.stack([rng.choice(scheme.vocab_size, size=n, p=row) for row in rows], axis=1)
    counts = np.zeros(scheme.vocab_size)
    for tokens in drafts:
        counts[scheme.sample(tokens, rng).token] += 1
    return counts


def chi2_pvalue(counts, target):
    """Chi-square p-value of ``counts`` against ``target``; no count outside its support."""
    support = target > 0
    assert counts[~support].sum() == 0  # never outputs a token the target rules out
    return chisquare(counts[support], counts.sum() * target[support]).pvalue


def expected_accept_probability(rule):
    """``sum_t P(t) rule.accept_probability(t)`` over every draft tuple ``t``."""
    rows = [rule.draft_row(i) for i in range(rule.num_drafts)]
    supports = [np.flatnonzero(row > 0) for row in rows]
    return sum(math.prod(row[x] for row, x in zip(rows, t)) * rule.accept_probability(np.array(t))
               for t in itertools.product(*supports))


def assert_exact_law(rule, target, *, atol=1e-12):
    """Enumerate every draft tuple: the output law is ``target``, the enumerated
    acceptance is the scheme's own ``acceptance()`` (in its sense: see
    ``SelectionScheme.accept_probability``) and no more than P(Y is a drafted token).
    Returns that acceptance."""
    dist, in_drafts = output_distribution(rule)
    np.testing.assert_allclose(dist, target, atol=atol)
    accept = expected_accept_probability(rule)
    assert abs(accept - rule.acceptance()) <= atol
    assert accept <= in_drafts + atol
    return accept


def memoized(make_scheme):
    """``make_scheme`` that builds each scheme ``(name, draft, target, K, params)`` once.

    Only speed, for tests that meet the same positions many times (enumerations, samplers,
    whole decoding runs): a scheme is a pure function of its arguments (per-position work in
    ``__init__``) and ``sample`` keeps no state that depends on earlier samples, so a reused
    scheme samples exactly like a new one.
    """
    built = {}

    def make(name, *, draft, target, num_drafts=None, **params):
        draft, target = np.asarray(draft), np.asarray(target)
        key = (name, draft.shape, draft.tobytes(), target.tobytes(), num_drafts, repr(sorted(params.items())))
        if key not in built:
            built[key] = make_scheme(name, draft=draft, target=target, num_drafts=num_drafts, **params)
        return built[key]

    return make
