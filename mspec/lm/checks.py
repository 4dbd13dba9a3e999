"""The argument checks of :mod:`mspec.lm.decoding`: each bad argument is a ``ValueError`` that
names it and what it must be."""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from mspec.distributions import check_temperature, distribution_from_logits
from mspec.lm.cache import model_device
from mspec.lm.models import output_vocab_size
from mspec.rounds.registry import check_draft_temperatures, make_round_rule, round_rule_class
from mspec.rounds.rule import RoundRule

#: the token-level scheme of ``verify="per-position"`` when none is given
DEFAULT_SCHEME = "specinfer"


@dataclass
class DecodeSettings:
    """The checked arguments of one :func:`~mspec.lm.decoding.speculative_generate` call."""

    rule: RoundRule
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


def check_settings(prompt_ids, draft_model, target_model, *, verify, scheme, num_drafts, draft_length,
                   draft_temperatures, target_temperature, top_k, top_p, max_new_tokens, eos_token_id,
                   scheme_params, tokenizer) -> DecodeSettings:
    """Check the arguments of :func:`~mspec.lm.decoding.speculative_generate` (same names), and
    gather them; warn when the draft is the target at the target's temperature. The round's own
    arguments are checked where its rule is made (:func:`mspec.rounds.registry.make_round_rule`).

    Raises:
        ValueError: naming the first bad argument and what it must be.
    """
    rule = make_round_rule(round_rule_class(verify).name, num_drafts=num_drafts, draft_temperatures=draft_temperatures,
                           scheme=_scheme_for(verify, scheme), scheme_params=scheme_params,
                           vocab_size=output_vocab_size(target_model))
    k = rule.num_drafts
    temps = check_draft_temperatures(draft_temperatures, k)
    big_l = check_int(draft_length, "draft_length", "the number of drafted tokens L per round")
    check_temperature(target_temperature, "target_temperature")
    max_new = check_int(max_new_tokens, "max_new_tokens", "the number of tokens to generate")
    eos = check_eos(eos_token_id, target_model, tokenizer)
    prompt = check_prompt(prompt_ids, tokenizer, output_vocab_size(target_model))
    check_models(draft_model, target_model, len(prompt) + max_new + big_l - 1)
    sampling = dict(top_k=top_k, top_p=top_p)
    distribution_from_logits(torch.zeros(1), temperature=1.0, **sampling)  # validates top_k / top_p
    if draft_model is target_model and all(t == target_temperature for t in temps):
        warnings.warn(f"draft_model is target_model and every draft temperature equals target_temperature "
                      f"({target_temperature}): every drafted token is accepted, so the run measures nothing; "
                      "pass a smaller draft (e.g. mspec.lm.models.early_exit_model(target, n)) or other "
                      "draft_temperatures", UserWarning, stacklevel=3)
    return DecodeSettings(rule, scheme, dict(scheme_params or {}), k, big_l, temps, target_temperature, sampling,
                          prompt, max_new, eos)


def _scheme_for(verify, scheme):
    """``scheme``, or :data:`DEFAULT_SCHEME` where per-position verification is given none."""
    return DEFAULT_SCHEME if scheme is None and round_rule_class(verify).name == "per-position" else scheme


def check_compilable(draft_model, draft_cache: str) -> None:
    """Raise a ``ValueError`` naming the fix unless ``compile_draft=True`` can work: a static
    draft cache, and the draft on a CUDA GPU (what CUDA graphs record)."""
    if draft_cache != "static":
        raise ValueError("`compile_draft=True` needs draft_cache='static': CUDA graphs replay fixed buffers, "
                         "which a dynamic cache does not have")
    device = model_device(draft_model)
    if device.type != "cuda":
        raise ValueError(
            f"`compile_draft=True` records the draft's steps as CUDA graphs and needs the draft model on a CUDA "
            f"GPU, but it is on {device}; drop compile_draft (draft_cache='static' alone runs on any device) "
            "or move the draft to a GPU"
        )


def check_int(value, name: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1 ({what}), got {value!r}")
    return int(value)


def check_prompt(prompt_ids, tokenizer, vocab: int | None = None) -> list[int]:
    """The prompt as a list of ids: from ids ``(n,)`` / ``(1, n)``, a string (with ``tokenizer``) or a
    mapping such as a ``BatchEncoding`` (``input_ids`` ``(1, n)``, optional ``attention_mask``, whose
    left padding is dropped); each id in ``[0, vocab)``."""
    if isinstance(prompt_ids, str):
        if tokenizer is None:
            raise ValueError("`prompt_ids` is a string: pass `tokenizer=` or token ids")
        prompt_ids = tokenizer(prompt_ids)["input_ids"]
    mask = None
    if isinstance(prompt_ids, Mapping):  # a BatchEncoding or a dict
        if "input_ids" not in prompt_ids:
            raise ValueError(f"`prompt_ids` is a mapping without 'input_ids' (keys: {list(prompt_ids)})")
        mask = prompt_ids.get("attention_mask")
        prompt_ids = prompt_ids["input_ids"]
    ids = _one_row(prompt_ids, "prompt_ids")
    if mask is not None:
        mask = _one_row(mask, "attention_mask")
        if len(mask) != len(ids) or any(m not in (0, 1) for m in mask) or mask != sorted(mask):
            raise ValueError("`attention_mask` must be 0s then 1s as long as `input_ids` (a left-padded prompt), "
                             f"got {mask}; pass the prompt's ids without padding")
        ids = ids[mask.count(0):]
    if not ids:
        raise ValueError("`prompt_ids` is empty; pass at least one token (e.g. the BOS token)")
    if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ValueError("`prompt_ids` must hold non-negative integer token ids")
    if vocab is not None and max(ids) >= vocab:
        raise ValueError(f"`prompt_ids` holds token id {max(ids)}, but the models have V = {vocab} ids "
                         f"(0..{vocab - 1}); tokenize the prompt with the models' tokenizer")
    return [int(t) for t in ids]


def _one_row(value, name: str) -> list:
    """``value`` (a list, tensor or array of shape ``(n,)`` or ``(1, n)``) as one list of ``n`` items."""
    rows = value.tolist() if hasattr(value, "tolist") else list(value)
    if not isinstance(rows, list):
        raise ValueError(f"`{name}` must have shape (n,) or (1, n) (one prompt), got {value!r}")
    if rows and all(isinstance(row, (list, tuple)) for row in rows):
        if len(rows) != 1:
            raise ValueError(f"`{name}` holds a batch of {len(rows)} prompts; the decoder takes one prompt at a "
                             "time (as transformers' assisted generation): call it once per prompt")
        rows = list(rows[0])
    return rows


def check_eos(eos_token_id, model=None, tokenizer=None) -> frozenset[int]:
    """The ids that end generation. ``None``: the target's ``generation_config.eos_token_id`` (an id
    or a list) and ``tokenizer.eos_token_id``, as many as are set; ``False`` or ``[]``: none."""
    if eos_token_id is None:
        found = [getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                 getattr(tokenizer, "eos_token_id", None)]
        eos_token_id = [t for x in found if x is not None for t in (x if isinstance(x, (list, tuple)) else [x])]
    if eos_token_id is False:
        return frozenset()
    eos_token_id = eos_token_id.tolist() if hasattr(eos_token_id, "tolist") else eos_token_id  # a tensor
    ids = [eos_token_id] if isinstance(eos_token_id, (numbers.Integral, str)) else eos_token_id
    try:
        ids = list(ids)
    except TypeError:
        ids = [eos_token_id]
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 0:
            fix = (f"pass tokenizer.convert_tokens_to_ids({t!r}), or pass `tokenizer=` and leave eos_token_id out"
                   if isinstance(t, str) else "pass an id, a list of ids, or False (no end-of-sequence)")
            raise ValueError(f"`eos_token_id` must be token ids (integers >= 0), got {eos_token_id!r}: {fix}")
    return frozenset(int(t) for t in ids)


def check_models(draft_model, target_model, max_positions: int) -> None:
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
    if draft_model is not None and output_vocab_size(draft_model) != output_vocab_size(target_model):
        raise ValueError(
            f"`draft_model` and `target_model` have different vocabularies ({output_vocab_size(draft_model)} vs "
            f"{output_vocab_size(target_model)} logits); speculative decoding needs one shared tokenizer"
        )


def check_generator(generator, device: torch.device | str | None = None) -> torch.Generator:
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
