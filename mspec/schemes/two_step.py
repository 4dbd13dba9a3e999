"""The canonical decomposition as a base class: select one draft, then one single-draft step.

The paper's first main result (Khisti et al., ICLR 2025, Theorem 1): an optimal K-draft
scheme can be written in two steps,

1. **selection**: given the drafted tokens ``t = (x_1..x_K)``, pick one of them, ``Y_I``,
   with some law ``beta(. | t)``; marginally ``Y_I`` has the *induced* distribution
   ``p_I(y) = sum_t P(t) beta_y(t)``;
2. **single-draft speculative sampling** from ``p_I`` to the target ``q``: accept ``Y_I``
   with probability ``min(1, q(Y_I) / p_I(Y_I))``, else output a sample of the residual
   ``norm(max(q - p_I, 0))``.

Step 2 makes the output exactly ``q``-distributed for *any* selection law, provided
``p_I`` is the law that step 1 really has; the acceptance of step 2 is
``sum_y min(q(y), p_I(y))``. :class:`TwoStepScheme` implements step 2 and the exact
operations once; the canonical LP (:mod:`mspec.schemes.canonical`), the paper's IS scheme
(:mod:`mspec.schemes.importance`), the optimal selection's reference
(:mod:`mspec.schemes.optimal_reference`) and the faster schemes of :mod:`mspec.fast` only
say how they select.
"""

from __future__ import annotations

import numpy as np

from mspec.schemes.selection import SelectionScheme, residual, sample_index


class TwoStepScheme(SelectionScheme):
    """Selection with law ``p_I``, then single-draft speculative sampling from ``p_I`` to ``q``.

    Subclasses implement :meth:`selection_law` and :meth:`select`, and provide the induced
    distribution either as an attribute ``induced`` set in ``__init__`` or by overriding
    the :attr:`induced` property (and :meth:`induced_at`, to avoid building it per sample).
    """

    _induced = None
    _residual_cache = None

    # --- what a subclass says --------------------------------------------------------
    def selection_law(self, tokens: np.ndarray) -> dict[int, float]:
        """P(select token y | drafted ``tokens``) as ``{y: probability}`` (validated tokens)."""
        raise NotImplementedError

    def select(self, tokens: np.ndarray, rng: np.random.Generator) -> int:
        """Step 1: one selected token, drawn from :meth:`selection_law` (validated tokens)."""
        raise NotImplementedError

    @property
    def induced(self) -> np.ndarray:
        """``(V,)`` the induced distribution ``p_I`` of the selected token."""
        return self._induced

    @induced.setter
    def induced(self, value: np.ndarray) -> None:
        self._induced = value
        self._residual_cache = None

    def induced_at(self, y: int) -> float:
        """``p_I(y)`` for one token."""
        return float(self.induced[y])

    # --- step 2 and the exact operations ---------------------------------------------
    @property
    def residual(self) -> np.ndarray:
        """``(V,)`` ``norm(max(q - p_I, 0))``: the output law after a rejection."""
        if self._residual_cache is None:
            self._residual_cache = residual(self.target, self.induced)
        return self._residual_cache

    def step_accept(self, y: int) -> float:
        """``min(1, q(y) / p_I(y))``: P(step 2 accepts a selected ``y``)."""
        x, q = self.induced_at(y), float(self.target[y])
        if q <= 0.0:  # also when p_I(y) underflowed to 0 although y can be selected
            return 0.0
        return 1.0 if q >= x else q / x  # (no overflow when p_I(y) is subnormal)

    def _acceptance(self) -> float:
        """``sum_y min(q(y), p_I(y))``."""
        return float(np.minimum(self.target, self.induced).sum())

    def accept_probability(self, drafts) -> float:
        """P(step 2 accepts the selected draft | drafts); its mean is ``acceptance()``."""
        law = self.selection_law(self.check_tokens(drafts))
        return float(sum(prob * self.step_accept(y) for y, prob in law.items()))

    def _conditional(self, tokens: np.ndarray) -> np.ndarray:
        dist = np.zeros(self.vocab_size)
        accept = 0.0
        for y, prob in self.selection_law(tokens).items():
            a = prob * self.step_accept(y)
            dist[y] += a
            accept += a
        if accept < 1.0:
            dist += (1.0 - accept) * self.residual
        return dist

    def _sample(self, tokens: np.ndarray, rng: np.random.Generator) -> int:
        y = self.select(tokens, rng)
        if rng.random() * self.induced_at(y) < self.target[y]:  # accept w.p. min(1, q(y)/p_I(y))
            return y
        return sample_index(self.residual, rng)


__all__ = ["TwoStepScheme"]
