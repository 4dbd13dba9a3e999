"""Wall-clock speed of the trained draft (preset ``"smollm2-distilled"``) on this CPU.

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

**Cost model.** Beside the measurements it prints where a round's time goes: a target pass
over the K x (L + 1) drafted tokens in units of one plain decoding step, and one draft step.
On this CPU the target pass grows with K x (L + 1), so K > 1 pays only while the extra
accepted tokens outweigh the wider pass. On a GPU a pass over a few dozen tokens costs about
one decoding step (memory bound), so the projected GPU speed-up is ``BE / (1 + L c)``, with
``c`` the draft step's share of the target's weights (a model, not a measurement).

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

__all__ = ["SETTING_FIELDS", "SPEED_RESULTS_FILE", "TrainedDraftSpeedSettings", "bench_trained_draft",
           "load_trained_draft_speed", "summarize_speed"]

#: the committed results file, relative to the repository
SPEED_RESULTS_FILE = Path("results") / "offline_default" / "trained_draft.json"
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
            settings.append({
                "num_drafts": k, "draft_length": length, "threads": threads,
                "block_efficiency": be[0], "block_efficiency_se": be[1],
                "speedup": speedup[0], "speedup_se": speedup[1], "n": speedup[2],
                "tokens_per_s": mean_se([_rate(run) for run in spec])[0],
                "acceptance_per_position": _acceptance(spec, length),
                "cost": {"draft_step_steps": float(np.mean([r.draft_time for r in rounds]) / length / step),
                         "target_pass_steps": float(np.mean([r.target_time for r in rounds]) / step),
                         "overhead_steps": float(np.mean([r.selection_time + r.cache_time for r in rounds]) / step)},
                "gpu_projected_speedup": be[0] / (1 + length * draft_share)})
    return {"plain": plain_rates, "settings": settings, "draft_share": draft_share}


def _report(result: dict, s: TrainedDraftSpeedSettings) -> None:
    rows = [[str(r["threads"]), str(r["num_drafts"]), str(r["draft_length"]),
             " ".join("-" if np.isnan(a[0]) else f"{a[0]:.2f}" for a in r["acceptance_per_position"]),
             fmt(r["block_efficiency"], r["block_efficiency_se"], n=r["n"]),
             fmt(r["speedup"], r["speedup_se"], n=r["n"]) + "x",
             f"{r['cost']['target_pass_steps']:.2f}", f"{r['cost']['draft_step_steps']:.3f}",
             f"{r['gpu_projected_speedup']:.2f}x"] for r in result["settings"]]
    header = ["threads", "K", "L", "acceptance by position", "block efficiency", "speed-up (CPU)",
              "target pass / step", "draft step / step", "GPU model"]
    plain = "; ".join(f"{t} thread(s): {fmt(p['tokens_per_s'], p['tokens_per_s_se'], 1, n=p['n'])} tokens/s"
                      for t, p in result["plain"].items())
    best = max(result["settings"], key=lambda r: r["speedup"])
    notes = [f"plain sampling from the target: {plain}",
             "acceptance by position: the share of the rounds reaching a draft position that keep its token "
             "('-': no round reached it)",
             f"best: K={best['num_drafts']}, L={best['draft_length']}, {best['threads']} thread(s): "
             f"{fmt(best['speedup'], best['speedup_se'], n=best['n'])}x plain sampling's token rate",
             "speed-up: decoding tokens/s over plain sampling's on the same prompts (ratio of sums, s.e. over prompts)",
             "target pass / step, draft step / step: a round's measured costs in plain decoding steps",
             f"GPU model: BE / (1 + L c), c = {result['draft_share']:.3f} the draft step's share of the "
             "target's weights, a target pass as cheap as one step (a model, not a measurement)"]
    print_block("Trained draft (smollm2-distilled) against plain sampling, held-out prompts",
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
    prompts = held_out_prompts(pair.tokenizer, s.prompts, data_dir)
    runs = _runs(pair, prompts, s, log)
    result = {**smoke_test_fields(s.smoke_test), "pair": pair.description, "bench": asdict(s), "command": command,
              "code": code_version(),
              **summarize_speed(runs, s, weight_share(pair.draft_model, pair.target_model))}
    _report(result, s)
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
