"""The reference construction of "optimal" as the oracle of its fast path, on the same inputs.

``OptimalSelection.reference`` is the reading path of :mod:`mspec.schemes.optimal_selection`: every
token its own atom (the sort of fact 1) and each piece tiled greedily, token by token. Every
fast-path setting (:class:`~mspec.schemes.optimal_selection.FastPath`, ``atoms``, ``tiling``) must
agree with it on the hostile inputs of ``tests/strategies.py``:

* the acceptance (the optimum; the reference's equals the closed form too);
* where the atoms are tokens, the induced distribution ``x`` itself, and each drafted
  token's key law holds ``nu``-mass ``x_t`` and length ``p_t``;
* the vectorised greedy (runs of shells) and the reference's token-by-token greedy give the
  same selection probabilities for the same drafted tokens;
* every setting's exact output law (enumeration) is the target.

Paper notation: K i.i.d. drafts from p (``draft``), target q (``target``).
"""

import numpy as np
import pytest

from mspec.schemes.closed_form import optimal_acceptance
from mspec.schemes.exact import output_distribution
from mspec.schemes.optimal_selection import FastPath, OptimalSelection

from strategies import HOSTILE_FAMILIES, hostile_pair

#: the fast-path settings checked against the reference: name -> OptimalSelection options
#: (all optimal but "every-bucket-passes", the certificate's control: lossless, not optimal)
SETTINGS = {
    "default": {},
    "tokens-pool": {"atoms": "tokens"},
    "buckets": {"atoms": "buckets"},
    "fact-5-only": {"atoms": "buckets", "fast": FastPath(spread=False)},
    "every-bucket-passes": {"atoms": "buckets", "fast": FastPath(spread=False, bucket_margin=-1.0)},
    "rebucket-all": {"atoms": "buckets", "fast": FastPath(spread=False, sort_below=0)},
    "expand-all": {"atoms": "buckets", "fast": FastPath(expand_buckets="all")},
    "greedy-in-groups": {"atoms": "buckets", "fast": FastPath(max_depth=0)},
    "greedy-runs": {"atoms": "tokens", "tiling": "greedy"},
    "forced-fallbacks": {"atoms": "buckets", "certify_tolerance": -1.0},
}


def cases(seed: int, count: int, max_vocab: int = 5, max_drafts: int = 3):
    """Hostile ``(draft, target, K)`` of every family, seeded."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        family = HOSTILE_FAMILIES[i % len(HOSTILE_FAMILIES)]
        k = int(rng.integers(1, max_drafts + 1))
        draft, target = hostile_pair(rng, vocab=int(rng.integers(2, max_vocab + 1)), family=family, num_drafts=k)
        out.append((draft, target, k))
    return out


def key_law_masses(rule, token):
    """(length, nu-mass) of ``token``'s key law as the rule realises it."""
    k = rule.num_drafts
    law = rule.key_fragments(int(token))
    length = sum(w * (b - a) for a, b, w in law)
    mass = sum(w * ((1 - a) ** k - (1 - b) ** k) for a, b, w in law)
    return length, mass


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_setting_agrees_with_the_reference(name):
    for draft, target, k in cases(seed=sorted(SETTINGS).index(name), count=36):
        reference = OptimalSelection.reference(draft=draft, target=target, num_drafts=k)
        fast = OptimalSelection(draft=draft, target=target, num_drafts=k, **SETTINGS[name])
        best = reference.acceptance()
        assert best == pytest.approx(optimal_acceptance(draft=draft, target=target, num_drafts=k), abs=1e-12)
        if name == "every-bucket-passes":
            assert fast.acceptance() <= best + 1e-12
        else:
            assert fast.acceptance() == pytest.approx(best, abs=1e-12)
        if fast.atoms.token_atoms == fast.atoms.masses.size and fast.atoms.spread is None:
            # token atoms: the same x as the reference's (fact 1 has one optimum of this kind)
            np.testing.assert_allclose(fast.induced, reference.induced, rtol=1e-12, atol=1e-15)
        law, accept = output_distribution(fast)
        np.testing.assert_allclose(law, target, atol=1e-12)
        # (not optimal: the residual may output another drafted token, so P(Y is drafted)
        # can exceed the step-2 acceptance; at the optimum the two are equal)
        assert accept >= fast.acceptance() - 1e-12
        if name != "every-bucket-passes":
            assert accept == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("name", ["default", "tokens-pool", "greedy-runs"])
def test_key_laws_at_decoding_scale_match_the_reference(name):
    # V = 5000 (buckets from V = 4096, lazy pieces, runs of shells): the reference's x and
    # acceptance; every drafted token's key law has length p_t and nu-mass x_t.
    rng = np.random.default_rng(7)
    for family in ("lm", "truncated", "tiny"):
        k = 4
        draft, target = hostile_pair(rng, vocab=5000, family=family, num_drafts=k)
        reference = OptimalSelection.reference(draft=draft, target=target, num_drafts=k)
        fast = OptimalSelection(draft=draft, target=target, num_drafts=k, **SETTINGS[name])
        assert fast.acceptance() == pytest.approx(reference.acceptance(), abs=1e-12)
        drafted = np.unique(rng.choice(draft.size, size=40, p=draft))
        for t in drafted:
            length, mass = key_law_masses(fast, t)
            assert length == pytest.approx(draft[t], rel=1e-9, abs=1e-15)
            assert mass == pytest.approx(fast.induced[t], rel=1e-9, abs=1e-15)
        if name != "default":  # token atoms: x itself is the reference's
            np.testing.assert_allclose(fast.induced, reference.induced, rtol=1e-10, atol=1e-16)


def test_vectorised_greedy_gives_the_reference_selection_probabilities():
    # Runs of shells solve many windows at once; token by token is the reference. Given the
    # same drafted tokens, both select each draft with the same probability.
    rng = np.random.default_rng(11)
    checked = 0
    for draft, target, k in cases(seed=11, count=45, max_vocab=40, max_drafts=4):
        if k < 2:
            continue
        reference = OptimalSelection.reference(draft=draft, target=target, num_drafts=k)
        runs = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="tokens", tiling="greedy")
        for tokens in rng.choice(draft.size, size=(3, k), p=draft):
            np.testing.assert_allclose(runs.selection_probabilities(tokens),
                                       reference.selection_probabilities(tokens), atol=1e-12)
            checked += 1
    assert checked > 60


def test_a_wrong_fast_path_is_caught_by_the_oracle():
    # Control: a fast path whose key law of one token is cut in half differs from the
    # reference, so the comparisons above can fail.
    draft = target = np.array([0.5, 0.3, 0.2])  # x = q: one piece, every pair of tokens competes
    reference = OptimalSelection.reference(draft=draft, target=target, num_drafts=2)
    broken = OptimalSelection(draft=draft, target=target, num_drafts=2, atoms="tokens")
    realised = broken.key_fragments

    def cut_first(token):  # token 0's keys on the lower half of its law only
        law = realised(token)
        return [(a, a + 0.5 * (b - a), w) for a, b, w in law] if token == 0 else law

    broken.key_fragments = cut_first
    tokens = np.array([0, 1])
    assert abs(key_law_masses(broken, 0)[1] - reference.induced[0]) > 1e-3
    assert np.abs(broken.selection_probabilities(tokens) - reference.selection_probabilities(tokens)).max() > 1e-3


@pytest.mark.parametrize("temperature", [1.0, 1.5])
def test_runs_of_shells_tile_as_the_reference_does(temperature):
    # LM-shaped pairs whose largest piece holds ~3000 tokens: deep inside it the fast greedy
    # solves runs of shells together. Every sampled token's key law has the reference's
    # length and nu-mass, and drafts of them are selected with the reference's probabilities.
    from mspec.schemes.optimal_selection.runs import _RunPiece
    from mspec.synthetic import lm_like_pair

    k = 4
    draft, target = lm_like_pair(3000, seed=1, draft_temperature=temperature)
    reference = OptimalSelection.reference(draft=draft, target=target, num_drafts=k)
    runs = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="tokens", tiling="greedy")
    j = int(np.argmax(np.diff(runs.blocks)))
    piece = runs.order[runs.blocks[j]:runs.blocks[j + 1]]
    tokens = piece[np.linspace(0, piece.size - 1, 40).astype(int)]
    for t in tokens:
        assert key_law_masses(runs, t) == pytest.approx(key_law_masses(reference, t), abs=1e-13)
        assert key_law_masses(runs, t)[1] == pytest.approx(reference.induced[t], abs=1e-13)
    assert isinstance(runs._piece(j), _RunPiece) and runs._piece(j).runs > 0
    rng = np.random.default_rng(3)
    for drafted in rng.choice(tokens, size=(6, k)):
        np.testing.assert_allclose(runs.selection_probabilities(drafted),
                                   reference.selection_probabilities(drafted), atol=1e-11)
