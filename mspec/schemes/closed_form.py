"""The optimal acceptance probability in closed form.

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
  :mod:`mspec.schemes.optimal_lp` on hundreds of random cases, identical and not, K = 2, 3.
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

The direction matters: the minimising S is a prefix in *ascending* q/p order, and its
complement a prefix in descending order; a prefix in descending order can miss the
minimum (``p = [1/2, 1/2]``, ``q = [0.9, 0.1]``, K = 2: the minimiser is the low-ratio
token ``{1}``, value 0.85, while the descending prefixes give 1). The tests check the
ascending order against all 2^V subsets.

Non-identical drafts: ``prod_i p_i(S)`` is not a function of one additive quantity, so
the prefix argument does not apply (the minimisation is submodular). We compute the
exact minimum over all ``2^V`` subsets for ``V <= 20`` and otherwise solve the
canonical LP of :mod:`mspec.schemes.canonical` when it fits; beyond that we raise -- an exact
O(V log V) method for non-identical drafts is not implemented.
"""

from __future__ import annotations

import numpy as np

from mspec.schemes.canonical import solve_canonical_lp
from mspec.distributions import check_draft_target

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
    # no fast exact method for non-identical drafts and V > 20: solve the canonical LP
    # instead (raises a ValueError when it would not fit in memory)
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


__all__ = ["acceptance_is_one", "brute_force_acceptance", "optimal_acceptance", "optimal_subset",
           "prefix_order"]
