"""The trained draft for SmolLM2-135M-Instruct: a shallow exit of the target, a trained
adapter layer and an LM head over the most frequent tokens.

The design follows Kangaroo (Liu et al., 2024: a shallow sub-network of the target plus a
small trained adapter, sharing the LM head) and FR-Spec (Zhao et al., 2025: a draft LM head
restricted to the most frequent tokens). The draft is a ``LlamaForCausalLM`` whose modules
are, in order:

* the target's embedding and its first ``exit_layers`` decoder layers (shared, frozen: no
  copy, no extra memory);
* one decoder layer of the target's shape, trained (the *adapter*), and a trained final norm;
* the target's (tied) LM head restricted to ``M`` frequent tokens: logits of the other
  tokens are ``-inf``, so the draft never proposes them. The draft is still a distribution
  over the full vocabulary, and speculative sampling stays exactly lossless: the selection
  rules handle ``p = 0`` where ``q > 0``.

A draft step costs the shallow layers, the adapter and an ``M``-row head instead of 30 layers
and a 49,152-row head. Only the adapter, the norm and the token list are stored
(:func:`save_adapter`); :func:`trained_draft_model` rebuilds the draft around a loaded target.
Training: :mod:`mspec_lab.trained_draft.train`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from mspec.lm.models import early_exit_model

__all__ = ["DEFAULT_WEIGHTS", "FrequentTokenHead", "load_adapter", "save_adapter", "trained_draft_model",
           "trained_parameters", "weight_share"]

#: the committed weights of the trained draft (adapter, norm, token list; preset
#: ``"smollm2-distilled"``) and their provenance: the folder ``trained_draft/weights`` of the
#: installed package
#:
#: :meta hide-value:
DEFAULT_WEIGHTS = Path(__file__).resolve().parent / "weights"


class FrequentTokenHead(nn.Module):
    """An LM head over ``token_ids`` only: logits ``(..., V)``, ``-inf`` off those tokens.

    Args:
        weight: the full head's weight ``(V, d)`` (the target's, tied to its embedding).
        token_ids: ``(M,)`` the kept token ids.
    """

    def __init__(self, weight: torch.Tensor, token_ids: torch.Tensor):
        super().__init__()
        self.vocab_size = weight.shape[0]
        self.register_buffer("token_ids", token_ids.long(), persistent=False)
        # a copy of the M rows, made once: indexing the full weight at every step would copy it each time
        self.register_buffer("rows", weight.detach()[token_ids].clone(), persistent=False)

    def restricted(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the kept tokens, ``(..., M)`` (what training needs)."""
        return nn.functional.linear(hidden, self.rows)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``(..., V)``: the kept tokens' from :meth:`restricted`, ``-inf`` elsewhere."""
        out = hidden.new_full((*hidden.shape[:-1], self.vocab_size), float("-inf"))
        out[..., self.token_ids] = self.restricted(hidden)
        return out


def trained_draft_model(target, *, exit_layers: int, token_ids: torch.Tensor, adapter_state: dict | None = None):
    """The draft around ``target``: its first ``exit_layers`` layers, an adapter layer, a norm and
    a head over ``token_ids``.

    Args:
        target: SmolLM2-135M-Instruct (any ``LlamaForCausalLM`` works) in eval mode.
        exit_layers: shared target layers, ``1 <= exit_layers < target.config.num_hidden_layers``.
        token_ids: ``(M,)`` the tokens the draft may propose.
        adapter_state: ``{"adapter.*": ..., "norm.*": ...}`` tensors (:func:`load_adapter`);
            ``None`` starts the adapter from the target's layer ``exit_layers`` and its final
            norm (training starts there).

    Returns:
        The draft (a causal LM with logits ``(B, T, V)``; only the adapter and norm own
        parameters of their own).
    """
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    total = target.config.num_hidden_layers
    if isinstance(exit_layers, bool) or not isinstance(exit_layers, int) or not 1 <= exit_layers < total:
        raise ValueError(f"`exit_layers` must be an integer in 1..{total - 1}, got {exit_layers!r}")
    draft = early_exit_model(target, exit_layers)
    draft.config.num_hidden_layers = exit_layers + 1  # the shared layers, then the adapter
    device, dtype = target.lm_head.weight.device, target.lm_head.weight.dtype
    adapter = LlamaDecoderLayer(draft.config, layer_idx=exit_layers).to(device=device, dtype=dtype)
    norm = type(target.model.norm)(target.config.hidden_size, eps=target.config.rms_norm_eps).to(device, dtype)
    if adapter_state is None:
        adapter.load_state_dict(target.model.layers[exit_layers].state_dict())
        norm.load_state_dict(target.model.norm.state_dict())
    else:
        adapter.load_state_dict({k[len("adapter."):]: v for k, v in adapter_state.items() if k.startswith("adapter.")})
        norm.load_state_dict({k[len("norm."):]: v for k, v in adapter_state.items() if k.startswith("norm.")})
    draft.model.layers = nn.ModuleList([*draft.model.layers, adapter])
    draft.model.norm = norm
    draft.lm_head = FrequentTokenHead(target.lm_head.weight, token_ids.to(device))
    return draft.eval()


def weight_share(draft, target) -> float:
    """The weights a draft step multiplies per token (its layers and head rows) over a target
    step's (its layers and full head): the draft step's cost in target steps where weights
    dominate (a memory-bound GPU)."""
    mine = sum(p.numel() for p in draft.model.layers.parameters()) + draft.lm_head.rows.numel()
    return mine / (sum(p.numel() for p in target.model.layers.parameters()) + target.lm_head.weight.numel())


def trained_parameters(draft) -> dict[str, nn.Parameter]:
    """The draft's own parameters, named as :func:`save_adapter` stores them."""
    return {**{f"adapter.{k}": v for k, v in draft.model.layers[-1].named_parameters()},
            **{f"norm.{k}": v for k, v in draft.model.norm.named_parameters()}}


def save_adapter(draft, directory: str | Path, provenance: dict) -> None:
    """Write the adapter and norm (float16 safetensors), the token list and ``provenance`` to ``directory``."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {name: p.detach().to(torch.float16).contiguous().cpu() for name, p in trained_parameters(draft).items()}
    tensors["token_ids"] = draft.lm_head.token_ids.to(torch.int32).cpu()
    meta = {"exit_layers": str(draft.config.num_hidden_layers - 1)}
    save_file(tensors, str(directory / "adapter.safetensors"), metadata=meta)
    (directory / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")


def load_adapter(directory: str | Path | None = None) -> tuple[dict, torch.Tensor, int]:
    """``(adapter_state, token_ids, exit_layers)`` as :func:`save_adapter` wrote them (float32),
    from ``directory`` (default: :data:`DEFAULT_WEIGHTS`)."""
    from safetensors import safe_open

    path = Path(DEFAULT_WEIGHTS if directory is None else directory) / "adapter.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"no trained draft at {path}; train one with `python -m mspec_lab trained-draft-train`")
    with safe_open(str(path), framework="pt") as f:
        exit_layers = int(f.metadata()["exit_layers"])
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    token_ids = tensors.pop("token_ids").long()
    return {k: v.float() for k, v in tensors.items()}, token_ids, exit_layers
