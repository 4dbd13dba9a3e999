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

from .distributions import distribution_from_logits
from .selection import sample_index
from .single import SingleDraft

__all__ = [
    "GenerationResult",
    "RoundRecord",
    "autoregressive_generate",
    "expected_round_tokens",
    "generate_with_baselines",
    "speculative_generate",
]


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
        """Mean seconds per round spent in draft / target / selection / cache handling."""
        n = max(len(self.rounds), 1)
        return {
            part: sum(getattr(r, f"{part}_time") for r in self.rounds) / n
            for part in ("draft", "target", "selection", "cache")
        }


class _CachedModel:
    """A causal LM with a KV cache of the token ids in ``self.tokens`` (shape ``(B, c)``).

    ``tokens`` mirrors what the cache holds, row by row, so tests can check the cached
    logits against a full recomputation.
    """

    def __init__(self, model):
        self.model = model
        self.device = _model_device(model)
        try:
            self.cache = DynamicCache(config=model.config)  # knows sliding-window layers
        except TypeError:  # transformers < 4.56 (untested here)
            self.cache = DynamicCache()
        # transformers 5 renamed the forward argument `past_key_values` to `cache`
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.logits_to_keep = "logits_to_keep" in params
        self.tokens = torch.zeros((1, 0), dtype=torch.long, device=self.device)

    @property
    def length(self) -> int:
        return self.tokens.shape[1]

    def forward(self, input_ids: torch.Tensor, last: int = 1) -> torch.Tensor:
        """Feed ``input_ids`` ``(B, T)`` after the cached tokens.

        Returns:
            float64 logits of the ``last`` positions, ``(B, last, V)``.
        """
        kwargs = {self.cache_arg: self.cache}
        if self.logits_to_keep:  # skip the LM head on positions nobody reads (e.g. the prompt)
            kwargs["logits_to_keep"] = last
        out = self.model(input_ids=input_ids, use_cache=True, **kwargs)
        self.tokens = torch.cat([self.tokens, input_ids], dim=1)
        return out.logits[:, -last:].double()

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
        scheme: token-level selection scheme, a key of :data:`mspec.registry.SCHEMES`.
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
        tokenizer: optional; decodes the output into ``GenerationResult.text``.
        on_round: optional ``on_round(drafted, draft_probs, target_probs)``, called after
            each round's target pass with the round's drafted ids ``(K, L)``, draft
            distributions ``(K, L, V)`` and target distributions ``(K, L + 1, V)`` (torch
            tensors; e.g. for :func:`expected_round_tokens`). It must not change them.

    Returns:
        :class:`GenerationResult` with the generated ids and per-round records.

    Raises:
        ValueError: bad K, L, prompt, temperature, vocabularies or scheme name.
    """
    from . import registry  # imported late: the registry imports every scheme

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
    params = dict(scheme_params or {})
    gen = _check_generator(generator, _model_device(draft_model))
    # the scheme's numpy Generator is seeded from `gen`, so one seed fixes the whole run
    rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=gen, device=gen.device)))
    sampling = dict(top_k=top_k, top_p=top_p)
    distribution_from_logits(torch.zeros(1), temperature=1.0, **sampling)  # validates top_k / top_p

    devices = _cuda_devices(draft_model, target_model)  # every clock reading waits for all of them
    start = _clock(devices)
    seq = list(prompt)  # prompt + emitted tokens
    draft, target = _CachedModel(draft_model), _CachedModel(target_model)
    select = _Selector(scheme, params, temps, rng)
    with torch.inference_mode():
        # prefill: the caches hold every token but the last; a round feeds the rest
        for m in (draft, target):
            if len(seq) > 1:
                m.forward(torch.tensor([seq[:-1]], device=m.device))
        prefill_time = _clock(devices) - start
        rounds: list[RoundRecord] = []
        while True:
            n = len(seq)
            t0 = _clock(devices)
            draft.expand(k)
            target.expand(k)
            t1 = _clock(devices)
            drafted, draft_probs = _draft(draft, seq, temps, big_l, sampling, gen)  # (K, L), (K, L, V)
            t2 = _clock(devices)
            target_probs = _score(target, seq, drafted, target_temperature, sampling)  # (K, L + 1, V)
            t3 = _clock(devices)
            if on_round is not None:
                on_round(drafted, draft_probs, target_probs)
                t3 = _clock(devices)  # the callback's time is nobody's
            out, accepted, alive, alive_counts = select(drafted, draft_probs, target_probs)
            t4 = _clock(devices)
            # keep a row holding the accepted tokens, cropped to prefix + accepted tokens
            row = alive[0]
            draft.keep(row, min(n + accepted, draft.length))  # after all-accept it lags by one
            target.keep(row, n + accepted)
            t5 = _clock(devices)

            # stop at EOS or max_new_tokens: truncating the final round keeps the law of the
            # emitted prefix (the tokens already emitted do not depend on what follows)
            emitted, done = [], False
            for y in out:
                emitted.append(y)
                if y in eos or n - len(prompt) + len(emitted) >= max_new:
                    done = True
                    break
            seq.extend(emitted)
            rounds.append(RoundRecord(
                alive_counts, accepted, row if accepted else None, accepted == big_l, len(emitted),
                draft_time=t2 - t1, target_time=t3 - t2, selection_time=t4 - t3,
                cache_time=(t1 - t0) + (t5 - t4),
            ))
            if done:
                break
    return _result(seq[len(prompt) :], rounds, scheme, k, big_l, start, prefill_time, tokenizer, devices)


def _draft(draft: _CachedModel, seq, temps, big_l, sampling, gen):
    """Draft L tokens in each of K rows (the cache is already expanded to K rows).

    Returns:
        ``(drafted, draft_probs)``: token ids ``(K, L)`` and the distributions they were
        sampled from, ``(K, L, V)`` (row ``i`` at temperature ``temps[i]``).
    """
    k = len(temps)
    temp_col = torch.tensor(temps, dtype=torch.float64, device=draft.device)[:, None]
    # the first step also feeds the tokens the cache lacks (one more after an all-accept round)
    inp = torch.tensor([seq[draft.length :]], device=draft.device).expand(k, -1)
    # shared[i, r]: rows i and r have drafted the same tokens so far at the same temperature.
    # Such rows have the same distribution in exact arithmetic, but a batched forward pass
    # may differ in the last bits between rows; the selection treats them as identical
    # drafts, so they must sample from one bit-identical row (the first of their group).
    shared = temp_col == temp_col.T  # (K, K)
    drafted, probs = [], []
    for j in range(big_l):
        logits = draft.forward(inp)[:, -1, :]  # (K, V)
        # per-row temperature: divide first, then the shared top-k / top-p
        p = distribution_from_logits(logits / temp_col, temperature=1.0, **sampling)
        p = p.index_select(0, shared.to(torch.int8).argmax(dim=1))  # argmax: the first True
        x = torch.multinomial(p.to(gen.device), 1, generator=gen).to(draft.device)  # (K, 1)
        shared &= x == x.T
        drafted.append(x)
        probs.append(p)
        if j + 1 < big_l:  # the last drafted token is never fed to the draft model
            inp = x
    return torch.cat(drafted, dim=1), torch.stack(probs, dim=1)


def _score(target: _CachedModel, seq, drafted, temperature, sampling):
    """One target forward pass over K rows x (L + 1) positions.

    Returns:
        ``(K, L + 1, V)``: the target distribution after the prefix and after each
        drafted prefix of each row.
    """
    k, big_l = drafted.shape
    prefix = torch.tensor([seq[target.length :]], device=target.device).expand(k, -1)
    logits = target.forward(torch.cat([prefix, drafted.to(target.device)], dim=1), last=big_l + 1)
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


def position_scheme(scheme: str, params: dict, draft_rows, target_rows, temps, alive: list[int]):
    """The selection scheme for one position of a round, given the drafts still alive.

    The one place that decides it: alive drafts share their prefix, so the target rows of
    the alive drafts agree and drafts of equal temperature have one (bit-identical, see
    ``_draft``) distribution -- passed as a ``(V,)`` row (identical drafts), else one row
    per alive draft. With one draft left every scheme of the registry is single-draft
    speculative sampling (the selected token is that draft, ``p_I = p``), so that is built
    directly (no K-draft construction such as the optimal scheme's sort).

    Args:
        scheme: a key of :data:`mspec.registry.SCHEMES`.
        params: the scheme's extra keyword arguments.
        draft_rows: ``(K, V)`` every draft's distribution at this position (numpy or torch).
        target_rows: ``(K, V)`` the target distribution after each draft's prefix.
        temps: the K draft temperatures.
        alive: indices of the drafts whose tokens all match the output so far.

    Returns:
        A built :class:`~mspec.selection.SelectionScheme`.
    """
    from . import registry  # imported late: the registry imports every scheme

    def row(x):
        return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)

    target = row(target_rows[alive[0]])
    if len(alive) == 1:
        return SingleDraft(draft=row(draft_rows[alive[0]]), target=target)
    same_temp = len({temps[i] for i in alive}) == 1
    draft = row(draft_rows[alive[0]]) if same_temp else row(draft_rows[alive])
    return registry.make_scheme(scheme, draft=draft, target=target, num_drafts=len(alive), **params)


def expected_round_tokens(drafted, draft_probs, target_probs, *, scheme: str, draft_temperatures,
                          scheme_params: dict | None = None, eos_token_id=None, control: bool = False):
    """Expected number of tokens one round emits, given its drafts, for ``scheme``.

    The round's selection randomness is averaged out exactly: at position ``j`` with alive
    drafts ``A`` the scheme outputs ``Y = y`` with probability ``P(y | A's tokens)``
    (:meth:`~mspec.selection.SelectionScheme.conditional`), and the drafts holding ``y``
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
    (:meth:`~mspec.selection.SelectionScheme.conditional`) and ``alpha`` its acceptance
    averaged over them (:meth:`~mspec.selection.SelectionScheme.acceptance`). Given all
    earlier positions, the alive drafts' tokens at ``j`` are fresh draws from the node's
    draft distribution, so ``E[a] = alpha`` there and ``E[Z_j] = 0``. Most of a round's
    randomness is whether its drafted tokens are accepted; subtracting ``b . Z`` (``b``
    fitted over many rounds) removes it from block-efficiency estimates
    (``python -m mspec.bench rounds``).

    Args:
        drafted: ``(K, L)`` drafted token ids.
        draft_probs: ``(K, L, V)`` draft distributions (row ``i`` at ``draft_temperatures[i]``).
        target_probs: ``(K, L + 1, V)`` target distributions after each drafted prefix.
        scheme: a key of :data:`mspec.registry.SCHEMES`.
        draft_temperatures: K temperatures (equal ones make the alive drafts identical).
        scheme_params: extra keyword arguments of the scheme.
        eos_token_id: end-of-sequence id(s), as for :func:`speculative_generate`.

    Returns:
        The expected number of emitted tokens, in ``[1, L + 1]``; with ``control=True`` the
        pair ``(expected, Z)``, ``Z`` of shape ``(L,)``.
    """

    def as_array(x):
        return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)

    drafted, draft_probs, target_probs = as_array(drafted), as_array(draft_probs), as_array(target_probs)
    if drafted.ndim != 2 or draft_probs.shape[:2] != drafted.shape or target_probs.shape[:2] != (
            drafted.shape[0], drafted.shape[1] + 1) or draft_probs.shape[2] != target_probs.shape[2]:
        raise ValueError(
            f"expected drafted (K, L), draft_probs (K, L, V) and target_probs (K, L + 1, V); got "
            f"{drafted.shape}, {draft_probs.shape} and {target_probs.shape}")
    k, big_l = drafted.shape
    temps = [float(t) for t in np.broadcast_to(np.asarray(draft_temperatures, dtype=float), (k,))]
    params = dict(scheme_params or {})
    eos = _check_eos(eos_token_id)

    z = np.zeros(big_l)

    def value(j: int, alive: list[int], reach: float) -> float:
        if j == big_l:
            return 1.0
        tokens = drafted[alive, j]
        rule = position_scheme(scheme, params, draft_probs[:, j], target_probs[:, j], temps, alive)
        dist, _ = rule.conditional(tokens)
        if control:
            z[j] += reach * (rule.accept_probability(tokens) - rule.acceptance())
        total = 1.0
        for y in np.unique(tokens):
            if int(y) not in eos:
                total += float(dist[y]) * value(j + 1, [i for i in alive if drafted[i, j] == y],
                                                reach * float(dist[y]))
        return total

    expected = value(0, list(range(k)), 1.0)
    return (expected, z) if control else expected


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
    target = _CachedModel(target_model)
    rounds = []
    with torch.inference_mode():
        if len(seq) > 1:  # prefill, as in speculative_generate: the cache lacks the last token
            target.forward(torch.tensor([seq[:-1]], device=target.device))
        prefill_time = _clock(devices) - start
        while True:
            t0 = _clock(devices)
            logits = target.forward(torch.tensor([seq[target.length :]], device=target.device))[:, -1, :]
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
