"""Wall-clock speed of the trained draft (preset ``"smollm2-distilled"``) on the machine that runs it.

:func:`bench_trained_draft` (command ``python -m mspec_lab trained-draft-speed``) decodes the
held-out prompts of the three datasets (the first ones of
:data:`mspec_lab.trained_draft.train.HELD_OUT` per file, never trained on) with
SmolLM2-135M-Instruct as target, at temperature 1:

* plain sampling from the target (:func:`~mspec.lm.decoding.autoregressive_generate`), the
  baseline, run before and after each prompt's speculative runs (their mean is the baseline
  of that prompt, so a drift of the machine's speed falls on both);
* speculative sampling with the trained draft for every K in ``drafts_k`` and L in
  ``draft_lengths`` (K = 1: the single-draft rule; K > 1: ``scheme``), interleaved prompt by
  prompt, for each torch thread count in ``threads``.

For each setting it reports the acceptance at each draft position (the share of rounds that
reached the position and kept its token), the block efficiency (tokens per target call) and
the **speed-up**: the decoding token rate (the prompt's prefill left out) over plain
sampling's on the same prompts, a ratio of sums with its standard error over prompts
(``mspec_lab.experiments.results.ratio_se``).

**Your prompts.** ``--prompts-file PATH`` runs the prompts of a file instead (one prompt per
line; in a ``.jsonl`` file one JSON string or ``{"prompt": ...}`` per line, :func:`read_prompts`),
each as a user turn of the tokenizer's chat template unless ``--no-chat-template``
(``prompt_token_ids``); the held-out prompts run as plain text unless ``--chat-template``.

**Cost model.** Beside the measurements it prints where a round's time goes: a target pass
over the K x (L + 1) drafted tokens in units of one plain decoding step, and one draft step.
On a CPU the target pass grows with K x (L + 1), so K > 1 pays only while the extra accepted
tokens outweigh the wider pass: on the 2-core AMD EPYC machine of the committed run (one and
two threads) no setting paid: at best 0.78 ± 0.02x (K = 2, L = 1, whose 4-token pass costs
less there than a 2-token one), 0.72 ± 0.02x at K = 1, L = 1, and 0.39 to 0.71x at K = 4.
A run of the same command on a virtual machine sold under the same name (2-core AMD EPYC,
AVX512) measured a 2-token pass at 1.11 steps, not 1.6, and K = 1, L = 1 at 1.01 ± 0.03x:
the name of a machine does not pin its curve, so a speed-up is quoted with the curve
measured beside it. The column "flat-pass projection" is ``BE / (1 + L c)`` with ``c`` the
measured draft step: what a machine whose pass costs one step at any width (a memory-bound
GPU) would give, a projection and not a measurement.

**The pass curve.** :func:`pass_curve` (command ``python -m mspec_lab trained-draft-curve``,
``results/offline_default/pass_curve.json``, with the machine, the threads and the command)
times the target's cached pass over 1..16 new tokens and a draft step on the machine that
runs it; :func:`predicted_speedup` turns the curve and a block efficiency into a projected
speed-up, ``BE / (pass(K (L + 1)) + L c_K)``. The live-decoding chapter runs both live.

The results go to ``results/offline_default/trained_draft.json`` (a ``settings`` list).
``TrainedDraftSpeedSettings.quick()`` is a smoke test of the pipeline (one prompt per dataset, few tokens).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from mspec_lab.experiments.report import fmt, format_table, print_block, print_smoke_banner, smoke_test_fields
from mspec_lab.experiments.results import mean_se, ratio_se

__all__ = ["CURVE_RESULTS_FILE", "SETTING_FIELDS", "SPEED_RESULTS_FILE", "TrainedDraftSpeedSettings",
           "bench_trained_draft", "load_pass_curve", "load_trained_draft_speed", "machine_name", "pass_curve",
           "predicted_speedup", "read_prompts", "summarize_speed"]

#: the committed results file, relative to the repository
SPEED_RESULTS_FILE = Path("results") / "offline_default" / "trained_draft.json"
#: the committed pass curve of ``python -m mspec_lab trained-draft-curve``, relative to the repository
CURVE_RESULTS_FILE = Path("results") / "offline_default" / "pass_curve.json"
#: the fields of every entry of the results file's ``settings`` list
SETTING_FIELDS = ("num_drafts", "draft_length", "threads", "block_efficiency", "block_efficiency_se", "speedup",
                  "speedup_se", "n", "tokens_per_s", "acceptance_per_position", "cost", "gpu_projected_speedup")


@dataclass(frozen=True)
class TrainedDraftSpeedSettings:
    """What :func:`bench_trained_draft` runs: ``prompts`` held-out prompts per dataset, each
    decoded with ``max_new_tokens`` tokens by plain sampling and by every (K, L) of
    ``drafts_k`` x ``draft_lengths``, at each thread count of ``threads``; K > 1 with ``scheme``."""

    #: how ``quick()`` differs (a smoke test: a minute or two on a CPU)
    QUICK: ClassVar[dict] = {"prompts": 1, "max_new_tokens": 12, "drafts_k": (1, 2), "draft_lengths": (2, 3),
                             "threads": (1,)}

    prompts: int = 4
    max_new_tokens: int = 64
    drafts_k: tuple[int, ...] = (1, 2, 4)
    draft_lengths: tuple[int, ...] = (1, 2, 3, 4, 5)
    threads: tuple[int, ...] = (1, 2)
    scheme: str = "specinfer"
    seed: int = 0
    smoke_test: bool = False
    #: a file of the reader's own prompts (:func:`read_prompts`) instead of the held-out ones:
    #: all of them run (the first one under ``quick()``), and ``prompts`` is not used
    prompts_file: str | None = None
    #: each prompt as a user turn of the tokenizer's chat template; ``None``: on for a
    #: ``prompts_file`` (an instruct target's own format), off for the held-out prompts (the
    #: benchmarks' plain-text templates, which the trained draft was distilled on)
    chat_template: bool | None = None

    @classmethod
    def quick(cls, **overrides) -> "TrainedDraftSpeedSettings":
        """The smoke-test settings (``QUICK``), with ``overrides``."""
        return cls(**{**cls.QUICK, "smoke_test": True, **overrides})

    def __post_init__(self):
        from mspec.registry import SCHEMES
        from mspec_lab.trained_draft.train import HELD_OUT

        if not 1 <= self.prompts <= HELD_OUT:
            raise ValueError(f"`prompts` must be in 1..{HELD_OUT} (the held-out prompts per dataset), got {self.prompts}")
        if self.max_new_tokens < 1:
            raise ValueError(f"`max_new_tokens` must be >= 1, got {self.max_new_tokens}")
        for name in ("drafts_k", "draft_lengths", "threads"):
            values = tuple(getattr(self, name))
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f"`{name}` must be a non-empty list of integers >= 1, got {values}")
            object.__setattr__(self, name, values)
        if self.scheme not in SCHEMES or self.scheme == "single":
            raise ValueError(f"`scheme` (the rule for K > 1) must be a multi-draft scheme of mspec.SCHEMES, "
                             f"e.g. 'specinfer' or 'optimal'; got {self.scheme!r}")


def benchmark_prompts(tokenizer, s: TrainedDraftSpeedSettings, data_dir=None) -> list[list[int]]:
    """The token ids of the prompts ``s`` runs: those of ``s.prompts_file`` (chat template on
    unless ``s.chat_template`` is False), else the held-out prompts (chat template only if
    ``s.chat_template``)."""
    if s.prompts_file is None:
        if not s.chat_template:
            return held_out_prompts(tokenizer, s.prompts, data_dir)
        from mspec_lab.data import DATASETS, load_prompts

        by_dataset = [[e.prompt for e in load_prompts(d, data_dir=data_dir, source="local")[:s.prompts]]
                      for d in DATASETS]
        return prompt_token_ids(tokenizer, [p for row in zip(*by_dataset) for p in row], True)
    texts = read_prompts(s.prompts_file)[: 1 if s.smoke_test else None]
    return prompt_token_ids(tokenizer, texts, s.chat_template is not False)


def held_out_prompts(tokenizer, n: int, data_dir=None) -> list[list[int]]:
    """The first ``n`` held-out prompts of each dataset, as token ids, datasets interleaved."""
    from mspec_lab.trained_draft.train import prompt_ids

    by_dataset = prompt_ids(tokenizer, "held-out", data_dir)
    return [ids for row in zip(*(ps[:n] for ps in by_dataset.values())) for ids in row]


def _runs(pair, prompts, s: TrainedDraftSpeedSettings, log) -> dict:
    """Every generation: ``{threads: {"plain": [[run, run] per prompt], (K, L): [run per prompt]}}``."""
    from mspec.lm.decoding import autoregressive_generate, speculative_generate

    eos = pair.eos_token_id
    grid = [(k, length) for k in s.drafts_k for length in s.draft_lengths]

    def plain(prompt, seed):
        return autoregressive_generate(prompt, target_model=pair.target_model, max_new_tokens=s.max_new_tokens,
                                       eos_token_id=eos, generator=seed)

    def speculative(prompt, k, length, seed):
        return speculative_generate(prompt, draft_model=pair.draft_model, target_model=pair.target_model,
                                    num_drafts=k, draft_length=length, scheme="single" if k == 1 else s.scheme,
                                    max_new_tokens=s.max_new_tokens, eos_token_id=eos, generator=seed)

    out = {}
    for threads in s.threads:
        torch.set_num_threads(threads)
        plain(prompts[0], s.seed), speculative(prompts[0], max(s.drafts_k), max(s.draft_lengths), s.seed)  # warm-up
        runs = {"plain": [], **{key: [] for key in grid}}
        for i, prompt in enumerate(prompts):
            seed = s.seed + i
            before = plain(prompt, seed)
            for k, length in grid:
                runs[(k, length)].append(speculative(prompt, k, length, seed))
            runs["plain"].append([before, plain(prompt, seed)])
            log(f"threads {threads}: prompt {i + 1}/{len(prompts)} done")
        out[threads] = runs
    return out


def _rate(run) -> float:
    """Decoding tokens per second, the prefill left out."""
    return len(run.token_ids) / max(run.wall_time - run.prefill_time, 1e-9)


def _acceptance(runs, length: int) -> list[list[float]]:
    """``[mean, se, n]`` per draft position: rounds that kept the position's token over rounds
    that reached it, pooled per generation (``ratio_se``)."""
    out = []
    for j in range(1, length + 1):
        kept = [sum(r.accepted_length >= j for r in run.rounds) for run in runs]
        reached = [sum(len(r.alive) >= j for r in run.rounds) for run in runs]
        out.append(list(ratio_se(kept, reached)))
    return out


def summarize_speed(runs: dict, s: TrainedDraftSpeedSettings, draft_share: float) -> dict:
    """The results file's content (without its provenance) from the generations ``runs``:
    ``{threads: {"plain": [[run before, run after] per prompt], (K, L): [run per prompt]}}``."""
    plain_rates, settings = {}, []
    for threads, by_key in runs.items():
        plain = [np.mean([_rate(r) for r in pair_of_runs]) for pair_of_runs in by_key["plain"]]
        step = np.mean([(r.wall_time - r.prefill_time) / len(r.token_ids) for p in by_key["plain"] for r in p])
        plain_rates[threads] = dict(zip(("tokens_per_s", "tokens_per_s_se", "n"), mean_se(plain)),
                                    step_s=float(step))
        for (k, length), spec in ((key, v) for key, v in by_key.items() if key != "plain"):
            rounds = [r for run in spec for r in run.rounds]
            be = mean_se([run.block_efficiency for run in spec])
            speedup = ratio_se([_rate(run) for run in spec], plain)
            draft_step = float(np.mean([r.draft_time for r in rounds])) / length / step  # c, measured
            settings.append({
                "num_drafts": k, "draft_length": length, "threads": threads,
                "block_efficiency": be[0], "block_efficiency_se": be[1],
                "speedup": speedup[0], "speedup_se": speedup[1], "n": speedup[2],
                "tokens_per_s": mean_se([_rate(run) for run in spec])[0],
                "acceptance_per_position": _acceptance(spec, length),
                "cost": {"draft_step_steps": draft_step,
                         "target_pass_steps": float(np.mean([r.target_time for r in rounds]) / step),
                         "overhead_steps": float(np.mean([r.selection_time + r.cache_time for r in rounds]) / step)},
                "gpu_projected_speedup": be[0] / (1 + length * draft_step)})
    return {"plain": plain_rates, "settings": settings, "draft_share": draft_share}


def _report(result: dict, s: TrainedDraftSpeedSettings) -> None:
    rows = [[str(r["threads"]), str(r["num_drafts"]), str(r["draft_length"]),
             " ".join("-" if np.isnan(a[0]) else f"{a[0]:.2f}" for a in r["acceptance_per_position"]),
             fmt(r["block_efficiency"], r["block_efficiency_se"], n=r["n"]),
             fmt(r["speedup"], r["speedup_se"], n=r["n"]) + "x",
             f"{r['cost']['target_pass_steps']:.2f}", f"{r['cost']['draft_step_steps']:.3f}",
             f"{r['gpu_projected_speedup']:.2f}x"] for r in result["settings"]]
    header = ["threads", "K", "L", "acceptance by position", "block efficiency", "speed-up (CPU)",
              "target pass / step", "draft step / step", "flat-pass projection"]
    plain = "; ".join(f"{t} thread(s): {fmt(p['tokens_per_s'], p['tokens_per_s_se'], 1, n=p['n'])} tokens/s"
                      for t, p in result["plain"].items())
    best = max(result["settings"], key=lambda r: r["speedup"])
    notes = [f"measured on {result.get('machine', 'this machine')}: {result.get('command') or 'in Python'}",
             f"plain sampling from the target: {plain}",
             "acceptance by position: the share of the rounds reaching a draft position that keep its token "
             "('-': no round reached it)",
             f"best: K={best['num_drafts']}, L={best['draft_length']}, {best['threads']} thread(s): "
             f"{fmt(best['speedup'], best['speedup_se'], n=best['n'])}x plain sampling's token rate",
             "speed-up: decoding tokens/s over plain sampling's on the same prompts (ratio of sums, s.e. over prompts)",
             "target pass / step, draft step / step: a round's measured costs in plain decoding steps",
             "flat-pass projection: BE / (1 + L c), c the measured draft step / step, for a machine whose "
             "target pass costs one step at any width (a memory-bound GPU): a projection, not a measurement"]
    prompts = f"the prompts of {s.prompts_file}" if s.prompts_file else "held-out prompts"
    print_block(f"Trained draft (smollm2-distilled) against plain sampling, {prompts}",
                format_table(header, rows), notes, smoke_test=s.smoke_test)


def bench_trained_draft(settings: TrainedDraftSpeedSettings | None = None, *,
                        out: str | Path | None = SPEED_RESULTS_FILE, data_dir=None, command: str | None = None,
                        log=print) -> dict:
    """Run the benchmark, print its table and write the results file (``out=None``: none)."""
    from mspec_lab.trained_draft.model import weight_share
    from mspec_lab.experiments.paper_run import code_version
    from mspec_lab.experiments.report import write_json
    from mspec_lab.models import load_pair

    s = settings or TrainedDraftSpeedSettings()
    print_smoke_banner(s.smoke_test)
    pair = load_pair("smollm2-distilled", device="cpu")
    prompts = benchmark_prompts(pair.tokenizer, s, data_dir)
    runs = _runs(pair, prompts, s, log)
    result = {**smoke_test_fields(s.smoke_test), "pair": pair.description, "bench": asdict(s), "command": command,
              "machine": machine_name(), "code": code_version(),
              **summarize_speed(runs, s, weight_share(pair.draft_model, pair.target_model))}
    _report(result, s)
    if out is not None:
        write_json(Path(out), result)
        log(f"wrote {out}")
    return result



def bench_pass_curve(*, threads: int = 1, max_tokens: int = 16, repeats: int = 5,
                     out: str | Path | None = CURVE_RESULTS_FILE, data_dir=None, command: str | None = None,
                     device: str = "cpu", log=print) -> dict:
    """:func:`pass_curve` of the trained pair after the first held-out prompt, with ``threads``
    torch threads: print it and write it to ``out`` (``None``: no file), with its provenance."""
    from mspec_lab.experiments.paper_run import code_version
    from mspec_lab.experiments.report import write_json
    from mspec_lab.models import load_pair

    torch.set_num_threads(threads)
    pair = load_pair("smollm2-distilled", device=device)
    prompt = held_out_prompts(pair.tokenizer, 1, data_dir)[0]
    curve = pass_curve(pair.target_model, pair.draft_model, prompt, max_tokens=max_tokens, repeats=repeats,
                       command=command)
    result = {**curve, "pair": pair.description, "code": code_version()}
    log(f"{curve['machine']}, {curve['threads']} thread(s), {curve['device']}: the target's pass over n new "
        f"tokens after {curve['prefix']}, median of {repeats}")
    for n, seconds, ratio in zip(curve["tokens"], curve["pass_s"], curve["pass_ratio"]):
        log(f"  n = {n:>2}: {1e3 * seconds:7.1f} ms  {ratio:5.2f} one-token passes")
    log("  draft step: " + ", ".join(f"{rows} row(s) {1e3 * t:.1f} ms" for rows, t in curve["draft_step_s"].items())
        + f"; c = {curve['draft_share']:.3f}")
    if out is not None:
        write_json(Path(out), result)
        log(f"wrote {out}")
    return result


def load_trained_draft_speed(path: str | Path | None = None) -> dict:
    """Read a results file (default: the committed run; from a ``pip install`` without the repository, a copy
    downloaded from the installed commit).

    Raises:
        FileNotFoundError: no such file; the message says how to write one.
        ValueError: a file without the fields of :data:`SETTING_FIELDS`.
    """
    import json

    from mspec_lab.experiments.paper_run import committed_file

    path = Path(path) if path is not None else committed_file(SPEED_RESULTS_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results file; write one with "
                                f"`python -m mspec_lab trained-draft-speed --out {path}`")
    doc = json.loads(path.read_text(encoding="utf-8"))
    missing = {name for row in doc.get("settings", [None]) for name in SETTING_FIELDS if not row or name not in row}
    if missing:
        raise ValueError(f"{path}: settings without {sorted(missing)}: rerun `python -m mspec_lab trained-draft-speed`")
    return doc


# -- prompts of the reader's own ---------------------------------------------------------------------
def read_prompts(path: str | Path) -> list[str]:
    """The prompts of a file: one prompt per line, blank lines skipped; in a ``.jsonl`` file each
    line is a JSON string or an object with a ``"prompt"`` field (so a prompt can hold newlines).

    Raises:
        ValueError: a file without prompts, or a ``.jsonl`` line that is neither.
    """
    import json

    path = Path(path)
    prompts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        if path.suffix != ".jsonl":
            prompts.append(line)
            continue
        value = json.loads(line)
        value = value.get("prompt") if isinstance(value, dict) else value
        if not isinstance(value, str):
            raise ValueError(f"{path}:{number}: a .jsonl line must be a JSON string or an object with a "
                             "string \"prompt\" field")
        prompts.append(value)
    if not prompts:
        raise ValueError(f"{path}: no prompts (one a line; blank lines are skipped)")
    return prompts


def prompt_token_ids(tokenizer, prompts: list[str], chat_template: bool) -> list[list[int]]:
    """Token ids of ``prompts``, each as one user turn of the tokenizer's chat template (with the
    assistant's turn opened) when ``chat_template``, else as plain text."""
    if chat_template and not getattr(tokenizer, "chat_template", None):
        raise ValueError("--chat-template: this tokenizer has no chat template; use --no-chat-template")
    if not chat_template:
        return [tokenizer(p)["input_ids"] for p in prompts]
    return [list(tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                               tokenize=True, return_dict=True)["input_ids"]) for p in prompts]


# -- the pass curve: what a round costs on the machine that runs it ------------------------------------
def machine_name(device=None) -> str:
    """The machine in words: the GPU's name on CUDA, else the CPU's model name and core count."""
    import os
    import platform

    if device is not None and torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{name}, {os.cpu_count()} cores ({torch.backends.cpu.get_cpu_capability()})"


def _timed_forward(model, ids, rows: int, prefix: int, sync) -> float:
    """Seconds of one cached forward pass of ``ids`` after ``prefix`` tokens, the cache restored."""
    import time

    if model.tokens.shape[0] != rows:
        model.keep(0, prefix)
        if rows > 1:
            model.expand(rows)
    sync()
    start = time.perf_counter()
    model.forward(ids.expand(rows, -1), last=ids.shape[1])
    sync()
    seconds = time.perf_counter() - start
    model.keep(0, prefix)
    if rows > 1:
        model.expand(rows)
    return seconds


def pass_curve(target_model, draft_model, prompt_ids: list[int], *, max_tokens: int = 16, repeats: int = 5,
               draft_rows: tuple[int, ...] = (1, 2, 4), command: str | None = None) -> dict:
    """Time the target's cached pass over 1..``max_tokens`` new tokens and one draft step.

    Both models first read ``prompt_ids`` into their KV caches; each timed call then feeds new
    tokens after that prefix and the cache is cut back, so every call sees the same prefix. The
    sizes are interleaved (one call of each size per repeat, ``repeats`` times, after one untimed
    warm-up round), so a drift of the machine's speed falls on all of them; on CUDA each call is
    synchronised. The draft step feeds one token to ``draft_rows`` rows (K drafts).

    Returns:
        A dict with ``machine``, ``device``, ``threads``, ``command``, ``prefix``, ``repeats``,
        ``tokens`` (1..n), ``pass_s`` (median seconds per size), ``pass_ratio`` (``pass_s``
        over the one-token pass), ``draft_step_s`` (rows -> median seconds) and ``draft_share``
        (the one-row draft step over the one-token pass, ``c``).
    """
    from mspec.lm.cache import CachedModel, model_device

    device = model_device(target_model)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    prefix = torch.tensor([prompt_ids], device=device)
    new = torch.tensor([[prompt_ids[i % len(prompt_ids)] for i in range(max_tokens)]], device=device)
    target, draft = CachedModel(target_model), CachedModel(draft_model)
    with torch.inference_mode():
        target.forward(prefix), draft.forward(prefix.to(draft.device))
        pass_s = {n: [] for n in range(1, max_tokens + 1)}
        step_s = {rows: [] for rows in draft_rows}
        for repeat in range(repeats + 1):  # the first round warms up, untimed
            for n, times in pass_s.items():
                times.append(_timed_forward(target, new[:, :n], 1, len(prompt_ids), sync))
            for rows, times in step_s.items():
                times.append(_timed_forward(draft, new[:, :1].to(draft.device), rows, len(prompt_ids), sync))
    medians = [float(np.median(times[1:])) for times in pass_s.values()]
    steps = {rows: float(np.median(times[1:])) for rows, times in step_s.items()}
    return {"machine": machine_name(device), "device": device.type, "threads": torch.get_num_threads(),
            "command": command, "prefix": len(prompt_ids), "repeats": repeats, "tokens": list(pass_s),
            "pass_s": medians, "pass_ratio": [m / medians[0] for m in medians], "draft_step_s": steps,
            "draft_share": steps[min(steps)] / medians[0]}


def predicted_speedup(curve: dict, block_efficiency: float, num_drafts: int, draft_length: int) -> float:
    """``BE / (pass(K (L + 1)) + L c_K)``: the token rate over plain sampling's that a round of
    block efficiency ``BE`` would give on the machine of ``curve`` (:func:`pass_curve`), with the
    pass over the round's K rows of L + 1 tokens read as a pass over K (L + 1) tokens and
    ``c_K`` the draft step over K rows, both in one-token passes (a projection, not a measurement:
    it leaves out sampling, the scheme's selection and the cache's bookkeeping). NaN when
    K (L + 1) is beyond the curve."""
    width = num_drafts * (draft_length + 1)
    if width > len(curve["pass_ratio"]):
        return float("nan")
    steps = {int(rows): s for rows, s in curve["draft_step_s"].items()}
    rows = min((r for r in steps if r >= num_drafts), default=max(steps))
    draft = steps[rows] * num_drafts / rows / curve["pass_s"][0]
    return block_efficiency / (curve["pass_ratio"][width - 1] + draft_length * draft)


def load_pass_curve(path: str | Path | None = None) -> dict:
    """Read a pass curve written by ``python -m mspec_lab trained-draft-curve`` (default: the
    committed one, :data:`CURVE_RESULTS_FILE`)."""
    import json

    from mspec_lab.experiments.paper_run import committed_file

    path = Path(path) if path is not None else committed_file(CURVE_RESULTS_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no pass curve; write one with "
                                f"`python -m mspec_lab trained-draft-curve --out {path}`")
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["draft_step_s"] = {int(rows): s for rows, s in doc["draft_step_s"].items()}
    return doc
