"""All of the paper's experiments on one model pair: token-level acceptance, then live decoding.

Runs :mod:`~mspec_lab.experiments.acceptance` (Table 3) and
:mod:`~mspec_lab.experiments.live_decoding` (Tables 1, 2, 4-6, Figures 3, 4, time per round),
then recaps the performance goals:

(a) per round, token-level selection takes < 10% of one target forward pass for K <= 4;
(b) multi-draft block efficiency exceeds single-draft at the same draft length L;
(c) token-level acceptance on real distributions: optimal >= IS >= SpecTr, SpecInfer.

With an output folder, rows are written to CSV as soon as they finish, and rerunning after
an interruption skips them. Rows are keyed by their configuration, not by the code that
computed them: after changing a scheme, use a fresh folder. The quick settings finish in
minutes on a laptop CPU; the defaults take hours on a CPU (use a GPU, or a row budget and
rerun to spread the work). On the command line::

    python -m mspec_lab experiments --quick --threads 1
    python -m mspec_lab experiments --preset smollm2-early-exit --draft-temperature 1.0
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from mspec_lab.experiments.acceptance import AcceptanceRun, AcceptanceSettings, report_acceptance, run_acceptance
from mspec_lab.experiments.live_decoding import DecodingRun, DecodingSettings, run_decoding
from mspec_lab.experiments.live_decoding_report import report_decoding
from mspec_lab.experiments.report import SMOKE_TEST_LINE
from mspec_lab.experiments.results import RowBudget

__all__ = ["SuiteRun", "report_suite", "run_suite"]


@dataclass
class SuiteRun:
    """What :func:`run_suite` computed: each experiment's run (``None`` if skipped), the
    pair's label, and how many new rows it computed in how many seconds."""

    acceptance: AcceptanceRun | None
    decoding: DecodingRun | None
    label: str
    new_rows: int
    seconds: float


def run_suite(pair, acceptance: AcceptanceSettings | None = None, decoding: DecodingSettings | None = None, *,
              out: str | Path | None = None, budget: RowBudget | None = None, progress: bool = False) -> SuiteRun:
    """Run the token-level acceptance experiment, then the live-decoding ones.

    Args:
        pair: :class:`mspec.lm.models.ModelPair`.
        acceptance: settings of :func:`~mspec_lab.experiments.acceptance.run_acceptance`;
            ``None`` skips it.
        decoding: settings of :func:`~mspec_lab.experiments.live_decoding.run_decoding`;
            ``None`` skips it.
        out: folder of the CSV files; ``None`` keeps the rows in memory.
        budget: how many new rows may be computed, over both (default: all).
        progress: show progress bars (``tqdm``; the command line does).

    Raises:
        StopSweep: the budget ran out (the rows computed so far are stored).
    """
    from mspec_lab.experiments.report import pair_label

    budget = budget or RowBudget()
    start = time.perf_counter()
    acc = None if acceptance is None else run_acceptance(pair, acceptance, out=out, budget=budget, progress=progress)
    dec = None if decoding is None else run_decoding(pair, decoding, out=out, budget=budget, progress=progress)
    settings = acceptance or decoding
    label = pair_label(pair, settings.draft_temperature if settings else None)
    return SuiteRun(acc, dec, label, budget.computed, time.perf_counter() - start)


def report_suite(run: SuiteRun, out: str | Path | None = None) -> dict:
    """Print every experiment's report (:func:`report_acceptance`, :func:`report_decoding`),
    then how many checks of each goal pass.

    Returns:
        goal (``"a"``, ``"b"``, ``"c"``) -> list of ``{"what", "pass"}`` (empty: not checked).
    """
    goal_c = report_acceptance(run.acceptance, out)["goal_c"] if run.acceptance is not None else []
    goals = report_decoding(run.decoding, out)["goals"] if run.decoding is not None else {"a": [], "b": []}
    goals = {"a": goals["a"], "b": goals["b"], "c": [{"what": f"{d} K={k}", "pass": ok} for d, k, ok, _ in goal_c]}
    print(f"\n== Performance goals ({run.label}; {run.new_rows} new rows, {run.seconds:.0f} s)")
    for name, checks in goals.items():
        failing = [g["what"] for g in checks if not g["pass"]]
        if not checks:
            print(f"   ({name}) not checked in this run")
            continue
        print(f"   ({name}) {len(checks) - len(failing)}/{len(checks)} pass"
              + (f"; failing: {', '.join(failing)}" if failing else ""))
    if any(r is not None and r.settings.smoke_test for r in (run.acceptance, run.decoding)):
        print(f"   {SMOKE_TEST_LINE}")
    return goals
