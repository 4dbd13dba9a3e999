"""The interface every round rule implements: its exact law, one verified round, and its
expected number of tokens, all over the arrays of one round.

A round with K drafted blocks of L tokens is given by three numpy arrays (the paper's
letters: draft ``p``, target ``q``):

* ``drafted`` ``(K, L)`` int: the drafted token ids, row ``i`` draft ``i``;
* ``draft_probs`` ``(K, L, V)``: ``draft_probs[i, j]`` is the law ``p_i`` that draft ``i``'s
  token ``j`` was drawn from, after its tokens before it;
* ``target_probs`` ``(K, L + 1, V)``: ``target_probs[i, j]`` is ``q`` after the first ``j``
  tokens of draft ``i`` (``j = L``: after the whole block, for the bonus token).

A round emits a string ``w``: a kept prefix of some drafted block, then one more token (a
correction, or the bonus token after a whole block), so ``1 <= |w| <= L + 1``. The rules are
made by name with :func:`mspec.rounds.registry.make_round_rule`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

__all__ = ["RoundOutcome", "RoundRule", "check_round", "eos_set"]


@dataclass(frozen=True)
class RoundOutcome:
    """What one verified round emits.

    Attributes:
        tokens: the emitted string: the kept drafted tokens, then one more token.
        accepted: how many drafted tokens were kept (``len(tokens) - 1``, 0..L).
        rows: the drafts that hold the kept prefix (at least one).
        alive_counts: for each position reached (``min(accepted + 1, L)`` of them), how many
            drafts held the kept tokens before it.
    """

    tokens: tuple[int, ...]
    accepted: int
    rows: tuple[int, ...]
    alive_counts: tuple[int, ...]

    @classmethod
    def of(cls, drafted: np.ndarray, tokens, rows) -> RoundOutcome:
        """The outcome of emitting ``tokens`` with ``rows`` holding the kept prefix."""
        kept = len(tokens) - 1
        held = drafted[rows[0]]
        alive = tuple(int(np.sum(np.all(drafted[:, :j] == held[:j], axis=1)))
                      for j in range(min(kept + 1, drafted.shape[1])))
        return cls(tuple(int(t) for t in tokens), kept, tuple(int(r) for r in rows), alive)


def check_round(drafted, draft_probs, target_probs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three arrays of a round as numpy arrays; a ``ValueError`` unless their shapes fit."""
    drafted, draft_probs, target_probs = np.asarray(drafted), np.asarray(draft_probs), np.asarray(target_probs)
    if not (drafted.ndim == 2 and draft_probs.ndim == target_probs.ndim == 3
            and draft_probs.shape[:2] == drafted.shape and draft_probs.shape[2] == target_probs.shape[2]
            and target_probs.shape[:2] == (drafted.shape[0], drafted.shape[1] + 1)):
        raise ValueError(
            f"expected drafted (K, L), draft_probs (K, L, V) and target_probs (K, L + 1, V); got "
            f"{drafted.shape}, {draft_probs.shape} and {target_probs.shape}")
    return drafted, draft_probs, target_probs


def eos_set(eos_token_id) -> frozenset[int]:
    """End-of-sequence ids (``None``, an id or ids) as a set."""
    return frozenset() if eos_token_id is None else frozenset(np.atleast_1d(eos_token_id).tolist())


class RoundRule:
    """A lossless rule that verifies one round of K drafted blocks against the target.

    Subclasses implement ``_law(drafted, draft_probs, target_probs)``, ``_verify(..., rng)``
    and ``_expected_tokens(..., eos)`` (``eos`` a set of ids) on the checked arrays.

    Attributes:
        num_drafts: K, the drafts per round the rule was made for.
    """

    #: the name in :data:`mspec.rounds.registry.ROUND_RULES`
    name: ClassVar[str] = ""
    #: whether the rule selects with a token-level scheme (``make_round_rule(scheme=...)``)
    takes_scheme: ClassVar[bool] = False

    def __init__(self, *, num_drafts: int):
        self.num_drafts = num_drafts

    def law(self, drafted, draft_probs, target_probs) -> dict[tuple[int, ...], float]:
        """Exact law of the emitted string given the round's drafts: ``{w: probability}``."""
        return self._law(*self._checked(drafted, draft_probs, target_probs))

    def verify(self, drafted, draft_probs, target_probs, rng: np.random.Generator) -> RoundOutcome:
        """One round, its randomness drawn with ``rng``."""
        return self._verify(*self._checked(drafted, draft_probs, target_probs), rng)

    def expected_tokens(self, drafted, draft_probs, target_probs, *, eos_token_id=None) -> float:
        """Exact expected length of the emitted string (the mean length of :meth:`law`);
        an end-of-sequence token (``eos_token_id``: an id or ids) among the kept tokens ends
        the count there (it ends the generation)."""
        return self._expected_tokens(*self._checked(drafted, draft_probs, target_probs), eos_set(eos_token_id))

    def _checked(self, drafted, draft_probs, target_probs):
        arrays = check_round(drafted, draft_probs, target_probs)
        if arrays[0].shape[0] != self.num_drafts:
            raise ValueError(f"this {self.name!r} rule was made for num_drafts={self.num_drafts}, but the round has "
                             f"K = {arrays[0].shape[0]} drafts; make one with num_drafts={arrays[0].shape[0]}")
        return arrays

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"
