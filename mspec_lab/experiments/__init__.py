"""The paper's experiments (Khisti et al., ICLR 2025, Section 6) as plain functions.

Each experiment takes a model pair (:func:`mspec_lab.models.load_pair`) and a small settings
dataclass whose defaults are the full run (``Settings.quick()``: minutes on a CPU), and
returns its rows; ``summarize_acceptance`` turns them into statistics and ``report_*`` prints them next
to the paper's numbers. Without an output folder the rows stay in memory (what the book's
notebooks do); with one (``out=``, what ``python -m mspec_lab <command>`` passes) every
row is appended to a CSV file as soon as it is computed, and a rerun resumes.

* :mod:`~mspec_lab.experiments.acceptance`: token-level acceptance on real next-token
  distributions (Table 3); command ``acceptance``.
* :mod:`~mspec_lab.experiments.live_decoding`: block efficiency, token rate and output quality
  of live decoding (Tables 1, 2, 4-6, Figures 3, 4); command ``decoding``. Its tables,
  goals and figures: :mod:`~mspec_lab.experiments.live_decoding_report`.
* :mod:`~mspec_lab.experiments.paired_schemes`: every scheme's expected tokens on the same
  rounds; command ``rounds``.
* :mod:`~mspec_lab.experiments.suite`: acceptance, then live decoding, and the performance
  goals; command ``experiments``.
* :mod:`~mspec_lab.experiments.paper_run`: the numbers of the reproducing-the-paper chapter
  (Table 3 in two draft-temperature regimes, the temperature sweep that picks the paper's
  regime, Tables 4 and 2 at the token level, paired block efficiency) with their
  provenance, in one committed file (``results/offline_default/paper_run.json``) that the
  chapter reads with ``load_results``; command ``paper-run``.
* :mod:`~mspec_lab.experiments.round_rules`: beyond the paper, round rules (traversal and
  selected-block verification) against the per-token rules on the same rounds, and the
  cost of verifying a round (``results/offline_default/round_rules.json``); command
  ``round-rules``.
* The trained draft's acceptance on the reproducing-the-paper chapter's positions lives
  with the draft, in :mod:`mspec_lab.trained_draft.regime`; command ``trained-draft-regime``.
* Shared: :mod:`~mspec_lab.experiments.paper` (the paper's published numbers),
  :mod:`~mspec_lab.experiments.inputs` (datasets, prompts as token ids, seeds),
  :mod:`~mspec_lab.experiments.report` (text tables, the pair's label, JSON and HTML files),
  :mod:`~mspec_lab.experiments.results` (resumable CSV result tables, mean ± s.e.).

Example (a notebook)::

    from mspec_lab.experiments.acceptance import (AcceptanceSettings, run_acceptance,
                                                  summarize_acceptance)
    from mspec_lab.models import load_pair

    settings = AcceptanceSettings.quick(datasets=("dolly",))
    run = run_acceptance(load_pair("smollm2"), settings)
    stats = summarize_acceptance(run)       # dataset -> scheme -> K -> mean, s.e., n

Nothing is imported here, so ``import mspec_lab.experiments.paper`` stays light.
"""
