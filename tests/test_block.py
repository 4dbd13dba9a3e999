"""Block verification for one draft (mspec.rounds.block) against the exact round optimum.

Paper notation: the draft model p, the target q.
"""

import functools
import itertools

import numpy as np
import pytest
from sampling import chi2_pvalue

from mspec.rounds.block import (
    block_verification_law,
    block_verify,
    expected_block_tokens,
)
from mspec.rounds.optimum import (
    context_free,
    next_tokens_law,
    per_position_value,
    round_optimum,
    target_tokens_law,
    tiny_lm_pair,
)


def laws_along(draft_lm, target_lm, context, block):
    """``(L, V)`` draft and ``(L + 1, V)`` target laws along a drafted block."""
    draft = np.array([draft_lm(context + block[:i]) for i in range(len(block))])
    target = np.array([target_lm(context + block[:i]) for i in range(len(block) + 1)])
    return draft, target


def emitted_law(draft_lm, target_lm, vocab, length, context, law_of=block_verification_law):
    """``{w: A(w)}``: the strings a round of ``law_of`` emits, every drafted block enumerated."""
    out = {}
    for block in itertools.product(range(vocab), repeat=length):
        draft, target = laws_along(draft_lm, target_lm, context, block)
        weight = float(np.prod([draft[i, block[i]] for i in range(length)]))
        if weight == 0.0:
            continue
        for (kept, token), mass in law_of(block, draft, target).items():
            w = block[:kept] + (token,)
            out[w] = out.get(w, 0.0) + weight * mass
    return out


def model_pairs():
    rng = np.random.default_rng(0)
    for seed in range(4):
        for vocab, length in [(2, 2), (3, 2), (2, 3)]:
            yield vocab, length, tiny_lm_pair(vocab, seed=seed, draft_temperature=float(rng.uniform(0.6, 2.0)),
                                              draft_noise=float(rng.uniform(0.2, 2.0)))


def test_lossless_over_several_rounds_and_equal_to_the_round_optimum():
    # Enumeration on tiny models: the next L + 2 tokens over as many rounds as it takes have
    # the target's law (1e-12), and the expected tokens per round is the exact round optimum
    # for one draft (the linear program of mspec.rounds.optimum), never below token by token.
    for vocab, length, (draft, target) in model_pairs():
        emitted = functools.lru_cache(maxsize=None)(functools.partial(emitted_law, draft, target, vocab, length))
        want = target_tokens_law(target, vocab=vocab, count=length + 2)
        got = next_tokens_law(emitted, length + 2)
        assert max(abs(got.get(w, 0.0) - p) for w, p in want.items()) < 1e-12
        value = sum(len(w) * m for w, m in emitted(()).items())
        scored = 0.0  # the same value, scored block by block
        for block in itertools.product(range(vocab), repeat=length):
            d, t = laws_along(draft, target, (), block)
            scored += float(np.prod([d[i, block[i]] for i in range(length)])) * expected_block_tokens(block, d, t)
        assert scored == pytest.approx(value, abs=1e-12)
        assert value == pytest.approx(round_optimum(draft, target, vocab=vocab, num_drafts=1,
                                                    draft_length=length).value, abs=1e-9)
        assert value >= per_position_value(draft, target, scheme="single", vocab=vocab, num_drafts=1,
                                           draft_length=length) - 1e-12


def test_sun_et_al_example():
    draft, target = context_free([2 / 3, 1 / 3]), context_free([1 / 3, 2 / 3])
    emitted = emitted_law(draft, target, 2, 2, ())
    assert sum(len(w) * m for w, m in emitted.items()) == pytest.approx(1 + 11 / 9, abs=1e-12)


@pytest.mark.parametrize("case", ["one-hot target", "zeros in the draft", "draft = target", "disjoint"])
def test_hostile_models(case):
    # One-hot targets (greedy decoding), drafts with zeros, identical models, disjoint
    # supports: still the target's law, and a draft equal to the target keeps every block.
    vocab, length = 3, 2
    base_draft, base_target = tiny_lm_pair(vocab, seed=5)
    if case == "one-hot target":
        draft, target = base_draft, lambda c: np.eye(vocab)[(len(c) + sum(c)) % vocab]
    elif case == "zeros in the draft":
        def draft(c):  # one token the draft never proposes, moving with the context
            p = base_draft(c) * (np.arange(vocab) != len(c) % vocab)
            return p / p.sum()

        target = base_target
    elif case == "draft = target":
        draft = target = base_target
    else:
        draft, target = context_free([0.0, 0.5, 0.5]), context_free([1.0, 0.0, 0.0])
    emitted = functools.lru_cache(maxsize=None)(lambda c: emitted_law(draft, target, vocab, length, c))
    want = target_tokens_law(target, vocab=vocab, count=length + 2)
    got = next_tokens_law(emitted, length + 2)
    assert max(abs(got.get(w, 0.0) - p) for w, p in want.items()) < 1e-12
    if case == "draft = target":
        assert all(len(w) == length + 1 for w in emitted(()))


def test_sampler_follows_the_law_and_a_broken_control_fails():
    # Chi-square of block_verify's draws against the exact law, per drafted block; the control
    # (a coin of w_i alone, without the residual's share) is rejected.
    vocab = 3
    draft_lm, target_lm = tiny_lm_pair(vocab, seed=7, draft_temperature=1.3)
    block = (1, 0, 2)
    draft, target = laws_along(draft_lm, target_lm, (), block)
    law = block_verification_law(block, draft, target)
    keys = sorted(law)
    expected = np.array([law[k] for k in keys])
    rng = np.random.default_rng(11)
    draws = [block_verify(block, draft, target, rng) for _ in range(20000)]
    counts = np.array([sum(1 for d in draws if d == k) for k in keys])
    assert sum(counts) == len(draws)  # (nothing outside the law)
    assert chi2_pvalue(counts, expected) > 1e-3

    def broken(block, draft, target):  # stops where the w-coin says so, residual of w_i ignored
        w = np.ones(len(block) + 1)
        for i, x in enumerate(block, start=1):
            w[i] = min(1.0, w[i - 1] * target[i - 1, x] / draft[i - 1, x])
        out, remaining = {}, 1.0
        for i in range(len(block), -1, -1):
            stop = remaining * (w[i] if i else 1.0)
            remaining -= stop
            after = target[len(block)] if i == len(block) else target[i]
            for y in range(after.size):
                out[(i, y)] = out.get((i, y), 0.0) + stop * after[y]
        return out

    emitted = functools.lru_cache(maxsize=None)(
        lambda c: emitted_law(draft_lm, target_lm, vocab, 2, c, law_of=broken))
    want = target_tokens_law(target_lm, vocab=vocab, count=4)
    got = next_tokens_law(emitted, 4)
    assert max(abs(got.get(w, 0.0) - p) for w, p in want.items()) > 1e-3
