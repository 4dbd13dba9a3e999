"""A draft and a target model as one pair, and the draft models built from a target.

* :class:`ModelPair` and :func:`make_pair`: any two causal LMs (Hugging Face or not) with
  one vocabulary, the input of :func:`mspec.lm.decoding.speculative_generate`.
* :func:`early_exit_model`: a draft made of a target's first layers (shares its weights).
* :func:`guard_shared_weights`: a draft that shares a target's modules refuses to move or
  cast them through the draft alone.

Loading pairs by name (the offline SmolLM2 default, the paper's OPT models from the hub,
GPU planning) and the tiny random-weight models of the tests are the workshop's:
:func:`mspec_lab.models.load_pair`, :func:`mspec_lab.models.tiny_model`.
"""

from __future__ import annotations

import copy
import types
import weakref
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ModelPair", "check_same_vocab", "early_exit_model", "guard_shared_weights", "make_pair",
           "output_vocab_size"]


@dataclass(frozen=True)
class ModelPair:
    """A draft and a target model that share one vocabulary.

    Attributes:
        draft_model: causal LM proposing drafts; logits of shape ``(B, T, V)``. May be the
            very same object as ``target_model``.
        target_model: causal LM whose distribution the output must follow; ``(B, T, V)``.
        tokenizer: Hugging Face tokenizer, or ``None`` (``"tiny"``: token ids only).
        name: the preset name (:func:`mspec_lab.models.load_pair`), or ``"custom"`` for :func:`make_pair`.
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
    path = _decoder_layers_path(model, total)
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:num_layers]
    *parents, leaf = path.split(".")
    root = _shallow_clone(model, model.config, config)
    node = root
    for name in parents:
        child = _shallow_clone(getattr(node, name), model.config, config)
        setattr(node, name, child)
        node = child
    setattr(node, leaf, nn.ModuleList(list(getattr(node, leaf))[:num_layers]))
    guard_shared_weights(root, model)
    return root


def guard_shared_weights(draft: nn.Module, target: nn.Module) -> None:
    """Make ``draft`` refuse a cast or move that would change the weights it shares with ``target``.

    A draft built from a target's own modules (:func:`early_exit_model`, the trained draft
    of ``mspec_lab``) holds the target's parameters, not copies: ``draft.to(torch.bfloat16)``
    would convert part of the target in place and leave the rest, and the target would then
    fail. After this call every ``draft.to(...)``, ``.half()``, ``.cuda()``, ... that would
    change the dtype or device of a shared parameter raises a ``ValueError`` naming the fix
    (cast or move the target, then build the draft from it again), before anything changes.
    Conversions that change nothing (``.to(same device)``, ``.float()`` of float32) and copies
    (``copy.deepcopy(draft)`` shares nothing) are left alone.

    Args:
        draft: the draft model, changed in place (an instance-level ``_apply``).
        target: the model whose parameters ``draft`` shares (held by a weak reference).
    """
    target_ref = weakref.ref(target)

    def _apply(self, fn, *args, **kwargs):
        owner = target_ref()
        owned = {id(p) for p in owner.parameters()} if owner is not None else set()
        shared = next((p for p in self.parameters() if id(p) in owned), None)
        if shared is not None:
            probe = fn(torch.zeros((), dtype=shared.dtype, device=shared.device))
            if (probe.dtype, probe.device) != (shared.dtype, shared.device):
                raise ValueError(
                    f"this draft shares its embedding and first layers with the target (the same "
                    f"parameters, not copies): converting it to {probe.dtype} on {probe.device} would "
                    "convert part of the target too. Cast or move the target instead, then build the "
                    "draft from it again (e.g. load_pair(..., dtype=..., device=...) or "
                    "early_exit_model(target.to(...), n))"
                )
        return type(self)._apply(self, fn, *args, **kwargs)

    draft._apply = types.MethodType(_apply, draft)


def _decoder_layers_path(model: nn.Module, total: int) -> str:
    """Dotted name of ``model``'s ``nn.ModuleList`` of ``total`` decoder layers (e.g.
    ``"model.decoder.layers"``); raises ``ValueError`` when there is none."""
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
    return path


def _shallow_clone(module: nn.Module, old_config, new_config) -> nn.Module:
    """A new module object sharing ``module``'s children, parameters and buffers (its own
    dicts of them, so they can be replaced), with ``new_config`` where it had ``old_config``."""
    if "forward" in vars(module) or hasattr(module, "_hf_hook"):
        raise ValueError(
            "early exit cannot clone a model whose forward is wrapped (e.g. dispatched by "
            "accelerate with device_map='auto'); load the target on one device"
        )
    out = copy.copy(module)  # new object, its own child/parameter dicts, same tensors
    out._modules = module._modules.copy()
    out._parameters = module._parameters.copy()
    out._buffers = module._buffers.copy()
    if getattr(out, "config", None) is old_config:
        out.config = new_config
    return out

