"""Single-draft speculative sampling (Leviathan et al., 2023; Chen et al., 2023).

With one draft ``X ~ p`` and target ``q`` (paper notation; ``draft`` / ``target`` in code):

* accept ``X`` with probability ``min(1, q(X) / p(X))``;
* otherwise output a sample of the residual ``norm(max(q - p, 0))``.

Then ``Y ~ q`` exactly, and ``P(accept) = sum_x min(p(x), q(x)) = 1 - TV(p, q)``.
"""

from __future__ import annotations

import numpy as np

from mspec.schemes.selection import Selection, SelectionScheme, residual, sample_index


class SingleDraft(SelectionScheme):
    """Single-draft speculative sampling (K = 1).

    Args:
        draft: ``(V,)`` (or ``(1, V)``), the draft distribution ``p``.
        target: ``(V,)``, the target distribution ``q``.
        num_drafts: must be 1 (the default).
    """

    name = "single"

    def __init__(self, *, draft, target, num_drafts=None):
        if num_drafts is None:
            num_drafts = None if np.ndim(draft) == 2 else 1
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        if self.num_drafts != 1:
            raise ValueError(
                f"single-draft speculative sampling takes exactly one draft, got num_drafts="
                f"{self.num_drafts}; use 'specinfer', 'spectr' or 'optimal' for K > 1"
            )
        self.draft = self.draft_row(0)

    def _acceptance(self) -> float:
        return float(np.minimum(self.draft, self.target).sum())

    def _conditional(self, tokens):
        (x,) = tokens
        p, q = self.draft[x], self.target[x]
        a = 1.0 if q >= p else q / p  # min(1, q/p) without overflow at a subnormal p
        dist = (1.0 - a) * residual(self.target, self.draft)
        dist[x] += a
        return dist

    def _sample(self, tokens, rng: np.random.Generator) -> int:
        (x,) = tokens
        # accept X with probability min(1, q(X)/p(X)); written as u * p < q to avoid a division
        if rng.random() * self.draft[x] < self.target[x]:
            return int(x)
        return sample_index(residual(self.target, self.draft), rng)  # 0 at a rejected X


def single_draft_sample(draft_token: int, *, draft, target, rng: np.random.Generator) -> Selection:
    """One step of single-draft speculative sampling.

    Args:
        draft_token: the drafted token ``X ~ draft``.
        draft: ``(V,)`` draft distribution ``p``.
        target: ``(V,)`` target distribution ``q``.
        rng: source of randomness.

    Returns:
        :class:`~mspec.schemes.selection.Selection` with the output token.
    """
    return SingleDraft(draft=draft, target=target).sample([draft_token], rng)


def single_draft_acceptance(*, draft, target) -> float:
    """Exact acceptance ``sum_x min(p(x), q(x))`` of single-draft speculative sampling."""
    return SingleDraft(draft=draft, target=target).acceptance()
