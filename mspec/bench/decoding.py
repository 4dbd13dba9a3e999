"""Block efficiency, token rate and output quality of live multi-draft decoding (Tables 1, 2, 4-6, Figures 3, 4).

Every generation is one row of ``decoding.csv``: a prompt, a seed and a method
(``autoregressive``, ``single`` or a multi-draft scheme with K drafts of length L), run
with :func:`mspec.decoding.speculative_generate` / :func:`~mspec.decoding.autoregressive_generate`.
A row is written as soon as its generation finishes and keyed by its full configuration,
so a rerun skips finished rows, and experiments share rows (e.g. the single-draft and
autoregressive baselines). Experiments (``--only`` picks some):

* ``drafts`` (Table 1): block efficiency vs K (identical drafts at ``--draft-temperature``);
* ``temperature`` (Figure 3; Tables 5, 6): K = 2 identical drafts vs draft temperature, on
  every dataset, with ROUGE-L (XSum, Dolly) / BLEU (WMT) of the outputs;
* ``nonidentical`` (Figure 4): first draft at 1.2, second draft temperature varied;
* ``topk`` (Table 4): top-k sampling for draft and target, K = 2, 3;
* ``truncation`` (Table 2): IS with alphabet 10/20/40/50 (s = 5) and s = 5/10/15 (alphabet 40).

Reported: mean ± standard error over (prompt, seed) generations of the block efficiency
(tokens per target call), of the token-rate improvement over single-draft decoding
(paired by prompt and seed), and of the quality metric; where the time of a round goes
(draft, target, selection, cache); and the performance goals (a) selection < 10% of a
target forward pass for K <= 4, (b) multi-draft block efficiency > single-draft.
Single-draft and autoregressive baselines run in the same sweep. Summary:
``decoding.json``; figures: ``decoding.html``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from . import common, paper
from .results import ResultTable, RowBudget, mean_se

EXPERIMENTS = ("drafts", "temperature", "nonidentical", "topk", "truncation")
#: multi-draft schemes compared: the exactly optimal one (beyond the paper) and the paper's three
SCHEMES = ("optimal", "is", "spectr", "specinfer")
#: schemes that accept non-identical drafts
NONIDENTICAL_SCHEMES = ("is", "specinfer")
AUTOREGRESSIVE = "autoregressive"

CONFIG_FIELDS = ["preset", "dataset", "prompt", "seed", "method", "num_drafts", "draft_length",
                 "draft_temperatures", "target_temperature", "top_k", "params", "max_new_tokens"]
VALUE_FIELDS = ["tokens", "target_calls", "block_efficiency", "decode_s", "tokens_per_s", "draft_s",
                "target_s", "selection_s", "cache_s", "alive", "reached", "metric", "quality", "text"]


def add_arguments(parser) -> None:
    common.add_common_arguments(parser)
    add_decoding_arguments(parser)


def add_decoding_arguments(parser) -> None:
    """Options of the sequence-level experiments."""
    group = parser.add_argument_group("live decoding (Tables 1, 2, 4-6, Figures 3, 4)")
    group.add_argument("--only", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS),
                       help="experiments to run (default: all)")
    group.add_argument("--main-dataset", default="dolly", choices=["xsum", "dolly", "wmt"],
                       help="dataset of Tables 1, 2, 4 and Figure 4 (the paper: dolly)")
    group.add_argument("--gen-prompts", type=int, default=None, help="prompts per dataset (default 4, quick 1)")
    group.add_argument("--seeds", type=int, default=None, help="seeds per prompt (default 3, quick 1)")
    group.add_argument("--max-new-tokens", type=int, default=None, help="tokens per generation (default 48, quick 16)")
    group.add_argument("--draft-length", type=int, default=paper.DRAFT_LENGTH, help="L (default 5, as the paper)")
    group.add_argument("--drafts-k", type=int, nargs="+", default=None,
                       help="Table 1 K values (default 2..6, quick 2 4)")
    group.add_argument("--temperatures", type=float, nargs="+", default=None,
                       help="draft temperatures of Figures 3, 4 (default 1.2 1.4 1.6 2.0 2.4, quick 1.2 2.0)")
    group.add_argument("--first-temperature", type=float, default=1.2, help="Figure 4: first draft's temperature")
    group.add_argument("--top-k", type=int, nargs="+", default=None,
                       help="Table 4 top-k values (default 10 5, quick 10)")
    group.add_argument("--topk-drafts", type=int, nargs="+", default=None,
                       help="Table 4 K values (default 2 3, quick 2)")
    group.add_argument("--alphabets", type=int, nargs="+", default=None,
                       help="Table 2 IS alphabet sizes at s=5 (default 10 20 40 50, quick 10 40)")
    group.add_argument("--lp-sizes", type=int, nargs="+", default=None,
                       help="Table 2 IS LP sizes s at alphabet 40 (default 5 10 15, quick 5 15)")


def run(args, *, on_row=None) -> int:
    """Command entry point: returns 0, or 3 when ``--max-rows`` stopped the sweep."""
    return common.run_sweep(args, run_decoding, report_decoding, on_row=on_row)


def decoding_settings(args) -> dict:
    """The resolved settings of a run (``--quick`` defaults filled in)."""
    q = args.quick
    return {
        "prompts": common.quick_default(args.gen_prompts, q, 4, 1),
        "seeds": common.quick_default(args.seeds, q, 3, 1),
        "max_new_tokens": common.quick_default(args.max_new_tokens, q, 48, 16),
        "max_chars": common.quick_default(args.max_chars, q, 1000, 400),
        "draft_length": args.draft_length,
        "drafts_k": common.quick_default(args.drafts_k, q, [2, 3, 4, 5, 6], [2, 4]),
        "temperatures": common.quick_default(args.temperatures, q, list(paper.TEMPERATURES), [1.2, 2.0]),
        "top_k": common.quick_default(args.top_k, q, [10, 5], [10]),
        "topk_drafts": common.quick_default(args.topk_drafts, q, [2, 3], [2]),
        "alphabets": common.quick_default(args.alphabets, q, [10, 20, 40, 50], [10, 40]),
        "lp_sizes": common.quick_default(args.lp_sizes, q, [5, 10, 15], [5, 15]),
    }


# -- one generation ------------------------------------------------------------------------------
def generate_row(pair, prompt: common.Prompt, config: dict) -> dict:
    """Run the generation ``config`` describes on ``prompt``; return the row's values.

    The torch generator is seeded from ``(config["seed"], prompt.tag)``, the same for every
    method, so methods see common random numbers where they consume them alike.
    """
    import torch

    from ..decoding import autoregressive_generate, speculative_generate

    gen = torch.Generator().manual_seed(common.derived_seed(config["seed"], prompt.tag))
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
    # drafts offered at each position of a round, summed over rounds, and how many rounds
    # reached that position (empty lists for autoregressive sampling)
    alive = [0] * (config["draft_length"] if result.rounds and result.rounds[0].alive else 0)
    reached = list(alive)
    for r in result.rounds:
        for j, a in enumerate(r.alive):
            alive[j] += a
            reached[j] += 1
    totals = {part: sum(getattr(r, f"{part}_time") for r in result.rounds)
              for part in ("draft", "target", "selection", "cache")}
    text, metric, quality = "", "", float("nan")
    if pair.tokenizer is not None:
        from ..metrics import score

        text = pair.tokenizer.decode(result.token_ids, skip_special_tokens=True).strip()
        metric, quality = score(prompt.dataset, [text], [prompt.reference])
        if metric == "bleu":
            quality /= 100.0  # sacrebleu's 0-100 -> the paper's 0-1 scale
    return {
        "tokens": len(result.token_ids), "target_calls": result.num_target_calls,
        "block_efficiency": result.block_efficiency, "decode_s": decode_s,
        "tokens_per_s": len(result.token_ids) / decode_s if decode_s > 0 else float("nan"),
        **{f"{part}_s": value for part, value in totals.items()},
        "alive": alive, "reached": reached, "metric": metric, "quality": quality, "text": text,
    }


# -- the sweep -----------------------------------------------------------------------------------
class Sweep:
    """Builds configurations and computes (or reads back) their rows.

    Args:
        args: parsed command-line options.
        pair: the model pair.
        table: the :class:`ResultTable` of generations.
        settings: :func:`decoding_settings`.
    """

    def __init__(self, args, pair, table: ResultTable, settings: dict):
        self.args, self.pair, self.table, self.settings = args, pair, table, settings
        self._prompts: dict[str, list[common.Prompt]] = {}

    def prompts(self, dataset: str) -> list[common.Prompt]:
        if dataset not in self._prompts:
            self._prompts[dataset] = common.load_dataset_prompts(
                self.pair, dataset, self.settings["prompts"], source=self.args.data_source,
                max_chars=self.settings["max_chars"])
        return self._prompts[dataset]

    def config(self, prompt, seed, method, *, temps=None, top_k=None, params=None) -> dict:
        """Row configuration; ``temps`` is the list of K draft temperatures."""
        spec = method != AUTOREGRESSIVE
        return {
            "preset": self.args.preset, "dataset": prompt.dataset, "prompt": prompt.tag, "seed": seed,
            "method": method, "num_drafts": len(temps) if spec else 0,
            "draft_length": self.settings["draft_length"] if spec else 0,
            "draft_temperatures": [float(t) for t in temps] if spec else None,
            "target_temperature": self.args.target_temperature, "top_k": top_k,
            "params": dict(params or {}), "max_new_tokens": self.settings["max_new_tokens"],
        }

    def jobs(self, dataset, variants) -> list[tuple[common.Prompt, dict]]:
        """``(prompt, config)`` for every prompt, seed and variant ``(method, kwargs)``."""
        out = []
        for prompt in self.prompts(dataset):
            for seed in range(self.args.seed, self.args.seed + self.settings["seeds"]):
                for method, kwargs in variants:
                    out.append((prompt, self.config(prompt, seed, method, **kwargs)))
        return out

    def compute(self, name: str, jobs) -> list[dict]:
        """Rows of ``jobs`` (stored ones read back), with a progress bar."""
        rows = []
        with tqdm(jobs, desc=name, unit="gen") as bar:
            for prompt, config in bar:
                bar.set_postfix_str(f"{config['dataset']} {config['method']} K={config['num_drafts']}", refresh=False)
                rows.append(self.table.compute(config, lambda p=prompt, c=config: generate_row(self.pair, p, c)))
        return rows


def run_decoding(args, pair, budget: RowBudget) -> dict:
    """Compute every experiment's rows; return the summary for :func:`report_decoding`."""
    settings = decoding_settings(args)
    table = ResultTable(Path(args.out) / "decoding.csv", config_fields=CONFIG_FIELDS,
                        value_fields=VALUE_FIELDS, budget=budget)
    sweep = Sweep(args, pair, table, settings)
    t = args.draft_temperature
    main = args.main_dataset
    rows = {}
    for name in [e for e in EXPERIMENTS if e in args.only]:
        if name == "drafts":
            variants = [(AUTOREGRESSIVE, {}), ("single", {"temps": [t]})]
            variants += [(s, {"temps": [t] * k}) for k in settings["drafts_k"] for s in SCHEMES]
            jobs = sweep.jobs(main, variants)
        elif name == "temperature":
            jobs = []
            for dataset in args.datasets:
                variants = [(AUTOREGRESSIVE, {})]
                for temp in settings["temperatures"]:
                    variants += [("single", {"temps": [temp]})] + [(s, {"temps": [temp] * 2}) for s in SCHEMES]
                jobs += sweep.jobs(dataset, variants)
        elif name == "nonidentical":
            first = args.first_temperature
            variants = [("single", {"temps": [first]})]
            variants += [(s, {"temps": [first, temp]})
                         for temp in settings["temperatures"] for s in NONIDENTICAL_SCHEMES]
            jobs = sweep.jobs(main, variants)
        elif name == "topk":
            variants = []
            for top_k in settings["top_k"]:
                variants += [(AUTOREGRESSIVE, {"top_k": top_k}), ("single", {"temps": [t], "top_k": top_k})]
                variants += [(s, {"temps": [t] * k, "top_k": top_k}) for k in settings["topk_drafts"] for s in SCHEMES]
            jobs = sweep.jobs(main, variants)
        else:  # truncation
            params = [{"s": 5, "alphabet": a} for a in settings["alphabets"] if a >= 5]
            params += [{"s": s, "alphabet": 40} for s in settings["lp_sizes"] if s <= 40]
            unique = [p for i, p in enumerate(params) if p not in params[:i]]
            variants = [("single", {"temps": [t]})] + [("is", {"temps": [t, t], "params": p}) for p in unique]
            jobs = sweep.jobs(main, variants)
        rows[name] = sweep.compute(name, jobs)
    return {"args": vars(args), "settings": settings, "rows": rows, "pair": pair.description,
            "label": common.pair_label(pair, t),
            "swept_label": common.pair_label(pair, None), "default_pair": args.preset == _default_preset()}


def _default_preset() -> str:
    from ..models import DEFAULT_PRESET

    return DEFAULT_PRESET


# -- statistics ----------------------------------------------------------------------------------
def pick(rows, **where) -> list[dict]:
    """Rows matching every ``name=value`` (``draft_temperatures`` compared as lists)."""
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def stat(rows, field: str) -> dict:
    mean, se, n = mean_se(float(r[field]) for r in rows)
    return {"mean": mean, "se": se, "n": n}


def improvement(rows, baseline_rows) -> dict:
    """Token-rate improvement over the baseline in %, paired by (dataset, prompt, seed)."""
    base = {(r["dataset"], r["prompt"], r["seed"]): r["tokens_per_s"] for r in baseline_rows}
    ratios = [100.0 * (r["tokens_per_s"] / base[key] - 1.0)
              for r in rows if (key := (r["dataset"], r["prompt"], r["seed"])) in base]
    mean, se, n = mean_se(ratios)
    return {"mean": mean, "se": se, "n": n}


def method_stats(rows, baseline_rows) -> dict:
    """Block efficiency, token rate, improvement over the baseline and quality of ``rows``."""
    return {"block_efficiency": stat(rows, "block_efficiency"), "tokens_per_s": stat(rows, "tokens_per_s"),
            "improvement_pct": improvement(rows, baseline_rows), "quality": stat(rows, "quality")}


def alive_per_position(rows) -> list[float]:
    """Mean number of drafts offered at each position of a round (over the rounds that reach
    it), pooled over ``rows``."""
    def as_list(value):
        return json.loads(value) if isinstance(value, str) else list(value)

    alive = np.sum([as_list(r["alive"]) for r in rows], axis=0) if rows else np.zeros(0)
    reached = np.sum([as_list(r["reached"]) for r in rows], axis=0) if rows else np.zeros(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return [float(v) for v in alive / reached]


def summarize(summary: dict) -> dict:
    """Per-experiment statistics (nested dicts, JSON-ready)."""
    s, t, rows = summary["settings"], summary["args"]["draft_temperature"], summary["rows"]
    out = {}
    if "drafts" in rows:
        r = rows["drafts"]
        single = pick(r, method="single")
        out["drafts"] = {
            "single": method_stats(single, single),
            AUTOREGRESSIVE: method_stats(pick(r, method=AUTOREGRESSIVE), single),
            **{scheme: {k: method_stats(pick(r, method=scheme, num_drafts=k), single) for k in s["drafts_k"]}
               for scheme in SCHEMES},
            "alive": {scheme: {k: alive_per_position(pick(r, method=scheme, num_drafts=k)) for k in s["drafts_k"]}
                      for scheme in SCHEMES},
        }
    if "temperature" in rows:
        r = rows["temperature"]
        out["temperature"] = {}
        for dataset in summary["args"]["datasets"]:
            d = pick(r, dataset=dataset)
            by = {AUTOREGRESSIVE: method_stats(pick(d, method=AUTOREGRESSIVE), [])}
            for temp in s["temperatures"]:
                single = pick(d, method="single", draft_temperatures=[temp])
                by[temp] = {m: method_stats(pick(d, method=m, draft_temperatures=[temp] * (1 if m == "single" else 2)),
                                            single) for m in ("single", *SCHEMES)}
            out["temperature"][dataset] = by
    if "nonidentical" in rows:
        r = rows["nonidentical"]
        first = summary["args"]["first_temperature"]
        single = pick(r, method="single")
        out["nonidentical"] = {"single": method_stats(single, single)}
        for temp in s["temperatures"]:
            out["nonidentical"][temp] = {
                m: method_stats(pick(r, method=m, draft_temperatures=[first, float(temp)]), single)
                for m in NONIDENTICAL_SCHEMES}
    if "topk" in rows:
        r = rows["topk"]
        out["topk"] = {}
        for top_k in s["top_k"]:
            d = pick(r, top_k=top_k)
            single = pick(d, method="single")
            out["topk"][top_k] = {"single": method_stats(single, single),
                                  AUTOREGRESSIVE: method_stats(pick(d, method=AUTOREGRESSIVE), single)}
            for k in s["topk_drafts"]:
                out["topk"][top_k][k] = {m: method_stats(pick(d, method=m, num_drafts=k), single) for m in SCHEMES}
    if "truncation" in rows:
        r = rows["truncation"]
        single = pick(r, method="single")
        out["truncation"] = {"single": method_stats(single, single)}
        for row in pick(r, method="is"):
            label = f"s={row['params']['s']},alphabet={row['params']['alphabet']}"
            if label not in out["truncation"]:
                out["truncation"][label] = method_stats(pick(r, method="is", params=row["params"]), single)
    out["timing"] = timing(summary)
    return out


def timing(summary: dict) -> dict:
    """Mean seconds per round (target call) in each part, per method and K, over all rows."""
    groups: dict[str, list[dict]] = {}
    seen = set()
    for rows in summary["rows"].values():
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


# -- report --------------------------------------------------------------------------------------
def _be(st) -> str:
    return common.fmt(st["block_efficiency"]["mean"], st["block_efficiency"]["se"])


def _pct(st) -> str:
    imp = st["improvement_pct"]
    return "-" if imp["n"] == 0 else common.fmt(imp["mean"], imp["se"], 1) + "%"


def _q(st, digits=3) -> str:
    return common.fmt(st["quality"]["mean"], st["quality"]["se"], digits)


def report_decoding(summary: dict) -> dict:
    """Print every table next to the paper's, where the time goes, and goals (a), (b).

    Writes ``decoding.json`` and ``decoding.html``. Returns the statistics and goal checks.
    """
    stats = summarize(summary)
    s = summary["settings"]
    label = summary["label"]
    notes = [f"ours = {label}; paper = {paper.PAIR}, {paper.CITATION}", common.ORDERING_NOTE]
    args = summary["args"]
    print(f"\nModel pair: {summary['pair']}")
    print(f"Settings: L = {s['draft_length']}, {s['prompts']} prompt(s) x {s['seeds']} seed(s) per dataset, "
          f"{s['max_new_tokens']} new tokens, target temperature {args['target_temperature']}; "
          "mean ± s.e. over (prompt, seed) generations")
    if "drafts" in stats:
        _print_drafts(stats["drafts"], s, args, notes)
    swept = [f"ours = {summary['swept_label']} (temperatures as in the columns); paper = {paper.PAIR}, "
             f"{paper.CITATION}", common.ORDERING_NOTE]
    if "temperature" in stats:
        _print_temperature(stats["temperature"], s, swept)
    if "nonidentical" in stats:
        _print_nonidentical(stats["nonidentical"], s, args, swept)
    if "topk" in stats:
        _print_topk(stats["topk"], s, args, notes)
    if "truncation" in stats:
        _print_truncation(stats["truncation"], args, notes)
    _print_timing(stats["timing"])
    goals = check_goals(stats, s)
    _print_goals(goals, summary["default_pair"], args["preset"])
    out = Path(args["out"])
    common.write_json(out / "decoding.json", {"model_pair": summary["pair"], "label": label, "settings": s,
                                              "stats": stats, "goals": goals})
    common.write_html(out / "decoding.html", f"Live multi-draft decoding ({label})", _figures(stats, s, label))
    print(f"\nwrote {out / 'decoding.csv'}, {out / 'decoding.json'}, {out / 'decoding.html'}")
    return {"stats": stats, "goals": goals}


def _print_drafts(st, s, args, notes):
    ks = s["drafts_k"]
    header = ["method"] + [c for k in ks for c in (f"K={k} ours", f"K={k} paper")]
    body = []
    for scheme in SCHEMES:
        row = [scheme]
        for k in ks:
            row += [_be(st[scheme][k]), common.fmt(paper.paper_value(paper.TABLE1_BLOCK_EFFICIENCY, scheme, k))]
        body.append(row)
    body.append(["single (K=1)"] + [_be(st["single"]), "-"] * len(ks))
    body.append(["autoregressive"] + [_be(st[AUTOREGRESSIVE]), "-"] * len(ks))
    common.print_block(f"Table 1: block efficiency vs K, {args['main_dataset']}, identical drafts at "
                       f"T={args['draft_temperature']:g}", common.format_table(header, body), notes)
    body = [[scheme] + [_pct(st[scheme][k]) for k in ks] for scheme in SCHEMES]
    body.append(["autoregressive"] + [_pct(st[AUTOREGRESSIVE])] * len(ks))
    common.print_block("Table 1 (token rate): improvement over single-draft decoding, paired by prompt and seed",
                       common.format_table(["method"] + [f"K={k}" for k in ks], body),
                       ["the paper gives no token rates for Table 1"])
    body = [[scheme, str(k)] + [common.fmt(a, digits=2) for a in st["alive"][scheme][k]] for k in ks for scheme in SCHEMES]
    common.print_block("Drafts alive per position (Table 1 runs): mean drafts offered to the scheme at position j of a "
                       "round, over the rounds that reach j",
                       common.format_table(["method", "K"] + [f"j={j + 1}" for j in range(s["draft_length"])], body),
                       ["more drafts alive after an acceptance means more chances at the next position"])


def _print_temperature(st, s, notes):
    temps = s["temperatures"]
    for dataset, by in st.items():
        body = [[m] + [f"{_be(by[t][m])} ({_pct(by[t][m])})" if m != "single" else _be(by[t][m]) for t in temps]
                for m in ("single", *SCHEMES)]
        common.print_block(
            f"Figure 3: block efficiency (token-rate improvement over single-draft) vs draft temperature, "
            f"{dataset}, K = 2 identical drafts",
            common.format_table(["method"] + [f"T={t:g}" for t in temps], body),
            ["the paper shows Figure 3 as a plot only (no numbers to print)", notes[0]])
    for dataset, by in st.items():
        ptable = paper.QUALITY_TABLES.get(dataset)
        metric = "BLEU (0-1, sentence level)" if dataset == "wmt" else "ROUGE-L"
        header = ["method"] + [c for t in temps for c in (f"T={t:g} ours", f"T={t:g} paper")]
        body = []
        for m in ("is", "single", "specinfer", "spectr"):
            row = [m]
            for t in temps:
                idx = paper.TEMPERATURES.index(t) if t in paper.TEMPERATURES else None
                theirs = ptable[m][idx] if ptable is not None and idx is not None else None
                row += [_q(by[t][m]), common.fmt(theirs, digits=3)]
            body.append(row)
        body.append([AUTOREGRESSIVE] + [_q(by[AUTOREGRESSIVE]), "-"] * len(temps))
        table_name = {"xsum": "Table 5", "wmt": "Table 6"}.get(dataset, "quality (no paper table)")
        common.print_block(
            f"{table_name}: {metric} of the outputs vs draft temperature, {dataset}",
            common.format_table(header, body),
            ["every scheme is lossless: quality must not depend on the scheme or temperature, only noise "
             "differs (compare with autoregressive)", notes[0]])


def _print_nonidentical(st, s, args, notes):
    temps = s["temperatures"]
    body = [[m] + [f"{_be(st[t][m])} ({_pct(st[t][m])})" for t in temps] for m in NONIDENTICAL_SCHEMES]
    body.append([f"single (T={args['first_temperature']:g})"] + [_be(st["single"])] * len(temps))
    common.print_block(
        f"Figure 4: block efficiency (token-rate improvement) with non-identical drafts, first draft "
        f"T={args['first_temperature']:g}, second varied, {args['main_dataset']}",
        common.format_table(["method"] + [f"T2={t:g}" for t in temps], body),
        ["SpecTr needs identical drafts and is not run; the paper shows Figure 4 as a plot only", notes[0]])


def _print_topk(st, s, args, notes):
    header = ["top-k", "K", "method", "ours", "paper", "ours / IS", "paper / IS"]
    body = []
    for top_k, by in st.items():
        for k in s["topk_drafts"]:
            ours_is = by[k]["is"]["block_efficiency"]["mean"]
            theirs_is = paper.paper_value(paper.TABLE4_TOP_K, top_k, k, "is")
            for m in SCHEMES:
                theirs = paper.paper_value(paper.TABLE4_TOP_K, top_k, k, m)
                ratio = by[k][m]["block_efficiency"]["mean"] / ours_is
                body.append([top_k, k, m, _be(by[k][m]), common.fmt(theirs), f"{ratio:.0%}",
                             f"{theirs[0] / theirs_is[0]:.0%}" if theirs else "-"])
        body.append([top_k, 1, "single", _be(by["single"]), "-", "", ""])
    common.print_block(
        f"Table 4: block efficiency with top-k sampling, {args['main_dataset']}",
        common.format_table(header, body),
        [f"deviation: the paper runs both models at temperature 1.0; our drafts run at "
         f"T={args['draft_temperature']:g} (with the same-weights draft, T = 1 would make draft = target)", *notes])


def _print_truncation(st, args, notes):
    header = ["IS setting", "ours BE", "ours rate vs single", "paper BE", "paper rate vs single"]
    body = []
    for label, value in st.items():
        if label == "single":
            continue
        s_, a_ = (int(x.split("=")[1]) for x in label.split(","))
        theirs = paper.TABLE2_ALPHABET.get(a_) if s_ == 5 else paper.TABLE2_S.get(s_) if a_ == 40 else None
        body.append([label, _be(value), _pct(value), common.fmt(theirs[0]) if theirs else "-",
                     common.fmt(theirs[1], digits=2) + "%" if theirs else "-"])
    body.append(["single (K=1)", _be(st["single"]), "", "-", ""])
    common.print_block(f"Table 2: IS truncation (alphabet at s=5, LP size s at alphabet 40), K = 2, "
                       f"{args['main_dataset']}", common.format_table(header, body), notes)


def _print_timing(timing_stats):
    header = ["method", "rounds", "draft ms", "target ms", "selection ms", "cache ms", "selection / target"]
    body = [[label, t["rounds"], f"{1e3 * t['draft']:.1f}", f"{1e3 * t['target']:.1f}", f"{1e3 * t['selection']:.2f}",
             f"{1e3 * t['cache']:.2f}", f"{t['selection_over_target']:.1%}"]
            for label, t in sorted(timing_stats.items(), key=lambda kv: (kv[1]["method"], kv[1]["num_drafts"]))]
    common.print_block("Where the time goes: mean per round (one target call), all generations of this run",
                       common.format_table(header, body),
                       ["draft = K-row draft forward passes and sampling (L steps); target = one K-row forward "
                        "pass over L+1 positions; selection = token-level scheme at every position reached; "
                        "cache = KV-cache expand/select/crop"])


def check_goals(stats: dict, s: dict) -> dict:
    """Goals (a) and (b), each a list of ``{"what", "pass", "detail"}``."""
    goals = {"a": [], "b": []}
    for label, t in stats["timing"].items():
        if t["method"] in SCHEMES and t["num_drafts"] <= 4:
            ratio = t["selection_over_target"]
            goals["a"].append({"what": label, "pass": bool(ratio < 0.10),
                               "detail": f"selection {1e3 * t['selection']:.2f} ms = {ratio:.1%} of a target pass "
                                         f"({1e3 * t['target']:.1f} ms)"})
    if "drafts" in stats:
        single = stats["drafts"]["single"]["block_efficiency"]
        for scheme in SCHEMES:
            for k in s["drafts_k"]:
                be = stats["drafts"][scheme][k]["block_efficiency"]
                goals["b"].append({"what": f"{scheme} K={k}", "pass": bool(be["mean"] > single["mean"]), "n": be["n"],
                                   "detail": f"{common.fmt(be['mean'], be['se'])} vs single "
                                             f"{common.fmt(single['mean'], single['se'])} "
                                             f"({be['n']} generations each)"})
    return goals


def _print_goals(goals, default_pair: bool, preset: str):
    where = "offline default" if default_pair else f"preset {preset!r}, not the offline default"
    print(f"\n== Goal (a): per round, selection time < 10% of one target forward pass for K <= 4 ({where})")
    for g in sorted(goals["a"], key=lambda g: g["what"]):
        print(f"   {g['what']:<14} {'PASS' if g['pass'] else 'FAIL'}  {g['detail']}")
    print(f"== Goal (b): multi-draft block efficiency > single-draft at the same L ({where}, Table 1 runs)")
    if not goals["b"]:
        print("   not checked: run the 'drafts' experiment")
    elif min(g["n"] for g in goals["b"]) < 6:
        print("   note: fewer than 6 generations per point; block efficiency of a short generation is very noisy, "
              "so this check is indicative only (run without --quick, or raise --gen-prompts / --seeds)")
    for g in goals["b"]:
        print(f"   {g['what']:<14} {'PASS' if g['pass'] else 'FAIL'}  {g['detail']}")


# -- figures -------------------------------------------------------------------------------------
_COLORS = {"optimal": "#8e44ad", "is": "#d62728", "spectr": "#1f77b4", "specinfer": "#2ca02c", "single": "#999999",
           AUTOREGRESSIVE: "#222222"}


def _line(go, name, xs, sts, field="block_efficiency", **kw):
    return go.Scatter(name=name, x=xs, y=[st[field]["mean"] for st in sts], mode="lines+markers",
                      error_y=dict(type="data", array=[st[field]["se"] for st in sts]),
                      line=dict(color=_COLORS.get(name)), **kw)


def _figures(stats, s, label):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figs = []
    if "drafts" in stats:
        st, ks = stats["drafts"], s["drafts_k"]
        fig = go.Figure([_line(go, m, ks, [st[m][k] for k in ks]) for m in SCHEMES])
        fig.add_hline(y=st["single"]["block_efficiency"]["mean"], line_dash="dash", annotation_text="single draft")
        fig.update_layout(title=f"Table 1: block efficiency vs K ({label})", xaxis_title="K",
                          yaxis_title="tokens per target call")
        figs.append(fig)
    if "temperature" in stats:
        temps, by_ds = s["temperatures"], stats["temperature"]
        fig = make_subplots(rows=2, cols=len(by_ds), subplot_titles=[*by_ds, *[f"{d}: quality" for d in by_ds]])
        for col, (dataset, by) in enumerate(by_ds.items(), start=1):
            for m in ("single", *SCHEMES):
                fig.add_trace(_line(go, m, temps, [by[t][m] for t in temps], legendgroup=m, showlegend=col == 1),
                              row=1, col=col)
                fig.add_trace(_line(go, m, temps, [by[t][m] for t in temps], "quality", legendgroup=m,
                                    showlegend=False), row=2, col=col)
        fig.update_layout(title=f"Figure 3 / Tables 5, 6: K = 2 identical drafts vs draft temperature ({label})",
                          height=700)
        figs.append(fig)
    if "nonidentical" in stats:
        st, temps = stats["nonidentical"], s["temperatures"]
        fig = go.Figure([_line(go, m, temps, [st[t][m] for t in temps]) for m in NONIDENTICAL_SCHEMES])
        fig.add_hline(y=st["single"]["block_efficiency"]["mean"], line_dash="dash", annotation_text="single draft")
        fig.update_layout(title=f"Figure 4: non-identical drafts, second draft temperature varied ({label})",
                          xaxis_title="second draft temperature", yaxis_title="tokens per target call")
        figs.append(fig)
    if "topk" in stats:
        fig = go.Figure()
        for m in SCHEMES:
            xs, sts = [], []
            for top_k, by in stats["topk"].items():
                for k in s["topk_drafts"]:
                    xs.append(f"top-{top_k}, K={k}")
                    sts.append(by[k][m])
            fig.add_trace(go.Bar(name=m, x=xs, y=[x["block_efficiency"]["mean"] for x in sts], marker_color=_COLORS[m],
                                 error_y=dict(type="data", array=[x["block_efficiency"]["se"] for x in sts])))
        fig.update_layout(barmode="group", title=f"Table 4: top-k sampling ({label})",
                          yaxis_title="tokens per target call")
        figs.append(fig)
    if "truncation" in stats:
        items = [(k, v) for k, v in stats["truncation"].items()]
        fig = go.Figure(go.Bar(x=[k for k, _ in items], y=[v["block_efficiency"]["mean"] for _, v in items],
                               error_y=dict(type="data", array=[v["block_efficiency"]["se"] for _, v in items])))
        fig.update_layout(title=f"Table 2: IS truncation ({label})", yaxis_title="tokens per target call")
        figs.append(fig)
    timing_stats = stats["timing"]
    labels = sorted(timing_stats, key=lambda l: (timing_stats[l]["method"], timing_stats[l]["num_drafts"]))
    fig = go.Figure([go.Bar(name=part, x=labels, y=[1e3 * timing_stats[l][part] for l in labels])
                     for part in ("draft", "target", "selection", "cache")])
    fig.update_layout(barmode="stack", title=f"Time per round ({label})", yaxis_title="ms per target call")
    figs.append(fig)
    return figs
