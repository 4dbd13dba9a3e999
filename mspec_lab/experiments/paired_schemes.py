"""Paired block efficiency: every scheme's expected tokens per round, on the same rounds.

Sampled block efficiencies are noisy (one rejection more or less moves a generation by
tenths) and each scheme sees different rounds, so small differences between schemes drown
(:mod:`~mspec_lab.experiments.live_decoding`). Here one *reference* generation per (prompt, seed)
drafts ``max(drafts_k)`` rows per round. On every round, for each scheme and each K of
``drafts_k`` (the first K rows: the drafts are i.i.d.), the per-position round rule
(:meth:`mspec.rounds.per_position.PerPositionRule.expected_tokens`, made by
:func:`mspec.rounds.make_round_rule`) gives the expected number of tokens the round emits, with the scheme's randomness averaged
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
block efficiency is); standard errors are clustered by reference generation. Whether optimal
is ahead of or behind another scheme is decided by a two-sided paired t-test at level
:data:`TEST_LEVEL` (:func:`paired_t_test`), from :data:`MIN_PAIRS` reference generations on;
with fewer the report says the comparison has too few samples to test.

In a notebook: ``stats = summarize_rounds(run_rounds(pair, RoundsSettings.quick()))``. On the
command line, ``python -m mspec_lab rounds`` writes one row per (prompt, seed, scheme, K)
to ``rounds.csv`` when its reference generation is done (a rerun resumes), and the summary
to ``rounds.json``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

import numpy as np

from mspec_lab.experiments import paper
from mspec_lab.experiments.inputs import (SharedSettings, DATASETS, checked_choices, derived_seed,
                     load_dataset_prompts, with_progress)
from mspec_lab.experiments.report import (fmt, format_table, pair_label, print_block, print_smoke_banner,
                                          sample_note, smoke_test_fields, write_json)
from mspec_lab.experiments.results import ResultTable, RowBudget

__all__ = ["MIN_PAIRS", "ROUNDS_PER_CONTROL", "ROUND_SCHEMES", "SCHEME_VARIANTS", "TEST_LEVEL", "PairedTest",
           "RoundsRun", "RoundsSettings", "behind_lines", "cluster_mean_se", "control_adjusted", "paired_t_test",
           "report_rounds", "run_rounds", "summarize_rounds"]

ROUNDS_CONFIG_FIELDS = ["preset", "dataset", "prompt", "seed", "reference", "method", "num_drafts", "draft_length",
                 "draft_temperature", "target_temperature", "max_new_tokens"]
ROUNDS_VALUE_FIELDS = ["rounds", "per_round", "control"]
#: variants scored on the same rounds besides the registry schemes: name -> (scheme, params).
#: "optimal-tokens" is the optimal scheme with every token its own atom (the lexicographic
#: x); "optimal" (atoms="auto") uses ratio buckets at these vocabularies: both attain the
#: optimal acceptance, with different x
SCHEME_VARIANTS = {"optimal-tokens": ("optimal", {"atoms": "tokens"})}
#: what is scored on every round: the compared schemes and the variants
ROUND_SCHEMES = paper.COMPARED_SCHEMES + tuple(SCHEME_VARIANTS)


@dataclass(frozen=True)
class RoundsSettings(SharedSettings):
    """Settings of the paired block efficiency; the defaults are the full run.

    Attributes:
        main_dataset: dataset of the prompts (default Dolly, as Table 1).
        prompts, seeds: prompts, and seeds per prompt: one reference generation each.
        max_new_tokens: tokens per reference generation.
        draft_length: L.
        drafts_k: values of K (the reference generation drafts the largest).
        reference: the compared scheme that drives the reference generations.
        variants: which of :data:`SCHEME_VARIANTS` are scored besides the compared schemes.
        draft_temperature, target_temperature, data_source, max_chars, seed: as in
            :class:`~mspec_lab.experiments.acceptance.AcceptanceSettings`.
    """

    main_dataset: str = "dolly"
    prompts: int = 4
    seeds: int = 2
    max_new_tokens: int = 48
    draft_length: int = paper.DRAFT_LENGTH
    drafts_k: tuple[int, ...] = (2, 4, 8)
    reference: str = "optimal"
    variants: tuple[str, ...] = tuple(SCHEME_VARIANTS)
    #: how the settings differ under ``--quick`` (minutes on a CPU)
    QUICK: ClassVar[dict] = {"prompts": 2, "seeds": 1, "max_new_tokens": 24, "max_chars": 400}

    def __post_init__(self):
        checked_choices("main_dataset", self.main_dataset, DATASETS)
        checked_choices("reference", self.reference, paper.COMPARED_SCHEMES)
        object.__setattr__(self, "variants", checked_choices("variants", self.variants, tuple(SCHEME_VARIANTS)))
        object.__setattr__(self, "drafts_k", tuple(sorted(set(self.drafts_k))))
        super().__post_init__()


@dataclass
class RoundsRun:
    """What :func:`run_rounds` computed or read back: ``settings``, the pair's ``preset``,
    ``description`` and ``label``, and ``rows``, one per (prompt, seed, scheme, K) with the
    expected tokens of each round (``per_round``) and its control variates (``control``)."""

    settings: RoundsSettings
    preset: str
    pair: str
    label: str
    rows: list[dict] = field(default_factory=list)


def scheme_methods(drafts_k, variants=tuple(SCHEME_VARIANTS)) -> list[tuple[str, int]]:
    """``(scheme, K)`` evaluated on every round: the single-draft baseline, then every
    compared scheme and the ``variants``."""
    scored = [s for s in ROUND_SCHEMES if s in paper.COMPARED_SCHEMES or s in variants]
    return [("single", 1)] + [(s, k) for k in drafts_k for s in scored]


def expected_per_round(pair, prompt, seed: int, s: RoundsSettings) -> dict[tuple[str, int], tuple[list, list]]:
    """Run one reference generation; return each method's expected tokens on each round and
    its control variate (``L`` numbers per round)."""
    import torch

    from mspec.lm.decoding import speculative_generate
    from mspec.rounds import make_round_rule

    k_max, temp = max(s.drafts_k), s.draft_temperature
    out: dict[tuple[str, int], tuple[list, list]] = {m: ([], []) for m in scheme_methods(s.drafts_k, s.variants)}
    rules = {}
    for method, k in out:
        scheme, params = SCHEME_VARIANTS.get(method, (method, None))
        rules[method, k] = make_round_rule("per-position", scheme=scheme, scheme_params=params, num_drafts=k,
                                           draft_temperatures=temp)

    def on_round(drafted, draft_probs, target_probs):
        blocks, p, q = drafted.cpu().numpy(), draft_probs.cpu().numpy(), target_probs.cpu().numpy()
        for method, k in out:
            value, control = rules[method, k].expected_tokens(blocks[:k], p[:k], q[:k],
                                                              eos_token_id=pair.eos_token_id, control=True)
            out[method, k][0].append(value)
            out[method, k][1].append([float(z) for z in control])

    gen = torch.Generator().manual_seed(derived_seed(seed, prompt.tag))
    speculative_generate(list(prompt.ids), draft_model=pair.draft_model, target_model=pair.target_model,
                         scheme=s.reference, num_drafts=k_max, draft_length=s.draft_length,
                         draft_temperatures=temp, target_temperature=s.target_temperature,
                         max_new_tokens=s.max_new_tokens, eos_token_id=pair.eos_token_id, generator=gen,
                         on_round=on_round)
    return out


def run_rounds(pair, settings: RoundsSettings | None = None, *, out: str | Path | None = None,
               budget: RowBudget | None = None, progress: bool = False) -> RoundsRun:
    """Score every scheme on the rounds of the reference generations (or read stored rows back).

    Args:
        pair: :class:`mspec.lm.models.ModelPair`; its ``name`` goes into the row keys.
        settings: :class:`RoundsSettings` (default: the full run).
        out: folder of ``rounds.csv``; ``None`` keeps the rows in memory.
        budget: how many new rows may be computed (:class:`RowBudget`; default: all).
        progress: show a progress bar (``tqdm``; the command line does).

    Raises:
        StopSweep: the budget ran out (the rows computed so far are stored).
    """
    s = settings or RoundsSettings()
    table = ResultTable(None if out is None else Path(out) / "rounds.csv", config_fields=ROUNDS_CONFIG_FIELDS,
                        value_fields=ROUNDS_VALUE_FIELDS, budget=budget)
    prompts = load_dataset_prompts(pair, s.main_dataset, s.prompts, source=s.data_source, max_chars=s.max_chars)
    run = RoundsRun(s, pair.name, pair.description, pair_label(pair, s.draft_temperature))
    jobs = [(prompt, s.seed + i) for prompt in prompts for i in range(s.seeds)]
    for prompt, seed in with_progress(jobs, progress, desc="reference generations", unit="gen"):
        run.rows += _generation_rows(pair, prompt, seed, s, table)
    return run


def _generation_rows(pair, prompt, seed: int, s: RoundsSettings, table: ResultTable) -> list[dict]:
    """The rows of one reference generation; runs it only when a row is missing."""
    base = {"preset": pair.name, "dataset": prompt.dataset, "prompt": prompt.tag, "seed": seed,
            "reference": s.reference, "draft_length": s.draft_length, "draft_temperature": s.draft_temperature,
            "target_temperature": s.target_temperature, "max_new_tokens": s.max_new_tokens}
    cache = {}

    def values(scheme, k):
        if "rounds" not in cache:
            cache["rounds"] = expected_per_round(pair, prompt, seed, s)
        per_round, control = cache["rounds"][scheme, k]
        return {"rounds": len(per_round), "per_round": per_round, "control": control}

    return [table.compute({**base, "method": scheme, "num_drafts": k}, lambda job=(scheme, k): values(*job))
            for scheme, k in scheme_methods(s.drafts_k, s.variants)]


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


def _stack(gens: dict, keys: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(values, controls, groups)`` of the generations ``keys``, their rounds concatenated;
    ``groups`` numbers the generation of each round."""
    if not keys:
        return np.zeros(0), np.zeros((0, 0)), np.zeros(0)
    values = np.concatenate([gens[g][0] for g in keys])
    controls = np.concatenate([gens[g][1] for g in keys])
    groups = np.concatenate([np.full(gens[g][0].size, i) for i, g in enumerate(keys)])
    return values, controls, groups


def _estimate(values: np.ndarray, controls: np.ndarray, groups: np.ndarray) -> dict:
    """Mean ± clustered s.e. with the control fit subtracted, and without it (``raw_``); the
    rounds and the reference generations (clusters) they come from."""
    raw_mean, raw_se = cluster_mean_se(values, groups)
    mean, se = cluster_mean_se(control_adjusted(values, controls), groups)
    return {"mean": mean, "se": se, "raw_mean": raw_mean, "raw_se": raw_se, "rounds": int(values.size),
            "generations": int(np.unique(groups).size)}


def summarize_rounds(run: RoundsRun) -> dict:
    """Per method: mean expected tokens per round (with and without the control); per K:
    paired differences optimal - other, each with its :func:`paired_t_test` (``"test"``).
    Means pooled over rounds, standard errors clustered by reference generation."""
    by = {}
    for row in run.rows:
        by.setdefault((row["method"], int(row["num_drafts"])), {})[(row["prompt"], row["seed"])] = _per_round(row)
    stats = {"block_efficiency": {f"{scheme} K={k}": _estimate(*_stack(gens, sorted(gens)))
                                  for (scheme, k), gens in by.items()},
             "optimal_minus": {}}
    for k in run.settings.drafts_k:
        opt = by.get(("optimal", k), {})
        for scheme in ROUND_SCHEMES:
            other = by.get((scheme, k), {})
            keys = sorted(g for g in opt if g in other and opt[g][0].size)
            if scheme == "optimal" or not keys:
                continue
            v_opt, z_opt, groups = _stack(opt, keys)
            v_other, z_other, _ = _stack(other, keys)
            d = _estimate(v_opt - v_other, np.hstack([z_opt, z_other]), groups)
            d["test"] = dataclasses.asdict(paired_t_test(d["mean"], d["se"], d["generations"]))
            stats["optimal_minus"][f"{scheme} K={k}"] = d
    return stats


# -- the paired test -----------------------------------------------------------------------------
#: level of the two-sided paired t-test that decides 'ahead' / 'behind' ...
TEST_LEVEL = 0.05
#: ... from this many pairs (reference generations) on: a clustered s.e. from fewer clusters
#: is itself too noisy to test with
MIN_PAIRS = 8
#: how the reports name the test
TEST_NAME = ("two-sided paired t-test (t = mean difference / s.e. clustered by reference generation, "
             "generations - 1 degrees of freedom)")


@dataclass(frozen=True)
class PairedTest:
    """The outcome of :func:`paired_t_test` on a paired difference, e.g. optimal - other.

    Attributes:
        mean, se: the mean difference and its standard error.
        pairs: the independent pairs it rests on (reference generations).
        t, p_value: ``mean / se`` and its two-sided p-value on ``pairs - 1`` degrees of
            freedom; nan when not tested.
        level, min_pairs: the test's level, and the fewest pairs it tests.
        tested: at least ``min_pairs`` pairs and a finite standard error.
        significant: tested, and ``p_value < level``.
    """

    mean: float
    se: float
    pairs: int
    t: float
    p_value: float
    level: float
    min_pairs: int
    tested: bool
    significant: bool

    def describe(self) -> str:
        """``"ahead (p = 0.003)"``, ``"behind (p = 0.01)"``, ``"level (p = 0.41)"`` (the
        test does not reject a zero difference) or ``"untested (n = 2 < 8)"``."""
        if not self.tested:
            return f"untested (n = {self.pairs} < {self.min_pairs})"
        word = ("ahead" if self.mean > 0 else "behind") if self.significant else "level"
        return f"{word} (p = {self.p_value:.2g})"


def paired_t_test(mean: float, se: float, pairs: int, *, level: float = TEST_LEVEL,
                  min_pairs: int = MIN_PAIRS) -> PairedTest:
    """Two-sided paired t-test of a zero mean difference: ``t = mean / se`` on ``pairs - 1``
    degrees of freedom. With one difference per pair and ``se`` its plain standard error this
    is the textbook paired t-test; with the rounds of a generation pooled and ``se`` clustered
    by generation (:func:`cluster_mean_se`), its cluster-robust form.

    Args:
        mean, se: the mean of the paired differences and its standard error.
        pairs: how many independent pairs (clusters) ``se`` rests on.
        level: reject (``significant``) when the p-value is below it.
        min_pairs: with fewer pairs, or no finite ``se``, nothing is tested.

    Raises:
        ValueError: ``level`` outside (0, 1) or ``min_pairs`` below 2.
    """
    from scipy import stats

    if not 0.0 < level < 1.0:
        raise ValueError(f"`level` must lie in (0, 1), e.g. 0.05; got {level}")
    if min_pairs < 2:
        raise ValueError(f"`min_pairs` must be >= 2 (a t-test needs a standard error); got {min_pairs}")
    pairs = int(pairs)
    if pairs < min_pairs or not np.isfinite(se) or not np.isfinite(mean):
        return PairedTest(mean, se, pairs, math.nan, math.nan, level, min_pairs, False, False)
    t = mean / se if se > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))
    p_value = float(2.0 * stats.t.sf(abs(t), pairs - 1))
    return PairedTest(mean, se, pairs, float(t), p_value, level, min_pairs, True, p_value < level)


def behind_lines(tests: dict[str, PairedTest]) -> list[str]:
    """What a report says under its table about where optimal is behind: "significantly"
    only for comparisons whose test rejects at its level, with their p-values; the
    comparisons with too few pairs to test are named as such.

    Args:
        tests: comparison (e.g. ``"spectr K=2"``) -> its :func:`paired_t_test` of optimal - it.
    """
    if not tests:
        return []
    first = next(iter(tests.values()))
    how = f"{TEST_NAME}, level {first.level:g}"
    behind = [f"{name} (p = {t.p_value:.2g})" for name, t in tests.items() if t.significant and t.mean < 0]
    untested = [t.pairs for t in tests.values() if not t.tested]
    lines = []
    if behind:
        lines.append(f"optimal significantly behind ({how}): " + ", ".join(behind))
    elif len(untested) < len(tests):
        lines.append(f"optimal behind: nowhere in the {len(tests) - len(untested)} tested comparisons ({how})")
    if untested:
        lines.append(f"too few samples to test {len(untested)} of {len(tests)} comparisons: they rest on "
                     f"{min(untested)} reference generation(s), the test needs at least {first.min_pairs} "
                     "(raise --gen-prompts or --seeds)")
    return lines


# -- report --------------------------------------------------------------------------------------
def _table_rows(stats: dict, drafts_k) -> tuple[list[list[str]], dict[str, PairedTest]]:
    """The printed table's rows, and the paired test of every comparison optimal - other."""
    body, tests = [], {}
    for k in drafts_k:
        for scheme in ROUND_SCHEMES:
            be = stats["block_efficiency"].get(f"{scheme} K={k}")
            if be is None:  # a variant this run did not score
                continue
            row = _estimate_cells(be, 3)
            d = stats["optimal_minus"].get(f"{scheme} K={k}")
            if d is None:
                row += ["", "", ""]
            else:
                tests[f"{scheme} K={k}"] = test = PairedTest(**d["test"])
                row += [*_estimate_cells(d, 4)[:2], test.describe()]
            body.append([scheme, str(k), *row])
    body.append(["single", "1", *_estimate_cells(stats["block_efficiency"]["single K=1"], 3), "", "", ""])
    return body, tests


def _estimate_cells(st: dict, digits: int) -> list[str]:
    """Mean ± s.e. with and without the control (n: the reference generations), then the rounds."""
    n = st["generations"]
    return [fmt(st["mean"], st["se"], digits, n=n), fmt(st["raw_mean"], st["raw_se"], digits, n=n), str(st["rounds"])]


def report_rounds(run: RoundsRun, out: str | Path | None = None) -> dict:
    """Print the paired table; with ``out``, write ``rounds.json`` there. Returns the stats."""
    stats, s = summarize_rounds(run), run.settings
    print_smoke_banner(s.smoke_test)
    print(f"\nModel pair: {run.pair}")
    print(f"Reference generations: {s.prompts} prompt(s) x {s.seeds} seed(s), {s.main_dataset}, "
          f"{s.max_new_tokens} tokens, L = {s.draft_length}, drafts at T = {s.draft_temperature:g}, "
          f"driven by {s.reference!r}")
    body, tests = _table_rows(stats, s.drafts_k)
    print_block("Paired block efficiency: expected tokens per round on the same rounds",
                format_table(["method", "K", "tokens / round", "without control", "rounds",
                              "optimal - this", "without control", "optimal is"], body),
                [f"ours = {run.label}",
                 "tokens / round: mean over rounds of the expected tokens given the drafts (selection "
                 "randomness averaged out exactly, mspec.lm.decoding.expected_round_tokens), minus the fitted "
                 "zero-mean control variate",
                 sample_note([st["generations"] for st in stats["block_efficiency"].values()],
                             "reference generations", over="(rounds pooled, s.e. clustered by generation)"),
                 f"optimal - this: the same, paired round by round; optimal is 'ahead' / 'behind' when a {TEST_NAME} "
                 f"rejects a zero difference at level {TEST_LEVEL:g} (p-value printed), 'level' when it does not, "
                 f"'untested' with fewer than {MIN_PAIRS} reference generations",
                 "optimal = ratio buckets as atoms (the default at this vocabulary); optimal-tokens = every "
                 "token its own atom (the lexicographic x): the same acceptance, a different x"
                 if "optimal-tokens" in s.variants else ""], smoke_test=s.smoke_test)
    print()
    for line in behind_lines(tests):
        print(line)
    if out is not None:
        out = Path(out)
        write_json(out / "rounds.json", {**smoke_test_fields(s.smoke_test), "model_pair": run.pair,
                                         "label": run.label, "settings": dataclasses.asdict(s), "stats": stats})
        print(f"\nwrote {out / 'rounds.csv'}, {out / 'rounds.json'}")
    return stats
