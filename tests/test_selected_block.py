"""Selected-block verification (mspec.rounds.selected_block), checked by enumeration on tiny models:
lossless over several rounds for each selection scheme, equal to block verification at K = 1
and to the per-position scheme at L = 1, between the per-position value and the round
optimum, hostile inputs, and its sampler against its exact law (with a broken control).

Paper notation: the draft model p, the target q.
"""

import functools
import itertools

import numpy as np
import pytest
from round_cases import (
    HOSTILE,
    assert_rows_hold_prefix,
    assert_valid_law,
    cached,
    hostile_models,
    lossless_cases,
    model_pairs,
    round_arrays,
    sample_blocks,
    value,
)
from sampling import chi2_pvalue

from mspec.rounds import selected_block as sb
from mspec.rounds.block import block_verification_law
from mspec.rounds.optimum import (
    context_free,
    next_tokens_law,
    per_position_value,
    round_optimum,
    target_tokens_law,
    tiny_lm_pair,
)
from mspec.rounds.selected_block import (
    SELECTION_SCHEMES,
    expected_selected_block_tokens,
    selected_block_law,
    selected_block_verify,
)


# --- helpers -------------------------------------------------------------------------------
@pytest.fixture
def memo_schemes(monkeypatch):
    """Build each (scheme, p, q, n) once, and each selection law ``(tokens, p, q)`` once: the
    enumerations and the samplers meet the same prefixes many times. Both are deterministic
    functions of their arguments, so this changes no result, only the time."""
    build, select, schemes, selections = sb.make_scheme, sb._selection, {}, {}

    def make(name, *, draft, target, num_drafts):
        key = (name, np.asarray(draft).tobytes(), np.asarray(target).tobytes(), num_drafts)
        if key not in schemes:
            schemes[key] = build(name, draft=draft, target=target, num_drafts=num_drafts)
        return schemes[key]

    def selection(tokens, draft, target, scheme):
        key = (np.asarray(tokens).tobytes(), np.asarray(draft).tobytes(), np.asarray(target).tobytes(), scheme)
        if key not in selections:
            selections[key] = select(tokens, draft, target, scheme)
        return selections[key]

    monkeypatch.setattr(sb, "make_scheme", make)
    monkeypatch.setattr(sb, "_selection", selection)


def emitted_law(draft_lm, target_lm, vocab, length, num_drafts, scheme, context):
    """``{w: A(w)}`` of one round after ``context``: every K-tuple of i.i.d. blocks enumerated."""
    out = {}
    blocks = list(itertools.product(range(vocab), repeat=length))
    for tup in itertools.product(blocks, repeat=num_drafts):
        drafted, draft, target, weight = round_arrays(draft_lm, target_lm, context, tup)
        if weight == 0.0:
            continue
        for w, mass in selected_block_law(drafted, draft, target, scheme=scheme).items():
            out[w] = out.get(w, 0.0) + weight * mass
    return out


def lossless_error(draft_lm, target_lm, vocab, length, num_drafts, scheme="optimal"):
    """Largest error of the law of the next ``L + 2`` tokens (over as many rounds as it takes)
    against the target's; returns ``(error, law of one round at the root)``."""
    emitted = functools.lru_cache(maxsize=None)(
        functools.partial(emitted_law, draft_lm, target_lm, vocab, length, num_drafts, scheme))
    want = target_tokens_law(target_lm, vocab=vocab, count=length + 2)
    got = next_tokens_law(emitted, length + 2)
    assert set(got) <= set(want)
    return max(abs(got.get(w, 0.0) - p) for w, p in want.items()), emitted(())


# --- (a) lossless ----------------------------------------------------------------------------
@pytest.mark.parametrize("num_drafts", [1, 2, 3, 4])
def test_lossless_with_the_optimal_selection(num_drafts, memo_schemes):
    # The next L + 2 tokens, over as many rounds as it takes, have the target's law (1e-12).
    for vocab, length, draft, target in lossless_cases(num_drafts):
        error, law = lossless_error(draft, target, vocab, length, num_drafts)
        assert error < 1e-12
        assert_valid_law(law, vocab, length)


@pytest.mark.parametrize("scheme", ["is-ratio", "canonical"])
@pytest.mark.parametrize("num_drafts", [2, 3])
def test_lossless_with_the_other_selections(scheme, num_drafts, memo_schemes):
    vocab, length = (3, 2) if num_drafts == 2 else (2, 2)
    for seed in (1, 4):
        draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=seed, draft_temperature=1.4))
        error, law = lossless_error(draft, target, vocab, length, num_drafts, scheme)
        assert error < 1e-12
        assert_valid_law(law, vocab, length)


# --- (b) special cases -------------------------------------------------------------------------
def test_one_draft_is_block_verification_exactly():
    # K = 1: nothing to select (mu = p), the same law as block verification to 1e-15.
    for vocab, length, draft, target in model_pairs():
        for block in itertools.product(range(vocab), repeat=length):
            drafted, d, t, _ = round_arrays(draft, target, (), [block])
            want = {block[:k] + (y,): m for (k, y), m in block_verification_law(block, d[0], t[0]).items()}
            for scheme in SELECTION_SCHEMES:
                got = selected_block_law(drafted, d, t, scheme=scheme)
                for w in set(want) | set(got):
                    assert abs(got.get(w, 0.0) - want.get(w, 0.0)) < 1e-15


def test_sun_et_al_example():
    # Draft (2/3, 1/3), target (1/3, 2/3), L = 2, K = 1: 1 + 11/9 tokens per round.
    draft, target = context_free([2 / 3, 1 / 3]), context_free([1 / 3, 2 / 3])
    assert value(emitted_law(draft, target, 2, 2, 1, "optimal", ())) == pytest.approx(1 + 11 / 9, abs=1e-12)


@pytest.mark.parametrize("scheme", SELECTION_SCHEMES)
def test_blocks_of_one_token_are_the_selection_scheme(scheme, memo_schemes):
    # L = 1: select with p_I, accept with min(1, q / p_I), else the residual: the scheme's
    # own per-position value, exactly.
    for seed in range(3):
        for vocab, k in [(2, 2), (3, 2), (3, 3), (4, 2)]:
            draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=seed, draft_temperature=1.7))
            got = value(emitted_law(draft, target, vocab, 1, k, scheme, ()))
            want = per_position_value(draft, target, scheme=scheme, vocab=vocab, num_drafts=k, draft_length=1)
            assert got == pytest.approx(want, abs=1e-12)


def test_optimal_value_by_hand():
    # V = 2, p = (1/2, 1/2), q = (1, 0), K = 2, L = 1: the optimal selection picks a 0 when
    # one was drafted, p_I = (3/4, 1/4), accepted w.p. min(1, q / p_I): value 1 + 3/4.
    got = value(emitted_law(context_free([0.5, 0.5]), context_free([1.0, 0.0]), 2, 1, 2, "optimal", ()))
    assert got == pytest.approx(1.75, abs=1e-12)


@pytest.mark.parametrize("num_drafts", [2, 3])
def test_between_the_per_position_value_and_the_round_optimum(num_drafts, memo_schemes):
    # L >= 2: block verification of the selected block keeps at least what the per-position
    # optimal scheme keeps, and no lossless rule beats the round optimum.
    for vocab, length, draft, target in model_pairs():
        if num_drafts == 3 and (vocab, length) != (2, 2):
            continue
        got = value(emitted_law(draft, target, vocab, length, num_drafts, "optimal", ()))
        low = per_position_value(draft, target, scheme="optimal", vocab=vocab, num_drafts=num_drafts,
                                 draft_length=length)
        best = round_optimum(draft, target, vocab=vocab, num_drafts=num_drafts, draft_length=length).value
        assert low - 1e-12 <= got <= best + 1e-9


# --- (c) the exact scorer ------------------------------------------------------------------------
def test_expected_tokens_is_the_mean_length_of_the_law(memo_schemes):
    for vocab, length, draft, target in model_pairs():
        blocks = list(itertools.product(range(vocab), repeat=length))
        for tup in itertools.islice(itertools.product(blocks, repeat=2), 0, None, 3):
            drafted, d, t, _ = round_arrays(draft, target, (), tup)
            for scheme in SELECTION_SCHEMES:
                law = selected_block_law(drafted, d, t, scheme=scheme)
                got = expected_selected_block_tokens(drafted, d, t, scheme=scheme)
                assert got == pytest.approx(value(law), abs=1e-12)
                eos = int(tup[1][0])
                capped = sum(m * next((i + 1 for i, y in enumerate(w[:-1]) if y == eos), len(w))
                             for w, m in law.items())
                got = expected_selected_block_tokens(drafted, d, t, scheme=scheme, eos_token_id=eos)
                assert got == pytest.approx(capped, abs=1e-12)


def test_eos_caps_the_count():
    # draft = target, one drafted block (1, 0, 2): it is kept whole (L + 1 = 4 tokens); an
    # EOS at its position 2 caps the count at 2, at position 1 at 1, at position 3 at 3.
    lm = context_free([0.2, 0.3, 0.5])
    drafted, d, t, _ = round_arrays(lm, lm, (), [(1, 0, 2)])
    assert expected_selected_block_tokens(drafted, d, t) == pytest.approx(4.0, abs=1e-15)
    assert expected_selected_block_tokens(drafted, d, t, eos_token_id=0) == pytest.approx(2.0, abs=1e-15)
    assert expected_selected_block_tokens(drafted, d, t, eos_token_id=[2, 1]) == pytest.approx(1.0, abs=1e-15)
    assert expected_selected_block_tokens(drafted, d, t, eos_token_id=2) == pytest.approx(3.0, abs=1e-15)


# --- (d) hostile inputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_models_stay_lossless(case, memo_schemes):
    vocab, length = 3, 2
    draft, target = (cached(f) for f in hostile_models(case, vocab))
    error, law = lossless_error(draft, target, vocab, length, 2)
    assert error < 1e-12
    assert_valid_law(law, vocab, length)
    if case == "draft = target":
        assert all(len(w) == length + 1 for w in law)  # every block kept whole


@pytest.mark.parametrize("case", HOSTILE)
def test_sixteen_drafts(case, memo_schemes):
    # K = 16, V = 3, L = 2: too many tuples to enumerate; the exact law of sampled tuples is
    # a distribution on valid strings, its mean length the scorer's, and the sampler runs.
    vocab, length, k = 3, 2, 16
    draft, target = (cached(f) for f in hostile_models(case, vocab))
    rng = np.random.default_rng(16)
    for _ in range(3):
        blocks = sample_blocks(rng, draft, vocab, length, k)
        drafted, d, t, _ = round_arrays(draft, target, (), blocks)
        law = selected_block_law(drafted, d, t)
        assert_valid_law(law, vocab, length)
        assert expected_selected_block_tokens(drafted, d, t) == pytest.approx(value(law), abs=1e-12)
        for _ in range(10):
            emitted, rows = selected_block_verify(drafted, d, t, rng)
            assert tuple(emitted) in law
            assert_rows_hold_prefix(drafted, emitted, rows)


@pytest.mark.parametrize("scheme", SELECTION_SCHEMES)
def test_all_drafts_identical(scheme):
    # The same block drafted K times: it is selected surely, verified against the induced
    # laws of K drafts; the law is a distribution over its prefixes.
    vocab, length = 3, 2
    draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=1, draft_temperature=1.6))
    for k in (2, 5):
        drafted, d, t, _ = round_arrays(draft, target, (), [(1, 2)] * k)
        law = selected_block_law(drafted, d, t, scheme=scheme)
        assert_valid_law(law, vocab, length)
        assert all(w[:-1] == (1, 2)[:len(w) - 1] for w in law)
        rng = np.random.default_rng(k)
        for _ in range(5):
            emitted, rows = selected_block_verify(drafted, d, t, rng, scheme=scheme)
            assert tuple(emitted) in law
            assert_rows_hold_prefix(drafted, emitted, rows)


def test_unknown_scheme_is_refused():
    lm = context_free([0.5, 0.5])
    drafted, d, t, _ = round_arrays(lm, lm, (), [(0, 1), (1, 1)])
    with pytest.raises(ValueError, match="scheme"):
        selected_block_law(drafted, d, t, scheme="specinfer")  # (no induced law)


# --- (e) sampler against the law, and a broken control ------------------------------------------------
@pytest.mark.parametrize("scheme", SELECTION_SCHEMES)
def test_sampler_follows_the_exact_law(scheme, memo_schemes):
    # Chi-square of 20k selected_block_verify draws against selected_block_law for one
    # drafted tuple whose drafts branch at the root and below it.
    vocab = 3
    draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=7, draft_temperature=1.3))
    drafted, d, t, _ = round_arrays(draft, target, (), [(1, 0, 2), (1, 2, 0), (0, 0, 1)])
    law = selected_block_law(drafted, d, t, scheme=scheme)
    rng = np.random.default_rng(11)
    counts = {}
    for _ in range(20000):
        emitted, rows = selected_block_verify(drafted, d, t, rng, scheme=scheme)
        assert_rows_hold_prefix(drafted, emitted, rows)
        counts[tuple(emitted)] = counts.get(tuple(emitted), 0) + 1
    assert set(counts) <= set(law)  # (nothing outside the law)
    keys = sorted(law)
    assert chi2_pvalue(np.array([counts.get(k, 0) for k in keys]), np.array([law[k] for k in keys])) > 1e-3


def test_broken_control_verified_with_the_draft_law_fails(monkeypatch, memo_schemes):
    # The control verifies the selected block with p in place of mu (the law of the selected
    # token): the selection biases the block, and the enumeration sees it (error > 1e-3),
    # while the true rule on the same models is exact.
    vocab, length = 3, 2
    draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=7, draft_temperature=1.3))
    assert lossless_error(draft, target, vocab, length, 2)[0] < 1e-12
    selection = sb._selection

    def broken(tokens, draft, target, scheme):
        return selection(tokens, draft, target, scheme)[0], draft

    monkeypatch.setattr(sb, "_selection", broken)
    assert lossless_error(draft, target, vocab, length, 2)[0] > 1e-3


# --- (f) what the sampler returns --------------------------------------------------------------------
def test_sampler_returns_valid_tokens_and_the_rows_holding_the_prefix(memo_schemes):
    for vocab, length, draft, target in model_pairs():
        rng = np.random.default_rng(vocab * 10 + length)
        blocks = list(itertools.product(range(vocab), repeat=length))
        for tup in itertools.islice(itertools.product(blocks, repeat=3), 0, None, 7):
            drafted, d, t, _ = round_arrays(draft, target, (), tup)
            law = selected_block_law(drafted, d, t)
            for _ in range(3):
                emitted, rows = selected_block_verify(drafted, d, t, rng)
                assert all(isinstance(y, int) and 0 <= y < vocab for y in emitted)
                assert tuple(emitted) in law
                assert_rows_hold_prefix(drafted, emitted, rows)
