"""GPU timing: where a round's time goes, token rates and the speed-up to expect.

Token rates: autoregressive sampling, Hugging Face assisted generation, mspec at K = 1..8.

:func:`time_gpu` (command ``python -m mspec_lab gpu``) times OPT-125m drafting for OPT-1.3b
and OPT-13b, the paper's pair (Khisti et al., ICLR 2025, Section 6), in float16 on one GPU, in
a few minutes:

* the per-round time split of mspec's decoder for K = 1, 2, 4, 8 drafts of L = 5 tokens:
  draft (L K-row draft steps with their sampling), target (one K-row pass over L + 1
  positions), selection (the token-level scheme), cache (KV-cache expand/select/crop) and
  other (Python bookkeeping of the round), plus the cost of **one draft step** and the
  decoder's **non-model overhead** per round (selection + cache + other);
* tokens per second of autoregressive sampling (mspec's and Hugging Face's
  ``generate(do_sample=True)``), of Hugging Face assisted generation
  (``target.generate(..., assistant_model=draft, do_sample=True)``, one draft of L tokens a
  round), and of mspec at each K;
* the speed-up over autoregressive sampling a reader can expect at the paper's block
  efficiencies (Table 1, :data:`mspec_lab.experiments.paper.TABLE1_BLOCK_EFFICIENCY`):

      projected speed-up = BE * t_AR / (L * t_draft_step + t_target + overhead),

  where ``t_AR`` is the measured time per token of autoregressive sampling and the three
  terms below are the measured mean costs of a round at that K;
* three goals, printed as PASS / FAIL lines on a GPU: mspec at K = 1 at least as fast per
  token as HF assisted generation; L = 5 draft steps under 40 % of one target pass; a
  projected speed-up above 1.5x at the paper's block efficiency.

**Weights.** With the Hugging Face hub reachable (``weights="auto"``, the default) the real
checkpoints are loaded (``load_pair("opt", ...)``; downloading opt-13b, about 26 GB, takes
extra minutes); otherwise, or with ``weights="random"``, random-weight models of the real
shapes (:func:`mspec_lab.models.opt_config`), built directly on the GPU in float16. Random
weights time exactly like real ones, but their acceptance and block efficiency mean nothing:
use them for timing only (the output says which weights ran). A target too large for the GPU
is skipped with the reason (:func:`mspec_lab.models.choose_opt_target`'s rule).

**Dry run.** ``dry_run=True`` (automatic without CUDA) runs the same code on the CPU with two
tiny random models, in seconds: a smoke test of the script. Its numbers mean nothing, and
the output says so first (:data:`DRY_RUN_BANNER`) and under every table; the goals are
printed without being judged.

**A cheaper draft step.** On a large GPU a decoding step of a model as small as OPT-125m
is expected to be bound by kernel launches (a dozen layers of small kernels), not by
arithmetic or memory: then its time hardly grows from K = 1 to K = 8 rows, which the last
lines of the goals block show (draft step at the largest K over the smallest). What
transformers offers against it is a ``StaticCache`` and a decoding step compiled with CUDA
graphs; mspec's decoder uses both with ``speculative_generate(..., draft_cache="static",
compile_draft=True)`` (:mod:`mspec.lm.decoding`; the output law is unchanged). So mspec is timed
twice at each K: with the default dynamic draft cache and with the static one, compiled on a
GPU (:data:`STATIC_DRAFT`; its warm-up run compiles) and uncompiled in the dry run (compiling
needs CUDA). The split table has one row per K and draft cache, and goals (a) and (b) are
judged for both. The decoder's generator lives on the draft model's device (an int seed
creates it there), so sampling a drafted token costs no copy to the host.
"""

from __future__ import annotations

import gc
import time

from mspec_lab.experiments import paper
from mspec_lab.experiments.report import format_table, print_block

__all__ = ["DEFAULT_TARGETS", "DRAFT", "DRY_RUN", "DRY_RUN_BANNER", "GPU_RUN", "PROJECTED_SCHEMES", "STATIC_DRAFT",
           "measure", "projected_speedup", "time_gpu"]

#: the paper's draft
DRAFT = "facebook/opt-125m"
#: targets timed by default: the notebooks' T4 target and the paper's target
DEFAULT_TARGETS = ("facebook/opt-1.3b", "facebook/opt-13b")
#: the Table 1 schemes (the ones with a paper block efficiency to project from)
PROJECTED_SCHEMES = tuple(paper.TABLE1_BLOCK_EFFICIENCY)
#: goal (b): L draft steps cost less than this share of one target pass
DRAFT_SHARE_GOAL = 0.40
#: goal (c): projected speed-up over autoregressive sampling at the paper's block efficiency
SPEEDUP_GOAL = 1.5
#: a draft step at the largest K costing less than this many steps at the smallest K points
#: to a launch-bound step (see the module's docstring)
LAUNCH_BOUND_GROWTH = 1.5
#: run sizes on a GPU and in the dry run (where nothing is judged)
GPU_RUN = {"max_new_tokens": 128, "prompt_length": 64, "repeats": 2}
DRY_RUN = {"max_new_tokens": 12, "prompt_length": 8, "repeats": 1}
#: tokens of each method's warm-up generation (CUDA kernels, cuBLAS workspaces, allocator pools)
WARMUP_TOKENS = 4
#: the second way mspec is timed: ``speculative_generate`` arguments and the label of its rows,
#: on a GPU (static draft cache, steps compiled with CUDA graphs) and in the dry run (compiling
#: needs CUDA: the static cache alone)
STATIC_DRAFT = {"gpu": ({"draft_cache": "static", "compile_draft": True}, "static+graphs"),
                "dry": ({"draft_cache": "static"}, "static")}
#: the two tiny models of the dry run (OPTConfig overrides of the opt-125m / opt-1.3b shapes)
DRY_RUN_SHAPES = {
    "draft": dict(vocab_size=512, hidden_size=32, word_embed_proj_dim=32, num_hidden_layers=2,
                  num_attention_heads=2, ffn_dim=64, max_position_embeddings=256),
    "target": dict(vocab_size=512, hidden_size=64, word_embed_proj_dim=64, num_hidden_layers=4,
                   num_attention_heads=4, ffn_dim=128, max_position_embeddings=256),
}
#: the first line of a dry run, and the line under each of its tables
DRY_RUN_BANNER = ("SMOKE TEST (dry run): two tiny random-weight models on the CPU check that the script runs end to "
                  "end; its timings are not results and no goal is judged. Run on a CUDA GPU without --dry-run "
                  "for results.")
DRY_RUN_LINE = "SMOKE TEST (dry run): these numbers check the script; they are not results"
RANDOM_NOTE = ("random weights: timing only -- their acceptance and block efficiency mean nothing "
               "(real checkpoints need the Hugging Face hub)")


def time_gpu(*, dry_run: bool = False, weights: str = "auto", targets=DEFAULT_TARGETS, drafts_k=(1, 2, 4, 8),
             draft_length: int = paper.DRAFT_LENGTH, scheme: str = "specinfer", max_new_tokens: int | None = None,
             prompt_length: int | None = None, repeats: int | None = None, seed: int = 0,
             threads: int | None = None) -> dict[str, dict]:
    """Time every method for each target and print the tables (see the module's docstring).

    Args:
        dry_run: two tiny random models on the CPU, seconds; automatic without CUDA.
        weights: ``"hub"`` (real checkpoints), ``"random"`` (random weights of the real
            shapes) or ``"auto"`` (the hub when reachable).
        targets: OPT targets (keys of :data:`mspec_lab.models.OPT_SHAPES`); too large ones are skipped.
        drafts_k: values of K; ``draft_length``: L; ``scheme``: the scheme for K >= 2 (one of
            :data:`PROJECTED_SCHEMES`).
        max_new_tokens, prompt_length, repeats: tokens per run, prompt tokens and runs per
            method (``None``: :data:`GPU_RUN`, or :data:`DRY_RUN` in a dry run).
        seed: base seed.
        threads: torch CPU threads (``torch.set_num_threads``, a process-wide setting);
            ``None``: 1 in a dry run (tiny models: more threads only contend), else unchanged.

    Returns:
        pair label -> :func:`measure`'s result, for each pair that ran.
    """
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # assisted generation warns about its own internal settings
    try:
        s = _settings(dry_run, drafts_k, draft_length, scheme, max_new_tokens, prompt_length, repeats, seed, threads)
        return _time_dry_run(s) if s["dry"] else _time_targets(s, weights, targets)
    finally:
        hf_logging.set_verbosity(verbosity)


def _settings(dry_run, drafts_k, draft_length, scheme, max_new_tokens, prompt_length, repeats, seed, threads) -> dict:
    """The run's settings, ``dry`` resolved (no CUDA: a dry run); applies ``threads``."""
    import torch

    from mspec_lab.models import check_environment

    if scheme not in PROJECTED_SCHEMES:
        raise ValueError(f"`scheme` must be one of {PROJECTED_SCHEMES} (a Table 1 scheme), got {scheme!r}")
    dry = dry_run or not torch.cuda.is_available()
    if threads is not None or dry:
        torch.set_num_threads(threads or 1)
    given = {"max_new_tokens": max_new_tokens, "prompt_length": prompt_length, "repeats": repeats}
    sizes = {name: given[name] if given[name] is not None else (DRY_RUN if dry else GPU_RUN)[name] for name in given}
    if dry:
        print(DRY_RUN_BANNER)
    versions = check_environment(verbose=False)
    print("python -m mspec_lab gpu: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    return {"dry": dry, "dry_reason": "--dry-run" if dry_run else "no CUDA GPU found", "draft_length": draft_length,
            "drafts_k": sorted(set(drafts_k)), "scheme": scheme, "seed": seed, **sizes}


# -- models ----------------------------------------------------------------------------------------
def _time_dry_run(s: dict) -> dict[str, dict]:
    """Two tiny random-weight models on the CPU: checks the script, judges nothing."""
    import torch

    print(f"dry run ({s['dry_reason']}): two tiny random-weight models on the CPU, float32; this checks that the "
          "script runs, its numbers mean nothing and no goal is judged")
    print(f"note: {RANDOM_NOTE}")
    draft_model, target_model = (_random_model(_dry_config(role), device=torch.device("cpu"),
                                               dtype=torch.float32, seed=s["seed"] + i)
                                 for i, role in enumerate(("draft", "target")))
    prompt = _random_prompt(s["prompt_length"], draft_model.config.vocab_size, s["seed"])
    shapes = {role: f"{DRY_RUN_SHAPES[role]['num_hidden_layers']} layers, hidden {DRY_RUN_SHAPES[role]['hidden_size']}"
              for role in DRY_RUN_SHAPES}
    label = f"dry run: tiny draft ({shapes['draft']}) -> tiny target ({shapes['target']}), random weights, CPU"
    result = measure(draft_model, target_model, prompt, s)
    _report(label, result, s)
    return {label: result}


def _time_targets(s: dict, weights: str, targets) -> dict[str, dict]:
    """Each target that fits the GPU, with real or random weights."""
    import torch

    from mspec_lab.data import hub_available

    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    if weights == "auto":
        weights = "hub" if hub_available() else "random"
        print("weights: " + ("real checkpoints (the hub is reachable)" if weights == "hub"
                             else "random (the hub is unreachable)"))
    print(f"GPU: {props.name}, {props.total_memory / 1e9:.1f} GB; float16; L = {s['draft_length']}, "
          f"K = {', '.join(map(str, s['drafts_k']))}, {s['max_new_tokens']} new tokens after a "
          f"{s['prompt_length']}-token prompt, {s['repeats']} run(s) per method")
    if weights == "random":
        print(f"note: {RANDOM_NOTE}")
    results, draft_model = {}, None
    for name in targets:
        fits, why = _fits(name, device)
        if not fits:
            print(f"\n== {DRAFT} -> {name}: skipped, {why}")
            continue
        label = f"{DRAFT} -> {name}, {'real' if weights == 'hub' else 'random'} weights, float16, {props.name}"
        try:
            draft_model, target_model, prompt = _load(name, weights, device, draft_model, s)
        except (RuntimeError, ValueError) as error:  # e.g. out of memory, or the hub failed midway
            print(f"\n== {label}: skipped, could not load it: {error}")
            target_model = None
        else:
            results[label] = measure(draft_model, target_model, prompt, s)
            _report(label, results[label], s)
        del target_model
        if weights == "hub":
            draft_model = None  # load_pair loads the draft with each target
        gc.collect()
        torch.cuda.empty_cache()
    return results


def _load(name: str, weights: str, device, draft_model, s: dict):
    """``(draft_model, target_model, prompt ids)`` for target ``name`` in float16 on ``device``
    (random weights: the draft model is built once and reused)."""
    import torch

    if weights == "hub":
        from mspec_lab.models import load_pair

        pair = load_pair("opt", draft=DRAFT, target=name, device=device, dtype=torch.float16)
        prompt = pair.tokenizer(_builtin_prompt_text())["input_ids"][: s["prompt_length"]]
        return pair.draft_model, pair.target_model, prompt
    from mspec_lab.models import opt_config

    if draft_model is None:
        draft_model = _random_model(opt_config(DRAFT), device=device, dtype=torch.float16, seed=s["seed"])
    target_model = _random_model(opt_config(name), device=device, dtype=torch.float16, seed=s["seed"] + 1)
    return draft_model, target_model, _random_prompt(s["prompt_length"], target_model.config.vocab_size, s["seed"])


def _dry_config(role: str):
    from mspec_lab.models import opt_config

    return opt_config(DRAFT if role == "draft" else DEFAULT_TARGETS[0], **DRY_RUN_SHAPES[role])


def _random_model(config, *, device, dtype, seed: int):
    """A random-weight OPT of ``config``, built directly on ``device`` in ``dtype`` (no float32
    copy: opt-13b in float16 is 26 GB, in float32 52 GB)."""
    import torch
    from transformers import OPTForCausalLM

    devices = ([device.index if device.index is not None else torch.cuda.current_device()]
               if device.type == "cuda" else [])
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        with torch.device(device):
            model = OPTForCausalLM._from_config(config, dtype=dtype)
    return model.eval()


def _random_prompt(length: int, vocab_size: int, seed: int) -> list[int]:
    import numpy as np

    # ids from 4 on: OPT's ids 0-3 are its special tokens (<s>, pad, </s>, unk)
    return [int(t) for t in np.random.default_rng(seed).integers(4, vocab_size, size=length)]


def _builtin_prompt_text() -> str:
    from mspec_lab.data import load_prompts

    return load_prompts("dolly", n=1, source="builtin")[0].prompt


def _fits(name: str, device) -> tuple[bool, str]:
    """Whether draft + target float16 weights fit in the GPU's weight budget, and why not."""
    import torch

    from mspec_lab.models import GPU_WEIGHT_BUDGET, OPT_PARAMETERS

    need = 2 * (OPT_PARAMETERS[DRAFT] + OPT_PARAMETERS[name])
    free, total = torch.cuda.mem_get_info(device)
    if need <= GPU_WEIGHT_BUDGET * free:
        return True, ""
    return False, (f"its float16 weights and the draft's need {need / 1e9:.1f} GB, over {GPU_WEIGHT_BUDGET:.0%} "
                   f"of the GPU's {free / 1e9:.1f} GB free (mspec_lab.models.choose_opt_target("
                   f"{total}) picks a target that fits)")


# -- measurements ----------------------------------------------------------------------------------
def _sync() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _hf_generate(target_model, prompt, max_new: int, seed: int, *, assistant=None, draft_length: int = 5):
    """Hugging Face sampling (``assistant=None``) or assisted generation with one draft of
    ``draft_length`` tokens a round (constant schedule, no early stop on low confidence).

    Returns:
        ``(new_tokens, seconds)``, prefill included as for mspec.
    """
    import copy

    import torch

    from mspec.lm.decoding import model_device

    ids = torch.tensor([prompt], device=model_device(target_model))
    kwargs = dict(do_sample=True, max_new_tokens=max_new, top_k=0, top_p=1.0, temperature=1.0,
                  attention_mask=torch.ones_like(ids), pad_token_id=target_model.config.pad_token_id)
    saved = None
    if assistant is not None:
        saved = assistant.generation_config
        config = copy.deepcopy(saved)
        config.num_assistant_tokens = draft_length
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0
        assistant.generation_config = config
        kwargs["assistant_model"] = assistant
    try:
        torch.manual_seed(seed)  # HF samples from the global generators
        _sync()
        start = time.perf_counter()
        with torch.inference_mode():
            out = target_model.generate(ids, **kwargs)
        _sync()
        seconds = time.perf_counter() - start
    finally:
        if saved is not None:
            assistant.generation_config = saved
    return int(out.shape[1] - ids.shape[1]), seconds


def measure(draft_model, target_model, prompt, s: dict) -> dict:
    """Time every method on ``prompt``.

    Returns:
        ``rates``: method -> tokens per second; ``t_ar``: seconds per token of autoregressive
        decoding; ``split``: row label (``"K=2"``, ``"K=2 static"``, ...) -> the round split of
        ``_round_split`` with ``"k"`` added, for each K with the dynamic draft cache, then
        with :data:`STATIC_DRAFT` (a K whose static run failed is left out, with the reason
        printed); ``hf_assisted_label``: the rate key of HF assisted generation.
    """
    from mspec.lm.decoding import autoregressive_generate, speculative_generate

    big_l, n_new, seed = s["draft_length"], s["max_new_tokens"], s["seed"]

    def mspec_run(k, max_new, run_seed, **draft_cache):
        return speculative_generate(prompt, draft_model=draft_model, target_model=target_model,
                                    scheme="single" if k == 1 else s["scheme"], num_drafts=k, draft_length=big_l,
                                    max_new_tokens=max_new, generator=run_seed, **draft_cache)

    def ar_run(max_new, run_seed):
        return autoregressive_generate(prompt, target_model=target_model, max_new_tokens=max_new, generator=run_seed)

    # warm-up: CUDA kernels, cuBLAS workspaces, the allocator's pools, for every method and K
    ar_run(WARMUP_TOKENS, seed)
    _hf_generate(target_model, prompt, WARMUP_TOKENS, seed)
    _hf_generate(target_model, prompt, WARMUP_TOKENS, seed, assistant=draft_model, draft_length=big_l)
    for k in s["drafts_k"]:
        mspec_run(k, 2 * big_l, seed)  # two rounds at least

    out = {"rates": {}, "split": {}, "hf_assisted_label": f"HF assisted (1 draft, L={big_l})"}
    ar = [ar_run(n_new, seed + r) for r in range(s["repeats"])]
    ar_tokens = sum(len(x.token_ids) for x in ar)
    out["rates"]["autoregressive (mspec)"] = ar_tokens / sum(x.wall_time for x in ar)
    out["t_ar"] = sum(x.wall_time - x.prefill_time for x in ar) / ar_tokens  # seconds per decoded token
    for label, assistant in (("HF sampling (no draft)", None), (out["hf_assisted_label"], draft_model)):
        runs = [_hf_generate(target_model, prompt, n_new, seed + r, assistant=assistant, draft_length=big_l)
                for r in range(s["repeats"])]
        out["rates"][label] = sum(n for n, _ in runs) / sum(t for _, t in runs)
    for k in s["drafts_k"]:
        _time_mspec(out, k, "", [mspec_run(k, n_new, seed + r) for r in range(s["repeats"])], s)
    draft_cache, variant = STATIC_DRAFT["dry" if s["dry"] else "gpu"]
    for k in s["drafts_k"]:
        try:
            mspec_run(k, 2 * big_l, seed, **draft_cache)  # warm-up; on a GPU the first call compiles
            runs = [mspec_run(k, n_new, seed + r, **draft_cache) for r in range(s["repeats"])]
        except (RuntimeError, ValueError) as error:  # e.g. a compiler missing on this machine
            print(f"mspec K={k} with the {variant} draft cache: skipped, {error}")
            continue
        _time_mspec(out, k, variant, runs, s)
    return out


def _time_mspec(out: dict, k: int, variant: str, runs, s: dict) -> None:
    """Enter mspec's generations ``runs`` at K = ``k`` with draft cache ``variant`` (``""``:
    the default) into ``out``'s round splits and token rates."""
    row = f"K={k}" + (f" {variant}" if variant else "")
    out["split"][row] = dict(_round_split(runs, s["draft_length"]), k=k)
    out["rates"][_mspec_label(k, s, variant)] = sum(len(x.token_ids) for x in runs) / sum(x.wall_time for x in runs)


def _round_split(runs, draft_length: int) -> dict:
    """Mean seconds per round of mspec's generations ``runs`` in each part, and their totals."""
    rounds = [rec for x in runs for rec in x.rounds]
    n = len(rounds)
    parts = {part: sum(getattr(rec, f"{part}_time") for rec in rounds) / n
             for part in ("draft", "target", "selection", "cache")}
    decode = sum(x.wall_time - x.prefill_time for x in runs) / n
    parts["other"] = max(decode - sum(parts.values()), 0.0)
    parts["draft_step"] = parts["draft"] / draft_length
    parts["overhead"] = parts["selection"] + parts["cache"] + parts["other"]
    parts["round"] = decode
    parts["rounds"] = n
    parts["block_efficiency"] = sum(len(x.token_ids) for x in runs) / n
    return parts


def _mspec_label(k: int, s: dict, variant: str = "") -> str:
    scheme = "single" if k == 1 else s["scheme"]
    return f"mspec K={k} ({scheme}" + (f", {variant} draft cache)" if variant else ")")


def projected_speedup(block_efficiency: float, t_ar: float, split: dict, draft_length: int) -> float:
    """``BE * t_AR / (L * t_draft_step + t_target + overhead)`` (all in seconds)."""
    return block_efficiency * t_ar / (draft_length * split["draft_step"] + split["target"] + split["overhead"])


# -- report ----------------------------------------------------------------------------------------
def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.2f}"


def _report(label: str, m: dict, s: dict) -> None:
    """Print the time split, the token rates, the projected speed-ups and the goals."""
    big_l = s["draft_length"]
    body = [[row, str(t["rounds"]), f"{t['block_efficiency']:.2f}", _ms(t["draft"]), _ms(t["target"]),
             _ms(t["selection"]), _ms(t["cache"]), _ms(t["other"]), _ms(t["draft_step"]), _ms(t["overhead"]),
             _ms(t["round"])] for row, t in m["split"].items()]
    variant = STATIC_DRAFT["dry" if s["dry"] else "gpu"][1]
    print_block(
        f"{label}: where a round's time goes (mean per round, mspec, L = {big_l})",
        format_table(["K", "rounds", "BE", "draft ms", "target ms", "selection ms", "cache ms", "other ms",
                      "draft step ms", "overhead ms", "round ms"], body),
        [f"draft = {big_l} K-row draft steps with sampling (draft step = draft / {big_l}); target = one K-row pass "
         f"over {big_l} + 1 positions; overhead = selection + cache + other (the decoder's non-model time)",
         f"K=k: the draft's dynamic KV cache; K=k {variant}: " + (
             "a static draft cache, uncompiled (compiling needs CUDA)" if s["dry"] else
             "a static draft cache, decoding steps compiled with CUDA graphs"),
         "BE = block efficiency, tokens per target call" + (" (meaningless with random weights)"
                                                            if s["dry"] or "random" in label else ""),
         DRY_RUN_LINE if s["dry"] else ""])
    base = m["rates"]["autoregressive (mspec)"]
    body = [[method, f"{rate:.1f}", f"{rate / base:.2f}x"] for method, rate in m["rates"].items()]
    print_block(f"{label}: tokens per second (prefill included)",
                format_table(["method", "tokens/s", "vs autoregressive"], body),
                [f"autoregressive decoding: {_ms(m['t_ar'])} ms per token (t_AR)", DRY_RUN_LINE if s["dry"] else ""])
    projections = _print_projections(label, m, big_l, s["dry"])
    _print_goals(label, m, s, projections)


def _print_projections(label: str, m: dict, big_l: int, dry: bool = False) -> dict:
    """The projected speed-up for each row of the split at the paper's block efficiencies;
    returns ``(scheme, row) -> (block efficiency, speed-up)``."""
    body, projections = [], {}
    for row, t in m["split"].items():
        cells = []
        for scheme in PROJECTED_SCHEMES:
            be = paper.paper_value(paper.TABLE1_BLOCK_EFFICIENCY, scheme, t["k"])
            if be is None:
                cells.append("-")
                continue
            x = projected_speedup(be[0], m["t_ar"], t, big_l)
            projections[(scheme, row)] = (be[0], x)
            cells.append(f"{x:.2f}x (BE {be[0]:.2f})")
        body.append([row, _ms(big_l * t["draft_step"] + t["target"] + t["overhead"]), *cells])
    print_block(
        f"{label}: projected speed-up over autoregressive sampling at the paper's block efficiency",
        format_table(["K", "L*draft step + target + overhead ms", *PROJECTED_SCHEMES], body),
        [f"projected speed-up = BE * t_AR / (L * t_draft_step + t_target + overhead), BE from {paper.CITATION} "
         f"Table 1 ({paper.PAIR}, Dolly; it has K = 2..6 only)", DRY_RUN_LINE if dry else ""])
    return projections


def _print_goals(label: str, m: dict, s: dict, projections: dict) -> None:
    """Goals (a)-(c), judged on a GPU only, and how a draft step's cost grows with K."""
    variant = STATIC_DRAFT["dry" if s["dry"] else "gpu"][1]
    checks = _k1_checks(m, s, "") + _k1_checks(m, s, variant)
    for (scheme, row), (be, x) in projections.items():
        if scheme == s["scheme"]:
            checks.append((x > SPEEDUP_GOAL, f"(c) projected speed-up above {SPEEDUP_GOAL}x at the paper's block "
                                             f"efficiency, {scheme} {row} (BE {be:.2f}): {x:.2f}x"))
    lines = [f"dry run, not judged: {text}" if s["dry"] else f"{'PASS' if ok else 'FAIL'} {text}"
             for ok, text in checks]
    for suffix in ("", f" {variant}"):
        rows = {t["k"]: t for row, t in m["split"].items() if row == f"K={t['k']}{suffix}"}
        if len(rows) > 1:
            ks = sorted(rows)
            growth = rows[ks[-1]]["draft_step"] / rows[ks[0]]["draft_step"]
            lines.append(f"a draft step at K={ks[-1]}{suffix} costs {growth:.1f}x one at K={ks[0]}{suffix}"
                         + ("; near 1x means launch-bound: see this module's docstring for CUDA graphs"
                            if growth < LAUNCH_BOUND_GROWTH and not s["dry"] else ""))
    print_block(f"{label}: goals (judged on a GPU only)", "\n".join(lines), [DRY_RUN_LINE if s["dry"] else ""])


def _k1_checks(m: dict, s: dict, variant: str) -> list[tuple[bool, str]]:
    """Goals (a) and (b) at K = 1 with draft cache ``variant`` (``""``: the default), if it ran."""
    k1 = m["split"].get("K=1" + (f" {variant}" if variant else ""))
    if k1 is None:
        return []
    big_l, where = s["draft_length"], f", {variant} draft cache" if variant else ""
    mine, theirs = m["rates"][_mspec_label(1, s, variant)], m["rates"][m["hf_assisted_label"]]
    share = big_l * k1["draft_step"] / k1["target"]
    return [(mine >= theirs, f"(a) mspec K=1{where} at least as fast per token as HF assisted generation: "
                             f"{mine:.1f} vs {theirs:.1f} tokens/s"),
            (share < DRAFT_SHARE_GOAL, f"(b) {big_l} draft steps under {DRAFT_SHARE_GOAL:.0%} of one target pass "
                                       f"(K=1{where}): {big_l} x {_ms(k1['draft_step'])} ms = {share:.0%} of "
                                       f"{_ms(k1['target'])} ms")]
