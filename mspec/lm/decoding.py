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
   ``"spectr"``, ... from :mod:`mspec.schemes.registry`), built with ``draft`` = the distribution(s)
   of those alive drafts at this position and ``target`` = ``q`` at this position. The
   scheme emits one token ``Y``; the drafts whose token differs from ``Y`` drop out. If no
   draft holds ``Y`` (a rejection) the round ends with ``Y``. If all L positions are
   accepted, one *bonus* token is sampled from ``q`` after the full draft. With one
   draft alive, every scheme is single-draft speculative sampling (the selected token is
   that draft), which runs directly.

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

import inspect
import numbers
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from mspec.rounds.block import block_verify
from mspec.rounds.selected_block import SELECTION_SCHEMES, selected_block_verify
from mspec.rounds.traversal import traversal_verify
from mspec.distributions import distribution_from_logits
from mspec.schemes.selection import sample_index
from mspec.schemes.single import SingleDraft

__all__ = [
    "DRAFT_CACHES",
    "VERIFICATIONS",
    "GenerationResult",
    "RoundRecord",
    "autoregressive_generate",
    "expected_round_tokens",
    "generate_with_baselines",
    "speculative_generate",
]

#: values of ``speculative_generate(draft_cache=...)``: the draft's KV cache grows with the
#: text and changes batch size each round (``"dynamic"``), or is one fixed K-row buffer for
#: the whole call (``"static"``, transformers' ``StaticCache``; see the module docstring)
DRAFT_CACHES = ("dynamic", "static")
#: how a round is verified: position by position with the scheme (``"token"``), or whole
#: blocks: ``"block"`` (block verification, one draft; :mod:`mspec.rounds.block`),
#: ``"traversal"`` (the tree of K drafts from the leaves up; :mod:`mspec.rounds.traversal`),
#: ``"selected-block"`` (select one block position by position with ``scheme``, then block
#: verification; :mod:`mspec.rounds.selected_block`)
VERIFICATIONS = ("token", "block", "traversal", "selected-block")
#: a static draft cache holds a multiple of this many positions (at least what the call
#: needs), so calls of similar length share one buffer shape and a compiled draft step is
#: not recompiled for every prompt length (transformers' ``generate`` keeps the longest
#: length seen for the same reason)
STATIC_CACHE_MULTIPLE = 256
#: the widest input a compiled draft step runs: a round's first draft step feeds one token,
#: or two after a round that accepted everything (the draft's cache lags one token), then one
#: token per step; the prefill, wider, runs uncompiled, so the compiled step sees two shapes
COMPILED_STEP_WIDTH = 2
#: the selection's numpy Generator is seeded with a number drawn below this bound from the
#: run's torch Generator (62 bits: any such seed, and within ``torch.randint``'s int64 range)
NUMPY_SEED_BOUND = 2**62


@dataclass
class RoundRecord:
    """What happened in one round (one target call).

    Attributes:
        alive: number of drafts offered to the scheme at each position reached, e.g.
            ``[3, 2, 1]``; empty for autoregressive sampling.
        accepted_length: number of drafted tokens accepted (0..L).
        winner: 0-based index of the draft whose tokens were accepted (the first one if
            several drafts hold them), ``None`` when nothing was accepted.
        bonus: whether all L positions were accepted and a bonus token was drawn.
        emitted: tokens added to the output by this round (``accepted_length + 1``, less
            after EOS / ``max_new_tokens`` truncation).
        draft_time: seconds in the draft model (forward passes and sampling).
        target_time: seconds in the target model's forward pass.
        selection_time: seconds in the token-level selection scheme.
        cache_time: seconds expanding, selecting and cropping KV caches.
    """

    alive: list[int]
    accepted_length: int
    winner: int | None
    bonus: bool
    emitted: int
    draft_time: float = 0.0
    target_time: float = 0.0
    selection_time: float = 0.0
    cache_time: float = 0.0


@dataclass
class GenerationResult:
    """Output of :func:`speculative_generate` or :func:`autoregressive_generate`.

    Attributes:
        token_ids: generated token ids (the prompt excluded).
        rounds: one :class:`RoundRecord` per decoding target call.
        method: ``"autoregressive"`` or the scheme name.
        num_drafts: K (0 for autoregressive).
        draft_length: L (0 for autoregressive).
        wall_time: seconds for the whole call, prefill included.
        prefill_time: seconds for the prompt prefill of both models.
        text: decoded ``token_ids`` when a tokenizer was given.
    """

    token_ids: list[int]
    rounds: list[RoundRecord]
    method: str
    num_drafts: int
    draft_length: int
    wall_time: float
    prefill_time: float = 0.0
    text: str | None = None

    @property
    def num_target_calls(self) -> int:
        """Decoding target forward passes (prefill not counted)."""
        return len(self.rounds)

    @property
    def block_efficiency(self) -> float:
        """Generated tokens per decoding target call (1.0 for autoregressive sampling)."""
        return len(self.token_ids) / len(self.rounds) if self.rounds else float("nan")

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of wall-clock time, prefill included."""
        return len(self.token_ids) / self.wall_time if self.wall_time > 0 else float("nan")

    def acceptance_per_position(self) -> np.ndarray:
        """P(position j is accepted | the round reached position j), shape ``(L,)``.

        ``nan`` where no round reached position j.
        """
        reached = np.zeros(self.draft_length)
        accepted = np.zeros(self.draft_length)
        for r in self.rounds:
            reached[: len(r.alive)] += 1
            accepted[: r.accepted_length] += 1
        with np.errstate(invalid="ignore", divide="ignore"):
            return accepted / reached

    def timing(self) -> dict[str, float]:
        """Mean seconds per round in each part of a round.

        Returns:
            ``draft`` / ``target`` / ``selection`` / ``cache`` (as in :class:`RoundRecord`);
            ``other``: the rest of the decoding time (after the prefill), the decoder's
            Python bookkeeping between the parts and an ``on_round`` callback's time, so the
            five parts add up to the mean round; ``draft_step``: ``draft / L``, one K-row draft
            step with its sampling (0 for autoregressive sampling).
        """
        n = max(len(self.rounds), 1)
        parts = {
            part: sum(getattr(r, f"{part}_time") for r in self.rounds) / n
            for part in ("draft", "target", "selection", "cache")
        }
        decoding = (self.wall_time - self.prefill_time) / n if self.rounds else 0.0
        parts["other"] = max(decoding - sum(parts.values()), 0.0)
        parts["draft_step"] = parts["draft"] / self.draft_length if self.draft_length else 0.0
        return parts


class _CachedModel:
    """A causal LM with a KV cache of the token ids in ``self.tokens`` (shape ``(B, c)``).

    ``tokens`` mirrors what the cache holds, row by row, so tests can check the cached
    logits against a full recomputation.
    """

    def __init__(self, model, cache=None, rows: int = 1):
        self.model = model
        self.device = _model_device(model)
        self.cache = _dynamic_cache(model) if cache is None else cache
        # transformers 5 renamed the forward argument `past_key_values` to `cache`
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.logits_to_keep = "logits_to_keep" in params
        self.compiled_step = None  # a compiled call for inputs of up to COMPILED_STEP_WIDTH tokens
        self.tokens = torch.zeros((rows, 0), dtype=torch.long, device=self.device)

    @property
    def length(self) -> int:
        return self.tokens.shape[1]

    def forward(self, input_ids: torch.Tensor, last: int = 1) -> torch.Tensor:
        """Feed ``input_ids`` ``(B, T)`` after the cached tokens.

        Returns:
            float64 logits of the ``last`` positions, ``(B, last, V)``.
        """
        # the compiled step runs decoding steps only: the first call (the prefill, or the first
        # step after a one-token prompt) runs uncompiled and allocates the cache's buffers
        step = self.compiled_step is not None and self.length > 0 and input_ids.shape[1] <= COMPILED_STEP_WIDTH
        call = self.compiled_step if step else self.model
        out = call(input_ids=input_ids, use_cache=True, **self._call_kwargs(input_ids, last))
        self.tokens = torch.cat([self.tokens, input_ids], dim=1)
        return out.logits[:, -last:].double()

    def _call_kwargs(self, input_ids: torch.Tensor, last: int) -> dict:
        """The model's keyword arguments besides ``input_ids`` and ``use_cache``."""
        kwargs = {self.cache_arg: self.cache}
        if self.logits_to_keep:  # skip the LM head on positions nobody reads (e.g. the prompt)
            kwargs["logits_to_keep"] = last
        return kwargs

    def expand(self, k: int) -> None:
        """Repeat the (batch-1) cache into ``k`` rows."""
        self.cache.batch_repeat_interleave(k)
        self.tokens = self.tokens.repeat_interleave(k, dim=0)

    def keep(self, row: int, length: int) -> None:
        """Keep only batch row ``row``, cropped to its first ``length`` tokens."""
        if self.tokens.shape[0] > 1:
            # the row index stays on the CPU: a CPU index selects rows of a tensor on any device,
            # a CUDA index only on its own GPU -- and with device_map="auto" the cache layers
            # live on the GPUs of their model layers, not all on self.device (the first one)
            self.cache.batch_select_indices(torch.tensor([row]))
        if self.length > length:
            self.cache.crop(length - self.length)  # crop() takes minus the tokens to remove
        self.tokens = self.tokens[row : row + 1, :length]


class _StaticCachedModel(_CachedModel):
    """A draft model whose KV cache is one fixed buffer of K rows (``draft_cache="static"``).

    Every row holds the accepted prefix at the start of a round, so :meth:`expand` has
    nothing to do, and :meth:`keep` copies the surviving row into the others in place: the
    buffers never change shape or address, as CUDA graphs need.
    """

    def __init__(self, model, rows: int, max_length: int, compiled: bool = False):
        super().__init__(model, cache=_static_cache(model, max_length), rows=rows)
        self.rows = rows
        self.agreed = 0  # every row holds the same keys and values before this position
        self.position_ids = "position_ids" in inspect.signature(model.forward).parameters
        if compiled:
            self.compiled_step = _compiled_call(model)

    def forward(self, input_ids: torch.Tensor, last: int = 1) -> torch.Tensor:
        """As :meth:`_CachedModel.forward`; a one-row input (the prompt) goes to all K rows."""
        if input_ids.shape[0] == 1 < self.rows:
            input_ids = input_ids.expand(self.rows, -1)
        return super().forward(input_ids.contiguous(), last)  # one memory layout: one compiled graph

    def _call_kwargs(self, input_ids: torch.Tensor, last: int) -> dict:
        """As :meth:`_CachedModel._call_kwargs`, and the positions of ``input_ids``: the
        positions a model would compute itself, but from the cache's fill counter, a tensor
        that some models (OPT) read into a Python number, which breaks a compiled graph."""
        kwargs = super()._call_kwargs(input_ids, last)
        if self.position_ids:
            positions = torch.arange(self.length, self.length + input_ids.shape[1], device=input_ids.device)
            kwargs["position_ids"] = positions.expand(input_ids.shape[0], -1)
        return kwargs

    def expand(self, k: int) -> None:
        """Nothing to do: the cache has its K rows already."""
        if k != self.rows:
            raise ValueError(f"this static cache has {self.rows} rows, not {k}")

    def keep(self, row: int, length: int) -> None:
        """Copy row ``row``'s keys and values into every row, cropped to ``length`` tokens.

        Only the positions written since the last :meth:`keep` differ between rows, so only
        they are copied.
        """
        if self.rows > 1:
            for layer in self.cache.layers:
                for buffer in (layer.keys, layer.values):
                    buffer[:, :, self.agreed : length] = buffer[row : row + 1, :, self.agreed : length].clone()
        if self.length > length:
            self.cache.crop(length - self.length)  # in place: moves the layers' fill counters back
        self.tokens = self.tokens[row : row + 1, :length].expand(self.rows, -1)
        self.agreed = length


def _dynamic_cache(model):
    """An empty ``DynamicCache`` for ``model`` (with its config: it knows sliding-window layers)."""
    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers < 4.56 (untested here)
        return DynamicCache()


def _static_cache(model, max_length: int):
    """An empty ``StaticCache`` for ``model`` of at least ``max_length`` positions.

    Raises:
        ValueError: when a layer of ``model`` is not a plain full-attention layer (e.g. a
            sliding window, whose buffer rolls, so a row cannot be copied position by position).
    """
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    size = -(-max_length // STATIC_CACHE_MULTIPLE) * STATIC_CACHE_MULTIPLE
    cache = StaticCache(config=model.config, max_cache_len=size)
    kinds = sorted({type(layer).__name__ for layer in cache.layers if type(layer) is not StaticLayer})
    if kinds:
        raise ValueError(
            f"draft_cache='static' needs a draft whose layers all attend to the whole prefix, but "
            f"{type(model).__name__} has {', '.join(kinds)} layers; use draft_cache='dynamic'"
        )
    return cache


def _compiled_call(model):
    """``model``'s forward compiled as transformers' ``generate`` compiles it for a static
    cache: ``get_compiled_call`` with the default ``CompileConfig`` (torch.compile, mode
    ``"reduce-overhead"``: CUDA graphs)."""
    from transformers import CompileConfig

    if hasattr(model, "get_compiled_call"):
        return model.get_compiled_call(CompileConfig())
    return torch.compile(model, **CompileConfig().to_dict())


@dataclass
class _Settings:
    """The checked arguments of one :func:`speculative_generate` call."""

    scheme: str
    params: dict
    num_drafts: int
    draft_length: int
    temps: list[float]
    target_temperature: float
    sampling: dict
    prompt: list[int]
    max_new: int
    eos: frozenset[int]


# long: the docstring documents each of the 20 arguments; the body is a few calls
def speculative_generate(
    prompt_ids,
    *,
    draft_model,
    target_model,
    scheme: str = "specinfer",
    num_drafts: int = 2,
    draft_length: int = 5,
    draft_temperatures: float | Sequence[float] = 1.0,
    target_temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    eos_token_id: int | Sequence[int] | None = None,
    generator: torch.Generator | int | None = None,
    scheme_params: dict | None = None,
    draft_cache: str = "dynamic",
    compile_draft: bool = False,
    verify: str = "token",
    tokenizer=None,
    on_round=None,
) -> GenerationResult:
    """Sample a continuation of ``prompt_ids`` from ``target_model`` with K drafts per round.

    The output has exactly the law of :func:`autoregressive_generate` with the same
    ``target_temperature`` / ``top_k`` / ``top_p`` (see the module docstring).

    Args:
        prompt_ids: token ids, a list or a tensor of shape ``(n,)`` or ``(1, n)``, n >= 1;
            or a string when ``tokenizer`` is given.
        draft_model: causal LM (``transformers`` model in eval mode) that drafts.
        target_model: causal LM whose distribution is sampled; same vocabulary.
        scheme: token-level selection scheme, a key of :data:`mspec.schemes.registry.SCHEMES`.
        num_drafts: K >= 1 drafts per round (``"single"`` needs K = 1).
        draft_length: L >= 1 drafted tokens per draft per round.
        draft_temperatures: one temperature > 0 for K identical drafts, or a sequence of K
            temperatures (non-identical drafts; needs a scheme that supports them).
        target_temperature: temperature > 0 of the target distribution.
        top_k: keep the ``top_k`` most likely tokens, for draft and target alike.
        top_p: nucleus sampling threshold in (0, 1], for draft and target alike.
        max_new_tokens: stop after this many generated tokens (>= 1).
        eos_token_id: stop after emitting this token (or any of these tokens).
        generator: ``torch.Generator`` (or an int seed) for all randomness: drafting uses
            it directly, the selection scheme uses a numpy Generator seeded from it.
            ``None`` seeds a fresh generator from the OS. An int seed or ``None`` creates the
            generator on the draft model's device, so drafting samples where the draft's
            distributions are (no copy to the host per drafted token); a given generator on
            another device works, with a copy per drafted token. One int seed gives the same
            output on the same kind of device; CPU and CUDA generators draw different
            streams, so a seed run on a GPU differs from the same seed on a CPU.
        scheme_params: extra keyword arguments of the scheme (e.g. ``s`` for ``"is"``).
        draft_cache: the draft's KV cache, one of :data:`DRAFT_CACHES`: ``"dynamic"`` (the
            default) or ``"static"`` (transformers' ``StaticCache``, K fixed rows; any device;
            see the module docstring). Same randomness either way.
        compile_draft: with ``draft_cache="static"`` and the draft on a CUDA GPU, run the
            draft's decoding steps compiled with CUDA graphs (``torch.compile``, mode
            ``"reduce-overhead"``; the first calls compile, later ones replay).
        verify: one of :data:`VERIFICATIONS`: ``"token"`` (the default: ``scheme`` position by
            position); ``"block"`` (block verification of Sun et al., ICLR 2025: the drafted
            block verified jointly; the most tokens per round for one draft; needs
            ``num_drafts=1``; ``scheme`` unused); ``"traversal"`` (the tree of the K drafts
            verified from the leaves up, after Weng et al., NeurIPS 2025; any drafts;
            ``scheme`` unused); ``"selected-block"`` (one block selected position by position
            with ``scheme``, one of :data:`mspec.rounds.selected_block.SELECTION_SCHEMES`, then block
            verification; identical drafts). All exactly lossless.
        tokenizer: optional; decodes the output into ``GenerationResult.text``.
        on_round: optional ``on_round(drafted, draft_probs, target_probs)``, called after
            each round's target pass with the round's drafted ids ``(K, L)``, draft
            distributions ``(K, L, V)`` and target distributions ``(K, L + 1, V)`` (torch
            tensors; e.g. for :func:`expected_round_tokens`). It must not change them.

    Returns:
        :class:`GenerationResult` with the generated ids and per-round records.

    Raises:
        ValueError: bad K, L, prompt, temperature, vocabularies, scheme name, draft cache
            (``compile_draft`` without a static cache or a CUDA draft) or ``verify``.
    """
    settings = _check_settings(
        prompt_ids, draft_model, target_model, scheme=scheme, num_drafts=num_drafts, draft_length=draft_length,
        draft_temperatures=draft_temperatures, target_temperature=target_temperature, top_k=top_k, top_p=top_p,
        max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, scheme_params=scheme_params, tokenizer=tokenizer)
    _check_verify(verify, settings)
    cached_draft = _cached_draft_model(draft_model, settings, draft_cache, compile_draft)
    gen = _check_generator(generator, _model_device(draft_model))
    # the scheme's numpy Generator is seeded from `gen`, so one seed fixes the whole run
    rng = np.random.default_rng(int(torch.randint(0, NUMPY_SEED_BOUND, (1,), generator=gen, device=gen.device)))
    devices = _cuda_devices(draft_model, target_model)  # every clock reading waits for all of them
    start = _clock(devices)
    decoder = _Decoder(cached_draft, _CachedModel(target_model), settings, gen, rng, on_round, devices, verify)
    with torch.inference_mode():
        seq, rounds, prefill_time = decoder.generate(start)
    return _result(seq[len(settings.prompt) :], rounds, scheme, settings.num_drafts, settings.draft_length, start,
                   prefill_time, tokenizer, devices)


def _check_settings(prompt_ids, draft_model, target_model, *, scheme, num_drafts, draft_length, draft_temperatures,
                    target_temperature, top_k, top_p, max_new_tokens, eos_token_id, scheme_params,
                    tokenizer) -> _Settings:
    """Check the arguments of :func:`speculative_generate` (same names) and gather them.

    Raises:
        ValueError: naming the first bad argument and what it must be.
    """
    from mspec.schemes import registry  # imported late: the registry imports every scheme

    if not isinstance(scheme, str) or scheme not in registry.SCHEMES:
        raise ValueError(f"`scheme` must be one of {sorted(registry.SCHEMES)}, got {scheme!r}")
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


def _cached_draft_model(draft_model, settings: _Settings, draft_cache: str, compile_draft: bool) -> _CachedModel:
    """The draft model with the KV cache that ``draft_cache`` names (see :data:`DRAFT_CACHES`).

    Raises:
        ValueError: an unknown ``draft_cache``; ``compile_draft`` without a static cache or
            without a CUDA draft; a draft with layers a static cache cannot serve.
    """
    if draft_cache not in DRAFT_CACHES:
        raise ValueError(f"`draft_cache` must be one of {DRAFT_CACHES}, got {draft_cache!r}")
    if compile_draft:
        _check_compilable(draft_model, draft_cache)
    if draft_cache == "dynamic":
        return _CachedModel(draft_model)
    # the longest the draft's cache gets: the prompt and every emitted token but the last,
    # plus L - 1 drafted tokens (the round's last drafted token is never fed back)
    max_length = len(settings.prompt) + settings.max_new + settings.draft_length - 1
    return _StaticCachedModel(draft_model, settings.num_drafts, max_length, compiled=compile_draft)


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


class _Decoder:
    """The rounds of one :func:`speculative_generate` call, after its arguments are checked."""

    def __init__(self, draft_model: _CachedModel, target_model: _CachedModel, settings: _Settings,
                 gen: torch.Generator, rng: np.random.Generator, on_round, devices, verify: str = "token"):
        self.draft_model, self.target_model = draft_model, target_model
        self.settings, self.gen, self.on_round, self.devices = settings, gen, on_round, devices
        if verify == "block":
            self.select = _BlockSelector(rng)
        elif verify in ("traversal", "selected-block"):
            self.select = _TreeSelector(verify, settings.scheme, rng)
        else:
            self.select = _Selector(settings.scheme, settings.params, settings.temps, rng)

    def generate(self, start: float) -> tuple[list[int], list[RoundRecord], float]:
        """Prefill, then run rounds until EOS or ``max_new_tokens``.

        Args:
            start: the clock reading the call's wall time counts from.

        Returns:
            ``(seq, rounds, prefill_time)``: prompt + emitted tokens, one record per round,
            and the seconds from ``start`` to the end of the prefill.
        """
        seq = list(self.settings.prompt)  # prompt + emitted tokens
        # prefill: the caches hold every token but the last; a round feeds the rest
        for model in (self.draft_model, self.target_model):
            if len(seq) > 1:
                model.forward(torch.tensor([seq[:-1]], device=model.device))
        prefill_time = _clock(self.devices) - start
        rounds: list[RoundRecord] = []
        while True:
            generated = len(seq) - len(self.settings.prompt)
            out, record = self.round(seq)
            # stop at EOS or max_new_tokens: truncating the final round keeps the law of the
            # emitted prefix (the tokens already emitted do not depend on what follows)
            emitted, done = _truncate(out, generated, self.settings.max_new, self.settings.eos)
            seq.extend(emitted)
            record.emitted = len(emitted)
            rounds.append(record)
            if done:
                return seq, rounds, prefill_time

    def round(self, seq: list[int]) -> tuple[list[int], RoundRecord]:
        """One round: draft, score, select, keep the caches of a surviving draft.

        Returns:
            ``(out, record)``: the round's output tokens (before truncation) and its record
            (``emitted`` still 0).
        """
        s, clock = self.settings, lambda: _clock(self.devices)
        n = len(seq)
        t0 = clock()
        self.draft_model.expand(s.num_drafts)
        self.target_model.expand(s.num_drafts)
        t1 = clock()
        drafted, draft_probs = _draft(self.draft_model, seq, s.temps, s.draft_length, s.sampling, self.gen)
        t2 = clock()
        target_probs = _score(self.target_model, seq, drafted, s.target_temperature, s.sampling)  # (K, L + 1, V)
        t3 = clock()
        if self.on_round is not None:
            self.on_round(drafted, draft_probs, target_probs)
            t3 = clock()  # the callback's time is nobody's
        out, accepted, alive, alive_counts = self.select(drafted, draft_probs, target_probs)
        t4 = clock()
        # keep a row holding the accepted tokens, cropped to prefix + accepted tokens
        row = alive[0]
        self.draft_model.keep(row, min(n + accepted, self.draft_model.length))  # after all-accept it lags by one
        self.target_model.keep(row, n + accepted)
        t5 = clock()
        return out, RoundRecord(
            alive_counts, accepted, row if accepted else None, accepted == s.draft_length, 0,
            draft_time=t2 - t1, target_time=t3 - t2, selection_time=t4 - t3, cache_time=(t1 - t0) + (t5 - t4),
        )


def _truncate(out: list[int], generated: int, max_new: int, eos: frozenset[int]) -> tuple[list[int], bool]:
    """The tokens of ``out`` to emit after ``generated`` tokens, and whether generation ends.

    Generation ends after an EOS token or once ``max_new`` tokens are out.
    """
    emitted = []
    for y in out:
        emitted.append(y)
        if y in eos or generated + len(emitted) >= max_new:
            return emitted, True
    return emitted, False


def _draft(draft_model: _CachedModel, seq, temps, big_l, sampling, gen):
    """Draft L tokens in each of K rows (the cache is already expanded to K rows).

    Returns:
        ``(drafted, draft_probs)``: token ids ``(K, L)`` and the distributions they were
        sampled from, ``(K, L, V)`` (row ``i`` at temperature ``temps[i]``).
    """
    k = len(temps)
    temp_col = torch.tensor(temps, dtype=torch.float64, device=draft_model.device)[:, None]
    # the first step also feeds the tokens the cache lacks (one more after an all-accept round)
    inp = torch.tensor([seq[draft_model.length :]], device=draft_model.device).expand(k, -1)
    # shared[i, r]: rows i and r have drafted the same tokens so far at the same temperature.
    # Such rows have the same distribution in exact arithmetic, but a batched forward pass
    # may differ in the last bits between rows; the selection treats them as identical
    # drafts, so they must sample from one bit-identical row (the first of their group).
    shared = temp_col == temp_col.T  # (K, K)
    drafted, probs = [], []
    for j in range(big_l):
        logits = draft_model.forward(inp)[:, -1, :]  # (K, V)
        # per-row temperature: divide first, then the shared top-k / top-p
        p = distribution_from_logits(logits / temp_col, temperature=1.0, **sampling)
        p = p.index_select(0, shared.to(torch.int8).argmax(dim=1))  # argmax: the first True
        x = torch.multinomial(p.to(gen.device), 1, generator=gen).to(draft_model.device)  # (K, 1)
        shared &= x == x.T
        drafted.append(x)
        probs.append(p)
        if j + 1 < big_l:  # the last drafted token is never fed to the draft model
            inp = x
    return torch.cat(drafted, dim=1), torch.stack(probs, dim=1)


def _score(target_model: _CachedModel, seq, drafted, temperature, sampling):
    """One target forward pass over K rows x (L + 1) positions.

    Returns:
        ``(K, L + 1, V)``: the target distribution after the prefix and after each
        drafted prefix of each row.
    """
    k, big_l = drafted.shape
    prefix = torch.tensor([seq[target_model.length :]], device=target_model.device).expand(k, -1)
    logits = target_model.forward(torch.cat([prefix, drafted.to(target_model.device)], dim=1), last=big_l + 1)
    return distribution_from_logits(logits, temperature=temperature, **sampling)


class _Selector:
    """Runs the token-level scheme position by position over the drafts of one round."""

    def __init__(self, scheme, params, temps, rng):
        self.scheme, self.params = scheme, params
        self.temps, self.rng = temps, rng

    def __call__(self, drafted, draft_probs, target_probs):
        """Select the output tokens of one round.

        Args:
            drafted: ``(K, L)`` drafted token ids.
            draft_probs: ``(K, L, V)`` draft distributions ``p_i``.
            target_probs: ``(K, L + 1, V)`` target distributions ``q``.

        Returns:
            ``(out, accepted, alive, alive_counts)``: the output tokens (accepted drafted
            tokens, then the resampled or bonus token), their number of accepted drafted
            tokens, the drafts that hold all accepted tokens, and the number of drafts
            offered at each position.
        """
        k, big_l = drafted.shape
        drafted = drafted.cpu().numpy()
        alive = list(range(k))  # drafts whose tokens all match the output so far
        alive_counts, out = [], []
        for j in range(big_l):
            alive_counts.append(len(alive))
            tokens = drafted[alive, j]
            rule = position_scheme(self.scheme, self.params, draft_probs[:, j], target_probs[:, j],
                                   self.temps, alive)
            y = rule.sample(tokens, self.rng).token
            out.append(y)
            # continue with the drafts that hold y -- decided by matching, not by
            # `Selection.accepted`, so a drafted token output from a residual also continues
            # (either way y ~ q and the drafts holding y share the new prefix)
            holding = [i for i, x in zip(alive, tokens) if x == y]
            if not holding:
                return out, j, alive, alive_counts  # rejection ends the round
            alive = holding
        # all L accepted: a bonus token from q after the full draft
        out.append(sample_index(target_probs[alive[0], big_l].cpu().numpy(), self.rng))
        return out, big_l, alive, alive_counts


class _BlockSelector:
    """Block verification of the one drafted block of a round (:mod:`mspec.rounds.block`)."""

    def __init__(self, rng):
        self.rng = rng

    def __call__(self, drafted, draft_probs, target_probs):
        """As :meth:`_Selector.__call__`, for K = 1."""
        block = drafted[0].cpu().numpy()
        kept, token = block_verify(block, draft_probs[0].double().cpu().numpy(),
                                   target_probs[0].double().cpu().numpy(), self.rng)
        out = [int(t) for t in block[:kept]] + [token]
        return out, kept, [0], [1] * min(kept + 1, block.size)


class _TreeSelector:
    """Traversal or selected-block verification of the K drafted blocks of a round."""

    def __init__(self, verify: str, scheme: str, rng):
        self.verify, self.scheme, self.rng = verify, scheme, rng

    def __call__(self, drafted, draft_probs, target_probs):
        """As :meth:`_Selector.__call__`."""
        blocks = drafted.cpu().numpy()
        p, q = draft_probs.double().cpu().numpy(), target_probs.double().cpu().numpy()
        if self.verify == "traversal":
            out, rows = traversal_verify(blocks, p, q, self.rng)
        else:
            out, rows = selected_block_verify(blocks, p, q, self.rng, scheme=self.scheme)
        kept = len(out) - 1
        alive_counts = [int(np.sum(np.all(blocks[:, :j] == blocks[rows[0], :j], axis=1)))
                        for j in range(min(kept + 1, blocks.shape[1]))]
        return out, kept, rows, alive_counts


def _check_verify(verify, settings) -> None:
    if verify not in VERIFICATIONS:
        raise ValueError(f"`verify` must be one of {VERIFICATIONS}, got {verify!r}")
    if verify == "block" and settings.num_drafts != 1:
        raise ValueError(f"verify='block' verifies one drafted block: pass num_drafts=1 (got {settings.num_drafts}), "
                         "or verify='traversal' / 'selected-block' for K drafts")
    if verify == "selected-block":
        if settings.scheme not in SELECTION_SCHEMES:
            raise ValueError(f"verify='selected-block' selects with `scheme`, one of {SELECTION_SCHEMES} "
                             f"(a known induced law), got scheme={settings.scheme!r}")
        if len(set(settings.temps)) > 1:
            raise ValueError("verify='selected-block' needs identical drafts (one draft temperature); "
                             "verify='traversal' takes non-identical drafts")


def position_scheme(scheme: str, params: dict, draft_rows, target_rows, temps, alive: list[int]):
    """The selection scheme for one position of a round, given the drafts still alive.

    The one place that decides it: alive drafts share their prefix, so the target rows of
    the alive drafts agree and drafts of equal temperature have one (bit-identical, see
    ``_draft``) distribution -- passed as a ``(V,)`` row (identical drafts), else one row
    per alive draft. With one draft left every scheme of the registry is single-draft
    speculative sampling (the selected token is that draft, ``p_I = p``), so that is built
    directly (no K-draft construction such as the optimal scheme's sort).

    Args:
        scheme: a key of :data:`mspec.schemes.registry.SCHEMES`.
        params: the scheme's extra keyword arguments.
        draft_rows: ``(K, V)`` every draft's distribution at this position (numpy or torch).
        target_rows: ``(K, V)`` the target distribution after each draft's prefix.
        temps: the K draft temperatures.
        alive: indices of the drafts whose tokens all match the output so far.

    Returns:
        A built :class:`~mspec.schemes.selection.SelectionScheme`.
    """
    from mspec.schemes import registry  # imported late: the registry imports every scheme

    target = _as_array(target_rows[alive[0]])
    if len(alive) == 1:
        return SingleDraft(draft=_as_array(draft_rows[alive[0]]), target=target)
    same_temp = len({temps[i] for i in alive}) == 1
    draft = _as_array(draft_rows[alive[0]]) if same_temp else _as_array(draft_rows[alive])
    return registry.make_scheme(scheme, draft=draft, target=target, num_drafts=len(alive), **params)


def expected_round_tokens(drafted, draft_probs, target_probs, *, scheme: str, draft_temperatures,
                          scheme_params: dict | None = None, eos_token_id=None, control: bool = False):
    """Expected number of tokens one round emits, given its drafts, for ``scheme``.

    The round's selection randomness is averaged out exactly: at position ``j`` with alive
    drafts ``A`` the scheme outputs ``Y = y`` with probability ``P(y | A's tokens)``
    (:meth:`~mspec.schemes.selection.SelectionScheme.conditional`), and the drafts holding ``y``
    carry on, so

        E(j, A) = 1 + sum_y P(y | A) E(j + 1, A_y),      E(L, A) = 1 (the bonus token),

    over the trie of the K drafts (at most K L nodes), where ``y`` runs over the drafted
    tokens that are not end-of-sequence (an EOS ends the generation). Evaluating several
    schemes on the same rounds compares their block efficiency without the noise of
    sampling (``max_new_tokens`` truncation aside). One alive draft: single-draft sampling,
    as in :func:`speculative_generate`.

    With ``control=True`` it also returns a *control variate* with mean zero over the drafts,
    one entry per position ``j``:

        Z_j = sum over the trie's nodes at position j of  r(node) (a(node) - alpha(node)),

    where ``r`` is the probability that the selection reaches the node (the product of the
    ``P(y | A)`` above it), ``a`` the scheme's acceptance given the node's drafted tokens
    (:meth:`~mspec.schemes.selection.SelectionScheme.conditional`) and ``alpha`` its acceptance
    averaged over them (:meth:`~mspec.schemes.selection.SelectionScheme.acceptance`). Given all
    earlier positions, the alive drafts' tokens at ``j`` are fresh draws from the node's
    draft distribution, so ``E[a] = alpha`` there and ``E[Z_j] = 0``. Most of a round's
    randomness is whether its drafted tokens are accepted; subtracting ``b . Z`` (``b``
    fitted over many rounds) removes it from block-efficiency estimates
    (``python -m mspec_lab rounds``).

    Args:
        drafted: ``(K, L)`` drafted token ids.
        draft_probs: ``(K, L, V)`` draft distributions (row ``i`` at ``draft_temperatures[i]``).
        target_probs: ``(K, L + 1, V)`` target distributions after each drafted prefix.
        scheme: a key of :data:`mspec.schemes.registry.SCHEMES`.
        draft_temperatures: K temperatures (equal ones make the alive drafts identical).
        scheme_params: extra keyword arguments of the scheme.
        eos_token_id: end-of-sequence id(s), as for :func:`speculative_generate`.

    Returns:
        The expected number of emitted tokens, in ``[1, L + 1]``; with ``control=True`` the
        pair ``(expected, Z)``, ``Z`` of shape ``(L,)``.
    """
    drafted, draft_probs, target_probs = _check_round_arrays(drafted, draft_probs, target_probs)
    k = drafted.shape[0]
    temps = [float(t) for t in np.broadcast_to(np.asarray(draft_temperatures, dtype=float), (k,))]
    trie = _RoundTrie(drafted, draft_probs, target_probs, scheme, dict(scheme_params or {}), temps,
                      _check_eos(eos_token_id), control)
    expected = trie.value(0, list(range(k)), 1.0)
    return (expected, trie.z) if control else expected


def _as_array(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _check_round_arrays(drafted, draft_probs, target_probs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three arrays of a round as numpy arrays, shapes checked (see :func:`expected_round_tokens`)."""
    drafted, draft_probs, target_probs = _as_array(drafted), _as_array(draft_probs), _as_array(target_probs)
    if drafted.ndim != 2 or draft_probs.shape[:2] != drafted.shape or target_probs.shape[:2] != (
            drafted.shape[0], drafted.shape[1] + 1) or draft_probs.shape[2] != target_probs.shape[2]:
        raise ValueError(
            f"expected drafted (K, L), draft_probs (K, L, V) and target_probs (K, L + 1, V); got "
            f"{drafted.shape}, {draft_probs.shape} and {target_probs.shape}")
    return drafted, draft_probs, target_probs


class _RoundTrie:
    """The recursion of :func:`expected_round_tokens` over the trie of a round's K drafts.

    Attributes:
        z: ``(L,)`` the control variate, accumulated by :meth:`value` when ``control``.
    """

    def __init__(self, drafted, draft_probs, target_probs, scheme: str, params: dict, temps: list[float],
                 eos: frozenset[int], control: bool):
        self.drafted, self.draft_probs, self.target_probs = drafted, draft_probs, target_probs
        self.scheme, self.params, self.temps, self.eos, self.control = scheme, params, temps, eos, control
        self.z = np.zeros(drafted.shape[1])

    def value(self, j: int, alive: list[int], reach: float) -> float:
        """``E(j, A)``: expected tokens from position ``j`` on with alive drafts ``alive``,
        reached with probability ``reach``."""
        if j == self.drafted.shape[1]:
            return 1.0
        tokens = self.drafted[alive, j]
        rule = position_scheme(self.scheme, self.params, self.draft_probs[:, j], self.target_probs[:, j],
                               self.temps, alive)
        dist, _ = rule.conditional(tokens)
        if self.control:
            self.z[j] += reach * (rule.accept_probability(tokens) - rule.acceptance())
        total = 1.0
        for y in np.unique(tokens):
            if int(y) not in self.eos:
                total += float(dist[y]) * self.value(j + 1, [i for i in alive if self.drafted[i, j] == y],
                                                     reach * float(dist[y]))
        return total


def autoregressive_generate(
    prompt_ids,
    *,
    target_model,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    eos_token_id: int | Sequence[int] | None = None,
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
        eos_token_id: stop after emitting this token (or any of these tokens).
        generator: ``torch.Generator``, int seed, or ``None`` (then created on the target
            model's device, as in :func:`speculative_generate`).
        tokenizer: optional, for ``GenerationResult.text``.

    Returns:
        :class:`GenerationResult` with one round per token (block efficiency 1).
    """
    _check_temperature(temperature, "temperature")
    prompt = _check_prompt(prompt_ids, tokenizer)
    max_new = _check_int(max_new_tokens, "max_new_tokens", "the number of tokens to generate")
    eos = _check_eos(eos_token_id)
    _check_models(None, target_model, len(prompt) + max_new - 1)
    gen = _check_generator(generator, _model_device(target_model))
    distribution_from_logits(torch.zeros(1), temperature=1.0, top_k=top_k, top_p=top_p)

    devices = _cuda_devices(target_model)  # every clock reading waits for all of them
    start = _clock(devices)
    seq = list(prompt)
    cached_target = _CachedModel(target_model)
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
    gen = _check_generator(generator, _model_device(kwargs["draft_model"]) if "draft_model" in kwargs else None)
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
        for where in (_model_device(model), *placement.values()):
            if isinstance(where, int) and not isinstance(where, bool):
                where = torch.device("cuda", where)  # accelerate names GPUs by their index
            elif isinstance(where, str) and where.startswith("cuda"):
                where = torch.device(where)
            if isinstance(where, torch.device) and where.type == "cuda":
                devices[where] = None
    return tuple(devices)


def _model_device(model) -> torch.device:
    device = getattr(model, "device", None)  # transformers models have it
    if isinstance(device, torch.device):
        return device
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


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
