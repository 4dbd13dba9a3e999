"""The reference of "optimal" (``reference.py``) as the oracle of its fast path, on the same inputs.

``OptimalSelection.reference`` builds :class:`~mspec.schemes.optimal_reference.
ReferenceOptimalSelection`: plain floats, the sort, the isotonic regression and the greedy
tiling token by token, sharing no code with the fast path. First it is checked on its own
(lossless by enumeration, optimal, ``select`` draws from ``selection_law``); then every
fast-path setting (:class:`~mspec.fast.optimal_selection.FastPath`, ``atoms``,
``tiling``) must agree with it on the hostile inputs of ``tests/strategies.py``:

* the acceptance (the optimum, the closed form);
* where the atoms are tokens, the induced distribution ``x`` itself;
* by enumeration of every draft tuple: the selection step realises ``x`` (the reference's,
  for token atoms), the output law is the target, and where the fast path tiles by the
  greedy, the joint law of (drafted tokens, selected token) is the reference's;
* at decoding scale, each drafted token's key law (length ``p_t``, ``nu``-mass ``x_t``).

Broken controls show that each comparison can fail. Paper notation: K i.i.d. drafts from p
(``draft``), target q (``target``).
"""

import itertools
import math

import numpy as np
import pytest

from mspec.schemes.closed_form import optimal_acceptance
from mspec.schemes.exact import output_distribution
from mspec.fast.optimal_selection import FastPath, OptimalSelection
from mspec.schemes.optimal_reference import ReferenceOptimalSelection, draw_key

from sampling import chi2_pvalue
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
#: the settings that tile by the greedy, token atoms: the reference's key sets themselves
GREEDY = ("greedy-runs",)


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
    if isinstance(rule, ReferenceOptimalSelection):
        law = [(a, b, 1.0) for a, b in rule.key_set(int(token))]
    else:
        law = rule.key_fragments(int(token))
    length = sum(w * (b - a) for a, b, w in law)
    mass = sum(w * ((1 - a) ** k - (1 - b) ** k) for a, b, w in law)
    return length, mass


def tuples_with_weights(rule):
    """Every draft tuple with ``P(tuple)``."""
    support = np.flatnonzero(rule.draft > 0)
    for tokens in itertools.product(support, repeat=rule.num_drafts):
        yield np.array(tokens), math.prod(float(rule.draft[t]) for t in tokens)


def enumerated_selection(rule, reference=None):
    """By enumeration: the law of the selected token, ``(V,)``, and where a ``reference`` is
    given, ``sum_t P(t) sum_y |law(y | t) - law_ref(y | t)|`` (twice the total variation
    between the joint laws of drafted and selected tokens)."""
    selected, gap = np.zeros(rule.vocab_size), 0.0
    for tokens, weight in tuples_with_weights(rule):
        law = rule.selection_law(tokens)
        for y, prob in law.items():
            selected[y] += weight * prob
        if reference is not None:
            other = reference.selection_law(tokens)
            gap += weight * sum(abs(law.get(y, 0.0) - other.get(y, 0.0)) for y in set(law) | set(other))
    return selected, gap


# --- the reference on its own -------------------------------------------------------------------

def test_the_reference_is_lossless_and_optimal_by_enumeration():
    for draft, target, k in cases(seed=101, count=54, max_vocab=6, max_drafts=4):
        reference = OptimalSelection.reference(draft=draft, target=target, num_drafts=k)
        assert isinstance(reference, ReferenceOptimalSelection)
        best = optimal_acceptance(draft=draft, target=target, num_drafts=k)
        assert reference.acceptance() == pytest.approx(best, abs=1e-12)
        selected, _ = enumerated_selection(reference)
        np.testing.assert_allclose(selected, reference.induced, atol=1e-12)  # keys realise x
        law, accept = output_distribution(reference)
        np.testing.assert_allclose(law, target, atol=1e-12)
        assert accept == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("broken", [False, True])
def test_reference_select_draws_from_its_selection_law(broken):
    # Control: the largest key winning instead of the smallest is caught.
    draft = np.array([0.35, 0.25, 0.2, 0.12, 0.08])
    target = np.array([0.3, 0.27, 0.2, 0.13, 0.1])  # one piece: the three drafts compete
    rule = ReferenceOptimalSelection(draft=draft, target=target, num_drafts=3)
    tokens = np.array([0, 2, 4])
    law = rule.selection_law(tokens)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-14)
    rng = np.random.default_rng(5)
    counts = np.zeros(draft.size)
    for _ in range(20_000):
        if broken:
            keys = [draw_key(rule.key_set(t), rng) for t in tokens]
            counts[tokens[int(np.argmax(keys))]] += 1
        else:
            counts[rule.select(tokens, rng)] += 1
    expected = np.array([law.get(y, 0.0) for y in range(draft.size)])
    if broken:
        assert chi2_pvalue(counts, expected) < 1e-6
    else:
        assert chi2_pvalue(counts, expected) > 1e-3


# --- every fast-path setting against the reference ------------------------------------------------

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
        token_atoms = fast.atoms.token_atoms == fast.atoms.masses.size and fast.atoms.spread is None
        if token_atoms:  # the same x as the reference's (fact 1 has one optimum of this kind)
            np.testing.assert_allclose(fast.induced, reference.induced, rtol=1e-12, atol=1e-15)
        selected, gap = enumerated_selection(fast, reference if name in GREEDY else None)
        np.testing.assert_allclose(selected, reference.induced if token_atoms else fast.induced, atol=1e-12)
        assert gap <= 1e-12  # (the greedy: the reference's key sets, so its selection law)
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


@pytest.mark.parametrize("name", GREEDY)
def test_the_fast_greedy_selects_as_the_reference_does(name):
    # Given the same drafted tokens, the fast path's greedy (runs of shells solved together,
    # with its rounding guards) selects each token with the reference's probability.
    rng = np.random.default_rng(11)
    checked = 0
    for draft, target, k in cases(seed=11, count=45, max_vocab=40, max_drafts=4):
        if k < 2:
            continue
        reference = OptimalSelection.reference(draft=draft, target=target, num_drafts=k)
        fast = OptimalSelection(draft=draft, target=target, num_drafts=k, **SETTINGS[name])
        for tokens in rng.choice(draft.size, size=(3, k), p=draft):
            law, other = fast.selection_law(tokens), reference.selection_law(tokens)
            assert law.keys() == other.keys()
            np.testing.assert_allclose([law[y] for y in law], [other[y] for y in law], atol=1e-12)
            checked += 1
    assert checked > 60


@pytest.mark.parametrize("broken", ["key-law", "induced"])
def test_a_wrong_fast_path_is_caught_by_the_oracle(broken):
    # Controls: a fast path whose key law of one token lost a fragment, or whose x moves mass
    # between two tokens, differs from the reference, so the comparisons above can fail.
    draft = target = np.array([0.5, 0.3, 0.2])  # x = q: one piece, every pair of tokens competes
    reference = OptimalSelection.reference(draft=draft, target=target, num_drafts=2)
    fast = OptimalSelection(draft=draft, target=target, num_drafts=2, atoms="tokens", tiling="greedy")
    if broken == "key-law":
        realised = fast.key_fragments

        def drop_one(token):  # token 0's keys on its first fragment only
            law = realised(token)
            return law[:1] if token == 0 else law

        assert len(realised(0)) > 1
        fast.key_fragments = drop_one
        assert abs(key_law_masses(fast, 0)[1] - reference.induced[0]) > 1e-3
        assert enumerated_selection(fast, reference)[1] > 1e-3
    else:
        fast.induced[:2] += [0.01, -0.01]
        assert np.abs(fast.induced - reference.induced).max() > 1e-3
        assert np.abs(enumerated_selection(fast)[0] - fast.induced).max() > 1e-3
        assert np.abs(output_distribution(fast)[0] - target).max() > 1e-3


@pytest.mark.parametrize("temperature", [1.0, 1.5])
def test_runs_of_shells_tile_as_the_reference_does(temperature):
    # LM-shaped pairs whose largest piece holds ~3000 tokens: deep inside it the fast greedy
    # solves runs of shells together. Every sampled token's key law has the reference's
    # length and nu-mass, and drafts of them are selected with the reference's probabilities.
    from mspec.fast.optimal_selection.runs import RunPiece
    from mspec_lab.synthetic import lm_like_pair

    k = 4
    draft, target = lm_like_pair(3000, seed=1, draft_temperature=temperature)
    reference = OptimalSelection.reference(draft=draft, target=target, num_drafts=k)
    runs = OptimalSelection(draft=draft, target=target, num_drafts=k, atoms="tokens", tiling="greedy")
    np.testing.assert_array_equal(runs.order, reference.order)
    j = int(np.argmax(np.diff(runs.blocks)))
    piece = runs.order[runs.blocks[j]:runs.blocks[j + 1]]
    tokens = piece[np.linspace(0, piece.size - 1, 40).astype(int)]
    for t in tokens:
        assert key_law_masses(runs, t) == pytest.approx(key_law_masses(reference, t), abs=1e-13)
        assert key_law_masses(reference, t)[1] == pytest.approx(reference.induced[t], abs=1e-13)
    assert isinstance(runs._piece(j), RunPiece) and runs._piece(j).runs > 0
    rng = np.random.default_rng(3)
    for drafted in rng.choice(tokens, size=(6, k)):
        law, other = runs.selection_law(drafted), reference.selection_law(drafted)
        np.testing.assert_allclose([law[y] for y in law], [other[y] for y in law], atol=1e-11)
