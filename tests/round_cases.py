"""Tiny model pairs and round arrays shared by the round-rule tests
(test_traversal.py, test_selected_block.py, test_round_rules.py). Paper notation: draft p, target q."""

import functools

import numpy as np
import pytest

from mspec.rounds.optimum import context_free, tiny_lm_pair


def cached(lm):
    """The same model, memoised per context (the tiny models seed a generator per call)."""
    return functools.lru_cache(maxsize=None)(lambda c: lm(tuple(c)))


def round_arrays(draft_lms, target_lm, context, blocks):
    """``(drafted (K, L), draft_probs (K, L, V), target_probs (K, L + 1, V), P(blocks))`` for
    the K drafted ``blocks``; draft ``i`` drawn from ``draft_lms[i]`` (one model: all drafts)."""
    length = len(blocks[0])
    lms = [draft_lms] * len(blocks) if callable(draft_lms) else list(draft_lms)
    draft = np.array([[lm(context + b[:j]) for j in range(length)] for lm, b in zip(lms, blocks)])
    target = np.array([[target_lm(context + b[:j]) for j in range(length + 1)] for b in blocks])
    weight = float(np.prod([draft[i, j, b[j]] for i, b in enumerate(blocks) for j in range(length)]))
    return np.array(blocks), draft, target, weight


def tempered(lm, temperature):
    """``lm`` at a temperature: its probabilities to the power ``1 / T``, normalised."""
    def out(c):
        p = lm(c) ** (1.0 / temperature)
        return p / p.sum()
    return out


def hostile_models(case, vocab):
    base_draft, base_target = tiny_lm_pair(vocab, seed=5)
    if case == "one-hot target":  # top-p with one survivor
        return base_draft, lambda c: np.eye(vocab)[(len(c) + sum(c)) % vocab]
    if case == "zeros in the draft":
        def draft(c):  # one token the draft never proposes, moving with the context
            p = base_draft(c) * (np.arange(vocab) != len(c) % vocab)
            return p / p.sum()
        return draft, base_target
    if case == "draft = target":
        return base_target, base_target
    if case == "disjoint supports":
        return context_free([0.0, 0.5, 0.5]), context_free([1.0, 0.0, 0.0])
    if case == "tiny entries":  # 1e-300 and subnormal masses on both sides
        def draft(c):
            p = base_draft(c).copy()
            p[len(c) % vocab] = 5e-324
            return p / p.sum()

        def target(c):
            q = base_target(c).copy()
            q[(len(c) + 1) % vocab] = 1e-300
            q[len(c) % vocab] = 5e-324 if sum(c) % 2 else q[len(c) % vocab]
            return q / q.sum()
        return draft, target
    if case == "ratio ties":  # q / p = 1.6, 1.6, 0.4
        return context_free([0.25, 0.25, 0.5]), context_free([0.4, 0.4, 0.2])
    if case == "target temperature 0.01":
        return base_draft, tempered(base_target, 0.01)
    if case == "target temperature 5":
        return base_draft, tempered(base_target, 5.0)
    raise AssertionError(case)


HOSTILE = ["one-hot target", "zeros in the draft", "draft = target", "disjoint supports", "tiny entries",
           "ratio ties", "target temperature 0.01", "target temperature 5"]


def value(law):
    return sum(len(w) * m for w, m in law.items())


def model_pairs():
    """Seeded tiny (draft, target) pairs with (V, L): small enough to enumerate every round."""
    rng = np.random.default_rng(0)
    for seed in range(3):
        for vocab, length in [(2, 2), (3, 2), (2, 3)]:
            draft, target = tiny_lm_pair(vocab, seed=seed, draft_temperature=float(rng.uniform(0.6, 2.0)),
                                         draft_noise=float(rng.uniform(0.2, 2.0)))
            yield vocab, length, cached(draft), cached(target)


def assert_valid_law(law, vocab, length):
    assert all(np.isfinite(m) and m >= 0.0 for m in law.values())
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(1 <= len(w) <= length + 1 and all(0 <= y < vocab for y in w) for w in law)


def assert_rows_hold_prefix(drafted, emitted, rows):
    """``rows`` are exactly the drafts whose first ``len(emitted) - 1`` tokens were kept."""
    kept = len(emitted) - 1
    assert 0 <= kept <= drafted.shape[1]
    assert all(isinstance(y, int) and 0 <= y for y in emitted)
    holding = [r for r in range(drafted.shape[0]) if list(drafted[r, :kept]) == list(emitted[:-1])]
    assert holding and sorted(rows) == holding


#: the (V, L) of :func:`model_pairs` whose rounds are enumerated for K drafts (V^(L K) tuples
#: per context: larger K, smaller models)
LOSSLESS_SIZES = {1: [(2, 2), (3, 2), (2, 3)], 2: [(2, 2), (3, 2), (2, 3)], 3: [(2, 2)], 4: [(2, 2)]}


def lossless_cases(num_drafts):
    """The :func:`model_pairs` enumerated for ``num_drafts`` drafts (at least three)."""
    cases = [case for case in model_pairs() if case[:2] in LOSSLESS_SIZES[num_drafts]]
    assert len(cases) >= 3
    return cases


def sample_blocks(rng, draft_lm, vocab, length, k):
    """``k`` blocks of ``length`` tokens drawn from ``draft_lm``, as tuples."""
    blocks = []
    for _ in range(k):
        block = ()
        for _ in range(length):
            block += (int(rng.choice(vocab, p=draft_lm(block))),)
        blocks.append(block)
    return blocks
