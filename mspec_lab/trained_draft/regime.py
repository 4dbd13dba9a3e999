"""The trained draft as a second regime of the reproducing-the-paper chapter.

``python -m mspec_lab trained-draft-regime`` scores the trained draft (preset
``"smollm2-distilled"``, :mod:`mspec_lab.trained_draft.model`) on the very positions of
``paper_run.json``: the same prompts and the same seeds, so the target samples the same
continuations and ``q`` is the same at every position. Only the draft differs from the
same-weights regimes, so how its acceptance grows with K can be set beside theirs and beside
the paper's Table 3. Per position it computes the exact acceptance of one draft and of the
optimum, SpecTr and SpecInfer at K = 2, 4, 8 (the draft at temperature 1, the temperature it
was trained at), and the gain from K = 2 to the largest K, paired per position; means with
standard errors clustered by prompt. It writes ``results/offline_default/trained_regime.json``
(about 3 minutes on one CPU thread).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from mspec_lab.experiments.inputs import derived_seed, load_dataset_prompts, with_progress
from mspec_lab.experiments.paper_run import (PaperRunSettings, clustered_summary, distributions_from_logits, prompt_logits,
                                             code_version, committed_file, now, provenance, write_results)

__all__ = ["DRAFT_TEMPERATURE", "REGIME_RESULTS_FILE", "REGIME_SCHEMA", "REGIME_SCHEMES",
           "check_trained_draft_regime", "load_trained_draft_regime", "print_trained_draft_regime",
           "run_trained_draft_regime", "trained_draft_regime"]

#: format of the results document
REGIME_SCHEMA = "mspec-trained-regime/1"
#: the committed results file, relative to the repository
REGIME_RESULTS_FILE = Path("results/offline_default/trained_regime.json")
#: the schemes scored at every K (besides one draft)
REGIME_SCHEMES = ("optimal", "spectr", "specinfer")
#: the trained draft's temperature: the one it was distilled at, the target's
DRAFT_TEMPERATURE = 1.0
#: a mean may exceed the optimum's by float rounding only
_TOLERANCE = 1e-9


def _jobs(drafts) -> list[tuple[str, int]]:
    return [("single", 1)] + [(scheme, k) for k in drafts for scheme in REGIME_SCHEMES]


def _acceptance(scheme: str, k: int, draft: np.ndarray, target: np.ndarray) -> list[float]:
    """Exact acceptance of ``scheme`` with ``k`` drafts at every row of ``draft``, ``target``."""
    from mspec_lab.experiments.acceptance import token_acceptance

    return [token_acceptance(scheme, draft=d, target=t, num_drafts=k) for d, t in zip(draft, target)]


def run_trained_draft_regime(pair, settings: PaperRunSettings | None = None, *, progress: bool = False) -> dict:
    """Token-level acceptance of ``pair``'s draft on the paper run's prompts and positions.

    Args:
        pair: the trained pair (:func:`mspec_lab.models.load_pair` ``("smollm2-distilled")``;
            any pair works, e.g. ``"tiny"`` in tests).
        settings: the paper run's settings (default: those of the committed run); their
            ``datasets``, ``prompts``, ``positions``, ``drafts``, ``seed``, ``max_chars``,
            ``data_source``, ``target_temperature`` and ``check_positions`` are used.
        progress: a progress bar per dataset (``tqdm``).

    Returns:
        ``{"schema", "settings", "draft_temperature", "prompts", "table3", "gains", "check"}``:
        ``table3`` has a record per dataset, scheme and K (mean, se, n, clusters); ``gains`` per
        dataset and scheme, the acceptance at the largest K minus that at K = 2, paired per
        position; ``check`` the first prompt's first values, for the reader to recompute.
    """
    s = settings or PaperRunSettings()
    jobs, top = _jobs(s.drafts), max(s.drafts)
    doc = {"schema": REGIME_SCHEMA, "settings": {name: getattr(s, name) for name in (
               "datasets", "prompts", "positions", "drafts", "seed", "max_chars", "data_source",
               "target_temperature", "smoke_test")},
           "draft_temperature": DRAFT_TEMPERATURE, "prompts": {}, "table3": [], "gains": [], "check": None}
    for dataset in s.datasets:
        prompts = load_dataset_prompts(pair, dataset, s.prompts, source=s.data_source, max_chars=s.max_chars)
        doc["prompts"][dataset] = [p.tag for p in prompts]
        values, groups = {job: [] for job in jobs}, []
        for i, prompt in enumerate(with_progress(prompts, progress, desc=f"trained draft {dataset}", unit="prompt")):
            draft_logits, target_logits, _ = prompt_logits(pair, prompt, s)
            draft = distributions_from_logits(draft_logits, DRAFT_TEMPERATURE)
            target = distributions_from_logits(target_logits, s.target_temperature)
            groups += [i] * target.shape[0]
            for scheme, k in jobs:
                values[scheme, k] += _acceptance(scheme, k, draft, target)
            if doc["check"] is None:
                doc["check"] = {"dataset": dataset, "prompt": prompt.tag, "seed": derived_seed(s.seed, prompt.tag),
                                "values": [{"scheme": scheme, "K": k, "acceptance": values[scheme, k][:s.check_positions]}
                                           for scheme, k in jobs]}
        doc["table3"] += [{"dataset": dataset, "scheme": scheme, "K": k, **clustered_summary(values[scheme, k], groups)}
                          for scheme, k in jobs]
        doc["gains"] += [{"dataset": dataset, "scheme": scheme, "from_K": min(s.drafts), "to_K": top,
                          **clustered_summary(np.subtract(values[scheme, top], values[scheme, min(s.drafts)]), groups)}
                         for scheme in REGIME_SCHEMES]
    return doc


def trained_draft_regime(preset: str = "smollm2-distilled", settings: PaperRunSettings | None = None, *,
                         out: str | Path | None = REGIME_RESULTS_FILE, command: str = "",
                         progress: bool = False) -> dict:
    """Load the pair, run :func:`run_trained_draft_regime`, add the provenance, write ``out`` (``None``: no file)."""
    from mspec_lab.models import load_pair

    start, started = time.perf_counter(), now()
    code = code_version()
    pair = load_pair(preset)
    s = settings or PaperRunSettings()
    doc = run_trained_draft_regime(pair, s, progress=progress)
    doc = {"schema": doc.pop("schema"), "provenance": provenance(
        pair, command=command, code=code, started=started, start=start, data_source=s.data_source), **doc}
    if out is not None:
        write_results(doc, out)
    return doc


def check_trained_draft_regime(doc: dict) -> list[str]:
    """Every inconsistency of a results document: the optimum below another scheme, a gain that is
    not the difference of its two means, a standard error that is negative or missing (it may be
    missing with one prompt only)."""
    problems, means = [], {(r["dataset"], r["scheme"], r["K"]): r["mean"] for r in doc["table3"]}
    for r in doc["table3"]:
        if r["clusters"] > 1 and not (r["se"] is not None and r["se"] >= 0):  # one prompt: no s.e.
            problems.append(f"table3: s.e. {r['se']} in {r['dataset']}, {r['scheme']}, K = {r['K']}")
        if r["K"] > 1 and r["mean"] > means[r["dataset"], "optimal", r["K"]] + _TOLERANCE:
            problems.append(f"table3: {r['scheme']} above the optimum in {r['dataset']}, K = {r['K']}")
    for g in doc["gains"]:
        gain = means[g["dataset"], g["scheme"], g["to_K"]] - means[g["dataset"], g["scheme"], g["from_K"]]
        if abs(g["mean"] - gain) > 1e-9:
            problems.append(f"gains: {g['scheme']} in {g['dataset']} is not the difference of its means")
    return problems


def load_trained_draft_regime(path: str | Path | None = None) -> dict:
    """Read a results document (default: the committed run; without the repository, a copy
    downloaded from the installed commit) and check it (:func:`check_trained_draft_regime`).

    Raises:
        FileNotFoundError: no such file; the message says how to write one.
        ValueError: another schema, or an inconsistent document.
    """
    import json

    path = Path(path) if path is not None else committed_file(REGIME_RESULTS_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results file; write one with "
                                f"`python -m mspec_lab trained-draft-regime --out {path}`")
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("schema") != REGIME_SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {REGIME_SCHEMA!r}: rerun the command")
    problems = check_trained_draft_regime(doc)
    if problems:
        raise ValueError(f"{path} is inconsistent:\n  " + "\n  ".join(problems))
    return doc


def print_trained_draft_regime(doc: dict) -> None:
    """The acceptance table (mean ± s.e. over positions, clustered by prompt) and the gains."""
    from mspec_lab.experiments.report import fmt, format_table, print_block

    drafts = doc["settings"]["drafts"]
    header = ["dataset", "scheme", *[f"K={k}" for k in drafts], f"gain K={min(drafts)}->{max(drafts)}"]
    rows = []
    for dataset in doc["settings"]["datasets"]:
        one = next(r for r in doc["table3"] if r["dataset"] == dataset and r["scheme"] == "single")
        rows.append([dataset, "one draft", fmt(one["mean"], one["se"], 3), *[""] * len(drafts)])
        for scheme in REGIME_SCHEMES:
            cells = [next(r for r in doc["table3"] if (r["dataset"], r["scheme"], r["K"]) == (dataset, scheme, k))
                     for k in drafts]
            gain = next(g for g in doc["gains"] if (g["dataset"], g["scheme"]) == (dataset, scheme))
            rows.append([dataset, scheme, *[fmt(c["mean"], c["se"], 3) for c in cells], fmt(gain["mean"], gain["se"], 3)])
    notes = [f"the trained draft at temperature {doc['draft_temperature']:g} on the paper run's prompts and positions "
             "(the same continuations, the same q); exact acceptance per position, s.e. clustered by prompt",
             "one draft: its single-draft acceptance, in the first column"]
    print_block("Token-level acceptance of the trained draft", format_table(header, rows), notes,
                smoke_test=doc["settings"]["smoke_test"])
