"""Helpers shared by the exactness (enumeration) and statistical (chi-square) tests."""

import numpy as np
from scipy.stats import chisquare

from mspec.exact import output_distribution


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


def assert_exact_law(rule, target, *, atol=1e-12):
    """Enumerate every draft tuple: the output law is ``target`` and the enumerated
    acceptance is the scheme's own ``acceptance()``. Returns that acceptance."""
    dist, accept = output_distribution(rule)
    np.testing.assert_allclose(dist, target, atol=atol)
    assert abs(accept - rule.acceptance()) <= atol
    return accept
