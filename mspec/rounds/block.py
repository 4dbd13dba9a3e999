"""Block verification for one draft (Sun et al., "Block verification accelerates speculative
decoding", ICLR 2025): the drafted block is verified jointly, not token by token.

Notation: the drafted block ``x_1..x_L``; ``p_i = p(. | x_<i)`` the draft's and
``q_i = q(. | x_<i)`` the target's next-token laws after ``i - 1`` drafted tokens (``q_{L+1}``
after the whole block). Token-by-token verification accepts ``x_i`` with probability
``min(1, q_i(x_i) / p_i(x_i))`` and stops at the first rejection. Block verification carries
the likelihood ratio along the block, capped at 1,

    w_0 = 1,     w_i = min(1, w_{i-1} q_i(x_i) / p_i(x_i)),

and keeps the longest prefix ``x_<=i`` that passes a coin with probability

    h_L = w_L,     h_i = r_i / (r_i + 1 - w_i)   (i < L),
    r_i = sum_y max(w_i q_{i+1}(y) - p_{i+1}(y), 0),

checked from the end of the block backwards (``i = L, L - 1, ..., 1``; ``i = 0`` always
passes). After ``x_<=i`` it emits one more token: from ``q_{L+1}`` if ``i = L``, else from
``max(w_i q_{i+1} - p_{i+1}, 0)`` normalised. Sun et al. prove it lossless and optimal in
expected tokens per round among all rules for one draft; :mod:`mspec.rounds.optimum` checks both on
tiny models by enumeration (its round optimum at ``K = 1`` is this rule's value).

Deviation (marked): where ``r_i = 0`` and ``w_i = 1`` the coin's ``0 / 0`` is taken as 0
(the residual is empty: that prefix never ends the round there).
"""

from __future__ import annotations

import numpy as np

from mspec.rounds.rule import RoundOutcome, RoundRule, eos_set


def _ratios(drafted: np.ndarray, draft_probs: np.ndarray, target_probs: np.ndarray):
    """``w_0..w_L`` and ``h_0..h_L`` of the module docstring, and the residual laws."""
    length = drafted.size
    w = np.ones(length + 1)
    for i in range(1, length + 1):
        x, p = drafted[i - 1], float(draft_probs[i - 1, drafted[i - 1]])
        carried = w[i - 1] * float(target_probs[i - 1, x])
        w[i] = 0.0 if p <= 0.0 else (1.0 if carried >= p else carried / p)  # (no overflow for a subnormal p)
    h = np.ones(length + 1)
    residuals = []
    for i in range(length):
        excess = np.maximum(w[i] * target_probs[i] - draft_probs[i], 0.0)
        r = float(excess.sum())
        # (deviation: an empty residual -- w_i q_{i+1} <= p_{i+1} everywhere -- is reached
        # only by rounding; the target's own law stands in for it)
        residuals.append(excess / r if r > 0.0 else target_probs[i])
        h[i] = r / (r + 1.0 - w[i]) if r + 1.0 - w[i] > 0.0 else 0.0  # (deviation: 0 / 0 -> 0)
    h[length] = w[length]
    h[0] = 1.0  # the empty prefix always stands
    return w, h, residuals


def _stop_probabilities(h: np.ndarray) -> np.ndarray:
    """``P(the round keeps exactly x_<=i)``, ``i = 0..L``: the coins ``h`` checked from the end."""
    stops, remaining = np.zeros(h.size), 1.0  # remaining: P(every longer prefix failed its coin)
    for i in range(h.size - 1, -1, -1):
        stops[i] = remaining * h[i]
        remaining -= stops[i]
    return stops


def block_verification_law(drafted, draft_probs, target_probs) -> dict[tuple[int, int], float]:
    """Exact law of what block verification emits for one drafted block.

    Args:
        drafted: ``(L,)`` drafted token ids.
        draft_probs: ``(L, V)``: row ``i`` is the draft's law of token ``i + 1`` (0-based
            ``i``) after the drafted tokens before it.
        target_probs: ``(L + 1, V)``: the target's laws after ``0..L`` drafted tokens.

    Returns:
        ``{(accepted, token): probability}``: the round keeps ``drafted[:accepted]`` and then
        emits ``token``.
    """
    drafted = np.asarray(drafted, dtype=np.int64)
    draft_probs, target_probs = np.asarray(draft_probs, float), np.asarray(target_probs, float)
    length = drafted.size
    _, h, residuals = _ratios(drafted, draft_probs, target_probs)
    law: dict[tuple[int, int], float] = {}
    for i, stop_here in enumerate(_stop_probabilities(h)):
        if stop_here <= 0.0:
            continue
        after = target_probs[length] if i == length else residuals[i]
        for y in np.flatnonzero(after > 0.0):
            law[(i, int(y))] = law.get((i, int(y)), 0.0) + stop_here * float(after[y])
    return law


def block_verify(drafted, draft_probs, target_probs, rng: np.random.Generator) -> tuple[int, int]:
    """One round of block verification: ``(accepted, token)`` as in
    :func:`block_verification_law`, drawn with ``rng``."""
    drafted = np.asarray(drafted, dtype=np.int64)
    draft_probs, target_probs = np.asarray(draft_probs, float), np.asarray(target_probs, float)
    length = drafted.size
    _, h, residuals = _ratios(drafted, draft_probs, target_probs)
    for i in range(length, -1, -1):
        if i == 0 or rng.random() < h[i]:
            after = target_probs[length] if i == length else residuals[i]
            return i, int(rng.choice(after.size, p=after))
    raise AssertionError("unreachable: the empty prefix always stands")


def expected_block_tokens(drafted, draft_probs, target_probs, *, eos_token_id=None) -> float:
    """Exact expected number of tokens block verification emits for one drafted block (the
    kept prefix and one more token), with the round's randomness averaged out; arguments as
    for :func:`block_verification_law`. An end-of-sequence token (``eos_token_id``: an id or
    ids) ends the count, as in :func:`mspec.lm.decoding.expected_round_tokens`, which scores a
    round of the per-position schemes the same way."""
    eos = eos_set(eos_token_id)
    drafted = np.asarray(drafted, dtype=np.int64)
    first_eos = next((i for i, t in enumerate(drafted.tolist()) if t in eos), drafted.size)
    _, h, _ = _ratios(drafted, np.asarray(draft_probs, float), np.asarray(target_probs, float))
    kept = np.arange(drafted.size + 1)
    return float(_stop_probabilities(h) @ np.where(kept > first_eos, first_eos + 1, kept + 1))


class BlockRule(RoundRule):
    """Block verification as a :class:`~mspec.rounds.rule.RoundRule` (one draft: K = 1)."""

    name = "block"

    def _law(self, drafted, draft_probs, target_probs) -> dict[tuple[int, ...], float]:
        block = drafted[0]
        law = block_verification_law(block, draft_probs[0], target_probs[0])
        return {tuple(int(y) for y in block[:kept]) + (token,): mass for (kept, token), mass in law.items()}

    def _verify(self, drafted, draft_probs, target_probs, rng) -> RoundOutcome:
        kept, token = block_verify(drafted[0], draft_probs[0], target_probs[0], rng)
        return RoundOutcome.of(drafted, [*drafted[0, :kept], token], [0])

    def _expected_tokens(self, drafted, draft_probs, target_probs, eos) -> float:
        return expected_block_tokens(drafted[0], draft_probs[0], target_probs[0], eos_token_id=list(eos))
