"""Multi-draft speculative decoding of a causal language model, one prompt at a time.

A *round* (one call of the target model) works like this, with K drafts of length L:

1. **Draft.** The draft model proposes K independent continuations of L tokens of the
   accepted prefix, as one batch of K rows. Row ``i`` samples at its own temperature, so
   the drafts are i.i.d. (one temperature) or independent but non-identical (one
   temperature per draft, e.g. ``draft_temperatures=[1.2, 1.6]``).
2. **Score.** The target model scores all K rows in one batched forward pass
   (K rows x L + 1 positions, on top of the KV cache of the accepted prefix expanded to K
   rows), which gives the target distribution ``q`` after every drafted prefix.
3. **Select.** Position by position, the drafts that are still consistent with the tokens
   emitted so far offer their token to the token-level selection scheme (``"specinfer"``,
   ``"spectr"``, ... from :mod:`mspec.registry`), built with ``draft`` = the distribution(s)
   of those alive drafts at this position and ``target`` = ``q`` at this position. The
   scheme emits one token ``Y``; the drafts whose token differs from ``Y`` drop out. If no
   draft holds ``Y`` (a rejection) the round ends with ``Y``. If all L positions are
   accepted, one *bonus* token is sampled from ``q`` after the full draft. With one
   draft alive, every scheme is single-draft speculative sampling (the selected token is
   that draft), which runs directly. This is the round rule ``"per-position"``
   (:mod:`mspec.rounds.per_position`); ``verify=`` picks another rule of
   :data:`mspec.rounds.registry.ROUND_RULES`, which verifies whole blocks.

**Why this is lossless.** Take a position ``j`` of a round and condition on everything that
happened before it: the accepted prefix ``y_{<j}``, all drafted tokens at earlier
positions and the scheme's coin flips. The drafts still alive all hold exactly the prefix
``y_{<j}`` (that is what "alive" means), and each one drew its token at position ``j``
fresh from the draft model given its own prefix, independently of the other rows and of
the scheme's coins. So, given the past, the alive drafts' tokens are independent samples
``X_i ~ p_i(. | y_{<j})`` -- i.i.d. when they share a temperature -- which is exactly the
input a token-level scheme expects. The scheme then outputs ``Y ~ q(. | y_{<j})`` (the
guarantee of every scheme in :mod:`mspec`, for any K). The bonus token is drawn from
``q(. | y_{<L})`` directly. Hence every emitted token has the target's conditional law
given the emitted prefix, and by the chain rule the emitted sequence has exactly the law
of autoregressive sampling from the target. Dropping drafts, ending a round early and
the round structure only change *how many* target calls are needed, never the law.
Stopping at EOS or after ``max_new_tokens`` only truncates that sequence, which keeps the
law of the emitted prefix. The argument needs only that the scheme's randomness (a numpy
Generator) is independent of the drafting, and that the drafts kept after position ``j``
are exactly those holding ``Y`` -- whether or not the scheme calls ``Y`` "accepted".

**KV caches.** Each model keeps a batch-1 cache of the accepted prefix across rounds. A
round expands it to K rows (``DynamicCache.batch_repeat_interleave``), and afterwards keeps
the row of a surviving draft (``batch_select_indices``) cropped to the accepted length
(``crop``), so a round only computes the new positions.

**A static draft cache** (``draft_cache="static"``). A small draft on a large GPU is often bound
by kernel launches, not by arithmetic; what transformers offers against that is a
``StaticCache`` (fixed buffers, allocated once) and ``torch.compile`` of the decoding step
with CUDA graphs (``compile_draft=True``: the model's ``get_compiled_call`` with
transformers' default ``CompileConfig``, mode ``"reduce-overhead"``). The draft's cache then
keeps K rows for the whole call: the prompt is prefilled into all K rows, and after a round
the surviving row is copied, in place, into the other rows over the positions the round
wrote, and the cache is cropped to the accepted length -- the same contents as the dynamic
cache's keep-one-row-then-expand, without ever changing a buffer's shape or address. The
law of the output does not depend on it: the drafts are still sampled from exactly the
distributions the selection is given, with the same random draws. Only the last bits of the
draft's logits may differ from the dynamic path (the prompt prefilled as K rows, attention
over the fixed-length buffer, a compiled step's fused kernels), so a seed gives the same
tokens except where such a bit decides a draw. The target keeps a dynamic cache.
``compile_draft`` needs the draft on a CUDA GPU; each call allocates new buffers, so its
CUDA graphs are recorded again in each call's first steps (as in transformers' ``generate``).

Deviations from the multi-draft decoding setting of the papers (SpecTr; Khisti et al.):

* the K drafts are separate sequences, not a token tree: drafts that share a prefix are
  scored once per row (costs compute, not correctness);
* the block efficiency counts tokens per *decoding* target call; the prefill of the
  prompt is not counted (it is the same for every method).
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Sequence

import numpy as np
import torch

from mspec.distributions import check_temperature, distribution_from_logits
from mspec.lm.cache import CachedModel, StaticCachedModel, model_device
from mspec.lm.checks import (DecodeSettings, check_compilable, check_eos, check_generator, check_int, check_models,
                             check_prompt, check_settings)
from mspec.lm.models import output_vocab_size
from mspec.lm.result import GenerationResult, RoundRecord
from mspec.rounds.registry import ROUND_RULES, make_round_rule
from mspec.rounds.rule import RoundRule

__all__ = ["DRAFT_CACHES", "VERIFICATIONS", "GenerationResult", "RoundRecord", "SamplingLaw",
           "autoregressive_generate", "expected_round_tokens", "generate_with_baselines",
           "speculative_generate"]

#: values of ``speculative_generate(draft_cache=...)``: the draft's KV cache grows with the
#: text and changes batch size each round (``"dynamic"``), or is one fixed K-row buffer for
#: the whole call (``"static"``, transformers' ``StaticCache``; see the module docstring)
DRAFT_CACHES = ("dynamic", "static")
#: values of ``speculative_generate(verify=...)``, the round rules of
#: :data:`mspec.rounds.registry.ROUND_RULES`: position by position with the scheme
#: (``"per-position"``; ``"token"`` is accepted as its earlier name), or whole blocks:
#: ``"block"`` (block verification, one draft; :mod:`mspec.rounds.block`), ``"traversal"``
#: (the tree of K drafts from the leaves up; :mod:`mspec.rounds.traversal`),
#: ``"selected-block"`` (select one block position by position with ``scheme``, then block
#: verification; :mod:`mspec.rounds.selected_block`)
VERIFICATIONS = tuple(ROUND_RULES)
#: the selection's numpy Generator is seeded with a number drawn below this bound from the
#: run's torch Generator (62 bits: any such seed, and within ``torch.randint``'s int64 range)
NUMPY_SEED_BOUND = 2**62


# long: the docstring documents each of the 21 arguments; the body is a few calls
def speculative_generate(
    prompt_ids,
    *,
    draft_model,
    target_model,
    scheme: str | None = None,
    num_drafts: int = 2,
    draft_length: int = 5,
    draft_temperatures: float | Sequence[float] = 1.0,
    target_temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    eos_token_id: int | Sequence[int] | bool | None = None,
    generator: torch.Generator | int | None = None,
    scheme_params: dict | None = None,
    draft_cache: str = "dynamic",
    compile_draft: bool = False,
    verify: str = "per-position",
    tokenizer=None,
    on_round=None,
    streamer=None,
) -> GenerationResult:
    """Sample a continuation of ``prompt_ids`` from ``target_model`` with K drafts per round.

    The output has exactly the law of :func:`autoregressive_generate` with the same
    ``target_temperature`` / ``top_k`` / ``top_p`` (see the module docstring).

    Args:
        prompt_ids: one prompt: token ids, a list or a tensor of shape ``(n,)`` or ``(1, n)``, n >= 1;
            a ``BatchEncoding`` or dict (``tokenizer(text, return_tensors="pt")``: ``input_ids``
            ``(1, n)`` and an optional ``attention_mask`` of 0s then 1s, whose left padding is
            dropped); or a string when ``tokenizer`` is given. A batch of prompts is an error.
        draft_model: causal LM (``transformers`` model in eval mode) that drafts.
        target_model: causal LM whose distribution is sampled; same vocabulary.
        scheme: token-level selection scheme, a key of :data:`mspec.registry.SCHEMES`,
            for ``verify="per-position"`` (default ``"specinfer"``) and
            ``"selected-block"`` (default ``"optimal"``); ``"block"`` and ``"traversal"`` take
            none (passing one is an error).
        num_drafts: K >= 1 drafts per round (``"single"`` needs K = 1).
        draft_length: L >= 1 drafted tokens per draft per round.
        draft_temperatures: one temperature > 0 for K identical drafts, or a sequence of K
            temperatures (non-identical drafts; needs a scheme that supports them).
        target_temperature: temperature > 0 of the target distribution.
        top_k: keep the ``top_k`` most likely tokens, for draft and target alike.
        top_p: nucleus sampling threshold in (0, 1], for draft and target alike.
        max_new_tokens: stop after this many generated tokens (>= 1).
        eos_token_id: stop after emitting this token (or any of these tokens). ``None`` (the
            default) stops at the target's ``generation_config.eos_token_id`` (an id or a list)
            and ``tokenizer.eos_token_id``, as ``generate`` does; ``False`` (or ``[]``) never
            stops early: every call runs ``max_new_tokens``.
        generator: ``torch.Generator`` (or an int seed) for all randomness: drafting uses
            it directly, the selection scheme uses a numpy Generator seeded from it.
            ``None`` seeds a fresh generator from the OS. An int seed or ``None`` creates the
            generator on the draft model's device, so drafting samples where the draft's
            distributions are (no copy to the host per drafted token); a given generator on
            another device works, with a copy per drafted token. One int seed gives the same
            output on the same kind of device; CPU and CUDA generators draw different
            streams, so a seed run on a GPU differs from the same seed on a CPU.
        scheme_params: extra keyword arguments of the scheme (e.g. ``s`` for ``"is-ratio"``).
        draft_cache: the draft's KV cache, one of :data:`DRAFT_CACHES`: ``"dynamic"`` (the
            default) or ``"static"`` (transformers' ``StaticCache``, K fixed rows; any device;
            see the module docstring). Same randomness either way.
        compile_draft: with ``draft_cache="static"`` and the draft on a CUDA GPU, run the
            draft's decoding steps compiled with CUDA graphs (``torch.compile``, mode
            ``"reduce-overhead"``; the first calls compile, later ones replay).
        verify: the round rule, one of :data:`VERIFICATIONS` (:func:`mspec.rounds.registry.make_round_rule`):
            ``"per-position"`` (the default: ``scheme`` position by position; ``"token"``, its
            earlier name, is accepted too); ``"block"`` (block verification of Sun et al., ICLR 2025: the drafted
            block verified jointly; the most tokens per round for one draft; needs
            ``num_drafts=1``; ``scheme`` unused); ``"traversal"`` (the tree of the K drafts
            verified from the leaves up, after Weng et al., NeurIPS 2025; any drafts;
            ``scheme`` unused); ``"selected-block"`` (one block selected position by position
            with ``scheme``, one of :data:`mspec.rounds.selected_block.SELECTION_SCHEMES`, then block
            verification; identical drafts). All exactly lossless. ``scheme_params`` reach the
            scheme of ``"per-position"`` only.
        tokenizer: optional; decodes the output into ``GenerationResult.text``.
        on_round: optional ``on_round(drafted, draft_probs, target_probs)``, called after
            each round's target pass with the round's drafted ids ``(K, L)``, draft
            distributions ``(K, L, V)`` and target distributions ``(K, L + 1, V)`` (torch
            tensors; e.g. for :func:`expected_round_tokens`). It must not change them.
        streamer: optional, with transformers' streamer protocol (``transformers.TextStreamer``):
            ``put`` gets the prompt ``(1, n)`` once, then each round's emitted tokens ``(1, m)``
            as they are accepted; ``end()`` follows the last.

    Returns:
        :class:`GenerationResult` with the generated ids and per-round records.

    Raises:
        ValueError: before any model call: bad K, L, prompt (ids outside ``[0, V)``, a batch,
            a mask that is not left padding), eos, temperature, vocabularies, scheme name (or one
            that needs identical drafts, with per-draft temperatures), draft cache
            (``compile_draft`` without a static cache or a CUDA draft), cache layers the decoder
            cannot roll back, or ``verify``.

    Warns:
        UserWarning: the draft model is the target at the target's temperature (all accepted).
    """
    settings = check_settings(
        prompt_ids, draft_model, target_model, verify=verify, scheme=scheme, num_drafts=num_drafts, draft_length=draft_length,
        draft_temperatures=draft_temperatures, target_temperature=target_temperature, top_k=top_k, top_p=top_p,
        max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, scheme_params=scheme_params, tokenizer=tokenizer)
    gen = check_generator(generator, model_device(draft_model))
    return decode_rounds(settings, draft_model, target_model, gen, draft_cache=draft_cache,
                         compile_draft=compile_draft, on_round=on_round, streamer=streamer, tokenizer=tokenizer)[0]


def decode_rounds(settings: DecodeSettings, draft_model, target_model, gen: torch.Generator, *,
                  draft_cache: str, compile_draft: bool = False, on_round=None, streamer=None, tokenizer=None,
                  law=None, stop=None) -> tuple[GenerationResult, list[int]]:
    """Run the rounds of one call whose arguments are checked (:func:`speculative_generate`'s names;
    ``law`` and ``stop`` as :class:`_Decoder` takes them).

    Returns:
        ``(result, seq)``: the :class:`GenerationResult` and the prompt followed by the output.
    """
    rule = settings.rule
    cached_draft = _cached_draft_model(draft_model, settings, draft_cache, compile_draft)
    # the scheme's numpy Generator is seeded from `gen`, so one seed fixes the whole run
    rng = np.random.default_rng(int(torch.randint(0, NUMPY_SEED_BOUND, (1,), generator=gen, device=gen.device)))
    devices = _cuda_devices(draft_model, target_model)  # every clock reading waits for all of them
    start = _clock(devices)
    decoder = _Decoder(cached_draft, CachedModel(target_model), settings, gen, rule, rng, on_round, devices,
                       streamer, law, stop)
    with torch.inference_mode():
        seq, rounds, prefill_time = decoder.generate(start)
    method = getattr(rule, "scheme", None) or rule.name
    return _result(seq[len(settings.prompt) :], rounds, method, settings.num_drafts, settings.draft_length, start,
                   prefill_time, tokenizer, devices), seq


def _cached_draft_model(draft_model, settings: DecodeSettings, draft_cache: str, compile_draft: bool) -> CachedModel:
    """The draft model with the KV cache that ``draft_cache`` names (see :data:`DRAFT_CACHES`).

    Raises:
        ValueError: an unknown ``draft_cache``; ``compile_draft`` without a static cache or
            without a CUDA draft; a draft with layers a static cache cannot serve.
    """
    if draft_cache not in DRAFT_CACHES:
        raise ValueError(f"`draft_cache` must be one of {DRAFT_CACHES}, got {draft_cache!r}")
    if compile_draft:
        check_compilable(draft_model, draft_cache)
    if draft_cache == "dynamic":
        return CachedModel(draft_model)
    # the longest the draft's cache gets: the prompt and every emitted token but the last,
    # plus L - 1 drafted tokens (the round's last drafted token is never fed back)
    max_length = len(settings.prompt) + settings.max_new + settings.draft_length - 1
    return StaticCachedModel(draft_model, settings.num_drafts, max_length, compiled=compile_draft)


class _Decoder:
    """The rounds of one :func:`speculative_generate` call, after its arguments are checked."""

    def __init__(self, draft_model: CachedModel, target_model: CachedModel, settings: DecodeSettings,
                 gen: torch.Generator, rule: RoundRule, rng: np.random.Generator, on_round, devices,
                 streamer=None, law=None, stop=None):
        self.draft_model, self.target_model = draft_model, target_model
        self.settings, self.gen, self.on_round, self.devices = settings, gen, on_round, devices
        self.rule, self.rng, self.streamer = rule, rng, streamer  # streamer: put(ids), end()
        # law: logits -> the drafts' and the target's distributions; stop(seq, logits, scores):
        # whether generation ends after seq's last token (its target logits and scores given)
        self.law = law if law is not None else SamplingLaw(settings.target_temperature, settings.sampling)
        self.stop = stop if stop is not None else _eos_or_length(settings)

    def generate(self, start: float) -> tuple[list[int], list[RoundRecord], float]:
        """Prefill, then run rounds until ``self.stop`` says so.

        Args:
            start: the clock reading the call's wall time counts from.

        Returns:
            ``(seq, rounds, prefill_time)``: prompt + emitted tokens, one record per round,
            and the seconds from ``start`` to the end of the prefill.
        """
        seq = list(self.settings.prompt)  # prompt + emitted tokens
        self._stream(seq)  # the prompt first, as `generate` streams it
        # prefill: the caches hold every token but the last; a round feeds the rest
        for model in (self.draft_model, self.target_model):
            if len(seq) > 1:
                model.forward(torch.tensor([seq[:-1]], device=model.device))
        prefill_time = _clock(self.devices) - start
        rounds: list[RoundRecord] = []
        while True:
            out, record, logits, scores = self.round(seq)
            # stop token by token: truncating the final round keeps the law of the emitted
            # prefix (the tokens already emitted do not depend on what follows)
            done, before = False, len(seq)
            for t, y in enumerate(out):
                seq.append(y)
                if self.stop(seq, logits[t], scores[t]):
                    done = True
                    break
            self._stream(seq[before:])
            record.emitted = len(seq) - before
            rounds.append(record)
            if done:
                if self.streamer is not None:
                    self.streamer.end()
                return seq, rounds, prefill_time

    def _stream(self, ids: list[int]) -> None:
        """Hand ``ids`` to the streamer as a ``(1, len(ids))`` tensor (on the CPU, as ``generate``)."""
        if self.streamer is not None:
            self.streamer.put(torch.tensor([ids]))

    def round(self, seq: list[int]) -> tuple[list[int], RoundRecord, torch.Tensor, torch.Tensor]:
        """One round: draft, score, select, keep the caches of a surviving draft.

        Returns:
            ``(out, record, logits, scores)``: the round's output tokens (before truncation), its
            record (``emitted`` still 0), and the target's logits and processed scores at the
            positions of the kept row, ``(L + 1, V)`` each (``out[t]`` was drawn at position t).
        """
        s, clock = self.settings, lambda: _clock(self.devices)
        n = len(seq)
        t0 = clock()
        self.draft_model.expand(s.num_drafts)
        self.target_model.expand(s.num_drafts)
        t1 = clock()
        drafted, draft_probs = _draft(self.draft_model, seq, s.temps, s.draft_length, self.law, self.gen)
        t2 = clock()
        logits, scores, target_probs = _score(self.target_model, seq, drafted, self.law)  # (K, L + 1, V) each
        t3 = clock()
        if self.on_round is not None:
            self.on_round(drafted, draft_probs, target_probs)
            t3 = clock()  # the callback's time is nobody's
        # the round rule takes numpy arrays: the round is copied to the host once
        outcome = self.rule.verify(drafted.cpu().numpy(), draft_probs.double().cpu().numpy(),
                                   target_probs.double().cpu().numpy(), self.rng)
        t4 = clock()
        # keep a row holding the accepted tokens, cropped to prefix + accepted tokens
        row, accepted = outcome.rows[0], outcome.accepted
        self.draft_model.keep(row, min(n + accepted, self.draft_model.length))  # after all-accept it lags by one
        self.target_model.keep(row, n + accepted)
        t5 = clock()
        return list(outcome.tokens), RoundRecord(
            list(outcome.alive_counts), accepted, row if accepted else None, accepted == s.draft_length, 0,
            draft_time=t2 - t1, target_time=t3 - t2, selection_time=t4 - t3, cache_time=(t1 - t0) + (t5 - t4),
        ), logits[row], scores[row]


class SamplingLaw:
    """Temperature, then top-k and top-p: how :func:`speculative_generate` turns logits into
    the drafts' and the target's distributions (:func:`~mspec.distributions.distribution_from_logits`).
    :class:`mspec.lm.custom_generate.ProcessorLaw` is the same interface over transformers'
    logits processors."""

    needs_ids = False  # the distributions depend on the logits only, not on the token ids

    def __init__(self, target_temperature: float, sampling: dict):
        self.temperature, self.sampling = target_temperature, sampling

    def draft(self, logits: torch.Tensor, temp_col: torch.Tensor, ids) -> torch.Tensor:
        """The K drafts' distributions ``(K, V)`` from their logits ``(K, V)``, row i at temperature
        ``temp_col[i, 0]``; ``ids`` ``(K, n)``, the rows' token ids, is not read."""
        return distribution_from_logits(logits / temp_col, temperature=1.0, **self.sampling)

    def target(self, logits: torch.Tensor, ids) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores, probs)``, both ``(K, T, V)``, from the target's logits ``(K, T, V)``; the
        scores are the logits divided by the temperature (``ids`` is not read)."""
        return logits / self.temperature, distribution_from_logits(logits, temperature=self.temperature,
                                                                    **self.sampling)


def _eos_or_length(settings: DecodeSettings):
    """``stop(seq, logits, scores)`` of :func:`speculative_generate`: after an EOS token or once
    ``max_new_tokens`` tokens follow the prompt."""
    end = len(settings.prompt) + settings.max_new
    return lambda seq, logits, scores: seq[-1] in settings.eos or len(seq) >= end


def _draft(draft_model: CachedModel, seq, temps, big_l, law, gen):
    """Draft L tokens in each of K rows (the cache is already expanded to K rows).

    Returns:
        ``(drafted, draft_probs)``: token ids ``(K, L)`` and the distributions they were
        sampled from, ``(K, L, V)`` (row ``i`` at temperature ``temps[i]``, through ``law``).
    """
    k = len(temps)
    temp_col = torch.tensor(temps, dtype=torch.float64, device=draft_model.device)[:, None]
    # the first step also feeds the tokens the cache lacks (one more after an all-accept round)
    inp = torch.tensor([seq[draft_model.length :]], device=draft_model.device).expand(k, -1)
    ids = torch.tensor([seq], device=draft_model.device).expand(k, -1) if law.needs_ids else None
    # shared[i, r]: rows i and r have drafted the same tokens so far at the same temperature.
    # Such rows have the same distribution in exact arithmetic, but a batched forward pass
    # may differ in the last bits between rows; the selection treats them as identical
    # drafts, so they must sample from one bit-identical row (the first of their group).
    shared = temp_col == temp_col.T  # (K, K)
    drafted, probs = [], []
    for j in range(big_l):
        logits = draft_model.forward(inp)[:, -1, :]  # (K, V)
        p = law.draft(logits, temp_col, ids)
        p = p.index_select(0, shared.to(torch.int8).argmax(dim=1))  # argmax: the first True
        x = torch.multinomial(p.to(gen.device), 1, generator=gen).to(draft_model.device)  # (K, 1)
        shared &= x == x.T
        drafted.append(x)
        probs.append(p)
        if j + 1 < big_l:  # the last drafted token is never fed to the draft model
            inp = x
            ids = torch.cat([ids, x], dim=1) if ids is not None else None
    return torch.cat(drafted, dim=1), torch.stack(probs, dim=1)


def _score(target_model: CachedModel, seq, drafted, law):
    """One target forward pass over K rows x (L + 1) positions.

    Returns:
        ``(logits, scores, probs)``, each ``(K, L + 1, V)``: the target's logits, its scores
        and its distribution (``law.target``) after the prefix and after each drafted prefix
        of each row.
    """
    k, big_l = drafted.shape
    drafted = drafted.to(target_model.device)
    prefix = torch.tensor([seq[target_model.length :]], device=target_model.device).expand(k, -1)
    logits = target_model.forward(torch.cat([prefix, drafted], dim=1), last=big_l + 1)
    ids = torch.cat([torch.tensor([seq], device=target_model.device).expand(k, -1), drafted], dim=1) \
        if law.needs_ids else None
    return (logits, *law.target(logits, ids))


def expected_round_tokens(drafted, draft_probs, target_probs, *, scheme: str, draft_temperatures,
                          scheme_params: dict | None = None, eos_token_id=None, control: bool = False):
    """Expected number of tokens one round emits, given its drafts, for ``scheme`` position by
    position, its randomness averaged out exactly, on torch tensors or numpy arrays:
    :meth:`mspec.rounds.per_position.PerPositionRule.expected_tokens`, whose arguments and
    control variate (``control=True``: the pair ``(expected, Z)``) these are; ``drafted``
    ``(K, L)``, ``draft_probs`` ``(K, L, V)``, ``target_probs`` ``(K, L + 1, V)`` as given to
    ``on_round`` (see :func:`speculative_generate`). Scoring several schemes on the same rounds
    compares their block efficiency without the noise of sampling (``python -m mspec_lab rounds``).
    """
    drafted, draft_probs, target_probs = (_as_array(x) for x in (drafted, draft_probs, target_probs))
    rule = make_round_rule("per-position", scheme=scheme, scheme_params=scheme_params,
                           num_drafts=drafted.shape[0] if drafted.ndim else 1, draft_temperatures=draft_temperatures)
    return rule.expected_tokens(drafted, draft_probs, target_probs, eos_token_id=eos_token_id, control=control)


def _as_array(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def autoregressive_generate(
    prompt_ids,
    *,
    target_model,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    eos_token_id: int | Sequence[int] | bool | None = None,
    generator: torch.Generator | int | None = None,
    tokenizer=None,
) -> GenerationResult:
    """Baseline: sample from ``target_model`` one token per forward pass (with a KV cache).

    Args:
        prompt_ids: as in :func:`speculative_generate`.
        target_model: causal LM in eval mode.
        temperature: > 0.
        top_k, top_p: as in :func:`speculative_generate`.
        max_new_tokens: >= 1.
        eos_token_id: as in :func:`speculative_generate` (``None``: the target's and the
            tokenizer's eos; ``False``: none).
        generator: ``torch.Generator``, int seed, or ``None`` (then created on the target
            model's device, as in :func:`speculative_generate`).
        tokenizer: optional, for ``GenerationResult.text``.

    Returns:
        :class:`GenerationResult` with one round per token (block efficiency 1).
    """
    check_temperature(temperature, "temperature")
    prompt = check_prompt(prompt_ids, tokenizer, output_vocab_size(target_model))
    max_new = check_int(max_new_tokens, "max_new_tokens", "the number of tokens to generate")
    eos = check_eos(eos_token_id, target_model, tokenizer)
    check_models(None, target_model, len(prompt) + max_new - 1)
    gen = check_generator(generator, model_device(target_model))
    distribution_from_logits(torch.zeros(1), temperature=1.0, top_k=top_k, top_p=top_p)

    devices = _cuda_devices(target_model)  # every clock reading waits for all of them
    start = _clock(devices)
    seq = list(prompt)
    cached_target = CachedModel(target_model)
    rounds = []
    with torch.inference_mode():
        if len(seq) > 1:  # prefill, as in speculative_generate: the cache lacks the last token
            cached_target.forward(torch.tensor([seq[:-1]], device=cached_target.device))
        prefill_time = _clock(devices) - start
        while True:
            t0 = _clock(devices)
            new_ids = torch.tensor([seq[cached_target.length :]], device=cached_target.device)
            logits = cached_target.forward(new_ids)[:, -1, :]
            probs = distribution_from_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
            y = int(torch.multinomial(probs[0].to(gen.device), 1, generator=gen))
            t1 = _clock(devices)
            seq.append(y)
            rounds.append(RoundRecord([], 0, None, False, 1, target_time=t1 - t0))
            if y in eos or len(seq) - len(prompt) >= max_new:
                break
    return _result(seq[len(prompt) :], rounds, "autoregressive", 0, 0, start, prefill_time, tokenizer, devices)


def generate_with_baselines(prompt_ids, *, generator: torch.Generator | int | None = None, **kwargs):
    """Run :func:`speculative_generate` and its two baselines on the same prompt.

    Args:
        prompt_ids: as in :func:`speculative_generate`.
        generator: one ``torch.Generator`` (or seed) used by the three runs in turn.
        **kwargs: keyword arguments of :func:`speculative_generate`.

    Returns:
        dict with ``"autoregressive"`` (target only), ``"single"`` (scheme ``"single"``,
        K = 1, the first draft temperature) and ``"multi"`` (the requested scheme).
    """
    gen = check_generator(generator, model_device(kwargs["draft_model"]) if "draft_model" in kwargs else None)
    temps = kwargs.get("draft_temperatures", 1.0)
    first_temp = temps if isinstance(temps, numbers.Real) else list(temps)[0]
    single = dict(kwargs, scheme="single", num_drafts=1, draft_temperatures=first_temp, scheme_params=None)
    auto = {
        key: kwargs[key]
        for key in ("target_model", "top_k", "top_p", "max_new_tokens", "eos_token_id", "tokenizer")
        if key in kwargs
    }
    return {
        "autoregressive": autoregressive_generate(
            prompt_ids, temperature=kwargs.get("target_temperature", 1.0), generator=gen, **auto
        ),
        "single": speculative_generate(prompt_ids, generator=gen, **single),
        "multi": speculative_generate(prompt_ids, generator=gen, **kwargs),
    }


# helpers ------------------------------------------------------------------------------


def _result(ids, rounds, method, k, big_l, start, prefill_time, tokenizer, devices=None) -> GenerationResult:
    end = _clock(devices)
    text = tokenizer.decode(ids) if tokenizer is not None else None
    return GenerationResult(list(ids), rounds, method, k, big_l, end - start, prefill_time, text)


def _clock(devices: Sequence[torch.device] | None = None) -> float:
    """``time.perf_counter()`` once the GPU work queued so far is done.

    GPU work is asynchronous, and ``torch.cuda.synchronize()`` waits for one device only (the
    current one), so with models on several GPUs (``device_map="auto"``, or a draft on another
    GPU than the target) a part's time would land on whichever part synchronizes next.

    Args:
        devices: the CUDA devices to wait for (:func:`_cuda_devices` of the models); empty: none
            (a CPU run, no cost). ``None``: the current CUDA device, if CUDA is in use.
    """
    if devices is None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    else:
        for device in devices:
            torch.cuda.synchronize(device)
    return time.perf_counter()


def _cuda_devices(*models) -> tuple[torch.device, ...]:
    """The CUDA devices ``models`` run on (``None`` entries skipped): each model's device and,
    for a model spread by ``device_map``, every GPU of its ``hf_device_map``."""
    devices = {}
    for model in models:
        if model is None:
            continue
        placement = getattr(model, "hf_device_map", None) or {}
        for where in (model_device(model), *placement.values()):
            if isinstance(where, int) and not isinstance(where, bool):
                where = torch.device("cuda", where)  # accelerate names GPUs by their index
            elif isinstance(where, str) and where.startswith("cuda"):
                where = torch.device(where)
            if isinstance(where, torch.device) and where.type == "cuda":
                devices[where] = None
    return tuple(devices)
