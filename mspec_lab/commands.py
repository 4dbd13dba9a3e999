"""The commands of ``python -m mspec_lab``: their options, and how options become a call.

Command-line options live here and nowhere else. Each :class:`Command` adds its options
to an ``argparse`` parser, says which optional packages it needs, and turns the parsed
options into a call of a plain function: the speed benchmarks of :mod:`mspec_lab.bench`,
the paper's experiments of :mod:`mspec_lab.experiments` and the trained draft's modules
(:mod:`mspec_lab.trained_draft`), which notebooks call directly.
Options left out keep the settings' own defaults (``--quick``: their quick ones). A run with
``--quick`` is a smoke test of the pipeline: its first line says so, and so do its reports
(under every table) and the files it writes (``"smoke_test": true``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from mspec_lab.experiments import acceptance as acc
from mspec_lab.experiments import live_decoding as dec
from mspec_lab.experiments import paired_schemes as rounds
from mspec_lab.experiments import paper
from mspec_lab.experiments.inputs import DATA_SOURCES, DATASETS
from mspec_lab.experiments.report import SMOKE_TEST_BANNER
from mspec_lab.synthetic import OPT_VOCAB_SIZE
from mspec_lab.bench.speed_optimal import OptimalSpeedSettings

__all__ = ["COMMANDS", "Command", "DEFAULT_OUT", "RENAMED_COMMANDS"]

#: default output folder of the experiments (gitignored)
DEFAULT_OUT = "bench-results"
#: packages of the sequence level, and what the experiments add: the progress bars, the
#: HTML figures, and the quality metrics of generated text (pairs with a tokenizer)
MODELS, PROGRESS, FIGURES, METRICS = ("torch", "transformers"), ("tqdm",), ("plotly",), ("rouge_score", "sacrebleu")


@dataclass(frozen=True)
class Command:
    """One command of ``python -m mspec_lab``.

    Attributes:
        summary: one line for ``--help``.
        add_arguments: adds the command's options to its parser.
        run: runs it from the parsed options; returns the exit status.
        packages: import names of the optional packages it always needs (checked before
            its options are built, which may import them).
        more_packages: those it needs with the given options.
    """

    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    packages: tuple[str, ...] = ()
    more_packages: Callable[[argparse.Namespace], tuple[str, ...]] = lambda args: ()


def _smoke_first_line(args) -> None:
    """Under ``--quick``, the command's first line: a smoke test of the pipeline, not results."""
    if args.quick:
        print(SMOKE_TEST_BANNER)


def _quick_help(what: str, full, quick) -> str:
    return f"{what} (default {_words(full)}, quick {_words(quick)})"


def _words(value) -> str:
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _settings(cls, args, dests: dict[str, str]):
    """``cls`` (``cls.quick`` under ``--quick``) with the options that were given:
    ``dests`` maps each settings field to its option's ``argparse`` name."""
    given = {name: getattr(args, dest) for name, dest in dests.items() if getattr(args, dest, None) is not None}
    for name, value in given.items():
        if isinstance(value, list):
            given[name] = tuple(value)
    return (cls.quick if getattr(args, "quick", False) else cls)(**given)


# -- speed benchmarks ----------------------------------------------------------------------------
def _token_level_arguments(parser) -> None:
    parser.add_argument("--vocab", type=int, default=OPT_VOCAB_SIZE, help="vocabulary size V (default: OPT's 50272)")
    parser.add_argument("--drafts", type=int, nargs="+", default=[2, 4, 8], help="values of K")
    parser.add_argument("--schemes", nargs="+", default=["specinfer", "spectr"], help="multi-draft schemes to time")
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per figure (median is printed)")
    parser.add_argument("--seed", type=int, default=0)


def _token_level(args) -> int:
    from mspec_lab.bench.speed_baselines import time_baselines

    time_baselines(vocab_size=args.vocab, drafts=args.drafts, schemes=args.schemes, repeats=args.repeats,
                   seed=args.seed)
    return 0


def _optimal_arguments(parser) -> None:
    d = OptimalSpeedSettings
    parser.add_argument("--vocab", type=int, default=d.vocab_size, help="vocabulary size V (default: OPT's 50272)")
    parser.add_argument("--s", type=int, default=d.s, help="LP tokens of the IS scheme")
    parser.add_argument("--alphabet", type=int, default=d.alphabet, help="ranked tokens of the IS scheme")
    parser.add_argument("--repeats", type=int, default=d.repeats, help="timed calls per figure (median is printed)")
    parser.add_argument("--lp-vocabs", type=int, nargs="+", default=list(d.lp_vocabs), help="V for the full-LP table")
    parser.add_argument("--lp-drafts", type=int, nargs="+", default=list(d.lp_drafts), help="K for the full-LP table")
    parser.add_argument("--lp-budget", type=float, default=d.lp_budget_s,
                        help="skip a full LP whose solve time, extrapolated from the previous V, exceeds this (s)")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--full-vocabs", type=int, nargs="+", default=list(d.full_vocabs),
                        help="V for the exactly optimal scheme's scaling table")
    parser.add_argument("--full-drafts", type=int, nargs="+", default=list(d.full_drafts), help="K for that table")
    parser.add_argument("--full-temperatures", type=float, nargs="+", default=list(d.full_temperatures),
                        help="draft temperatures of the LM-shaped pairs in that table")
    parser.add_argument("--first-step-max-vocab", type=int, default=d.first_step_max_vocab,
                        help="time the first selection step only up to this V (it can take seconds)")
    parser.add_argument("--real", type=int, default=d.real_prompts,
                        help="prompts per dataset for the first step on real distributions of the offline "
                             "default (16 positions each; 0 skips it)")
    parser.add_argument("--real-datasets", nargs="+", default=list(d.real_datasets), choices=DATASETS,
                        help="datasets whose prompts --real takes (default: dolly)")
    parser.add_argument("--full-repeats", type=int, default=d.full_repeats,
                        help="timed calls per figure of that table (interleaved in chunks of 5)")


def _optimal(args) -> int:
    from mspec_lab.bench.speed_optimal import time_optimal

    time_optimal(OptimalSpeedSettings(
        vocab_size=args.vocab, s=args.s, alphabet=args.alphabet, repeats=args.repeats,
        lp_vocabs=tuple(args.lp_vocabs), lp_drafts=tuple(args.lp_drafts), lp_budget_s=args.lp_budget,
        full_vocabs=tuple(args.full_vocabs), full_drafts=tuple(args.full_drafts),
        full_temperatures=tuple(args.full_temperatures), full_repeats=args.full_repeats,
        first_step_max_vocab=args.first_step_max_vocab, real_prompts=args.real,
        real_datasets=tuple(args.real_datasets), seed=args.seed))
    return 0


def _gpu_arguments(parser) -> None:
    from mspec_lab.bench.speed_gpu import DEFAULT_TARGETS, GPU_RUN, DRY_RUN, PROJECTED_SCHEMES

    parser.add_argument("--dry-run", action="store_true",
                        help="a smoke test of the script, not results: tiny random models on the CPU, seconds "
                             "(automatic without CUDA); nothing is judged")
    parser.add_argument("--weights", choices=["auto", "hub", "random"], default="auto",
                        help="real checkpoints from the hub, or random weights of the real shapes "
                             "(default auto: the hub when reachable)")
    parser.add_argument("--targets", nargs="+", default=list(DEFAULT_TARGETS), metavar="TARGET",
                        help="OPT targets to time (keys of mspec_lab.models.OPT_SHAPES; default: %(default)s); "
                             "too large ones are skipped")
    parser.add_argument("--drafts-k", type=int, nargs="+", default=[1, 2, 4, 8], help="K values (default 1 2 4 8)")
    parser.add_argument("--draft-length", type=int, default=paper.DRAFT_LENGTH, help="L (default 5, as the paper)")
    parser.add_argument("--scheme", default="specinfer", choices=PROJECTED_SCHEMES,
                        help="multi-draft scheme for K >= 2 (a Table 1 scheme; default specinfer)")
    for name, what in (("max-new-tokens", "tokens per run"), ("prompt-length", "prompt tokens"),
                       ("repeats", "runs per method")):
        key = name.replace("-", "_")
        parser.add_argument(f"--{name}", type=int, default=None,
                            help=f"{what} (default {GPU_RUN[key]}, dry run {DRY_RUN[key]})")
    parser.add_argument("--seed", type=int, default=0, help="base seed")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (torch.set_num_threads; dry run default 1)")


def _gpu(args) -> int:
    from mspec_lab.models import OPT_SHAPES
    from mspec_lab.bench.speed_gpu import time_gpu

    unknown = [name for name in args.targets if name not in OPT_SHAPES]
    if unknown:
        raise SystemExit(f"--targets: unknown {unknown}; choose from {sorted(OPT_SHAPES)}")
    time_gpu(dry_run=args.dry_run, weights=args.weights, targets=args.targets, drafts_k=args.drafts_k,
             draft_length=args.draft_length, scheme=args.scheme, max_new_tokens=args.max_new_tokens,
             prompt_length=args.prompt_length, repeats=args.repeats, seed=args.seed, threads=args.threads)
    return 0


# -- the paper's experiments ---------------------------------------------------------------------
def _common_arguments(parser, *, datasets: bool = True) -> None:
    """Options every experiment command takes."""
    from mspec_lab.models import EXPERIMENT_PRESET, PRESETS

    d = acc.AcceptanceSettings
    parser.add_argument("--preset", default=EXPERIMENT_PRESET, choices=PRESETS,
                        help=f"model pair (mspec_lab.models.load_pair; default {EXPERIMENT_PRESET!r}, offline)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test of the pipeline, not results: small settings (fewer prompts, positions, "
                             "tokens, seeds, grid points), minutes on a CPU")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT}/)")
    parser.add_argument("--draft-temperature", type=float, default=None,
                        help=f"draft temperature where one is not swept (default {d.draft_temperature})")
    parser.add_argument("--target-temperature", type=float, default=None,
                        help=f"target temperature (default {d.target_temperature})")
    if datasets:
        parser.add_argument("--datasets", nargs="+", default=None, choices=DATASETS,
                            help=f"datasets (mspec_lab.data.load_prompts; local $MSPEC_DATA_DIR, hub or built-in; "
                                 f"default {_words(DATASETS)})")
    parser.add_argument("--data-source", default=None, choices=DATA_SOURCES,
                        help="where prompts come from (default: auto)")
    parser.add_argument("--max-chars", type=int, default=None,
                        help=_quick_help("XSum documents are cut to this many characters", d.max_chars,
                                         acc.AcceptanceSettings.QUICK["max_chars"]))
    parser.add_argument("--seed", type=int, default=None, help=f"base seed of all randomness (default {d.seed})")
    parser.add_argument("--max-rows", type=int, default=None,
                        help="stop after computing this many new rows (rerun to resume)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (torch.set_num_threads); 1 helps on a busy machine")


#: settings field -> option name (argparse dest) shared by every experiment (``--quick`` marks a smoke test)
COMMON_DESTS = {**{name: name for name in ("datasets", "draft_temperature", "target_temperature", "data_source",
                                           "max_chars", "seed")}, "smoke_test": "quick"}


def _acceptance_arguments(parser) -> None:
    d, q = acc.AcceptanceSettings, acc.AcceptanceSettings.QUICK
    group = parser.add_argument_group("token-level acceptance (Table 3)")
    group.add_argument("--acc-prompts", type=int, default=None, help=_quick_help("prompts per dataset", d.prompts,
                                                                                 q["prompts"]))
    group.add_argument("--positions", type=int, default=None,
                       help=_quick_help("continuation positions per prompt", d.positions, q["positions"]))
    group.add_argument("--continuation", default=None, choices=["sampled", "reference"],
                       help="run the target along its own sample (default) or the reference text")
    group.add_argument("--acc-drafts", type=int, nargs="+", default=None,
                       help=f"values of K (default {_words(d.drafts)})")
    group.add_argument("--is-s", type=int, default=None, help=f"LP tokens of the IS scheme (default {d.is_s})")
    group.add_argument("--is-alphabet", type=int, default=None,
                       help=f"ranked tokens of the IS scheme (default {d.is_alphabet})")


ACCEPTANCE_DESTS = {**COMMON_DESTS, "prompts": "acc_prompts", "drafts": "acc_drafts",
                    **{name: name for name in ("positions", "continuation", "is_s", "is_alphabet")}}


def _decoding_arguments(parser) -> None:
    d, q = dec.DecodingSettings, dec.DecodingSettings.QUICK
    group = parser.add_argument_group("live decoding (Tables 1, 2, 4-6, Figures 3, 4)")
    group.add_argument("--only", nargs="+", choices=dec.EXPERIMENTS, default=None,
                       help="experiments to run (default: all)")
    group.add_argument("--main-dataset", default=None, choices=DATASETS,
                       help=f"dataset of Tables 1, 2, 4 and Figure 4 (default {d.main_dataset}, as the paper)")
    for option, field, what in (("--gen-prompts", "prompts", "prompts per dataset"),
                                ("--seeds", "seeds", "seeds per prompt"),
                                ("--max-new-tokens", "max_new_tokens", "tokens per generation")):
        group.add_argument(option, type=int, default=None, help=_quick_help(what, getattr(d, field), q[field]))
    group.add_argument("--draft-length", type=int, default=None, help=f"L (default {d.draft_length}, as the paper)")
    for option, field, kind, what in (
            ("--drafts-k", "drafts_k", int, "Table 1 K values"),
            ("--temperatures", "temperatures", float, "draft temperatures of Figures 3, 4"),
            ("--top-k", "top_k", int, "Table 4 top-k values"),
            ("--topk-drafts", "topk_drafts", int, "Table 4 K values"),
            ("--alphabets", "alphabets", int, "Table 2 IS alphabet sizes at s=5"),
            ("--lp-sizes", "lp_sizes", int, "Table 2 IS LP sizes s at alphabet 40")):
        group.add_argument(option, type=kind, nargs="+", default=None,
                           help=_quick_help(what, getattr(d, field), q[field]))
    group.add_argument("--first-temperature", type=float, default=None,
                       help=f"Figure 4: first draft's temperature (default {d.first_temperature})")


DECODING_DESTS = {**COMMON_DESTS, "experiments": "only", "main_dataset": "main_dataset", "prompts": "gen_prompts",
                  **{name: name for name in ("seeds", "max_new_tokens", "draft_length", "drafts_k", "temperatures",
                                             "first_temperature", "top_k", "topk_drafts", "alphabets", "lp_sizes")}}


def _rounds_arguments(parser) -> None:
    d, q = rounds.RoundsSettings, rounds.RoundsSettings.QUICK
    _common_arguments(parser, datasets=False)
    group = parser.add_argument_group("paired block efficiency")
    group.add_argument("--main-dataset", default=None, choices=DATASETS,
                       help=f"dataset of the prompts (default {d.main_dataset}, as Table 1)")
    group.add_argument("--gen-prompts", type=int, default=None, help=_quick_help("prompts", d.prompts, q["prompts"]))
    group.add_argument("--seeds", type=int, default=None, help=_quick_help("seeds per prompt", d.seeds, q["seeds"]))
    group.add_argument("--max-new-tokens", type=int, default=None,
                       help=_quick_help("tokens per reference generation", d.max_new_tokens, q["max_new_tokens"]))
    group.add_argument("--draft-length", type=int, default=None, help=f"L (default {d.draft_length})")
    group.add_argument("--drafts-k", type=int, nargs="+", default=None, help=f"K values (default {_words(d.drafts_k)})")
    group.add_argument("--reference", default=None, choices=paper.COMPARED_SCHEMES,
                       help=f"scheme that drives the reference generations (default {d.reference})")
    group.add_argument("--variants", nargs="*", default=None, choices=list(rounds.SCHEME_VARIANTS),
                       help=f"variants scored besides the compared schemes (default {_words(d.variants)}; "
                            "the option alone: none)")


ROUNDS_DESTS = {**{k: v for k, v in COMMON_DESTS.items() if k != "datasets"}, "prompts": "gen_prompts",
                **{name: name for name in ("main_dataset", "seeds", "max_new_tokens", "draft_length", "drafts_k",
                                           "reference", "variants")}}


def _sweep(args, compute, report) -> int:
    """Load the pair, compute the rows (``compute(pair, budget)``), report them.

    Returns:
        0, or 3 when ``--max-rows`` stopped the sweep (rerunning resumes it).
    """
    from mspec_lab.experiments.results import RowBudget, StopSweep
    from mspec_lab.models import load_pair

    _smoke_first_line(args)
    if args.threads is not None:  # the command owns its process, so this is its own setting
        import torch

        torch.set_num_threads(args.threads)
    pair = load_pair(args.preset)
    try:
        result = compute(pair, RowBudget(args.max_rows))
    except StopSweep as stop:
        print(f"\n{stop}; rerun the same command to resume (stored rows are skipped)")
        return 3
    report(result)
    return 0


def _experiment(args, settings_class, dests, run, report) -> int:
    """One experiment command: its options -> settings -> ``run`` (resumable) -> ``report``."""
    settings = _settings(settings_class, args, dests)
    return _sweep(args, lambda pair, budget: run(pair, settings, out=args.out, budget=budget, progress=True),
                  lambda result: report(result, args.out))


def _acceptance(args) -> int:
    return _experiment(args, acc.AcceptanceSettings, ACCEPTANCE_DESTS, acc.run_acceptance, acc.report_acceptance)


def _decoding(args) -> int:
    from mspec_lab.experiments.live_decoding_report import report_decoding

    return _experiment(args, dec.DecodingSettings, DECODING_DESTS, dec.run_decoding, report_decoding)


def _rounds(args) -> int:
    return _experiment(args, rounds.RoundsSettings, ROUNDS_DESTS, rounds.run_rounds, rounds.report_rounds)


def _experiments_arguments(parser) -> None:
    _common_arguments(parser)
    _acceptance_arguments(parser)
    _decoding_arguments(parser)
    parser.add_argument("--skip-acceptance", action="store_true", help="skip the token-level acceptance experiment")
    parser.add_argument("--skip-decoding", action="store_true", help="skip the live decoding experiments")


def _experiments(args) -> int:
    from mspec_lab.experiments.suite import report_suite, run_suite

    acceptance = None if args.skip_acceptance else _settings(acc.AcceptanceSettings, args, ACCEPTANCE_DESTS)
    decoding = None if args.skip_decoding else _settings(dec.DecodingSettings, args, DECODING_DESTS)
    return _sweep(args, lambda pair, budget: run_suite(pair, acceptance, decoding, out=args.out, budget=budget,
                                                       progress=True),
                  lambda run: report_suite(run, args.out))


#: where ``paper-run`` writes by default: the committed results of the offline default
PAPER_RUN_OUT = "results/offline_default"


def _run_options(parser) -> None:
    """``--quick``, ``--threads``, ``--data-source`` and ``--datasets`` of a command that writes a
    committed results file."""
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test of the pipeline, not results: small settings, a minute or two on a CPU; "
                             "the results file says so (\"smoke_test\": true)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (torch.set_num_threads); the committed run used 1")
    parser.add_argument("--data-source", default=None, choices=DATA_SOURCES,
                        help="where prompts come from (default auto; the committed run: local)")
    parser.add_argument("--datasets", nargs="+", default=None, choices=DATASETS,
                        help=f"datasets (default {_words(DATASETS)})")


def _results_file_arguments(parser, name: str, temperature_help: str, seed: int) -> None:
    """Options of a command that writes a committed results file ``name``."""
    from mspec_lab.models import EXPERIMENT_PRESET, PRESETS

    parser.add_argument("--preset", default=EXPERIMENT_PRESET, choices=PRESETS,
                        help=f"model pair (mspec_lab.models.load_pair; default {EXPERIMENT_PRESET!r}, offline)")
    parser.add_argument("--out", default=PAPER_RUN_OUT,
                        help=f"folder of the results file {name} (default {PAPER_RUN_OUT}/, committed)")
    _run_options(parser)
    parser.add_argument("--draft-temperature", type=float, default=None, help=temperature_help)
    parser.add_argument("--seed", type=int, default=None, help=f"base seed (default {seed})")


def _int_options(parser, defaults, quick: dict, options) -> None:
    """Integer options ``(option, settings field, what)``; the help gives the settings'
    default (``defaults``) and quick value (``quick``, else the default)."""
    for option, field, what in options:
        full = getattr(defaults, field)
        parser.add_argument(option, type=int, default=None, help=_quick_help(what, full, quick.get(field, full)))


def _paper_run_arguments(parser) -> None:
    from mspec_lab.experiments import paper_run as pr

    d, q = pr.PaperRunSettings, pr.PaperRunSettings.QUICK
    _results_file_arguments(parser, "paper_run.json", f"the default regime's draft temperature "
                                                      f"(default {d.draft_temperature})", d.seed)
    parser.add_argument("--work", default=f"{DEFAULT_OUT}/paper-run",
                        help="folder of the rounds' resumable CSV rows (default %(default)s/; gitignored)")
    _int_options(parser, d, q, (
        ("--prompts", "prompts", "prompts per dataset, token level"),
        ("--positions", "positions", "positions per prompt, token level"),
        ("--max-chars", "max_chars", "XSum documents are cut to this many characters"),
        ("--rounds-prompts", "rounds_prompts", "prompts of the block efficiency, default regime"),
        ("--paper-rounds-prompts", "paper_rounds_prompts", "prompts of the block efficiency, paper regime"),
        ("--rounds-seeds", "rounds_seeds", "seeds per prompt of the block efficiency"),
        ("--rounds-max-new-tokens", "rounds_max_new_tokens", "tokens per reference generation")))
    parser.add_argument("--sweep-temperatures", type=float, nargs="+", default=None,
                        help=_quick_help("draft temperatures of the sweep", d.sweep_temperatures,
                                         q["sweep_temperatures"]))


PAPER_RUN_DESTS = {name: name for name in (
    "datasets", "draft_temperature", "data_source", "seed", "prompts", "positions", "max_chars", "rounds_prompts",
    "paper_rounds_prompts", "rounds_seeds", "rounds_max_new_tokens", "sweep_temperatures")}


def _paper_run_command(args) -> str:
    """The command line that reproduces ``args`` (the options that were given)."""
    parts = ["python -m mspec_lab paper-run", f"--preset {args.preset}", f"--out {args.out}"]
    if args.quick:
        parts.append("--quick")
    if args.threads is not None:
        parts.append(f"--threads {args.threads}")
    for dest in PAPER_RUN_DESTS:
        value = getattr(args, dest)
        if value is not None:
            parts.append(f"--{dest.replace('_', '-')} " + (_words(tuple(value)) if isinstance(value, list)
                                                            else str(value)))
    return " ".join(parts)


def _paper_run(args) -> int:
    from mspec_lab.experiments import paper_run as pr

    _smoke_first_line(args)
    if args.threads is not None:  # the command owns its process, so this is its own setting
        import torch

        torch.set_num_threads(args.threads)
    settings = _settings(pr.PaperRunSettings, args, PAPER_RUN_DESTS)
    doc = pr.paper_run(args.preset, settings, out=args.out, work=args.work, command=_paper_run_command(args),
                       progress=True)
    pr.print_summary(doc)
    problems = pr.check_results(doc)
    for problem in problems:
        print(f"INCONSISTENT: {problem}")
    return 1 if problems else 0


def _round_rules_arguments(parser) -> None:
    from mspec_lab.experiments import round_rules as rr

    d, q = rr.RoundRulesSettings, rr.RoundRulesSettings.QUICK
    _results_file_arguments(parser, "round_rules.json", f"draft temperature (default {d.draft_temperature})",
                            d.seed)
    _int_options(parser, d, q, (("--prompts", "prompts", "prompts per dataset"),
                                ("--seeds", "seeds", "seeds per prompt"),
                                ("--max-new-tokens", "max_new_tokens", "tokens per reference generation"),
                                ("--draft-length", "draft_length", "L")))
    parser.add_argument("--drafts-k", type=int, nargs="+", default=None,
                        help=_quick_help("values of K", d.drafts_k, q["drafts_k"]))
    parser.add_argument("--timing-tokens", type=int, default=24,
                        help="tokens per timed generation (default %(default)s)")


ROUND_RULES_DESTS = {name: name for name in ("datasets", "draft_temperature", "data_source", "seed", "prompts",
                                             "seeds", "max_new_tokens", "draft_length", "drafts_k")}


def _round_rules(args) -> int:
    from mspec_lab.experiments import round_rules as rr

    _smoke_first_line(args)
    if args.threads is not None:  # the command owns its process, so this is its own setting
        import torch

        torch.set_num_threads(args.threads)
    settings = _settings(rr.RoundRulesSettings, args, ROUND_RULES_DESTS)
    command = " ".join(["python -m mspec_lab round-rules", *args.argv])  # as typed
    doc = rr.round_rules_document(args.preset, settings, timing_tokens=args.timing_tokens, command=command,
                                  progress=True)
    rr.print_round_rules(doc)
    print(f"\nwrote {rr.write_round_rules(doc, args.out)}")
    return 0


def _trained_draft_speed_arguments(parser) -> None:
    from mspec_lab.trained_draft.speed import SPEED_RESULTS_FILE, TrainedDraftSpeedSettings as S

    d, q = S, S.QUICK
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test of the pipeline, not results: small settings, a minute or two on a CPU; "
                             "the results file says so (\"smoke_test\": true)")
    _int_options(parser, d, q, (("--prompts", "prompts", "held-out prompts per dataset"),
                                ("--max-new-tokens", "max_new_tokens", "tokens per generation"),
                                ("--seed", "seed", "base seed")))
    for option, field, what in (("--drafts-k", "drafts_k", "values of K"), ("--draft-lengths", "draft_lengths",
                                "values of L"), ("--threads", "threads", "torch CPU thread counts")):
        parser.add_argument(option, type=int, nargs="+", default=None,
                            help=_quick_help(what, d.__dataclass_fields__[field].default, q.get(field, "")))
    parser.add_argument("--scheme", default=None, help=f"the rule for K > 1 (default {d.scheme})")
    parser.add_argument("--data-dir", default=None, help="the datasets' local samples (default $MSPEC_DATA_DIR)")
    parser.add_argument("--prompts-file", default=None, metavar="PATH",
                        help="your own prompts instead of the held-out ones, all of them (quick: the first): one "
                             "prompt per line, or in a .jsonl file one JSON string or {\"prompt\": ...} per line")
    parser.add_argument("--chat-template", action=argparse.BooleanOptionalAction, default=None,
                        help="each prompt as a user turn of the tokenizer's chat template (default: on with "
                             "--prompts-file, off for the held-out prompts, which the draft was trained on)")
    parser.add_argument("--out", default=str(SPEED_RESULTS_FILE),
                        help="the results file (default %(default)s, committed)")


def _trained_draft_speed(args) -> int:
    from mspec_lab.trained_draft.speed import TrainedDraftSpeedSettings, bench_trained_draft

    settings = _settings(TrainedDraftSpeedSettings, args, {name: name for name in (
        "prompts", "max_new_tokens", "seed", "drafts_k", "draft_lengths", "threads", "scheme", "prompts_file",
        "chat_template")})
    bench_trained_draft(settings, out=args.out, data_dir=args.data_dir,
                        command=" ".join(["python -m mspec_lab trained-draft-speed", *args.argv]))
    return 0


def _trained_draft_curve_arguments(parser) -> None:
    from mspec_lab.trained_draft.speed import CURVE_RESULTS_FILE

    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=16, help="the widest pass, in new tokens (default "
                                                                   "%(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per size, interleaved (default "
                                                               "%(default)s)")
    parser.add_argument("--device", default="cpu", help="where the models run: cpu or cuda (default %(default)s)")
    parser.add_argument("--data-dir", default=None, help="the datasets' local samples (default $MSPEC_DATA_DIR)")
    parser.add_argument("--out", default=str(CURVE_RESULTS_FILE),
                        help="the results file (default %(default)s, committed)")


def _trained_draft_curve(args) -> int:
    from mspec_lab.trained_draft.speed import bench_pass_curve

    for name in ("threads", "max_tokens", "repeats"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    bench_pass_curve(threads=args.threads, max_tokens=args.max_tokens, repeats=args.repeats, out=args.out,
                     data_dir=args.data_dir, device=args.device,
                     command=" ".join(["python -m mspec_lab trained-draft-curve", *args.argv]))
    return 0


def _trained_draft_regime_arguments(parser) -> None:
    from mspec_lab.experiments import paper_run as pr
    from mspec_lab.trained_draft.regime import REGIME_RESULTS_FILE

    from mspec_lab.models import PRESETS

    d, q = pr.PaperRunSettings, pr.PaperRunSettings.QUICK
    _run_options(parser)
    _int_options(parser, d, q, (("--prompts", "prompts", "prompts per dataset"),
                                ("--positions", "positions", "positions per prompt")))
    parser.add_argument("--preset", default="smollm2-distilled", choices=PRESETS,
                        help="model pair (default %(default)s, the trained draft; \"opt\": the paper's "
                             "OPT-125M with a larger OPT, on a GPU with the hub)")
    parser.add_argument("--out", default=str(REGIME_RESULTS_FILE),
                        help="the results file (default %(default)s, committed)")


def _trained_draft_regime(args) -> int:
    from mspec_lab.experiments import paper_run as pr
    from mspec_lab.trained_draft import regime as tr

    _smoke_first_line(args)
    if args.threads is not None:  # the command owns its process, so this is its own setting
        import torch

        torch.set_num_threads(args.threads)
    if args.datasets:  # the paper run's sweep and main datasets are unused here: any of these
        args.sweep_dataset = args.main_dataset = args.datasets[0]
    settings = _settings(pr.PaperRunSettings, args, {name: name for name in (
        "datasets", "data_source", "prompts", "positions", "sweep_dataset", "main_dataset")})
    doc = tr.trained_draft_regime(args.preset, settings=settings, out=args.out, progress=True,
                                  command=" ".join(["python -m mspec_lab trained-draft-regime", *args.argv]))
    tr.print_trained_draft_regime(doc)
    print(f"\nwrote {args.out}")
    problems = tr.check_trained_draft_regime(doc)
    for problem in problems:
        print(f"INCONSISTENT: {problem}")
    return 1 if problems else 0


def _trained_draft_train_arguments(parser) -> None:
    from mspec_lab.trained_draft.model import DEFAULT_WEIGHTS
    from mspec_lab.trained_draft.train import TrainSettings

    d = TrainSettings()
    parser.add_argument("--exit-layers", type=int, default=d.exit_layers, help="target layers the draft shares")
    parser.add_argument("--frequent-tokens", type=int, default=d.frequent_tokens, help="tokens the draft proposes")
    parser.add_argument("--prompts", type=int, default=d.prompts, help="training prompts per dataset, at most")
    parser.add_argument("--new-tokens", type=int, default=d.new_tokens, help="tokens the target samples per prompt")
    parser.add_argument("--context", type=int, default=d.context, help="prompt tokens the student sees before them")
    parser.add_argument("--epochs", type=int, default=d.epochs)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--threads", type=int, default=d.threads)
    parser.add_argument("--data-dir", default=None, help="the datasets' local samples (default $MSPEC_DATA_DIR)")
    parser.add_argument("--out", default=str(DEFAULT_WEIGHTS), help="folder for the weights and provenance")


def _trained_draft_train(args) -> int:
    import os

    from mspec_lab.data import DATA_DIR_ENV
    from mspec_lab.experiments.paper_run import code_version
    from mspec_lab.models import load_pair
    from mspec_lab.trained_draft.model import save_adapter
    from mspec_lab.trained_draft.train import TrainSettings, train_trained_draft

    data_dir = args.data_dir or os.environ.get(DATA_DIR_ENV)
    if not data_dir:
        print(f"trained-draft-train reads the datasets' local samples: pass --data-dir or set ${DATA_DIR_ENV}")
        return 2
    settings = TrainSettings(exit_layers=args.exit_layers, frequent_tokens=args.frequent_tokens,
                             prompts=args.prompts, new_tokens=args.new_tokens, context=args.context,
                             epochs=args.epochs, seed=args.seed, threads=args.threads)
    pair = load_pair("smollm2", device="cpu")
    draft, report = train_trained_draft(pair.target_model, pair.tokenizer, settings, data_dir)
    report.update(code=code_version(), target=pair.description.split(";")[0],
                  command=" ".join(["python -m mspec_lab trained-draft-train", *args.argv]))
    save_adapter(draft, args.out, report)
    print(f"wrote {args.out}")
    return 0


def _with_common(add_arguments):
    def add(parser):
        _common_arguments(parser)
        add_arguments(parser)

    return add


def _figures_and_metrics(args) -> tuple[str, ...]:
    """What an experiment command adds to the models: plotly for its HTML figures (not
    ``rounds``), the quality metrics for live decoding with a tokenizer (not ``tiny``)."""
    decoding = args.command == "decoding" or (args.command == "experiments" and not args.skip_decoding)
    return (FIGURES if args.command != "rounds" else ()) + (METRICS if decoding and args.preset != "tiny" else ())


#: every command, in ``--help`` order
COMMANDS = {
    "token-level": Command("speed of the baseline schemes at OPT's vocabulary, as ratios to single-draft",
                           _token_level_arguments, _token_level),
    "optimal": Command("speed of the closed form, the IS scheme, the full LP and the exactly optimal scheme",
                       _optimal_arguments, _optimal, more_packages=lambda args: MODELS if args.real > 0 else ()),
    "gpu": Command("GPU timing of live decoding: where a round's time goes, token rates, expected speed-up",
                   _gpu_arguments, _gpu, packages=MODELS),
    "experiments": Command("all of the paper's experiments: token-level acceptance, then live decoding",
                           _experiments_arguments, _experiments, MODELS + PROGRESS, _figures_and_metrics),
    "acceptance": Command("token-level acceptance on real LM next-token distributions (Table 3)",
                          _with_common(_acceptance_arguments), _acceptance, MODELS + PROGRESS, _figures_and_metrics),
    "decoding": Command("block efficiency, token rate and quality of live decoding (Tables 1, 2, 4-6, Figures 3, 4)",
                        _with_common(_decoding_arguments), _decoding, MODELS + PROGRESS, _figures_and_metrics),
    "rounds": Command("paired block efficiency: every scheme's expected tokens on the same rounds",
                      _rounds_arguments, _rounds, MODELS + PROGRESS, _figures_and_metrics),
    "round-rules": Command("round rules (traversal, selected-block) against per-token rules on the same rounds, "
                           "and their cost (results/offline_default/round_rules.json)", _round_rules_arguments,
                           _round_rules, MODELS + PROGRESS),
    "paper-run": Command("the numbers of the reproducing-the-paper chapter, into one results file "
                         "(results/offline_default/paper_run.json)", _paper_run_arguments, _paper_run,
                         MODELS + PROGRESS),
    "trained-draft-train": Command("the trained draft's training, by distillation from SmolLM2-135M "
                                   "(mspec_lab/trained_draft/weights/)",
                                   _trained_draft_train_arguments, _trained_draft_train, MODELS),
    "trained-draft-speed": Command("the trained draft's token rate against plain sampling on this machine, K = 1, 2, 4 and "
                                   "L = 1..5 (results/offline_default/trained_draft.json)",
                                   _trained_draft_speed_arguments, _trained_draft_speed, MODELS),
    "trained-draft-curve": Command("what a round costs on this machine: the target's pass over 1..16 new tokens "
                                   "and a draft step (results/offline_default/pass_curve.json)",
                                   _trained_draft_curve_arguments, _trained_draft_curve, MODELS),
    "trained-draft-regime": Command("token-level acceptance of the trained draft at temperature 1 (top-5, top-10, "
                                    "top-p 0.95, full vocabulary) on the reproducing-the-paper chapter's positions, "
                                    "K = 2, 3, 4, 8 (results/offline_default/trained_regime.json)",
                                    _trained_draft_regime_arguments, _trained_draft_regime, MODELS + PROGRESS),
}
#: former names of commands -> their names now: ``python -m mspec_lab <former name>`` stops with
#: a one-line error that names the command to run instead
RENAMED_COMMANDS = {"train-draft": "trained-draft-train", "draft-speed": "trained-draft-speed",
                    "trained-regime": "trained-draft-regime"}
