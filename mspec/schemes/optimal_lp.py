"""The optimal selection scheme as a linear program (optimal transport with membership cost).

Drafts ``X_1..X_K`` (independent, ``X_i ~ p_i``; identical drafts ``p_i = p``) are drawn,
then ``Y`` is drawn from a plan ``pi(y | x_1..x_K)``. Among all plans whose output
marginal is the target ``q``, the optimal one maximises the acceptance
``P(Y in {X_1..X_K})``::

    maximise   sum_t P(t) sum_{y in t} pi(y | t)
    subject to sum_y pi(y | t) = 1            for every tuple t
               sum_t P(t) pi(y | t) = q(y)    for every token y
               pi >= 0

with ``P(t) = prod_i p_i(x_i)`` for ``t = (x_1..x_K)``. This is a transport problem with
``V^K * V`` variables, so it is only for small V and K (the SpecTr paper's LP; the
paper we follow shows its optimum equals the canonical decomposition of
:mod:`mspec.schemes.canonical` and, for identical drafts, the closed form of
:mod:`mspec.schemes.closed_form`).

Implementation notes (deviations from the formulation above, same optimum):

* HiGHS solves for the joint masses ``x(t, y) = P(t) pi(y | t)`` (row sums ``P(t)``, column
  sums ``q(y)``), a plain transport polytope. Its feasibility tolerance is *absolute*
  (1e-10), so rows of tiny ``P(t)`` come back as anything (typically all zero): the LP
  solution is never used as it is. It is **repaired** into an exactly feasible plan
  (:func:`mspec.schemes.lp.repair_plan`): negatives clipped, each row scaled down to at most
  ``P(t)`` and each column to at most ``q(y)``, then the row deficits ``d_t`` and column
  deficits ``e_y`` filled with the product ``d_t e_y / sum(e)``. The reported ``value`` is
  the objective of the repaired plan, recomputed.
* Optimality is **certified**: HiGHS's column duals ``v`` give, for any ``v``, the upper
  bound ``sum_t P(t) max_y (gain(t, y) - v_y) + sum_y q(y) v_y`` on the optimum (LP weak
  duality); for the acceptance objective also the min-cut bounds ``q(S) + 1 -
  prod_i p_i(S)`` over the level sets ``S`` of ``v`` and of ``q/p``
  (:func:`mspec.schemes.lp.cut_bound`), which stay exact when the duals of tiny masses are not.
  ``gap`` is the least bound minus ``value`` (plus a rounding allowance).
* Tuples with ``P(t) = 0`` cannot be drafted and are left out (a tuple whose ``P(t)``
  underflows to 0 although each of its tokens has ``p_i > 0`` gets the product-coupling
  row ``pi(. | t) = q``). Tuples with ``P(t) <`` :data:`~mspec.schemes.lp.LP_MASS_FLOOR` and
  tokens with ``0 < q(y) <`` :data:`~mspec.schemes.lp.LP_MASS_FLOOR` are left out of the LP (they
  would only feed HiGHS numbers far below its tolerance) and handled by the repair; tokens
  with ``q(y) = 0`` are left out altogether.
* The column-sum constraint of the token of largest ``q`` is dropped: it is implied by
  the others up to rounding, and with it the LP is always feasible in exact arithmetic
  (that column absorbs the float mismatch between ``sum P`` and ``sum q``).
* If HiGHS fails (status != 0, an exception) or its solution is not certified within
  :data:`~mspec.schemes.lp.GAP_TOL`, it is retried with the other settings of
  :data:`~mspec.schemes.lp.HIGHS_ATTEMPTS`; as a last resort the plan is the product coupling
  ``pi(y | t) = q(y)`` (lossless, not optimal). Which path ran is in ``solver_status``
  (see :data:`~mspec.schemes.lp.SOLVER_STATUSES`) and ``solver_log``, and the last two paths also
  emit an :class:`~mspec.schemes.lp.LPFallbackWarning`.

Running HiGHS, the repair and the certificates are shared with the canonical LP and live
in :mod:`mspec.schemes.lp`; this module builds the transport LP and reads its answer.

Guaranteed accuracy, whatever HiGHS returns (``N`` = number of tuples, ``eps`` = 2.2e-16):

* the plan is non-negative, zero wherever ``q(y) = 0``, every row sums to 1 within
  ``V eps`` and the output law ``sum_t P(t) pi(. | t)`` equals ``q`` entrywise within a few
  ``(N + V) eps`` (1e-14 for the ``N <= 10^4`` we test): exact up to rounding;
* ``value`` is the objective of that plan (recomputed from it);
* ``value >= OPT - gap``; when ``solver_status`` is ``"optimal"`` or ``"retried"``,
  ``gap <= GAP_TOL = 1e-10``. For the acceptance objective the tests check ``value``
  against :func:`mspec.schemes.closed_form.optimal_acceptance` to 1e-10 on hostile inputs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from mspec.distributions import check_draft_target
from mspec.schemes.lp import (  # GAP_TOL, the warning and error, and SOLVER_STATUSES: importable from here too
    GAP_TOL,
    LP_MASS_FLOOR,
    MAX_LP_VARIABLES,
    SOLVER_STATUSES,
    Candidate,
    LPFallbackWarning,
    LPSolveError,
    certified_solve,
    check_lp_size,
    constraint_duals,
    cut_bound,
    draft_tuples,
    lp_seconds,
    membership,
    repair_plan,
    run_highs,
    transport_dual_bound,
)
from mspec.schemes.selection import SelectionScheme, sample_index


class OptimalPlan(NamedTuple):
    """Solution of the full optimal-transport LP.

    Attributes:
        value: acceptance ``P(Y in drafts)`` of ``plan`` (recomputed from it), or its
            ``worth`` objective when one is given; the optimum up to ``gap``.
        plan: ``(N, V)``; row ``n`` is ``pi(. | tuples[n])``, exactly feasible (see the
            module docstring for the accuracy).
        tuples: ``(N, K)`` int; the draft tuples with ``P(t) > 0``.
        tuple_probs: ``(N,)``; ``P(t)`` for each tuple.
        solver_status: one of :data:`~mspec.schemes.lp.SOLVER_STATUSES`.
        gap: certified bound on ``OPT - value`` (``<= GAP_TOL`` when the status is
            ``"optimal"`` or ``"retried"``).
        solver_log: one line per HiGHS attempt.
    """

    value: float
    plan: np.ndarray
    tuples: np.ndarray
    tuple_probs: np.ndarray
    solver_status: str = "optimal"
    gap: float = 0.0
    solver_log: tuple[str, ...] = ()


def solve_optimal_lp(*, draft, target, num_drafts=None, max_variables: int = MAX_LP_VARIABLES,
                     worth=None) -> OptimalPlan:
    """Solve the full optimal-transport LP (see the module docstring).

    With ``worth`` the objective values an output by what it is worth to the rest of the
    block, not by acceptance alone (a deviation from the paper's LP, for teaching: chapter 9
    uses it to show that no single rule is best for every continuation)::

        maximise  sum_t P(t) sum_{y in t} pi(y | t) worth[y, m_y(t) - 1]

    where ``m_y(t)`` is the number of drafts in ``t`` that hold ``y`` (the drafts that
    survive when ``y`` is output). ``worth = 1`` everywhere is the acceptance LP.

    Never fails on a valid input: the plan is repaired to be exactly feasible whatever
    HiGHS returns, and its optimality is certified (see the module docstring for the
    accuracy, retries and fallback).

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        max_variables: refuse problems with more than this many variables (``V^K * V``).
        worth: optional ``(V, K)`` finite array, see above.

    Returns:
        :class:`OptimalPlan`; its ``value`` is the objective of the plan (the acceptance
        when ``worth`` is None), at least the optimum minus ``gap``.

    Raises:
        ValueError: the LP is too big, or ``worth`` has the wrong shape or non-finite entries.

    Warns:
        LPFallbackWarning: no HiGHS solution was certified optimal (``solver_status``
        ``"suboptimal"`` or ``"fallback"``).
    """
    draft, target, k = check_draft_target(draft, target, num_drafts)
    vocab = target.shape[0]
    worth = _check_worth(worth, vocab, k)
    OptimalLP.check_size(vocab_size=vocab, num_drafts=k, max_variables=max_variables)
    tuples, probs = draft_tuples(draft, k)
    gain = _gain(tuples, vocab, worth)
    lp = TransportLP.build(probs, target, gain)

    def candidate(joint: np.ndarray, duals: np.ndarray) -> Candidate:
        """The repaired plan of approximate joint masses, its objective, and a bound from ``duals``."""
        plan = repair_plan(joint, probs, target)
        bound = transport_dual_bound(duals, gain, probs, target)
        if worth is None:  # the acceptance LP: also the min-cut bound from the same duals
            bound = min(bound, cut_bound(duals, draft, target, k))
        return Candidate(plan, float(probs @ (plan * gain).sum(axis=1)), bound)

    def solve_once(*, method, options):
        res = run_highs(lp.cost, A_eq=lp.a_eq, b_eq=lp.b_eq, bounds=(0, None), method=method, options=options)
        return candidate(lp.joint(res, probs.size, vocab), lp.column_duals(res, vocab))

    def fallback():  # no solver: the product coupling pi(y | t) = q(y), bounded with zero duals
        return candidate(np.zeros((probs.size, vocab)), np.zeros(vocab))

    plan, value, status, gap, log = certified_solve(solve_once, fallback, "optimal-transport LP")
    return OptimalPlan(value, plan, tuples, probs, status, gap, log)


def _check_worth(worth, vocab: int, k: int) -> np.ndarray | None:
    """``worth`` as a float ``(V, K)`` array (None stays None), or a ValueError."""
    if worth is None:
        return None
    worth = np.asarray(worth, dtype=np.float64)
    if worth.shape != (vocab, k) or not np.all(np.isfinite(worth)):
        raise ValueError(f"worth must be a finite (V, K) = ({vocab}, {k}) array (row y, column m - 1: the "
                         f"worth of outputting y when m drafts hold it); got shape {worth.shape}")
    return worth


def _gain(tuples: np.ndarray, vocab: int, worth: np.ndarray | None) -> np.ndarray:
    """``(N, V)`` objective coefficient of outputting y after tuple n: 1 if y is drafted
    (acceptance), or ``worth[y, m_y(t) - 1]`` with ``m_y(t)`` drafts holding y; else 0."""
    if worth is None:
        return membership(tuples, vocab).astype(np.float64)
    n = tuples.shape[0]
    counts = np.zeros((n, vocab), dtype=np.int64)  # m_y(t): drafts of tuple t holding y
    for col in tuples.T:
        counts[np.arange(n), col] += 1
    return np.where(counts > 0, worth[np.arange(vocab)[None, :], np.maximum(counts, 1) - 1], 0.0)


class TransportLP(NamedTuple):
    """The transport LP as HiGHS gets it: minimise ``cost @ x`` with ``a_eq x = b_eq``, ``x >= 0``.

    Variable ``i * len(cols) + j`` is the joint mass ``x(rows[i], cols[j])``. The rows of
    ``a_eq`` are the row sums ``P(t)`` of the tuples ``rows``, then the column sums ``q(y)``
    of the tokens ``cols[kept]``.

    Attributes:
        rows: tuples in the LP, ``P(t) >=`` :data:`~mspec.schemes.lp.LP_MASS_FLOOR`.
        cols: tokens in the LP, ``q(y) >=`` :data:`~mspec.schemes.lp.LP_MASS_FLOOR`.
        kept: positions in ``cols`` of the tokens whose column sum is a constraint: all
            but the token of largest ``q``, whose constraint is implied by the others up to
            rounding (that column absorbs the float mismatch between ``sum P`` and
            ``sum q``, so the LP is feasible).
        cost: ``-gain`` of each variable.
        a_eq: sparse constraint matrix.
        b_eq: its right-hand side.
    """

    rows: np.ndarray
    cols: np.ndarray
    kept: np.ndarray
    cost: np.ndarray
    a_eq: sp.csr_array
    b_eq: np.ndarray

    @classmethod
    def build(cls, probs: np.ndarray, target: np.ndarray, gain: np.ndarray) -> TransportLP:
        rows = np.flatnonzero(probs >= LP_MASS_FLOOR)
        cols = np.flatnonzero(target >= LP_MASS_FLOOR)
        nr, nc = rows.size, cols.size
        col_con = np.full(nc, -1)  # constraint number of each column's sum, -1 for the dropped one
        kept = np.flatnonzero(cols != np.argmax(target))
        col_con[kept] = np.arange(kept.size)
        var = np.arange(nr * nc)
        in_col = col_con[var % nc] >= 0
        a_eq = sp.csr_array(
            (np.ones(var.size + in_col.sum()),
             (np.concatenate([var // nc, nr + col_con[var % nc][in_col]]), np.concatenate([var, var[in_col]]))),
            shape=(nr + kept.size, nr * nc),
        )
        b_eq = np.concatenate([probs[rows], target[cols[kept]]])
        return cls(rows, cols, kept, -gain[np.ix_(rows, cols)].ravel(), a_eq, b_eq)

    def joint(self, res, num_tuples: int, vocab: int) -> np.ndarray:
        """``(N, V)`` joint masses of HiGHS's solution; 0 outside the LP."""
        joint = np.zeros((num_tuples, vocab))
        joint[np.ix_(self.rows, self.cols)] = res.x.reshape(self.rows.size, self.cols.size)
        return joint

    def column_duals(self, res, vocab: int) -> np.ndarray:
        """``(V,)`` duals ``v`` of the column sums, for :func:`~mspec.schemes.lp.transport_dual_bound`:
        NaN for tokens left out of the LP (the bound chooses them), 0 for the dropped column
        and for every column when HiGHS gives no duals."""
        v = np.full(vocab, np.nan)
        v[self.cols] = 0.0
        duals = constraint_duals(res, "eqlin", self.b_eq.size)
        if duals is not None:
            v[self.cols[self.kept]] = duals[self.rows.size:]
        return v


class OptimalLP(SelectionScheme):
    """The optimal scheme: ``Y`` drawn from the row of the LP plan of the drafted tuple.

    Works for identical and non-identical drafts; small V and K only (see
    :data:`~mspec.schemes.lp.MAX_LP_VARIABLES`). For the optimal *value* at any V use
    :func:`mspec.schemes.closed_form.optimal_acceptance`.

    Exactly lossless on every valid input (the plan is repaired to be exactly feasible
    whatever HiGHS returns); its acceptance is the optimum within ``gap``, at most
    :data:`~mspec.schemes.lp.GAP_TOL` = 1e-10 unless ``solver_status`` says otherwise (with an
    :class:`~mspec.schemes.lp.LPFallbackWarning`). See the module docstring.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        max_variables: LP size limit.

    Attributes:
        value: ``P(Y in drafts)`` under the plan, the LP optimum within ``gap``.
        plan: ``(N, V)`` conditional plan, one row per tuple in ``tuples``.
        tuples: ``(N, K)`` the draft tuples with positive probability.
        tuple_probs: ``(N,)`` their probabilities.
        solver_status: which path produced the plan, one of :data:`~mspec.schemes.lp.SOLVER_STATUSES`.
        gap: certified bound on ``optimum - value``.
        solver_log: one line per HiGHS attempt.
    """

    name = "optimal-lp"
    faster = "scheme 'optimal' for identical drafts (the same acceptance, at any V), 'is' or 'specinfer' otherwise"

    @classmethod
    def estimate_seconds(cls, *, vocab_size: int, num_drafts: int, identical: bool = True, **params) -> float:
        return lp_seconds(vocab_size**num_drafts * vocab_size, "transport")

    @classmethod
    def check_size(cls, *, vocab_size: int, num_drafts: int, identical: bool = True,
                   max_variables: int = MAX_LP_VARIABLES, **params) -> None:
        """Refuse an LP of more than ``max_variables`` variables (``V^K * V``) before building it."""
        check_lp_size(vocab_size**num_drafts * vocab_size, max_variables, "full optimal-transport LP")

    def __init__(self, *, draft, target, num_drafts=None, max_variables: int = MAX_LP_VARIABLES):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        self.check_scale(vocab_size=self.vocab_size, num_drafts=self.num_drafts, warn=True,
                         max_variables=max_variables)
        solution = solve_optimal_lp(
            draft=self.draft, target=self.target, num_drafts=self.num_drafts, max_variables=max_variables
        )
        self.value, self.plan, self.tuples, self.tuple_probs = solution[:4]
        self.solver_status, self.gap, self.solver_log = solution.solver_status, solution.gap, solution.solver_log
        shape = (self.vocab_size,) * self.num_drafts
        self._row_of = np.full(self.vocab_size**self.num_drafts, -1, dtype=np.int64)
        self._row_of[np.ravel_multi_index(tuple(self.tuples.T), shape)] = np.arange(self.tuples.shape[0])
        self._shape = shape

    def _acceptance(self) -> float:
        """``P(Y in drafts)`` under the plan (the LP optimum within ``gap``)."""
        return self.value

    def plan_row(self, tokens: np.ndarray) -> np.ndarray:
        """``pi(. | tokens)``, shape ``(V,)``, for validated drafted tokens.

        A tuple whose probability underflows to 0 (each token has ``p_i > 0`` but the
        product is below the smallest float) has no plan row: it gets the product-coupling
        row ``q`` (it carries no mass in float arithmetic, so the law is unchanged).
        """
        row = self._row_of[np.ravel_multi_index(tuple(tokens), self._shape)]
        return self.target if row < 0 else self.plan[row]

    def _conditional(self, tokens):
        return self.plan_row(tokens).copy()

    def _sample(self, tokens, rng: np.random.Generator) -> int:
        return sample_index(self.plan_row(tokens), rng)


__all__ = ["GAP_TOL", "LPFallbackWarning", "LPSolveError", "MAX_LP_VARIABLES", "OptimalLP", "OptimalPlan",
           "SOLVER_STATUSES", "TransportLP", "cut_bound", "draft_tuples", "repair_plan", "solve_optimal_lp"]
