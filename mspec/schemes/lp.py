"""Running the LP solver HiGHS and certifying its answers, for the LPs of this package.

The two linear programs of the package -- the full optimal-transport LP of
:mod:`mspec.schemes.optimal_lp` and the canonical LP of :mod:`mspec.schemes.canonical` -- are solved by HiGHS
(through ``scipy.optimize.linprog``). A solver's answer is never exact: HiGHS's
feasibility tolerance is *absolute* (1e-10 here), so a row of tiny probability can come
back as anything (typically all zero), and on some inputs it stops with "infeasible". This
module holds what turns such answers into exact results:

* **Running HiGHS** (``run_highs``): any failure -- a status other than optimal, a
  missing or non-finite solution, an exception inside the solver -- becomes an
  :class:`LPSolveError`.
* **Repair**: the caller makes the answer exactly feasible. For the transport LP that is
  :func:`repair_plan` (clip, scale down, fill the deficits); the canonical LP repairs its
  selection weights itself (:mod:`mspec.schemes.canonical`).
* **Certification**: LP weak duality turns *any* dual vector into an upper bound on the
  optimum (:func:`transport_dual_bound`, :func:`selection_dual_bound`), and the min-cut
  bound (:func:`cut_bound`) stays exact when the duals of tiny masses are not. The gap
  ``bound - value`` of the repaired solution is a proof of how far from optimal it can be.
* **Retries and fallback** (``certified_solve``): HiGHS runs with the settings of
  :data:`HIGHS_ATTEMPTS` until a solution is certified within :data:`GAP_TOL`; if none is,
  the best repaired solution (or a solver-free fallback) is used, with an
  :class:`LPFallbackWarning`. The path taken is one of :data:`SOLVER_STATUSES`.

Also here: the draft tuples every LP enumerates (:func:`draft_tuples`,
:func:`membership`) and the size check (:func:`check_lp_size`).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
from scipy.optimize import linprog

#: refuse LPs with more variables than this (V^K * V for the full LP)
MAX_LP_VARIABLES = 2_000_000

#: seconds HiGHS takes on the package's LPs, ``c * variables^alpha`` per LP family: fitted
#: from 0.1 to 20 s on a busy 2-core x86 CPU, so on the slow side (an idle run took 0.15 to
#: 0.65 of it); ``python -m mspec_lab optimal`` times the LPs on the reader's machine
LP_SECONDS = {"transport": (2.7e-6, 1.25), "pairs": (3.6e-10, 2.49), "tuples": (1.0e-6, 1.37)}

#: HiGHS options: tighter than the defaults (1e-7) so the LP solution needs little repair
HIGHS_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}

#: HiGHS settings tried in turn until one gives a solution certified within GAP_TOL
HIGHS_ATTEMPTS = (
    ("highs (tight tolerances)", {"method": "highs", "options": HIGHS_OPTIONS}),
    ("dual simplex, presolve off", {"method": "highs-ds", "options": {**HIGHS_OPTIONS, "presolve": False}}),
    ("interior point + crossover, presolve off", {"method": "highs-ipm", "options": {"presolve": False}}),
)

#: a solution is accepted once its certified optimality gap (dual bound - value) is at most this
GAP_TOL = 1e-10

#: tuple and token masses below this are left out of the LPs (the repair handles them);
#: at most (N + V) * LP_MASS_FLOOR of objective is lost that way
LP_MASS_FLOOR = 1e-30

#: relative allowance for the rounding of a bound's sum: numpy sums pairwise, which errs by
#: about log2(N) eps (5e-15 for N = 2^21 terms) times the sum of the terms' magnitudes
SUM_ROUNDING = 1e-14

#: rounding allowance of :func:`cut_bound`, in ulps per token and per draft (its prefix
#: sums and their product each round by about an ulp per term)
CUT_ROUNDING_ULPS = 4.0

#: ``solver_status`` values: the first HiGHS solve was certified optimal; a retry was;
#: no solve was certified (the best repaired solution is used, ``gap`` says how far from
#: optimal it may be); HiGHS returned nothing usable (product coupling / uniform weights)
SOLVER_STATUSES = ("optimal", "retried", "suboptimal", "fallback")


class LPSolveError(RuntimeError):
    """The LP solver did not return an optimal solution. Raised by ``run_highs`` and
    ``run_linprog``; the LPs of this package catch it, retry and fall back instead,
    never silently (see ``certified_solve``)."""


class LPFallbackWarning(RuntimeWarning):
    """No HiGHS solve was certified optimal: a lossless but possibly suboptimal plan is used."""


# --- the draft tuples -----------------------------------------------------------------------

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


def membership(tuples: np.ndarray, vocab: int) -> np.ndarray:
    """Boolean ``(N, V)``: whether token y is one of the drafted tokens of tuple n."""
    member = np.zeros((tuples.shape[0], vocab), dtype=bool)
    for col in tuples.T:
        member[np.arange(tuples.shape[0]), col] = True
    return member


def lp_seconds(num_variables: int, family: str) -> float:
    """Rough seconds to solve an LP of ``num_variables`` of ``family`` (a key of :data:`LP_SECONDS`)."""
    c, alpha = LP_SECONDS[family]
    return c * float(num_variables) ** alpha


def check_lp_size(num_variables: int, max_variables: int, what: str) -> None:
    """Raise a ValueError pointing to the closed form / IS scheme when an LP is too big."""
    if num_variables > max_variables:
        raise ValueError(
            f"the {what} would have {num_variables:,} variables, over max_variables="
            f"{max_variables:,} (it grows like V^K * V); at this size use scheme 'optimal' (exactly "
            "optimal at any V for identical drafts), 'specinfer' or 'is-ratio' (drafts of their own laws), and "
            "mspec.optimal_acceptance for the optimal acceptance alone (O(V log V))"
        )


# --- running HiGHS --------------------------------------------------------------------------

def run_linprog(c, *, tight: bool = True, **kwargs):
    """``scipy.optimize.linprog(method="highs")`` that raises :class:`LPSolveError` on failure.

    ``tight=True`` passes :data:`HIGHS_OPTIONS`; ``False`` keeps HiGHS's defaults (faster
    to set up; for LPs whose solution is clipped and re-evaluated anyway). The LPs of this
    package go through ``certified_solve`` instead, which retries and never fails.
    """
    return run_highs(c, method="highs", options=HIGHS_OPTIONS if tight else None, **kwargs)


def run_highs(c, *, method: str, options, **kwargs):
    """One ``linprog`` call; any failure (status != 0, no or non-finite ``x``, an exception
    inside the solver) becomes an :class:`LPSolveError`."""
    try:
        res = linprog(c, method=method, options=options, **kwargs)
    except Exception as err:  # noqa: BLE001 -- whatever the solver raises, the caller retries
        raise LPSolveError(f"HiGHS raised {type(err).__name__}: {err}") from err
    if res.status != 0 or res.x is None:
        raise LPSolveError(f"HiGHS did not find an optimal solution (status {res.status}): {res.message}")
    if np.shape(res.x) != np.shape(c) or not np.all(np.isfinite(res.x)):
        raise LPSolveError("HiGHS returned a solution with NaN/inf or of the wrong shape")
    return res


def constraint_duals(res, kind: str, count: int) -> np.ndarray | None:
    """HiGHS's duals of the ``count`` constraints of ``kind`` (``"eqlin"`` or ``"ineqlin"``).

    ``linprog`` minimises, and the LPs here maximise by minimising ``-objective``, so the
    signs are flipped to the maximisation's convention. ``None`` when HiGHS gave none, or
    not ``count`` finite ones.
    """
    marginals = getattr(getattr(res, kind, None), "marginals", None)
    if marginals is None or np.shape(marginals) != (count,) or not np.all(np.isfinite(marginals)):
        return None
    return -np.asarray(marginals, dtype=np.float64)


# --- retries and certification ----------------------------------------------------------------

class Candidate(NamedTuple):
    """One repaired LP solution: ``payload`` (a plan or weights, always feasible), its
    objective ``value`` and an upper ``bound`` on the optimum (``inf`` when unknown)."""

    payload: object
    value: float
    bound: float


def certified_solve(solve_once, fallback, what: str):
    """Run HiGHS with the settings of :data:`HIGHS_ATTEMPTS` until a solution is certified.

    Args:
        solve_once: ``solve_once(method=..., options=...) -> Candidate``; may raise
            :class:`LPSolveError`.
        fallback: ``fallback() -> Candidate`` built without the solver.
        what: the LP's name, for the warning.

    Returns:
        ``(payload, value, status, gap, log)``: the best candidate, its value, one of
        :data:`SOLVER_STATUSES`, the certified gap (best bound of all attempts minus value)
        and one line per attempt. The first candidate whose gap is at most :data:`GAP_TOL`
        is returned at once; otherwise the best of all (the fallback included) with an
        :class:`LPFallbackWarning`.
    """
    log: list[str] = []
    best, bound = None, np.inf
    for attempt, (label, kwargs) in enumerate(HIGHS_ATTEMPTS):
        try:
            cand = solve_once(**kwargs)
        except LPSolveError as err:
            log.append(f"{label}: {err}")
            continue
        bound = min(bound, cand.bound)
        log.append(f"{label}: value {cand.value!r}, dual bound {cand.bound!r}")
        if best is None or cand.value > best.value:
            best = cand
        if bound - best.value <= GAP_TOL:
            status = "optimal" if attempt == 0 else "retried"
            return best.payload, best.value, status, max(bound - best.value, 0.0), tuple(log)
    base = fallback()
    bound = min(bound, base.bound)
    status = "fallback" if best is None else "suboptimal"
    if best is None or base.value > best.value:
        best = base
    gap = max(bound - best.value, 0.0)
    warnings.warn(
        f"{what}: no HiGHS solution was certified optimal (solver_status {status!r}); the "
        f"scheme is still exactly lossless, but its acceptance may be up to {gap:.3g} below "
        f"the optimum. Attempts: {'; '.join(log)}",
        LPFallbackWarning,
        stacklevel=3,
    )
    return best.payload, best.value, status, gap, tuple(log)


def transport_dual_bound(v: np.ndarray, gain: np.ndarray, probs: np.ndarray, target: np.ndarray) -> float:
    """Weak-duality upper bound on the transport LP's optimum from column duals ``v``.

    The bound is ``sum_t P(t) u_t + sum_y q(y) v_y`` with ``u_t = max_{q(y) > 0} (gain(t, y)
    - v_y)``, plus ``SUM_ROUNDING`` for the rounding of these sums. Any real ``v`` gives
    a bound; a NaN in ``v`` (a token left out of the LP) is replaced by the smallest value
    that keeps the other tokens' ``u`` unchanged.
    """
    support = target > 0
    v = v.copy()
    free = support & np.isnan(v)
    known = support & ~free
    if free.any() and known.any():
        u = (gain[:, known] - v[known]).max(axis=1)
        v[free] = (gain[:, free] - u[:, None]).max(axis=0)
    v[np.isnan(v)] = 0.0
    u = (gain[:, support] - v[support]).max(axis=1)
    row_terms, col_terms = probs * u, target[support] * v[support]
    slack = SUM_ROUNDING * (np.abs(row_terms).sum() + np.abs(col_terms).sum())
    return float(row_terms.sum() + col_terms.sum() + slack)


def selection_dual_bound(lam: np.ndarray, draft: np.ndarray, target: np.ndarray, k: int) -> float:
    """Upper bound on the optimal acceptance from the canonical LP's duals ``lambda >= 0``.

    ``lambda_y`` is the dual of ``u_y <= p_I(y)`` (:mod:`mspec.schemes.canonical`). The Lagrangian
    bound ``sum_y q(y) max(0, 1 - lambda_y) + sum_t P(t) max_{y in t} lambda_y`` (plus
    ``SUM_ROUNDING``) holds for any ``lambda >= 0``; the result is the least of it and
    the min-cut bounds of :func:`cut_bound`. NaN and infinite entries count as 0.
    """
    lam = np.maximum(np.nan_to_num(lam, nan=0.0, posinf=0.0, neginf=0.0), 0.0)
    tuples, probs = draft_tuples(draft, k)
    terms = np.concatenate([target * np.maximum(1.0 - lam, 0.0), probs * lam[tuples].max(axis=1)])
    lagrange = float(terms.sum() + SUM_ROUNDING * np.abs(terms).sum())
    return min(lagrange, cut_bound(lam, draft, target, k))


def cut_bound(score: np.ndarray, draft: np.ndarray, target: np.ndarray, num_drafts: int) -> float:
    """Min-cut upper bound on the optimal acceptance from a token score (e.g. LP duals).

    For any token set ``S``, ``P*(acc) <= q(S) + 1 - prod_i p_i(S)`` (an accepted output in
    ``S`` has mass at most ``q(S)``; any other acceptance needs a draft outside ``S``). We
    take the least of these over the level sets of ``score`` and of the ratio
    ``q / mean_i p_i`` (the prefixes of their ascending and descending orders). At an
    optimal dual one level set of the duals is a minimising set (max-flow / min-cut), and
    for identical drafts an ascending ``q/p`` prefix always is (:mod:`mspec.schemes.closed_form`),
    so the bound is tight; it is computed from ``p`` and ``q`` alone, to rounding, however
    imprecise the duals of tiny masses are. Includes an allowance for rounding
    (``CUT_ROUNDING_ULPS``).
    """
    rows = np.atleast_2d(draft)
    mean = rows.mean(axis=0)
    with np.errstate(over="ignore"):  # q / (subnormal p) overflows to inf: sorts last, as it should
        ratio = np.divide(target, mean, out=np.full(mean.shape, np.inf), where=mean > 0)
    best = 1.0  # S empty (or everything)
    for values in (np.nan_to_num(np.asarray(score, dtype=np.float64), nan=0.0), ratio):
        for order in (np.argsort(values, kind="stable"), np.argsort(-values, kind="stable")):
            q_s = np.cumsum(target[order])
            p_s = np.cumsum(rows[:, order], axis=1)
            p_all = p_s[0] ** num_drafts if rows.shape[0] == 1 else np.prod(p_s, axis=0)
            best = min(best, float(np.min(q_s + 1.0 - p_all)))
    return best + CUT_ROUNDING_ULPS * (target.shape[0] + num_drafts) * np.finfo(np.float64).eps


# --- the transport plan's repair -------------------------------------------------------------

def repair_plan(joint: np.ndarray, probs: np.ndarray, target: np.ndarray) -> np.ndarray:
    """An exactly feasible conditional plan from approximate joint masses.

    Args:
        joint: ``(N, V)`` approximate ``x(t, y) = P(t) pi(y | t)`` (any finite or
            non-finite values; NaN/inf count as 0).
        probs: ``(N,)`` ``P(t) > 0``.
        target: ``(V,)`` ``q``.

    Returns:
        ``(N, V)`` plan ``pi(. | t)``: non-negative, zero where ``q = 0``, rows summing
        to 1 and ``probs @ plan = q``, both to rounding. Steps: clip negatives; scale each
        row down to at most ``P(t)`` and each column down to at most ``q(y)``; fill the row
        deficits ``d_t`` and the column deficits ``e_y`` with ``d_t e_y / sum(e)``. Where
        the solution is feasible already nothing changes; ``joint = 0`` gives the product
        coupling ``pi(y | t) = q(y)``.
    """
    x = np.nan_to_num(np.asarray(joint, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    np.maximum(x, 0.0, out=x)
    x[:, target <= 0] = 0.0
    rowsum = x.sum(axis=1)
    over = rowsum > probs
    x[over] *= (probs[over] / rowsum[over])[:, None]
    # conditional units from here on, so that rows of tiny (even subnormal) P(t) keep full
    # relative precision: a(t, y) ~ pi(y | t) in [0, 1]
    a = x / probs[:, None]
    rowsum = a.sum(axis=1)
    over = rowsum > 1.0
    a[over] /= rowsum[over, None]
    colsum = probs @ a
    over = colsum > target
    a[:, over] *= target[over] / colsum[over]
    deficit_row = np.maximum(1.0 - a.sum(axis=1), 0.0)  # d_t / P(t)
    deficit_col = np.maximum(target - probs @ a, 0.0)  # e_y
    total = deficit_col.sum()
    if not total > 0.0:  # nothing left to fill beyond rounding: spread any rounding like q
        deficit_col, total = target, float(target.sum())
    plan = a + np.outer(deficit_row, deficit_col / total)
    plan /= plan.sum(axis=1, keepdims=True)
    return plan


__all__ = ["GAP_TOL", "HIGHS_ATTEMPTS", "HIGHS_OPTIONS", "LPFallbackWarning", "LPSolveError", "LP_MASS_FLOOR",
           "LP_SECONDS", "MAX_LP_VARIABLES", "SOLVER_STATUSES", "Candidate", "certified_solve", "check_lp_size",
           "constraint_duals", "cut_bound", "draft_tuples", "membership", "repair_plan", "run_highs",
           "lp_seconds", "run_linprog", "selection_dual_bound", "transport_dual_bound"]
