"""Traversal verification of K drafted blocks (mspec.rounds.traversal), checked by
enumeration on tiny models: lossless over several rounds, equal to block verification at
K = 1 and to SpecInfer at L = 1, never above the round optimum, hostile inputs, and its
sampler against its exact law (with a broken control that must fail).

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
    tempered,
    value,
)
from sampling import chi2_pvalue

from mspec.rounds import traversal as tv
from mspec.rounds.block import block_verification_law
from mspec.rounds.optimum import (
    context_free,
    next_tokens_law,
    per_position_value,
    round_optimum,
    target_tokens_law,
    tiny_lm_pair,
)
from mspec.rounds.traversal import (
    expected_traversal_tokens,
    traversal_verification_law,
    traversal_verify,
)


# --- helpers -------------------------------------------------------------------------------


def emitted_law(draft_lms, target_lm, vocab, length, context, law_of=traversal_verification_law):
    """``{w: A(w)}`` of one round after ``context``: every K-tuple of blocks enumerated,
    weighted by the product of each block's probability under its own draft model."""
    out = {}
    blocks = list(itertools.product(range(vocab), repeat=length))
    for tup in itertools.product(blocks, repeat=len(draft_lms)):
        drafted, draft, target, weight = round_arrays(draft_lms, target_lm, context, tup)
        if weight == 0.0:
            continue
        for w, mass in law_of(drafted, draft, target).items():
            out[w] = out.get(w, 0.0) + weight * mass
    return out


def lossless_error(draft_lms, target_lm, vocab, length, law_of=traversal_verification_law):
    """Largest error of the law of the next ``L + 2`` tokens (over as many rounds as it takes)
    against the target's; returns ``(error, law of one round at the root)``."""
    emitted = functools.lru_cache(maxsize=None)(
        functools.partial(emitted_law, draft_lms, target_lm, vocab, length, law_of=law_of))
    want = target_tokens_law(target_lm, vocab=vocab, count=length + 2)
    got = next_tokens_law(emitted, length + 2)
    assert set(got) <= set(want)  # (only token strings of the right length)
    return max(abs(got.get(w, 0.0) - p) for w, p in want.items()), emitted(())


# --- (a) lossless ----------------------------------------------------------------------------
@pytest.mark.parametrize("num_drafts", [1, 2, 3, 4])
def test_lossless_with_identical_drafts(num_drafts):
    # The next L + 2 tokens, over as many rounds as it takes, have the target's law (1e-12)
    # for K i.i.d. drafted blocks (V^(L K) tuples enumerated per context).
    for vocab, length, draft, target in lossless_cases(num_drafts):
        error, law = lossless_error((draft,) * num_drafts, target, vocab, length)
        assert error < 1e-12
        assert_valid_law(law, vocab, length)


@pytest.mark.parametrize("temperatures", [(0.7, 1.8), (1.8, 0.7), (0.6, 1.3, 2.5)])
def test_lossless_with_non_identical_drafts(temperatures):
    # Each draft drawn from its own model (the same logits at other temperatures): still the
    # target's law, each draw verified against its own p_i.
    vocab, length = (3, 2) if len(temperatures) == 2 else (2, 2)
    for seed in (1, 4):
        drafts = tuple(cached(tiny_lm_pair(vocab, seed=seed, draft_temperature=t)[0]) for t in temperatures)
        target = cached(tiny_lm_pair(vocab, seed=seed)[1])
        assert drafts[0]((0,)) != pytest.approx(drafts[1]((0,)))  # (really different drafts)
        error, law = lossless_error(drafts, target, vocab, length)
        assert error < 1e-12
        assert_valid_law(law, vocab, length)


def test_lossless_with_one_draft_the_target_itself():
    # Non-identical drafts, draft 1 drawn from the target itself: lossless, and draft 1's
    # block is always kept whole (its weights stay 1: min(1, 1 q / q) at every depth),
    # whatever draft 2 holds.
    vocab, length = 3, 2
    draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=2, draft_temperature=2.0))
    error, _ = lossless_error((target, draft), target, vocab, length)
    assert error < 1e-12
    for blocks in [[(0, 1), (2, 2)], [(1, 1), (1, 0)], [(2, 0), (2, 0)]]:
        drafted, d, t, _ = round_arrays((target, draft), target, (), blocks)
        assert {w[:length] for w in traversal_verification_law(drafted, d, t)} == {blocks[0]}


def test_law_of_every_drafted_tuple_is_a_distribution():
    # Given the drafted tuple the round's law sums to 1 (not only on average over tuples: a
    # child subtree entered with weight w is kept with probability w only on average over the
    # draws below it), and its mean length is at most L + 1.
    for vocab, length, draft, target in model_pairs():
        drafts = (draft, cached(tempered(draft, 1.7)), draft)
        blocks = list(itertools.product(range(vocab), repeat=length))
        for tup in itertools.islice(itertools.product(blocks, repeat=3), 0, None, 2):
            drafted, d, t, _ = round_arrays(drafts, target, (), tup)
            law = traversal_verification_law(drafted, d, t)
            assert_valid_law(law, vocab, length)
            assert all(w[:-1] in {b[:len(w) - 1] for b in tup} for w in law)  # kept = drafted


# --- (b) special cases -------------------------------------------------------------------------
def test_one_draft_is_block_verification_exactly():
    # K = 1: the same law as block verification (Sun et al.) to 1e-15, block by block.
    for vocab, length, draft, target in model_pairs():
        for block in itertools.product(range(vocab), repeat=length):
            drafted, d, t, _ = round_arrays((draft,), target, (), [block])
            want = {block[:k] + (y,): m for (k, y), m in block_verification_law(block, d[0], t[0]).items()}
            got = traversal_verification_law(drafted, d, t)
            for w in set(want) | set(got):
                assert abs(got.get(w, 0.0) - want.get(w, 0.0)) < 1e-15


def test_sun_et_al_example():
    # Draft (2/3, 1/3), target (1/3, 2/3), L = 2, K = 1: 1 + 11/9 tokens per round (block
    # verification's value; token by token gets 1 + 2/3 + 4/9 = 19/9).
    draft, target = context_free([2 / 3, 1 / 3]), context_free([1 / 3, 2 / 3])
    assert value(emitted_law((draft,), target, 2, 2, ())) == pytest.approx(1 + 11 / 9, abs=1e-12)


@pytest.mark.parametrize("num_drafts", [2, 3])
def test_blocks_of_one_token_are_specinfer(num_drafts):
    # L = 1: recursive rejection sampling with replacement, SpecInfer's exact value.
    for seed in range(4):
        for vocab in (2, 3, 4):
            draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=seed, draft_temperature=1.7))
            got = value(emitted_law((draft,) * num_drafts, target, vocab, 1, ()))
            want = per_position_value(draft, target, scheme="specinfer", vocab=vocab, num_drafts=num_drafts,
                                      draft_length=1)
            assert got == pytest.approx(want, abs=1e-12)


def test_specinfer_value_by_hand():
    # V = 2, p = (1/2, 1/2), q = (1, 0), K = 2, L = 1: a drafted 0 is kept; a drafted 1 is
    # rejected and the residual is (1, 0). Value 1 + P(some draft is 0) = 1 + 3/4.
    got = value(emitted_law((context_free([0.5, 0.5]),) * 2, context_free([1.0, 0.0]), 2, 1, ()))
    assert got == pytest.approx(1.75, abs=1e-15)


@pytest.mark.parametrize("num_drafts", [1, 2, 3])
def test_never_above_the_round_optimum(num_drafts):
    # The round optimum (the LP of mspec.rounds.optimum) bounds every lossless rule; at K = 1 traversal
    # attains it (block verification is optimal for one draft).
    for vocab, length, draft, target in model_pairs():
        if (vocab, length) != (2, 2) and num_drafts == 3:
            continue
        got = value(emitted_law((draft,) * num_drafts, target, vocab, length, ()))
        best = round_optimum(draft, target, vocab=vocab, num_drafts=num_drafts, draft_length=length).value
        assert got <= best + 1e-9
        if num_drafts == 1:
            assert got == pytest.approx(best, abs=1e-9)
        else:  # more drafts never hurt, and beat token-by-token SpecInfer on the same trees
            assert got >= value(emitted_law((draft,), target, vocab, length, ())) - 1e-12
            assert got >= per_position_value(draft, target, scheme="specinfer", vocab=vocab,
                                             num_drafts=num_drafts, draft_length=length) - 1e-12


# --- (c) the exact scorer ------------------------------------------------------------------------
def test_expected_tokens_is_the_mean_length_of_the_law():
    for vocab, length, draft, target in model_pairs():
        blocks = list(itertools.product(range(vocab), repeat=length))
        for tup in itertools.islice(itertools.product(blocks, repeat=2), 0, None, 3):
            drafted, d, t, _ = round_arrays((draft, draft), target, (), tup)
            law = traversal_verification_law(drafted, d, t)
            assert expected_traversal_tokens(drafted, d, t) == pytest.approx(value(law), abs=1e-14)
            eos = int(tup[0][0])
            capped = sum(m * next((i + 1 for i, y in enumerate(w[:-1]) if y == eos), len(w))
                         for w, m in law.items())
            assert expected_traversal_tokens(drafted, d, t, eos_token_id=eos) == pytest.approx(capped, abs=1e-14)


def test_eos_caps_the_count():
    # draft = target: every block is kept whole (L + 1 = 4 tokens); an EOS at position 2 of
    # the block caps the count at 2, an EOS only in the bonus token does not.
    vocab = 3
    lm = context_free([0.2, 0.3, 0.5])
    drafted, d, t, _ = round_arrays((lm, lm), lm, (), [(1, 0, 2), (1, 2, 2)])
    assert expected_traversal_tokens(drafted, d, t) == pytest.approx(4.0, abs=1e-15)
    assert expected_traversal_tokens(drafted, d, t, eos_token_id=0) == pytest.approx(2.0, abs=1e-15)
    assert expected_traversal_tokens(drafted, d, t, eos_token_id=[1, 0]) == pytest.approx(1.0, abs=1e-15)
    # draft 1 (1, 0, 2) is kept: the first draw at the root opens the subtree visited first
    law = traversal_verification_law(drafted, d, t)
    assert {w[:3] for w in law} == {(1, 0, 2)}
    assert len(law) == vocab


# --- (d) hostile inputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_models_stay_lossless(case):
    vocab, length = 3, 2
    draft, target = (cached(f) for f in hostile_models(case, vocab))
    for drafts in [(draft, draft), (draft, cached(tempered(draft, 2.0)))]:
        error, law = lossless_error(drafts, target, vocab, length)
        assert error < 1e-12
        assert_valid_law(law, vocab, length)
        if case == "draft = target" and drafts[1] is draft:
            assert all(len(w) == length + 1 for w in law)  # every block kept whole


@pytest.mark.parametrize("case", HOSTILE)
def test_sixteen_drafts(case):
    # K = 16, V = 3, L = 2: too many tuples to enumerate; the exact law of sampled tuples is
    # a distribution on valid strings, its mean length the scorer's, and the sampler runs.
    vocab, length, k = 3, 2, 16
    draft, target = (cached(f) for f in hostile_models(case, vocab))
    rng = np.random.default_rng(16)
    for _ in range(5):
        blocks = sample_blocks(rng, draft, vocab, length, k)
        drafted, d, t, _ = round_arrays((draft,) * k, target, (), blocks)
        law = traversal_verification_law(drafted, d, t)
        assert_valid_law(law, vocab, length)
        assert expected_traversal_tokens(drafted, d, t) == pytest.approx(value(law), abs=1e-12)
        for _ in range(20):
            emitted, rows = traversal_verify(drafted, d, t, rng)
            assert tuple(emitted) in law
            assert_rows_hold_prefix(drafted, emitted, rows)


def test_all_drafts_identical():
    # The same block drafted K times: below the root the repeats are rejected draws that only
    # update the weights (their child was already tried), so the whole block is kept exactly
    # as for K = 1, while the shorter prefixes lose mass to the updates; the law is still a
    # distribution. (Seed 1, block (1, 2): P(emit 2 tokens) = 0.594 at K = 1, 0.541 at K = 2.)
    vocab, length = 3, 2
    draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=1, draft_temperature=1.6))
    block = (1, 2)
    one = traversal_verification_law(*round_arrays((draft,), target, (), [block])[:3])
    whole = {w: m for w, m in one.items() if len(w) == length + 1}
    two_tokens = [sum(m for w, m in one.items() if len(w) == 2)]
    for k in (2, 5, 16):
        drafted, d, t, _ = round_arrays((draft,) * k, target, (), [block] * k)
        law = traversal_verification_law(drafted, d, t)
        assert_valid_law(law, vocab, length)
        assert {w: m for w, m in law.items() if len(w) == length + 1} == pytest.approx(whole, abs=1e-15)
        two_tokens.append(sum(m for w, m in law.items() if len(w) == 2))
        rng = np.random.default_rng(k)
        for _ in range(50):
            emitted, rows = traversal_verify(drafted, d, t, rng)
            assert tuple(emitted) in law
            assert_rows_hold_prefix(drafted, emitted, rows)
    assert two_tokens[0] == pytest.approx(0.5941, abs=1e-4)
    assert two_tokens[1] == pytest.approx(0.5410, abs=1e-4)


# --- (e) sampler against the law, and a broken control ------------------------------------------------
def draw_counts(drafted, d, t, n, seed):
    rng = np.random.default_rng(seed)
    counts = {}
    for _ in range(n):
        emitted, rows = traversal_verify(drafted, d, t, rng)
        assert_rows_hold_prefix(drafted, emitted, rows)
        counts[tuple(emitted)] = counts.get(tuple(emitted), 0) + 1
    return counts


@pytest.mark.parametrize("blocks", [[(1, 0, 2), (1, 2, 0), (0, 0, 1)], [(2, 2, 2), (2, 2, 1), (2, 2, 2)]])
def test_sampler_follows_the_exact_law(blocks):
    # Chi-square of 20k traversal_verify draws against traversal_verification_law for one
    # drafted tuple (a branching tree; a tree with a repeated block).
    vocab = 3
    draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=7, draft_temperature=1.3))
    drafted, d, t, _ = round_arrays((draft, draft, cached(tempered(draft, 1.5))), target, (), blocks)
    law = traversal_verification_law(drafted, d, t)
    counts = draw_counts(drafted, d, t, 20000, seed=11)
    assert set(counts) <= set(law)  # (nothing outside the law)
    keys = sorted(law)
    assert chi2_pvalue(np.array([counts.get(k, 0) for k in keys]), np.array([law[k] for k in keys])) > 1e-3


def test_broken_control_without_the_weight_update_fails(monkeypatch):
    # The control: after a rejected draw the law t is updated but not the weight m (m
    # unchanged). The enumeration must see it lose the target's law (error > 1e-3), and the
    # same enumeration of the true rule is exact.
    vocab, length = 3, 2
    draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=7, draft_temperature=1.3))
    assert lossless_error((draft, draft), target, vocab, length)[0] < 1e-12
    rejected = tv._rejected

    def broken(m, t, p):
        return m, rejected(m, t, p)[1]

    monkeypatch.setattr(tv, "_rejected", broken)
    assert lossless_error((draft, draft), target, vocab, length)[0] > 1e-3
    assert lossless_error((draft,), target, vocab, length)[0] > 1e-3  # (even for one draft)


def test_broken_control_fails_the_chi_square(monkeypatch):
    # The sampler of the broken rule (m unchanged after a rejection) against the true law, on
    # a tuple where the two laws are 0.067 apart in total variation: rejected.
    vocab = 3
    draft, target = (cached(f) for f in tiny_lm_pair(vocab, seed=7, draft_temperature=1.3))
    drafted, d, t, _ = round_arrays((draft, draft), target, (), [(2, 0), (2, 1)])
    law = traversal_verification_law(drafted, d, t)
    rejected = tv._rejected
    monkeypatch.setattr(tv, "_rejected", lambda m, t, p: (m, rejected(m, t, p)[1]))
    counts = draw_counts(drafted, d, t, 20000, seed=11)
    keys = sorted(law)
    assert set(counts) <= set(law)
    assert chi2_pvalue(np.array([counts.get(k, 0) for k in keys]), np.array([law[k] for k in keys])) < 1e-6


# --- (f) what the sampler returns --------------------------------------------------------------------
def test_sampler_returns_valid_tokens_and_the_rows_holding_the_prefix():
    for vocab, length, draft, target in model_pairs():
        rng = np.random.default_rng(vocab * 10 + length)
        blocks = list(itertools.product(range(vocab), repeat=length))
        for tup in itertools.islice(itertools.product(blocks, repeat=3), 0, None, 7):
            drafted, d, t, _ = round_arrays((draft,) * 3, target, (), tup)
            law = traversal_verification_law(drafted, d, t)
            for _ in range(3):
                emitted, rows = traversal_verify(drafted, d, t, rng)
                assert all(0 <= y < vocab for y in emitted)
                assert tuple(emitted) in law
                assert_rows_hold_prefix(drafted, emitted, rows)
