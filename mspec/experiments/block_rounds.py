"""Block verification against token-by-token verification, one draft, on the same rounds.

One reference generation per (prompt, seed) drafts one block of ``L`` tokens per round
(:func:`mspec.decoding.speculative_generate`, ``K = 1``). On every round both verifications
are scored exactly, with their randomness averaged out: token by token by
:func:`mspec.decoding.expected_round_tokens` (scheme ``"single"``), jointly by
:func:`mspec.block_verification.expected_block_tokens`; an end-of-sequence token ends a
round's count in both. The two are paired round by round, so their difference is measured
far more precisely than two sampled block efficiencies; standard errors are clustered by
generation.

In a notebook: ``block_vs_token(pair, BlockRoundsSettings(prompts=2))``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .inputs import DATASETS, derived_seed, load_dataset_prompts
from .paired_rounds import cluster_mean_se

__all__ = ["BlockRoundsSettings", "block_vs_token"]


@dataclass
class BlockRoundsSettings:
    """What :func:`block_vs_token` runs: ``prompts`` x ``seeds`` reference generations of
    ``max_new_tokens`` per dataset, blocks of ``draft_length`` at ``draft_temperature``."""

    datasets: tuple[str, ...] = DATASETS
    prompts: int = 4
    seeds: int = 1
    draft_length: int = 5
    draft_temperature: float = 1.5
    target_temperature: float = 1.0
    max_new_tokens: int = 48
    max_chars: int = 400
    data_source: str = "auto"
    seed: int = 0


def block_vs_token(pair, settings: BlockRoundsSettings | None = None) -> dict:
    """Expected tokens per round of both verifications on the same rounds, per dataset.

    Returns:
        ``{dataset: {"rounds": n, "token": (mean, se), "block": (mean, se),
        "difference": (mean, se)}}``, means over rounds, standard errors clustered by
        generation.
    """
    s = settings or BlockRoundsSettings()
    out = {}
    for dataset in s.datasets:
        token, block, groups = [], [], []
        prompts = load_dataset_prompts(pair, dataset, s.prompts, source=s.data_source, max_chars=s.max_chars)
        for g, (prompt, seed) in enumerate((p, i) for p in prompts for i in range(s.seeds)):
            scored = _scored_rounds(pair, prompt, derived_seed(s.seed, seed, prompt.tag), s)
            token += scored[0]
            block += scored[1]
            groups += [g] * len(scored[0])
        token, block, groups = np.array(token), np.array(block), np.array(groups)
        out[dataset] = {"rounds": int(token.size), "token": cluster_mean_se(token, groups),
                        "block": cluster_mean_se(block, groups),
                        "difference": cluster_mean_se(block - token, groups)}
    return out


def _scored_rounds(pair, prompt, seed: int, s: BlockRoundsSettings) -> tuple[list[float], list[float]]:
    """Run one reference generation; both verifications' expected tokens on each round."""
    import torch

    from ..block_verification import expected_block_tokens
    from ..decoding import expected_round_tokens, speculative_generate

    token, block = [], []
    eos = pair.eos_token_id

    def on_round(drafted, draft_probs, target_probs):
        token.append(expected_round_tokens(drafted[:1], draft_probs[:1], target_probs[:1], scheme="single",
                                           draft_temperatures=[s.draft_temperature], eos_token_id=eos))
        block.append(expected_block_tokens(drafted[0].cpu().numpy(), draft_probs[0].double().cpu().numpy(),
                                           target_probs[0].double().cpu().numpy(), eos_token_id=eos))

    speculative_generate(list(prompt.ids), draft_model=pair.draft_model, target_model=pair.target_model,
                         scheme="single", num_drafts=1, draft_length=s.draft_length,
                         draft_temperatures=s.draft_temperature, target_temperature=s.target_temperature,
                         max_new_tokens=s.max_new_tokens, eos_token_id=eos,
                         generator=torch.Generator().manual_seed(seed), on_round=on_round)
    return token, block
