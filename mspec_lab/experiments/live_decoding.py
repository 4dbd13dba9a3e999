"""Block efficiency, token rate and output quality of live multi-draft decoding (Tables 1, 2, 4-6, Figures 3, 4).

Every generation is one row: a prompt, a seed and a method (``autoregressive``,
``single`` or a multi-draft scheme with K drafts of length L), run with
:func:`mspec.lm.decoding.speculative_generate` / :func:`~mspec.lm.decoding.autoregressive_generate`.
A row is keyed by its full configuration, so with a CSV file (``out``) a rerun skips
finished rows and experiments share rows (e.g. the single-draft and autoregressive
baselines). The experiments (:data:`EXPERIMENTS`; ``DecodingSettings.experiments`` picks some):

* ``drafts`` (Table 1): block efficiency vs K (identical drafts at the draft temperature);
* ``temperature`` (Figure 3; Tables 5, 6): K = 2 identical drafts vs draft temperature, on
  every dataset, with ROUGE-L (XSum, Dolly) / BLEU (WMT) of the outputs;
* ``nonidentical`` (Figure 4): first draft at 1.2, second draft temperature varied;
* ``topk`` (Table 4): top-k sampling for draft and target, K = 2, 3;
* ``truncation`` (Table 2): IS with alphabet 10/20/40/50 (s = 5) and s = 5/10/15 (alphabet 40).

:func:`summarize_decoding` gives mean ± standard error over (prompt, seed) generations of the block
efficiency (tokens per target call), of the token-rate improvement over single-draft
decoding (paired by prompt and seed) and of the quality metric, and where the time of a
round goes (draft, target, selection, cache). :mod:`mspec_lab.experiments.live_decoding_report`
prints the tables next to the paper's and checks the goals. In a notebook::

    run = run_decoding(pair, DecodingSettings.quick(experiments=("drafts",)))
    stats = summarize_decoding(run)

On the command line: ``python -m mspec_lab decoding`` (rows in ``decoding.csv``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

import numpy as np

from mspec_lab.experiments import paper
from mspec_lab.experiments.inputs import (SharedSettings, DATASETS, Prompt, checked_choices, derived_seed,
                     load_dataset_prompts, with_progress)
from mspec_lab.experiments.report import pair_label
from mspec_lab.experiments.results import ResultTable, RowBudget, mean_se, ratio_se

__all__ = ["AUTOREGRESSIVE", "DECODING_CONFIG_FIELDS", "DECODING_VALUE_FIELDS", "DecodingRun", "DecodingSettings",
           "EXPERIMENTS", "NONIDENTICAL_SCHEMES", "generate_row", "run_decoding", "summarize_decoding", "timing"]

EXPERIMENTS = ("drafts", "temperature", "nonidentical", "topk", "truncation")
#: the compared schemes that accept non-identical drafts (Figure 4)
NONIDENTICAL_SCHEMES = ("is", "is-ratio", "specinfer")
AUTOREGRESSIVE = "autoregressive"
#: Table 2 varies the IS alphabet at this LP size s, and s at this alphabet (the paper's setting)
TRUNCATION_S, TRUNCATION_ALPHABET = 5, 40

DECODING_CONFIG_FIELDS = ["preset", "dataset", "prompt", "seed", "method", "num_drafts", "draft_length",
                 "draft_temperatures", "target_temperature", "top_k", "params", "max_new_tokens"]
DECODING_VALUE_FIELDS = ["tokens", "target_calls", "block_efficiency", "decode_s", "tokens_per_s", "draft_s",
                "target_s", "selection_s", "cache_s", "alive", "reached", "metric", "quality", "text"]


@dataclass(frozen=True)
class DecodingSettings(SharedSettings):
    """Settings of the live-decoding experiments; the defaults are the full run.

    Attributes:
        experiments: which of :data:`EXPERIMENTS` run.
        datasets: datasets of the ``temperature`` experiment.
        main_dataset: dataset of Tables 1, 2, 4 and Figure 4 (the paper: Dolly).
        prompts, seeds: prompts per dataset and seeds per prompt.
        max_new_tokens: tokens per generation.
        draft_length: L (the paper: 5).
        drafts_k: Table 1's values of K.
        temperatures: draft temperatures of Figures 3, 4 (the paper's five).
        first_temperature: Figure 4's first draft temperature.
        top_k, topk_drafts: Table 4's top-k values and values of K.
        alphabets: Table 2's IS alphabet sizes (at s = 5); ``lp_sizes``: its LP sizes s
            (at alphabet 40).
        draft_temperature: the drafts' temperature where none is swept.
        target_temperature, data_source, max_chars, seed: as in
            :class:`~mspec_lab.experiments.acceptance.AcceptanceSettings`.
    """

    experiments: tuple[str, ...] = EXPERIMENTS
    datasets: tuple[str, ...] = DATASETS
    main_dataset: str = "dolly"
    prompts: int = 4
    seeds: int = 3
    max_new_tokens: int = 48
    draft_length: int = paper.DRAFT_LENGTH
    drafts_k: tuple[int, ...] = (2, 3, 4, 5, 6)
    temperatures: tuple[float, ...] = paper.TEMPERATURES
    first_temperature: float = 1.2
    top_k: tuple[int, ...] = (10, 5)
    topk_drafts: tuple[int, ...] = (2, 3)
    alphabets: tuple[int, ...] = (10, 20, 40, 50)
    lp_sizes: tuple[int, ...] = (5, 10, 15)
    #: how the settings differ under ``--quick`` (minutes on a CPU)
    QUICK: ClassVar[dict] = {"prompts": 1, "seeds": 1, "max_new_tokens": 16, "max_chars": 400, "drafts_k": (2, 4),
                             "temperatures": (1.2, 2.0), "top_k": (10,), "topk_drafts": (2,),
                             "alphabets": (10, 40), "lp_sizes": (5, 15)}

    def __post_init__(self):
        object.__setattr__(self, "experiments", checked_choices("experiments", self.experiments, EXPERIMENTS))
        object.__setattr__(self, "datasets", checked_choices("datasets", self.datasets, DATASETS))
        checked_choices("main_dataset", self.main_dataset, DATASETS)
        for name in ("drafts_k", "top_k", "topk_drafts", "alphabets", "lp_sizes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "temperatures", tuple(float(t) for t in self.temperatures))
        object.__setattr__(self, "first_temperature", float(self.first_temperature))  # 1 and 1.0: one key
        super().__post_init__()


@dataclass
class DecodingRun:
    """What :func:`run_decoding` computed or read back.

    Attributes:
        settings: the settings of the run.
        preset: the model pair's preset name (in every row key).
        pair: the pair's description; ``label``: its short name at the draft temperature;
            ``swept_label``: without a temperature (for tables that sweep it).
        rows: experiment -> its rows (config fields of :data:`DECODING_CONFIG_FIELDS` and values of
            :data:`DECODING_VALUE_FIELDS`); experiments may share rows.
    """

    settings: DecodingSettings
    preset: str
    pair: str
    label: str
    swept_label: str
    rows: dict[str, list[dict]] = field(default_factory=dict)


# -- one generation ------------------------------------------------------------------------------
def generate_row(pair, prompt: Prompt, config: dict) -> dict:
    """Run the generation ``config`` describes on ``prompt``; return the row's values.

    The torch generator is seeded from ``(config["seed"], prompt.tag)``, the same for every
    method, so methods see common random numbers where they consume them alike.
    """
    import torch

    from mspec.lm.decoding import autoregressive_generate, speculative_generate

    gen = torch.Generator().manual_seed(derived_seed(config["seed"], prompt.tag))
    shared = dict(top_k=config["top_k"], max_new_tokens=config["max_new_tokens"],
                  eos_token_id=pair.eos_token_id, generator=gen)
    if config["method"] == AUTOREGRESSIVE:
        result = autoregressive_generate(list(prompt.ids), target_model=pair.target_model,
                                         temperature=config["target_temperature"], **shared)
    else:
        result = speculative_generate(
            list(prompt.ids), draft_model=pair.draft_model, target_model=pair.target_model,
            scheme=config["method"], num_drafts=config["num_drafts"], draft_length=config["draft_length"],
            draft_temperatures=config["draft_temperatures"], target_temperature=config["target_temperature"],
            scheme_params=config["params"] or None, **shared)
    decode_s = result.wall_time - result.prefill_time
    return {
        "tokens": len(result.token_ids), "target_calls": result.num_target_calls,
        "block_efficiency": result.block_efficiency, "decode_s": decode_s,
        "tokens_per_s": len(result.token_ids) / decode_s if decode_s > 0 else float("nan"),
        **_round_times(result), **_drafts_alive(result, config["draft_length"]),
        **_quality(pair, prompt, result),
    }


def _round_times(result) -> dict:
    """Seconds spent in each part of the rounds, summed over rounds."""
    return {f"{part}_s": sum(getattr(r, f"{part}_time") for r in result.rounds)
            for part in ("draft", "target", "selection", "cache")}


def _drafts_alive(result, draft_length: int) -> dict:
    """Drafts offered at each position of a round, summed over rounds, and how many rounds
    reached that position (empty lists for autoregressive sampling)."""
    alive = [0] * (draft_length if result.rounds and result.rounds[0].alive else 0)
    reached = list(alive)
    for r in result.rounds:
        for j, a in enumerate(r.alive):
            alive[j] += a
            reached[j] += 1
    return {"alive": alive, "reached": reached}


def _quality(pair, prompt: Prompt, result) -> dict:
    """The output text and the paper's quality metric of it (none without a tokenizer)."""
    if pair.tokenizer is None:
        return {"metric": "", "quality": float("nan"), "text": ""}
    from mspec_lab.metrics import score

    text = pair.tokenizer.decode(result.token_ids, skip_special_tokens=True).strip()
    metric, quality = score(prompt.dataset, [text], [prompt.reference])
    if metric == "bleu":
        quality /= 100.0  # sacrebleu's 0-100 -> the paper's 0-1 scale
    return {"metric": metric, "quality": quality, "text": text}


# -- the sweep -----------------------------------------------------------------------------------
class Sweep:
    """Builds row configurations and computes (or reads back) their rows.

    Args:
        pair: the model pair.
        settings: :class:`DecodingSettings`.
        table: the :class:`ResultTable` of generations.
        progress: show a progress bar per experiment.
    """

    def __init__(self, pair, settings: DecodingSettings, table: ResultTable, *, progress: bool = False):
        self.pair, self.settings, self.table, self.progress = pair, settings, table, progress
        self._prompts: dict[str, list[Prompt]] = {}

    def prompts(self, dataset: str) -> list[Prompt]:
        if dataset not in self._prompts:
            self._prompts[dataset] = load_dataset_prompts(
                self.pair, dataset, self.settings.prompts, source=self.settings.data_source,
                max_chars=self.settings.max_chars)
        return self._prompts[dataset]

    def config(self, prompt, seed, method, *, temps=None, top_k=None, params=None) -> dict:
        """Row configuration; ``temps`` is the list of K draft temperatures."""
        spec = method != AUTOREGRESSIVE
        return {
            "preset": self.pair.name, "dataset": prompt.dataset, "prompt": prompt.tag, "seed": seed,
            "method": method, "num_drafts": len(temps) if spec else 0,
            "draft_length": self.settings.draft_length if spec else 0,
            "draft_temperatures": [float(t) for t in temps] if spec else None,
            "target_temperature": self.settings.target_temperature, "top_k": top_k,
            "params": dict(params or {}), "max_new_tokens": self.settings.max_new_tokens,
        }

    def jobs(self, dataset, variants) -> list[tuple[Prompt, dict]]:
        """``(prompt, config)`` for every prompt, seed and variant ``(method, kwargs)``."""
        out = []
        for prompt in self.prompts(dataset):
            for seed in range(self.settings.seed, self.settings.seed + self.settings.seeds):
                for method, kwargs in variants:
                    out.append((prompt, self.config(prompt, seed, method, **kwargs)))
        return out

    def compute(self, name: str, jobs) -> list[dict]:
        """Rows of ``jobs`` (stored ones read back)."""
        rows = []
        for prompt, config in with_progress(jobs, self.progress, desc=name, unit="gen"):
            rows.append(self.table.compute(config, lambda p=prompt, c=config: generate_row(self.pair, p, c)))
        return rows


def _drafts_variants(s: DecodingSettings) -> list:
    t = s.draft_temperature
    variants = [(AUTOREGRESSIVE, {}), ("single", {"temps": [t]})]
    return variants + [(m, {"temps": [t] * k}) for k in s.drafts_k for m in paper.COMPARED_SCHEMES]


def _temperature_variants(s: DecodingSettings) -> list:
    variants = [(AUTOREGRESSIVE, {})]
    for temp in s.temperatures:
        variants += [("single", {"temps": [temp]})] + [(m, {"temps": [temp] * 2}) for m in paper.COMPARED_SCHEMES]
    return variants


def _nonidentical_variants(s: DecodingSettings) -> list:
    first = s.first_temperature
    return [("single", {"temps": [first]})] + [(m, {"temps": [first, temp]})
                                               for temp in s.temperatures for m in NONIDENTICAL_SCHEMES]


def _topk_variants(s: DecodingSettings) -> list:
    t, variants = s.draft_temperature, []
    for top_k in s.top_k:
        variants += [(AUTOREGRESSIVE, {"top_k": top_k}), ("single", {"temps": [t], "top_k": top_k})]
        variants += [(m, {"temps": [t] * k, "top_k": top_k}) for k in s.topk_drafts for m in paper.COMPARED_SCHEMES]
    return variants


def _truncation_variants(s: DecodingSettings) -> list:
    # an IS alphabet smaller than its s is not a valid setting: left out
    params = [{"s": TRUNCATION_S, "alphabet": a} for a in s.alphabets if a >= TRUNCATION_S]
    params += [{"s": lp, "alphabet": TRUNCATION_ALPHABET} for lp in s.lp_sizes if lp <= TRUNCATION_ALPHABET]
    unique = [p for i, p in enumerate(params) if p not in params[:i]]
    t = s.draft_temperature
    return [("single", {"temps": [t]})] + [("is", {"temps": [t, t], "params": p}) for p in unique]


#: experiment -> its variants ``(method, Sweep.config keywords)`` per prompt and seed
EXPERIMENT_VARIANTS = {"drafts": _drafts_variants, "temperature": _temperature_variants, "nonidentical": _nonidentical_variants,
            "topk": _topk_variants, "truncation": _truncation_variants}


def run_decoding(pair, settings: DecodingSettings | None = None, *, out: str | Path | None = None,
                 budget: RowBudget | None = None, progress: bool = False) -> DecodingRun:
    """Run every generation of the chosen experiments (or read stored rows back).

    Args:
        pair: :class:`mspec.lm.models.ModelPair`; its ``name`` goes into the row keys.
        settings: :class:`DecodingSettings` (default: the full run).
        out: folder of ``decoding.csv``; ``None`` keeps the rows in memory.
        budget: how many new rows may be computed (:class:`RowBudget`; default: all).
        progress: show a progress bar per experiment (``tqdm``; the command line does).

    Raises:
        StopSweep: the budget ran out (the rows computed so far are stored).
    """
    settings = settings or DecodingSettings()
    table = ResultTable(None if out is None else Path(out) / "decoding.csv", config_fields=DECODING_CONFIG_FIELDS,
                        value_fields=DECODING_VALUE_FIELDS, budget=budget)
    sweep = Sweep(pair, settings, table, progress=progress)
    run = DecodingRun(settings, pair.name, pair.description, pair_label(pair, settings.draft_temperature),
                      pair_label(pair, None))
    for name in [e for e in EXPERIMENTS if e in settings.experiments]:
        datasets = settings.datasets if name == "temperature" else (settings.main_dataset,)
        jobs = [job for dataset in datasets for job in sweep.jobs(dataset, EXPERIMENT_VARIANTS[name](settings))]
        run.rows[name] = sweep.compute(name, jobs)
    return run


# -- statistics ----------------------------------------------------------------------------------
def pick(rows, **where) -> list[dict]:
    """Rows matching every ``name=value`` (``draft_temperatures`` compared as lists)."""
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def stat(rows, field_name: str) -> dict:
    mean, se, n = mean_se(float(r[field_name]) for r in rows)
    return {"mean": mean, "se": se, "n": n}


def improvement(rows, baseline_rows) -> dict:
    """Token-rate improvement over the baseline in %, paired by (dataset, prompt, seed)."""
    base = {(r["dataset"], r["prompt"], r["seed"]): r["tokens_per_s"] for r in baseline_rows}
    ratios = [100.0 * (r["tokens_per_s"] / base[key] - 1.0)
              for r in rows if (key := (r["dataset"], r["prompt"], r["seed"])) in base]
    mean, se, n = mean_se(ratios)
    return {"mean": mean, "se": se, "n": n}


def paired_ratio(rows, baseline_rows, field_name: str = "block_efficiency") -> dict:
    """``mean(field) of rows / mean(field) of baseline_rows`` over the generations both have
    (paired by dataset, prompt and seed), with its standard error (:func:`ratio_se`)."""
    base = {(r["dataset"], r["prompt"], r["seed"]): float(r[field_name]) for r in baseline_rows}
    pairs = [(float(r[field_name]), base[key]) for r in rows if (key := (r["dataset"], r["prompt"], r["seed"])) in base]
    mean, se, n = ratio_se([a for a, _ in pairs], [b for _, b in pairs])
    return {"mean": mean, "se": se, "n": n}


def method_stats(rows, baseline_rows) -> dict:
    """Block efficiency, token rate, improvement over the baseline and quality of ``rows``."""
    return {"block_efficiency": stat(rows, "block_efficiency"), "tokens_per_s": stat(rows, "tokens_per_s"),
            "improvement_pct": improvement(rows, baseline_rows), "quality": stat(rows, "quality")}


def alive_per_position(rows) -> list[dict]:
    """Mean number of drafts offered at each position of a round (over the rounds that reach
    it, pooled over ``rows``): ``{"mean", "se", "n"}`` per position, the s.e. clustered by
    generation (:func:`ratio_se`) and ``n`` the generations whose rounds reach it."""
    def as_list(value):
        return json.loads(value) if isinstance(value, str) else list(value)

    alive, reached = [as_list(r["alive"]) for r in rows], [as_list(r["reached"]) for r in rows]
    out = []
    for j in range(len(alive[0]) if alive else 0):
        both = [(a[j], n[j]) for a, n in zip(alive, reached) if n[j] > 0]
        mean, se, n = ratio_se([a for a, _ in both], [n for _, n in both])
        out.append({"mean": mean, "se": se, "n": n})
    return out


def _drafts_stats(rows, s: DecodingSettings) -> dict:
    single = pick(rows, method="single")
    by_k = {m: {k: pick(rows, method=m, num_drafts=k) for k in s.drafts_k} for m in paper.COMPARED_SCHEMES}
    return {
        "single": method_stats(single, single),
        AUTOREGRESSIVE: method_stats(pick(rows, method=AUTOREGRESSIVE), single),
        **{m: {k: method_stats(r, single) for k, r in by.items()} for m, by in by_k.items()},
        "alive": {m: {k: alive_per_position(r) for k, r in by.items()} for m, by in by_k.items()},
    }


def _temperature_stats(rows, s: DecodingSettings) -> dict:
    out = {}
    for dataset in s.datasets:
        d = pick(rows, dataset=dataset)
        by = {AUTOREGRESSIVE: method_stats(pick(d, method=AUTOREGRESSIVE), [])}
        for temp in s.temperatures:
            single = pick(d, method="single", draft_temperatures=[temp])
            by[temp] = {m: method_stats(pick(d, method=m, draft_temperatures=[temp] * (1 if m == "single" else 2)),
                                        single) for m in ("single", *paper.COMPARED_SCHEMES)}
        out[dataset] = by
    return out


def _nonidentical_stats(rows, s: DecodingSettings) -> dict:
    single = pick(rows, method="single")
    out = {"single": method_stats(single, single)}
    for temp in s.temperatures:
        out[temp] = {m: method_stats(pick(rows, method=m, draft_temperatures=[s.first_temperature, temp]), single)
                     for m in NONIDENTICAL_SCHEMES}
    return out


def _topk_stats(rows, s: DecodingSettings) -> dict:
    out = {}
    for top_k in s.top_k:
        d = pick(rows, top_k=top_k)
        single = pick(d, method="single")
        out[top_k] = {"single": method_stats(single, single),
                      AUTOREGRESSIVE: method_stats(pick(d, method=AUTOREGRESSIVE), single)}
        for k in s.topk_drafts:
            by = {m: pick(d, method=m, num_drafts=k) for m in paper.COMPARED_SCHEMES}
            out[top_k][k] = {m: {**method_stats(rows_m, single), "over_is_paper": paired_ratio(rows_m, by["is"])}
                             for m, rows_m in by.items()}
    return out


def _truncation_stats(rows, s: DecodingSettings) -> dict:
    single = pick(rows, method="single")
    out = {"single": method_stats(single, single)}
    for row in pick(rows, method="is"):
        label = f"s={row['params']['s']},alphabet={row['params']['alphabet']}"
        if label not in out:
            out[label] = method_stats(pick(rows, method="is", params=row["params"]), single)
    return out


#: experiment -> its statistics from its rows
EXPERIMENT_STATS = {"drafts": _drafts_stats, "temperature": _temperature_stats, "nonidentical": _nonidentical_stats,
                    "topk": _topk_stats, "truncation": _truncation_stats}


def summarize_decoding(run: DecodingRun) -> dict:
    """Per-experiment statistics (nested dicts, JSON-ready), and ``"timing"``: where the
    time of a round goes (:func:`timing`)."""
    out = {name: EXPERIMENT_STATS[name](rows, run.settings) for name, rows in run.rows.items()}
    out["timing"] = timing(run)
    return out


def timing(run: DecodingRun) -> dict:
    """Mean seconds per round (target call) in each part, per method and K, over all rows."""
    groups: dict[str, list[dict]] = {}
    seen = set()
    for rows in run.rows.values():
        for r in rows:
            if id(r) in seen:
                continue
            seen.add(id(r))
            label = r["method"] if r["method"] in (AUTOREGRESSIVE, "single") else f"{r['method']} K={r['num_drafts']}"
            groups.setdefault(label, []).append(r)
    out = {}
    for label, rows in groups.items():
        calls = sum(r["target_calls"] for r in rows)
        parts = {part: sum(r[f"{part}_s"] for r in rows) / calls for part in ("draft", "target", "selection", "cache")}
        ratio = parts["selection"] / parts["target"] if parts["target"] else float("nan")
        out[label] = {**parts, "rounds": int(calls), "method": rows[0]["method"],
                      "num_drafts": int(rows[0]["num_drafts"]), "selection_over_target": ratio}
    return out
