"""The argument checks of :mod:`mspec.lm.decoding`: each bad argument is a ``ValueError`` that
names it and what it must be."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from mspec.distributions import distribution_from_logits
from mspec.lm.cache import _model_device


@dataclass
class _Settings:
    """The checked arguments of one :func:`~mspec.lm.decoding.speculative_generate` call."""

    scheme: str | None
    params: dict
    num_drafts: int
    draft_length: int
    temps: list[float]
    target_temperature: float
    sampling: dict
    prompt: list[int]
    max_new: int
    eos: frozenset[int]


def _check_settings(prompt_ids, draft_model, target_model, *, scheme, num_drafts, draft_length, draft_temperatures,
                    target_temperature, top_k, top_p, max_new_tokens, eos_token_id, scheme_params,
                    tokenizer) -> _Settings:
    """Check the arguments of :func:`~mspec.lm.decoding.speculative_generate` (same names),
    and gather them.

    Raises:
        ValueError: naming the first bad argument and what it must be.
    """
    from mspec.schemes import registry  # imported late: the registry imports every scheme

    if scheme is not None and (not isinstance(scheme, str) or scheme not in registry.SCHEMES):
        raise ValueError(f"`scheme` must be one of {sorted(registry.SCHEMES)} (or None: the round rule's "
                         f"default), got {scheme!r}")
    k = _check_int(num_drafts, "num_drafts", "the number of drafts K")
    big_l = _check_int(draft_length, "draft_length", "the number of drafted tokens L per round")
    temps = _check_draft_temperatures(draft_temperatures, k)
    _check_temperature(target_temperature, "target_temperature")
    prompt = _check_prompt(prompt_ids, tokenizer)
    max_new = _check_int(max_new_tokens, "max_new_tokens", "the number of tokens to generate")
    eos = _check_eos(eos_token_id)
    _check_models(draft_model, target_model, len(prompt) + max_new + big_l - 1)
    sampling = dict(top_k=top_k, top_p=top_p)
    distribution_from_logits(torch.zeros(1), temperature=1.0, **sampling)  # validates top_k / top_p
    return _Settings(scheme, dict(scheme_params or {}), k, big_l, temps, target_temperature, sampling, prompt,
                     max_new, eos)


def _check_compilable(draft_model, draft_cache: str) -> None:
    """Raise a ``ValueError`` naming the fix unless ``compile_draft=True`` can work: a static
    draft cache, and the draft on a CUDA GPU (what CUDA graphs record)."""
    if draft_cache != "static":
        raise ValueError("`compile_draft=True` needs draft_cache='static': CUDA graphs replay fixed buffers, "
                         "which a dynamic cache does not have")
    device = _model_device(draft_model)
    if device.type != "cuda":
        raise ValueError(
            f"`compile_draft=True` records the draft's steps as CUDA graphs and needs the draft model on a CUDA "
            f"GPU, but it is on {device}; drop compile_draft (draft_cache='static' alone runs on any device) "
            "or move the draft to a GPU"
        )


def _check_int(value, name: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1 ({what}), got {value!r}")
    return int(value)


def _check_temperature(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(
            f"`{name}` must be a number > 0, got {value!r}; for near-greedy decoding use a small "
            "positive temperature"
        )
    return float(value)


def _check_draft_temperatures(value, k: int) -> list[float]:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return [_check_temperature(value, "draft_temperatures")] * k
    try:
        temps = list(value)
    except TypeError:
        raise ValueError(f"`draft_temperatures` must be a number or a sequence of K numbers, got {value!r}") from None
    if len(temps) != k:
        raise ValueError(
            f"`draft_temperatures` has {len(temps)} entries but num_drafts = {k}; pass one temperature "
            "per draft, or a single number for identical drafts"
        )
    return [_check_temperature(t, "draft_temperatures") for t in temps]


def _check_prompt(prompt_ids, tokenizer) -> list[int]:
    if isinstance(prompt_ids, str):
        if tokenizer is None:
            raise ValueError("`prompt_ids` is a string: pass `tokenizer=` or token ids")
        prompt_ids = tokenizer(prompt_ids)["input_ids"]
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dim() == 2 and prompt_ids.shape[0] == 1:
            prompt_ids = prompt_ids[0]
        if prompt_ids.dim() != 1:
            raise ValueError(
                f"`prompt_ids` must have shape (n,) or (1, n) (one prompt), got {tuple(prompt_ids.shape)}"
            )
        prompt_ids = prompt_ids.tolist()
    ids = list(prompt_ids)
    if not ids:
        raise ValueError("`prompt_ids` is empty; pass at least one token (e.g. the BOS token)")
    if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ValueError("`prompt_ids` must hold non-negative integer token ids")
    return [int(t) for t in ids]


def _check_eos(eos_token_id) -> frozenset[int]:
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, numbers.Integral):
        return frozenset([int(eos_token_id)])
    return frozenset(int(t) for t in eos_token_id)


def _vocab_size(model) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and hasattr(head, "weight"):
        return head.weight.shape[0]  # the logits' last dimension
    return model.config.vocab_size


def _check_models(draft_model, target_model, max_positions: int) -> None:
    for name, model in (("draft_model", draft_model), ("target_model", target_model)):
        if model is None:
            continue
        if getattr(model, "training", False):
            raise ValueError(f"`{name}` is in training mode (dropout makes it random); call {name}.eval()")
        limit = getattr(model.config, "max_position_embeddings", None)
        if limit is not None and max_positions > limit:
            raise ValueError(
                f"`{name}` handles {limit} positions but this call may need {max_positions} "
                "(prompt + max_new_tokens + draft_length - 1); shorten the prompt or max_new_tokens"
            )
    if draft_model is not None and _vocab_size(draft_model) != _vocab_size(target_model):
        raise ValueError(
            f"`draft_model` and `target_model` have different vocabularies ({_vocab_size(draft_model)} vs "
            f"{_vocab_size(target_model)} logits); speculative decoding needs one shared tokenizer"
        )


def _check_generator(generator, device: torch.device | str | None = None) -> torch.Generator:
    """``generator`` as a ``torch.Generator``; an int seed or ``None`` makes one on ``device``.

    The generator should live where the distributions it samples from are (the draft model's
    device): a CPU generator would make every drafted token copy its distributions to the host.
    A device without generators of its own (e.g. ``meta``) gets a CPU generator.
    """
    if isinstance(generator, torch.Generator):
        return generator
    if generator is not None and (isinstance(generator, bool) or not isinstance(generator, numbers.Integral)):
        raise ValueError(f"`generator` must be a torch.Generator, an int seed or None, got {type(generator).__name__}")
    try:
        gen = torch.Generator(device=torch.device(device) if device is not None else "cpu")
    except RuntimeError:
        gen = torch.Generator()
    if generator is None:
        gen.seed()  # a fresh non-deterministic seed, not the global RNG
    else:
        gen.manual_seed(int(generator))
    return gen
