"""The numbers of the reproducing-the-paper chapter: one command, one committed file.

``python -m mspec_lab paper-run --data-source local --threads 1`` runs, on one model pair
(default: the offline default), everything chapter 9 shows, and writes it with its
provenance (model, settings, code version, date, wall time) to
``results/offline_default/paper_run.json``, which the repository commits and the chapter
reads (:func:`load_results`). In order:

1. **Temperature sweep** (``sweep``): the exact token-level acceptance at K = 2 of every
   scheme on the positions of the XSum prompts, for a grid of draft temperatures. The
   temperature whose optimal acceptance comes closest to the paper's (Table 3, XSum, K = 2:
   0.5009) becomes the **paper regime**; the other regime is the **default** draft
   temperature (1.5).
2. **Table 3** (``table3``, ``table3_differences``): exact acceptance of every scheme at
   every position, K = 2, 4, 8, on every dataset, in both regimes; mean ± standard error
   clustered by prompt, and the paired differences between schemes.
3. **Table 4** (``topk``) and **Table 2** (``truncation``) at the token level: both
   distributions restricted to their top k tokens (main dataset), and the IS scheme's
   gap to the optimum for each truncation setting (K = 2, every dataset), in both regimes.
4. **Block efficiency** (``rounds``, ``rounds_differences``): every scheme's exact expected
   tokens per round on the same rounds (:mod:`~mspec_lab.experiments.paired_schemes`), control
   adjusted, s.e. clustered by generation, on the main dataset, in both regimes.
5. **Check** (``check``): the per-position acceptances of the first prompt, which a reader
   can recompute in seconds to see that the file matches the code.

Every table is a list of records (plain dicts), read with :func:`records` / :func:`record`;
:func:`check_results` lists every inconsistency of a results document (the tests run it on
the committed file). The rounds' CSV rows go to a work folder (default
``bench-results/paper-run``, resumable); the token-level values are computed in memory.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from mspec_lab.experiments import paper
from mspec_lab.experiments.inputs import (
    DATASETS,
    SharedSettings,
    checked_choices,
    derived_seed,
    load_dataset_prompts,
    with_progress,
)
from mspec_lab.experiments.report import (fmt, format_table, pair_label, print_block, print_smoke_banner,
                                          sample_note, smoke_test_fields)
from mspec_lab.experiments.results import RowBudget

__all__ = [
    "PAPER_RUN_RESULTS",
    "REGIMES",
    "ROUNDS_MIN_GENERATIONS",
    "ROUNDS_TOLERANCE_SE",
    "SCHEMA",
    "PaperRunSettings",
    "check_results",
    "choose_temperature",
    "committed_file",
    "default_results_path",
    "load_results",
    "paper_run",
    "print_summary",
    "record",
    "records",
    "run_paper",
    "write_results",
]

#: format of the results document (a change of its structure changes the number)
SCHEMA = "mspec-paper-run/1"
#: the committed run of the offline default, relative to the repository root
PAPER_RUN_RESULTS = Path("results") / "offline_default" / "paper_run.json"
#: the two draft temperatures of every table: the package's default, and the one whose
#: acceptance matches the paper's (chosen by the sweep)
REGIMES = ("default", "paper")
#: the tables of a results document (lists of records)
TABLES = ("sweep", "table3", "table3_differences", "topk", "truncation", "rounds", "rounds_differences")
#: the scheme pairs whose paired differences ``table3_differences`` stores
PAIRS = (("optimal", "is"), ("optimal", "is-ratio"), ("optimal", "spectr"), ("optimal", "specinfer"),
         ("is-ratio", "is"), ("is", "spectr"), ("is", "specinfer"), ("is-ratio", "spectr"),
         ("is-ratio", "specinfer"), ("spectr", "specinfer"))
#: a token-level mean may exceed the optimum's by float rounding only
EXACT_TOLERANCE = 1e-9
#: a block-efficiency difference optimal - other may be negative by this many s.e. (noise) ...
ROUNDS_TOLERANCE_SE = 3.0
#: ... checked from this many generations on (a clustered s.e. needs clusters)
ROUNDS_MIN_GENERATIONS = 8
#: the draft temperatures of the sweep
SWEEP_TEMPERATURES = (1.25, 1.5, 1.75, 1.8, 1.85, 1.9, 1.95, 2.0, 2.05, 2.1, 2.15, 2.2, 2.25, 2.5, 3.0)


@dataclass(frozen=True)
class PaperRunSettings(SharedSettings):
    """Settings of the full run; the defaults are what the committed file ran.

    Attributes:
        datasets: datasets of Tables 3 and 2 (:data:`~mspec_lab.experiments.inputs.DATASETS`).
        prompts: prompts per dataset (token level); ``positions``: continuation positions
            per prompt (fewer when the continuation ends).
        drafts: values of K of Table 3.
        is_s, is_alphabet: the IS scheme's LP tokens and ranked tokens (the paper's 5, 40).
        sweep_dataset, sweep_drafts, sweep_temperatures: where the draft temperature is
            swept (the paper's Table 3 on XSum, K = 2).
        calibrate_to: the optimal acceptance the paper regime aims at (the paper's).
        main_dataset: dataset of Table 4 and of the block efficiency (the paper: Dolly).
        top_k, topk_drafts: Table 4's top-k values and values of K.
        alphabets, lp_sizes: Table 2's IS alphabets (at s = 5) and LP sizes (at alphabet 40).
        rounds_prompts, rounds_seeds, rounds_max_new_tokens, rounds_drafts: the reference
            generations of the block efficiency in the default regime (prompts x seeds
            generations of that many tokens, drafting max(K) rows).
        paper_rounds_prompts: prompts of the block efficiency in the paper regime (its
            rounds are shorter, so it costs more per token).
        draft_length: L.
        check_positions: positions of the first prompt stored for the reader's check.
        draft_temperature: the default regime's draft temperature.
        target_temperature, data_source, max_chars, seed: as in
            :class:`~mspec_lab.experiments.acceptance.AcceptanceSettings`.
    """

    datasets: tuple[str, ...] = DATASETS
    prompts: int = 16
    positions: int = 32
    drafts: tuple[int, ...] = (2, 4, 8)
    is_s: int = 5
    is_alphabet: int = 40
    sweep_dataset: str = "xsum"
    sweep_drafts: int = 2
    sweep_temperatures: tuple[float, ...] = SWEEP_TEMPERATURES
    calibrate_to: float = paper.TABLE3_ACCEPTANCE["xsum"]["optimal"][2]
    main_dataset: str = "dolly"
    top_k: tuple[int, ...] = tuple(paper.TABLE4_TOP_K)
    topk_drafts: tuple[int, ...] = (2, 3)
    alphabets: tuple[int, ...] = tuple(paper.TABLE2_ALPHABET)
    lp_sizes: tuple[int, ...] = tuple(paper.TABLE2_S)
    rounds_prompts: int = 20
    rounds_seeds: int = 2
    rounds_max_new_tokens: int = 32
    rounds_drafts: tuple[int, ...] = (2, 4, 8)
    paper_rounds_prompts: int = 12
    draft_length: int = paper.DRAFT_LENGTH
    check_positions: int = 8
    #: how the settings differ under ``--quick`` (a minute on a CPU; for tests and a first look)
    QUICK: ClassVar[dict] = {"prompts": 2, "positions": 8, "max_chars": 400, "sweep_temperatures": (1.5, 2.0, 2.5),
                             "rounds_prompts": 2, "rounds_seeds": 1, "rounds_max_new_tokens": 12,
                             "paper_rounds_prompts": 2, "check_positions": 4}

    def __post_init__(self):
        object.__setattr__(self, "datasets", checked_choices("datasets", self.datasets, DATASETS))
        checked_choices("sweep_dataset", self.sweep_dataset, self.datasets)
        checked_choices("main_dataset", self.main_dataset, self.datasets)
        for name in ("drafts", "top_k", "topk_drafts", "alphabets", "lp_sizes", "rounds_drafts"):
            object.__setattr__(self, name, tuple(sorted({int(v) for v in getattr(self, name)})))
        object.__setattr__(self, "sweep_temperatures",
                           tuple(sorted({float(t) for t in self.sweep_temperatures})))
        if self.draft_temperature not in self.sweep_temperatures:
            raise ValueError(f"`sweep_temperatures` must include the default draft temperature "
                             f"{self.draft_temperature:g}, got {self.sweep_temperatures}")
        if self.sweep_drafts not in self.drafts or 2 not in self.drafts:
            raise ValueError(f"`drafts` {self.drafts} must include 2 (Table 2) and `sweep_drafts` "
                             f"({self.sweep_drafts})")
        for name in ("prompts", "positions", "rounds_prompts", "rounds_seeds", "rounds_max_new_tokens",
                     "paper_rounds_prompts", "check_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        super().__post_init__()

    @property
    def is_params(self) -> dict:
        return {"s": self.is_s, "alphabet": self.is_alphabet}

    def table3_jobs(self) -> list[tuple[str, int]]:
        """``(scheme, K)`` of Table 3: one draft, then every compared scheme at every K."""
        return [("single", 1)] + [(s, k) for k in self.drafts for s in paper.COMPARED_SCHEMES]

    def truncation_settings(self) -> list[tuple[int, int]]:
        """``(s, alphabet)`` of Table 2: the alphabets at s = is_s, the LP sizes at the alphabet."""
        pairs = [(self.is_s, a) for a in self.alphabets] + [(s, self.is_alphabet) for s in self.lp_sizes]
        return list(dict.fromkeys(pairs))


# -- statistics ----------------------------------------------------------------------------------
def clustered_summary(values, groups) -> dict:
    """``{"mean", "se", "n", "clusters"}``: mean over positions, s.e. clustered by ``groups``."""
    from mspec_lab.experiments.paired_schemes import cluster_mean_se

    values, groups = np.asarray(values, dtype=float), np.asarray(groups)
    mean, se = cluster_mean_se(values, groups)
    return {"mean": mean, "se": se, "n": int(values.size), "clusters": int(np.unique(groups).size)}


def choose_temperature(means: dict[float, float], target: float) -> float:
    """The temperature whose mean acceptance is closest to ``target`` (the lower on a tie)."""
    return min(sorted(means), key=lambda t: abs(means[t] - target))


# -- token level ---------------------------------------------------------------------------------
class _Positions:
    """Per-position values of one (regime, dataset): job -> list, and the prompt of each position."""

    def __init__(self):
        self.values: dict[tuple, list[float]] = {}
        self.groups: list[int] = []

    def add(self, prompt_index: int, per_job: dict[tuple, list[float]]) -> None:
        n = len(next(iter(per_job.values())))
        self.groups += [prompt_index] * n
        for job, vals in per_job.items():
            self.values.setdefault(job, []).extend(vals)

    def stat(self, job) -> dict:
        return clustered_summary(self.values[job], self.groups)

    def diff(self, a, b) -> dict:
        return clustered_summary(np.subtract(self.values[a], self.values[b]), self.groups)


def _acceptances(draft, target, jobs, is_params) -> dict[tuple, list[float]]:
    """Exact acceptance of every ``(scheme, K, params)`` job at every row of ``draft``, ``target``."""
    from mspec_lab.experiments.acceptance import token_acceptance

    out = {}
    for scheme, k, params in jobs:
        out[scheme, k, params] = [
            token_acceptance(scheme, draft=draft[j], target=target[j], num_drafts=k,
                             params=dict(params) if params else (is_params if scheme in paper.IS_SCHEMES else None))
            for j in range(target.shape[0])]
    return out


def distributions_from_logits(logits, temperature: float, top_k=None) -> np.ndarray:
    from mspec.distributions import distribution_from_logits

    return distribution_from_logits(logits, temperature=temperature, top_k=top_k).cpu().numpy()


def prompt_logits(pair, prompt, s: PaperRunSettings):
    from mspec_lab.experiments.acceptance import collect_logits

    return collect_logits(pair, prompt.ids, positions=s.positions, target_temperature=s.target_temperature,
                          seed=derived_seed(s.seed, prompt.tag))


def _sweep(pair, prompts, s: PaperRunSettings, cache: dict, progress: bool) -> tuple[list[dict], float]:
    """The sweep's records and the chosen temperature; fills ``cache`` with the prompts' logits."""
    k = s.sweep_drafts
    jobs = [("single", 1, ())] + [(scheme, k, ()) for scheme in paper.COMPARED_SCHEMES]
    per_t = {t: _Positions() for t in s.sweep_temperatures}
    for i, prompt in enumerate(with_progress(prompts, progress, desc=f"sweep {s.sweep_dataset}", unit="prompt")):
        cache[prompt.tag] = prompt_logits(pair, prompt, s)
        draft_logits, target_logits, _ = cache[prompt.tag]
        target = distributions_from_logits(target_logits, s.target_temperature)
        for t in s.sweep_temperatures:
            per_t[t].add(i, _acceptances(distributions_from_logits(draft_logits, t), target, jobs, s.is_params))
    rows = [{"dataset": s.sweep_dataset, "draft_temperature": t, "scheme": scheme, "K": kk,
             **per_t[t].stat((scheme, kk, ()))}
            for t in s.sweep_temperatures for scheme, kk, _ in jobs]
    chosen = choose_temperature({t: per_t[t].stat(("optimal", k, ()))["mean"] for t in s.sweep_temperatures},
                                s.calibrate_to)
    return rows, chosen


def _token_level(pair, prompts_by_dataset, s: PaperRunSettings, regimes: dict[str, float], cache: dict,
                 progress: bool) -> dict[str, list[dict]]:
    """Tables 3, 4 and 2 at the token level, in every regime; the check's values."""
    table3_jobs = [(scheme, k, ()) for scheme, k in s.table3_jobs()]
    trunc_jobs = [(scheme, 2, (("alphabet", a), ("s", ls))) for scheme in paper.IS_SCHEMES
                  for ls, a in s.truncation_settings()]
    top_ks = (None, *s.top_k)
    topk_jobs = [("single", 1, ())] + [(scheme, k, ()) for k in s.topk_drafts for scheme in paper.COMPARED_SCHEMES]
    main = {(r, d): _Positions() for r in regimes for d in s.datasets}
    trunc = {(r, d): _Positions() for r in regimes for d in s.datasets}
    topk = {(r, t): _Positions() for r in regimes for t in top_ks}
    for dataset in s.datasets:
        prompts = prompts_by_dataset[dataset]
        for i, prompt in enumerate(with_progress(prompts, progress, desc=f"token level {dataset}", unit="prompt")):
            draft_logits, target_logits, _ = cache.pop(prompt.tag, None) or prompt_logits(pair, prompt, s)
            target = distributions_from_logits(target_logits, s.target_temperature)
            for regime, t in regimes.items():
                draft = distributions_from_logits(draft_logits, t)
                main[regime, dataset].add(i, _acceptances(draft, target, table3_jobs, s.is_params))
                gaps = _acceptances(draft, target, trunc_jobs, s.is_params)
                for job in (("optimal", 2, ()), ("spectr", 2, ()), ("specinfer", 2, ())):  # K = 2 of Table 3
                    gaps[job] = main[regime, dataset].values[job][-target.shape[0]:]
                trunc[regime, dataset].add(i, gaps)
                if dataset == s.main_dataset:
                    for top_k in top_ks:
                        topk[regime, top_k].add(i, _acceptances(
                            distributions_from_logits(draft_logits, t, top_k), distributions_from_logits(target_logits, s.target_temperature,
                                                                                   top_k), topk_jobs, s.is_params))
    out = {"table3": [], "table3_differences": [], "topk": [], "truncation": []}
    for (regime, dataset), pos in main.items():
        base = {"regime": regime, "draft_temperature": regimes[regime], "dataset": dataset}
        out["table3"] += [{**base, "scheme": scheme, "K": k, **pos.stat((scheme, k, ()))}
                          for scheme, k, _ in table3_jobs]
        out["table3_differences"] += [{**base, "K": k, "a": a, "b": b, **pos.diff((a, k, ()), (b, k, ()))}
                                      for k in s.drafts for a, b in PAIRS]
    for (regime, top_k), pos in topk.items():
        base = {"regime": regime, "draft_temperature": regimes[regime], "dataset": s.main_dataset, "top_k": top_k}
        out["topk"] += [{**base, "scheme": scheme, "K": k, **pos.stat((scheme, k, ()))}
                        for scheme, k, _ in topk_jobs]
    for (regime, dataset), pos in trunc.items():
        base = {"regime": regime, "draft_temperature": regimes[regime], "dataset": dataset, "K": 2}
        optimal = ("optimal", 2, ())
        for job in trunc_jobs + [("spectr", 2, ()), ("specinfer", 2, ())]:
            params = dict(job[2])
            out["truncation"].append({
                **base, "scheme": job[0], "s": params.get("s"), "alphabet": params.get("alphabet"),
                "acceptance": pos.stat(job)["mean"], **pos.diff(optimal, job)})
    first = prompts_by_dataset[s.sweep_dataset][0]
    check = {"dataset": s.sweep_dataset, "prompt": first.tag, "positions": s.positions,
             "K": s.sweep_drafts, "values": []}
    for regime, t in regimes.items():
        pos = main[regime, s.sweep_dataset]
        n = min(s.check_positions, pos.groups.count(0))
        for scheme in ("single", *paper.COMPARED_SCHEMES):
            k = 1 if scheme == "single" else s.sweep_drafts
            check["values"].append({"regime": regime, "draft_temperature": t, "scheme": scheme, "K": k,
                                    "acceptance": pos.values[scheme, k, ()][:n]})
    out["check"] = check
    return out


# -- block efficiency ----------------------------------------------------------------------------
def _rounds(pair, s: PaperRunSettings, regime: str, temperature: float, work, budget, progress) -> dict:
    from mspec_lab.experiments.paired_schemes import RoundsSettings, run_rounds, summarize_rounds

    settings = RoundsSettings(
        main_dataset=s.main_dataset, prompts=s.rounds_prompts if regime == "default" else s.paper_rounds_prompts,
        seeds=s.rounds_seeds, max_new_tokens=s.rounds_max_new_tokens, draft_length=s.draft_length,
        drafts_k=s.rounds_drafts, reference="optimal", variants=(), draft_temperature=temperature,
        target_temperature=s.target_temperature, data_source=s.data_source, max_chars=s.max_chars, seed=s.seed)
    run = run_rounds(pair, settings, out=work, budget=budget, progress=progress)
    stats = summarize_rounds(run)
    base = {"regime": regime, "draft_temperature": temperature, "dataset": s.main_dataset,
            "draft_length": s.draft_length, "generations": len({(r["prompt"], r["seed"]) for r in run.rows})}
    out = {"rounds": [], "rounds_differences": []}
    for key, st in stats["block_efficiency"].items():
        method, _, k = key.rpartition(" K=")
        out["rounds"].append({**base, "scheme": method, "K": int(k), **st})
    for key, st in stats["optimal_minus"].items():
        method, _, k = key.rpartition(" K=")
        out["rounds_differences"].append({**base, "K": int(k), "a": "optimal", "b": method,
                                          **{f: v for f, v in st.items() if f not in ("generations", "test")}})
    return out


# -- the run -------------------------------------------------------------------------------------
def run_paper(pair, settings: PaperRunSettings | None = None, *, work: str | Path | None = None,
              progress: bool = False) -> dict:
    """Compute every table of the results document (without its provenance).

    Args:
        pair: :class:`mspec.lm.models.ModelPair`.
        settings: :class:`PaperRunSettings` (default: the full run).
        work: folder of the rounds' resumable CSV rows; ``None`` keeps them in memory.
        progress: show progress bars (``tqdm``).

    Returns:
        ``{"schema", "settings", "regimes", "sweep", "table3", ..., "check", "rows"}``;
        ``rows``: how many rounds rows were computed and how many read back from ``work``.
    """
    s = settings or PaperRunSettings()
    prompts = {d: load_dataset_prompts(pair, d, s.prompts, source=s.data_source, max_chars=s.max_chars)
               for d in s.datasets}
    cache: dict = {}
    sweep, chosen = _sweep(pair, prompts[s.sweep_dataset], s, cache, progress)
    regimes = {"default": s.draft_temperature, "paper": chosen}
    doc = {"schema": SCHEMA, **smoke_test_fields(s.smoke_test), "settings": dataclasses.asdict(s),
           "regimes": {
               "default": {"draft_temperature": s.draft_temperature,
                           "how": "the package's default draft temperature"},
               "paper": {"draft_temperature": chosen,
                         "how": f"the sweep temperature whose optimal acceptance on {s.sweep_dataset}, "
                                f"K = {s.sweep_drafts}, is closest to the paper's {s.calibrate_to:.4f}"}},
           "prompts": {d: [p.tag for p in ps] for d, ps in prompts.items()},
           "sweep": sweep}
    doc.update(_token_level(pair, prompts, s, regimes, cache, progress))
    budget = RowBudget()
    doc["rounds"], doc["rounds_differences"] = [], []
    for regime, t in regimes.items():
        part = _rounds(pair, s, regime, t, work, budget, progress)
        doc["rounds"] += part["rounds"]
        doc["rounds_differences"] += part["rounds_differences"]
    doc["rows"] = {"rounds_rows_computed": budget.computed}
    return doc


def paper_run(preset: str, settings: PaperRunSettings | None = None, *, out: str | Path | None,
              work: str | Path | None = None, command: str = "", progress: bool = False) -> dict:
    """Load the pair, run :func:`run_paper`, add the provenance, write ``out/paper_run.json``.

    The wall time recorded covers everything from loading the models to writing the file.

    Returns:
        The results document.
    """
    from mspec_lab.models import load_pair

    start, started = time.perf_counter(), now()
    code = code_version()  # before the run: the code that runs, whatever changes meanwhile
    pair = load_pair(preset)
    s = settings or PaperRunSettings()
    doc = run_paper(pair, s, work=work, progress=progress)
    doc["provenance"] = provenance(pair, command=command, code=code, started=started, start=start,
                                   data_source=s.data_source)
    head = {name: doc.pop(name) for name in ("schema", "smoke_test", "smoke_test_note") if name in doc}
    doc = {**head, "provenance": doc.pop("provenance"), **doc}
    if out is not None:
        path = Path(out) / PAPER_RUN_RESULTS.name
        write_results(doc, path)
        doc["path"] = str(path)
    return doc


def provenance(pair, *, command: str, code: dict, started: str, start: float, data_source: str) -> dict:
    """Where a results document comes from: the model pair, the command, the code
    (:func:`code_version`, taken before the run), when and how long, and the machine.
    ``start`` is the ``time.perf_counter()`` reading the wall time counts from."""
    import torch

    return {
        "model_pair": pair.description, "label": pair_label(pair, None), "preset": pair.name,
        "vocab_size": int(pair.vocab_size), "command": command, **code,
        "started": started, "date": now(), "wall_time_s": round(time.perf_counter() - start, 1),
        "torch_threads": torch.get_num_threads(), "torch_version": torch.__version__,
        "transformers_version": _version("transformers"), "python": platform.python_version(),
        "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "data": _data_source(data_source),
    }


def write_results(doc: dict, path: str | Path) -> None:
    """Write a results document as JSON, one record of a table per line (nan as null)."""
    from mspec_lab.experiments.report import clean_for_json

    parts = []
    for key, value in doc.items():
        if key in TABLES:
            body = ",\n".join("  " + json.dumps(clean_for_json(r)) for r in value)
            parts.append(f" {json.dumps(key)}: [\n{body}\n ]")
        else:
            parts.append(f" {json.dumps(key)}: " + json.dumps(clean_for_json(value), indent=1).replace("\n", "\n "))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{\n" + ",\n".join(parts) + "\n}\n", encoding="utf-8")


def now() -> str:
    """The UTC time, to the second, ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def code_version() -> dict:
    """mspec's version, the repository's commit (and whether files differ from it), and a
    SHA-256 of the package's source files (the code that ran, committed or not)."""
    import mspec

    package = Path(mspec.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    info = {"mspec_version": mspec.__version__, "source_sha256": digest.hexdigest(),
            "git_commit": None, "git_dirty": None}
    root = package.parent
    if (root / ".git").exists():
        try:
            info["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                                text=True, check=True, timeout=30).stdout.strip()
            status = subprocess.run(["git", "status", "--porcelain", "--", "mspec", "mspec_lab"], cwd=root,
                                    capture_output=True, text=True, check=True, timeout=30).stdout
            info["git_dirty"] = bool(status.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return info


def _data_source(source: str) -> str:
    from mspec_lab.data import DATA_DIR_ENV

    folder = os.environ.get(DATA_DIR_ENV)
    where = f"${DATA_DIR_ENV} ({Path(folder).name or folder})" if folder else f"${DATA_DIR_ENV} unset"
    return f"data_source={source!r}; {where}"


# -- reading -------------------------------------------------------------------------------------
def default_results_path() -> Path:
    """The committed results file of the repository this package runs from."""
    import mspec

    return Path(mspec.__file__).resolve().parents[1] / PAPER_RUN_RESULTS


def load_results(path: str | Path | None = None, *, check: bool = True) -> dict:
    """Read a results document (default: the committed run, :func:`default_results_path`).

    Without ``path``, and without a repository around the package (``pip install`` from
    git, e.g. on Colab), the committed file is downloaded once from the repository and
    commit that pip installed (its ``direct_url.json``) into ``~/.cache/mspec``.

    Args:
        path: a ``paper_run.json`` file, or the folder holding it.
        check: raise when :func:`check_results` finds a problem.

    Raises:
        FileNotFoundError: no such file; the message says how to get it.
        ValueError: another schema, or (``check``) an inconsistent document.
    """
    path = Path(path) if path is not None else committed_file(PAPER_RUN_RESULTS)
    if path.is_dir():
        path = path / PAPER_RUN_RESULTS.name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no results file. It is committed in the repository ({PAPER_RUN_RESULTS.as_posix()}): "
            "clone the repository, or write one with `python -m mspec_lab paper-run --out FOLDER`")
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {SCHEMA!r}: rerun the command")
    if check:
        problems = check_results(doc)
        if problems:
            raise ValueError(f"{path} is inconsistent:\n  " + "\n  ".join(problems))
    return doc


def committed_file(relative: Path) -> Path:
    """A file committed in the repository (``relative`` to its root): the repository's copy
    when the package runs from one, else (``pip install`` from git, e.g. on Colab) a copy
    downloaded once from the commit pip installed, else the repository path (missing)."""
    import mspec

    path = Path(mspec.__file__).resolve().parents[1] / relative
    return path if path.is_file() else (_download_committed(relative) or path)


def _download_committed(relative: Path) -> Path | None:
    """The file ``relative`` of the GitHub commit pip installed mspec from, downloaded into the
    cache; ``None`` when mspec was not installed from GitHub or the download fails."""
    import re
    import urllib.request
    from importlib import metadata

    try:
        info = json.loads(metadata.distribution("mspec").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    repo = re.match(r"(?:git\+)?https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?/?$", info.get("url", ""))
    commit = info.get("vcs_info", {}).get("commit_id")
    if not (repo and commit):
        return None
    cache = Path(os.environ.get("MSPEC_CACHE", Path.home() / ".cache" / "mspec")) / "results" / commit
    target = cache / relative.name
    if not target.is_file():
        url = f"https://raw.githubusercontent.com/{repo[1]}/{commit}/{relative.as_posix()}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                data = response.read()
        except OSError:
            return None
        cache.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return target


def records(doc: dict, table: str, **where) -> list[dict]:
    """The records of ``table`` whose fields equal every ``name=value`` given."""
    if table not in TABLES:
        raise ValueError(f"`table`: {table!r} is not one of {TABLES}")
    return [r for r in doc[table] if all(r.get(k) == v for k, v in where.items())]


def record(doc: dict, table: str, **where) -> dict:
    """The one record of ``table`` matching ``where``.

    Raises:
        KeyError: none or several match.
    """
    found = records(doc, table, **where)
    if len(found) != 1:
        raise KeyError(f"{len(found)} records of {table!r} match {where}")
    return found[0]


PROVENANCE_FIELDS = ("model_pair", "label", "preset", "command", "mspec_version", "source_sha256", "git_commit",
                     "date", "wall_time_s", "torch_threads")


def check_results(doc: dict) -> list[str]:
    """Every inconsistency of a results document (an empty list: none).

    Checks the schema, the provenance, the tables' presence, that standard errors are
    non-negative and means in range, that on the token level the optimum is never below
    another scheme (per position, hence exactly for means and paired differences), that the
    paired differences equal the differences of the means, that the paper regime is the
    sweep's choice, and that in block efficiency the optimum is nowhere below another
    scheme by more than :data:`ROUNDS_TOLERANCE_SE` standard errors of the difference
    (from :data:`ROUNDS_MIN_GENERATIONS` generations on).
    """
    problems = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema {doc.get('schema')!r} is not {SCHEMA!r}")
    prov = doc.get("provenance", {})
    problems += [f"provenance lacks {f!r}" for f in PROVENANCE_FIELDS if prov.get(f) in (None, "")]
    if not (isinstance(prov.get("wall_time_s"), (int, float)) and prov["wall_time_s"] > 0):
        problems.append("provenance: wall_time_s must be > 0")
    missing = [t for t in TABLES if not doc.get(t)]
    if missing:
        return problems + [f"tables missing or empty: {missing}"]
    return problems + _check_tables(doc)


def _check_tables(doc: dict) -> list[str]:
    """The table checks of :func:`check_results` (every table present)."""
    problems = []
    s = doc["settings"]
    for table in TABLES:
        for r in doc[table]:
            if r.get("se") is not None and not r["se"] >= 0:
                problems.append(f"{table}: negative s.e. in {_key(r)}")
            if r.get("mean") is None:
                problems.append(f"{table}: no mean in {_key(r)}")
    for table in ("sweep", "table3", "topk"):
        for r in doc[table]:
            if r["mean"] is not None and not -EXACT_TOLERANCE <= r["mean"] <= 1 + EXACT_TOLERANCE:
                problems.append(f"{table}: acceptance {r['mean']} outside [0, 1] in {_key(r)}")
    for r in doc["rounds"]:
        if not 1 - EXACT_TOLERANCE <= r["mean"] <= s["draft_length"] + 1 + EXACT_TOLERANCE:
            problems.append(f"rounds: {r['mean']} tokens per round outside [1, L + 1] in {_key(r)}")
    # the optimum bounds every scheme at every position
    for table, group in (("sweep", ("dataset", "draft_temperature", "K")),
                         ("table3", ("regime", "dataset", "K")), ("topk", ("regime", "top_k", "K"))):
        optimal = {tuple(r[g] for g in group): r["mean"] for r in doc[table] if r["scheme"] == "optimal"}
        for r in doc[table]:
            best = optimal.get(tuple(r[g] for g in group))
            if best is not None and r["mean"] > best + EXACT_TOLERANCE:
                problems.append(f"{table}: {r['scheme']} above the optimum in {_key(r)}")
    return problems + _check_differences(doc)


def _check_differences(doc: dict) -> list[str]:
    """The paired differences and the paper regime's choice (:func:`check_results`)."""
    problems = []
    s = doc["settings"]
    means = {(r["regime"], r["dataset"], r["scheme"], r["K"]): r["mean"] for r in doc["table3"]}
    for r in doc["table3_differences"]:
        a, b = means.get((r["regime"], r["dataset"], r["a"], r["K"])), means.get((r["regime"], r["dataset"], r["b"],
                                                                                   r["K"]))
        if a is None or b is None or abs((a - b) - r["mean"]) > 1e-9:
            problems.append(f"table3_differences: {r['a']} - {r['b']} is not the difference of the means "
                            f"in {_key(r)}")
        if r["a"] == "optimal" and r["mean"] < -EXACT_TOLERANCE:
            problems.append(f"table3_differences: optimal below {r['b']} in {_key(r)}")
    for r in doc["truncation"]:
        if r["mean"] < -EXACT_TOLERANCE:
            problems.append(f"truncation: {r['scheme']} above the optimum in {_key(r)}")
    for r in doc["rounds_differences"]:
        if (r["generations"] >= ROUNDS_MIN_GENERATIONS and r["se"] is not None
                and r["mean"] < -ROUNDS_TOLERANCE_SE * r["se"]):
            problems.append(f"rounds_differences: optimal below {r['b']} by more than "
                            f"{ROUNDS_TOLERANCE_SE:g} s.e. in {_key(r)}")
    # the paper regime is the sweep's choice
    sweep = {r["draft_temperature"]: r["mean"] for r in doc["sweep"]
             if r["scheme"] == "optimal" and r["K"] == s["sweep_drafts"]}
    chosen = doc["regimes"]["paper"]["draft_temperature"]
    if sweep and chosen != choose_temperature(sweep, s["calibrate_to"]):
        problems.append(f"regimes: the paper regime's temperature {chosen} is not the sweep's choice")
    return problems


def _key(r: dict) -> str:
    return ", ".join(f"{k}={r[k]}" for k in ("regime", "dataset", "draft_temperature", "top_k", "scheme", "a", "b",
                                             "K", "s", "alphabet") if r.get(k) is not None)


# -- report --------------------------------------------------------------------------------------
def print_summary(doc: dict) -> None:
    """Print the main tables of a results document next to the paper's numbers (a smoke
    test's document says so first and under each table)."""
    prov, smoke = doc["provenance"], bool(doc.get("smoke_test"))
    print_smoke_banner(smoke)
    print(f"\nModel pair: {prov['model_pair']}")
    regimes = {r: doc["regimes"][r]["draft_temperature"] for r in REGIMES}
    for regime, t in regimes.items():
        _print_table3(doc, regime, t, smoke)
    for regime, t in regimes.items():
        _print_rounds(doc, regime, t, smoke)
    print(f"\npaper regime: draft temperature {regimes['paper']:g} ({doc['regimes']['paper']['how']})")
    print(f"wall time {prov['wall_time_s']:.0f} s, {prov['torch_threads']} torch thread(s)")
    if doc.get("path"):
        print(f"wrote {doc['path']}")


def _print_table3(doc: dict, regime: str, temperature: float, smoke: bool) -> None:
    """Table 3 of one regime: mean ± s.e. clustered by prompt (n: the prompts)."""
    header = ["dataset", "scheme"] + [f"K={k}" for k in doc["settings"]["drafts"]] + ["paper K=2"]
    body, sizes = [], []
    for dataset in doc["settings"]["datasets"]:
        for scheme in paper.COMPARED_SCHEMES:
            cells = []
            for k in doc["settings"]["drafts"]:
                r = record(doc, "table3", regime=regime, dataset=dataset, scheme=scheme, K=k)
                cells.append(fmt(r["mean"], r["se"], 4, n=r["clusters"]))
                sizes.append(r["clusters"])
            body.append([dataset, scheme, *cells,
                         fmt(paper.paper_value(paper.TABLE3_ACCEPTANCE, dataset, scheme, 2), digits=4)])
    print_block(f"Table 3, {regime} regime (draft temperature {temperature:g}): token-level acceptance",
                format_table(header, body),
                [sample_note(sizes, "prompts", over="(their positions pooled, s.e. clustered by prompt)")],
                smoke_test=smoke)


def _print_rounds(doc: dict, regime: str, temperature: float, smoke: bool) -> None:
    """The block efficiency of one regime: mean ± s.e. clustered by generation."""
    body, sizes = [], []
    for r in records(doc, "rounds", regime=regime):
        d = records(doc, "rounds_differences", regime=regime, b=r["scheme"], K=r["K"])
        n = r["generations"]
        body.append([r["scheme"], r["K"], fmt(r["mean"], r["se"], 3, n=n),
                     fmt(d[0]["mean"], d[0]["se"], 4, n=n) if d else ""])
        sizes.append(n)
    print_block(f"Block efficiency, {regime} regime (draft temperature {temperature:g}): expected tokens per round",
                format_table(["scheme", "K", "tokens / round", "optimal - this"], body),
                [sample_note(sizes, "reference generations", over="(rounds pooled, s.e. clustered by generation)")],
                smoke_test=smoke)
