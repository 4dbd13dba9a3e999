"""The tables, goals and figures of the live-decoding experiments (:mod:`~mspec_lab.experiments.live_decoding`).

Every table is printed next to the paper's numbers where the paper has them, with the
goals (a) selection < 10% of a target forward pass for K <= 4 and (b) multi-draft block
efficiency > single-draft; :func:`report_decoding` prints them all. Every number of ours is a
mean ± s.e. over (prompt, seed) generations, and the line under each table says over how
many (``n = 1``: no s.e., and the cell says so).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mspec_lab.experiments import paper
from mspec_lab.experiments.live_decoding import (AUTOREGRESSIVE, NONIDENTICAL_SCHEMES, TRUNCATION_ALPHABET, TRUNCATION_S, DecodingRun,
                            DecodingSettings, summarize_decoding)
from mspec_lab.experiments.report import (ORDERING_NOTE, SMOKE_TEST_LINE, fmt, format_table, print_block,
                                          print_smoke_banner, sample_note, smoke_test_fields, write_html, write_json)

__all__ = ["check_goals", "print_table1", "report_decoding"]

#: goal (a): selection takes less than this share of one target forward pass ...
SELECTION_SHARE_GOAL = 0.10
#: ... for K up to this
SELECTION_GOAL_MAX_K = 4
#: below this many generations per point, goal (b) is called indicative only (the block
#: efficiency of one short generation moves by tenths with one rejection more or less)
GENERATIONS_FOR_GOAL_B = 6


def _stat(st: dict, digits: int = 2, scale: float = 1.0, unit: str = "") -> str:
    """``st = {"mean", "se", "n"}`` as mean ± s.e. (times ``scale``, then ``unit``); ``"-"``
    without samples."""
    if st["n"] == 0:
        return "-"
    return fmt(scale * st["mean"], None if st["se"] is None else scale * st["se"], digits, n=st["n"], unit=unit)


def _be(st) -> str:
    return _stat(st["block_efficiency"])


def _pct(st) -> str:
    return _stat(st["improvement_pct"], 1, unit="%")


def _q(st, digits=3) -> str:
    return _stat(st["quality"], digits)


def _sizes(obj) -> list[int]:
    """The ``n`` of every ``{"mean", "se", "n"}`` inside the nested statistics ``obj`` (0: no
    samples, left out)."""
    if isinstance(obj, dict):
        if {"mean", "se", "n"} <= set(obj):
            return [obj["n"]] if obj["n"] else []
        return [n for value in obj.values() for n in _sizes(value)]
    if isinstance(obj, list):
        return [n for value in obj for n in _sizes(value)]
    return []


def _n_note(stats) -> str:
    """The line under a table: how many generations its means rest on."""
    return sample_note(_sizes(stats), "generations", over="(prompt x seed)")


def report_decoding(run: DecodingRun, out: str | Path | None = None) -> dict:
    """Print every table next to the paper's, where the time goes, and goals (a), (b); with
    ``out``, write ``decoding.json`` and ``decoding.html`` there.

    Returns:
        ``{"stats": summarize_decoding(run), "goals": check_goals(...)}``.
    """
    stats, s = summarize_decoding(run), run.settings
    notes = [f"ours = {run.label}; paper = {paper.PAIR}, {paper.CITATION}", ORDERING_NOTE]
    swept = [f"ours = {run.swept_label} (temperatures as in the columns); paper = {paper.PAIR}, {paper.CITATION}",
             ORDERING_NOTE]
    print_smoke_banner(s.smoke_test)
    print(f"\nModel pair: {run.pair}")
    print(f"Settings: L = {s.draft_length}, {s.prompts} prompt(s) x {s.seeds} seed(s) per dataset, "
          f"{s.max_new_tokens} new tokens, target temperature {s.target_temperature}; "
          "mean ± s.e. over (prompt, seed) generations")
    printers = {"drafts": lambda st: _print_drafts(st, s, notes),
                "temperature": lambda st: _print_temperature(st, s, swept),
                "nonidentical": lambda st: _print_nonidentical(st, s, swept),
                "topk": lambda st: _print_topk(st, s, notes), "truncation": lambda st: _print_truncation(st, s, notes)}
    for name, print_experiment in printers.items():
        if name in stats:
            print_experiment(stats[name])
    _print_timing(stats["timing"], s.smoke_test)
    goals = check_goals(stats, s)
    _print_goals(goals, run.preset, s.smoke_test)
    if out is not None:
        out = Path(out)
        write_json(out / "decoding.json", {**smoke_test_fields(s.smoke_test), "model_pair": run.pair,
                                           "label": run.label, "settings": dataclasses.asdict(s), "stats": stats,
                                           "goals": goals})
        write_html(out / "decoding.html", f"Live multi-draft decoding ({run.label})", figures(stats, s, run.label),
                   smoke_test=s.smoke_test)
        print(f"\nwrote {out / 'decoding.csv'}, {out / 'decoding.json'}, {out / 'decoding.html'}")
    return {"stats": stats, "goals": goals}


def print_table1(st: dict, s: DecodingSettings, notes=()) -> None:
    """Table 1 (``st = summarize_decoding(run)["drafts"]``): block efficiency vs K next to the paper's."""
    ks = s.drafts_k
    header = ["method"] + [c for k in ks for c in (f"K={k} ours", f"K={k} paper")]
    body = [[m] + [c for k in ks for c in (_be(st[m][k]), fmt(paper.paper_value(paper.TABLE1_BLOCK_EFFICIENCY, m, k)))]
            for m in paper.COMPARED_SCHEMES]
    body.append(["single (K=1)"] + [_be(st["single"]), "-"] * len(ks))
    body.append(["autoregressive"] + [_be(st[AUTOREGRESSIVE]), "-"] * len(ks))
    print_block(f"Table 1: block efficiency vs K, {s.main_dataset}, identical drafts at T={s.draft_temperature:g}",
                format_table(header, body), [_n_note({m: st[m] for m in st if m != "alive"}), *notes],
                smoke_test=s.smoke_test)


def _print_drafts(st: dict, s: DecodingSettings, notes) -> None:
    """Table 1, the token-rate improvement over single-draft, and the drafts alive per position."""
    print_table1(st, s, notes)
    ks = s.drafts_k
    body = [[m] + [_pct(st[m][k]) for k in ks] for m in paper.COMPARED_SCHEMES]
    body.append(["autoregressive"] + [_pct(st[AUTOREGRESSIVE])] * len(ks))
    improvements = [st[m][k]["improvement_pct"] for m in paper.COMPARED_SCHEMES for k in ks]
    print_block("Table 1 (token rate): improvement over single-draft decoding, paired by prompt and seed",
                format_table(["method"] + [f"K={k}" for k in ks], body),
                [_n_note(improvements + [st[AUTOREGRESSIVE]["improvement_pct"]]),
                 "the paper gives no token rates for Table 1"], smoke_test=s.smoke_test)
    body = [[m, str(k)] + [_stat(a) for a in st["alive"][m][k]] for k in ks for m in paper.COMPARED_SCHEMES]
    print_block("Drafts alive per position (Table 1 runs): mean drafts offered to the scheme at position j of a "
                "round, over the rounds that reach j",
                format_table(["method", "K"] + [f"j={j + 1}" for j in range(s.draft_length)], body),
                [sample_note(_sizes(st["alive"]), "generations", over="(whose rounds reach j; s.e. clustered by "
                                                                       "generation)"),
                 "more drafts alive after an acceptance means more chances at the next position"],
                smoke_test=s.smoke_test)


def _print_temperature(st, s: DecodingSettings, notes):
    temps = s.temperatures
    for dataset, by in st.items():
        body = [[m] + [f"{_be(by[t][m])} ({_pct(by[t][m])})" if m != "single" else _be(by[t][m]) for t in temps]
                for m in ("single", *paper.COMPARED_SCHEMES)]
        print_block(f"Figure 3: block efficiency (token-rate improvement over single-draft) vs draft temperature, "
                    f"{dataset}, K = 2 identical drafts", format_table(["method"] + [f"T={t:g}" for t in temps], body),
                    [_n_note([by[t] for t in temps]), "the paper shows Figure 3 as a plot only (no numbers to print)",
                     notes[0]], smoke_test=s.smoke_test)
    for dataset, by in st.items():
        _print_quality(dataset, by, s, notes)


def _print_quality(dataset: str, by: dict, s: DecodingSettings, notes):
    """Table 5 (XSum) / 6 (WMT): the quality of the outputs vs draft temperature."""
    temps, ptable = s.temperatures, paper.QUALITY_TABLES.get(dataset)
    metric = "BLEU (0-1, sentence level)" if dataset == "wmt" else "ROUGE-L"
    header = ["method"] + [c for t in temps for c in (f"T={t:g} ours", f"T={t:g} paper")]
    body = []
    for m in ("is", "is-ratio", "single", "specinfer", "spectr"):
        row = [m]
        for t in temps:
            idx = paper.TEMPERATURES.index(t) if t in paper.TEMPERATURES else None
            theirs = ptable[m][idx] if ptable is not None and idx is not None and m in ptable else None
            row += [_q(by[t][m]), fmt(theirs, digits=3)]
        body.append(row)
    body.append([AUTOREGRESSIVE] + [_q(by[AUTOREGRESSIVE]), "-"] * len(temps))
    table_name = {"xsum": "Table 5", "wmt": "Table 6"}.get(dataset, "quality (no paper table)")
    qualities = [by[t][m]["quality"] for t in temps for m in by[t]] + [by[AUTOREGRESSIVE]["quality"]]
    print_block(f"{table_name}: {metric} of the outputs vs draft temperature, {dataset}", format_table(header, body),
                [_n_note(qualities), "every scheme is lossless: quality must not depend on the scheme or temperature, "
                 "only noise differs (compare with autoregressive)", notes[0]], smoke_test=s.smoke_test)


def _print_nonidentical(st, s: DecodingSettings, notes):
    temps = s.temperatures
    body = [[m] + [f"{_be(st[t][m])} ({_pct(st[t][m])})" for t in temps] for m in NONIDENTICAL_SCHEMES]
    body.append([f"single (T={s.first_temperature:g})"] + [_be(st["single"])] * len(temps))
    print_block(
        f"Figure 4: block efficiency (token-rate improvement) with non-identical drafts, first draft "
        f"T={s.first_temperature:g}, second varied, {s.main_dataset}",
        format_table(["method"] + [f"T2={t:g}" for t in temps], body),
        [_n_note(st), "SpecTr needs identical drafts and is not run; the paper shows Figure 4 as a plot only",
         notes[0]], smoke_test=s.smoke_test)


def _print_topk(st, s: DecodingSettings, notes):
    header = ["top-k", "K", "method", "ours", "paper", "ours / IS", "paper / IS"]
    body = []
    for top_k, by in st.items():
        for k in s.topk_drafts:
            theirs_is = paper.paper_value(paper.TABLE4_TOP_K, top_k, k, "is")
            for m in paper.COMPARED_SCHEMES:
                theirs = paper.paper_value(paper.TABLE4_TOP_K, top_k, k, m)
                body.append([top_k, k, m, _be(by[k][m]), fmt(theirs), _stat(by[k][m]["over_is_paper"], 0, 100, "%"),
                             f"{theirs[0] / theirs_is[0]:.0%}" if theirs else "-"])
        body.append([top_k, 1, "single", _be(by["single"]), "-", "", ""])
    print_block(
        f"Table 4: block efficiency with top-k sampling, {s.main_dataset}", format_table(header, body),
        [_n_note(st), "ours / IS: ratio of the block efficiencies, paired by prompt and seed",
         f"deviation: the paper runs both models at temperature 1.0; our drafts run at "
         f"T={s.draft_temperature:g} (with the same-weights draft, T = 1 would make draft = target)", *notes],
        smoke_test=s.smoke_test)


def _print_truncation(st, s: DecodingSettings, notes):
    header = ["IS setting", "ours BE", "ours rate vs single", "paper BE", "paper rate vs single"]
    body = []
    for label, value in st.items():
        if label == "single":
            continue
        s_, a_ = (int(x.split("=")[1]) for x in label.split(","))
        theirs = (paper.TABLE2_ALPHABET.get(a_) if s_ == TRUNCATION_S
                  else paper.TABLE2_S.get(s_) if a_ == TRUNCATION_ALPHABET else None)
        body.append([label, _be(value), _pct(value), fmt(theirs[0]) if theirs else "-",
                     fmt(theirs[1], digits=2) + "%" if theirs else "-"])
    body.append(["single (K=1)", _be(st["single"]), "", "-", ""])
    print_block(f"Table 2: IS truncation (alphabet at s={TRUNCATION_S}, LP size s at alphabet {TRUNCATION_ALPHABET}), "
                f"K = 2, {s.main_dataset}",
                format_table(header, body), [_n_note(st), *notes], smoke_test=s.smoke_test)


def _print_timing(timing_stats, smoke_test: bool = False):
    header = ["method", "rounds", "draft ms", "target ms", "selection ms", "cache ms", "selection / target"]
    body = [[label, t["rounds"], f"{1e3 * t['draft']:.1f}", f"{1e3 * t['target']:.1f}", f"{1e3 * t['selection']:.2f}",
             f"{1e3 * t['cache']:.2f}", f"{t['selection_over_target']:.1%}"]
            for label, t in sorted(timing_stats.items(), key=lambda kv: (kv[1]["method"], kv[1]["num_drafts"]))]
    print_block("Where the time goes: mean per round (one target call), all generations of this run",
                format_table(header, body),
                ["draft = K-row draft forward passes and sampling (L steps); target = one K-row forward "
                 "pass over L+1 positions; selection = token-level scheme at every position reached; "
                 "cache = KV-cache expand/select/crop"], smoke_test=smoke_test)


# -- goals ---------------------------------------------------------------------------------------
def check_goals(stats: dict, s: DecodingSettings) -> dict:
    """Goals (a) and (b), each a list of ``{"what", "pass", "detail"}``."""
    goals = {"a": [], "b": []}
    for label, t in stats["timing"].items():
        if t["method"] in paper.COMPARED_SCHEMES and t["num_drafts"] <= SELECTION_GOAL_MAX_K:
            ratio = t["selection_over_target"]
            goals["a"].append({"what": label, "pass": bool(ratio < SELECTION_SHARE_GOAL),
                               "detail": f"selection {1e3 * t['selection']:.2f} ms = {ratio:.1%} of a target pass "
                                         f"({1e3 * t['target']:.1f} ms)"})
    if "drafts" in stats:
        single = stats["drafts"]["single"]["block_efficiency"]
        for scheme in paper.COMPARED_SCHEMES:
            for k in s.drafts_k:
                be = stats["drafts"][scheme][k]["block_efficiency"]
                goals["b"].append({"what": f"{scheme} K={k}", "pass": bool(be["mean"] > single["mean"]),
                                   "n": be["n"],
                                   "detail": f"{_stat(be)} vs single {_stat(single)} "
                                             f"({be['n']} generation{'s' * (be['n'] != 1)} each)"})
    return goals


def _print_goals(goals, preset: str, smoke_test: bool = False):
    from mspec_lab.models import EXPERIMENT_PRESET

    where = ("the experiments' offline pair" if preset == EXPERIMENT_PRESET
             else f"preset {preset!r}, not the experiments' offline pair")
    print(f"\n== Goal (a): per round, selection time < {SELECTION_SHARE_GOAL:.0%} of one target forward pass for "
          f"K <= {SELECTION_GOAL_MAX_K} ({where})")
    for g in sorted(goals["a"], key=lambda g: g["what"]):
        print(f"   {g['what']:<14} {'PASS' if g['pass'] else 'FAIL'}  {g['detail']}")
    print(f"== Goal (b): multi-draft block efficiency > single-draft at the same L ({where}, Table 1 runs)")
    if not goals["b"]:
        print("   not checked: run the 'drafts' experiment")
    elif min(g["n"] for g in goals["b"]) < GENERATIONS_FOR_GOAL_B:
        print(f"   note: fewer than {GENERATIONS_FOR_GOAL_B} generations per point; block efficiency of a short "
              "generation is very noisy, so this check is indicative only (run without --quick, or raise "
              "--gen-prompts / --seeds)")
    for g in goals["b"]:
        print(f"   {g['what']:<14} {'PASS' if g['pass'] else 'FAIL'}  {g['detail']}")
    if smoke_test:
        print(f"   {SMOKE_TEST_LINE}")


# -- figures -------------------------------------------------------------------------------------
SCHEME_COLORS = {"optimal": "#8e44ad", "is": "#ff7f0e", "is-ratio": "#d62728", "spectr": "#1f77b4", "specinfer": "#2ca02c", "single": "#999999",
          AUTOREGRESSIVE: "#222222"}


def _line(go, name, xs, sts, field="block_efficiency", **kw):
    return go.Scatter(name=name, x=xs, y=[st[field]["mean"] for st in sts], mode="lines+markers",
                      error_y=dict(type="data", array=[st[field]["se"] for st in sts]),
                      line=dict(color=SCHEME_COLORS.get(name)), **kw)


def figures(stats: dict, s: DecodingSettings, label: str) -> list:
    """One plotly figure per experiment that ran, and the time per round."""
    import plotly.graph_objects as go

    makers = {"drafts": _drafts_figure, "temperature": _temperature_figure, "nonidentical": _nonidentical_figure,
              "topk": _topk_figure, "truncation": _truncation_figure}
    figs = [maker(go, stats[name], s, label) for name, maker in makers.items() if name in stats]
    timing_stats = stats["timing"]
    labels = sorted(timing_stats, key=lambda m: (timing_stats[m]["method"], timing_stats[m]["num_drafts"]))
    fig = go.Figure([go.Bar(name=part, x=labels, y=[1e3 * timing_stats[m][part] for m in labels])
                     for part in ("draft", "target", "selection", "cache")])
    fig.update_layout(barmode="stack", title=f"Time per round ({label})", yaxis_title="ms per target call")
    return figs + [fig]


def _drafts_figure(go, st, s, label):
    ks = s.drafts_k
    fig = go.Figure([_line(go, m, ks, [st[m][k] for k in ks]) for m in paper.COMPARED_SCHEMES])
    fig.add_hline(y=st["single"]["block_efficiency"]["mean"], line_dash="dash", annotation_text="single draft")
    fig.update_layout(title=f"Table 1: block efficiency vs K ({label})", xaxis_title="K",
                      yaxis_title="tokens per target call")
    return fig


def _temperature_figure(go, by_ds, s, label):
    from plotly.subplots import make_subplots

    temps = s.temperatures
    fig = make_subplots(rows=2, cols=len(by_ds), subplot_titles=[*by_ds, *[f"{d}: quality" for d in by_ds]])
    for col, (dataset, by) in enumerate(by_ds.items(), start=1):
        for m in ("single", *paper.COMPARED_SCHEMES):
            fig.add_trace(_line(go, m, temps, [by[t][m] for t in temps], legendgroup=m, showlegend=col == 1),
                          row=1, col=col)
            fig.add_trace(_line(go, m, temps, [by[t][m] for t in temps], "quality", legendgroup=m,
                                showlegend=False), row=2, col=col)
    fig.update_layout(title=f"Figure 3 / Tables 5, 6: K = 2 identical drafts vs draft temperature ({label})",
                      height=700)
    return fig


def _nonidentical_figure(go, st, s, label):
    temps = s.temperatures
    fig = go.Figure([_line(go, m, temps, [st[t][m] for t in temps]) for m in NONIDENTICAL_SCHEMES])
    fig.add_hline(y=st["single"]["block_efficiency"]["mean"], line_dash="dash", annotation_text="single draft")
    fig.update_layout(title=f"Figure 4: non-identical drafts, second draft temperature varied ({label})",
                      xaxis_title="second draft temperature", yaxis_title="tokens per target call")
    return fig


def _topk_figure(go, by_top_k, s, label):
    fig = go.Figure()
    for m in paper.COMPARED_SCHEMES:
        xs, sts = [], []
        for top_k, by in by_top_k.items():
            for k in s.topk_drafts:
                xs.append(f"top-{top_k}, K={k}")
                sts.append(by[k][m])
        fig.add_trace(go.Bar(name=m, x=xs, y=[x["block_efficiency"]["mean"] for x in sts], marker_color=SCHEME_COLORS[m],
                             error_y=dict(type="data", array=[x["block_efficiency"]["se"] for x in sts])))
    fig.update_layout(barmode="group", title=f"Table 4: top-k sampling ({label})",
                      yaxis_title="tokens per target call")
    return fig


def _truncation_figure(go, st, s, label):
    items = list(st.items())
    fig = go.Figure(go.Bar(x=[k for k, _ in items], y=[v["block_efficiency"]["mean"] for _, v in items],
                           error_y=dict(type="data", array=[v["block_efficiency"]["se"] for _, v in items])))
    fig.update_layout(title=f"Table 2: IS truncation ({label})", yaxis_title="tokens per target call")
    return fig
