"""Synthetic draft/target pairs shaped like language-model next-token distributions.

Speed benchmarks (``mspec_lab.bench``), tests and notebooks need distributions at a real
vocabulary size without loading a model: :func:`lm_like_pair` draws them from random
logits, with numpy only. Paper notation: the draft is ``p``, the target ``q``.

>>> draft, target = lm_like_pair(1000, seed=0)
>>> draft.shape, round(float(target.sum()), 12)
((1000,), 1.0)
"""

from __future__ import annotations

import numpy as np

from mspec.distributions import distribution_from_logits

__all__ = ["DRAFT_LOGIT_NOISE", "LOGIT_SPREAD", "OPT_VOCAB_SIZE", "lm_like_pair"]

#: OPT's vocabulary size (the paper's models, ``facebook/opt-*``): the default V of the speed
#: benchmarks, the size at which a scheme's per-position cost matters
OPT_VOCAB_SIZE = 50272
#: standard deviation of the target's logits. At V = 50272 the most likely token then gets
#: about 10% of the mass and the 100 most likely about 40%: peaked, with a long tail, as a
#: language model's next-token distribution
LOGIT_SPREAD = 2.5
#: standard deviation of the draft's own error on each logit: the draft ranks the tokens a
#: little differently from the target, as a smaller model does
DRAFT_LOGIT_NOISE = 0.5


def lm_like_pair(vocab_size: int, *, seed: int = 0, draft_temperature: float = 1.5,
                 logit_spread: float = LOGIT_SPREAD, draft_noise: float = DRAFT_LOGIT_NOISE):
    """A synthetic ``(draft, target)`` pair shaped like LM next-token distributions.

    The target is the softmax of logits drawn i.i.d. from ``N(0, logit_spread^2)``; the
    draft is the softmax of the same logits plus ``N(0, draft_noise^2)`` noise, at
    ``draft_temperature``: a draft that is too flat (temperature > 1) and slightly wrong,
    the mismatch the paper studies.

    Args:
        vocab_size: V.
        seed: seed of ``numpy.random.default_rng``; the pair is a function of the arguments.
        draft_temperature: temperature of the draft's softmax (> 0).
        logit_spread: standard deviation of the logits (default :data:`LOGIT_SPREAD`).
        draft_noise: standard deviation of the draft's error per logit (default
            :data:`DRAFT_LOGIT_NOISE`); 0 makes the draft the target at another temperature
            (the same ranking, as the offline default pair's same-weights draft).

    Returns:
        ``(draft, target)``, float64 arrays of shape ``(V,)`` that sum to 1.
    """
    rng = np.random.default_rng(seed)
    logits = logit_spread * rng.standard_normal(vocab_size)
    target = distribution_from_logits(logits)
    draft_logits = logits + draft_noise * rng.standard_normal(vocab_size) if draft_noise else logits
    return distribution_from_logits(draft_logits, temperature=draft_temperature), target
