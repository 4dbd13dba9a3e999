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
  drafted tokens, which :func:`mspec.schemes.exact.output_distribution` sums over all draft
  tuples to prove losslessness.
"""

from __future__ import annotations

import warnings
from typing import ClassVar, NamedTuple

import numpy as np

from mspec.distributions import check_draft_target, check_tokens


#: rounding allowed on an acceptance before it counts as outside [0, 1]
ACCEPT_SLACK = 1e-9
#: rounding allowed on a conditional law: negative entries, sum minus 1, mass where q = 0
DIST_SLACK = 1e-9
#: a scheme estimated to take longer than this to build warns (:class:`SlowSchemeWarning`); a
#: decoder, which builds one per position, refuses it before any model call
SLOW_SECONDS = 5.0
#: seconds per entry of a pass over a ``(V,)`` array: the estimate of the schemes without an LP
SECONDS_PER_ENTRY = 2e-8


class SlowSchemeWarning(UserWarning):
    """A call estimated to take longer than :data:`SLOW_SECONDS`, with the estimate and a faster way."""


class SchemeError(RuntimeError):
    """A scheme could not certify its result (a bug in mspec, never a user error)."""


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
                    "use 'specinfer', 'is' or 'is-ratio' (or 'optimal-lp', exact at small V)"
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

    # --- the three exact operations, checked ----------------------------------------
    # Subclasses implement ``_acceptance``, ``_conditional`` and ``_sample``; the public
    # methods validate the input and check every result, so a numerical failure inside a
    # scheme raises :class:`SchemeError` instead of returning a wrong answer.

    def acceptance(self) -> float:
        """The scheme's acceptance, computed exactly (no sampling).

        For SpecInfer, SpecTr, the LP schemes and the optimal scheme it is P(Y is one of
        the drafted tokens). For the two-step schemes with non-optimal selection weights
        (the IS schemes ``"is"`` and ``"is-ratio"``, and ``"canonical"`` with user-given
        ``weights``) it is the paper's acceptance ``sum_y min(q(y), p_I(y))``, the
        probability that step 2 accepts the selected draft: a lower bound on P(Y is a
        drafted token), which the residual can exceed by outputting another draft's token
        (by a few thousandths on language-model distributions). The exact P(Y is a drafted
        token) of any scheme at small V: ``mspec.output_distribution(scheme)[1]``.

        Returns:
            a float in ``[0, 1]``.

        Raises:
            SchemeError: the scheme produced a NaN or a value outside ``[0, 1]``.
        """
        value = float(self._acceptance())
        if not (-ACCEPT_SLACK <= value <= 1.0 + ACCEPT_SLACK):  # also catches NaN
            raise SchemeError(self._bug(f"an acceptance of {value!r}"))
        return min(max(value, 0.0), 1.0)

    def conditional(self, drafts) -> tuple[np.ndarray, float]:
        """Exact distribution of ``Y`` given the drafted tokens.

        Args:
            drafts: K token ids.

        Returns:
            ``(dist, accept)``: ``dist`` of shape ``(V,)`` is P(Y = y | drafts), zero
            wherever the target is zero, and ``accept`` is P(Y is one of the drafted
            tokens | drafts).

        Raises:
            SchemeError: ``dist`` is not a distribution (NaN, negative, not summing to 1
                within ``1e-9``) or puts mass on a token the target gives zero.
        """
        tokens = self.check_tokens(drafts)
        dist = np.asarray(self._conditional(tokens), dtype=np.float64)
        if dist.shape != (self.vocab_size,) or not np.all(np.isfinite(dist)):
            raise SchemeError(self._bug("a conditional law with NaN/inf or of the wrong shape"))
        if dist.min() < -DIST_SLACK or abs(dist.sum() - 1.0) > DIST_SLACK:
            raise SchemeError(self._bug(f"a conditional law with min {dist.min():.3g}, sum {dist.sum()!r}"))
        if np.any(dist[self.target == 0.0] > DIST_SLACK):
            raise SchemeError(self._bug("a conditional law with mass on a token the target gives zero"))
        dist = np.maximum(dist, 0.0)
        return dist, float(min(dist[np.unique(tokens)].sum(), 1.0))

    def sample(self, drafts, rng: np.random.Generator) -> Selection:
        """Select one output token given the drafted tokens.

        Args:
            drafts: K token ids drawn from ``draft``.
            rng: the only source of randomness.

        Returns:
            :class:`Selection`; ``accepted`` says whether ``Y`` is one of the drafted
            tokens and ``index`` is the first draft holding it, for every scheme.

        Raises:
            SchemeError: the scheme produced a token outside ``[0, V)`` or one that the
                target gives zero probability.
        """
        tokens = self.check_tokens(drafts)
        check_rng(rng)
        y = self._sample(tokens, rng)
        if not (0 <= y < self.vocab_size) or not self.target[y] > 0.0:
            raise SchemeError(self._bug(f"token id {y} (V = {self.vocab_size})"))
        return self.selection(tokens, int(y))

    def accept_probability(self, drafts) -> float:
        """P(accept | drafts) in the sense of :meth:`acceptance`: its mean over drafted tuples
        is exactly ``acceptance()`` (a zero-mean control variate for the benches).

        Equal to the second value of :meth:`conditional`, except for the two-step schemes
        with non-optimal weights, where it is the probability that step 2 accepts the
        selected draft.
        """
        return self.conditional(drafts)[1]

    #: a faster way to the same acceptance, named when the scheme is slow at a size
    faster: ClassVar[str] = "scheme 'optimal' (exactly optimal at any V for identical drafts) or 'specinfer'"

    @classmethod
    def estimate_seconds(cls, *, vocab_size: int, num_drafts: int, identical: bool = True, **params) -> float:
        """Rough seconds to build the scheme for one position, from (V, K) alone: a few passes
        over the vocabulary by default (milliseconds at V = 50,272); the LP schemes override it.
        An estimate for a 2-core laptop-class CPU; an LP's real time also depends on the laws
        (measured: from 0.15 to 0.65 times the estimate), so the estimate errs on the slow side."""
        return SECONDS_PER_ENTRY * vocab_size * num_drafts

    @classmethod
    def check_size(cls, *, vocab_size: int, num_drafts: int, identical: bool = True, **params) -> None:
        """Refuse a size the scheme cannot be built at (the default: every size can).

        Raises:
            ValueError: naming the size and a scheme that works at it.
        """

    @classmethod
    def check_scale(cls, *, vocab_size: int, num_drafts: int, identical: bool = True, warn: bool = False,
                    **params) -> None:
        """Refuse a size the scheme cannot be built at (:meth:`check_size`), before any work; then,
        if building is estimated to take more than :data:`SLOW_SECONDS`, refuse (a decoder calls
        this before its first model call: it builds a scheme per position) or, with ``warn``
        (the LP schemes' constructors), warn (:class:`SlowSchemeWarning`).

        Args:
            vocab_size: V.
            num_drafts: K.
            identical: whether the K drafts share one law.
            warn: warn instead of refusing a slow build.
            **params: the scheme's own keyword arguments, as its constructor takes them.

        Raises:
            ValueError: naming the size (and the estimate) and a scheme that works at it.
        """
        cls.check_size(vocab_size=vocab_size, num_drafts=num_drafts, identical=identical, **params)
        seconds = cls.estimate_seconds(vocab_size=vocab_size, num_drafts=num_drafts, identical=identical, **params)
        if seconds <= SLOW_SECONDS:
            return
        slow = (f"scheme {cls.name!r} at V = {vocab_size}, K = {num_drafts} takes about {seconds:.2g} s to build "
                "(a rough estimate from V and K)")
        if not warn:
            raise ValueError(f"{slow}, once per position: too slow to decode with; use {cls.faster}")
        warnings.warn(f"{slow}; {cls.faster} is faster", SlowSchemeWarning, stacklevel=3)

    def _acceptance(self) -> float:
        raise NotImplementedError

    def _conditional(self, tokens: np.ndarray) -> np.ndarray:
        """``P(Y = . | tokens)``, shape ``(V,)``, for validated ``tokens``."""
        raise NotImplementedError

    def _sample(self, tokens: np.ndarray, rng: np.random.Generator) -> int:
        """One output token for validated ``tokens``; the default draws from ``_conditional``."""
        return sample_index(self._conditional(tokens), rng)

    def _bug(self, what: str) -> str:
        return (
            f"scheme {self.name!r} produced {what} on a valid input; this is a bug in mspec: "
            "please report it with the draft and target. 'specinfer' is exact on every input "
            "and can stand in meanwhile"
        )

    # helpers for subclasses -------------------------------------------------------------
    def check_tokens(self, drafts) -> np.ndarray:
        """Validate drafted token ids: K integers in ``[0, V)``, each with draft probability > 0."""
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
