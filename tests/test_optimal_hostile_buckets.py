"""Hostile inputs for the bucket / slots-and-pool path of "optimal" (mspec.fast.optimal_selection).

Paper notation: K i.i.d. drafts from p (``draft``), target q (``target``). Top-k / top-p
truncation on either side (down to one surviving token), temperatures 0.01..5, wide logits,
entries at 1e-300 and subnormal, zeros on one side, near-ties, draft == target: the scheme
must never raise, never return NaN, accept with the closed-form optimum, and realise its
induced distribution exactly; what the fast path cannot certify falls back to an exact path
and is recorded in ``rule.fallbacks``.
"""

import warnings

import numpy as np
import pytest

import mspec
from mspec.schemes.closed_form import optimal_acceptance
from mspec.schemes.exact import output_distribution
from mspec.fast.optimal_selection import OptimalSelection
from mspec.fast.optimal_selection.pool import ALL_EDGES_BELOW, PoolPiece
from mspec.fast.optimal_selection.roots import power_root


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def nu(law, k):
    """nu-mass of weighted key intervals ``(a, b, w)`` (nu has distribution function 1 - (1 - y)^K)."""
    return sum(w * ((1 - a) ** k - (1 - b) ** k) for a, b, w in law)


def length(law):
    return sum(w * (b - a) for a, b, w in law)


def check_rule(rule, rng, *, samples=2000, law_tokens=(), atol=1e-13):
    """Acceptance finite and the closed form; ``samples`` selections (half the drafts from p,
    half uniform on its support) give tokens in [0, V) with q > 0; the key laws of
    ``law_tokens`` have length p_t and nu-mass x_t."""
    p, q, k, vocab = rule.draft, rule.target, rule.num_drafts, rule.vocab_size
    accept = rule.acceptance()
    assert np.isfinite(accept)
    assert accept == pytest.approx(optimal_acceptance(draft=p, target=q, num_drafts=k), abs=1e-9)
    support = np.flatnonzero(p > 0)
    drafts = np.concatenate([rng.choice(vocab, size=(samples - samples // 2, k), p=p),
                             rng.choice(support, size=(samples // 2, k))])
    for row in drafts:
        y = rule.sample(row, rng).token
        assert 0 <= y < vocab and q[y] > 0
    x = rule.induced
    assert np.all(np.isfinite(x)) and x.min() >= 0.0
    for t in law_tokens:
        law = rule.key_fragments(int(t))
        assert length(law) == pytest.approx(p[t], abs=atol), t
        assert nu(law, k) == pytest.approx(x[t], abs=atol), t


def extreme_tokens(rng, draft, target, count=30):
    """Drafted, random, most and least likely tokens (where p > 0)."""
    support = np.flatnonzero(draft > 0)
    return np.unique(np.concatenate([
        rng.choice(draft.size, size=count, p=draft), rng.choice(support, size=count),
        np.argsort(-draft)[:5], np.argsort(-target)[:5], support[np.argsort(draft[support])[:5]]]))


# --- 1. a one-hot target: a marker value used as an atom index ------------------------------------

def nucleus_of_one():
    rng = np.random.default_rng(0)
    logits = 2 * rng.normal(size=50272)
    logits[7] = 20
    return mspec.distribution_from_logits(logits), mspec.distribution_from_logits(logits, top_p=0.5)


@pytest.mark.parametrize("atoms", ["auto", "buckets"])
def test_one_hot_nucleus_target(atoms):
    # The nucleus is one token: the split segment is all that is left of the buckets, and
    # its marker (-2) was used as an index into one atom (IndexError in acceptance/sample).
    draft, target = nucleus_of_one()
    assert np.count_nonzero(target) == 1
    rng = np.random.default_rng(1)
    for k in (2, 3):
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms=atoms)
        check_rule(rule, rng, law_tokens=extreme_tokens(rng, draft, target, count=10))
        assert rule.fallbacks == []


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_one_hot_target_at_two_tokens(k):
    draft, target = np.array([0.972281, 0.027719]), np.array([1.0, 0.0])
    for q in (target, target[::-1].copy()):
        rule = OptimalSelection(draft=draft, target=q, num_drafts=k, atoms="buckets")
        law, accept = output_distribution(rule)
        np.testing.assert_allclose(law, q, atol=1e-12)
        best = optimal_acceptance(draft=draft, target=q, num_drafts=k)
        assert accept == pytest.approx(best, abs=1e-12) and rule.acceptance() == pytest.approx(best, abs=1e-12)


def test_induced_of_split_tokens_reads_no_marker():
    # With two or more atoms the marker read another atom's level before the split tokens'
    # own overwrote it: x from the V-long path must equal x token by token (atom_of).
    from mspec_lab.bench import lm_like_pair

    rng = np.random.default_rng(2)
    for seed, temperature, k in [(0, 0.8, 2), (1, 1.5, 2), (2, 2.0, 4)]:
        draft, target = lm_like_pair(50272, seed=seed, draft_temperature=temperature)
        target = mspec.distribution_from_logits(np.log(target), top_p=0.9)  # zeros: the gathered path too
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
        assert rule.atoms.bucket_atoms > 0 and rule.atoms.token_atoms > 0  # buckets and split tokens
        ranked = np.flatnonzero(rule.atoms.ranks() >= 0)
        tokens = np.unique(np.concatenate([rng.choice(ranked, size=300), np.argsort(-target)[:20]]))
        one_by_one = [rule.induced_at(int(t)) for t in tokens]  # (before the V-long induced exists)
        np.testing.assert_allclose(rule.induced[tokens], one_by_one, rtol=1e-14, atol=0)


# --- 2. wide logits, many drafts: the root finder ------------------------------------------------------

def test_wide_logits_and_sixteen_drafts():
    # 8 N(0, 1) logits, V = 4096, K = 16: a piece of 5 tokens, 3.5e-17 long just below key
    # 2.5e-14, made g = 0 and u* = 0 there, and the Newton start divided by u*^(K - 2) = 0
    # (ZeroDivisionError in sample() for these drafts).
    vocab, k = 4096, 16
    rng = np.random.default_rng(116)
    draft, target = softmax(8 * rng.normal(size=vocab)), softmax(8 * rng.normal(size=vocab))
    rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
    rule.sample(np.array([615] * 8 + [1106] * 8), np.random.default_rng(0))
    tokens = np.concatenate([[615, 1106, 1696, 2094, 3451], extreme_tokens(rng, draft, target)])
    check_rule(rule, rng, law_tokens=tokens)
    # pairs whose pieces of slots and a pool realised wrong key laws (tiny pieces low in
    # key space: nu-mass 0 instead of 2.6e-10 for token 14 of seed 2, ...), silently
    for seed, token in [(2, 14), (5, 1625), (9, 3885), (10, 787), (22, 472), (38, 3155)]:
        pair = np.random.default_rng(seed)
        draft, target = softmax(8 * pair.normal(size=vocab)), softmax(8 * pair.normal(size=vocab))
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
        check_rule(rule, rng, samples=200, law_tokens=[token])
    # the same logits at other temperatures, both ways
    for seed in (0, 6):
        logits = 8 * np.random.default_rng(seed).normal(size=vocab)
        for draft, target in [(softmax(logits), softmax(logits / 2)), (softmax(logits / 2), softmax(logits))]:
            rule = OptimalSelection(draft=draft, target=target, num_drafts=k)
            check_rule(rule, rng, samples=500, law_tokens=extreme_tokens(rng, draft, target, count=10))


def test_power_root_where_powers_underflow():
    # u^K - g u = rhs near key 1 (u tiny): g and u*^(K - 2) underflow to 0 (a
    # ZeroDivisionError on the scalar path, NaN on the vector one); the roots must stay
    # finite and on their branch, with no warning. Where nothing underflows they must be
    # relatively exact however small u is (steps count relative to u, not to 1/2).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rhs, g, k, start in [(5e-324, 0.0, 16, 6e-21), (-1e-300, 1e-310, 16, 1e-21), (1e-310, 0.0, 9, 1e-35),
                                 (0.0, 5e-324, 12, 1e-27)]:
            u_star = (g / k) ** (1 / (k - 1))
            for rising in (True, False):
                for n in (1, 20):  # scalar and vector paths
                    z = power_root(np.full(n, rhs), g, k, rising, start)
                    assert np.all(np.isfinite(z)), (rhs, g, k, rising)
                    assert np.all((z >= min(u_star, start)) & (z <= max(u_star, start)))
        for k in (3, 4, 8, 9, 16):
            for base in (1e-3, 1e-10, 1e-20):
                g = k * base ** (k - 1)
                for rising, u, start in [(True, 1.5 * base, 2 * base), (False, 0.6 * base, 0.5 * base)]:
                    if u**k < 1e-290:  # (subnormal: the data has lost its digits)
                        continue
                    for n in (1, 20):
                        z = power_root(np.full(n, u**k - g * u), g, k, rising, start)
                        np.testing.assert_allclose(z, u, rtol=1e-9)


# --- 3. key laws at large V, exact laws at small V ---------------------------------------------------

def hostile_pair(rng, vocab):
    """A hostile ``(draft, target, label)``."""
    kind = int(rng.integers(0, 6))
    scale = float(rng.choice([1.0, 3.0, 8.0, 12.0, 20.0]))
    a = scale * rng.normal(size=vocab)
    b = a + float(rng.choice([0.0, 0.3, 3.0])) * rng.normal(size=vocab) if rng.random() < 0.7 \
        else scale * rng.normal(size=vocab)
    t_draft, t_target = np.exp(rng.uniform(np.log(0.01), np.log(5.0), size=2))

    def truncated(z, t):
        r = rng.random()
        if r < 0.3:
            return mspec.distribution_from_logits(z, temperature=t, top_k=int(rng.choice([1, 2, 5, max(1, vocab // 3)])))
        if r < 0.6:
            return mspec.distribution_from_logits(z, temperature=t, top_p=float(rng.choice([1e-6, 0.3, 0.9, 0.99])))
        return mspec.distribution_from_logits(z, temperature=t)

    if kind == 0:  # draft == target
        draft = truncated(a, t_draft)
        target, label = draft.copy(), "equal"
    elif kind == 1:  # q/p near-ties
        draft = truncated(a, t_draft)
        target = draft * (1 + float(rng.choice([1e-15, 1e-12, 1e-9])) * rng.normal(size=vocab))
        label = "ties"
    elif kind == 2:  # entries at 1e-300 and subnormal (subnormal: draft side only)
        draft, target = softmax(a / t_draft), softmax(b / t_target)
        for arr, values in ((draft, [1e-300, 5e-324, 3e-320, 1e-310]), (target, [1e-300, 1e-305, 1e-200])):
            if rng.random() < 0.7:
                idx = rng.choice(vocab, size=max(1, vocab // int(rng.choice([2, 10, 100]))), replace=False)
                arr[idx] = rng.choice(values, size=idx.size)
        label = "tiny"
    elif kind == 3:  # zeros on one side only (or both, elsewhere)
        draft, target = softmax(a / t_draft), softmax(b / t_target)
        side = int(rng.integers(0, 3))
        for which, arr in ((0, draft), (1, target)):
            if side in (which, 2):
                arr[rng.choice(vocab, size=max(1, vocab // 3), replace=False)] = 0.0
                if arr.sum() == 0:
                    arr[0] = 1.0
        label = "zeros"
    else:  # truncation and temperatures on both sides
        draft, target, label = truncated(a, t_draft), truncated(b, t_target), "truncated"
    return draft / draft.sum(), target / target.sum(), f"{label} (scale {scale}, T {t_draft:.3g} / {t_target:.3g})"


@pytest.mark.parametrize("vocab", [50272, 262144])
def test_key_laws_realise_the_induced_law_at_large_vocabulary(vocab):
    rng = np.random.default_rng(vocab)
    for trial in range(4 if vocab == 50272 else 1):
        draft, target, label = hostile_pair(rng, vocab)
        k = int(rng.integers(2, 17))
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="buckets")
        tokens = extreme_tokens(rng, draft, target)
        check_rule(rule, rng, samples=200, law_tokens=tokens)
        for _ in range(5):  # the selection step: a law over the K drafts
            tuple_ = rng.choice(tokens, size=k)
            probs = rule.selection_probabilities(tuple_)
            assert np.all(probs >= -1e-12) and probs.sum() == pytest.approx(1.0, abs=1e-9), label


# exact law by enumeration (V <= 6, V^K <= 20000); the first are inputs that broke the
# conditional law: keys of zero length (p below the resolution of the keys near 1), keys of a
# relative length error, a subnormal p (its density overflowed), x = 0 = q accepted.
DEGENERATE = [
    ([1.0, 7.210712632921982e-52], [1.0, 0.0], 9),
    ([0.999999999999998, 9.826535612018711e-17, 1.808800975345929e-15], [0.0, 1.0, 0.0], 5),
    ([1.0, 4.06754e-319], [1.0, 1e-305], 9),
    ([1.0, 4.1101555604546334e-22], [1.0, 0.0], 8),
    ([1.85866510217947e-25, 1.0, 1.6975651175749804e-57], [0.0, 1.0, 0.0], 5),
    ([0.9999999753099037, 2.469009629496366e-08, 0.0], [1.0, 1.0867624367174178e-18, 7.912660858733361e-47], 9),
]


@pytest.mark.parametrize("draft, target, k", DEGENERATE)
def test_exact_law_on_degenerate_key_laws(draft, target, k):
    draft, target = np.array(draft), np.array(target)
    rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="buckets")
    law, accept = output_distribution(rule)
    np.testing.assert_allclose(law, target, atol=1e-12)
    assert accept == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=k), abs=1e-12)


def test_exact_law_at_small_vocabulary():
    rng = np.random.default_rng(7)
    for trial in range(30):
        vocab = int(rng.integers(2, 7))
        k = int(rng.integers(1, 17))
        while vocab**k > (512 if trial % 10 else 4096):  # (V^K tuples at ~1 ms each)
            k -= 1
        draft, target, label = hostile_pair(rng, vocab)
        rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="buckets")
        law, accept = output_distribution(rule)
        np.testing.assert_allclose(law, target, atol=1e-12, err_msg=label)
        best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
        assert accept == pytest.approx(best, abs=1e-12) and rule.acceptance() == pytest.approx(best, abs=1e-12)
    # K = 1 at V = 4095: tokens late in key space, whose keys' lengths are off by rounding
    # (relatively), must still give a conditional law that sums to 1
    logits = 3 * np.random.default_rng(3).normal(size=4095)
    draft = mspec.distribution_from_logits(logits, temperature=1.4)
    target = mspec.distribution_from_logits(logits + np.random.default_rng(4).normal(size=4095), temperature=0.3)
    rule = OptimalSelection(draft=draft, target=target, num_drafts=1, atoms="buckets")
    late = np.argsort(-rule.rank)[:200]  # the last atoms in key space
    for t in late[draft[late] > 0]:
        dist, accept = rule.conditional([t])
        assert dist.sum() == pytest.approx(1.0, abs=1e-12) and 0.0 <= accept <= 1.0


# --- 4. the fuzz loop ----------------------------------------------------------------------------------

def test_fuzz_the_bucket_path():
    rng = np.random.default_rng(2025)
    plan = [2, 3, 4095, 4096, 4097] * 16 + [50272] * 8 + [262144] * 2
    for n, vocab in enumerate(plan):
        draft, target, label = hostile_pair(rng, vocab)
        k = int(rng.integers(1, 17))
        for atoms in ("buckets", "auto"):
            rule = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms=atoms)
            try:
                check_rule(rule, rng, samples=200, law_tokens=extreme_tokens(rng, draft, target, count=5))
                if vocab**k <= 1024:
                    np.testing.assert_allclose(output_distribution(rule)[0], target, atol=1e-12)
            except AssertionError as error:
                raise AssertionError(f"case {n}: V = {vocab}, K = {k}, atoms = {atoms}, {label}") from error


# --- 5. the guard: a fast-path result that fails its certificate --------------------------------------

@pytest.mark.parametrize("k", [2, 3, 4])
def test_forced_fallback_is_recorded_and_exact(k):
    # certify_tolerance < 0 fails every certificate: each piece of slots and a pool falls
    # back to the greedy tiling (checked in full), each spread to fact 5; each is recorded,
    # and the rule stays exact. With the default nothing falls back here.
    rng = np.random.default_rng(k)
    for trial in range(6):
        draft, target = rng.dirichlet(np.full(4, 0.6)), rng.dirichlet(np.full(4, 0.6))
        plain = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="buckets")
        forced = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="buckets", certify_tolerance=-1.0)
        law, accept = output_distribution(forced)
        np.testing.assert_allclose(law, target, atol=1e-12)
        assert accept == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=k), abs=1e-12)
        pool = [j for j in range(plain.blocks.size - 1) if isinstance(plain._piece(j), PoolPiece)]
        assert plain.fallbacks == []
        assert len([f for f in forced.fallbacks if "slots and pool -> greedy" in f]) == len(pool)
        assert all(forced.realisation(t) in ("greedy", "rest", "none") for t in range(4))
    # fact 6 (an optimum of 1, no sort) at V = 5000: its spread falls back to fact 5
    from mspec_lab.bench import lm_like_pair

    draft, target = lm_like_pair(5000, seed=0, draft_temperature=1.5)
    plain = OptimalSelection(draft=draft, target=target, num_drafts=8)
    forced = OptimalSelection(draft=draft, target=target, num_drafts=8, certify_tolerance=-1.0)
    assert plain.atoms.spread is not None and plain.fallbacks == []
    assert forced.atoms.spread is None and any(f.startswith("spread") for f in forced.fallbacks)
    check_rule(forced, rng, samples=200, law_tokens=extreme_tokens(rng, draft, target, count=10))
    assert any("-> greedy" in f for f in forced.fallbacks)


def test_lazy_pieces_are_certified_atom_by_atom():
    # A piece of more than ALL_EDGES_BELOW atoms solves its slot edges lazily: it is
    # certified by its ends, then each atom before its key law is used (sample, key laws,
    # the exact conditional law); forced to fail, it falls back to the greedy, recorded.
    from mspec_lab.bench import lm_like_pair

    draft, target = lm_like_pair(5000, seed=1, draft_temperature=1.5)
    rng = np.random.default_rng(5)
    tokens = extreme_tokens(rng, draft, target, count=20)
    plain = OptimalSelection(draft=draft, target=target, num_drafts=4, atoms="tokens")
    check_rule(plain, rng, samples=300, law_tokens=tokens)
    lazy = [pc for pc in plain._pieces.values() if isinstance(pc, PoolPiece) and pc.lazy]
    assert lazy and all(pc.n > ALL_EDGES_BELOW and pc.checked for pc in lazy)
    assert plain.fallbacks == []
    tuple_ = rng.choice(tokens, size=4)
    assert plain.conditional(tuple_)[0].sum() == pytest.approx(1.0, abs=1e-12)
    forced = OptimalSelection(draft=draft, target=target, num_drafts=4, atoms="tokens", certify_tolerance=-1.0)
    check_rule(forced, rng, samples=300, law_tokens=tokens)
    assert any("slots and pool -> greedy" in f for f in forced.fallbacks)
    assert not any(isinstance(pc, PoolPiece) for pc in forced._pieces.values())
    assert forced.conditional(tuple_)[0].sum() == pytest.approx(1.0, abs=1e-12)  # (another law given the drafts)
