"""Train the ``"smollm2-distilled"`` draft (:mod:`mspec_lab.distilled_draft`) by distillation.

``python -m mspec_lab train-draft`` runs, seeded, on the CPU:

1. **Data.** The local samples of the three datasets (``$MSPEC_DATA_DIR``): every example but the
   first :data:`HELD_OUT` of each file, whose prompts the benchmarks and the book evaluate on.
   Each text is the prompt, a space and the human reference; the texts are tokenized, joined
   by the end-of-text token and cut into chunks of :data:`CHUNK` tokens, at most
   ``tokens`` in all (all of Dolly, then XSum and WMT in equal parts).
2. **Frequent tokens.** The ``M`` most frequent tokens of the training texts (FR-Spec).
3. **Teacher.** One pass of the target over every chunk keeps, at every position, its
   :data:`TOP` most likely next tokens and their log-probabilities (temperature 1).
4. **Student.** The adapter and norm are trained with AdamW to minimise the cross-entropy
   ``-sum_j q_j log p_j`` over the teacher's top tokens that the draft can propose (forward
   KL to the teacher, restricted), ``epochs`` passes in a seeded order.
5. **Held out.** The acceptance of one draft, ``sum_x min(p(x), q(x))`` at temperature 1,
   averaged over every position of the held-out texts, per dataset.

The target is read, never changed; the weights land in ``--out`` with a provenance file.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

__all__ = ["CHUNK", "HELD_OUT", "TOP", "TrainSettings", "held_out_acceptance", "train_draft"]

#: the first examples of each dataset file, held out (the benchmarks' and the book's prompts)
HELD_OUT = 64
#: tokens per training chunk
CHUNK = 128
#: teacher tokens kept per position
TOP = 64


@dataclass
class TrainSettings:
    """What one training run does (stored in the provenance file)."""

    exit_layers: int = 3
    frequent_tokens: int = 8192
    tokens: int = 200_000
    epochs: int = 4
    batch: int = 8
    lr: float = 5e-4
    seed: int = 0
    threads: int = 2
    init: str = "last"  # the adapter starts as the target's last layer ("last") or the next one ("next")


def texts(split: str, data_dir) -> dict[str, list[str]]:
    """Prompt + " " + reference of every example of ``split`` ("train" or "held-out"), per dataset."""
    from mspec_lab.data import DATASETS, load_prompts

    out = {}
    for dataset in DATASETS:
        examples = load_prompts(dataset, data_dir=data_dir, source="local")
        chosen = examples[HELD_OUT:] if split == "train" else examples[:HELD_OUT]
        out[dataset] = [f"{e.prompt} {e.reference}" for e in chosen]
    return out


def chunks_of(tokenizer, by_dataset: dict[str, list[str]], budget: int | None) -> torch.Tensor:
    """``(n, CHUNK)`` token ids: each dataset's texts joined by eos, Dolly whole, the others sharing the rest."""
    streams = {d: [t for text in ts for t in tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]]
               for d, ts in by_dataset.items()}
    if budget is not None:
        rest = max(budget - len(streams.get("dolly", [])), 0)
        others = [d for d in streams if d != "dolly"]
        for d in others:
            streams[d] = streams[d][: rest // len(others)]
        streams["dolly"] = streams.get("dolly", [])[:budget]
    rows = []
    for stream in streams.values():
        rows += [stream[i : i + CHUNK] for i in range(0, len(stream) - CHUNK + 1, CHUNK)]
    return torch.tensor(rows)


def frequent_tokens(chunks: torch.Tensor, m: int, vocab: int) -> torch.Tensor:
    """The ``m`` most frequent ids of ``chunks`` (ties: the smaller id), sorted."""
    counts = torch.bincount(chunks.flatten(), minlength=vocab).double()
    order = torch.argsort(-counts + torch.arange(vocab) * 1e-9)  # stable: ties by id
    return torch.sort(order[:m]).values


def teacher_pass(target, chunks: torch.Tensor, batch: int, top: int = TOP) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's ``top`` most likely next tokens at every position: ids ``(n, T, top)`` (int32)
    and log-probabilities (float16)."""
    ids, logps = [], []
    with torch.inference_mode():
        for i in range(0, len(chunks), batch):
            logits = target(input_ids=chunks[i : i + batch]).logits.float()
            best = torch.log_softmax(logits, dim=-1).topk(top, dim=-1)
            ids.append(best.indices.to(torch.int32))
            logps.append(best.values.to(torch.float16))
    return torch.cat(ids), torch.cat(logps)


def distillation_loss(draft, chunk_ids: torch.Tensor, top_ids: torch.Tensor, top_logps: torch.Tensor,
                      position: torch.Tensor) -> torch.Tensor:
    """``-sum_j q_j log p_j`` over the teacher's top tokens the draft can propose, mean over positions.

    Args:
        position: ``(V,)`` each id's index among the draft's tokens, -1 for the others.
    """
    hidden = draft.model(input_ids=chunk_ids).last_hidden_state
    logp = torch.log_softmax(draft.lm_head.restricted(hidden), dim=-1)  # (B, T, M)
    where = position[top_ids.long()]  # (B, T, TOP)
    q = top_logps.float().exp() * (where >= 0)
    picked = logp.gather(-1, where.clamp(min=0))
    return -(q * picked).sum(-1).mean()


def train_adapter(draft, chunks, top_ids, top_logps, settings: TrainSettings, gen: torch.Generator,
                  log=print) -> list[float]:
    """AdamW on the draft's own parameters for ``settings.epochs`` passes; the mean loss of each pass."""
    from mspec_lab.distilled_draft import trained_parameters

    params = list(trained_parameters(draft).values())
    for p in params:
        p.requires_grad_(True)
    steps = settings.epochs * math.ceil(len(chunks) / settings.batch)
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=settings.lr, total_steps=steps, pct_start=0.05)
    vocab = draft.lm_head.vocab_size
    position = torch.full((vocab,), -1, dtype=torch.long)
    position[draft.lm_head.token_ids] = torch.arange(len(draft.lm_head.token_ids))
    draft.train()
    losses = []
    for epoch in range(settings.epochs):
        order, total = torch.randperm(len(chunks), generator=gen), 0.0
        for i in range(0, len(chunks), settings.batch):
            pick = order[i : i + settings.batch]
            loss = distillation_loss(draft, chunks[pick], top_ids[pick], top_logps[pick], position)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            total += loss.item() * len(pick)
        losses.append(total / len(chunks))
        log(f"epoch {epoch + 1}/{settings.epochs}: loss {losses[-1]:.4f}")
    draft.eval()
    for p in params:
        p.requires_grad_(False)
    return losses


def held_out_acceptance(draft, target, chunks: torch.Tensor, batch: int = 4) -> tuple[float, float, float]:
    """``(acceptance, standard error, coverage)`` over the positions of ``chunks``: the mean of
    ``sum_x min(p, q)`` at temperature 1 (one draft), its standard error over chunks, and the mean
    target mass on the draft's tokens (an upper bound of the acceptance)."""
    per_chunk, cover = [], []
    with torch.inference_mode():
        for i in range(0, len(chunks), batch):
            q = torch.softmax(target(input_ids=chunks[i : i + batch]).logits.double(), dim=-1)
            p = torch.softmax(draft(input_ids=chunks[i : i + batch]).logits.double(), dim=-1)
            per_chunk += torch.minimum(p, q).sum(-1).mean(-1).tolist()
            cover += q[..., draft.lm_head.token_ids].sum(-1).mean(-1).tolist()
    a = np.array(per_chunk)
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(len(a))), float(np.mean(cover))


def train_draft(target, tokenizer, settings: TrainSettings, data_dir, log=print):
    """Steps 1-5 of the module docstring. Returns ``(draft, report)``: the trained draft and a
    dict of what was done and measured (data, losses, held-out acceptance per dataset, seconds)."""
    from mspec_lab.distilled_draft import distilled_draft

    start = time.perf_counter()
    torch.set_num_threads(settings.threads)
    gen = torch.Generator().manual_seed(settings.seed)
    target.requires_grad_(False)
    chunks = chunks_of(tokenizer, texts("train", data_dir), settings.tokens)
    vocab = target.lm_head.weight.shape[0]
    token_ids = frequent_tokens(chunks, settings.frequent_tokens, vocab)
    log(f"{len(chunks)} chunks of {CHUNK} tokens; teacher pass ...")
    top_ids, top_logps = teacher_pass(target, chunks, settings.batch)
    teacher_seconds = time.perf_counter() - start
    log(f"teacher pass: {teacher_seconds:.0f} s")
    init_layer = target.config.num_hidden_layers - 1 if settings.init == "last" else settings.exit_layers
    state = {f"adapter.{k}": v.clone() for k, v in target.model.layers[init_layer].state_dict().items()}
    state.update({f"norm.{k}": v.clone() for k, v in target.model.norm.state_dict().items()})
    draft = distilled_draft(target, exit_layers=settings.exit_layers, token_ids=token_ids, adapter_state=state)
    losses = train_adapter(draft, chunks, top_ids, top_logps, settings, gen, log)
    train_seconds = time.perf_counter() - start - teacher_seconds
    held = {}
    for dataset, ts in texts("held-out", data_dir).items():
        held_chunks = chunks_of(tokenizer, {dataset: ts}, None)
        acc, se, cover = held_out_acceptance(draft, target, held_chunks)
        held[dataset] = {"acceptance": acc, "standard_error": se, "coverage": cover, "positions": held_chunks.numel()}
        log(f"held out {dataset}: acceptance {acc:.3f} ± {se:.3f} (coverage of the draft's tokens {cover:.3f})")
    report = {"settings": asdict(settings), "training_chunks": len(chunks), "training_tokens": chunks.numel(),
              "chunk": CHUNK, "teacher_top": TOP, "held_out_per_dataset": HELD_OUT, "losses": losses,
              "held_out": held, "seconds": {"teacher": teacher_seconds, "training": train_seconds,
                                             "total": time.perf_counter() - start}}
    return draft, report
