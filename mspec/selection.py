"""The common shape of every token-level selection scheme.

Setting (paper notation): K drafts ``X_1..X_K`` are drawn independently, ``X_i ~ p_i``
(identical drafts: all ``p_i = p``); a selection scheme looks at the drafted tokens and
outputs one token ``Y`` whose distribution must be exactly the target ``q``. The draft
"is accepted" when ``Y`` is one of the drafted tokens. The code calls ``p`` ``draft`` and
``q`` ``target``.

A scheme is a class built once per position from ``draft``/``target`` (this is where
per-position work such as SpecTr's bisection or an LP solve happens) and then offers:

* :meth:`SelectionScheme.sample` -- one selection, given drafted tokens and a
  ``numpy.random.Generator``;
* :meth:`SelectionScheme.acceptance` -- the exact probability that a draft is accepted;
* :meth:`SelectionScheme.conditional` -- the exact distribution of ``Y`` given the
  drafted tokens, which :func:`mspec.exact.output_distribution` sums over all draft
  tuples to prove losslessness.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import numpy as np

from .distributions import check_draft_target, check_tokens


class Selection(NamedTuple):
    """Result of one selection step.

    Attributes:
        token: the output token ``Y``.
        accepted: whether ``Y`` is one of the drafted tokens.
        index: 0-based index of the accepted draft (the first draft holding ``Y``), or
            ``None`` when no draft was accepted and ``Y`` came from a residual.
    """

    token: int
    accepted: bool
    index: int | None


class SelectionScheme:
    """Base class: validated ``draft`` / ``target`` and the three exact operations.

    Args:
        draft: ``(V,)`` for K identical drafts or ``(K, V)`` for one distribution per draft.
        target: ``(V,)``.
        num_drafts: K; required when ``draft`` is 1-D.

    Attributes:
        draft: validated float64 array, ``(V,)`` or ``(K, V)``.
        target: validated float64 array ``(V,)``.
        num_drafts: K.
    """

    #: registry name, e.g. ``"spectr"``
    name: ClassVar[str] = ""
    #: whether ``draft`` may have K different rows
    supports_non_identical: ClassVar[bool] = True

    def __init__(self, *, draft, target, num_drafts=None):
        self.draft, self.target, self.num_drafts = check_draft_target(draft, target, num_drafts)
        if self.draft.ndim == 2 and not self.supports_non_identical:
            if np.all(self.draft == self.draft[0]):
                self.draft = self.draft[0]
            else:
                raise ValueError(
                    f"scheme {self.name!r} needs identical drafts: pass `draft` of shape (V,) "
                    "with num_drafts=K (or K equal rows); for different draft distributions "
                    "use 'specinfer'"
                )

    @property
    def vocab_size(self) -> int:
        """V, the vocabulary size."""
        return self.target.shape[0]

    @property
    def identical(self) -> bool:
        """True when all K drafts share one distribution."""
        return self.draft.ndim == 1

    def draft_row(self, i: int) -> np.ndarray:
        """Distribution ``p_i`` of draft ``i`` (0-based), shape ``(V,)``."""
        return self.draft if self.draft.ndim == 1 else self.draft[i]

    def acceptance(self) -> float:
        """Exact P(Y is one of the drafted tokens)."""
        raise NotImplementedError

    def conditional(self, drafts) -> tuple[np.ndarray, float]:
        """Exact distribution of ``Y`` given the drafted tokens.

        Args:
            drafts: K token ids.

        Returns:
            ``(dist, accept)``: ``dist`` of shape ``(V,)`` is P(Y = y | drafts) and
            ``accept`` is P(a draft is accepted | drafts).
        """
        raise NotImplementedError

    def sample(self, drafts, rng: np.random.Generator) -> Selection:
        """Select one output token given the drafted tokens.

        The default draws from :meth:`conditional`; schemes override it with a cheaper
        sampler that has exactly the same distribution.
        """
        tokens = self.check_tokens(drafts)
        check_rng(rng)
        dist, _ = self.conditional(tokens)
        return self.selection(tokens, sample_index(dist, rng))

    # helpers for subclasses -------------------------------------------------------------
    def check_tokens(self, drafts) -> np.ndarray:
        """Validate drafted token ids (see :func:`mspec.distributions.check_tokens`)."""
        return check_tokens(drafts, draft=self.draft, num_drafts=self.num_drafts)

    @staticmethod
    def selection(tokens: np.ndarray, y: int) -> Selection:
        """Build the :class:`Selection` for output ``y`` given drafted ``tokens``."""
        hits = np.flatnonzero(tokens == y)
        if hits.size:
            return Selection(int(y), True, int(hits[0]))
        return Selection(int(y), False, None)

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.draft.shape))
        return f"{type(self).__name__}(draft[{shape}], target[{self.vocab_size}], num_drafts={self.num_drafts})"


def check_rng(rng) -> np.random.Generator:
    """Raise a clear error unless ``rng`` is a ``numpy.random.Generator``."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"`rng` must be a numpy.random.Generator, got {type(rng).__name__}; "
            "pass rng=numpy.random.default_rng(seed)"
        )
    return rng


def sample_index(weights: np.ndarray, rng: np.random.Generator) -> int:
    """Draw an index with probability proportional to the non-negative ``weights``.

    Inverse-CDF sampling; a zero-weight index is never returned.
    """
    cdf = np.cumsum(weights)
    return int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))


def residual(target: np.ndarray, draft: np.ndarray) -> np.ndarray:
    """Normalised residual ``norm(max(target - draft, 0))`` used after a rejection."""
    return residual_and_mass(target, draft)[0]


def residual_and_mass(target: np.ndarray, draft: np.ndarray) -> tuple[np.ndarray, float]:
    """Residual ``norm(max(target - draft, 0))`` and its mass ``sum max(target - draft, 0)``.

    The mass is the rejection probability of single-draft speculative sampling from
    ``draft`` to ``target``: ``1 - sum min(draft, target)``.

    When the mass is zero (``target == draft`` up to rounding) a rejection has
    probability zero; we then return ``target`` so the caller still gets a valid
    distribution. (Deviation from the papers, which leave this case undefined.)
    """
    res = np.subtract(target, draft)
    np.maximum(res, 0.0, out=res)
    mass = float(res.sum())
    if mass <= 1e-15:
        return target, max(mass, 0.0)
    res /= mass
    return res, mass
