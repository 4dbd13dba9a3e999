"""Benchmarks and experiments: ``python -m mspec.bench <command>`` (``--help`` lists them).

Speed goals are checked here, as ratios against a baseline measured in the same run,
never by timed unit tests.
"""

import time

import numpy as np


def median_time(fn, *, repeats: int, warmup: int = 3) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def lm_like_pair(vocab_size: int, *, seed: int = 0, draft_temperature: float = 1.5):
    """A synthetic (draft, target) pair shaped like LM next-token distributions.

    Heavy-tailed logits (a scaled Gumbel-ish spread); the target is their softmax at
    temperature 1 and the draft the softmax of slightly perturbed logits at
    ``draft_temperature`` -- the mismatch the paper studies.
    """
    from ..distributions import distribution_from_logits

    rng = np.random.default_rng(seed)
    logits = 2.5 * rng.standard_normal(vocab_size)
    target = distribution_from_logits(logits)
    draft = distribution_from_logits(logits + 0.5 * rng.standard_normal(vocab_size), temperature=draft_temperature)
    return draft, target
