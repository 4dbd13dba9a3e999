"""Token-level acceptance on real LM next-token distributions (the paper's Table 3).

For each prompt of each dataset, the target samples its own continuation (or, with
``continuation="reference"``, reads the reference); one forward pass over prompt +
continuation gives, at every continuation position, the target distribution ``q`` (target
temperature, default 1.0) and the draft distribution ``p`` (draft model at the draft
temperature; for the offline default the draft model *is* the target, so ``p`` is the same
logits at temperature 1.5). At each position we compute the exact acceptance probability,
no sampling, of:

* ``optimal``: the exactly optimal scheme of :mod:`mspec.fast.optimal_selection` at the full
  vocabulary (its acceptance is the closed form);
* ``is-ratio``: the paper's importance-sampling scheme (``s``, ``alphabet``; default 5, 40);
* ``spectr``, ``specinfer``: the baselines; ``single``: one draft (K = 1);

for K = 2, 4, 8 identical drafts, and report mean ± standard error over positions (all
prompts of a dataset pooled). Goal (c), checked at the end: at every K and dataset,
optimal >= IS >= SpecTr, SpecInfer.

In a notebook (rows kept in memory)::

    run = run_acceptance(pair, AcceptanceSettings.quick(datasets=("dolly",)))
    print_table3(summarize_acceptance(run), run)

On the command line, ``python -m mspec_lab acceptance`` runs the same with
``out="bench-results"``: one CSV row per position, scheme and K in ``acceptance.csv``,
written as it is computed (a rerun skips stored rows), the summary in ``acceptance.json``
and a figure in ``acceptance.html``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

import numpy as np

from mspec_lab.experiments import paper
from mspec_lab.experiments.inputs import (SharedSettings, DATASETS, checked_choices, derived_seed,
                     load_dataset_prompts, with_progress)
from mspec_lab.experiments.report import (ORDERING_NOTE, SMOKE_TEST_LINE, fmt, format_table, pair_label, print_block,
                                          print_smoke_banner, smoke_test_fields, write_html, write_json)
from mspec_lab.experiments.results import ResultTable, RowBudget, mean_se

__all__ = ["AcceptanceRun", "AcceptanceSettings", "ROW_FIELDS", "TABLE3_ROWS", "check_ordering",
           "collect_distributions", "collect_logits", "FileCheck", "check_against_file", "print_table3",
           "report_acceptance", "run_acceptance", "summarize_acceptance", "token_acceptance"]

#: rows of our Table 3, in print order: the compared schemes, then one draft for reference
TABLE3_ROWS = (*paper.COMPARED_SCHEMES, "single")
#: two means count as ordered when they differ by less than this in the wrong direction
#: (float rounding of equal acceptances)
ORDER_TOLERANCE = 1e-12

PROMPT_FIELDS = ["preset", "dataset", "prompt", "seed", "continuation", "draft_temperature",
                 "target_temperature", "positions"]
ROW_FIELDS = ["preset", "dataset", "prompt", "seed", "continuation", "draft_temperature",
              "target_temperature", "position", "scheme", "num_drafts", "params"]


@dataclass(frozen=True)
class AcceptanceSettings(SharedSettings):
    """Settings of the token-level acceptance experiment; the defaults are the full run.

    Attributes:
        datasets: datasets whose prompts run (:data:`~mspec_lab.experiments.inputs.DATASETS`).
        prompts: prompts per dataset.
        positions: continuation positions per prompt (fewer when the continuation ends).
        drafts: values of K.
        continuation: ``"sampled"`` (the target samples it) or ``"reference"`` (the
            dataset's reference text).
        is_s, is_alphabet: LP tokens and ranked tokens of the IS scheme.
        draft_temperature, target_temperature: temperatures of ``p`` and ``q``.
        data_source: where prompts come from (:func:`mspec_lab.data.load_prompts`).
        max_chars: XSum documents are cut to this many characters.
        seed: base seed of the sampled continuations.
    """

    datasets: tuple[str, ...] = DATASETS
    prompts: int = 8
    positions: int = 32
    drafts: tuple[int, ...] = (2, 4, 8)
    continuation: str = "sampled"
    is_s: int = 5
    is_alphabet: int = 40
    #: how the settings differ under ``--quick`` (minutes on a CPU)
    QUICK: ClassVar[dict] = {"prompts": 2, "positions": 12, "max_chars": 400}

    def __post_init__(self):
        object.__setattr__(self, "datasets", checked_choices("datasets", self.datasets, DATASETS))
        checked_choices("continuation", self.continuation, ("sampled", "reference"))
        object.__setattr__(self, "drafts", tuple(sorted(set(self.drafts))))
        super().__post_init__()

    @property
    def is_params(self) -> dict:
        return {"s": self.is_s, "alphabet": self.is_alphabet}

    def jobs(self) -> list[tuple[str, int, dict]]:
        """``(scheme, K, params)`` computed at every position: single-draft, then every
        compared scheme at every K."""
        jobs = [("single", 1, {})]
        for k in self.drafts:
            for scheme in paper.COMPARED_SCHEMES:
                jobs.append((scheme, k, dict(self.is_params) if scheme in paper.IS_SCHEMES else {}))
        return jobs


@dataclass
class AcceptanceRun:
    """What :func:`run_acceptance` computed or read back.

    Attributes:
        settings: the settings of the run.
        pair: the model pair's description; ``label``: its short name (:func:`pair_label`).
        rows: dataset -> one row per position, scheme and K (config fields of
            :data:`ROW_FIELDS` plus ``acceptance`` and ``time_ms``).
        distributions: dataset -> ``(draft (n, V), target (n, V))`` of each prompt whose
            rows this call computed (every prompt when nothing was stored before, e.g.
            in memory), in prompt order.
    """

    settings: AcceptanceSettings
    pair: str
    label: str
    rows: dict[str, list[dict]] = field(default_factory=dict)
    distributions: dict[str, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)

    def acceptances(self) -> dict[tuple[str, str, int], np.ndarray]:
        """``(dataset, scheme, K)`` -> the acceptance at every position, in row order
        (the same positions for every scheme and K)."""
        out: dict[tuple[str, str, int], list[float]] = {}
        for dataset, rows in self.rows.items():
            for r in rows:
                out.setdefault((dataset, r["scheme"], int(r["num_drafts"])), []).append(r["acceptance"])
        return {key: np.asarray(values) for key, values in out.items()}


# -- distributions -------------------------------------------------------------------------------
def collect_logits(pair, prompt_ids, *, positions: int, target_temperature: float, continuation=None,
                   seed: int = 0):
    """Draft and target next-token logits along a continuation of a prompt.

    Args:
        pair: :class:`mspec.lm.models.ModelPair`.
        prompt_ids: prompt token ids.
        positions: at most this many continuation positions.
        target_temperature: temperature of the sampled continuation.
        continuation: token ids to follow; ``None`` samples them from the target
            (stopping early at EOS) with ``torch.Generator().manual_seed(seed)``.
        seed: seed of the sampled continuation.

    Returns:
        ``(draft_logits, target_logits, continuation)``: float64 tensors ``(n, V)`` --
        row ``j`` scores the token after ``prompt + continuation[:j]`` -- and the ``n``
        continuation ids, ``n <= positions``. For a same-weights pair the two tensors are
        one object.
    """
    import torch

    from mspec.lm.decoding import autoregressive_generate

    prompt_ids = list(prompt_ids)
    if continuation is None:
        continuation = autoregressive_generate(
            prompt_ids, target_model=pair.target_model, temperature=target_temperature,
            max_new_tokens=positions, eos_token_id=pair.eos_token_id, generator=seed,
        ).token_ids
    continuation = list(continuation)[:positions]
    full = torch.tensor([prompt_ids + continuation], device=pair.device)
    window = slice(len(prompt_ids) - 1, len(prompt_ids) - 1 + len(continuation))
    with torch.inference_mode():
        target_logits = pair.target_model(input_ids=full).logits[0, window].double()
        draft_logits = (target_logits if pair.same_model
                        else pair.draft_model(input_ids=full).logits[0, window].double())
    return draft_logits, target_logits, continuation


def collect_distributions(pair, prompt_ids, *, positions: int, draft_temperature: float,
                          target_temperature: float, continuation=None, seed: int = 0):
    """Draft and target next-token distributions along a continuation of a prompt.

    Args:
        pair: :class:`mspec.lm.models.ModelPair`.
        prompt_ids: prompt token ids.
        positions: at most this many continuation positions.
        draft_temperature: temperature of the draft distributions ``p``.
        target_temperature: temperature of the target ``q`` (also of the sampled continuation).
        continuation: token ids to follow; ``None`` samples them from the target
            (stopping early at EOS) with ``torch.Generator().manual_seed(seed)``.
        seed: seed of the sampled continuation.

    Returns:
        ``(draft, target, continuation)``: float64 arrays ``(n, V)`` -- row ``j`` is the
        distribution of the token after ``prompt + continuation[:j]`` -- and the ``n``
        continuation ids, ``n <= positions``.
    """
    from mspec.distributions import distribution_from_logits

    draft_logits, target_logits, continuation = collect_logits(
        pair, prompt_ids, positions=positions, target_temperature=target_temperature,
        continuation=continuation, seed=seed)
    target = distribution_from_logits(target_logits, temperature=target_temperature).cpu().numpy()
    draft = distribution_from_logits(draft_logits, temperature=draft_temperature).cpu().numpy()
    return draft, target, continuation


def token_acceptance(scheme: str, *, draft, target, num_drafts: int, params: dict | None = None) -> float:
    """Exact acceptance of ``scheme`` at one position (``"single"``: one draft, any K).

    ``"optimal"`` is the full-vocabulary scheme of :mod:`mspec.fast.optimal_selection`; its
    acceptance equals the closed form ``optimal_acceptance`` (tested to 1e-9).
    """
    from mspec.registry import make_scheme

    if scheme == "single":
        return make_scheme("single", draft=draft, target=target).acceptance()
    return make_scheme(scheme, draft=draft, target=target, num_drafts=num_drafts, **(params or {})).acceptance()


@dataclass(frozen=True)
class FileCheck:
    """A results file's stored acceptances recomputed on this machine (:func:`check_against_file`).

    Attributes:
        recomputed: how many acceptances were recomputed.
        worst: the largest difference from the file.
        worst_share: the largest difference divided by its float32 bound
            (:func:`mspec_lab.rounding.acceptance_tolerance`); at most 1 when the file holds.
        draft_error, target_error: this machine's float32 rounding of the draft and target
            logits (:func:`mspec_lab.rounding.logit_rounding_error`).
        target_logits: the float32 target logits ``(n, V)``, as float64.
    """

    recomputed: int
    worst: float
    worst_share: float
    draft_error: float
    target_error: float
    target_logits: object

    @property
    def holds(self) -> bool:
        """Whether every difference is within its float32 bound."""
        return self.worst_share <= 1.0


def check_against_file(pair, exact_pair, prompt_ids, values, *, target_temperature: float,
                       seed: int, draft_temperature: float | None = None,
                       params: dict | None = None) -> FileCheck:
    """Recompute a results file's acceptances and compare them within float32 rounding.

    The file was computed in float32 on another machine, so its values may differ from
    this machine's by float32 rounding, never more: each difference is held to
    :func:`mspec_lab.rounding.acceptance_tolerance`, with this machine's rounding measured
    against ``exact_pair`` (the same models in float64).

    Args:
        pair: the file's :class:`~mspec.lm.models.ModelPair`, in float32.
        exact_pair: the same pair loaded with ``dtype=torch.float64``.
        prompt_ids: the file's first prompt.
        values: the file's check values: dicts with ``scheme``, ``K``, ``acceptance`` (one
            value per position) and, unless ``draft_temperature`` is given, ``draft_temperature``.
        target_temperature: temperature of ``q`` and of the sampled continuation.
        seed: seed of the continuation (as in the file).
        draft_temperature: one draft temperature for every value, or ``None``.
        params: parameters of the IS schemes (``"is-ratio"``, ``"is"``).
    """
    from mspec.distributions import distribution_from_logits
    from mspec_lab.rounding import acceptance_tolerance, logit_rounding_error

    n = max(len(v["acceptance"]) for v in values)
    draft_logits, target_logits, continuation = collect_logits(
        pair, prompt_ids, positions=n, target_temperature=target_temperature, seed=seed)
    exact_draft, exact_target, _ = collect_logits(
        exact_pair, prompt_ids, positions=n, target_temperature=target_temperature,
        continuation=continuation)
    errors = {"draft_error": logit_rounding_error(draft_logits, exact_draft),
              "target_error": logit_rounding_error(target_logits, exact_target)}
    q = distribution_from_logits(target_logits, temperature=target_temperature).numpy()
    worst = share = 0.0
    count = 0
    for v in values:
        t_p = draft_temperature if draft_temperature is not None else v["draft_temperature"]
        p = distribution_from_logits(draft_logits, temperature=t_p).numpy()
        extra = params if v["scheme"] in paper.IS_SCHEMES else None
        again = [token_acceptance(v["scheme"], draft=p[j], target=q[j], num_drafts=v["K"],
                                  params=extra) for j in range(len(v["acceptance"]))]
        diff = float(np.max(np.abs(np.subtract(again, v["acceptance"]))))
        bound = acceptance_tolerance(**errors, draft_temperature=t_p,
                                     target_temperature=target_temperature, num_drafts=v["K"])
        ratio = diff / bound if bound > 0 else (0.0 if diff == 0 else float("inf"))
        worst, share, count = max(worst, diff), max(share, ratio), count + len(again)
    return FileCheck(count, worst, share, target_logits=target_logits, **errors)


# -- the run -------------------------------------------------------------------------------------
def run_acceptance(pair, settings: AcceptanceSettings | None = None, *, out: str | Path | None = None,
                   budget: RowBudget | None = None, progress: bool = False) -> AcceptanceRun:
    """Compute the acceptance of every scheme at every position (or read stored rows back).

    Args:
        pair: :class:`mspec.lm.models.ModelPair`; its ``name`` goes into the row keys.
        settings: :class:`AcceptanceSettings` (default: the full run).
        out: folder of ``acceptance.csv`` and ``acceptance_prompts.csv``; ``None`` keeps
            the rows in memory.
        budget: how many new rows may be computed (:class:`RowBudget`; default: all).
        progress: show a progress bar per dataset (``tqdm``; the command line does).

    Raises:
        StopSweep: the budget ran out (the rows computed so far are stored).
    """
    settings = settings or AcceptanceSettings()
    budget = budget or RowBudget()
    folder = None if out is None else Path(out)
    tables = (
        ResultTable(folder and folder / "acceptance_prompts.csv", config_fields=PROMPT_FIELDS,
                    value_fields=["num_positions", "continuation"], budget=budget),
        ResultTable(folder and folder / "acceptance.csv", config_fields=ROW_FIELDS,
                    value_fields=["acceptance", "time_ms"], budget=budget),
    )
    run = AcceptanceRun(settings, pair.description, pair_label(pair, settings.draft_temperature))
    for dataset in settings.datasets:
        prompts = load_dataset_prompts(pair, dataset, settings.prompts, source=settings.data_source,
                                       max_chars=settings.max_chars)
        run.rows[dataset], run.distributions[dataset] = [], []
        for prompt in with_progress(prompts, progress, desc=f"acceptance {dataset}", unit="prompt"):
            run.rows[dataset] += _prompt_rows(pair, prompt, settings, tables, run.distributions[dataset])
    return run


def _prompt_rows(pair, prompt, settings: AcceptanceSettings, tables, computed: list) -> list[dict]:
    """The rows of one prompt; computes its distributions only when a row is missing
    (and then appends them to ``computed``)."""
    prompt_table, table = tables
    base = {"preset": pair.name, "dataset": prompt.dataset, "prompt": prompt.tag, "seed": settings.seed,
            "continuation": settings.continuation, "draft_temperature": settings.draft_temperature,
            "target_temperature": settings.target_temperature}
    cache = {}

    def distributions():
        if "d" not in cache:
            reference = _reference_ids(pair, prompt) if settings.continuation == "reference" else None
            cache["d"] = collect_distributions(
                pair, prompt.ids, positions=settings.positions, draft_temperature=settings.draft_temperature,
                target_temperature=settings.target_temperature, continuation=reference,
                seed=derived_seed(settings.seed, prompt.tag))
            computed.append(cache["d"][:2])
        return cache["d"]

    def prompt_values():
        continuation = distributions()[2]
        text = (pair.tokenizer.decode(continuation) if pair.tokenizer is not None
                else " ".join(map(str, continuation)))
        return {"num_positions": len(continuation), "continuation": text}

    def values(position, scheme, k, params):
        draft, target, _ = distributions()
        start = time.perf_counter()
        value = token_acceptance(scheme, draft=draft[position], target=target[position], num_drafts=k, params=params)
        return {"acceptance": value, "time_ms": 1e3 * (time.perf_counter() - start)}

    info = prompt_table.compute({**base, "positions": settings.positions}, prompt_values)
    rows = []
    for position in range(int(info["num_positions"])):
        for scheme, k, params in settings.jobs():
            config = {**base, "position": position, "scheme": scheme, "num_drafts": k, "params": params}
            rows.append(table.compute(config, lambda job=(position, scheme, k, params): values(*job)))
    return rows


def _reference_ids(pair, prompt) -> list[int]:
    if pair.tokenizer is None:  # tiny: ids from the reference text's bytes
        return [b % pair.vocab_size for b in prompt.reference.encode("utf-8")]
    return pair.tokenizer(" " + prompt.reference, add_special_tokens=False)["input_ids"]


# -- statistics ----------------------------------------------------------------------------------
def summarize_acceptance(run: AcceptanceRun) -> dict:
    """dataset -> scheme -> K -> ``{"mean", "se", "n", "time_ms"}`` (mean ± s.e. over positions)."""
    stats = {}
    for dataset, rows in run.rows.items():
        stats[dataset] = {}
        for scheme, k, _ in run.settings.jobs():
            sel = [r for r in rows if r["scheme"] == scheme and r["num_drafts"] == k]
            mean, se, n = mean_se(r["acceptance"] for r in sel)
            stats[dataset].setdefault(scheme, {})[k] = {
                "mean": mean, "se": se, "n": n,
                "time_ms": float(np.median([r["time_ms"] for r in sel])) if sel else float("nan"),
            }
    return stats


def check_ordering(stats: dict, drafts) -> list[tuple[str, int, bool, str]]:
    """Goal (c): ``(dataset, K, ok, detail)`` for optimal >= IS >= SpecTr, SpecInfer (means)."""
    checks = []
    for dataset, by_scheme in stats.items():
        for k in drafts:
            m = {s: by_scheme[s][k]["mean"] for s in paper.COMPARED_SCHEMES}
            ok = (m["optimal"] >= m["is-ratio"] - ORDER_TOLERANCE
                  and m["is-ratio"] >= max(m["spectr"], m["specinfer"]) - ORDER_TOLERANCE)
            detail = " ".join(f"{s}={m[s]:.4f}" for s in paper.COMPARED_SCHEMES)
            checks.append((dataset, k, bool(ok), detail))
    return checks


# -- report --------------------------------------------------------------------------------------
def print_table3(stats: dict, run: AcceptanceRun, digits: int = 4) -> None:
    """Print Table 3 per dataset, ours next to the paper's."""
    drafts = run.settings.drafts
    for dataset, by_scheme in stats.items():
        header = ["scheme"] + [h for k in drafts for h in (f"K={k} ours", f"K={k} paper")]
        body = []
        for scheme in TABLE3_ROWS:
            cells = [scheme]
            for k in drafts:
                st = by_scheme[scheme][1 if scheme == "single" else k]
                cells += [fmt(st["mean"], st["se"], digits, n=st["n"]),
                          fmt(paper.paper_value(paper.TABLE3_ACCEPTANCE, dataset, scheme, k), digits=digits)]
            body.append(cells)
        n = by_scheme["optimal"][drafts[0]]["n"]
        print_block(
            f"Table 3: token-level acceptance, {dataset} ({n} positions; mean ± s.e. over positions)",
            format_table(header, body),
            [f"ours = {run.label}; paper = {paper.PAIR}, {paper.CITATION}",
             "single = one draft (K = 1), repeated in every column; the paper's table has no such row",
             "paper: no value for this dataset" if dataset not in paper.TABLE3_ACCEPTANCE else "",
             ORDERING_NOTE], smoke_test=run.settings.smoke_test,
        )


def report_acceptance(run: AcceptanceRun, out: str | Path | None = None) -> dict:
    """Print Table 3 next to the paper's, the compute per position and goal (c); with
    ``out``, write ``acceptance.json`` and ``acceptance.html`` there.

    Returns:
        ``{"stats": summarize_acceptance(run), "goal_c": check_ordering(...)}``.
    """
    stats, smoke = summarize_acceptance(run), run.settings.smoke_test
    drafts = run.settings.drafts
    print_smoke_banner(smoke)
    print(f"\nModel pair: {run.pair}")
    print_table3(stats, run)
    timing = [[s, *[f"{stats[d][s][1 if s == 'single' else k]['time_ms']:.2f}" for d in stats for k in drafts]]
              for s in TABLE3_ROWS]
    print_block(
        "Token-level compute per position (median ms; exact acceptance incl. building the scheme)",
        format_table(["scheme", *[f"{d} K={k}" for d in stats for k in drafts]], timing), smoke_test=smoke,
    )
    checks = check_ordering(stats, drafts)
    print("\n== Goal (c): token-level acceptance optimal >= IS >= SpecTr, SpecInfer on real distributions")
    for dataset, k, ok, detail in checks:
        print(f"   {dataset:<6} K={k}: {'PASS' if ok else 'FAIL'}  ({detail})")
    if smoke:
        print(f"   {SMOKE_TEST_LINE}")
    if out is not None:
        out = Path(out)
        write_json(out / "acceptance.json", {
            **smoke_test_fields(smoke), "model_pair": run.pair, "label": run.label,
            "settings": dataclasses.asdict(run.settings),
            "stats": stats, "paper": paper.TABLE3_ACCEPTANCE,
            "goal_c": [{"dataset": d, "K": k, "pass": ok, "detail": det} for d, k, ok, det in checks],
        })
        write_html(out / "acceptance.html", f"Token-level acceptance ({run.label})", [figure(stats, drafts, run.label)],
                   smoke_test=smoke)
        print(f"\nwrote {out / 'acceptance.csv'}, {out / 'acceptance.json'}, {out / 'acceptance.html'}")
    return {"stats": stats, "goal_c": checks}


#: bar colours of :func:`figure`, in the order of :data:`TABLE3_ROWS`
TABLE3_COLORS = ("#222222", "#d62728", "#1f77b4", "#2ca02c", "#999999")


def figure(stats: dict, drafts, label: str):
    """Bars of the mean acceptance ± s.e. per scheme and K, one panel per dataset."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(stats), subplot_titles=list(stats), shared_yaxes=True)
    for col, (dataset, by_scheme) in enumerate(stats.items(), start=1):
        for scheme, color in zip(TABLE3_ROWS, TABLE3_COLORS):
            ks = [1 if scheme == "single" else k for k in drafts]
            fig.add_trace(go.Bar(
                name=scheme, x=[f"K={k}" for k in drafts], y=[by_scheme[scheme][k]["mean"] for k in ks],
                error_y=dict(type="data", array=[by_scheme[scheme][k]["se"] for k in ks]),
                legendgroup=scheme, showlegend=col == 1, marker_color=color,
            ), row=1, col=col)
    fig.update_layout(barmode="group", title=f"Token-level acceptance, mean ± s.e. over positions: {label}",
                      yaxis_title="P(accept)")
    return fig
