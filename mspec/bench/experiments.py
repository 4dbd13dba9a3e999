"""All of the paper's experiments on a live model pair: token-level acceptance, then decoding.

Runs ``python -m mspec.bench acceptance`` (Table 3) and ``python -m mspec.bench decoding``
(Tables 1, 2, 4-6, Figures 3, 4, time per round) with one set of options, then recaps the
performance goals:

(a) per round, token-level selection takes < 10% of one target forward pass for K <= 4;
(b) multi-draft block efficiency exceeds single-draft at the same draft length L;
(c) token-level acceptance on real distributions: optimal >= IS >= SpecTr, SpecInfer.

Rows are written to CSV under ``--out`` as soon as they finish; rerunning the same command
after an interruption skips them. Rows are keyed by their configuration, not by the code
that computed them: after changing a scheme, use a fresh ``--out`` folder. ``--quick`` finishes in minutes on a laptop CPU; the
defaults take hours on a CPU (use a GPU, or ``--max-rows`` and rerun to spread the work).

Example::

    python -m mspec.bench experiments --quick --threads 1
    python -m mspec.bench experiments --preset smollm2-early-exit --draft-temperature 1.0
"""

from __future__ import annotations

import time

from . import acceptance, common, decoding
from .results import RowBudget, StopSweep


def add_arguments(parser) -> None:
    common.add_common_arguments(parser)
    acceptance.add_acceptance_arguments(parser)
    decoding.add_decoding_arguments(parser)
    parser.add_argument("--skip-acceptance", action="store_true", help="skip the token-level acceptance experiment")
    parser.add_argument("--skip-decoding", action="store_true", help="skip the live decoding experiments")


def run(args, *, on_row=None) -> int:
    """Command entry point: returns 0, or 3 when ``--max-rows`` stopped the sweep.

    Args:
        args: parsed options.
        on_row: optional hook called with every newly computed row (tests count them).
    """
    common.setup_torch(args)
    from ..models import load_pair

    start = time.perf_counter()
    pair = load_pair(args.preset)
    budget = RowBudget(args.max_rows, on_row)
    try:
        acc = None if args.skip_acceptance else acceptance.run_acceptance(args, pair, budget)
        dec = None if args.skip_decoding else decoding.run_decoding(args, pair, budget)
    except StopSweep as stop:
        print(f"\n{stop}; rerun the same command to resume (stored rows are skipped)")
        return 3
    goal_c = acceptance.report_acceptance(acc)["goal_c"] if acc is not None else []
    goals = decoding.report_decoding(dec)["goals"] if dec is not None else {"a": [], "b": []}
    print(f"\n== Performance goals ({common.pair_label(pair, args.draft_temperature)}; "
          f"{budget.computed} new rows, {time.perf_counter() - start:.0f} s)")
    checks_c = [{"what": f"{d} K={k}", "pass": ok} for d, k, ok, _ in goal_c]
    for name, checks in (("a", goals["a"]), ("b", goals["b"]), ("c", checks_c)):
        failing = [g["what"] for g in checks if not g["pass"]]
        if not checks:
            print(f"   ({name}) not checked in this run")
            continue
        print(f"   ({name}) {len(checks) - len(failing)}/{len(checks)} pass"
              + (f"; failing: {', '.join(failing)}" if failing else ""))
    return 0
