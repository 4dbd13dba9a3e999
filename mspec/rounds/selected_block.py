"""Selected-block verification for K drafted blocks: at each drafted prefix, select one of the
drafts' next tokens with an optimal selection law, then verify the selected block jointly.

Notation (the paper's letters): the draft model ``p``, the target ``q``. This is the
canonical decomposition of the paper (select one draft with law ``p_I``, then one
single-draft step) lifted from tokens to blocks: the *selection* runs position by position
down the tree of drafts, the *verification* is block verification of the one selected block
(:mod:`mspec.rounds.block`, Sun et al., ICLR 2025).

**Selection.** At a drafted prefix ``u`` that ``n`` of the K drafts share, their next tokens
are ``n`` i.i.d. draws from ``p(. | u)``. A two-step scheme (``"optimal"`` by default: the
full-vocabulary optimal selection of :mod:`mspec.fast.optimal_selection`) picks one of them, ``y``;
the selected token's law is the scheme's induced distribution ``mu_u = p_I`` (with ``n = 1``,
``mu_u = p(. | u)``). The walk moves to ``uy``, where the drafts holding ``y`` share the
prefix, and goes on to depth ``L``: one selected block.

**Verification.** Block verification of the selected block with the draft laws ``mu_u`` in
place of ``p(. | u)``. Lossless because block verification is lossless for any drafting
process whose next token, given everything the verifier has seen, has a known law: at ``u``
that law is ``mu_u`` (the drafts through ``u`` continue i.i.d. from ``p(. | u)`` whatever the
selection above ``u`` did, since it looked only at shallower tokens).

**Value.** For one draft it is block verification (``mu = p``); for blocks of one token it
is the selection scheme itself (select with ``p_I``, accept with ``min(1, q / p_I)``, else the
residual). In between it keeps every token the per-position scheme keeps on the same
selected path -- block verification never keeps fewer tokens than token-by-token
verification of the same draft -- so it is at least the per-position value of its scheme;
the package's tests check both, and the law, by enumeration.
"""

from __future__ import annotations

import numpy as np

from mspec.rounds.block import block_verification_law, block_verify, expected_block_tokens
from mspec.rounds.rule import RoundOutcome, RoundRule
from mspec.registry import make_scheme

__all__ = ["SELECTION_SCHEMES", "SelectedBlockRule", "expected_selected_block_tokens", "selected_block_law", "selected_block_verify"]

#: two-step schemes (select with a known induced law) that can select at each prefix
SELECTION_SCHEMES = ("optimal", "is-ratio", "canonical")


def _selection(tokens: np.ndarray, draft: np.ndarray, target: np.ndarray, scheme: str):
    """``({y: P(select y)}, mu)`` at one prefix: the selection law given the drafted
    ``tokens`` and the selected token's law ``mu`` (``(V,)``)."""
    if tokens.size == 1:
        return {int(tokens[0]): 1.0}, draft
    rule = make_scheme(scheme, draft=draft, target=target, num_drafts=int(tokens.size))
    return rule.selection_law(rule.check_tokens(tokens)), np.asarray(rule.induced, dtype=float)


def _paths(drafted, draft_probs, target_probs, scheme: str):
    """Every selected block with its probability: ``[(probability, rows, mu (L, V))]``,
    ``rows`` the drafts holding the whole block."""
    length = drafted.shape[1]
    out = []

    def down(rows, depth, prob, mus):
        if depth == length:
            out.append((prob, rows, np.array(mus)))
            return
        law, mu = _selection(drafted[rows, depth], draft_probs[rows[0], depth], target_probs[rows[0], depth], scheme)
        for y, py in law.items():
            if py > 0.0:
                down([r for r in rows if drafted[r, depth] == y], depth + 1, prob * py, mus + [mu])

    down(list(range(drafted.shape[0])), 0, 1.0, [])
    return out


def _check(drafted, draft_probs, target_probs, scheme):
    if scheme not in SELECTION_SCHEMES:
        raise ValueError(f"`scheme` must be one of {SELECTION_SCHEMES} (a scheme with a known induced law), "
                         f"got {scheme!r}")
    return (np.asarray(drafted, dtype=np.int64), np.asarray(draft_probs, dtype=float),
            np.asarray(target_probs, dtype=float))


def selected_block_law(drafted, draft_probs, target_probs, *, scheme: str = "optimal") -> dict[tuple[int, ...], float]:
    """Exact law of what selected-block verification emits for one round.

    Args:
        drafted: ``(K, L)`` drafted token ids, K identical drafts.
        draft_probs: ``(K, L, V)``: the draft's law of each drafted token after the tokens
            before it (rows of drafts with the same prefix are the same law).
        target_probs: ``(K, L + 1, V)``: the target's laws after ``0..L`` tokens of each draft.
        scheme: the selection at each prefix, one of :data:`SELECTION_SCHEMES`.

    Returns:
        ``{emitted: probability}``: a kept prefix of the selected block, then one more token.
    """
    drafted, draft_probs, target_probs = _check(drafted, draft_probs, target_probs, scheme)
    law: dict[tuple[int, ...], float] = {}
    for prob, rows, mu in _paths(drafted, draft_probs, target_probs, scheme):
        block = drafted[rows[0]]
        for (kept, token), mass in block_verification_law(block, mu, target_probs[rows[0]]).items():
            w = tuple(int(y) for y in block[:kept]) + (token,)
            law[w] = law.get(w, 0.0) + prob * mass
    return law


def selected_block_verify(drafted, draft_probs, target_probs, rng: np.random.Generator, *,
                          scheme: str = "optimal") -> tuple[list[int], list[int]]:
    """One round, drawn with ``rng``; arguments as for :func:`selected_block_law`.

    Returns:
        ``(emitted, rows)``: the kept prefix of the selected block and one more token, and
        the drafts holding the kept prefix.
    """
    drafted, draft_probs, target_probs = _check(drafted, draft_probs, target_probs, scheme)
    rows, mus = list(range(drafted.shape[0])), []
    for depth in range(drafted.shape[1]):
        law, mu = _selection(drafted[rows, depth], draft_probs[rows[0], depth], target_probs[rows[0], depth], scheme)
        tokens = list(law)
        y = tokens[int(rng.choice(len(tokens), p=np.array([law[t] for t in tokens]) / sum(law.values())))]
        rows = [r for r in rows if drafted[r, depth] == y]
        mus.append(mu)
    block = drafted[rows[0]]
    kept, token = block_verify(block, np.array(mus), target_probs[rows[0]], rng)
    holding = [r for r in range(drafted.shape[0]) if np.array_equal(drafted[r, :kept], block[:kept])]
    return [int(y) for y in block[:kept]] + [token], holding


def expected_selected_block_tokens(drafted, draft_probs, target_probs, *, scheme: str = "optimal",
                                   eos_token_id=None) -> float:
    """Exact expected number of tokens one round emits, the selection and the verification
    coins averaged out; an end-of-sequence token ends the count as in
    :func:`mspec.rounds.block.expected_block_tokens`."""
    drafted, draft_probs, target_probs = _check(drafted, draft_probs, target_probs, scheme)
    return sum(prob * expected_block_tokens(drafted[rows[0]], mu, target_probs[rows[0]], eos_token_id=eos_token_id)
               for prob, rows, mu in _paths(drafted, draft_probs, target_probs, scheme))


class SelectedBlockRule(RoundRule):
    """Selected-block verification as a :class:`~mspec.rounds.rule.RoundRule` (K identical
    drafts), selecting with ``scheme``, one of :data:`SELECTION_SCHEMES`."""

    name = "selected-block"
    takes_scheme = True

    def __init__(self, *, scheme: str = "optimal", num_drafts: int):
        super().__init__(num_drafts=num_drafts)
        self.scheme = scheme

    def _law(self, drafted, draft_probs, target_probs) -> dict[tuple[int, ...], float]:
        return selected_block_law(drafted, draft_probs, target_probs, scheme=self.scheme)

    def _verify(self, drafted, draft_probs, target_probs, rng) -> RoundOutcome:
        return RoundOutcome.of(drafted, *selected_block_verify(drafted, draft_probs, target_probs, rng,
                                                               scheme=self.scheme))

    def _expected_tokens(self, drafted, draft_probs, target_probs, eos) -> float:
        return expected_selected_block_tokens(drafted, draft_probs, target_probs, scheme=self.scheme,
                                              eos_token_id=list(eos))
