"""The round-rule interface (mspec.rounds.rule, mspec.rounds.registry) for every rule of
ROUND_RULES, the per-position rule with several schemes among them, checked by enumeration on
tiny models: each law is a distribution and lossless over several rounds, ``expected_tokens``
is its mean length, ``verify`` draws from it (chi-square, with broken controls that fail),
and ``make_round_rule`` refuses what a rule cannot do, naming the argument.

Paper notation: the draft model p, the target q.
"""

import functools
import itertools

import numpy as np
import pytest
from round_cases import (
    assert_rows_hold_prefix,
    assert_valid_law,
    cached,
    lossless_cases,
    round_arrays,
    tempered,
    value,
)
from sampling import chi2_pvalue, memoized

from mspec.rounds import ROUND_RULES, RoundOutcome, RoundRule, make_round_rule
from mspec.rounds.optimum import next_tokens_law, target_tokens_law, tiny_lm_pair
from mspec.rounds import selected_block
from mspec.rounds.per_position import PerPositionRule
from mspec import registry

#: (rule, scheme, K): every rule of ROUND_RULES, the per-position rule with five schemes
RULES = [("per-position", scheme, 2) for scheme in ("specinfer", "spectr", "optimal", "canonical", "is-ratio")]
RULES += [("block", None, 1), ("traversal", None, 2), ("traversal", None, 3), ("selected-block", "optimal", 2)]


@pytest.fixture
def memo_schemes(monkeypatch):
    """Build each scheme once (:func:`sampling.memoized`): only speed."""
    make = memoized(registry.make_scheme)
    monkeypatch.setattr(registry, "make_scheme", make)
    monkeypatch.setattr(selected_block, "make_scheme", make)


def rule_id(case):
    name, scheme, k = case
    return f"{name}-{scheme}-K{k}" if scheme else f"{name}-K{k}"


def make(name, scheme, k, temperatures=1.0):
    return make_round_rule(name, scheme=scheme, num_drafts=k, draft_temperatures=temperatures)


def emitted_law(rule, draft_lms, target_lm, vocab, length, context):
    """``{w: A(w)}`` of one round after ``context``: every K-tuple of blocks enumerated, draft
    ``i`` drawn from ``draft_lms[i]`` (one model: i.i.d. drafts)."""
    out = {}
    blocks = list(itertools.product(range(vocab), repeat=length))
    for tup in itertools.product(blocks, repeat=rule.num_drafts):
        drafted, draft, target, weight = round_arrays(draft_lms, target_lm, context, tup)
        if weight > 0.0:
            for w, mass in rule.law(drafted, draft, target).items():
                out[w] = out.get(w, 0.0) + weight * mass
    return out


def lossless_error(law_at, target_lm, vocab, length):
    """Largest error of the law of the next ``L + 2`` tokens, over as many rounds as it takes,
    against the target's; ``law_at(context)`` is one round's ``{w: A(w)}``."""
    want = target_tokens_law(target_lm, vocab=vocab, count=length + 2)
    got = next_tokens_law(functools.lru_cache(maxsize=None)(law_at), length + 2)
    assert set(got) <= set(want)
    return max(abs(got.get(w, 0.0) - p) for w, p in want.items())


def test_the_registry_holds_every_rule():
    assert set(ROUND_RULES) == {"per-position", "block", "traversal", "selected-block"}
    assert {name for name, _, _ in RULES} == set(ROUND_RULES)
    for name, scheme, k in RULES:
        rule = make(name, scheme, k)
        assert isinstance(rule, ROUND_RULES[name]) and isinstance(rule, RoundRule)
        assert rule.name == name and rule.num_drafts == k
    assert isinstance(make("token", "specinfer", 2), PerPositionRule)  # the per-position rule's earlier name


# --- (a) the law: a distribution, lossless over several rounds ---------------------------------
@pytest.mark.parametrize("case", RULES, ids=rule_id)
def test_law_is_a_lossless_distribution(case, memo_schemes):
    name, scheme, k = case
    rule = make(name, scheme, k)
    for vocab, length, draft, target in lossless_cases(k)[:2]:
        law_at = functools.partial(emitted_law, rule, draft, target, vocab, length)
        assert_valid_law(law_at(()), vocab, length)
        assert lossless_error(law_at, target, vocab, length) < 1e-12


@pytest.mark.parametrize("name, scheme", [("per-position", "specinfer"), ("per-position", "optimal-lp"),
                                          ("traversal", None)])
def test_law_is_lossless_for_drafts_of_different_temperatures(name, scheme):
    vocab, length = 2, 2
    base, target = (cached(f) for f in tiny_lm_pair(vocab, seed=2))
    drafts = [cached(tempered(base, 1.0)), cached(tempered(base, 2.0))]
    rule = make(name, scheme, 2, temperatures=[1.0, 2.0])
    law_at = functools.partial(emitted_law, rule, drafts, target, vocab, length)
    assert_valid_law(law_at(()), vocab, length)
    assert lossless_error(law_at, target, vocab, length) < 1e-12


def test_a_wrong_law_is_not_lossless(memo_schemes):
    # The control moves 1% of one string's mass to another at the root: the enumeration sees it.
    vocab, length, draft, target = lossless_cases(2)[0]
    rule = make("per-position", "optimal", 2)

    def broken(context):
        law = emitted_law(rule, draft, target, vocab, length, context)
        if context == ():
            a, b = sorted(law, key=law.get)[-2:]
            law[a], law[b] = law[a] + 0.01, law[b] - 0.01
        return law

    assert lossless_error(broken, target, vocab, length) > 1e-3


# --- (b) expected_tokens is the law's mean length ------------------------------------------------
@pytest.mark.parametrize("case", RULES, ids=rule_id)
def test_expected_tokens_is_the_mean_length_of_the_law(case):
    name, scheme, k = case
    rule = make(name, scheme, k)
    vocab, length, draft, target = lossless_cases(k)[1]
    blocks = list(itertools.product(range(vocab), repeat=length))
    for tup in itertools.islice(itertools.product(blocks, repeat=k), 0, None, 3):
        drafted, d, t, _ = round_arrays(draft, target, (), tup)
        law = rule.law(drafted, d, t)
        assert rule.expected_tokens(drafted, d, t) == pytest.approx(value(law), abs=1e-12)
        eos = int(tup[-1][0])  # an end-of-sequence token ends the count after it
        capped = sum(m * next((i + 1 for i, y in enumerate(w[:-1]) if y == eos), len(w)) for w, m in law.items())
        assert rule.expected_tokens(drafted, d, t, eos_token_id=eos) == pytest.approx(capped, abs=1e-12)


# --- (c) verify draws from the law --------------------------------------------------------------------
def sampled_round(k):
    """A round whose drafts branch at the root and below it (V = 3, L = 2)."""
    draft, target = (cached(f) for f in tiny_lm_pair(3, seed=7, draft_temperature=1.3))
    blocks = [(1, 0), (1, 2), (0, 0)][:k]
    return round_arrays(draft, target, (), blocks)[:3]


@pytest.mark.parametrize("case", RULES, ids=rule_id)
def test_verify_follows_the_law_and_a_wrong_law_fails(case, memo_schemes):
    # Chi-square of 4000 verify draws against the exact law (p > 1e-3), and against a broken
    # control that moves 5% of the mass between two strings (p < 1e-6).
    name, scheme, k = case
    rule = make(name, scheme, k)
    drafted, d, t = sampled_round(k)
    law = rule.law(drafted, d, t)
    rng = np.random.default_rng(11)
    counts = {}
    for _ in range(4000):
        outcome = rule.verify(drafted, d, t, rng)
        assert_outcome(outcome, drafted)
        counts[outcome.tokens] = counts.get(outcome.tokens, 0) + 1
    assert set(counts) <= set(law)  # (nothing outside the law)
    keys = sorted(law)
    observed = np.array([counts.get(w, 0) for w in keys])
    expected = np.array([law[w] for w in keys])
    assert chi2_pvalue(observed, expected) > 1e-3
    wrong = expected.copy()
    top, other = np.argsort(expected)[-1], np.argsort(expected)[-2]
    wrong[top], wrong[other] = wrong[top] - 0.05, wrong[other] + 0.05
    assert chi2_pvalue(observed, wrong) < 1e-6


def assert_outcome(outcome, drafted):
    """What a decoder relies on: the count of kept tokens, the rows holding them, and how many
    drafts held the kept prefix at each position reached."""
    assert isinstance(outcome, RoundOutcome)
    assert outcome.accepted == len(outcome.tokens) - 1
    assert_rows_hold_prefix(drafted, list(outcome.tokens), list(outcome.rows))
    assert len(outcome.alive_counts) == min(outcome.accepted + 1, drafted.shape[1])
    assert outcome.alive_counts[0] == drafted.shape[0]
    assert all(a >= b >= 1 for a, b in zip(outcome.alive_counts, outcome.alive_counts[1:]))


# --- (d) errors that name the argument and the fix --------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(name="tree", num_drafts=2), "`verify` must be one of"),
    (dict(name="block", num_drafts=2), "pass num_drafts=1"),
    (dict(name="block", scheme="optimal", num_drafts=1), "scheme='optimal'"),
    (dict(name="traversal", scheme="specinfer", num_drafts=2), "without a token-level scheme"),
    (dict(name="traversal", scheme_params={"s": 2}, num_drafts=2), "scheme_params"),
    (dict(name="selected-block", scheme="specinfer", num_drafts=2), "selects with `scheme`"),
    (dict(name="selected-block", num_drafts=2, draft_temperatures=[1.0, 1.5]), "needs identical drafts"),
    (dict(name="selected-block", scheme_params={"s": 2}, num_drafts=2), "scheme_params"),
    (dict(name="per-position", num_drafts=2), "`scheme` must be one of"),
    (dict(name="per-position", scheme="nope", num_drafts=2), "`scheme` must be one of"),
    (dict(name="per-position", scheme="single", num_drafts=2), "pass num_drafts=1"),
    (dict(name="per-position", scheme="spectr", num_drafts=2, draft_temperatures=[1.0, 1.5]), "identical drafts"),
    (dict(name="traversal", num_drafts=2, draft_temperatures=[1.0, 1.5, 2.0]), "`draft_temperatures`"),
    (dict(name="traversal", num_drafts=0), "`num_drafts` must be an integer >= 1"),
])
def test_make_round_rule_errors_name_the_argument(kwargs, match):
    kwargs = dict(kwargs)
    with pytest.raises(ValueError, match=match):
        make_round_rule(kwargs.pop("name"), **kwargs)


def test_a_round_that_does_not_fit_the_rule_is_refused():
    drafted, d, t = sampled_round(3)
    rule = make("traversal", None, 2)
    with pytest.raises(ValueError, match="num_drafts=2"):
        rule.verify(drafted, d, t, np.random.default_rng(0))
    with pytest.raises(ValueError, match="target_probs"):
        make("traversal", None, 3).law(drafted, d, t[:, :-1])
