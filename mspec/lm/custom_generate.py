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

Deviations from ``generate``: one prompt at a time (as assisted generation); no beams and
one return sequence; ``output_attentions`` / ``output_hidden_states`` are refused; the
returned ``cache`` is ``None`` (the decoder keeps its own caches); the processors must be
functions of the token ids and scores they are given (as transformers' are), since they are
called on drafted prefixes that may be rejected.

Streaming and stop strings: transformers 5.25 hands a callable neither ``generate``'s
``streamer`` nor its ``tokenizer`` (so its ``stop_strings`` cannot be built), so the callable
takes its own ``stream=`` (a streamer) and ``stop_texts=`` with ``text_tokenizer=``. The
Hub-style folder of the repository (``hub/multi-draft-sampling``, loaded with
``generate(custom_generate=<folder>, trust_remote_code=True)``) receives every argument of
``generate`` and passes its own ``streamer=``, ``tokenizer=`` and ``stop_strings=`` on as
these arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from mspec.lm.cache import model_device
from mspec.lm.checks import check_generator, check_settings
from mspec.lm.decoding import DRAFT_CACHES, NUMPY_SEED_BOUND, decode_rounds  # noqa: F401 -- DRAFT_CACHES for docs
from mspec.lm.result import GenerationResult

__all__ = ["MultiDraftOutput", "ProcessorLaw", "multi_draft_sampling"]

#: the generation inputs the decoder honours itself (any other model keyword is refused)
KNOWN_MODEL_KWARGS = frozenset({"attention_mask", "position_ids", "use_cache", "logits_to_keep", "cache",
                                "past_key_values", "cache_position"})


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
    """

    needs_ids = True  # processors read the token ids (repetition penalty, min length, ...)

    def __init__(self, processors, temperature: float):
        self.processors, self.temperature = processors, temperature

    def draft(self, logits: torch.Tensor, temp_col: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``(K, V)`` distributions of the K drafts from their logits ``(K, V)`` after ``ids`` ``(K, n)``."""
        scores = self.processors(ids, logits * (self.temperature / temp_col))
        return _softmax(scores)

    def target(self, logits: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, probs)``, both ``(K, T, V)``: position j of row i is processed after the
        first ``n + j`` ids of row i of ``ids`` ``(K, n + T - 1)``."""
        n = ids.shape[1] - logits.shape[1] + 1
        scores = torch.stack([self.processors(ids[:, : n + j], logits[:, j].clone())
                              for j in range(logits.shape[1])], dim=1)
        return scores, _softmax(scores)


def _softmax(scores: torch.Tensor) -> torch.Tensor:
    """Float64 softmax over the last axis; a row that masks every token is an error."""
    scores = scores.double()
    if torch.isneginf(scores.max(dim=-1).values).any():
        raise ValueError("the logits processors mask every token at some position; keep at least one token")
    return torch.softmax(scores, dim=-1)


def _stopping(criteria, input_ids: torch.Tensor, settings, record: dict | None):
    """``stop(seq, logits, scores)`` for the decoder: ``generate``'s stopping criteria on the
    prompt as given (its padding too) and the output so far, given the processed scores of the
    last token (as ``_sample`` gives them); ``record`` collects each emitted token's logits and
    scores (float32, ``(1, V)``). It also stops at ``settings.max_new`` tokens, the most the
    caches were sized for (``generate``'s max-length criterion stops there already)."""
    pad = input_ids[0, : input_ids.shape[1] - len(settings.prompt)].tolist()
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
        streamer: not passed by transformers 5.25 to a callable (``generate`` echoes the
            prompt to its ``streamer=`` and then nothing): pass ``stream=`` instead.
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
    prompt = _check_generation(generation_config, input_ids, synced_gpus, draft_model, model_kwargs)
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
    record = {"logits": [], "scores": []} if generation_config.return_dict_in_generate else None
    result, seq = decode_rounds(settings, draft_model, model, gen, draft_cache=draft_cache,
                                streamer=stream if stream is not None else streamer,
                                law=ProcessorLaw(logits_processor, temperature),
                                stop=_stopping(stopping_criteria, input_ids, settings, record))
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


def _check_generation(config, input_ids, synced_gpus, draft_model, model_kwargs) -> dict:
    """Refuse what the decoder cannot honour, naming the fix; return the prompt (ids and mask)."""
    if draft_model is None:
        raise ValueError("multi_draft_sampling needs `draft_model=`: pass the draft model to generate(), e.g. "
                         "target.generate(**inputs, custom_generate=mspec.multi_draft_sampling, draft_model=draft)")
    if not config.do_sample:
        raise ValueError("multi_draft_sampling samples: pass do_sample=True to generate() (greedy decoding is not "
                         "sampling; for near-greedy output pass a small temperature)")
    wanted = [name for name in ("num_beams", "num_return_sequences") if (getattr(config, name, 1) or 1) > 1]
    if wanted:
        raise ValueError(f"multi_draft_sampling draws one sequence without beams; drop {', '.join(wanted)} "
                         "(call generate once per sample)")
    for name in ("output_attentions", "output_hidden_states"):
        if config.return_dict_in_generate and getattr(config, name, False):
            raise ValueError(f"multi_draft_sampling does not record {name.split('_', 1)[1]}; drop {name}=True")
    if synced_gpus:
        raise ValueError("multi_draft_sampling does not run synchronised across GPUs; pass synced_gpus=False")
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
    if mask is None:
        return {"input_ids": input_ids}
    row = mask[0].tolist() if mask.ndim == 2 else None
    if row is None or len(row) != input_ids.shape[1] or row != sorted(row) or not set(row) <= {0, 1}:
        raise ValueError(f"the attention mask must be 0s then 1s (a left-padded prompt), got {mask.tolist()}; "
                         "pass the tokenizer's attention_mask to generate (without one, generate masks every "
                         f"pad_token_id ({config.pad_token_id}) in the prompt)")
    return {"input_ids": input_ids, "attention_mask": mask}
