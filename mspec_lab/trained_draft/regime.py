"""The trained draft as the main regime of the reproducing-the-paper chapter.

``python -m mspec_lab trained-draft-regime`` scores the trained draft (preset
``"smollm2-distilled"``, :mod:`mspec_lab.trained_draft.model`) on the very positions of
``paper_run.json``: the same prompts and the same seeds, so the target samples the same
continuations and ``q`` is the same at every position. Both models run at temperature 1
(the draft's training temperature, and the paper's Table 4 setting), under each
*sampling* of :data:`SAMPLINGS`: top-5 and top-10 on both models (the likely setting of
the paper's Table 3, and its Table 4), nucleus top-p 0.95 on both, and the full
vocabulary. Per position it computes the exact acceptance of one draft and of the
optimum, the paper's IS scheme (under two readings of its alphabet: the whole ranking and
40 tokens), SpecTr and SpecInfer at every K of :data:`REGIME_DRAFTS`; the gain from K = 2
to the largest K and the paired differences between schemes, per position; means with
standard errors clustered by prompt. It writes ``results/offline_default/trained_regime.json``
(about 20 minutes on one CPU thread; the IS scheme over the whole vocabulary costs most).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from mspec_lab.experiments.inputs import derived_seed, load_dataset_prompts, with_progress
from mspec_lab.experiments.paper_run import (PaperRunSettings, clustered_summary, distributions_from_logits, prompt_logits,
                                             code_version, committed_file, now, provenance, write_results)

__all__ = ["DRAFT_TEMPERATURE", "REGIME_DRAFTS", "REGIME_PAIRS", "REGIME_RESULTS_FILE", "REGIME_SCHEMA",
           "REGIME_SCHEMES", "SAMPLINGS", "WHOLE_RANKING", "check_trained_draft_regime",
           "load_trained_draft_regime", "print_trained_draft_regime", "run_trained_draft_regime", "scheme_label",
           "trained_draft_regime"]

#: format of the results document
REGIME_SCHEMA = "mspec-trained-regime/2"
#: the committed results file, relative to the repository
REGIME_RESULTS_FILE = Path("results/offline_default/trained_regime.json")
#: the alphabet label of the IS scheme ranking the whole vocabulary (the paper's reading)
WHOLE_RANKING = "V"
#: the schemes scored at every K (besides one draft): ``(scheme, IS alphabet)``; the IS
#: scheme ranks the whole vocabulary (:data:`WHOLE_RANKING`) or its 40 tokens of most mass
REGIME_SCHEMES = (("optimal", None), ("is", WHOLE_RANKING), ("is", 40), ("spectr", None), ("specinfer", None))
#: the paired differences stored, ``a - b`` per position
REGIME_PAIRS = ((("optimal", None), ("is", WHOLE_RANKING)), (("is", WHOLE_RANKING), ("spectr", None)),
                (("is", WHOLE_RANKING), ("specinfer", None)), (("is", 40), ("spectr", None)),
                (("is", 40), ("specinfer", None)), (("spectr", None), ("specinfer", None)))
#: the values of K: Table 3's 2, 4, 8 and Table 4's 3
REGIME_DRAFTS = (2, 3, 4, 8)
#: the samplings of both models: ``(label, top_k, top_p)``, at temperature 1
SAMPLINGS = (("top-5", 5, None), ("top-10", 10, None), ("top-p 0.95", None, 0.95), ("full", None, None))
#: the trained draft's temperature: the one it was distilled at, the target's
DRAFT_TEMPERATURE = 1.0
#: the IS scheme's LP tokens (the paper's s = 5)
IS_S = 5
#: a mean may exceed the optimum's by float rounding only
_TOLERANCE = 1e-9


def _jobs(drafts) -> list[tuple[str, object, int]]:
    return [("single", None, 1)] + [(scheme, alphabet, k) for k in drafts for scheme, alphabet in REGIME_SCHEMES]


def _acceptance(scheme: str, alphabet, k: int, draft: np.ndarray, target: np.ndarray) -> list[float]:
    """Exact acceptance of ``scheme`` with ``k`` drafts at every row of ``draft``, ``target``;
    the IS scheme with ``s`` = 5 and ``alphabet`` tokens (:data:`WHOLE_RANKING`: all V)."""
    from mspec_lab.experiments.acceptance import token_acceptance

    params = None
    if scheme == "is":
        params = {"s": IS_S, "alphabet": target.shape[-1] if alphabet == WHOLE_RANKING else alphabet}
    return [token_acceptance(scheme, draft=d, target=t, num_drafts=k, params=params) for d, t in zip(draft, target)]


def _key(job) -> dict:
    scheme, alphabet, k = job
    return {"scheme": scheme, "alphabet": alphabet, "K": k}


def _one_prompt(pair, prompt, s, jobs) -> dict:
    """Per sampling, per job: the exact acceptances at the prompt's positions."""
    draft_logits, target_logits, _ = prompt_logits(pair, prompt, s)
    out = {}
    for label, top_k, top_p in SAMPLINGS:
        draft = _distributions(draft_logits, DRAFT_TEMPERATURE, top_k, top_p)
        target = _distributions(target_logits, s.target_temperature, top_k, top_p)
        out[label] = {job: _acceptance(job[0], job[1], job[2], draft, target) for job in jobs}
    return out


def _distributions(logits, temperature: float, top_k, top_p) -> np.ndarray:
    from mspec.distributions import distribution_from_logits

    if top_p is None:
        return distributions_from_logits(logits, temperature, top_k)
    return distribution_from_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p).cpu().numpy()


def _summaries(dataset, values, groups, drafts) -> dict[str, list[dict]]:
    """The records of one dataset: acceptances, gains from K = 2 to the largest K, differences."""
    low, top, out = min(drafts), max(drafts), {"table3": [], "gains": [], "differences": []}
    for label, top_k, top_p in SAMPLINGS:
        v, base = values[label], {"sampling": label, "top_k": top_k, "top_p": top_p, "dataset": dataset}
        out["table3"] += [{**base, **_key(job), **clustered_summary(v[job], groups)} for job in v]
        out["gains"] += [{**base, "scheme": sc, "alphabet": al, "from_K": low, "to_K": top,
                          **clustered_summary(np.subtract(v[sc, al, top], v[sc, al, low]), groups)}
                         for sc, al in REGIME_SCHEMES]
        out["differences"] += [{**base, "a": a[0], "a_alphabet": a[1], "b": b[0], "b_alphabet": b[1], "K": k,
                                **clustered_summary(np.subtract(v[(*a, k)], v[(*b, k)]), groups)}
                               for k in drafts for a, b in REGIME_PAIRS]
    return out


def run_trained_draft_regime(pair, settings: PaperRunSettings | None = None, *, drafts=REGIME_DRAFTS,
                             progress: bool = False) -> dict:
    """Token-level acceptance of ``pair``'s draft on the paper run's prompts and positions.

    Args:
        pair: the trained pair (:func:`mspec_lab.models.load_pair` ``("smollm2-distilled")``;
            any pair works, e.g. ``"tiny"`` in tests).
        settings: the paper run's settings (default: those of the committed run); their
            ``datasets``, ``prompts``, ``positions``, ``seed``, ``max_chars``, ``data_source``,
            ``target_temperature`` and ``check_positions`` are used.
        drafts: the values of K (they must include 2).
        progress: a progress bar per dataset (``tqdm``).

    Returns:
        ``{"schema", "settings", "draft_temperature", "samplings", "prompts", "table3", "gains",
        "differences", "check"}``: ``table3`` has a record per sampling, dataset, scheme (and
        IS alphabet) and K (mean, se, n, clusters); ``gains`` the acceptance at the largest K
        minus that at K = 2, paired per position; ``differences`` the pairs of
        :data:`REGIME_PAIRS`, per position; ``check`` the first prompt's first values (top-5
        and full vocabulary), for the reader to recompute.
    """
    s, drafts = settings or PaperRunSettings(), tuple(sorted(set(drafts)))
    jobs = _jobs(drafts)
    doc = {"schema": REGIME_SCHEMA, "settings": {**{name: getattr(s, name) for name in (
               "datasets", "prompts", "positions", "seed", "max_chars", "data_source", "target_temperature",
               "smoke_test")}, "drafts": list(drafts), "is_s": IS_S},
           "draft_temperature": DRAFT_TEMPERATURE, "samplings": [list(x) for x in SAMPLINGS],
           "prompts": {}, "table3": [], "gains": [], "differences": [], "check": None}
    for dataset in s.datasets:
        prompts = load_dataset_prompts(pair, dataset, s.prompts, source=s.data_source, max_chars=s.max_chars)
        doc["prompts"][dataset] = [p.tag for p in prompts]
        values, groups = {label: {job: [] for job in jobs} for label, _, _ in SAMPLINGS}, []
        for i, prompt in enumerate(with_progress(prompts, progress, desc=f"trained draft {dataset}", unit="prompt")):
            found = _one_prompt(pair, prompt, s, jobs)
            groups += [i] * len(found[SAMPLINGS[0][0]][jobs[0]])
            for label in found:
                for job in jobs:
                    values[label][job] += found[label][job]
            if doc["check"] is None:
                doc["check"] = {"dataset": dataset, "prompt": prompt.tag, "seed": derived_seed(s.seed, prompt.tag),
                                "values": [{"sampling": label, **_key(job),
                                            "acceptance": found[label][job][:s.check_positions]}
                                           for label in ("top-5", "full") for job in jobs]}
        for table, rows in _summaries(dataset, values, groups, drafts).items():
            doc[table] += rows
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
    """Every inconsistency of a results document: the optimum below another scheme, a gain or a
    difference that is not the difference of its two means, a standard error that is negative
    or missing (it may be missing with one prompt only)."""
    problems, means = [], {(r["sampling"], r["dataset"], r["scheme"], r["alphabet"], r["K"]): r["mean"]
                           for r in doc["table3"]}
    for r in doc["table3"]:
        where = f"{r['sampling']}, {r['dataset']}, {r['scheme']}, K = {r['K']}"
        if r["clusters"] > 1 and not (r["se"] is not None and r["se"] >= 0):  # one prompt: no s.e.
            problems.append(f"table3: s.e. {r['se']} in {where}")
        if r["K"] > 1 and r["mean"] > means[r["sampling"], r["dataset"], "optimal", None, r["K"]] + _TOLERANCE:
            problems.append(f"table3: {r['scheme']} above the optimum in {where}")
    for g in doc["gains"]:
        at = lambda k: means[g["sampling"], g["dataset"], g["scheme"], g["alphabet"], k]  # noqa: E731
        if abs(g["mean"] - (at(g["to_K"]) - at(g["from_K"]))) > 1e-9:
            problems.append(f"gains: {g['scheme']} in {g['sampling']}, {g['dataset']} is not the difference "
                            "of its means")
    for d in doc["differences"]:
        key = (d["sampling"], d["dataset"])
        gap = means[(*key, d["a"], d["a_alphabet"], d["K"])] - means[(*key, d["b"], d["b_alphabet"], d["K"])]
        if abs(d["mean"] - gap) > 1e-9:
            problems.append(f"differences: {d['a']} - {d['b']} in {d['sampling']}, {d['dataset']}, K = {d['K']} "
                            "is not the difference of its means")
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


def scheme_label(scheme: str, alphabet) -> str:
    """A scheme's name in tables: the IS scheme with its alphabet (``is (V)``, ``is (40)``)."""
    return scheme if alphabet is None else f"{scheme} ({alphabet})"


def print_trained_draft_regime(doc: dict) -> None:
    """The acceptance tables, one per sampling (mean ± s.e. over positions, clustered by
    prompt), with the gains."""
    from mspec_lab.experiments.report import fmt, format_table, print_block

    drafts = doc["settings"]["drafts"]
    cell = {(r["sampling"], r["dataset"], r["scheme"], r["alphabet"], r["K"]): r for r in doc["table3"]}
    gain = {(g["sampling"], g["dataset"], g["scheme"], g["alphabet"]): g for g in doc["gains"]}
    header = ["dataset", "scheme", *[f"K={k}" for k in drafts], f"gain K={min(drafts)}->{max(drafts)}"]
    for label, _, _ in doc["samplings"]:
        rows = []
        for dataset in doc["settings"]["datasets"]:
            one = cell[label, dataset, "single", None, 1]
            rows.append([dataset, "one draft", fmt(one["mean"], one["se"], 3), *[""] * len(drafts)])
            for scheme, alphabet in (tuple(x) for x in REGIME_SCHEMES):
                g = gain[label, dataset, scheme, alphabet]
                rows.append([dataset, scheme_label(scheme, alphabet),
                             *[fmt(cell[label, dataset, scheme, alphabet, k]["mean"], digits=3) for k in drafts],
                             fmt(g["mean"], g["se"], 3)])
        notes = [f"draft and target at temperature {doc['draft_temperature']:g}, {label} on both, "
                 "on the paper run's prompts and positions; exact acceptance per position, s.e. clustered by prompt",
                 "one draft: its single-draft acceptance, in the first column; is (V): the IS scheme ranking "
                 "the whole vocabulary, is (40): its 40 tokens of most mass"]
        model = doc.get("provenance", {}).get("label", "the trained draft")
        print_block(f"Token-level acceptance, {model}, {label}", format_table(header, rows), notes,
                    smoke_test=doc["settings"]["smoke_test"])
