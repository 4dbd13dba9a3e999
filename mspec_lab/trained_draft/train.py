"""How the trained draft (:mod:`mspec_lab.trained_draft.model`, preset ``"smollm2-distilled"``)
is trained: by distillation on the target's own samples (on-policy, as DistillSpec recommends:
Zhou et al., 2024).

``python -m mspec_lab trained-draft-train`` runs, seeded, on the CPU:

1. **Prompts.** The benchmarks' prompt templates over the local samples of the three datasets
   (``$MSPEC_DATA_DIR``): every example but the first :data:`HELD_OUT` of each file, whose
   prompts the benchmarks and the book evaluate on; at most ``prompts`` per dataset.
2. **Samples.** The target continues every prompt with ``new_tokens`` tokens sampled at
   temperature 1 (batched, KV cache); at every sampled position it keeps its :data:`TOP` most
   likely tokens and their log-probabilities: the teacher's distribution ``q``, for free.
3. **Frequent tokens.** The ``M`` most frequent tokens of the training prompts and samples
   (FR-Spec: Zhao et al., 2025).
4. **Student.** The adapter and norm are trained with AdamW to minimise the cross-entropy
   ``-sum_j q_j log p_j`` over the teacher's top tokens that the draft can propose (forward KL
   to the teacher, restricted), at the sampled positions, with the last ``context`` prompt
   tokens before them as context; ``epochs`` passes in a seeded order.
5. **Held out.** On the target's samples for the held-out prompts: the acceptance of one draft,
   ``sum_x min(p(x), q(x))`` at temperature 1 (the probability that speculative sampling keeps
   the first drafted token), averaged over the sampled positions, per dataset.

The target is read, never changed; the weights land in ``--out`` with a provenance file.
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

__all__ = ["HELD_OUT", "HELD_OUT_SEED", "TOP", "Sample", "TrainSettings", "distillation_loss", "frequent_tokens",
           "held_out_acceptance", "prompt_ids", "sample_continuations", "train_adapter", "train_trained_draft",
           "training_examples"]

#: the first examples of each dataset file, held out (the benchmarks' and the book's prompts)
HELD_OUT = 64
#: teacher tokens kept per position
TOP = 64
#: the seed of the target's samples on the held-out prompts (the same for every training run)
HELD_OUT_SEED = 1


@dataclass
class TrainSettings:
    """What one training run does (stored in the provenance file)."""

    exit_layers: int = 2
    frequent_tokens: int = 8192
    prompts: int = 700  # training prompts per dataset, at most
    new_tokens: int = 64  # sampled tokens per prompt
    context: int = 64  # prompt tokens the student sees before the sampled ones
    epochs: int = 12
    batch: int = 16
    lr: float = 1e-3
    seed: int = 0
    threads: int = 2


@dataclass
class Sample:
    """One prompt and the target's sampled continuation, with the teacher's top tokens at each
    sampled position: ``top_ids`` ``(n, TOP)`` int32 and ``top_logps`` ``(n, TOP)`` float16."""

    prompt: list[int]
    tokens: list[int]
    top_ids: torch.Tensor
    top_logps: torch.Tensor


def prompt_ids(tokenizer, split: str, data_dir, limit: int | None = None) -> dict[str, list[list[int]]]:
    """The token ids of the prompts of ``split`` ("train" or "held-out"), per dataset."""
    from mspec_lab.data import DATASETS, load_prompts

    out = {}
    for dataset in DATASETS:
        examples = load_prompts(dataset, data_dir=data_dir, source="local")
        chosen = examples[HELD_OUT:][:limit] if split == "train" else examples[:HELD_OUT]
        out[dataset] = [tokenizer(e.prompt)["input_ids"] for e in chosen]
    return out


def sample_continuations(target, prompts: list[list[int]], *, new_tokens: int, batch: int,
                         gen: torch.Generator, eos_token_id: int, top: int = TOP) -> list[Sample]:
    """The target's continuations of ``prompts`` at temperature 1, up to and including eos,
    batched by length with left padding; the samples come back in the prompts' order."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[Sample | None] = [None] * len(prompts)
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            rows = order[start : start + batch]
            for i, sample in zip(rows, _sample_batch(target, [prompts[i] for i in rows], new_tokens, gen,
                                                     eos_token_id, top)):
                out[i] = sample
    return out


def _sample_batch(target, prompts, new_tokens, gen, eos_token_id, top) -> list[Sample]:
    width = max(map(len, prompts))
    ids = torch.tensor([[eos_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    position = (mask.cumsum(-1) - 1).clamp(min=0)
    # transformers 5 renamed the forward argument and output `past_key_values` to `cache`
    cache_arg = "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"
    out = target(input_ids=ids, attention_mask=mask, position_ids=position, use_cache=True, logits_to_keep=1)
    tokens, tops, logps = [], [], []
    done = torch.zeros(len(prompts), dtype=torch.bool)
    for _ in range(new_tokens):
        logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        best = logp.topk(top, dim=-1)
        token = torch.multinomial(logp.exp(), 1, generator=gen)
        tokens.append(token[:, 0]), tops.append(best.indices.to(torch.int32)), logps.append(best.values.half())
        done |= token[:, 0] == eos_token_id
        if done.all():
            break
        mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=-1)
        position = position[:, -1:] + 1
        cache = out.cache if cache_arg == "cache" else out.past_key_values
        out = target(input_ids=token, attention_mask=mask, position_ids=position, use_cache=True,
                     **{cache_arg: cache})
    tokens, tops, logps = torch.stack(tokens, 1), torch.stack(tops, 1), torch.stack(logps, 1)
    samples = []
    for r, prompt in enumerate(prompts):
        ends = (tokens[r] == eos_token_id).nonzero()
        n = int(ends[0]) + 1 if len(ends) else tokens.shape[1]
        samples.append(Sample(prompt, tokens[r, :n].tolist(), tops[r, :n].clone(), logps[r, :n].clone()))
    return samples


def frequent_tokens(sequences: list[list[int]], m: int, vocab: int) -> torch.Tensor:
    """The ``m`` most frequent ids of ``sequences`` (ties: the smaller id), sorted."""
    counts = torch.bincount(torch.tensor([t for s in sequences for t in s]), minlength=vocab).double()
    order = torch.argsort(-counts + torch.arange(vocab) * 1e-9)  # stable: ties by id
    return torch.sort(order[:m]).values


def training_examples(samples: list[Sample], context: int, pad_id: int):
    """Right-padded student inputs: ``(ids (N, T), top_ids (N, T, TOP), top_logps (N, T, TOP), mask (N, T))``
    where the logits at ``[n, t]`` predict a sampled token when ``mask[n, t]``: the last
    ``context`` prompt tokens, then the sample but its last token."""
    width = max(min(len(s.prompt), context) + len(s.tokens) - 1 for s in samples)
    top = samples[0].top_ids.shape[-1]
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    top_ids = torch.zeros((len(samples), width, top), dtype=torch.int32)
    top_logps = torch.full((len(samples), width, top), float("-inf"), dtype=torch.float16)
    mask = torch.zeros((len(samples), width), dtype=torch.bool)
    for n, s in enumerate(samples):
        seq = s.prompt[-context:] + s.tokens[:-1]
        first = len(seq) - len(s.tokens)  # the position whose logits predict tokens[0]
        ids[n, : len(seq)] = torch.tensor(seq)
        top_ids[n, first : len(seq)], top_logps[n, first : len(seq)] = s.top_ids, s.top_logps
        mask[n, first : len(seq)] = True
    return ids, top_ids, top_logps, mask


def distillation_loss(draft, ids, top_ids, top_logps, mask, position: torch.Tensor) -> torch.Tensor:
    """``-sum_j q_j log p_j`` over the teacher's top tokens the draft can propose, mean over the
    masked positions (the tail beyond the top tokens is left out: adding the sampled token as
    an unbiased estimate of it lowered the held-out acceptance).

    Args:
        position: ``(V,)`` each id's index among the draft's tokens, -1 for the others.
    """
    hidden = draft.model(input_ids=ids).last_hidden_state[mask]  # (n, d)
    logp = torch.log_softmax(draft.lm_head.restricted(hidden), dim=-1)  # (n, M)
    where = position[top_ids[mask].long()]  # (n, TOP)
    q = top_logps[mask].float().exp() * (where >= 0)
    return -(q * logp.gather(-1, where.clamp(min=0))).sum(-1).mean()


def train_adapter(draft, examples, settings: TrainSettings, gen: torch.Generator, log=print) -> list[float]:
    """AdamW on the draft's own parameters for ``settings.epochs`` passes over ``examples``
    (:func:`training_examples`); the mean loss of each pass."""
    from mspec_lab.trained_draft.model import trained_parameters

    ids, top_ids, top_logps, mask = examples
    params = list(trained_parameters(draft).values())
    for p in params:
        p.requires_grad_(True)
    steps = settings.epochs * math.ceil(len(ids) / settings.batch)
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=settings.lr, total_steps=steps, pct_start=0.05)
    position = torch.full((draft.lm_head.vocab_size,), -1, dtype=torch.long)
    position[draft.lm_head.token_ids] = torch.arange(len(draft.lm_head.token_ids))
    draft.train()
    losses = []
    for epoch in range(settings.epochs):
        order, total = torch.randperm(len(ids), generator=gen), 0.0
        for i in range(0, len(ids), settings.batch):
            pick = order[i : i + settings.batch]
            width = int(mask[pick].nonzero()[:, 1].max()) + 1  # drop the batch's trailing padding
            loss = distillation_loss(draft, *(t[pick, :width] for t in examples), position)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            total += loss.item() * len(pick)
        losses.append(total / len(ids))
        log(f"epoch {epoch + 1}/{settings.epochs}: loss {losses[-1]:.4f}")
    draft.eval()
    for p in params:
        p.requires_grad_(False)
    return losses


def held_out_acceptance(draft, target, samples: list[Sample]) -> tuple[float, float, float]:
    """``(acceptance, standard error, coverage)`` over the sampled positions of ``samples``: the
    mean of ``sum_x min(p, q)`` at temperature 1 (one draft, the whole prompt as context), its
    standard error over samples, and the mean target mass on the draft's tokens (an upper bound
    of the acceptance)."""
    per_sample, cover = [], []
    with torch.inference_mode():
        for s in samples:
            ids = torch.tensor([s.prompt + s.tokens[:-1]])
            at = slice(len(s.prompt) - 1, ids.shape[1])
            q = torch.softmax(target(input_ids=ids).logits[0, at].double(), dim=-1)
            p = torch.softmax(draft(input_ids=ids).logits[0, at].double(), dim=-1)
            per_sample.append(torch.minimum(p, q).sum(-1).mean().item())
            cover.append(q[:, draft.lm_head.token_ids].sum(-1).mean().item())
    a = np.array(per_sample)
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(len(a))), float(np.mean(cover))


def data_note() -> str:
    """What the draft is trained and evaluated on, in words (for the provenance file)."""
    from mspec_lab.data import DATASETS

    return (f"prompts of the local samples of {', '.join(DATASETS)} ($MSPEC_DATA_DIR: dolly.jsonl, xsum.jsonl, "
            f"wmt18-de-en.de/.en) in the benchmarks' templates; the first {HELD_OUT} examples of each file held "
            "out for evaluation, training on the next `prompts` per dataset; continuations sampled from the "
            "target at temperature 1")


def train_trained_draft(target, tokenizer, settings: TrainSettings, data_dir, log=print):
    """Steps 1-5 of the module docstring. Returns ``(draft, report)``: the trained draft and a
    dict of what was done and measured (data, losses, held-out acceptance per dataset, seconds)."""
    from mspec_lab.trained_draft.model import trained_draft_model

    start = time.perf_counter()
    torch.set_num_threads(settings.threads)
    gen = torch.Generator().manual_seed(settings.seed)
    target.requires_grad_(False)
    eos = tokenizer.eos_token_id
    prompts = [p for ps in prompt_ids(tokenizer, "train", data_dir, settings.prompts).values() for p in ps]
    log(f"{len(prompts)} training prompts; sampling {settings.new_tokens} tokens each ...")
    samples = sample_continuations(target, prompts, new_tokens=settings.new_tokens, batch=settings.batch,
                                   gen=gen, eos_token_id=eos)
    sample_seconds = time.perf_counter() - start
    log(f"{sum(len(s.tokens) for s in samples)} sampled tokens in {sample_seconds:.0f} s")
    vocab = target.lm_head.weight.shape[0]
    token_ids = frequent_tokens([s.prompt + s.tokens for s in samples], settings.frequent_tokens, vocab)
    last = target.config.num_hidden_layers - 1  # the adapter starts as the target's last layer
    state = {f"adapter.{k}": v.clone() for k, v in target.model.layers[last].state_dict().items()}
    state.update({f"norm.{k}": v.clone() for k, v in target.model.norm.state_dict().items()})
    draft = trained_draft_model(target, exit_layers=settings.exit_layers, token_ids=token_ids, adapter_state=state)
    losses = train_adapter(draft, training_examples(samples, settings.context, eos), settings, gen, log)
    train_seconds = time.perf_counter() - start - sample_seconds
    held, held_gen = {}, torch.Generator().manual_seed(HELD_OUT_SEED)
    for dataset, ps in prompt_ids(tokenizer, "held-out", data_dir).items():
        held_samples = sample_continuations(target, ps, new_tokens=settings.new_tokens, batch=settings.batch,
                                            gen=held_gen, eos_token_id=eos)
        acc, se, cover = held_out_acceptance(draft, target, held_samples)
        held[dataset] = {"acceptance": acc, "standard_error": se, "coverage": cover,
                         "positions": sum(len(s.tokens) for s in held_samples)}
        log(f"held out {dataset}: acceptance {acc:.3f} ± {se:.3f} (target mass on the draft's tokens {cover:.3f})")
    report = {"settings": asdict(settings), "data": data_note(), "training_prompts": len(prompts),
              "training_tokens": sum(len(s.tokens) for s in samples), "teacher_top": TOP,
              "held_out_per_dataset": HELD_OUT, "losses": losses, "held_out": held,
              "seconds": {"sampling": sample_seconds, "training": train_seconds,
                          "total": time.perf_counter() - start}}
    return draft, report
