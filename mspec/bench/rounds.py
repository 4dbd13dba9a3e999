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

What is left is the drafts' own randomness: given its drafts, one scheme can accept a round
that another rejects, though over the drafts the optimal scheme accepts most often. The
same call returns a control variate per position with mean exactly zero over the drafts
(acceptance given the drafts minus its mean, weighted by the probability of reaching the
node); the estimates subtract its least-squares fit (a regression estimator), which
removes most of that noise without moving the mean. Means are pooled over rounds (as a
block efficiency is); standard errors are clustered by reference generation.

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
VALUE_FIELDS = ["rounds", "per_round", "control"]
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


def expected_per_round(pair, prompt, seed: int, args, s: dict) -> dict[tuple[str, int], tuple[list, list]]:
    """Run one reference generation; return each method's expected tokens on each round and
    its control variate (``L`` numbers per round)."""
    import torch

    from ..decoding import expected_round_tokens, speculative_generate

    k_max, temp = max(s["drafts_k"]), args.draft_temperature
    out: dict[tuple[str, int], tuple[list, list]] = {m: ([], []) for m in methods(s["drafts_k"])}

    def on_round(drafted, draft_probs, target_probs):
        for method, k in out:
            scheme, params = VARIANTS.get(method, (method, None))
            value, control = expected_round_tokens(
                drafted[:k], draft_probs[:k], target_probs[:k], scheme=scheme, draft_temperatures=[temp] * k,
                scheme_params=params, eos_token_id=pair.eos_token_id, control=True)
            out[method, k][0].append(value)
            out[method, k][1].append([float(z) for z in control])

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
            per_round, control = cache["rounds"][scheme, k]
            return {"rounds": len(per_round), "per_round": per_round, "control": control}

        for scheme, k in methods(s["drafts_k"]):
            rows.append(table.compute({**base, "method": scheme, "num_drafts": k},
                                      lambda scheme=scheme, k=k: values(scheme, k)))
    return {"args": vars(args), "settings": s, "rows": rows, "pair": pair.description,
            "label": common.pair_label(pair, args.draft_temperature)}


def _per_round(row) -> tuple[np.ndarray, np.ndarray]:
    """``(values (n,), controls (n, L))`` of one row."""
    def parse(value):
        return json.loads(value) if isinstance(value, str) else value

    values = np.asarray(parse(row["per_round"]), dtype=float)
    controls = np.asarray(parse(row["control"]), dtype=float).reshape(values.size, -1)
    return values, controls


def cluster_mean_se(values: np.ndarray, groups: np.ndarray) -> tuple[float, float]:
    """Mean pooled over rounds and its standard error clustered by ``groups`` (the rounds of
    one generation share a prefix, so they are not independent)."""
    n, labels = values.size, np.unique(groups)
    mean = float(values.mean())
    if labels.size < 2:
        return mean, float("nan")
    sums = np.array([np.sum(values[groups == g] - mean) for g in labels])
    return mean, float(np.sqrt(labels.size / (labels.size - 1) * np.sum(sums ** 2)) / n)


#: fit the control coefficients only with at least this many rounds per coefficient
ROUNDS_PER_CONTROL = 10


def control_adjusted(values: np.ndarray, controls: np.ndarray) -> np.ndarray:
    """``values - controls @ b`` with ``b`` the least-squares fit of the centred values on the
    centred controls; the controls have mean zero, so the mean is unchanged in expectation.
    With fewer than :data:`ROUNDS_PER_CONTROL` rounds per control the fit would chase noise,
    and the values come back unadjusted."""
    if controls.size == 0 or not np.any(controls) or values.size < ROUNDS_PER_CONTROL * controls.shape[1]:
        return values
    centred = controls - controls.mean(axis=0)
    b, *_ = np.linalg.lstsq(centred, values - values.mean(), rcond=None)
    return values - controls @ b


def summarize(summary: dict) -> dict:
    """Per method: mean expected tokens per round (with and without the control); per K:
    paired differences optimal - other. Means pooled over rounds, standard errors clustered
    by reference generation."""
    s = summary["settings"]
    by = {}
    for row in summary["rows"]:
        by.setdefault((row["method"], int(row["num_drafts"])), {})[(row["prompt"], row["seed"])] = _per_round(row)

    def stack(gens, keys):
        values = np.concatenate([gens[g][0] for g in keys]) if keys else np.zeros(0)
        controls = np.concatenate([gens[g][1] for g in keys]) if keys else np.zeros((0, 0))
        groups = np.concatenate([np.full(gens[g][0].size, i) for i, g in enumerate(keys)]) if keys else np.zeros(0)
        return values, controls, groups

    stats = {"block_efficiency": {}, "optimal_minus": {}}
    for (scheme, k), gens in by.items():
        values, controls, groups = stack(gens, sorted(gens))
        raw_mean, raw_se = cluster_mean_se(values, groups)
        mean, se = cluster_mean_se(control_adjusted(values, controls), groups)
        stats["block_efficiency"][f"{scheme} K={k}"] = {"mean": mean, "se": se, "raw_mean": raw_mean,
                                                       "raw_se": raw_se, "rounds": int(values.size)}
    for k in s["drafts_k"]:
        opt = by.get(("optimal", k), {})
        for scheme in ROUND_SCHEMES:
            if scheme == "optimal":
                continue
            other = by.get((scheme, k), {})
            keys = sorted(g for g in opt if g in other and opt[g][0].size)
            if not keys:
                continue
            v_opt, z_opt, groups = stack(opt, keys)
            v_other, z_other, _ = stack(other, keys)
            diff = v_opt - v_other
            raw_mean, raw_se = cluster_mean_se(diff, groups)
            mean, se = cluster_mean_se(control_adjusted(diff, np.hstack([z_opt, z_other])), groups)
            stats["optimal_minus"][f"{scheme} K={k}"] = {
                "mean": mean, "se": se, "raw_mean": raw_mean, "raw_se": raw_se, "generations": len(keys),
                "rounds": int(diff.size)}
    return stats


#: a paired difference counts as a lead or a deficit beyond this many standard errors
SIGNIFICANT = 2.0


def comparison_verdict(mean: float, se: float) -> str:
    """'ahead', 'BEHIND' or 'level' for a paired difference optimal - other."""
    if not np.isfinite(se):
        return "level" if abs(mean) < 1e-12 else ("ahead" if mean > 0 else "BEHIND")
    if mean > SIGNIFICANT * se:
        return "ahead"
    if mean < -SIGNIFICANT * se:
        return "BEHIND"
    return "level"


def report_rounds(summary: dict) -> dict:
    """Print the paired table and write ``rounds.json``."""
    stats = summarize(summary)
    s = summary["settings"]
    print(f"\nModel pair: {summary['pair']}")
    print(f"Reference generations: {s['prompts']} prompt(s) x {s['seeds']} seed(s), {summary['args']['main_dataset']}, "
          f"{s['max_new_tokens']} tokens, L = {summary['args']['draft_length']}, drafts at "
          f"T = {summary['args']['draft_temperature']:g}, driven by {summary['args']['reference']!r}")
    body, behind = [], []
    for k in s["drafts_k"]:
        for scheme in ROUND_SCHEMES:
            be = stats["block_efficiency"][f"{scheme} K={k}"]
            row = [scheme, str(k), common.fmt(be["mean"], be["se"], 3), common.fmt(be["raw_mean"], be["raw_se"], 3),
                   str(be["rounds"])]
            d = stats["optimal_minus"].get(f"{scheme} K={k}")
            if d is None:
                row += ["", "", ""]
            else:
                verdict = comparison_verdict(d["mean"], d["se"])
                if verdict == "BEHIND":
                    behind.append(f"{scheme} K={k}")
                row += [common.fmt(d["mean"], d["se"], 4), common.fmt(d["raw_mean"], d["raw_se"], 4), verdict]
            body.append(row)
    single = stats["block_efficiency"]["single K=1"]
    body.append(["single", "1", common.fmt(single["mean"], single["se"], 3),
                 common.fmt(single["raw_mean"], single["raw_se"], 3), str(single["rounds"]), "", "", ""])
    common.print_block("Paired block efficiency: expected tokens per round on the same rounds",
                       common.format_table(["method", "K", "tokens / round", "without control", "rounds",
                                            "optimal - this", "without control", "optimal is"], body),
                       [f"ours = {summary['label']}",
                        "tokens / round: mean over rounds of the expected tokens given the drafts (selection "
                        "randomness averaged out exactly, mspec.decoding.expected_round_tokens), minus the fitted "
                        "zero-mean control variate; ± s.e. clustered by reference generation",
                        "optimal - this: the same, paired round by round; optimal is 'ahead' / 'behind' beyond "
                        f"{SIGNIFICANT:g} s.e., else 'level'",
                        "optimal = ratio buckets as atoms (the default at this vocabulary); optimal-tokens = every "
                        "token its own atom (the lexicographic x): the same acceptance, a different x"])
    print("\noptimal significantly behind: " + (", ".join(behind) if behind else
                                                  f"nowhere (no difference below -{SIGNIFICANT:g} s.e.)"))
    out = Path(summary["args"]["out"])
    common.write_json(out / "rounds.json", {"model_pair": summary["pair"], "label": summary["label"],
                                            "settings": s, "stats": stats})
    print(f"\nwrote {out / 'rounds.csv'}, {out / 'rounds.json'}")
    return stats
