"""The optimal acceptance probability in closed form, and the paper's Figure 2.

Setting: K independent drafts ``X_i ~ p_i`` (identical drafts: ``p_i = p``), target ``q``
(``draft`` / ``target`` in code). The best any lossless selection scheme can do is

    P*(acc) = min over subsets S of the vocabulary of  [ q(S) + 1 - prod_i p_i(S) ]      (*)

where ``q(S) = sum_{x in S} q(x)``. For K = 2 identical drafts this is the paper's
explicit expression ``min_S [q(S) + 1 - p(S)^2]``, and the paper's condition for
``P*(acc) = 1`` is ``q(S) >= p(S)^2`` for every S.

What is proven, and where
-------------------------
* K = 2, identical drafts: the paper's theorem (stated as above).
* Any K, identical or not: (*) follows from max-flow / min-cut, which is how we read it
  (the paper states the K = 2 identical case; we do not claim it states the rest).
  The optimal scheme is a maximum flow in the bipartite network
  ``source -> tuple t (capacity P(t)) -> token y in t (unbounded) -> sink (capacity q(y))``:
  a flow is exactly the accepted part of a coupling of (drafts, Y) with ``Y ~ q``, and
  any flow extends to a full coupling by sending the unmatched mass through the
  residual. A cut puts a token set ``B`` on the source side; the unbounded edges force
  every tuple on the source side to lie inside ``B``, so the best cut with that ``B``
  costs ``q(B) + 1 - P(all X_i in B) = q(B) + 1 - prod_i p_i(B)`` (independence).
  Max-flow = min-cut gives (*). The tests check (*) against the LP of
  :mod:`mspec.optimal` on hundreds of random cases, identical and not, K = 2, 3.
  Likewise ``P*(acc) = 1`` iff ``q(S) >= prod_i p_i(S)`` for every S.

Computing the minimum in O(V log V) (identical drafts, any K)
-------------------------------------------------------------
With ``g(m) = m^K`` (convex), minimise ``h(S) = q(S) - g(p(S))``. Sort the tokens by
``q(x)/p(x)`` **ascending** (``p(x) = 0`` gives ``+inf``: such a token only adds ``q``).
Then some prefix of this order is a minimiser:

* Exchange argument: let ``S`` minimise ``h`` with ``m = p(S)``. Removing ``a in S``
  does not help: ``q(a) <= g(m) - g(m - p(a)) <= p(a) g'(m)``. Adding ``b not in S``
  does not help: ``q(b) >= g(m + p(b)) - g(m) >= p(b) g'(m)`` (convexity both times).
  So ``q(a)/p(a) <= g'(m) <= q(b)/p(b)``: inside ratios never exceed outside ones.
* Ties: tokens tied at ratio ``r`` contribute ``r p(U) - g(p(A) + p(U))``, concave in
  ``p(U)``, so taking none or all of the tie group is optimal -- both are prefixes.

(Deviation from the brief we were given, which said "sorted by q/p descending": the
minimising S is a prefix in *ascending* q/p order; equivalently its complement is a
prefix in descending order. The tests check this against all 2^V subsets.)

Non-identical drafts: ``prod_i p_i(S)`` is not a function of one additive quantity, so
the prefix argument does not apply (the minimisation is submodular). We compute the
exact minimum over all ``2^V`` subsets for ``V <= 20`` and otherwise solve the
canonical LP of :mod:`mspec.canonical` when it fits; beyond that we raise -- an exact
O(V log V) method for non-identical drafts is not implemented.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .distributions import check_draft_target

#: largest V for which the non-identical minimum is taken over all 2^V subsets
MAX_SUBSET_VOCAB = 20


def prefix_order(*, draft, target) -> np.ndarray:
    """Token order in which the minimising set of (*) is a prefix (identical drafts).

    Args:
        draft: ``(V,)`` draft distribution ``p``.
        target: ``(V,)`` target distribution ``q``.

    Returns:
        int array ``(V,)``: tokens sorted by ``q(x)/p(x)`` ascending, ``p(x) = 0`` last.
    """
    draft = np.asarray(draft, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    positive = draft > 0
    ratio = np.full(draft.shape, np.inf)
    with np.errstate(over="ignore"):  # a subnormal p can overflow q/p to inf: it sorts last
        ratio[positive] = target[positive] / draft[positive]
    return np.argsort(ratio)  # any order within ties is fine (module docstring)


def _identical_rows(draft: np.ndarray) -> np.ndarray | None:
    """The common row when every draft distribution is the same, else ``None``."""
    if draft.ndim == 1:
        return draft
    return draft[0] if np.all(draft == draft[0]) else None


def optimal_subset(*, draft, target, num_drafts=None) -> tuple[np.ndarray, float]:
    """A minimising set S of (*) and ``P*(acc)``.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` (identical drafts) or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K (required when ``draft`` is 1-D).

    Returns:
        ``(S, value)``: boolean mask ``(V,)`` of a minimiser and
        ``value = q(S) + 1 - prod_i p_i(S)``, the optimal acceptance.

    Raises:
        ValueError: non-identical drafts with ``V > 20`` (use :func:`optimal_acceptance`).
    """
    return _optimal_subset(*check_draft_target(draft, target, num_drafts))


def _optimal_subset(draft: np.ndarray, target: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    common = _identical_rows(draft)
    if common is not None:
        order = prefix_order(draft=common, target=target)
        cum_q = np.concatenate([[0.0], np.cumsum(target[order])])
        cum_p = np.concatenate([[0.0], np.cumsum(common[order])])
        values = cum_q + 1.0 - np.minimum(cum_p, 1.0) ** k
        n = int(np.argmin(values))
        mask = np.zeros(target.shape, dtype=bool)
        mask[order[:n]] = True
        return mask, float(min(1.0, values[n]))
    if target.shape[0] <= MAX_SUBSET_VOCAB:
        return _min_over_subsets(draft, target)
    raise ValueError(
        f"a minimising set for non-identical drafts is found by checking all 2^V subsets, "
        f"which needs V <= {MAX_SUBSET_VOCAB} (got V = {target.shape[0]}); use "
        "optimal_acceptance (falls back to the canonical LP) for the value"
    )


def optimal_acceptance(*, draft, target, num_drafts=None) -> float:
    """``P*(acc)``, the largest acceptance of any lossless selection scheme, via (*).

    O(V log V) for identical drafts (any K, any V). Non-identical drafts: exact
    minimum over subsets for ``V <= 20``, else the canonical LP (small V only).

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.

    Returns:
        The optimal acceptance probability in ``[0, 1]``.
    """
    draft, target, k = check_draft_target(draft, target, num_drafts)
    if _identical_rows(draft) is not None or target.shape[0] <= MAX_SUBSET_VOCAB:
        return _optimal_subset(draft, target, k)[1]
    # Deviation: no fast exact method for non-identical drafts and V > 20; solve the
    # canonical LP instead (raises a ValueError when it would not fit in memory).
    from .canonical import solve_canonical_lp  # local import: canonical imports this module

    return float(solve_canonical_lp(draft=draft, target=target)[0])


def acceptance_is_one(*, draft, target, num_drafts=None, tol: float = 1e-12) -> bool:
    """Whether ``P*(acc) = 1``, i.e. ``q(S) >= prod_i p_i(S)`` for every S (to ``tol``)."""
    return optimal_acceptance(draft=draft, target=target, num_drafts=num_drafts) >= 1.0 - tol


def brute_force_acceptance(*, draft, target, num_drafts=None) -> float:
    """(*) by enumerating all ``2^V`` subsets (``V <= 20``); a reference for tests."""
    draft, target, _ = check_draft_target(draft, target, num_drafts)
    if target.shape[0] > MAX_SUBSET_VOCAB:
        raise ValueError(
            f"brute force over 2^V subsets needs V <= {MAX_SUBSET_VOCAB}, got V = {target.shape[0]}; "
            "use optimal_acceptance"
        )
    if draft.ndim == 1:
        k = check_draft_target(draft, target, num_drafts)[2]
        draft = np.tile(draft, (k, 1))
    return _min_over_subsets(draft, target)[1]


def _subset_sums(values: np.ndarray) -> np.ndarray:
    """Sums over all subsets; entry ``m`` is the sum over the bits set in ``m``."""
    sums = np.zeros(1)
    for v in values:
        sums = np.concatenate([sums, sums + v])
    return sums


def _min_over_subsets(draft: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    rows = draft if draft.ndim == 2 else draft[None, :]
    values = _subset_sums(target) + 1.0
    prod = np.ones_like(values)
    for row in rows:
        prod *= np.minimum(_subset_sums(row), 1.0)
    values -= prod
    m = int(np.argmin(values))
    mask = ((m >> np.arange(target.shape[0])) & 1).astype(bool)
    return mask, float(min(1.0, values[m]))


# -- Figure 2 ---------------------------------------------------------------------------------
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

    return np.full(3, 1.0 / 3.0), family, np.linspace(0.0, rest, 201)


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
    from .single import SingleDraft  # local imports keep this module light
    from .specinfer import SpecInfer
    from .spectr import SpecTr

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
    """The optimal curve of Figure 2 worked out by hand from (*) (for tests and the book).

    Uniform ``p`` on 3 tokens: ``p(S)^2`` is ``1/9`` for singletons and ``4/9`` for pairs,
    so (*) is the minimum of 1, ``q(x) + 8/9`` over tokens and ``q(S) + 5/9`` over pairs.

    Left (``q = [1/3, q2, 2/3 - q2]``): ``min(1, 8/9 + q2, 14/9 - q2)``; equals 1 exactly
    for ``q2`` in ``[1/9, 5/9]``.
    Right (``q = [1/6, q2, 5/6 - q2]``): ``min(1, 13/18 + q2, 14/9 - q2)``; equals 1
    exactly for ``q2`` in ``[5/18, 5/9]``.
    """
    q2 = np.asarray(q2, dtype=np.float64)
    if panel == "left":
        return np.minimum(1.0, np.minimum(8.0 / 9.0 + q2, 14.0 / 9.0 - q2))
    if panel == "right":
        return np.minimum(1.0, np.minimum(13.0 / 18.0 + q2, 14.0 / 9.0 - q2))
    raise ValueError(f"`panel` must be 'left' or 'right', got {panel!r}")


__all__ = [
    "acceptance_is_one",
    "brute_force_acceptance",
    "figure2_curves",
    "figure2_family",
    "figure2_optimal_exact",
    "optimal_acceptance",
    "optimal_subset",
    "prefix_order",
]
