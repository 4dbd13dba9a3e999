"""Token-level acceptance on real LM next-token distributions (the paper's Table 3).

For each prompt of each dataset, the target samples its own continuation (or, with
``--continuation reference``, reads the reference); one forward pass over prompt +
continuation gives, at every continuation position, the target distribution ``q``
(target temperature, default 1.0) and the draft distribution ``p`` (draft model at the
draft temperature; for the offline default the draft model *is* the target, so ``p`` is
the same logits at temperature 1.5). At each position we compute the exact acceptance
probability, no sampling, of:

* ``optimal``: the exactly optimal scheme of :mod:`mspec.optimal_selection` at the full vocabulary (its acceptance is the closed form);
* ``is``: the paper's importance-sampling scheme (``s``, ``alphabet``; default 5, 40);
* ``spectr``, ``specinfer``: the baselines; ``single``: one draft (K = 1);

for K = 2, 4, 8 identical drafts, and report mean ± standard error over positions (all
prompts of a dataset pooled). Rows go to ``acceptance.csv`` as they are computed (one row
per position, scheme and K; a rerun skips stored rows), the summary to
``acceptance.json`` and a figure to ``acceptance.html``.

Goal (c) printed at the end: at every K and dataset, optimal >= IS >= SpecTr, SpecInfer.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from . import common, paper
from .results import ResultTable, RowBudget, mean_se

#: schemes of Table 3 (and single-draft for reference), in print order
SCHEMES = ("optimal", "is", "spectr", "specinfer", "single")
MULTI = ("optimal", "is", "spectr", "specinfer")

PROMPT_FIELDS = ["preset", "dataset", "prompt", "seed", "continuation", "draft_temperature",
                 "target_temperature", "positions"]
ROW_FIELDS = ["preset", "dataset", "prompt", "seed", "continuation", "draft_temperature",
              "target_temperature", "position", "scheme", "num_drafts", "params"]


def add_arguments(parser) -> None:
    common.add_common_arguments(parser)
    add_acceptance_arguments(parser)


def add_acceptance_arguments(parser) -> None:
    """Options of the token-level acceptance experiment."""
    group = parser.add_argument_group("token-level acceptance (Table 3)")
    group.add_argument("--acc-prompts", type=int, default=None, help="prompts per dataset (default 8, quick 2)")
    group.add_argument("--positions", type=int, default=None,
                       help="continuation positions per prompt (default 32, quick 12)")
    group.add_argument("--continuation", default="sampled", choices=["sampled", "reference"],
                       help="run the target along its own sample (default) or the reference text")
    group.add_argument("--acc-drafts", type=int, nargs="+", default=[2, 4, 8], help="values of K (default 2 4 8)")
    group.add_argument("--is-s", type=int, default=5, help="LP tokens of the IS scheme (default 5)")
    group.add_argument("--is-alphabet", type=int, default=40, help="ranked tokens of the IS scheme (default 40)")


def run(args, *, on_row=None) -> int:
    """Command entry point: returns 0, or 3 when ``--max-rows`` stopped the sweep."""
    return common.run_sweep(args, run_acceptance, report_acceptance, on_row=on_row)


# -- distributions -------------------------------------------------------------------------------
def collect_distributions(pair, prompt_ids, *, positions: int, draft_temperature: float,
                          target_temperature: float, continuation=None, seed: int = 0):
    """Draft and target next-token distributions along a continuation of a prompt.

    Args:
        pair: :class:`mspec.models.ModelPair`.
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
    import torch

    from ..decoding import autoregressive_generate
    from ..distributions import distribution_from_logits

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
    target = distribution_from_logits(target_logits, temperature=target_temperature).cpu().numpy()
    draft = distribution_from_logits(draft_logits, temperature=draft_temperature).cpu().numpy()
    return draft, target, continuation


def token_acceptance(scheme: str, *, draft, target, num_drafts: int, params: dict) -> float:
    """Exact acceptance of ``scheme`` at one position.

    ``"optimal"`` is the full-vocabulary scheme of :mod:`mspec.optimal_selection`; its
    acceptance equals the closed form ``optimal_acceptance`` (tested to 1e-9).
    """
    from ..registry import make_scheme

    if scheme == "single":
        return make_scheme("single", draft=draft, target=target).acceptance()
    return make_scheme(scheme, draft=draft, target=target, num_drafts=num_drafts, **params).acceptance()


# -- the sweep -----------------------------------------------------------------------------------
def acceptance_settings(args) -> dict:
    """The resolved settings of a run (``--quick`` defaults filled in)."""
    return {
        "prompts": common.quick_default(args.acc_prompts, args.quick, 8, 2),
        "positions": common.quick_default(args.positions, args.quick, 32, 12),
        "max_chars": common.quick_default(args.max_chars, args.quick, 1000, 400),
        "drafts": sorted(set(args.acc_drafts)),
        "is_params": {"s": args.is_s, "alphabet": args.is_alphabet},
    }


def scheme_jobs(drafts, is_params):
    """``(scheme, K, params)`` triples computed at every position."""
    jobs = [("single", 1, {})]
    for k in drafts:
        for scheme in MULTI:
            jobs.append((scheme, k, dict(is_params) if scheme == "is" else {}))
    return jobs


def run_acceptance(args, pair, budget: RowBudget) -> dict:
    """Compute (or read back) every row; return the summary for :func:`report_acceptance`."""
    settings = acceptance_settings(args)
    out = Path(args.out)
    prompt_table = ResultTable(out / "acceptance_prompts.csv", config_fields=PROMPT_FIELDS,
                               value_fields=["num_positions", "continuation"], budget=budget)
    table = ResultTable(out / "acceptance.csv", config_fields=ROW_FIELDS,
                        value_fields=["acceptance", "time_ms"], budget=budget)
    jobs = scheme_jobs(settings["drafts"], settings["is_params"])
    rows: dict[str, list[dict]] = {}
    for dataset in args.datasets:
        prompts = common.load_dataset_prompts(pair, dataset, settings["prompts"], source=args.data_source,
                                              max_chars=settings["max_chars"])
        rows[dataset] = []
        bar = tqdm(prompts, desc=f"acceptance {dataset}", unit="prompt")
        for prompt in bar:
            rows[dataset] += _prompt_rows(args, pair, prompt, settings, jobs, prompt_table, table)
    return {"args": vars(args), "settings": settings, "rows": rows, "pair": pair.description,
            "label": common.pair_label(pair, args.draft_temperature), "jobs": jobs}


def _prompt_rows(args, pair, prompt, settings, jobs, prompt_table, table) -> list[dict]:
    base = {"preset": args.preset, "dataset": prompt.dataset, "prompt": prompt.tag, "seed": args.seed,
            "continuation": args.continuation, "draft_temperature": args.draft_temperature,
            "target_temperature": args.target_temperature}
    seed = common.derived_seed(args.seed, prompt.tag)
    cache = {}

    def distributions():
        if "d" not in cache:
            reference = None
            if args.continuation == "reference":
                reference = _reference_ids(pair, prompt)
            cache["d"] = collect_distributions(
                pair, prompt.ids, positions=settings["positions"], draft_temperature=args.draft_temperature,
                target_temperature=args.target_temperature, continuation=reference, seed=seed)
        return cache["d"]

    def prompt_values():
        _, _, cont = distributions()
        text = pair.tokenizer.decode(cont) if pair.tokenizer is not None else " ".join(map(str, cont))
        return {"num_positions": len(cont), "continuation": text}

    info = prompt_table.compute({**base, "positions": settings["positions"]}, prompt_values)
    rows = []
    for position in range(int(info["num_positions"])):
        for scheme, k, params in jobs:
            config = {**base, "position": position, "scheme": scheme, "num_drafts": k, "params": params}

            def values(position=position, scheme=scheme, k=k, params=params):
                draft, target, _ = distributions()
                start = time.perf_counter()
                value = token_acceptance(scheme, draft=draft[position], target=target[position],
                                         num_drafts=k, params=params)
                return {"acceptance": value, "time_ms": 1e3 * (time.perf_counter() - start)}

            rows.append(table.compute(config, values))
    return rows


def _reference_ids(pair, prompt) -> list[int]:
    if pair.tokenizer is None:  # tiny: ids from the reference text's bytes
        return [b % pair.vocab_size for b in prompt.reference.encode("utf-8")]
    return pair.tokenizer(" " + prompt.reference, add_special_tokens=False)["input_ids"]


# -- report --------------------------------------------------------------------------------------
def summarize(summary: dict) -> dict:
    """dataset -> scheme -> K -> ``{"mean", "se", "n", "time_ms"}``."""
    out = {}
    for dataset, rows in summary["rows"].items():
        out[dataset] = {}
        for scheme, k, _ in summary["jobs"]:
            sel = [r for r in rows if r["scheme"] == scheme and r["num_drafts"] == k]
            mean, se, n = mean_se(r["acceptance"] for r in sel)
            out[dataset].setdefault(scheme, {})[k] = {
                "mean": mean, "se": se, "n": n,
                "time_ms": float(np.median([r["time_ms"] for r in sel])) if sel else float("nan"),
            }
    return out


def check_ordering(stats: dict, drafts) -> list[tuple[str, int, bool, str]]:
    """Goal (c): ``(dataset, K, ok, detail)`` for optimal >= IS >= SpecTr, SpecInfer (means)."""
    checks = []
    tol = 1e-12
    for dataset, by_scheme in stats.items():
        for k in drafts:
            m = {s: by_scheme[s][k]["mean"] for s in MULTI}
            ok = m["optimal"] >= m["is"] - tol and m["is"] >= max(m["spectr"], m["specinfer"]) - tol
            detail = " ".join(f"{s}={m[s]:.4f}" for s in MULTI)
            checks.append((dataset, k, bool(ok), detail))
    return checks


def report_acceptance(summary: dict) -> dict:
    """Print Table 3 next to the paper's, the goal check; write JSON and HTML. Returns the stats."""
    stats = summarize(summary)
    drafts = summary["settings"]["drafts"]
    label = summary["label"]
    print(f"\nModel pair: {summary['pair']}")
    for dataset, by_scheme in stats.items():
        header = ["scheme"]
        for k in drafts:
            header += [f"K={k} ours", f"K={k} paper"]
        body = []
        for scheme in SCHEMES:
            cells = [scheme]
            for k in drafts:
                key = 1 if scheme == "single" else k
                st = by_scheme[scheme][key]
                cells.append(common.fmt(st["mean"], st["se"], 4))
                cells.append(common.fmt(paper.paper_value(paper.TABLE3_ACCEPTANCE, dataset, scheme, k), digits=4))
            body.append(cells)
        n = by_scheme["optimal"][drafts[0]]["n"]
        common.print_block(
            f"Table 3: token-level acceptance, {dataset} ({n} positions; mean ± s.e. over positions)",
            common.format_table(header, body),
            [f"ours = {label}; paper = {paper.PAIR}, {paper.CITATION}",
             "single = one draft (K = 1), repeated in every column; the paper's table has no such row",
             "paper: no value for this dataset" if dataset not in paper.TABLE3_ACCEPTANCE else "",
             common.ORDERING_NOTE],
        )
    timing = [[s, *[f"{stats[d][s][1 if s == 'single' else k]['time_ms']:.2f}" for d in stats for k in drafts]]
              for s in SCHEMES]
    common.print_block(
        "Token-level compute per position (median ms; exact acceptance incl. building the scheme)",
        common.format_table(["scheme", *[f"{d} K={k}" for d in stats for k in drafts]], timing),
    )
    checks = check_ordering(stats, drafts)
    print("\n== Goal (c): token-level acceptance optimal >= IS >= SpecTr, SpecInfer on real distributions")
    for dataset, k, ok, detail in checks:
        print(f"   {dataset:<6} K={k}: {'PASS' if ok else 'FAIL'}  ({detail})")
    out = Path(summary["args"]["out"])
    common.write_json(out / "acceptance.json", {
        "model_pair": summary["pair"], "label": label, "settings": summary["settings"],
        "stats": stats, "paper": paper.TABLE3_ACCEPTANCE,
        "goal_c": [{"dataset": d, "K": k, "pass": ok, "detail": det} for d, k, ok, det in checks],
    })
    common.write_html(out / "acceptance.html", f"Token-level acceptance ({label})", [_figure(stats, drafts, label)])
    print(f"\nwrote {out / 'acceptance.csv'}, {out / 'acceptance.json'}, {out / 'acceptance.html'}")
    return {"stats": stats, "goal_c": checks}


def _figure(stats, drafts, label):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(stats), subplot_titles=list(stats), shared_yaxes=True)
    for col, (dataset, by_scheme) in enumerate(stats.items(), start=1):
        for i, scheme in enumerate(SCHEMES):
            ks = [1 if scheme == "single" else k for k in drafts]
            fig.add_trace(go.Bar(
                name=scheme, x=[f"K={k}" for k in drafts], y=[by_scheme[scheme][k]["mean"] for k in ks],
                error_y=dict(type="data", array=[by_scheme[scheme][k]["se"] for k in ks]),
                legendgroup=scheme, showlegend=col == 1, marker_color=_COLORS[i],
            ), row=1, col=col)
    fig.update_layout(barmode="group", title=f"Token-level acceptance, mean ± s.e. over positions: {label}",
                      yaxis_title="P(accept)")
    return fig


_COLORS = ["#222222", "#d62728", "#1f77b4", "#2ca02c", "#999999"]
