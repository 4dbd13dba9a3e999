"""Hostile inputs for the exactly optimal scheme ("optimal", mspec.fast.optimal_selection), mostly
with every token its own atom (``atoms="tokens"``), both tilings.

Paper notation: K i.i.d. drafts from p (``draft``), target q (``target``).

Regressions: a subnormal q_t made the per-token slope v_t / q_t of the PAVA overflow (NaN
acceptance, token ids >= V); a short piece low in key space got an x its keys could not
hold (x from differences of f = 1 - (1 - top)^K, exact only to ~1e-16 absolute), so a token
with p_t ~ 5e-11 got an empty key law (IndexError in conditional, one constant key for the
whole piece); q/p that overflow (subnormal p) or underflow (subnormal q) tied and came in
any order, pooled into infeasible pieces; the greedy tiling placed a tiny first token by
rounding noise and dumped ~1e-12 on a piece's last token. The module docstring
("Exactness") states the accuracy of the key laws that these tests check: in a piece ending
at key e, length p_t to LENGTH_ULPS eps e and nu-mass x_t to NU_ULPS K eps e, plus an
absolute floor (:func:`floor`).
"""

import numpy as np
import pytest

from mspec.schemes.closed_form import optimal_acceptance
from mspec.schemes.exact import output_distribution
from mspec.fast.optimal_selection import OptimalSelection

from sampling import chi2_pvalue, sample_counts

EPS = float(np.finfo(float).eps)
#: the stated accuracy (module docstring, "Exactness"): ulps of the piece's end key, and an
#: absolute floor of SUBNORMAL_ULPS K 2^-1074, or FLOOR where some 0 < q_t < 1e-290
LENGTH_ULPS, NU_ULPS, SUBNORMAL_ULPS, FLOOR = 8.0, 32.0, 16.0, 1e-300
VOCAB = 50272


def softmax(z):
    z = np.asarray(z, dtype=float)
    w = np.exp(z - z.max())
    return w / w.sum()


def law_stats(law, k):
    """``(length, nu-mass, float length)`` of a key law ``[(a, b, w)]``; ``nu([a, b]) =
    (1 - a)^K - (1 - b)^K`` taken as ``(b - a) sum_j (1 - a)^(K-1-j) (1 - b)^j`` (no
    cancellation: the test must resolve what it checks)."""
    if not law:
        return 0.0, 0.0, 0.0
    f = np.array(law, dtype=float)
    a, b, w = f[:, 0], f[:, 1], f[:, 2]
    terms = sum((1.0 - a) ** (k - 1 - j) * (1.0 - b) ** j for j in range(k))
    return float(np.sum(w * (b - a))), float(np.sum(w * (b - a) * terms)), float(np.sum(b - a))


def piece_end(rule, token):
    """The end, in key space, of the piece that holds ``token``'s key law."""
    where = rule._locate(int(token))
    if where is None:  # q_t = 0: an interval of its own after everything else
        return float(rule.rest_top[rule._rest_pos[int(token)] + 1])
    return float(rule.top[rule.blocks[where[0] + 1]])


def floor(rule):
    """The absolute part of the stated accuracy."""
    tiny = np.any((rule.target > 0.0) & (rule.target < 1e-290))
    return FLOOR if tiny else SUBNORMAL_ULPS * rule.num_drafts * 2.0**-1074


def assert_key_law(rule, token):
    """The stated accuracy of ``token``'s key law, and a law of positive float length
    wherever the keys there can resolve ``p_t``."""
    p, x, k = float(rule.draft[token]), float(rule.induced[token]), rule.num_drafts
    length, nu, span = law_stats(rule.key_fragments(int(token)), k)
    end, least = piece_end(rule, token), floor(rule)
    assert abs(length - p) <= LENGTH_ULPS * EPS * end + least, (token, p, length, end)
    assert abs(nu - x) <= NU_ULPS * k * EPS * end + least, (token, x, nu, end)
    if p > LENGTH_ULPS * EPS * end + least:
        assert span > 0.0, (token, p, end)


def assert_exact_law(rule, target, k, draft):
    """Enumerated output law = target to 1e-12 of its scale; acceptance = the closed form."""
    law, accept = output_distribution(rule)
    assert np.all(np.abs(law - target) <= 1e-12 * target.max()), (law, target)
    best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
    assert np.isfinite(rule.acceptance()) and abs(rule.acceptance() - best) <= 1e-12
    assert abs(accept - rule.acceptance()) <= 1e-12


def assert_valid_samples(rule, rng, n):
    """``n`` selections from drafted tuples: every output in [0, V) with q > 0."""
    drafts = rng.choice(rule.vocab_size, size=(n, rule.num_drafts), p=rule.draft)
    out = np.array([rule.sample(row, rng).token for row in drafts])
    assert out.min() >= 0 and out.max() < rule.vocab_size
    assert np.all(rule.target[out] > 0.0)


def check_small_tokens_rule(draft, target, k, tiling):
    """``atoms="tokens"``: the exact law by enumeration and every drafted token's key law."""
    rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="tokens", tiling=tiling)
    assert_exact_law(rule, target, k, draft)
    for t in np.flatnonzero(draft):
        assert_key_law(rule, t)


# --- 1. subnormal target entries -------------------------------------------------------------
@pytest.mark.parametrize("tiling", ["pool", "greedy"])
@pytest.mark.parametrize("atoms", ["tokens", "buckets", "auto"])
def test_subnormal_target_entry_small(atoms, tiling):
    # v_t / q_t overflowed for q_t = 3e-321: NaN acceptance, sample() returned token 4 (= V)
    draft, target = np.array([0.3, 0.3, 0.2, 0.2]), np.array([3e-321, 0.2, 0.3, 0.5])
    rng = np.random.default_rng(0)
    for k in (1, 2, 3, 4):
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms=atoms, tiling=tiling)
        assert np.all(np.isfinite(rule.induced)) and rule.induced.sum() == pytest.approx(1.0, abs=1e-12)
        assert_exact_law(rule, target, k, draft)
        for t in range(4):
            assert_key_law(rule, t)
    rule = OptimalSelection(draft=draft, target=target, num_drafts=2, atoms=atoms, tiling=tiling)
    assert rule.acceptance() == pytest.approx(0.84, abs=1e-12)
    assert_valid_samples(rule, rng, 3000)


@pytest.mark.parametrize("scale", [1.0, 3.0, 8.0])
def test_subnormal_target_entries_at_full_vocabulary(scale):
    # target temperature 0.01: hundreds of q_t are subnormal (70% of samples were ids >= V)
    rng = np.random.default_rng(int(scale))
    logits = rng.normal(size=VOCAB) * scale
    draft, target = softmax(logits), softmax(logits / 0.01)
    assert np.any((target > 0) & (target < np.finfo(float).tiny))
    for atoms in ("tokens", "auto"):
        for k in (2, 8):
            rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms=atoms)
            best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
            assert np.isfinite(rule.acceptance()) and abs(rule.acceptance() - best) <= 1e-9
            assert_valid_samples(rule, rng, 400)
            if atoms == "tokens":
                for t in np.unique(rng.choice(VOCAB, size=12, p=draft)):
                    assert_key_law(rule, t)


@pytest.mark.parametrize("tiling", ["pool", "greedy"])
def test_ratios_that_underflow_keep_their_order(tiling):
    # q/p of 5e-324 / 0.25 underflows to a subnormal with a few bits: two tokens whose p
    # differ by 1e-9 tied, came in either order, and one piece pooled them with x = s q,
    # so x_t > f = p_t for K = 1 (infeasible by 1e-9: no key law can hold it)
    draft = np.array([0.5, 0.25 - 1e-9, 0.25 + 1e-9])
    target = np.array([1.0, 5e-324, 5e-324])
    for k in (1, 2, 3):
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="tokens", tiling=tiling)
        assert_exact_law(rule, target, k, draft)
        for t in range(3):
            assert_key_law(rule, t)
        if k == 1:
            np.testing.assert_allclose(rule.induced, draft, rtol=1e-15)  # one draft: x = p


# --- 2. atoms="tokens": tiny and subnormal draft entries ------------------------------------
@pytest.mark.parametrize("tiling", ["pool", "greedy"])
def test_subnormal_draft_entries_small(tiling):
    # p_t = 5e-324 with q_t normal (q/p overflows: first in key space), subnormal, or 0
    cases = [([5e-324, 0.5, 0.3, 0.2], [0.1, 0.2, 0.3, 0.4]),
             ([0.5, 0.5, 5e-324], [0.3, 0.3, 0.4]),
             ([0.4, 5e-324, 0.6], [0.5, 3e-321, 0.5]),
             ([0.7, 5e-324, 0.3], [0.5, 0.0, 0.5]),
             ([1e-300, 5e-324, 1.0], [0.5, 0.5, 0.0])]
    for draft, target in cases:
        draft, target = np.array(draft), np.array(target)
        for k in (1, 2, 3):
            check_small_tokens_rule(draft, target, k, tiling)


def test_subnormal_draft_entry_at_full_vocabulary():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=VOCAB) * 3
    for t1, t2 in [(0.5, 1.0), (1.0, 0.5)]:
        base, target = softmax(logits / t1), softmax(logits / t2)
        for token in (int(np.argmax(target)), int(np.argsort(target)[VOCAB // 2])):
            draft = base.copy()
            draft[token] = 0.0
            draft /= draft.sum()
            draft[token] = 5e-324
            rule = OptimalSelection(draft=draft, target=target, num_drafts=8, atoms="tokens")
            drafts = np.concatenate([[token], rng.choice(VOCAB, size=7, p=draft)])
            dist, _ = rule.conditional(drafts)  # (was NaN)
            assert np.all(np.isfinite(dist)) and dist.sum() == pytest.approx(1.0, abs=1e-12)
            assert_key_law(rule, token)
            assert all(0 <= rule.sample(drafts, rng).token < VOCAB for _ in range(20))


def test_tiny_draft_entries_get_exact_key_laws_at_full_vocabulary():
    # LM-shaped pairs, K = 8: every token with p ~ 1e-11 or smaller (and the drafted ones,
    # and the first and last in q/p order) has a key law of the stated accuracy
    for seed, t1, t2 in [(1, 0.5, 1.0), (0, 1.0, 0.3), (2, 0.3, 2.0), (3, 2.0, 0.5), (4, 1.5, 3.0)]:
        rng = np.random.default_rng(seed)
        logits = rng.normal(size=VOCAB) * 3
        draft, target = softmax(logits / t1), softmax(logits / t2)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=8, atoms="tokens")
        positive = np.flatnonzero(draft > 0)
        tiny = positive[np.argsort(draft[positive])[:10]]
        near = positive[np.argsort(np.abs(np.log(draft[positive] / 5e-11)))[:5]]
        tokens = np.unique(np.concatenate([tiny, near, rng.choice(VOCAB, size=10, p=draft),
                                           rule.order[:5], rule.order[-5:]]))
        for t in tokens:
            assert_key_law(rule, t)
    # the token that had an empty key law (p = 4.8e-14, its piece at key 1.2e-10): now exact
    # relative to its own size, and its keys spread over its law (no constant key)
    rng = np.random.default_rng(1)
    logits = rng.normal(size=VOCAB) * 3
    draft, target = softmax(logits / 0.5), softmax(logits / 1.0)
    rule = OptimalSelection(draft=draft, target=target, num_drafts=8, atoms="tokens")
    token = 33867
    assert draft[token] == pytest.approx(4.806e-14, rel=1e-3) and piece_end(rule, token) < 1e-9
    length, nu, span = law_stats(rule.key_fragments(token), 8)
    assert span > 0 and length == pytest.approx(draft[token], rel=1e-12)
    assert nu == pytest.approx(rule.induced[token], rel=1e-12)
    keys = {rule._sample_key(token, u) for u in (0.1, 0.5, 0.9)}
    assert len(keys) == 3
    drafts = np.array([token, token, *rng.choice(VOCAB, size=6, p=draft)])
    dist, _ = rule.conditional(drafts)  # (was IndexError)
    assert np.all(np.isfinite(dist)) and dist.sum() == pytest.approx(1.0, abs=1e-12)


def test_greedy_places_a_tiny_first_token_by_its_density():
    # ratio ties: every token of the piece needs density x/p = b, so the greedy must put the
    # first block (p ~ 1e-16) where the nu density is b -- it landed anywhere (its window's
    # float ends round its length by ~10%), and the shells around it then missed by ~1e-6
    rng = np.random.default_rng(3)
    logits = rng.normal(size=3000) * 8
    draft = softmax(logits)
    target = draft * np.exp(rng.integers(-2, 3, size=draft.size) * 0.5)
    target /= target.sum()
    for k in (3, 9):
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="tokens", tiling="greedy")
        for t in np.concatenate([rule.order[:60], rule.order[-20:], rng.choice(draft.size, size=20, p=draft)]):
            assert_key_law(rule, t)
        assert optimal_acceptance(draft=draft, target=target, num_drafts=k) == pytest.approx(rule.acceptance(),
                                                                                            abs=1e-9)


# --- 3. chi-square, with a broken control ---------------------------------------------------
class PerturbedKeys(OptimalSelection):
    """Control: every drafted key shifted by 1/2 (cyclically). Keys stay uniform, but the
    draft with the smallest key is another one: the selection no longer realises x."""

    def _sample_key(self, token, uniform):
        return (super()._sample_key(token, uniform) + 0.5) % 1.0


@pytest.mark.parametrize("tiling", ["pool", "greedy"])
def test_chi_square_small_vocabulary_and_a_broken_control(tiling):
    logits = np.array([2.0, 1.0, 0.5, -1.0, -3.0, -30.0])  # the last: p ~ 3e-10, q ~ 1e-20
    draft, target = softmax(logits / 1.5), softmax(logits / 0.7)
    rule = OptimalSelection(draft=draft, target=target, num_drafts=3, atoms="tokens", tiling=tiling)
    assert chi2_pvalue(sample_counts(rule, 20_000, seed=5), target) > 1e-3
    broken = PerturbedKeys(draft=draft, target=target, num_drafts=3, atoms="tokens", tiling=tiling)
    assert chi2_pvalue(sample_counts(broken, 20_000, seed=5), target) < 1e-6


# --- 4. fuzz over hostile families ------------------------------------------------------------
FAMILIES = ("tempered", "truncated", "tiny", "zeros-draft", "zeros-target", "ties", "same", "one-hot-draft")


def hostile_pair(rng, vocab, family):
    """A valid ``(draft, target)`` of a hostile family: logits of scale 1..20 at temperatures
    0.01..5 on both sides, then top-k/top-p (down to one survivor), entries at 1e-300 and
    subnormal, zeros on one side only, ties of q/p, draft == target, a one-hot draft."""
    logits = rng.normal(size=vocab) * float(rng.choice([1.0, 3.0, 8.0, 20.0]))
    t_draft, t_target = np.exp(rng.uniform(np.log(0.01), np.log(5.0), size=2))
    draft = softmax(logits / t_draft + (0.5 * rng.normal(size=vocab) if rng.random() < 0.5 else 0.0))
    target = softmax(logits / t_target)
    if family == "truncated" and vocab > 1:
        keep = 1 if rng.random() < 0.4 else int(rng.integers(1, vocab + 1))
        target[np.argsort(target)[: vocab - keep]] = 0.0
    elif family == "tiny":
        for side in (draft, target):
            picks = rng.choice(vocab, size=min(vocab, 2), replace=False)
            side[picks] = rng.choice([5e-324, 3e-321, 1e-310, 1e-300, 1e-17], size=picks.size)
    elif family == "zeros-draft" and vocab > 1:
        draft[rng.choice(vocab, size=int(rng.integers(1, vocab)), replace=False)] = 0.0
    elif family == "zeros-target" and vocab > 1:
        target[rng.choice(vocab, size=int(rng.integers(1, vocab)), replace=False)] = 0.0
    elif family == "ties":
        target = draft * np.exp(rng.integers(-2, 3, size=vocab) * 0.5)
    elif family == "same":
        target = draft.copy()
    elif family == "one-hot-draft":
        draft = np.zeros(vocab)
        draft[int(rng.integers(vocab))] = 1.0
    if not draft.sum() > 0:
        draft[0] = 1.0
    if not target.sum() > 0:
        target[int(np.argmax(draft))] = 1.0
    return draft / draft.sum(), target / target.sum()


def test_fuzz_small_vocabulary_exact_by_enumeration():
    rng = np.random.default_rng(2024)
    for trial in range(160):
        vocab, k = int(rng.integers(1, 7)), int(rng.integers(1, 17))
        while vocab**k > 250:
            k -= 1
        draft, target = hostile_pair(rng, vocab, FAMILIES[trial % len(FAMILIES)])
        tiling = ("pool", "greedy")[trial // len(FAMILIES) % 2]
        check_small_tokens_rule(draft, target, k, tiling)


def test_fuzz_large_vocabulary_key_laws():
    rng = np.random.default_rng(77)
    for trial in range(200):
        vocab, k = int(np.exp(rng.uniform(np.log(100), np.log(VOCAB)))), int(rng.integers(1, 17))
        tiling = ("pool", "greedy")[trial // len(FAMILIES) % 2]
        if tiling == "greedy":
            vocab = min(vocab, 20_000)  # (the greedy tiles every token up to the one asked)
        draft, target = hostile_pair(rng, vocab, FAMILIES[trial % len(FAMILIES)])
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="tokens", tiling=tiling)
        best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
        assert np.isfinite(rule.acceptance()) and abs(rule.acceptance() - best) <= 1e-9
        positive = np.flatnonzero(draft > 0)
        tokens = np.unique(np.concatenate([rng.choice(vocab, size=6, p=draft),
                                           positive[np.argsort(draft[positive])[:5]],
                                           rule.order[:4], rule.order[-4:], np.argsort(-target)[:2]]))
        for t in tokens[draft[tokens] > 0]:
            assert_key_law(rule, t)
        assert_valid_samples(rule, rng, 10)
