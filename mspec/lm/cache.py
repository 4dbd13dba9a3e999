"""The KV caches of the decoder's models: a batch-1 ``DynamicCache`` expanded to K rows each
round (:class:`CachedModel`), or one fixed K-row ``StaticCache`` for the draft, optionally
with a compiled decoding step (:class:`StaticCachedModel`); see :mod:`mspec.lm.decoding`."""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

__all__ = ["COMPILED_STEP_WIDTH", "STATIC_CACHE_MULTIPLE", "CachedModel", "StaticCachedModel", "model_device"]

#: a static draft cache holds a multiple of this many positions (at least what the call
#: needs), so calls of similar length share one buffer shape and a compiled draft step is
#: not recompiled for every prompt length (transformers' ``generate`` keeps the longest
#: length seen for the same reason)
STATIC_CACHE_MULTIPLE = 256
#: the widest input a compiled draft step runs: a round's first draft step feeds one token,
#: or two after a round that accepted everything (the draft's cache lags one token), then one
#: token per step; the prefill, wider, runs uncompiled, so the compiled step sees two shapes
COMPILED_STEP_WIDTH = 2


class CachedModel:
    """A causal LM with a KV cache of the token ids in ``self.tokens`` (shape ``(B, c)``).

    ``tokens`` mirrors what the cache holds, row by row, so tests can check the cached
    logits against a full recomputation.
    """

    def __init__(self, model, cache=None, rows: int = 1):
        self.model = model
        self.device = model_device(model)
        self.cache = dynamic_cache(model) if cache is None else cache
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
        """Repeat the (batch-1) cache into ``k`` rows; sliding-window layers keep every new position
        until :meth:`keep` crops them (transformers' past recording, as in assisted generation)."""
        if hasattr(self.cache, "activate_past_recording"):  # after the prefill: no copy of a long prompt
            self.cache.activate_past_recording()
        self.cache.batch_repeat_interleave(k)
        self.tokens = self.tokens.repeat_interleave(k, dim=0)

    def keep(self, row: int, length: int) -> None:
        """Keep only batch row ``row``, cropped to its first ``length`` tokens."""
        if self.tokens.shape[0] > 1:
            # the row index stays on the CPU: a CPU index selects rows of a tensor on any device,
            # a CUDA index only on its own GPU -- and with device_map="auto" the cache layers
            # live on the GPUs of their model layers, not all on self.device (the first one)
            self.cache.batch_select_indices(torch.tensor([row]))
        # crop() takes minus the tokens to remove; crop(0) cuts a sliding window back to its size
        self.cache.crop(length - self.length)
        self.tokens = self.tokens[row : row + 1, :length]


class StaticCachedModel(CachedModel):
    """A draft model whose KV cache is one fixed buffer of K rows (``draft_cache="static"``).

    Every row holds the accepted prefix at the start of a round, so :meth:`expand` has
    nothing to do, and :meth:`keep` copies the surviving row into the others in place: the
    buffers never change shape or address, as CUDA graphs need.
    """

    def __init__(self, model, rows: int, max_length: int, compiled: bool = False):
        super().__init__(model, cache=static_cache(model, max_length), rows=rows)
        self.rows = rows
        self.agreed = 0  # every row holds the same keys and values before this position
        self.position_ids = "position_ids" in inspect.signature(model.forward).parameters
        if compiled:
            self.compiled_step = compiled_call(model)

    def forward(self, input_ids: torch.Tensor, last: int = 1) -> torch.Tensor:
        """As :meth:`CachedModel.forward`; a one-row input (the prompt) goes to all K rows."""
        if input_ids.shape[0] == 1 < self.rows:
            input_ids = input_ids.expand(self.rows, -1)
        return super().forward(input_ids.contiguous(), last)  # one memory layout: one compiled graph

    def _call_kwargs(self, input_ids: torch.Tensor, last: int) -> dict:
        """As :meth:`CachedModel._call_kwargs`, and the positions of ``input_ids``: the
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


def dynamic_cache(model):
    """An empty ``DynamicCache`` for ``model`` (with its config: it knows sliding-window layers).

    Raises:
        ValueError: a layer that keeps no per-token keys and values the decoder could select and
            crop row by row (e.g. linear attention's recurrent state).
    """
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    try:
        cache = DynamicCache(config=model.config)
    except TypeError:  # transformers < 4.56 (untested here)
        return DynamicCache()
    kinds = sorted({type(layer).__name__ for layer in cache.layers
                    if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer)})
    if kinds:
        raise ValueError(f"the decoder rolls the KV cache back to the accepted tokens of each round, which it can do "
                         f"for full-attention and sliding-window layers, but {type(model).__name__} has "
                         f"{', '.join(kinds)} layers; use a model of another architecture")
    return cache


def static_cache(model, max_length: int):
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


def compiled_call(model):
    """``model``'s forward compiled as transformers' ``generate`` compiles it for a static
    cache: ``get_compiled_call`` with the default ``CompileConfig`` (torch.compile, mode
    ``"reduce-overhead"``: CUDA graphs)."""
    from transformers import CompileConfig

    if hasattr(model, "get_compiled_call"):
        return model.get_compiled_call(CompileConfig())
    return torch.compile(model, **CompileConfig().to_dict())


def model_device(model) -> torch.device:
    """The device of ``model``: ``model.device`` (transformers models), else its first parameter's."""
    device = getattr(model, "device", None)  # transformers models have it
    if isinstance(device, torch.device):
        return device
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")
