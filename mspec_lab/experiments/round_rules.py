"""Round rules against per-token rules on the same rounds: expected tokens per round, K = 1, 2, 4, 8.

One reference generation per (prompt, seed) drafts ``max(drafts_k)`` blocks of ``L`` tokens
per round (:func:`mspec.lm.decoding.speculative_generate`, driven by the per-token optimal
scheme). On every round, for each K of ``drafts_k`` (the first K blocks: the drafts are
i.i.d.), every rule is scored exactly, its randomness averaged out:

* per-token rules (:data:`TOKEN_RULES`; ``"single"`` at K = 1): the round rule
  ``"per-position"`` with that scheme;
* round rules (:data:`COMPARED_ROUND_RULES`): ``"traversal"`` and ``"selected-block"`` (at K = 1 both
  are block verification: the rule ``"block"``, reported as ``"block"``);

each by the ``expected_tokens`` of its :class:`mspec.rounds.RoundRule`
(:func:`round_rule`, through :func:`mspec.rounds.make_round_rule`).

An end-of-sequence token ends a round's count in all of them. The rules are paired round by
round against the per-token optimum (:data:`BASELINE`; ``"single"`` at K = 1), so their
differences are measured far more precisely than sampled block efficiencies; standard errors
are clustered by reference generation.

In a notebook: ``summarize_round_rules(run_round_rules(pair, RoundRulesSettings.quick()))``;
on the command line ``python -m mspec_lab round-rules`` also times the verification of a
round against one target pass (:func:`time_round_rules`) and writes both to a results file.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from mspec_lab.experiments.inputs import DATASETS, SharedSettings, checked_choices, derived_seed, load_dataset_prompts, with_progress
from mspec_lab.experiments.paired_schemes import MIN_PAIRS, TEST_LEVEL, TEST_NAME, cluster_mean_se, paired_t_test
from mspec_lab.experiments.report import (fmt, format_table, print_block, print_smoke_banner, sample_note,
                                          smoke_test_fields, write_json)
from mspec_lab.experiments.results import ratio_se

__all__ = ["BASELINE", "COMPARED_ROUND_RULES", "ROUND_RULES_RESULTS", "TOKEN_RULES", "RoundRulesSettings",
           "load_round_rules", "round_rule_methods", "print_round_rules", "round_rule", "round_rules_document", "run_round_rules",
           "summarize_round_rules", "time_round_rules"]

#: per-token schemes scored on every round (K >= 2)
TOKEN_RULES = ("optimal", "spectr", "specinfer")
#: round rules scored on every round (K >= 2); at K = 1 both are block verification
COMPARED_ROUND_RULES = ("traversal", "selected-block")
#: what every rule is paired against: the per-token optimum (``"single"`` at K = 1)
BASELINE = "optimal"
#: the committed results of the offline default, relative to the repository root
ROUND_RULES_RESULTS = Path("results") / "offline_default" / "round_rules.json"


@dataclass(frozen=True)
class RoundRulesSettings(SharedSettings):
    """What :func:`run_round_rules` runs: ``prompts`` x ``seeds`` reference generations of
    ``max_new_tokens`` per dataset, blocks of ``draft_length`` at ``draft_temperature``,
    scored for every K of ``drafts_k``."""

    QUICK: ClassVar[dict] = {"prompts": 1, "max_new_tokens": 12, "drafts_k": (1, 2), "max_chars": 300}

    datasets: tuple[str, ...] = DATASETS
    prompts: int = 8
    seeds: int = 1
    drafts_k: tuple[int, ...] = (1, 2, 4, 8)
    draft_length: int = 5
    max_new_tokens: int = 48
    max_chars: int = 400

    def __post_init__(self):
        object.__setattr__(self, "datasets", checked_choices("datasets", self.datasets, DATASETS))
        object.__setattr__(self, "drafts_k", tuple(sorted({int(k) for k in self.drafts_k})))
        if not self.drafts_k or self.drafts_k[0] < 1:
            raise ValueError(f"`drafts_k` must hold numbers of drafts >= 1, got {self.drafts_k}")
        super().__post_init__()


def round_rule_methods(k: int) -> tuple[str, ...]:
    """The rules scored at K = ``k``, the baseline first."""
    return ("single", "block") if k == 1 else (BASELINE,) + TOKEN_RULES[1:] + COMPARED_ROUND_RULES


def _rule_and_scheme(method: str) -> tuple[str, str | None]:
    """``(round rule, scheme)`` of ``method``: a round rule's name, or a per-token scheme's."""
    if method in ("block", "traversal"):
        return method, None
    if method == "selected-block":
        return method, BASELINE
    return "per-position", method


def round_rule(method: str, k: int, temperature: float):
    """The :class:`mspec.rounds.RoundRule` that ``method`` names, for rounds of ``k`` drafts."""
    from mspec.rounds import make_round_rule

    name, scheme = _rule_and_scheme(method)
    return make_round_rule(name, scheme=scheme, num_drafts=k, draft_temperatures=temperature)


def _scored_rounds(pair, prompt, seed: int, s: RoundRulesSettings) -> dict[tuple[str, int], list[float]]:
    """Run one reference generation; every (method, K)'s expected tokens on each round."""
    import torch

    from mspec.lm.decoding import speculative_generate

    out = {(m, k): [] for k in s.drafts_k for m in round_rule_methods(k)}
    rules = {(m, k): round_rule(m, k, s.draft_temperature) for m, k in out}

    def on_round(drafted, draft_probs, target_probs):
        blocks = drafted.cpu().numpy()
        p, q = draft_probs.double().cpu().numpy(), target_probs.double().cpu().numpy()
        for (method, k), values in out.items():
            values.append(rules[method, k].expected_tokens(blocks[:k], p[:k], q[:k], eos_token_id=pair.eos_token_id))

    k_max = max(s.drafts_k)
    speculative_generate(list(prompt.ids), draft_model=pair.draft_model, target_model=pair.target_model,
                         scheme=BASELINE if k_max > 1 else "single", num_drafts=k_max, draft_length=s.draft_length,
                         draft_temperatures=s.draft_temperature, target_temperature=s.target_temperature,
                         max_new_tokens=s.max_new_tokens, eos_token_id=pair.eos_token_id,
                         generator=torch.Generator().manual_seed(seed), on_round=on_round)
    return out


def run_round_rules(pair, settings: RoundRulesSettings | None = None, *, progress: bool = False) -> dict:
    """Score every rule on the rounds of the reference generations.

    Returns:
        dict: ``{dataset: {"values": {(method, K): (n,) expected tokens per round},
        "groups": (n,) the reference generation of each round}}``.
    """
    s = settings or RoundRulesSettings()
    run = {}
    for dataset in s.datasets:
        prompts = load_dataset_prompts(pair, dataset, s.prompts, source=s.data_source, max_chars=s.max_chars)
        jobs = [(p, i) for p in prompts for i in range(s.seeds)]
        values, groups = {}, []
        for g, (prompt, i) in enumerate(with_progress(jobs, progress, desc=dataset, unit="gen")):
            scored = _scored_rounds(pair, prompt, derived_seed(s.seed, i, prompt.tag), s)
            for key, v in scored.items():
                values.setdefault(key, []).extend(v)
            groups += [g] * len(next(iter(scored.values())))
        run[dataset] = {"values": {key: np.array(v) for key, v in values.items()}, "groups": np.array(groups)}
    return run


def summarize_round_rules(run: dict) -> list[dict]:
    """One record per (dataset, K, method): mean expected tokens per round and, paired round
    by round, the difference from the baseline (``"single"`` at K = 1) and its ratio
    (``relative_gain``); means pooled over rounds, standard errors clustered by reference
    generation (``generations`` of them)."""
    records = []
    for dataset, part in run.items():
        values, groups = part["values"], part["groups"]
        labels = np.unique(groups)
        for method, k in values:
            base = values["single" if k == 1 else BASELINE, k]
            mean, se = cluster_mean_se(values[method, k], groups)
            diff, diff_se = cluster_mean_se(values[method, k] - base, groups)
            _, gain_se, _ = ratio_se([np.sum((values[method, k] - base)[groups == g]) for g in labels],
                                     [np.sum(base[groups == g]) for g in labels])
            records.append({"dataset": dataset, "K": k, "method": method, "rounds": int(groups.size),
                            "generations": int(labels.size), "tokens_per_round": mean, "se": se,
                            "minus_baseline": diff, "minus_baseline_se": diff_se,
                            "relative_gain": diff / float(base.mean()), "relative_gain_se": gain_se})
    return records


def _verify_options(method: str) -> dict:
    """``speculative_generate`` keywords that run ``method`` (``"block"`` and ``"traversal"``
    verify without a scheme)."""
    name, scheme = _rule_and_scheme(method)
    return {"scheme": scheme, "verify": name}


def time_round_rules(pair, settings: RoundRulesSettings | None = None, *, tokens: int = 24) -> list[dict]:
    """Time each rule's verification of a round against the round's target pass.

    One generation of ``tokens`` tokens per (K, method) from the first prompt of the first
    dataset; the decoder's clock (:class:`mspec.lm.decoding.RoundRecord`) splits each round into
    drafting, the target pass, the verification (``selection_time``: from the round's
    distributions to its output tokens, copies to numpy included) and the caches.

    Returns:
        list: one record per (K, method): ``rounds``, mean ``verify_ms`` and ``target_ms`` per
        round, and ``share`` = verify / target.
    """
    import torch

    from mspec.lm.decoding import speculative_generate

    s = settings or RoundRulesSettings()
    prompt = load_dataset_prompts(pair, s.datasets[0], 1, source=s.data_source, max_chars=s.max_chars)[0]
    records = []
    for k in s.drafts_k:
        for method in round_rule_methods(k):
            result = speculative_generate(
                list(prompt.ids), draft_model=pair.draft_model, target_model=pair.target_model, num_drafts=k,
                draft_length=s.draft_length, draft_temperatures=s.draft_temperature,
                target_temperature=s.target_temperature, max_new_tokens=tokens, eos_token_id=pair.eos_token_id,
                generator=torch.Generator().manual_seed(derived_seed(s.seed, k, method)), **_verify_options(method))
            verify = float(np.mean([r.selection_time for r in result.rounds]))
            target = float(np.mean([r.target_time for r in result.rounds]))
            records.append({"K": k, "method": method, "rounds": len(result.rounds), "verify_ms": 1e3 * verify,
                            "target_ms": 1e3 * target, "share": verify / target})
    return records


def round_rules_document(preset: str, settings: RoundRulesSettings | None = None, *, timing_tokens: int = 24,
                         command: str = "", progress: bool = False) -> dict:
    """Load the pair, score every rule (:func:`run_round_rules`), time the verifications
    (:func:`time_round_rules`), and return the results with their provenance."""
    from mspec_lab.models import load_pair
    from mspec_lab.experiments.paper_run import code_version, now, provenance

    start, started = time.perf_counter(), now()
    code = code_version()  # before the run: the code that runs, whatever changes meanwhile
    pair = load_pair(preset)
    s = settings or RoundRulesSettings()
    records = summarize_round_rules(run_round_rules(pair, s, progress=progress))
    cost = time_round_rules(pair, s, tokens=timing_tokens)
    return {"schema": 1, **smoke_test_fields(s.smoke_test),
            "provenance": provenance(pair, command=command, code=code, started=started, start=start,
                                     data_source=s.data_source),
            "settings": dataclasses.asdict(s), "tokens_per_round": records, "verification_cost": cost}


def print_round_rules(doc: dict) -> None:
    """Print the tables of a results document (a smoke test's say so first and under each)."""
    smoke = bool(doc.get("smoke_test"))
    print_smoke_banner(smoke)
    records = [{**r, "generations": _generations(r, doc["settings"])} for r in doc["tokens_per_round"]]
    header = ["dataset", "K", "rule", "tokens / round", "minus per-token optimum", "gain", "verdict"]
    body = [[r["dataset"], str(r["K"]), r["method"], fmt(r["tokens_per_round"], r["se"], 3, n=r["generations"]),
             fmt(r["minus_baseline"], r["minus_baseline_se"], 4, n=r["generations"]),
             fmt(100 * r["relative_gain"], _times_100(r.get("relative_gain_se")), 1, n=r["generations"], unit="%"),
             "" if r["method"] in ("single", BASELINE) else _verdict(r)] for r in records]
    print_block(f"Expected tokens per round on the same rounds ({doc['provenance']['label']})",
                format_table(header, body),
                [("exact given the drafts (each rule's randomness averaged out), mean over rounds; minus: paired "
                  "round by round against the per-token optimum (single-draft sampling at K = 1); gain: minus "
                  "over the optimum's tokens per round"),
                 sample_note([r["generations"] for r in records], "reference generations",
                             over="(rounds pooled, s.e. clustered by generation)"),
                 f"verdict: 'ahead' / 'behind' when a {TEST_NAME} rejects a zero difference at level "
                 f"{TEST_LEVEL:g} (p-value printed), 'level' when it does not, 'untested' with fewer than "
                 f"{MIN_PAIRS} reference generations"], smoke_test=smoke)
    cost = [[str(c["K"]), c["method"], str(c["rounds"]), f"{c['verify_ms']:.2f}", f"{c['target_ms']:.1f}",
             f"{100 * c['share']:.1f}%"] for c in doc["verification_cost"]]
    print_block("Verification time per round against one target pass",
                format_table(["K", "rule", "rounds", "verify ms", "target ms", "share"], cost),
                ["verify: from the round's distributions to its output tokens (copies to numpy included)"],
                smoke_test=smoke)


def _generations(record: dict, settings: dict) -> int:
    """The reference generations a record rests on; a document written before records stored
    them ran ``prompts`` x ``seeds`` per dataset."""
    return int(record.get("generations") or settings["prompts"] * settings["seeds"])


def _times_100(se):
    return None if se is None else 100 * se


def _verdict(record: dict) -> str:
    """The paired test of ``minus_baseline`` (:func:`~mspec_lab.experiments.paired_schemes.paired_t_test`)."""
    se = record["minus_baseline_se"]
    return paired_t_test(record["minus_baseline"], float("nan") if se is None else se,
                         record["generations"]).describe()


def write_round_rules(doc: dict, out: str | Path) -> Path:
    """Write ``out/round_rules.json``; returns its path."""
    path = Path(out) / ROUND_RULES_RESULTS.name
    write_json(path, doc)
    return path


def load_round_rules(path: str | Path | None = None) -> dict:
    """Read a results document (default: the committed run of the offline default)."""
    if path is None:
        import mspec

        path = Path(mspec.__file__).resolve().parents[1] / ROUND_RULES_RESULTS
    return json.loads(Path(path).read_text(encoding="utf-8"))
