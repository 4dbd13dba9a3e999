"""SpecInfer: multi-step speculative sampling / recursive rejection sampling (Miao et al., 2024).

Drafts ``X_1..X_K`` (``X_i ~ p_i``; identical drafts have ``p_i = p``) are visited in
order against a *running* target ``r``, starting at ``r_0 = q``:

* accept ``X_i`` with probability ``min(1, r_{i-1}(X_i) / p_i(X_i))``;
* on rejection, update ``r_i = norm(max(r_{i-1} - p_i, 0))`` and move on;
* if every draft is rejected, output a sample of ``r_K``.

Each step is single-draft speculative sampling from ``p_i`` to ``r_{i-1}``, so the law of
the output given "we reached step i" is ``r_{i-1}``, and by induction ``Y ~ q``. The
running target does not depend on *which* tokens were rejected, so the acceptance has a
closed form::

    P(accept) = 1 - prod_i (1 - sum_x min(p_i(x), r_{i-1}(x)))

A rejected ``X_i`` has ``r_{i-1}(X_i) < p_i(X_i)``, hence ``r_i(X_i) = 0`` and it stays 0,
so the final residual never returns a drafted token: "accepted" == "Y is a draft".
"""

from __future__ import annotations

import numpy as np

from mspec.schemes.selection import Selection, SelectionScheme, residual, residual_and_mass, sample_index


class SpecInfer(SelectionScheme):
    """Recursive rejection sampling over K drafts (identical or non-identical).

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` for identical drafts, or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
    """

    name = "specinfer"

    def running_targets(self):
        """Yield ``(p_i, r_{i-1})`` for i = 1..K: each draft and the target it is tested against."""
        r = self.target
        for i in range(self.num_drafts):
            p_i = self.draft_row(i)
            yield p_i, r
            r = residual(r, p_i)

    def _acceptance(self) -> float:
        reject = 1.0
        r = self.target
        for i in range(self.num_drafts):
            # P(reject X_i | reached step i) = 1 - sum min(p_i, r_{i-1}) = mass of max(r_{i-1} - p_i, 0)
            r, mass = residual_and_mass(r, self.draft_row(i))
            reject *= mass
            if reject <= 0.0:
                return 1.0
        return float(1.0 - reject)

    def _conditional(self, tokens):
        dist = np.zeros(self.vocab_size)
        stay = 1.0  # P(all drafts so far rejected | drafts)
        r = self.target
        for x, (p_i, r) in zip(tokens, self.running_targets()):
            a = 1.0 if r[x] >= p_i[x] else r[x] / p_i[x]  # min(1, r/p), no overflow
            dist[x] += stay * a
            stay *= 1.0 - a
            if stay == 0.0:
                return dist
        dist += stay * residual(r, p_i)  # r_K, the residual after the last rejection
        return dist

    def _sample(self, tokens, rng: np.random.Generator) -> int:
        r = self.target
        for i, x in enumerate(tokens):
            p_i = self.draft_row(i)
            if rng.random() * p_i[x] < r[x]:  # accept with prob min(1, r(x)/p_i(x))
                return int(x)
            r = residual(r, p_i)
        return sample_index(r, rng)


def specinfer_sample(drafts, *, draft, target, rng: np.random.Generator) -> Selection:
    """One SpecInfer selection. ``draft`` is ``(V,)`` (identical drafts) or ``(K, V)``."""
    num_drafts = len(drafts) if np.ndim(draft) == 1 else None
    return SpecInfer(draft=draft, target=target, num_drafts=num_drafts).sample(drafts, rng)


def specinfer_acceptance(*, draft, target, num_drafts=None) -> float:
    """Exact SpecInfer acceptance ``1 - prod_i (1 - sum min(p_i, r_{i-1}))``."""
    return SpecInfer(draft=draft, target=target, num_drafts=num_drafts).acceptance()
