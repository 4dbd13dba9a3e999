"""What :func:`mspec.lm.decoding.speculative_generate` returns: one record per round and the
generation's result, with its block efficiency and timing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["GenerationResult", "RoundRecord"]


@dataclass
class RoundRecord:
    """What happened in one round (one target call).

    Attributes:
        alive: number of drafts offered to the scheme at each position reached, e.g.
            ``[3, 2, 1]``; empty for autoregressive sampling.
        accepted_length: number of drafted tokens accepted (0..L).
        winner: 0-based index of the draft whose tokens were accepted (the first one if
            several drafts hold them), ``None`` when nothing was accepted.
        bonus: whether all L positions were accepted and a bonus token was drawn.
        emitted: tokens added to the output by this round (``accepted_length + 1``, less
            after EOS / ``max_new_tokens`` truncation).
        draft_time: seconds in the draft model (forward passes and sampling).
        target_time: seconds in the target model's forward pass.
        selection_time: seconds in the token-level selection scheme.
        cache_time: seconds expanding, selecting and cropping KV caches.
    """

    alive: list[int]
    accepted_length: int
    winner: int | None
    bonus: bool
    emitted: int
    draft_time: float = 0.0
    target_time: float = 0.0
    selection_time: float = 0.0
    cache_time: float = 0.0


@dataclass
class GenerationResult:
    """Output of :func:`~mspec.lm.decoding.speculative_generate` or
    :func:`~mspec.lm.decoding.autoregressive_generate`.

    Attributes:
        token_ids: generated token ids (the prompt excluded).
        rounds: one :class:`RoundRecord` per decoding target call.
        method: ``"autoregressive"`` or the scheme name.
        num_drafts: K (0 for autoregressive).
        draft_length: L (0 for autoregressive).
        wall_time: seconds for the whole call, prefill included.
        prefill_time: seconds for the prompt prefill of both models.
        text: decoded ``token_ids`` when a tokenizer was given.
    """

    token_ids: list[int]
    rounds: list[RoundRecord]
    method: str
    num_drafts: int
    draft_length: int
    wall_time: float
    prefill_time: float = 0.0
    text: str | None = None

    @property
    def num_target_calls(self) -> int:
        """Decoding target forward passes (prefill not counted)."""
        return len(self.rounds)

    @property
    def block_efficiency(self) -> float:
        """Generated tokens per decoding target call (1.0 for autoregressive sampling)."""
        return len(self.token_ids) / len(self.rounds) if self.rounds else float("nan")

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of wall-clock time, prefill included."""
        return len(self.token_ids) / self.wall_time if self.wall_time > 0 else float("nan")

    def acceptance_per_position(self) -> np.ndarray:
        """P(position j is accepted | the round reached position j), shape ``(L,)``.

        ``nan`` where no round reached position j.
        """
        reached = np.zeros(self.draft_length)
        accepted = np.zeros(self.draft_length)
        for r in self.rounds:
            reached[: len(r.alive)] += 1
            accepted[: r.accepted_length] += 1
        with np.errstate(invalid="ignore", divide="ignore"):
            return accepted / reached

    def timing(self) -> dict[str, float]:
        """Mean seconds per round in each part of a round.

        Returns:
            ``draft`` / ``target`` / ``selection`` / ``cache`` (as in :class:`RoundRecord`);
            ``other``: the rest of the decoding time (after the prefill), the decoder's
            Python bookkeeping between the parts and an ``on_round`` callback's time, so the
            five parts add up to the mean round; ``draft_step``: ``draft / L``, one K-row draft
            step with its sampling (0 for autoregressive sampling).
        """
        n = max(len(self.rounds), 1)
        parts = {
            part: sum(getattr(r, f"{part}_time") for r in self.rounds) / n
            for part in ("draft", "target", "selection", "cache")
        }
        decoding = (self.wall_time - self.prefill_time) / n if self.rounds else 0.0
        parts["other"] = max(decoding - sum(parts.values()), 0.0)
        parts["draft_step"] = parts["draft"] / self.draft_length if self.draft_length else 0.0
        return parts
