"""Multi-draft speculative sampling inside transformers' ``generate``.

transformers 5 hands its decoding loop to a callable: ``model.generate(**inputs,
custom_generate=multi_draft_sampling, draft_model=draft, ...)`` prepares the inputs, the
generation config, the logits processors and the stopping criteria as for plain sampling,
then calls :func:`multi_draft_sampling`, which runs the rounds of
:mod:`mspec.lm.decoding` with

* the **target law** ``q`` at every drafted prefix: the target's logits through the
  generation's logits processors (temperature, top-k, top-p, repetition penalty, ... each
  given the row's token ids up to that position, as ``generate`` gives them), then a softmax;
* the **draft law** ``p``: the draft's logits through the same processors (as assisted
  generation does), optionally rescaled to other temperatures (``draft_temperatures``);
* the **stopping criteria** checked after every emitted token (max length, EOS, stop strings,
  a user's criteria), so generation ends where plain sampling would end on the same tokens.

The emitted sequence therefore has the law of ``generate(do_sample=True)`` with the same
processors: each emitted token has the target's conditional law given the emitted prefix
(the argument of :mod:`mspec.lm.decoding`, with ``q`` the processed distribution), and
stopping only truncates the sequence.

``generate``'s arguments (the README's table names each): the outputs, one prompt with its
``attention_mask``, and whatever becomes a logits processor or a stopping criterion work (the
processors see the prompt's padding, as in ``generate``); what changes the decoding (beams,
contrastive search, DoLa, assisted generation, guidance, SynthID watermarking, a cache
implementation, ...) is refused before any model call, naming the fix (:data:`REFUSED_FIELDS`,
:data:`REFUSED_ARGUMENTS`); a field at its default does nothing.

Deviations from ``generate``: one prompt at a time (as assisted generation); no beams and
one return sequence; ``output_attentions`` / ``output_hidden_states`` are refused; the
returned ``cache`` is ``None`` (the decoder keeps its own caches); the processors must be
functions of the token ids and scores they are given (as transformers' are), since they are
called on drafted prefixes that may be rejected; a ``streamer=`` given to ``generate`` is refused.

Streaming and stop strings: transformers 5.25 hands a callable neither ``generate``'s
``streamer``, ``synced_gpus``, ``assistant_model`` or negative prompts (read here from
``generate``'s frame on the call stack and refused; ``generate`` has echoed the prompt to its
streamer by then) nor its ``tokenizer`` (``stop_strings=`` and ``token_healing=True`` make it
raise before the callable runs; ``cache_implementation="paged"`` runs continuous batching instead
of it). The callable takes its own ``stream=`` (a streamer) and ``stop_texts=`` with
``text_tokenizer=``; the repository's Hub-style folder ``hub/multi-draft-sampling``
(``generate(custom_generate=<folder>, trust_remote_code=True)``) receives every argument of
``generate`` and passes its ``streamer=``, ``tokenizer=`` and ``stop_strings=`` on as these.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import torch
from transformers import (LogitsProcessorList, PrefixConstrainedLogitsProcessor, SynthIDTextWatermarkLogitsProcessor,
                          UnbatchedClassifierFreeGuidanceLogitsProcessor)
from transformers.generation.utils import GenerateDecoderOnlyOutput, GenerationMixin

from mspec.lm.cache import model_device
from mspec.lm.checks import check_generator, check_settings
from mspec.lm.decoding import DRAFT_CACHES, NUMPY_SEED_BOUND, decode_rounds  # noqa: F401 -- DRAFT_CACHES for docs
from mspec.lm.result import GenerationResult

__all__ = ["MultiDraftOutput", "ProcessorLaw", "REFUSED_ARGUMENTS", "REFUSED_FIELDS", "multi_draft_sampling"]

#: the generation inputs the decoder honours itself (any other model keyword is refused)
KNOWN_MODEL_KWARGS = frozenset({"attention_mask", "position_ids", "use_cache", "logits_to_keep", "cache",
                                "past_key_values", "cache_position"})

_BEAMS, _ASSISTED = "has no beams", "drafts with draft_model=, num_drafts= and draft_length=, not assisted generation"
#: the ``GenerationConfig`` fields refused unless None, False or the value given here: field -> (that value,
#: why). Every other field works or has no effect (the README's table says which).
REFUSED_FIELDS = {
    "num_beams": (1, "draws one sequence without beams (call generate once per sample)"),
    "num_return_sequences": (1, "draws one sequence (call generate once per sample)"),
    "num_beam_groups": (1, _BEAMS), "diversity_penalty": (0.0, _BEAMS),
    "length_penalty": (1.0, _BEAMS), "early_stopping": (False, _BEAMS), "constraints": (None, _BEAMS),
    "force_words_ids": (None, _BEAMS), "low_memory": (None, "has no beam or contrastive search"),
    "penalty_alpha": (None, "samples; contrastive search is another decoding"),
    "dola_layers": (None, "samples from the last layer; DoLa is another decoding"),
    "guidance_scale": (1, "has no classifier-free guidance (it runs the model inside a logits processor)"),
    **dict.fromkeys(["prompt_lookup_num_tokens", "max_matching_ngram_size", "use_mtp", "assistant_early_exit",
                     "assistant_ensemble_weight", "speculation_type"], (None, _ASSISTED)),
    "is_assistant": (False, _ASSISTED), "num_assistant_tokens": (20, _ASSISTED),
    "num_assistant_tokens_schedule": ("constant", _ASSISTED), "assistant_confidence_threshold": (0.4, _ASSISTED),
    "assistant_lookbehind": (10, _ASSISTED), "target_lookbehind": (10, _ASSISTED),
    "cache_implementation": ("dynamic", "keeps its own caches (the draft's: draft_cache=)"),
    "prefill_chunk_size": (None, "prefills the prompt in one pass"),
    "output_attentions": (False, "does not record attentions"),
    "output_hidden_states": (False, "does not record hidden_states"),
}
#: the arguments of ``generate`` that transformers 5.25 does not hand a callable, refused when given: name -> fix
REFUSED_ARGUMENTS = {
    "streamer": "pass stream= instead (generate streams only the prompt to its streamer=), or load the folder "
                "hub/multi-draft-sampling (custom_generate=<folder>), which hands generate's streamer= on",
    "synced_gpus": "pass synced_gpus=False (no decoding synchronised across GPUs)",
    "assistant_model": "pass the draft model as draft_model=",
    "negative_prompt_ids": "drop it (no classifier-free guidance)",
    "negative_prompt_attention_mask": "drop it (no classifier-free guidance)",
}
#: logits processors that are not functions of the ids and scores they are given: class -> the fix
STATEFUL_PROCESSORS = {
    UnbatchedClassifierFreeGuidanceLogitsProcessor: "drop guidance_scale (it runs the model inside the processor)",
    SynthIDTextWatermarkLogitsProcessor: "drop SynthID's watermarking_config (it keeps a state per generated "
                                         "token); transformers.WatermarkingConfig works",
}
#: the code of transformers' ``generate``: a callable finds the ``generate`` call running it on the stack by it
GENERATE_CODE = inspect.unwrap(GenerationMixin.generate).__code__


@dataclass
class MultiDraftOutput(GenerateDecoderOnlyOutput):
    """``generate``'s output with ``return_dict_in_generate=True``, plus the rounds.

    Attributes:
        speculation: the :class:`~mspec.lm.result.GenerationResult` of the call: per-round
            records, ``block_efficiency``, ``acceptance_per_position()``, ``timing()``.
    """

    speculation: GenerationResult | None = None


class ProcessorLaw:
    """The drafts' and the target's distributions through transformers' logits processors
    (the interface of :class:`mspec.lm.decoding.SamplingLaw`).

    Args:
        processors: the ``LogitsProcessorList`` that ``generate`` prepared.
        temperature: the generation config's temperature T; a draft at temperature ``t_i``
            has its logits scaled by ``T / t_i`` before the processors, so that processors
            that scale with the logits (the usual ones) see it at ``t_i``.
        pad: the prompt's left padding (ids), put before the ids the processors are given, as
            ``generate`` gives them (lengths count it: min length, forced EOS, ...).
    """

    needs_ids = True  # processors read the token ids (repetition penalty, min length, ...)

    def __init__(self, processors, temperature: float, pad=()):
        self.processors, self.temperature, self.pad = processors, temperature, list(pad)

    def _padded(self, ids: torch.Tensor) -> torch.Tensor:
        if not self.pad:
            return ids
        pad = torch.tensor([self.pad], dtype=ids.dtype, device=ids.device).expand(ids.shape[0], -1)
        return torch.cat([pad, ids], dim=1)

    def draft(self, logits: torch.Tensor, temp_col: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``(K, V)`` distributions of the K drafts from their logits ``(K, V)`` after ``ids`` ``(K, n)``."""
        scores = self.processors(self._padded(ids), logits * (self.temperature / temp_col))
        return _softmax(scores)

    def target(self, logits: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, probs)``, both ``(K, T, V)``: position j of row i is processed after the
        first ``n + j`` ids of row i of ``ids`` ``(K, n + T - 1)``."""
        ids = self._padded(ids)
        n = ids.shape[1] - logits.shape[1] + 1
        scores = torch.stack([self.processors(ids[:, : n + j], logits[:, j].clone())
                              for j in range(logits.shape[1])], dim=1)
        return scores, _softmax(scores)


def _for_rows(processors, prefix_fn) -> LogitsProcessorList:
    """``generate``'s processors for the K rows of one prompt: the repetition penalty's ignored prompt
    length as a number (a tensor of one prompt refuses K rows), ``prefix_fn`` called with batch id 0."""
    rows = LogitsProcessorList()
    for proc in processors:
        fix = next((fix for cls, fix in STATEFUL_PROCESSORS.items() if isinstance(proc, cls)), None)
        if fix is not None:
            raise ValueError(f"multi_draft_sampling calls the logits processors on drafted prefixes, so each must be "
                             f"a function of the ids and scores it is given: {fix}")
        skip = getattr(proc, "prompt_ignore_length", None)
        if isinstance(skip, torch.Tensor) and skip.numel() == 1:
            proc = copy.copy(proc)
            proc.prompt_ignore_length = int(skip)
        if isinstance(proc, PrefixConstrainedLogitsProcessor) and prefix_fn is not None:
            proc = PrefixConstrainedLogitsProcessor(lambda batch_id, ids: prefix_fn(0, ids), 1)
        rows.append(proc)
    return rows


def _generate_call() -> dict:
    """The arguments of the ``generate`` call running this callable that it is not handed
    (:data:`REFUSED_ARGUMENTS` and ``prefix_allowed_tokens_fn``), read from the nearest frame
    of ``generate``'s code on the call stack; ``{}`` when no ``generate`` runs it."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_code is not GENERATE_CODE:
            frame = frame.f_back
        names = (*REFUSED_ARGUMENTS, "prefix_allowed_tokens_fn")
        return {} if frame is None else {name: frame.f_locals.get(name) for name in names}
    finally:
        del frame


def _softmax(scores: torch.Tensor) -> torch.Tensor:
    """Float64 softmax over the last axis; a row that masks every token is an error."""
    scores = scores.double()
    if torch.isneginf(scores.max(dim=-1).values).any():
        raise ValueError("the logits processors mask every token at some position; keep at least one token")
    return torch.softmax(scores, dim=-1)


def _stopping(criteria, input_ids: torch.Tensor, pad: list[int], settings, record: dict | None):
    """``stop(seq, logits, scores)`` for the decoder: ``generate``'s stopping criteria on the
    prompt as given (its padding too) and the output so far, given the processed scores of the
    last token (as ``_sample`` gives them); ``record`` collects each emitted token's logits and
    scores (float32, ``(1, V)``). It also stops at ``settings.max_new`` tokens, the most the
    caches were sized for (``generate``'s max-length criterion stops there already)."""
    end = len(settings.prompt) + settings.max_new

    def stop(seq, logits, scores):
        scores = scores[None].float()
        if record is not None:
            record["logits"].append(logits[None].float())
            record["scores"].append(scores)
        return len(seq) >= end or bool(criteria(torch.tensor([pad + seq], device=input_ids.device), scores).any())

    return stop


# long: checks the inputs `generate` prepared and documents each custom argument; then one decode
def multi_draft_sampling(model, input_ids, logits_processor, stopping_criteria, generation_config,
                         synced_gpus=False, streamer=None, *, draft_model=None, num_drafts: int = 2,
                         draft_length: int = 5, scheme: str | None = None, verify: str = "per-position",
                         draft_temperatures=None, scheme_params: dict | None = None, generator=None,
                         draft_cache: str = "dynamic", stream=None, stop_texts=None, text_tokenizer=None,
                         **model_kwargs):
    """Multi-draft speculative sampling as a ``custom_generate`` callable of transformers' ``generate``.

    Use: ``target.generate(**tok(text, return_tensors="pt"), do_sample=True, max_new_tokens=64,
    custom_generate=mspec.multi_draft_sampling, draft_model=draft, num_drafts=2, scheme="optimal",
    draft_length=5)``. ``generate`` passes the first six arguments; the keyword arguments after
    them are this method's own, passed through ``generate``.

    Args:
        model: the target model (``generate``'s ``self``).
        input_ids: ``(1, n)`` prompt ids, as ``generate`` prepared them.
        logits_processor: ``generate``'s processors: they define the target law at every position.
        stopping_criteria: ``generate``'s stopping criteria, checked after every emitted token.
        generation_config: ``generate``'s config; needs ``do_sample=True``.
        synced_gpus: must be false (no multi-GPU synchronised decoding).
        streamer: a streamer when called directly; transformers 5.25 never passes one to a
            callable, and a ``streamer=`` given to ``generate`` is refused (after ``generate`` has
            echoed the prompt to it): pass ``stream=`` instead.
        draft_model: the causal LM that drafts (same vocabulary as ``model``); required.
        num_drafts: K >= 1 drafts per round.
        draft_length: L >= 1 drafted tokens per draft per round.
        scheme: the token-level scheme (a key of :data:`mspec.registry.SCHEMES`), as in
            :func:`~mspec.lm.decoding.speculative_generate`.
        verify: the round rule (:data:`mspec.lm.decoding.VERIFICATIONS`).
        draft_temperatures: ``None`` (the drafts sample through the same processors as the
            target), one temperature, or one per draft (see :class:`ProcessorLaw`).
        scheme_params: extra keyword arguments of the scheme.
        generator: ``torch.Generator`` or int seed for all randomness; ``None`` seeds one from
            torch's global generator, so ``torch.manual_seed`` makes a call reproducible, as
            with ``generate``. An int seed gives the tokens of ``speculative_generate`` with the
            same seed and the same target law (note that ``generate`` applies top-k 50 by
            default, ``speculative_generate`` no top-k).
        draft_cache: the draft's KV cache (:data:`mspec.lm.decoding.DRAFT_CACHES`).
        stream: a streamer with transformers' protocol (``transformers.TextStreamer``): the
            prompt, then each round's emitted tokens, then ``end()``.
        stop_texts: strings that end the generation once the output ends in one of them
            (transformers' ``StopStringCriteria``); needs ``text_tokenizer``.
        text_tokenizer: the tokenizer of ``stop_texts``.
        **model_kwargs: ``generate``'s model inputs: ``attention_mask`` (0s then 1s; the padding
            is dropped) and the cache bookkeeping ``generate`` adds; any other is an error.

    Returns:
        ``(1, n + m)`` token ids, or with ``return_dict_in_generate=True`` a
        :class:`MultiDraftOutput` (``sequences``; ``scores`` / ``logits`` when
        ``output_scores`` / ``output_logits``; ``speculation``: the rounds).

    Raises:
        ValueError: before any model call, naming the argument and the fix.
    """
    call = _generate_call()
    call["synced_gpus"] = call.get("synced_gpus") or synced_gpus
    prompt = _check_generation(generation_config, input_ids, call, draft_model, model_kwargs)
    logits_processor = _for_rows(logits_processor, call.get("prefix_allowed_tokens_fn"))
    stopping_criteria = _with_stop_texts(stopping_criteria, stop_texts, text_tokenizer)
    _check_streamer(stream)
    temperature = float(generation_config.temperature or 1.0)
    temps = temperature if draft_temperatures is None else draft_temperatures
    max_new = generation_config.max_length - input_ids.shape[1]
    settings = check_settings(
        prompt, draft_model, model, verify=verify, scheme=scheme, num_drafts=num_drafts, draft_length=draft_length,
        draft_temperatures=temps, target_temperature=temperature, top_k=None, top_p=None,
        max_new_tokens=max_new, eos_token_id=False, scheme_params=scheme_params, tokenizer=None)
    if generator is None:  # from the global generator: torch.manual_seed(s) fixes the call, as with generate
        generator = int(torch.randint(0, NUMPY_SEED_BOUND, (1,)))
    gen = check_generator(generator, model_device(draft_model))
    pad = input_ids[0, : input_ids.shape[1] - len(settings.prompt)].tolist()  # the prompt's left padding
    record = {"logits": [], "scores": []} if generation_config.return_dict_in_generate else None
    result, seq = decode_rounds(settings, draft_model, model, gen, draft_cache=draft_cache,
                                streamer=stream if stream is not None else streamer,
                                law=ProcessorLaw(logits_processor, temperature, pad),
                                stop=_stopping(stopping_criteria, input_ids, pad, settings, record))
    # the prompt as given (its padding included), then the output
    sequences = torch.cat([input_ids, torch.tensor([result.token_ids], dtype=input_ids.dtype,
                                                   device=input_ids.device)], dim=1)
    if record is None:
        return sequences
    return MultiDraftOutput(
        sequences=sequences, speculation=result,
        scores=tuple(record["scores"]) if generation_config.output_scores else None,
        logits=tuple(record["logits"]) if generation_config.output_logits else None)


def _with_stop_texts(criteria, stop_texts, tokenizer):
    """``criteria`` plus transformers' ``StopStringCriteria`` for ``stop_texts`` (checked first)."""
    if stop_texts is None:
        return criteria
    texts = [stop_texts] if isinstance(stop_texts, str) else stop_texts
    if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) and t for t in texts):
        raise ValueError(f"`stop_texts` must be a non-empty string or list of strings, got {stop_texts!r}")
    if tokenizer is None or not callable(getattr(tokenizer, "convert_ids_to_tokens", None)):
        raise ValueError("`stop_texts` needs the tokenizer that reads them: pass text_tokenizer=tokenizer "
                         "(generate does not hand its own tokenizer= to a callable)")
    from transformers import StoppingCriteriaList, StopStringCriteria

    return StoppingCriteriaList([*criteria, StopStringCriteria(tokenizer, list(texts))])


def _check_streamer(stream) -> None:
    if stream is not None and not (callable(getattr(stream, "put", None)) and callable(getattr(stream, "end", None))):
        raise ValueError(f"`stream` must be a streamer with put() and end() (e.g. transformers.TextStreamer), "
                         f"got {type(stream).__name__}")


def _check_generation(config, input_ids, call: dict, draft_model, model_kwargs) -> dict:
    """Refuse what the decoder cannot honour, naming the fix; return the prompt (ids and mask).
    ``call``: the arguments of ``generate`` a callable is not handed (:func:`_generate_call`)."""
    if draft_model is None:
        raise ValueError("multi_draft_sampling needs `draft_model=`: pass the draft model to generate(), e.g. "
                         "target.generate(**inputs, custom_generate=mspec.multi_draft_sampling, draft_model=draft)")
    if not config.do_sample:
        raise ValueError("multi_draft_sampling samples: pass do_sample=True to generate() (greedy decoding is not "
                         "sampling; for near-greedy output pass a small temperature)")
    for name, (neutral, why) in REFUSED_FIELDS.items():
        value = getattr(config, name, None)
        if value is not None and value is not False and value != neutral:
            raise ValueError(f"multi_draft_sampling {why}: drop {name}={value!r} (or pass {name}={neutral!r} "
                             "over the model's generation config)")
    for name, fix in REFUSED_ARGUMENTS.items():
        if call.get(name) is not None and call.get(name) is not False:
            raise ValueError(f"multi_draft_sampling does not take generate's {name}=: {fix}")
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"multi_draft_sampling takes one prompt at a time (as assisted generation), got input_ids "
                         f"of shape {tuple(input_ids.shape)}; call generate once per prompt")
    unknown = sorted(set(model_kwargs) - KNOWN_MODEL_KWARGS)
    if unknown:
        raise ValueError(f"multi_draft_sampling does not pass {unknown} to the models; drop them (it decodes "
                         "from input_ids and attention_mask)")
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    if cache is not None and cache.get_seq_length() > 0:
        raise ValueError("multi_draft_sampling keeps its own caches and cannot continue a filled one; drop the cache")
    mask = model_kwargs.get("attention_mask")
    row = [1] * input_ids.shape[1] if mask is None else mask[0].tolist() if mask.ndim == 2 else None
    if row is None or len(row) != input_ids.shape[1] or row != sorted(row) or not set(row) <= {0, 1}:
        raise ValueError(f"the attention mask must be 0s then 1s (a left-padded prompt), got {mask.tolist()}; "
                         "pass the tokenizer's attention_mask to generate (without one, generate masks every "
                         f"pad_token_id ({config.pad_token_id}) in the prompt)")
    positions = model_kwargs.get("position_ids")
    if positions is not None and positions.reshape(-1)[row.count(0):].tolist() != list(range(sum(row))):
        raise ValueError("multi_draft_sampling numbers the prompt's positions 0, 1, ... after its padding; drop "
                         "position_ids")
    return {"input_ids": input_ids} if mask is None else {"input_ids": input_ids, "attention_mask": mask}
