"""Paired block efficiency: every scheme's expected tokens per round, on the same rounds.

Sampled block efficiencies are noisy (one rejection more or less moves a generation by
tenths) and each scheme sees different rounds, so small differences between schemes drown
(``python -m mspec.bench decoding``). Here one *reference* generation per (prompt, seed)
drafts ``max(--drafts-k)`` rows per round. On every round, for each scheme and each K of
``--drafts-k`` (the first K rows: the drafts are i.i.d.), :func:`mspec.decoding.expected_round_tokens`
gives the expected number of tokens the round emits, with the scheme's randomness averaged
out exactly (an end-of-sequence token ends the round's continuation, as in decoding). Its
mean over rounds estimates the block efficiency (``max_new_tokens`` truncation aside),
and the differences between schemes are paired round by round. ``single`` is the first
draft alone (K = 1).

One row per (prompt, seed, scheme, K) in ``rounds.csv``, written when its reference
generation is done (a rerun resumes); summary ``rounds.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from . import common
from .decoding import SCHEMES
from .results import ResultTable, RowBudget, mean_se

CONFIG_FIELDS = ["preset", "dataset", "prompt", "seed", "reference", "method", "num_drafts", "draft_length",
                 "draft_temperature", "target_temperature", "max_new_tokens"]
VALUE_FIELDS = ["rounds", "per_round"]
#: variants scored on the same rounds besides the registry schemes: name -> (scheme, params).
#: "optimal-tokens" is the optimal scheme with every token its own atom (the lexicographic
#: x); "optimal" (atoms="auto") uses ratio buckets at these vocabularies: both attain the
#: optimal acceptance, with different x
VARIANTS = {"optimal-tokens": ("optimal", {"atoms": "tokens"})}
ROUND_SCHEMES = SCHEMES + tuple(VARIANTS)


def add_arguments(parser) -> None:
    common.add_common_arguments(parser)
    group = parser.add_argument_group("paired block efficiency")
    group.add_argument("--main-dataset", default="dolly", choices=["xsum", "dolly", "wmt"],
                       help="dataset of the prompts (default dolly, as Table 1)")
    group.add_argument("--gen-prompts", type=int, default=None, help="prompts (default 4, quick 2)")
    group.add_argument("--seeds", type=int, default=None, help="seeds per prompt (default 2, quick 1)")
    group.add_argument("--max-new-tokens", type=int, default=None, help="tokens per reference generation "
                       "(default 48, quick 24)")
    group.add_argument("--draft-length", type=int, default=5, help="L (default 5)")
    group.add_argument("--drafts-k", type=int, nargs="+", default=[2, 4, 8], help="K values (default 2 4 8)")
    group.add_argument("--reference", default="optimal", choices=SCHEMES,
                       help="scheme that drives the reference generations (default optimal)")


def run(args, *, on_row=None) -> int:
    """Command entry point: returns 0, or 3 when ``--max-rows`` stopped the sweep."""
    return common.run_sweep(args, run_rounds, report_rounds, on_row=on_row)


def settings_of(args) -> dict:
    return {"prompts": common.quick_default(args.gen_prompts, args.quick, 4, 2),
            "seeds": common.quick_default(args.seeds, args.quick, 2, 1),
            "max_new_tokens": common.quick_default(args.max_new_tokens, args.quick, 48, 24),
            "max_chars": common.quick_default(args.max_chars, args.quick, 1000, 400),
            "drafts_k": sorted(set(args.drafts_k))}


def methods(drafts_k) -> list[tuple[str, int]]:
    """``(scheme, K)`` evaluated on every round: the single-draft baseline, then every scheme."""
    return [("single", 1)] + [(s, k) for k in drafts_k for s in ROUND_SCHEMES]


def expected_per_round(pair, prompt, seed: int, args, s: dict) -> dict[tuple[str, int], list[float]]:
    """Run one reference generation; return each method's expected tokens on each round."""
    import torch

    from ..decoding import expected_round_tokens, speculative_generate

    k_max, temp = max(s["drafts_k"]), args.draft_temperature
    out: dict[tuple[str, int], list[float]] = {m: [] for m in methods(s["drafts_k"])}

    def on_round(drafted, draft_probs, target_probs):
        for method, k in out:
            scheme, params = VARIANTS.get(method, (method, None))
            out[method, k].append(expected_round_tokens(
                drafted[:k], draft_probs[:k], target_probs[:k], scheme=scheme, draft_temperatures=[temp] * k,
                scheme_params=params, eos_token_id=pair.eos_token_id))

    gen = torch.Generator().manual_seed(common.derived_seed(seed, prompt.tag))
    speculative_generate(list(prompt.ids), draft_model=pair.draft_model, target_model=pair.target_model,
                         scheme=args.reference, num_drafts=k_max, draft_length=args.draft_length,
                         draft_temperatures=temp, target_temperature=args.target_temperature,
                         max_new_tokens=s["max_new_tokens"], eos_token_id=pair.eos_token_id, generator=gen,
                         on_round=on_round)
    return out


def run_rounds(args, pair, budget: RowBudget) -> dict:
    """Compute (or read back) every row; return the summary for :func:`report_rounds`."""
    s = settings_of(args)
    table = ResultTable(Path(args.out) / "rounds.csv", config_fields=CONFIG_FIELDS, value_fields=VALUE_FIELDS,
                        budget=budget)
    prompts = common.load_dataset_prompts(pair, args.main_dataset, s["prompts"], source=args.data_source,
                                          max_chars=s["max_chars"])
    rows = []
    jobs = [(prompt, args.seed + i) for prompt in prompts for i in range(s["seeds"])]
    for prompt, seed in tqdm(jobs, desc="reference generations", unit="gen"):
        base = {"preset": args.preset, "dataset": prompt.dataset, "prompt": prompt.tag, "seed": seed,
                "reference": args.reference, "draft_length": args.draft_length,
                "draft_temperature": args.draft_temperature, "target_temperature": args.target_temperature,
                "max_new_tokens": s["max_new_tokens"]}
        cache = {}

        def values(scheme, k, prompt=prompt, seed=seed, cache=cache):
            if "rounds" not in cache:
                cache["rounds"] = expected_per_round(pair, prompt, seed, args, s)
            per_round = cache["rounds"][scheme, k]
            return {"rounds": len(per_round), "per_round": per_round}

        for scheme, k in methods(s["drafts_k"]):
            rows.append(table.compute({**base, "method": scheme, "num_drafts": k},
                                      lambda scheme=scheme, k=k: values(scheme, k)))
    return {"args": vars(args), "settings": s, "rows": rows, "pair": pair.description,
            "label": common.pair_label(pair, args.draft_temperature)}


def _per_round(row) -> np.ndarray:
    value = row["per_round"]
    return np.asarray(json.loads(value) if isinstance(value, str) else value, dtype=float)


def summarize(summary: dict) -> dict:
    """Per method: mean expected tokens per round; per K: paired differences optimal - other
    (mean ± s.e. over reference generations of the per-generation mean difference)."""
    s = summary["settings"]
    by = {}
    for row in summary["rows"]:
        by.setdefault((row["method"], int(row["num_drafts"])), {})[(row["prompt"], row["seed"])] = _per_round(row)
    stats = {"block_efficiency": {}, "optimal_minus": {}}
    for (scheme, k), gens in by.items():
        mean, se, n = mean_se(np.concatenate(list(gens.values())))
        stats["block_efficiency"][f"{scheme} K={k}"] = {"mean": mean, "se": se, "rounds": n}
    for k in s["drafts_k"]:
        opt = by.get(("optimal", k), {})
        for scheme in ROUND_SCHEMES:
            if scheme == "optimal":
                continue
            other = by.get((scheme, k), {})
            diffs = [float(np.mean(opt[g] - other[g])) for g in opt if g in other and len(opt[g])]
            rounds = np.concatenate([opt[g] - other[g] for g in opt if g in other]) if diffs else np.zeros(0)
            mean, se, n = mean_se(diffs)
            stats["optimal_minus"][f"{scheme} K={k}"] = {
                "mean": mean, "se": se, "generations": n,
                "rounds_below": int(np.sum(rounds < -1e-9)), "rounds": int(rounds.size)}
    return stats


def report_rounds(summary: dict) -> dict:
    """Print the paired table and write ``rounds.json``."""
    stats = summarize(summary)
    s = summary["settings"]
    print(f"\nModel pair: {summary['pair']}")
    print(f"Reference generations: {s['prompts']} prompt(s) x {s['seeds']} seed(s), {summary['args']['main_dataset']}, "
          f"{s['max_new_tokens']} tokens, L = {summary['args']['draft_length']}, drafts at "
          f"T = {summary['args']['draft_temperature']:g}, driven by {summary['args']['reference']!r}")
    body = []
    for k in s["drafts_k"]:
        for scheme in ROUND_SCHEMES:
            be = stats["block_efficiency"][f"{scheme} K={k}"]
            row = [scheme, str(k), common.fmt(be["mean"], be["se"], 3), str(be["rounds"])]
            if scheme == "optimal":
                row += ["", ""]
            else:
                d = stats["optimal_minus"][f"{scheme} K={k}"]
                row += [common.fmt(d["mean"], d["se"], 4), f"{d['rounds_below']} of {d['rounds']}"]
            body.append(row)
    single = stats["block_efficiency"]["single K=1"]
    body.append(["single", "1", common.fmt(single["mean"], single["se"], 3), str(single["rounds"]), "", ""])
    common.print_block("Paired block efficiency: expected tokens per round on the same rounds",
                       common.format_table(["method", "K", "tokens / round", "rounds", "optimal - this",
                                            "rounds where optimal is lower"], body),
                       [f"ours = {summary['label']}",
                        "optimal - this: mean ± s.e. over reference generations of the paired per-round "
                        "difference; the selection randomness is averaged out exactly "
                        "(mspec.decoding.expected_round_tokens)",
                        "optimal = ratio buckets as atoms (the default at this vocabulary); optimal-tokens = every "
                        "token its own atom (the lexicographic x): the same acceptance, a different x"])
    out = Path(summary["args"]["out"])
    common.write_json(out / "rounds.json", {"model_pair": summary["pair"], "label": summary["label"],
                                            "settings": s, "stats": stats})
    print(f"\nwrote {out / 'rounds.csv'}, {out / 'rounds.json'}")
    return stats
