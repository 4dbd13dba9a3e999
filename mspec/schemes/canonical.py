"""The canonical decomposition: importance-type selection, then single-draft speculative sampling.

The paper shows that an optimal multi-draft scheme can always be written in two steps:

1. **Selection.** Given the drafted tokens ``t = (x_1..x_K)``, pick one of them,
   ``Y_I = y`` with probability ``beta_y(t)`` (``beta_y(t) = 0`` unless ``y`` is in ``t``,
   ``sum_y beta_y(t) = 1``). Marginally ``Y_I`` has the *induced* distribution

       p_I(y) = sum_t P(t) beta_y(t),      P(t) = prod_i p_i(x_i).

2. **Single-draft speculative sampling** from ``p_I`` to the target ``q``: accept ``Y_I``
   with probability ``min(1, q(Y_I) / p_I(Y_I))``, otherwise output a sample of the
   residual ``norm(max(q - p_I, 0))``.

Step 2 makes ``Y ~ q`` exactly for *any* weights ``beta`` (that is why every such scheme
is lossless), and the acceptance is ``sum_y min(q(y), p_I(y))``. The best weights solve
the LP (linear in ``beta`` with auxiliaries ``u_y = min(q(y), p_I(y))``)::

    maximise   sum_y u_y
    subject to u_y <= q(y),  u_y <= p_I(y) = sum_t P(t) beta_y(t),
               beta_y(t) >= 0,  sum_{y in t} beta_y(t) = 1,

whose optimum equals the optimal transport LP of :mod:`mspec.schemes.optimal_lp` (the paper's
canonical decomposition theorem; the tests check it).

Formulations implemented:

* general K: one variable per (tuple, distinct drafted token), as joint masses
  ``b_y(t) = P(t) beta_y(t)`` with ``sum_y b_y(t) = P(t)`` (deviation: joint masses
  instead of ``beta`` for conditioning; same LP);
* K = 2, identical drafts: ``V(V-1)/2`` weights ``w_ij`` (``i < j``) = P(select i | the
  drafts are {i, j}); symmetric weights lose nothing since ``P(i, j) = P(j, i)``, and
  ``p_I(i) = p_i^2 + 2 p_i sum_{j>i} p_j w_ij + 2 p_i sum_{j<i} p_j (1 - w_ji)``.

Non-identical K = 2 uses the general formulation (``V(V-1)`` ordered-pair weights).

Whatever HiGHS returns, the weights are made valid (clipped, normalised; tuples of tiny
probability that HiGHS leaves at zero select their drafted token of largest dual), then
polished (selection weight moved from tokens with ``p_I > q`` to drafted tokens with
``p_I < q``, undoing the solver's tolerance), and the optimum is certified by a dual bound,
with retries and a last-resort fallback: see :func:`solve_canonical` and :mod:`mspec.schemes.lp`
(running HiGHS and certifying its answers, shared with :mod:`mspec.schemes.optimal_lp`).

``acceptance()`` is step 2's acceptance ``sum min(q, p_I)`` (the paper's measure). For
non-optimal weights the residual may still output another drafted token, so P(Y is a
drafted token) -- what ``Selection.accepted`` reports -- can be higher; at the optimum the
two agree, since no scheme exceeds ``P*``. The two steps live in
:class:`mspec.schemes.two_step.TwoStepScheme`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from mspec.distributions import check_draft_target
from mspec.schemes.lp import (
    LP_MASS_FLOOR,
    MAX_LP_VARIABLES,
    Candidate,
    certified_solve,
    check_lp_size,
    constraint_duals,
    draft_tuples,
    lp_seconds,
    membership,
    run_highs,
    selection_dual_bound,
)
from mspec.schemes.selection import SECONDS_PER_ENTRY, sample_index
from mspec.schemes.two_step import TwoStepScheme

#: given weights must sum to 1 over ``y`` within this for every tuple (they are then normalised)
WEIGHT_SUM_TOLERANCE = 1e-9


class CanonicalSolution(NamedTuple):
    """Solution of the canonical LP.

    Attributes:
        value: ``sum_y min(q(y), p_I(y))`` of ``weights`` (recomputed from them), the
            optimal acceptance within ``gap``.
        weights: ``(V,) * K + (V,)`` selection weights ``beta_y(x_1..x_K)``, always valid
            (see :func:`solve_canonical`).
        solver_status: one of :data:`mspec.schemes.lp.SOLVER_STATUSES`.
        gap: certified bound on ``optimum - value`` (``<=`` :data:`mspec.schemes.lp.GAP_TOL`
            = 1e-10 when the status is ``"optimal"`` or ``"retried"``).
        solver_log: one line per HiGHS attempt.
    """

    value: float
    weights: np.ndarray
    solver_status: str
    gap: float
    solver_log: tuple[str, ...]


def solve_canonical_lp(
    *, draft, target, num_drafts=None, max_variables: int = MAX_LP_VARIABLES
) -> tuple[float, np.ndarray]:
    """Optimal selection weights of the canonical decomposition: ``(value, weights)`` of
    :func:`solve_canonical` (same arguments and errors), which also says which solver path ran.

    ``value`` is the acceptance ``sum min(q, p_I)`` of the returned weights (optimal within
    :data:`mspec.schemes.lp.GAP_TOL` unless an :class:`~mspec.schemes.lp.LPFallbackWarning` was emitted);
    ``weights`` has shape ``(V,) * K + (V,)`` with ``weights[x_1, .., x_K, y] = beta_y(x_1..x_K)``.
    """
    solution = solve_canonical(draft=draft, target=target, num_drafts=num_drafts, max_variables=max_variables)
    return solution.value, solution.weights


def solve_canonical(*, draft, target, num_drafts=None, max_variables: int = MAX_LP_VARIABLES) -> CanonicalSolution:
    """Optimal selection weights of the canonical decomposition, with the solver's status.

    Never fails on a valid input. Whatever HiGHS returns, the weights are valid: non-negative
    (clipped), zero unless ``y`` is drafted (only those variables exist), each row summing
    to 1 within ``V eps`` (normalised; a tuple left out of the LP because
    ``P(t) <`` :data:`mspec.schemes.lp.LP_MASS_FLOOR`, or whose LP row came back all zero as
    HiGHS does for tiny ``P(t)``, selects its drafted token of largest dual ``lambda_y``),
    so :class:`CanonicalScheme` is exactly lossless. Optimality is certified as in
    :mod:`mspec.schemes.lp`: HiGHS's duals ``lambda >= 0`` of ``u_y <= p_I(y)`` give the upper
    bound ``sum_y q(y) max(0, 1 - lambda_y) + sum_t P(t) max_{y in t} lambda_y`` and the
    min-cut bounds of :func:`mspec.schemes.lp.cut_bound`; ``gap`` is the least bound minus
    ``value`` (after ``_polish``, which only raises it). HiGHS failing or not
    certified within :data:`mspec.schemes.lp.GAP_TOL` is retried
    (:data:`mspec.schemes.lp.HIGHS_ATTEMPTS`); as a last resort the weights are uniform over
    the distinct drafted tokens (lossless, not optimal; then polished), with an
    :class:`~mspec.schemes.lp.LPFallbackWarning`.

    Guaranteed accuracy: the weights as above; ``value`` is ``sum min(q, p_I)`` of those
    weights; ``value >= optimum - gap``, and ``gap <=`` :data:`mspec.schemes.lp.GAP_TOL` = 1e-10
    when ``solver_status`` is ``"optimal"`` or ``"retried"``.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        max_variables: refuse LPs with more variables than this.

    Returns:
        :class:`CanonicalSolution`.

    Raises:
        ValueError: the LP is too big.
    """
    draft, target, k = check_draft_target(draft, target, num_drafts)
    vocab = target.shape[0]
    if k == 2 and draft.ndim == 1:
        weights, value, status, gap, log = _pair_solution(draft, target, max_variables)
    else:
        weights, value, status, gap, log = _tuple_solution(draft, target, k, max_variables)
    assert weights.shape == (vocab,) * k + (vocab,)
    return CanonicalSolution(value, weights, status, gap, log)


def _acceptance_of(draft, target, weights, k) -> float:
    """``sum_y min(q(y), p_I(y))`` of ``weights``."""
    return float(np.minimum(target, induced_distribution(draft, weights, k)).sum())


def _polish(weights: np.ndarray, draft: np.ndarray, target: np.ndarray, k: int) -> np.ndarray:
    """Undo the solver's tolerance on ``u_y <= p_I(y)``: where ``p_I(y) > q(y)`` (excess) and
    a tuple holding ``y`` also holds a token ``z`` with ``p_I(z) < q(z)`` (deficit), move
    selection weight from ``y`` to ``z``. Each move of mass ``m`` raises ``sum min(q, p_I)``
    by exactly ``m``; the weights stay valid (non-negative, on drafted tokens, rows summing
    to 1). One pass over the (excess, deficit) pairs, longest deficits first."""
    vocab = target.shape[0]
    tuples, probs = draft_tuples(draft, k)
    flat = weights.reshape(-1, vocab)
    index = np.ravel_multi_index(tuple(tuples.T), (vocab,) * k)
    beta = flat[index]
    induced = probs @ beta
    excess = np.maximum(induced - target, 0.0)
    deficit = np.maximum(target - induced, 0.0)
    if not (excess.max() > 0.0 and deficit.max() > 0.0):
        return weights
    member = membership(tuples, vocab)
    for y in np.flatnonzero(excess > 0.0):
        for z in np.argsort(-deficit, kind="stable"):
            if not (deficit[z] > 0.0 and excess[y] > 0.0):
                break
            rows = np.flatnonzero(member[:, z] & (beta[:, y] > 0.0))
            avail = float(probs[rows] @ beta[rows, y])
            if not avail > 0.0:
                continue
            move = min(excess[y], deficit[z], avail)
            shift = beta[rows, y] * (move / avail)
            beta[rows, y] -= shift
            beta[rows, z] += shift
            excess[y] -= move
            deficit[z] -= move
    beta /= beta.sum(axis=1, keepdims=True)
    out = weights.copy()
    out.reshape(-1, vocab)[index] = beta
    return out


def _certified(weights: np.ndarray, lam: np.ndarray, draft, target, k: int) -> Candidate:
    """Valid ``weights`` polished, their acceptance, and the dual bound from ``lam``."""
    weights = _polish(weights, draft, target, k)
    return Candidate(weights, _acceptance_of(draft, target, weights, k), selection_dual_bound(lam, draft, target, k))


def _selection_duals(res, vocab: int) -> np.ndarray:
    """``lambda_y >= 0`` of the V constraints ``u_y <= p_I(y)`` (zeros when HiGHS gave none)."""
    duals = constraint_duals(res, "ineqlin", vocab)
    return np.zeros(vocab) if duals is None else np.maximum(duals, 0.0)


def _tuple_weights(draft, target, k, max_variables) -> np.ndarray:
    """The weights of the general formulation (the tests compare it with the pair LP)."""
    return _tuple_solution(draft, target, k, max_variables)[0]


def _tuple_variables(vocab: int, k: int) -> int:
    """Variables of the tuple LP: ``b_y(t)`` for K tokens of each of ``V^K`` tuples, then ``u_y``."""
    return vocab**k * k + vocab


def _pair_variables(vocab: int) -> int:
    """Variables of the pair LP: one weight per pair ``i < j``, then ``u_y``."""
    return vocab * (vocab - 1) // 2 + vocab


def _tuple_solution(draft, target, k, max_variables):
    """The canonical LP for any K (the first formulation of the module docstring).

    Variables: ``b_y(t) = P(t) beta_y(t)`` for each tuple ``t`` in the LP and each distinct
    drafted token ``y`` of it, then ``u_y``. Returns :func:`~mspec.schemes.lp.certified_solve`'s
    ``(weights, value, status, gap, log)``.
    """
    vocab = target.shape[0]
    check_lp_size(_tuple_variables(vocab, k), max_variables, "canonical LP")
    tuples, probs = draft_tuples(draft, k)
    flat_index = np.ravel_multi_index(tuple(tuples.T), (vocab,) * k)
    in_lp = np.flatnonzero(probs >= LP_MASS_FLOOR)  # the others: see weights_from
    n = in_lp.size
    ordered = np.sort(tuples[in_lp], axis=1)
    first = np.ones(ordered.shape, dtype=bool)  # first occurrence of each distinct token
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    var_tuple, var_pos = np.nonzero(first)
    var_token = ordered[var_tuple, var_pos]
    m = var_tuple.size  # variables b_y(t) = P(t) beta_y(t); then u_y (V of them)
    a_eq = sp.csr_array((np.ones(m), (var_tuple, np.arange(m))), shape=(n, m + vocab))
    # u_y - sum_t b_y(t) <= 0
    a_ub = sp.csr_array(
        (np.concatenate([-np.ones(m), np.ones(vocab)]), (np.concatenate([var_token, np.arange(vocab)]),
                                                           np.arange(m + vocab))),
        shape=(vocab, m + vocab),
    )
    c = np.concatenate([np.zeros(m), -np.ones(vocab)])
    bounds = np.concatenate([np.tile([0.0, np.inf], (m, 1)), np.column_stack([np.zeros(vocab), target])])
    member = membership(tuples, vocab)

    def weights_from(joint: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """Valid weights from approximate joint masses of the LP's tuples: clip, normalise;
        a row with nothing left (and every tuple not in the LP) selects its drafted token
        of largest ``lambda``."""
        beta = np.zeros((tuples.shape[0], vocab))
        beta[in_lp[var_tuple], var_token] = np.maximum(np.nan_to_num(joint, nan=0.0, posinf=0.0, neginf=0.0), 0.0)
        total = beta.sum(axis=1, keepdims=True)
        best = np.argmax(np.where(member, lam[None, :], -np.inf), axis=1)
        greedy = np.zeros_like(beta)
        greedy[np.arange(beta.shape[0]), best] = 1.0
        beta = np.where(total > 0, beta / np.where(total > 0, total, 1.0), greedy)
        weights = _uniform_weights(vocab, k)  # any valid weights for tuples never drafted
        weights.reshape(-1, vocab)[flat_index] = beta
        return weights

    def solve_once(*, method, options):
        res = run_highs(c, A_ub=a_ub, b_ub=np.zeros(vocab), A_eq=a_eq, b_eq=probs[in_lp], bounds=bounds,
                        method=method, options=options)
        lam = _selection_duals(res, vocab)
        return _certified(weights_from(res.x[:m], lam), lam, draft, target, k)

    def fallback():  # no solver: uniform over the distinct drafted tokens
        return _certified(_uniform_weights(vocab, k), np.zeros(vocab), draft, target, k)

    return certified_solve(solve_once, fallback, "canonical LP")


def _pair_solution(draft, target, max_variables):
    """The canonical LP for K = 2 identical drafts: one weight ``w_ij = P(select i | {i, j})``
    per pair ``i < j`` (the second formulation of the module docstring), then ``u_y``.
    Returns :func:`~mspec.schemes.lp.certified_solve`'s ``(weights, value, status, gap, log)``."""
    vocab = target.shape[0]
    check_lp_size(_pair_variables(vocab), max_variables, "canonical LP (K = 2, identical)")
    i, j = np.triu_indices(vocab, k=1)
    coef = 2.0 * draft[i] * draft[j]
    # pairs of tiny probability are left out of the LP (HiGHS drops such matrix values)
    in_lp = np.flatnonzero(coef >= LP_MASS_FLOOR)
    li, lj, lcoef = i[in_lp], j[in_lp], coef[in_lp]
    m = in_lp.size
    # p_I(y) = c_y + sum_{pairs (y, j)} coef w - sum_{pairs (i, y)} coef w; a pair left out
    # counts as w = 1 in c_y (its actual w is set by weights_from: the value is recomputed)
    out = np.setdiff1d(np.arange(i.size), in_lp)
    below = np.concatenate([[0.0], np.cumsum(draft)[:-1]])
    c_y = draft**2 + 2.0 * draft * below + np.bincount(i[out], coef[out], vocab) - np.bincount(j[out], coef[out], vocab)
    # u_y - p_I(y) <= 0  <=>  u_y - sum coef w (y = i) + sum coef w (y = j) <= c_y
    a_ub = sp.csr_array(
        (np.concatenate([-lcoef, lcoef, np.ones(vocab)]),
         (np.concatenate([li, lj, np.arange(vocab)]), np.concatenate([np.arange(m), np.arange(m), m + np.arange(vocab)]))),
        shape=(vocab, m + vocab),
    )
    c = np.concatenate([np.zeros(m), -np.ones(vocab)])
    bounds = np.concatenate([np.tile([0.0, 1.0], (m, 1)), np.column_stack([np.zeros(vocab), target])])

    def weights_from(w_lp: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """Valid weights: ``w`` clipped to [0, 1]; a pair left out of the LP selects its
        token of larger ``lambda``."""
        w = (lam[i] >= lam[j]).astype(np.float64)
        w[in_lp] = np.clip(np.nan_to_num(w_lp, nan=0.5), 0.0, 1.0)
        weights = np.zeros((vocab, vocab, vocab))
        diag = np.arange(vocab)
        weights[diag, diag, diag] = 1.0
        weights[i, j, i] = weights[j, i, i] = w
        weights[i, j, j] = weights[j, i, j] = 1.0 - w
        return weights

    def solve_once(*, method, options):
        res = run_highs(c, A_ub=a_ub, b_ub=c_y, bounds=bounds, method=method, options=options)
        lam = _selection_duals(res, vocab)
        return _certified(weights_from(res.x[:m], lam), lam, draft, target, 2)

    def fallback():  # no solver: each pair selects either token with probability 1/2
        return _certified(weights_from(np.full(m, 0.5), np.zeros(vocab)), np.zeros(vocab), draft, target, 2)

    return certified_solve(solve_once, fallback, "canonical LP (K = 2, identical)")


def _uniform_weights(vocab: int, k: int) -> np.ndarray:
    """Weights that pick uniformly among the distinct drafted tokens, ``(V,) * K + (V,)``."""
    tuples = np.indices((vocab,) * k).reshape(k, -1).T
    rows = membership(tuples, vocab).astype(np.float64)
    rows /= rows.sum(axis=1, keepdims=True)
    return rows.reshape((vocab,) * k + (vocab,))


def induced_distribution(draft: np.ndarray, weights: np.ndarray, num_drafts: int) -> np.ndarray:
    """``p_I(y) = sum_t P(t) beta_y(t)``, shape ``(V,)``.

    Args:
        draft: validated ``(V,)`` or ``(K, V)``.
        weights: ``(V,) * K + (V,)`` selection weights.
        num_drafts: K.
    """
    joint = np.ones(())
    for i in range(num_drafts):
        row = draft if draft.ndim == 1 else draft[i]
        joint = np.multiply.outer(joint, row)
    return np.tensordot(joint, weights, axes=num_drafts)


class CanonicalScheme(TwoStepScheme):
    """Two-step scheme: select a draft with weights ``beta``, then single-draft SpS to ``q``.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        weights: optional ``(V,) * K + (V,)`` selection weights ``beta_y(x_1..x_K)``
            (non-negative, zero unless ``y`` is drafted, summing to 1 over ``y``). By
            default the optimal weights are found with :func:`solve_canonical`.
        max_variables: LP size limit.

    Exactly lossless for any valid weights, and the solved weights are valid whatever
    HiGHS returns; with solved weights the acceptance is the optimum within ``gap``, at
    most :data:`mspec.schemes.lp.GAP_TOL` = 1e-10 unless ``solver_status`` says otherwise
    (with an :class:`~mspec.schemes.lp.LPFallbackWarning`). See :func:`solve_canonical`.

    Attributes:
        weights: ``(V,) * K + (V,)`` selection weights.
        induced: ``(V,)`` induced distribution ``p_I``.
        solver_status: one of :data:`mspec.schemes.lp.SOLVER_STATUSES`; None for given weights.
        gap: certified bound on ``optimum - acceptance`` (None for given weights).
        solver_log: one line per HiGHS attempt.
    """

    name = "canonical"
    faster = "scheme 'optimal' for identical drafts (the same acceptance, at any V), 'is' or 'specinfer' otherwise"

    @classmethod
    def estimate_seconds(cls, *, vocab_size: int, num_drafts: int, identical: bool = True, weights=None,
                         **params) -> float:
        if weights is not None:  # no LP: one pass over the (V,)*K + (V,) weights
            return SECONDS_PER_ENTRY * vocab_size ** (num_drafts + 1)
        if identical and num_drafts == 2:
            return lp_seconds(_pair_variables(vocab_size), "pairs")
        return lp_seconds(_tuple_variables(vocab_size, num_drafts), "tuples")

    @classmethod
    def check_size(cls, *, vocab_size: int, num_drafts: int, identical: bool = True,
                   max_variables: int = MAX_LP_VARIABLES, weights=None, **params) -> None:
        """Refuse an LP of more than ``max_variables`` variables before building it (the pair
        LP for K = 2 identical drafts, the tuple LP otherwise; given ``weights``, none)."""
        if weights is not None:
            return
        if identical and num_drafts == 2:
            check_lp_size(_pair_variables(vocab_size), max_variables, "canonical LP (K = 2, identical)")
        else:
            check_lp_size(_tuple_variables(vocab_size, num_drafts), max_variables, "canonical LP")

    def __init__(self, *, draft, target, num_drafts=None, weights=None, max_variables: int = MAX_LP_VARIABLES):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        self.check_scale(vocab_size=self.vocab_size, num_drafts=self.num_drafts, identical=self.identical,
                         warn=True, weights=weights, max_variables=max_variables)
        self.solver_status, self.gap, self.solver_log = None, None, ()
        if weights is None:
            solution = solve_canonical(
                draft=self.draft, target=self.target, num_drafts=self.num_drafts, max_variables=max_variables
            )
            weights = solution.weights
            self.solver_status, self.gap, self.solver_log = solution.solver_status, solution.gap, solution.solver_log
        else:
            weights = self._check_weights(weights)
        self.weights = weights
        self.induced = induced_distribution(self.draft, weights, self.num_drafts)

    def _check_weights(self, weights) -> np.ndarray:
        vocab, k = self.vocab_size, self.num_drafts
        arr = np.asarray(weights, dtype=np.float64)
        if arr.shape != (vocab,) * k + (vocab,):
            raise ValueError(f"`weights` must have shape {(vocab,) * k + (vocab,)} = (V,)*K + (V,), got {arr.shape}")
        if not np.all(arr >= 0):
            raise ValueError("`weights` must be finite and >= 0")
        tuples = np.indices((vocab,) * k).reshape(k, -1).T
        flat = arr.reshape(-1, vocab)
        if np.any(flat * ~membership(tuples, vocab) > 0):
            raise ValueError("`weights[x_1..x_K, y]` must be 0 unless y is one of x_1..x_K (only drafts can be selected)")
        if not np.allclose(flat.sum(axis=1), 1.0, atol=WEIGHT_SUM_TOLERANCE):
            raise ValueError("`weights[x_1..x_K, :]` must sum to 1 for every draft tuple")
        return arr / arr.sum(axis=-1, keepdims=True)

    def selection_law(self, tokens: np.ndarray) -> dict[int, float]:
        """``{y: beta_y(tokens)}`` over the drafted tokens."""
        beta = self.weights[tuple(tokens)]
        return {int(y): float(beta[y]) for y in np.unique(tokens) if beta[y] > 0}

    def select(self, tokens: np.ndarray, rng: np.random.Generator) -> int:
        return sample_index(self.weights[tuple(tokens)], rng)


__all__ = ["CanonicalScheme", "CanonicalSolution", "induced_distribution", "solve_canonical", "solve_canonical_lp"]
