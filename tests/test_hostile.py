"""Every scheme on hostile but valid inputs: what a real decoder produces.

The case families are :func:`strategies.hostile_pair` (top-k/top-p truncation down to one
token, temperatures 0.01 to 5, wide logits, 1e-300 and subnormal entries, zeros on one
side, ratio ties, draft == target). For every scheme:

(a) the exact output law by enumeration equals the target (1e-12);
(b) the acceptance equals an independent value (closed form, LP, enumeration) and never
    exceeds the optimum;
(c) a seeded chi-square on samples passes, and fails for a deliberately broken control;
(d) a decoding-like stream at V = 50272: hundreds of positions in a row with fresh
    truncated/tempered distributions, no exception, and a Kolmogorov-Smirnov test of the
    outputs' randomised probability integral transform (uniform iff each output ~ q).

Every scheme also passes the guards of :class:`mspec.schemes.selection.SelectionScheme`: a token
outside ``[0, V)`` or with ``q = 0``, a NaN acceptance or a non-normalised law raises.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from scipy.stats import kstest
from strategies import HOSTILE_FAMILIES, hostile_cases, hostile_pair

from mspec.schemes.canonical import CanonicalScheme
from mspec.schemes.closed_form import optimal_acceptance
from mspec.distributions import distribution_from_logits
from mspec.schemes.exact import output_distribution
from mspec.registry import make_scheme
from sampling import chi2_pvalue, expected_accept_probability, sample_counts

#: scheme name -> (identical drafts only, small V only, extra params)
SCHEMES = {
    "single": (False, False, {}),
    "specinfer": (False, False, {}),
    "spectr": (True, False, {}),
    "optimal": (True, False, {}),
    "optimal-tokens": (True, False, {"atoms": "tokens"}),
    "optimal-buckets": (True, False, {"atoms": "buckets"}),
    "optimal-greedy": (True, False, {"atoms": "tokens", "tiling": "greedy"}),
    "optimal-lp": (False, True, {}),
    "canonical": (False, True, {}),
    "is-ratio": (False, False, {}),
    "is": (False, False, {}),
}
#: schemes whose acceptance is the optimum (identical drafts)
OPTIMAL = {"optimal", "optimal-tokens", "optimal-buckets", "optimal-greedy", "optimal-lp", "canonical"}
LAW_ATOL = 1e-12


def build(name, draft, target, k):
    """The scheme ``name`` for one position (``single`` takes the first draft row only)."""
    _, _, params = SCHEMES[name]
    if name == "single":
        return make_scheme("single", draft=draft if np.ndim(draft) == 1 else draft[0], target=target, num_drafts=1)
    if name == "canonical":
        return CanonicalScheme(draft=draft, target=target, num_drafts=k)
    base = name.split("-")[0] if name.startswith("optimal-") and name != "optimal-lp" else name
    return make_scheme(base, draft=draft, target=target, num_drafts=k, **params)


def applicable(name, draft, k):
    identical_only, small_only, _ = SCHEMES[name]
    if identical_only and np.ndim(draft) == 2:
        return False
    vocab = np.shape(draft)[-1]
    return not small_only or vocab ** (k + 1) <= 20_000


# --- (a) + (b): the exact law and the acceptance, by enumeration ----------------------------
@pytest.mark.parametrize("name", sorted(SCHEMES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=hostile_cases(max_vocab=5, max_drafts=3, identical=None))
def test_exact_law_and_acceptance_on_hostile_inputs(name, case):
    draft, target, k, family = case
    if applicable(name, draft, k):
        check_exact(name, draft, target, k, family)


@pytest.mark.parametrize("name", ["single", "specinfer", "spectr", "is-ratio", "is"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=hostile_cases(max_vocab=8, max_drafts=4, identical=None))
def test_exact_law_on_larger_hostile_inputs(name, case):
    """The schemes with a cheap conditional law, on up to V^K = 4096 draft tuples."""
    draft, target, k, family = case
    if applicable(name, draft, k):
        check_exact(name, draft, target, k, family)


def check_exact(name, draft, target, k, family):
    """(a) and (b) for one case."""
    rule = build(name, draft, target, k)
    dist, accept = output_distribution(rule)
    assert np.max(np.abs(dist - target)) <= LAW_ATOL, (family, np.max(np.abs(dist - target)))
    acceptance = rule.acceptance()
    check_acceptance(name, rule, acceptance, accept)


def check_acceptance(name, rule, acceptance, enumerated):
    """(b): the scheme's acceptance against independent values."""
    assert 0.0 <= acceptance <= 1.0
    if name in ("is-ratio", "is"):  # the two-step acceptance: a lower bound on P(Y in drafts)
        assert acceptance <= enumerated + 1e-12
        assert abs(acceptance - expected_accept_probability(rule)) <= 1e-12
    else:
        assert abs(acceptance - enumerated) <= (1e-8 if name in ("optimal-lp", "canonical") else 1e-12)
    if rule.identical:
        best = optimal_acceptance(draft=rule.draft, target=rule.target, num_drafts=rule.num_drafts)
        assert enumerated <= best + 1e-9  # no lossless scheme beats the optimum
        if name in OPTIMAL:
            assert abs(acceptance - best) <= 1e-9
    if name == "single":
        assert abs(acceptance - np.minimum(rule.draft, rule.target).sum()) <= 1e-15


# enumerating up to 4^16 tuples takes seconds, knowingly: no SlowSchemeWarning for it
@pytest.mark.filterwarnings("ignore::mspec.SlowSchemeWarning")
@pytest.mark.parametrize(("name", "k"), [(name, k) for name in ("specinfer", "spectr") for k in (8, 12, 16)]
                         + [(name, k) for name in ("optimal", "optimal-tokens", "is-ratio", "is") for k in (6, 10)])
def test_exact_law_with_many_drafts(name, k):
    """Up to K = 16 at V = 2: 2^K draft tuples, so K = 16 on a few families only, and the
    slower conditionals stop at K = 10 (K = 16 is checked at large V below)."""
    rng = np.random.default_rng(k)
    families = ("truncated", "tiny") if k > 12 else HOSTILE_FAMILIES
    for family in families:
        for vocab in (1, 2):
            draft, target = hostile_pair(rng, vocab=vocab, family=family, num_drafts=k)
            rule = build(name, draft, target, k)
            dist, accept = output_distribution(rule)
            assert np.max(np.abs(dist - target)) <= LAW_ATOL, family
            check_acceptance(name, rule, rule.acceptance(), accept)


# --- every size where a path changes, up to V = 262144 ---------------------------------------
@pytest.mark.parametrize("vocab", [4095, 4096, 4097, 50272])
@pytest.mark.parametrize("name", ["single", "specinfer", "spectr", "optimal", "is-ratio", "is"])
def test_path_sizes_give_valid_results(vocab, name):
    rng = np.random.default_rng(vocab)
    for family in HOSTILE_FAMILIES:
        k = int(rng.choice([1, 2, 4, 8, 16])) if name != "single" else 1
        draft, target = hostile_pair(rng, vocab=vocab, family=family, num_drafts=k)
        check_large(name, draft, target, k, rng, family)


@pytest.mark.parametrize("name", ["specinfer", "spectr", "optimal", "is-ratio", "is"])
def test_largest_vocabulary(name):
    rng = np.random.default_rng(262144)
    for family in ("lm", "truncated", "one-hot"):
        draft, target = hostile_pair(rng, vocab=262144, family=family, num_drafts=4)
        check_large(name, draft, target, 4, rng, family)


def check_large(name, draft, target, k, rng, family):
    rule = build(name, draft, target, k)
    acceptance = rule.acceptance()
    best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
    assert acceptance <= best + 1e-9, family
    if name in OPTIMAL:
        assert abs(acceptance - best) <= 1e-9, family
    drafts = rng.choice(target.size, size=(20, k), p=draft)
    for tokens in drafts:  # the guards raise on a token outside [0, V) or with q = 0
        rule.sample(tokens, rng)


# --- (c): seeded chi-square, and a broken control that fails ---------------------------------
class FirstDraft:
    """Broken control: outputs the first draft, never rejecting (its law is p, not q)."""

    def __init__(self, rule):
        self.rule = rule
        self.vocab_size, self.num_drafts, self.draft_row = rule.vocab_size, rule.num_drafts, rule.draft_row

    def sample(self, tokens, rng):
        return self.rule.selection(np.asarray(tokens), int(tokens[0]))


def chi2_case(name):
    """A seeded hostile case (V = 6, K = 3) whose draft is far from its target."""
    rng = np.random.default_rng(7)
    while True:
        family = str(rng.choice(["lm", "truncated", "tiny", "ties", "zeros-target"]))
        identical = SCHEMES[name][0] or rng.random() < 0.5
        draft, target = hostile_pair(rng, vocab=6, family=family, num_drafts=3, identical=identical)
        rows = np.atleast_2d(draft)
        if 0.5 * np.abs(rows[0] - target).sum() > 0.25 and (rows[0][target == 0] > 0.05).any():
            return draft, target, (1 if name == "single" else 3)


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_chi_square_and_broken_control(name):
    draft, target, k = chi2_case(name)
    rule = build(name, draft, target, k)
    assert chi2_pvalue(sample_counts(rule, 4000, seed=1), target) > 1e-4
    counts = sample_counts(FirstDraft(rule), 4000, seed=1)
    with pytest.raises(AssertionError):  # outputs a token the target rules out
        chi2_pvalue(counts, target)


# --- (d): a decoding-like stream at V = 50272 -------------------------------------------------
def stream(rng, positions, vocab=50272):
    """Fresh (draft, target, K) per position, as a decoder with sampling options sees them."""
    logits = rng.normal(size=vocab) * 3.0
    for _ in range(positions):
        logits = 0.7 * logits + 0.3 * rng.normal(size=vocab) * float(rng.choice([2.0, 4.0, 8.0]))
        t_target = float(np.exp(rng.uniform(np.log(0.01), np.log(5.0))))
        t_draft = float(np.exp(rng.uniform(np.log(0.3), np.log(5.0))))
        opts = {}
        if rng.random() < 0.4:
            opts["top_p"] = float(rng.choice([1e-6, 0.5, 0.9, 0.95]))
        if rng.random() < 0.3:
            opts["top_k"] = int(rng.choice([1, 5, 50, 1000]))
        target = distribution_from_logits(logits, temperature=t_target, **opts)
        noisy = logits + rng.normal(size=vocab)
        draft = distribution_from_logits(noisy, temperature=t_draft, **(opts if rng.random() < 0.3 else {}))
        yield draft, target, int(rng.choice([1, 2, 4, 8, 16]))


def pit(target, y, rng):
    """Randomised probability integral transform: uniform on [0, 1] iff y ~ target."""
    below = float(target[:y].sum())
    return below + rng.random() * float(target[y])


@pytest.mark.parametrize("name", ["spectr", "optimal", "specinfer", "is-ratio", "is"])
def test_decoding_stream(name):
    rng = np.random.default_rng({"spectr": 1, "optimal": 2, "specinfer": 3, "is-ratio": 4, "is": 5}[name])
    good, broken = [], []
    for draft, target, k in stream(rng, 300):
        rule = build(name, draft, target, k)
        tokens = rng.choice(target.size, size=k, p=draft)
        good.append(pit(target, rule.sample(tokens, rng).token, rng))
        broken.append(pit(target, int(tokens[0]), rng))
    assert kstest(good, "uniform").pvalue > 1e-3
    assert kstest(broken, "uniform").pvalue < 1e-6  # the control: the first draft, unverified


# --- the guards: a scheme can never answer silently wrong ------------------------------------
def test_guards_raise_instead_of_a_wrong_answer():
    from mspec.schemes.selection import SchemeError
    from mspec.schemes.specinfer import SpecInfer

    class Broken(SpecInfer):
        def __init__(self, *, mode, **kw):
            super().__init__(**kw)
            self.mode = mode

        def _acceptance(self):
            return float("nan") if self.mode == "nan" else super()._acceptance()

        def _conditional(self, tokens):
            dist = super()._conditional(tokens)
            return dist * 1.01 if self.mode == "sum" else dist

        def _sample(self, tokens, rng):
            return {"outside": self.vocab_size, "zero": 2}.get(self.mode, super()._sample(tokens, rng))

    kw = dict(draft=[0.4, 0.3, 0.3], target=[0.5, 0.5, 0.0], num_drafts=2)
    rng = np.random.default_rng(0)
    with pytest.raises(SchemeError, match="acceptance of nan"):
        Broken(mode="nan", **kw).acceptance()
    with pytest.raises(SchemeError, match="conditional law"):
        Broken(mode="sum", **kw).conditional([0, 1])
    with pytest.raises(SchemeError, match="token id 3"):
        Broken(mode="outside", **kw).sample([0, 1], rng)
    with pytest.raises(SchemeError, match="token id 2"):  # the target rules token 2 out
        Broken(mode="zero", **kw).sample([0, 1], rng)
    fine = Broken(mode="none", **kw)
    assert fine.sample([2, 2], rng).token in (0, 1) and 0 <= fine.acceptance() <= 1
