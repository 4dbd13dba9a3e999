"""Hypothesis strategies shared by the test modules (paper notation: draft p, target q)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

# weights: exact zeros appear often, so degenerate supports get exercised
_weight = st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1.0))


@st.composite
def distributions(draw, vocab_size: int) -> np.ndarray:
    """A probability vector of shape ``(vocab_size,)``, possibly with zeros or one-hot."""
    weights = np.array(draw(st.lists(_weight, min_size=vocab_size, max_size=vocab_size)))
    if weights.sum() == 0:
        weights[draw(st.integers(0, vocab_size - 1))] = 1.0
    return weights / weights.sum()


@st.composite
def draft_target(draw, *, max_vocab: int = 6, max_drafts: int = 4, identical: bool | None = None):
    """``(draft, target, K)``: draft is ``(V,)`` when identical else ``(K, V)``."""
    vocab = draw(st.integers(1, max_vocab))
    k = draw(st.integers(1, max_drafts))
    same = draw(st.booleans()) if identical is None else identical
    target = draw(distributions(vocab))
    if draw(st.integers(0, 9)) == 0:  # draft == target now and then
        return (target if same else np.tile(target, (k, 1))), target, k
    draft = draw(distributions(vocab)) if same else np.stack([draw(distributions(vocab)) for _ in range(k)])
    return draft, target, k


def random_case(rng: np.random.Generator, *, vocab: int, num_drafts: int, identical: bool = True):
    """A seeded random ``(draft, target)`` with ~1/4 of the entries set to exactly zero."""

    def dist():
        w = rng.dirichlet(np.full(vocab, 0.7))
        w[rng.random(vocab) < 0.25] = 0.0
        if w.sum() == 0:
            w[rng.integers(vocab)] = 1.0
        return w / w.sum()

    draft = dist() if identical else np.stack([dist() for _ in range(num_drafts)])
    return draft, dist()


def random_cases(seed: int, *, count: int = 80, max_vocab: int = 5, identical: bool = True):
    """Yield ``count`` seeded ``(draft, target, K)`` cases, V in 1..max_vocab, K alternating 3 and 2."""
    rng = np.random.default_rng(seed)
    for n in range(count):
        vocab = int(rng.integers(1, max_vocab + 1))
        k = 2 if n % 2 else 3
        draft, target = random_case(rng, vocab=vocab, num_drafts=k, identical=identical)
        yield draft, target, k


def softmax_pair(rng: np.random.Generator, vocab: int, *, scale: float, draft_temperature: float = 1.5):
    """``(draft, target, logits)``: target = softmax of ``scale * N(0, 1)`` logits, draft = the
    same logits at ``draft_temperature`` (a draft flatter than the target, as in the paper)."""
    from mspec.distributions import distribution_from_logits

    logits = rng.normal(size=vocab) * scale
    return distribution_from_logits(logits, temperature=draft_temperature), distribution_from_logits(logits), logits


def bucket_case(rng: np.random.Generator, *, vocab: int, groups: int = 3, zeros: bool = False):
    """A seeded ``(draft, target)`` whose ratios ``q/p`` come in ``groups`` tight clusters.

    Tokens of one cluster differ in ``q/p`` by a factor below ``1 + 1e-4``, so they usually
    share a ratio bucket of the optimal scheme (``atoms="buckets"``); with ``zeros``, one
    token has ``q = 0`` and one ``p = 0``.
    """
    draft = rng.dirichlet(np.full(vocab, 1.0))
    centres = np.exp(rng.normal(0.0, 1.0, groups))
    ratio = centres[rng.integers(groups, size=vocab)] * (1.0 + 1e-4 * rng.random(vocab))
    target = draft * ratio
    if zeros and vocab >= 3:
        target[0], draft[1] = 0.0, 0.0
    return draft / draft.sum(), target / target.sum()


def optimum_one_case(rng: np.random.Generator, *, vocab: int, groups: int = 3):
    """A seeded ``(draft, target)`` with ratios ``q/p`` in ``groups`` clusters near 1 (each
    cluster spread by a factor ``1 + 1e-3``, within one ratio bucket unless it meets a
    bucket edge), so that with a few drafts the optimum is usually exactly 1 (``x = q`` is
    feasible): the case of fact 6, tokens spread inside their bucket."""
    draft = rng.dirichlet(np.full(vocab, 1.0))
    centres = np.exp(rng.normal(0.0, 0.35, groups))
    ratio = centres[rng.integers(groups, size=vocab)] * (1.0 + 1e-3 * rng.random(vocab))
    target = draft * ratio
    return draft / draft.sum(), target / target.sum()


def tight_bucket_case(rng: np.random.Generator, *, num_drafts: int, buckets: int = 4, per: int = 2):
    """A seeded ``(draft, target)`` of ``buckets`` clusters of ``per`` tokens (ratios ``q/p``
    within a factor ``1 + 2e-5``: one ratio bucket each, unless a bucket edge splits them)
    whose suffixes nearly reach ``q(R) = p(R)^K``: an optimum of 1 next to a nearly tight
    suffix, where buckets of fact 6 must own (almost) all their length and come in tiled
    groups."""
    k = num_drafts
    mass = rng.dirichlet(np.full(buckets, 1.0))
    top = np.cumsum(mass)
    top[-1] = 1.0
    before = np.concatenate([[0.0], top[:-1]])
    share = (top**k - before**k) * np.clip(1.0 + 0.05 * rng.standard_normal(buckets), 0.2, None)
    share[top <= 0.7] *= 1.0 + 1e-3  # just above tight on the sparse side
    share /= share.sum()
    draft = np.repeat(mass / per, per) * (1.0 + 1e-3 * rng.random(buckets * per))
    target = draft * np.repeat(share / mass, per) * (1.0 + 1e-5 * rng.random(buckets * per))
    return draft / draft.sum(), target / target.sum()


def near_tight_case(rng: np.random.Generator, *, vocab: int, num_drafts: int, noise: float = 0.05):
    """A seeded ``(draft, target)`` whose suffix constraint ``q(R) >= p(R)^K`` (``R`` the
    tokens of smallest ``q/p``) nearly binds along 60% of the draft mass, with ``q`` jittered
    by ``noise``: many tokens need a slot longer than themselves, in long runs (the real
    case that once took 50 ms per step)."""
    k = num_drafts
    draft = rng.dirichlet(np.full(vocab, 0.3))
    top = np.cumsum(draft)
    top[-1] = 1.0
    before = np.concatenate([[0.0], top[:-1]])
    target = (top**k - before**k) * np.clip(1.0 + noise * rng.standard_normal(vocab), 0.05, None)
    target[top <= 0.6] *= 1.0 + 1e-3
    rest = top > 0.6
    target[rest] *= (1.0 - target[~rest].sum()) / target[rest].sum()
    order = rng.permutation(vocab)
    return draft[order], target[order] / target.sum()


# --- hostile inputs: what a real decoder produces ------------------------------------------
#: the families of :func:`hostile_pair`
#: tiny entries of the ``tiny`` family: subnormal, 1e-300, and small enough to vanish next to 1
TINY = (5e-324, 3e-321, 1e-300, 1e-200, 1e-17, 1e-14, 1e-10)
HOSTILE_FAMILIES = ("lm", "truncated", "one-hot", "tiny", "zeros-draft", "zeros-target", "ties", "same", "dirichlet")


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max()
    w = np.exp(z)
    return w / w.sum()


def _truncate(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Top-k or top-p of ``probs`` (sometimes down to a single surviving token)."""
    from mspec.distributions import distribution_from_logits

    logits = np.log(np.maximum(probs, 1e-320))
    logits[probs == 0] = -np.inf
    if rng.random() < 0.5:
        k = 1 if rng.random() < 0.3 else int(rng.integers(1, max(2, probs.size // 2 + 1)))
        return distribution_from_logits(logits, top_k=k)
    top_p = 1e-6 if rng.random() < 0.3 else float(rng.uniform(0.05, 0.99))
    return distribution_from_logits(logits, top_p=top_p)


def hostile_pair(rng: np.random.Generator, *, vocab: int, family: str, num_drafts: int = 1,
                 identical: bool = True):
    """A seeded hostile but valid ``(draft, target)`` of one of :data:`HOSTILE_FAMILIES`.

    * ``lm``: logits ``scale * N(0, 1)`` (scale 1 to 12), target and draft at temperatures
      0.01 to 5, the draft from slightly perturbed logits;
    * ``truncated``: as ``lm``, with top-k / top-p on the target and/or the draft (one
      surviving token now and then);
    * ``one-hot``: the target is one token (greedy-like decoding);
    * ``tiny``: entries at 1e-300 and subnormal (5e-324, 3e-321) on either side;
    * ``zeros-draft`` / ``zeros-target``: zeros on one side only;
    * ``ties``: ``q/p`` equal (to the last bit or within 1e-15) for groups of tokens;
    * ``same``: ``draft == target``;
    * ``dirichlet``: a sparse Dirichlet draw on both sides.

    Returns:
        ``(draft, target)``: draft ``(V,)`` if ``identical`` else ``(K, V)``.
    """
    def one_draft(target, logits):
        if family == "same":
            return target.copy()
        if family in ("lm", "truncated"):
            temp = float(np.exp(rng.uniform(np.log(0.01), np.log(5.0))))
            d = _softmax((logits + rng.normal(0.0, 0.5, vocab)) / temp)
            return _truncate(d, rng) if family == "truncated" and rng.random() < 0.5 else d
        if family == "tiny":
            d = rng.dirichlet(np.full(vocab, 0.5))
            idx = rng.integers(vocab, size=max(1, vocab // 3))
            d[idx] = rng.choice(TINY, size=idx.size)
            return d / d.sum()
        if family == "zeros-draft" and vocab > 1:
            d = rng.dirichlet(np.full(vocab, 0.7))
            d[rng.random(vocab) < 0.4] = 0.0
            if d.sum() == 0:
                d[rng.integers(vocab)] = 1.0
            return d / d.sum()
        return rng.dirichlet(np.full(vocab, 0.5))

    logits = rng.normal(size=vocab) * float(rng.choice([1.0, 3.0, 8.0, 12.0]))
    if family in ("lm", "truncated"):
        temp = float(np.exp(rng.uniform(np.log(0.01), np.log(5.0))))
        target = _softmax(logits / temp)
        if family == "truncated":
            target = _truncate(target, rng)
    elif family == "one-hot":
        target = np.zeros(vocab)
        target[rng.integers(vocab)] = 1.0
    elif family == "tiny":
        target = rng.dirichlet(np.full(vocab, 0.5))
        idx = rng.integers(vocab, size=max(1, vocab // 3))
        target[idx] = rng.choice(TINY, size=idx.size)
        target /= target.sum()
    elif family == "zeros-target" and vocab > 1:
        target = rng.dirichlet(np.full(vocab, 0.7))
        target[rng.random(vocab) < 0.4] = 0.0
        if target.sum() == 0:
            target[rng.integers(vocab)] = 1.0
        target /= target.sum()
    elif family == "dirichlet":
        target = rng.dirichlet(np.full(vocab, 0.3))
    else:
        target = rng.dirichlet(np.full(vocab, 0.5))

    if family == "ties":
        draft = rng.dirichlet(np.full(vocab, 0.7))
        levels = np.exp(rng.normal(size=max(1, vocab // 3)))
        ratio = levels[rng.integers(levels.size, size=vocab)]
        target = draft * ratio * (1.0 + (rng.random(vocab) < 0.3) * 1e-15)
        target /= target.sum()
        return (draft if identical else np.stack([draft] * num_drafts)), target
    if identical:
        return one_draft(target, logits), target
    return np.stack([one_draft(target, logits) for _ in range(num_drafts)]), target


@st.composite
def hostile_cases(draw, *, max_vocab: int = 5, max_drafts: int = 3, identical: bool | None = True,
                  families=HOSTILE_FAMILIES):
    """``(draft, target, K, family)`` drawn by hypothesis from :func:`hostile_pair`."""
    family = draw(st.sampled_from(families))
    vocab = draw(st.integers(1, max_vocab))
    k = draw(st.integers(1, max_drafts))
    same = draw(st.booleans()) if identical is None else identical
    seed = draw(st.integers(0, 2**32 - 1))
    draft, target = hostile_pair(np.random.default_rng(seed), vocab=vocab, family=family,
                                 num_drafts=k, identical=same)
    return draft, target, k, family
