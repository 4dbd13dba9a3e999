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
:mod:`mspec.canonical` and, for identical drafts, the closed form of
:mod:`mspec.closed_form`).

Implementation notes (deviations from the formulation above, same optimum):

* we solve for the joint masses ``x(t, y) = P(t) pi(y | t)`` (row sums ``P(t)``, column
  sums ``q(y)``) -- a plain transport polytope, better scaled than the conditional form
  when some ``P(t)`` are tiny -- and divide by ``P(t)`` afterwards;
* tuples with ``P(t) = 0`` cannot be drafted and are left out;
* the column-sum constraint of the last token is dropped: it is implied by the others
  (both sides sum to 1), and keeping it makes HiGHS fail on float mismatch.

The plan is exact up to the solver's feasibility tolerance (we ask for 1e-10), so the
output law matches ``q`` to about that accuracy, not to machine precision. For a scheme
that is exactly lossless whatever the solver does, use
:class:`mspec.canonical.CanonicalScheme`, which solves the equivalent canonical LP.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from .closed_form import optimal_acceptance
from .distributions import check_draft_target
from .selection import Selection, SelectionScheme, check_rng, sample_index

#: refuse LPs with more variables than this (V^K * V for the full LP)
MAX_LP_VARIABLES = 2_000_000

#: HiGHS options: tighter than the defaults (1e-7) so the plan is lossless to ~1e-10
HIGHS_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


class LPSolveError(RuntimeError):
    """The LP solver did not return an optimal solution (never silently ignored)."""


class OptimalPlan(NamedTuple):
    """Solution of the full optimal-transport LP.

    Attributes:
        value: optimal acceptance ``P*(acc)`` (recomputed from ``plan``), or the optimum of the
            ``worth`` objective when one is given.
        plan: ``(N, V)``; row ``n`` is ``pi(. | tuples[n])``.
        tuples: ``(N, K)`` int; the draft tuples with ``P(t) > 0``.
        tuple_probs: ``(N,)``; ``P(t)`` for each tuple.
    """

    value: float
    plan: np.ndarray
    tuples: np.ndarray
    tuple_probs: np.ndarray


def draft_tuples(draft: np.ndarray, num_drafts: int) -> tuple[np.ndarray, np.ndarray]:
    """All draft tuples with positive probability.

    Args:
        draft: validated ``(V,)`` (identical drafts) or ``(K, V)``.
        num_drafts: K.

    Returns:
        ``(tuples, probs)``: int ``(N, K)`` in lexicographic order and float ``(N,)``.
    """
    vocab = draft.shape[-1]
    tuples = np.indices((vocab,) * num_drafts).reshape(num_drafts, -1).T
    probs = np.ones(tuples.shape[0])
    for i in range(num_drafts):
        row = draft if draft.ndim == 1 else draft[i]
        probs *= row[tuples[:, i]]
    keep = probs > 0
    return tuples[keep], probs[keep]


def check_lp_size(num_variables: int, max_variables: int, what: str) -> None:
    """Raise a ValueError pointing to the closed form / IS scheme when an LP is too big."""
    if num_variables > max_variables:
        raise ValueError(
            f"the {what} would have {num_variables:,} variables, over max_variables="
            f"{max_variables:,} (it grows like V^K * V); for the optimal acceptance at this size "
            "use mspec.closed_form.optimal_acceptance (O(V log V) for identical drafts), and for a "
            "practical scheme use mspec.importance.ImportanceSampling ('is')"
        )


def run_linprog(c, *, tight: bool = True, **kwargs):
    """``scipy.optimize.linprog(method="highs")`` that raises :class:`LPSolveError` on failure.

    ``tight=True`` passes :data:`HIGHS_OPTIONS`; ``False`` keeps HiGHS's defaults (faster
    to set up; for LPs whose solution is clipped and re-evaluated anyway).
    """
    res = linprog(c, method="highs", options=HIGHS_OPTIONS if tight else None, **kwargs)
    if res.status != 0 or res.x is None:
        raise LPSolveError(f"HiGHS did not find an optimal solution (status {res.status}): {res.message}")
    return res


def solve_optimal_lp(*, draft, target, num_drafts=None, max_variables: int = MAX_LP_VARIABLES,
                     worth=None) -> OptimalPlan:
    """Solve the full optimal-transport LP (see the module docstring).

    With ``worth`` the objective values an output by what it is worth to the rest of the
    block, not by acceptance alone (a deviation from the paper's LP, for teaching: chapter 8
    uses it to show that no single rule is best for every continuation)::

        maximise  sum_t P(t) sum_{y in t} pi(y | t) worth[y, m_y(t) - 1]

    where ``m_y(t)`` is the number of drafts in ``t`` that hold ``y`` (the drafts that
    survive when ``y`` is output). ``worth = 1`` everywhere is the acceptance LP.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        max_variables: refuse problems with more than this many variables (``V^K * V``).
        worth: optional ``(V, K)`` finite array, see above.

    Returns:
        :class:`OptimalPlan`; its ``value`` is the optimum of the objective (the acceptance
        when ``worth`` is None).

    Raises:
        ValueError: the LP is too big, or ``worth`` has the wrong shape or non-finite entries.
        LPSolveError: HiGHS failed.
    """
    draft, target, k = check_draft_target(draft, target, num_drafts)
    vocab = target.shape[0]
    if worth is not None:
        worth = np.asarray(worth, dtype=np.float64)
        if worth.shape != (vocab, k) or not np.all(np.isfinite(worth)):
            raise ValueError(f"worth must be a finite (V, K) = ({vocab}, {k}) array (row y, column m - 1: the "
                             f"worth of outputting y when m drafts hold it); got shape {worth.shape}")
    check_lp_size(vocab**k * vocab, max_variables, "full optimal-transport LP")
    tuples, probs = draft_tuples(draft, k)
    n = tuples.shape[0]
    var = np.arange(n * vocab)  # variable x(t, y) has index t * V + y
    rows = np.concatenate([var // vocab, n + var % vocab])
    a_eq = sp.csr_array((np.ones(2 * var.size), (rows, np.concatenate([var, var]))), shape=(n + vocab, n * vocab))
    b_eq = np.concatenate([probs, target])
    # drop the last column-sum row: implied by the others, and a float mismatch between
    # sum P(t) and sum q would make the LP infeasible
    a_eq, b_eq = a_eq[: n + vocab - 1], b_eq[: n + vocab - 1]
    gain = _membership(tuples, vocab).astype(np.float64)
    if worth is not None:
        counts = np.zeros((n, vocab), dtype=np.int64)  # m_y(t): drafts of tuple t holding y
        for col in tuples.T:
            counts[np.arange(n), col] += 1
        gain = np.where(counts > 0, worth[np.arange(vocab)[None, :], np.maximum(counts, 1) - 1], 0.0)
    res = run_linprog(-gain.ravel(), A_eq=a_eq, b_eq=b_eq, bounds=(0, None))
    joint = np.maximum(res.x.reshape(n, vocab), 0.0)
    plan = joint / joint.sum(axis=1, keepdims=True)
    value = float(probs @ (plan * gain).sum(axis=1))
    return OptimalPlan(value, plan, tuples, probs)


def _membership(tuples: np.ndarray, vocab: int) -> np.ndarray:
    """Boolean ``(N, V)``: whether token y is one of the drafted tokens of tuple n."""
    member = np.zeros((tuples.shape[0], vocab), dtype=bool)
    for col in tuples.T:
        member[np.arange(tuples.shape[0]), col] = True
    return member


class OptimalLP(SelectionScheme):
    """The optimal scheme: ``Y`` drawn from the row of the LP plan of the drafted tuple.

    Works for identical and non-identical drafts; small V and K only (see
    :data:`MAX_LP_VARIABLES`). For the optimal *value* at any V use
    :func:`optimal_acceptance`.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        max_variables: LP size limit.

    Attributes:
        value: the LP optimum ``P*(acc)``.
        plan: ``(N, V)`` conditional plan, one row per tuple in ``tuples``.
        tuples: ``(N, K)`` the draft tuples with positive probability.
    """

    name = "optimal-lp"

    def __init__(self, *, draft, target, num_drafts=None, max_variables: int = MAX_LP_VARIABLES):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        solution = solve_optimal_lp(
            draft=self.draft, target=self.target, num_drafts=self.num_drafts, max_variables=max_variables
        )
        self.value, self.plan, self.tuples, self.tuple_probs = solution
        shape = (self.vocab_size,) * self.num_drafts
        self._row_of = np.full(self.vocab_size**self.num_drafts, -1, dtype=np.int64)
        self._row_of[np.ravel_multi_index(tuple(self.tuples.T), shape)] = np.arange(self.tuples.shape[0])
        self._shape = shape

    def acceptance(self) -> float:
        """The LP optimum, ``P(Y in drafts)`` under the plan."""
        return self.value

    def plan_row(self, tokens: np.ndarray) -> np.ndarray:
        """``pi(. | tokens)``, shape ``(V,)``, for validated drafted tokens."""
        return self.plan[self._row_of[np.ravel_multi_index(tuple(tokens), self._shape)]]

    def conditional(self, drafts):
        tokens = self.check_tokens(drafts)
        row = self.plan_row(tokens).copy()
        return row, float(row[np.unique(tokens)].sum())

    def sample(self, drafts, rng: np.random.Generator) -> Selection:
        tokens = self.check_tokens(drafts)
        check_rng(rng)
        return self.selection(tokens, sample_index(self.plan_row(tokens), rng))


__all__ = [
    "LPSolveError",
    "MAX_LP_VARIABLES",
    "OptimalLP",
    "OptimalPlan",
    "draft_tuples",
    "optimal_acceptance",
    "solve_optimal_lp",
]
