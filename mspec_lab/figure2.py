"""The paper's Figure 2: acceptance of the optimal scheme and of the baselines, V = 3 (the
book's chapter 5 draws it; the closed form itself is :mod:`mspec.schemes.closed_form`).

Khisti et al. (ICLR 2025), Figure 2, draws the acceptance probability of K = 2 identical
drafts from the uniform draft ``p`` on 3 tokens, for targets ``q = [q1, q2, 1 - q1 - q2]``
with ``q1`` fixed (1/3 on the left panel, 1/6 on the right) and ``q2`` swept: the optimum
``P*(acc)`` of :mod:`mspec.schemes.closed_form` above SpecTr, SpecInfer and a single draft.

* :func:`figure2_family`: the panel's draft, target family and ``q2`` grid;
* :func:`figure2_curves`: the four curves over a grid (any draft, family and K);
* :func:`figure2_optimal_exact`: the optimal curve worked out by hand, to check the
  closed form against;
* :func:`cut_value`, :func:`binding_set`, :func:`set_label`: the bound ``q(S) + 1 - p(S)^K``
  of a set, a set attaining the smallest bound (the binding set), and a set as text.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mspec.distributions import check_draft_target
from mspec.schemes.closed_form import optimal_acceptance, prefix_order
from mspec.schemes.single import SingleDraft
from mspec.schemes.specinfer import SpecInfer
from mspec.schemes.spectr import SpecTr

#: names of the three tokens of Figure 2, in index order (the paper numbers them 1, 2, 3)
FIGURE2_TOKENS = ("a", "b", "c")

#: points of the default ``q2`` grid (from 0 to ``1 - q1``): fine enough for the kinks
#: of the curves to show at plotting resolution
FIGURE2_GRID_POINTS = 201


def figure2_family(panel: str) -> tuple[np.ndarray, Callable[[float], np.ndarray], np.ndarray]:
    """The draft, target family and default ``q2`` grid of the paper's Figure 2.

    Args:
        panel: ``"left"`` (``q = [1/3, q2, 2/3 - q2]``) or ``"right"``
            (``q = [1/6, q2, 5/6 - q2]``); the draft is uniform on 3 tokens in both.

    Returns:
        ``(draft, target_family, q2_grid)``.
    """
    if panel == "left":
        first = 1.0 / 3.0
    elif panel == "right":
        first = 1.0 / 6.0
    else:
        raise ValueError(f"`panel` must be 'left' or 'right', got {panel!r}")
    rest = 1.0 - first

    def family(q2: float) -> np.ndarray:
        return np.array([first, q2, rest - q2])

    return np.full(3, 1.0 / 3.0), family, np.linspace(0.0, rest, FIGURE2_GRID_POINTS)


def figure2_curves(panel: str = "left", *, draft=None, target_family=None, q2=None, num_drafts: int = 2):
    """Acceptance curves of the optimal scheme and the baselines over a target family.

    Reproduces the paper's Figure 2 by default (V = 3, uniform draft, K = 2).

    Args:
        panel: which default family to use (see :func:`figure2_family`); ignored for the
            parts given explicitly.
        draft: ``(V,)`` draft distribution (identical drafts).
        target_family: callable ``q2 -> target (V,)``.
        q2: 1-D grid of the swept parameter.
        num_drafts: K.

    Returns:
        dict of float arrays of the grid's length: ``"q2"``, ``"optimal"``, ``"spectr"``,
        ``"specinfer"``, ``"single"`` (one draft, ``sum min(p, q)``).
    """
    default_draft, default_family, default_grid = figure2_family(panel)
    draft = default_draft if draft is None else np.asarray(draft, dtype=np.float64)
    family = default_family if target_family is None else target_family
    grid = default_grid if q2 is None else np.asarray(q2, dtype=np.float64)
    if grid.ndim != 1:
        raise ValueError(f"`q2` must be a 1-D grid, got shape {grid.shape}")
    curves = {name: np.empty(grid.shape) for name in ("optimal", "spectr", "specinfer", "single")}
    for n, value in enumerate(grid):
        target = np.clip(np.asarray(family(float(value)), dtype=np.float64), 0.0, None)  # -0.0 at the ends
        kw = dict(draft=draft, target=target, num_drafts=num_drafts)
        curves["optimal"][n] = optimal_acceptance(**kw)
        curves["spectr"][n] = SpecTr(**kw).acceptance()
        curves["specinfer"][n] = SpecInfer(**kw).acceptance()
        curves["single"][n] = SingleDraft(draft=draft, target=target).acceptance()
    return {"q2": grid.copy(), **curves}


def figure2_optimal_exact(panel: str, q2) -> np.ndarray:
    """The optimal curve of Figure 2 worked out by hand (for tests and the book).

    From the closed form ``P*(acc) = min_S [q(S) + 1 - p(S)^2]`` (:mod:`mspec.schemes.closed_form`)
    with uniform ``p`` on 3 tokens: ``p(S)^2`` is ``1/9`` for singletons and ``4/9`` for
    pairs, so ``P*`` is the minimum of 1, ``q(x) + 8/9`` over tokens and ``q(S) + 5/9`` over
    pairs.

    Left (``q = [1/3, q2, 2/3 - q2]``): ``min(1, 8/9 + q2, 14/9 - q2)``; equals 1 exactly
    for ``q2`` in ``[1/9, 5/9]``; below, ``{b}`` binds (tied with ``{a, b}``), above ``{c}``.
    Right (``q = [1/6, q2, 5/6 - q2]``): ``min(1, 13/18 + q2, 14/9 - q2)``; equals 1
    exactly for ``q2`` in ``[5/18, 5/9]``; below, ``{a, b}`` binds, above ``{a, c}``.
    """
    q2 = np.asarray(q2, dtype=np.float64)
    if panel == "left":
        return np.minimum(1.0, np.minimum(8.0 / 9.0 + q2, 14.0 / 9.0 - q2))
    if panel == "right":
        return np.minimum(1.0, np.minimum(13.0 / 18.0 + q2, 14.0 / 9.0 - q2))
    raise ValueError(f"`panel` must be 'left' or 'right', got {panel!r}")


def cut_value(*, draft, target, subset, num_drafts) -> float:
    """The cut bound ``q(S) + 1 - p(S)^K`` of a set of tokens ``S`` (K identical drafts).

    No lossless scheme accepts more often, for any ``S``: an accepted token lies in ``S``,
    or some draft lies outside ``S``. The smallest bound is the optimum.

    Args:
        draft: ``(V,)`` draft distribution ``p``.
        target: ``(V,)`` target distribution ``q``.
        subset: distinct token indices of ``S`` in ``[0, V)`` (may be empty).
        num_drafts: K.

    Raises:
        ValueError: bad ``draft``/``target``/``num_drafts`` (``draft`` must be 1-D) or ``subset``.
    """
    draft, target, k = _identical(draft, target, num_drafts, "cut_value")
    tokens = _token_indices(subset, target.shape[0])
    return float(target[tokens].sum()) + 1.0 - min(float(draft[tokens].sum()), 1.0) ** k


def binding_set(*, draft, target, num_drafts, tol: float = 1e-12) -> np.ndarray:
    """A set ``S`` attaining ``min_S [q(S) + 1 - p(S)^K]``, as sorted token indices.

    Some prefix of the tokens sorted by ``q/p`` **ascending** (``p = 0`` last) is a
    minimiser (proved in :mod:`mspec.schemes.closed_form`), so the ``V + 1`` prefixes are
    scanned. Of tied sets this returns the **shortest** prefix within ``tol`` of the
    minimum: the empty set when the optimum is 1 (no set binds).

    Args:
        draft: ``(V,)`` draft distribution ``p`` (identical drafts).
        target: ``(V,)`` target distribution ``q``.
        num_drafts: K.
        tol: how far above the minimum a tied prefix may be (finite, >= 0).

    Raises:
        ValueError: bad ``draft``/``target``/``num_drafts`` (``draft`` must be 1-D) or ``tol``.
    """
    draft, target, k = _identical(draft, target, num_drafts, "binding_set")
    if not (isinstance(tol, (int, float, np.floating)) and np.isfinite(tol) and tol >= 0):
        raise ValueError(f"`tol` must be a finite number >= 0, got {tol!r}")
    order = prefix_order(draft=draft, target=target)
    cum_p = np.minimum(np.concatenate([[0.0], np.cumsum(draft[order])]), 1.0)
    values = np.concatenate([[0.0], np.cumsum(target[order])]) + 1.0 - cum_p**k
    return np.sort(order[: int(np.flatnonzero(values <= values.min() + tol)[0])])


def set_label(tokens, names=FIGURE2_TOKENS) -> str:
    """Token indices as text: ``[0, 1] -> "{a, b}"``, ``[] -> "∅"`` (ValueError: no name)."""
    tokens = np.sort(_token_indices(tokens, len(names)))
    return "{" + ", ".join(names[t] for t in tokens) + "}" if tokens.size else "∅"


def _identical(draft, target, num_drafts, name):
    """Validated ``(draft, target, K)``; ``draft`` must be one row (identical drafts)."""
    if np.ndim(draft) != 1:
        raise ValueError(f"{name} needs identical drafts: `draft` of shape (V,) with num_drafts=K, "
                         f"got shape {np.shape(draft)} (for one row per draft use closed_form.optimal_subset)")
    return check_draft_target(draft, target, num_drafts)


def _token_indices(tokens, vocab_size: int) -> np.ndarray:
    """``tokens`` as an int array of distinct indices in ``[0, vocab_size)``, or a ValueError."""
    arr = np.asarray(tokens if isinstance(tokens, np.ndarray) else list(tokens))
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer) or np.unique(arr).size != arr.size:
        raise ValueError(f"a set of tokens is a 1-D collection of distinct integer indices, got {tokens!r}")
    if arr.min() < 0 or arr.max() >= vocab_size:
        raise ValueError(f"token indices must lie in [0, {vocab_size}), got {arr.tolist()}")
    return arr.astype(np.int64)


__all__ = ["FIGURE2_GRID_POINTS", "FIGURE2_TOKENS", "binding_set", "cut_value", "figure2_curves",
           "figure2_family", "figure2_optimal_exact", "set_label"]
