"""Round rules at decoding scale: traversal and selected-block verification on the hostile
families of tests/strategies.py at V = 50272, K = 8 drafted blocks of L = 3 tokens.

The models are context-free (the same draft law p and target law q after every prefix), so
a lossless round emits a first token with law q whatever else happens; many rounds with
fresh drafts test exactly that (chi-square on 20 cells of equal target mass, tokens sorted by
q / p), and the same counts against the draft's law p must fail where p and q differ (the
test has power).
Every round also checks what a decoder relies on: tokens inside the vocabulary and inside the
target's support, the rows returned hold the kept prefix, and the exact scorer lies in
[1, L + 1]. Paper notation: draft p, target q.
"""

import numpy as np
import pytest
from scipy.stats import chisquare
from strategies import HOSTILE_FAMILIES, hostile_pair

from mspec.rounds.selected_block import expected_selected_block_tokens, selected_block_verify
from mspec_lab.synthetic import OPT_VOCAB_SIZE
from mspec.rounds.traversal import expected_traversal_tokens, traversal_verify

K, L, ROUNDS = 8, 3, 400
RULES = {"traversal": (traversal_verify, expected_traversal_tokens),
         "selected-block": (selected_block_verify, expected_selected_block_tokens)}


def cells_of(draft: np.ndarray, target: np.ndarray, cells: int = 20) -> np.ndarray:
    """A cell per token: the tokens sorted by ``q / p`` (where the two laws differ most) and
    cut into ``cells`` groups of equal target mass; tokens the target rules out get cell -1."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # (subnormal p: inf)
        ratio = np.where(draft > 0, target / draft, np.inf)
    order = np.argsort(ratio, kind="stable")
    before = np.cumsum(target[order]) - target[order]  # target mass of the tokens sorted before
    cell = np.empty(target.size, dtype=np.int64)
    cell[order] = np.minimum((before * cells).astype(np.int64), cells - 1)
    cell[target == 0] = -1
    return cell


def binned_pvalue(counts: np.ndarray, law: np.ndarray, cell: np.ndarray) -> float:
    """Chi-square p-value of ``counts`` against ``law``, both summed per cell of ``cell``
    (cell -1: the tokens outside the target's support); 0 when a cell the law gives no
    mass holds a count, 1 when one cell holds all the mass."""
    n_cells = cell.max() + 2
    obs = np.bincount(cell + 1, weights=counts, minlength=n_cells)
    exp = counts.sum() * np.bincount(cell + 1, weights=law, minlength=n_cells)
    if np.any(obs[exp == 0] > 0):
        return 0.0
    keep = exp > 0
    if keep.sum() < 2:
        return 1.0
    with np.errstate(over="ignore"):  # a cell of subnormal expected mass: p-value 0
        return chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("family", HOSTILE_FAMILIES)
def test_first_token_has_the_target_law_at_decoding_scale(rule, family):
    verify, score = RULES[rule]
    rng = np.random.default_rng([HOSTILE_FAMILIES.index(family), len(rule)])
    draft, target = hostile_pair(rng, vocab=OPT_VOCAB_SIZE, family=family)
    draft_probs = np.broadcast_to(draft, (K, L, draft.size))
    target_probs = np.broadcast_to(target, (K, L + 1, draft.size))
    counts = np.zeros(draft.size)
    for r in range(ROUNDS):
        drafted = rng.choice(draft.size, size=(K, L), p=draft)
        emitted, rows = verify(drafted, draft_probs, target_probs, rng)
        assert 1 <= len(emitted) <= L + 1 and all(0 <= y < draft.size for y in emitted)
        assert target[emitted[-1]] > 0.0  # the last token: never one the target rules out
        kept = len(emitted) - 1
        assert rows and all(list(drafted[i, :kept]) == emitted[:-1] for i in rows)
        counts[emitted[0]] += 1
        if r < 10:  # the exact scorer (slower: the selection law of every node)
            assert 1.0 <= score(drafted, draft_probs, target_probs) <= L + 1 + 1e-12
    assert counts[target == 0].sum() == 0
    cell = cells_of(draft, target)
    assert binned_pvalue(counts, target, cell) > 1e-4
    if 0.5 * np.abs(draft - target).sum() > 0.3:  # power: the draft's own law is rejected
        assert binned_pvalue(counts, draft, cell) < 1e-4
