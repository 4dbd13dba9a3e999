"""Token-level speed of the baseline schemes at OPT's vocabulary, as ratios to single-draft.

For each scheme and K it times, with the set-up (validation, SpecTr's rho search, ...)
included: one selection step (build the scheme for a position, then ``sample`` the
drafted tokens) and one exact-acceptance computation, on a synthetic LM-shaped pair
(:func:`mspec_lab.synthetic.lm_like_pair`). Both are printed as ratios to one single-draft step
measured in the same run, the functions interleaved (:mod:`mspec_lab.bench.timing`). Goal:
every baseline step within :data:`STEP_RATIO_GOAL` times a single-draft step (they are
all O(K V)). Command: ``python -m mspec_lab token-level``.
"""

from __future__ import annotations

import numpy as np

from mspec.registry import make_scheme
from mspec_lab.synthetic import OPT_VOCAB_SIZE, lm_like_pair
from mspec_lab.bench.timing import DRAFTED_TUPLES, cycling, median_times

__all__ = ["STEP_RATIO_GOAL", "time_baselines"]

#: goal: a baseline's selection step costs at most this many single-draft steps
STEP_RATIO_GOAL = 3.0


def step_timer(name: str, draft, target, k: int, rng):
    """A function that performs one selection step of scheme ``name`` on freshly drafted tokens."""
    drafts = rng.choice(draft.size, size=(DRAFTED_TUPLES, k), p=draft)
    return cycling(lambda tokens: make_scheme(name, draft=draft, target=target, num_drafts=k).sample(tokens, rng),
                   drafts)


def time_baselines(*, vocab_size: int = OPT_VOCAB_SIZE, drafts=(2, 4, 8), schemes=("specinfer", "spectr"),
                   repeats: int = 200, seed: int = 0) -> dict:
    """Time and print one step and one exact acceptance of each scheme and K.

    Args:
        vocab_size: V (default OPT's).
        drafts: values of K.
        schemes: multi-draft registry names to time.
        repeats: timed calls per figure (the median is printed).
        seed: seed of the synthetic pair and of the drafted tokens.

    Returns:
        ``{"step": {(scheme, K): s}, "acceptance": {(scheme, K): s}, "worst_ratio": float}``,
        median seconds; single-draft is ``("single", 1)``.
    """
    rng = np.random.default_rng(seed)
    draft, target = lm_like_pair(vocab_size, seed=seed)
    steps = {("single", 1): step_timer("single", draft, target, 1, rng)}
    accs = {("single", 1): lambda: make_scheme("single", draft=draft, target=target).acceptance()}
    for name in schemes:
        for k in drafts:
            steps[(name, k)] = step_timer(name, draft, target, k, rng)
            accs[(name, k)] = (lambda name=name, k=k:
                               make_scheme(name, draft=draft, target=target, num_drafts=k).acceptance())
    result = {"step": median_times(steps, repeats=repeats), "acceptance": median_times(accs, repeats=repeats)}
    result["worst_ratio"] = _print_table(result, draft, target, repeats)
    return result


def _print_table(result: dict, draft, target, repeats: int) -> float:
    """Print the ratios to single-draft; return the worst step ratio."""
    step, acc = result["step"], result["acceptance"]
    single_step, single_acc = step[("single", 1)], acc[("single", 1)]
    print(f"V = {draft.size}; synthetic LM-like draft/target (draft at temperature 1.5); "
          f"median of {repeats} calls each, interleaved")
    print(f"single-draft: step {single_step * 1e6:8.1f} us, exact acceptance {single_acc * 1e6:8.1f} us "
          f"(acceptance {make_scheme('single', draft=draft, target=target).acceptance():.4f})")
    print(f"{'scheme':<10} {'K':>2} {'step us':>9} {'step/single':>12} {'accept us':>10} {'acc/single':>11} "
          f"{'acceptance':>10}  goal (step <= {STEP_RATIO_GOAL:g}x)")
    worst = 0.0
    for (name, k), seconds in step.items():
        if name == "single":
            continue
        ratio = seconds / single_step
        worst = max(worst, ratio)
        value = make_scheme(name, draft=draft, target=target, num_drafts=k).acceptance()
        print(f"{name:<10} {k:>2} {seconds * 1e6:9.1f} {ratio:12.2f} {acc[(name, k)] * 1e6:10.1f} "
              f"{acc[(name, k)] / single_step:11.2f} {value:10.4f}  {'ok' if ratio <= STEP_RATIO_GOAL else 'MISSED'}")
    print(f"worst step ratio: {worst:.2f}x single-draft (goal <= {STEP_RATIO_GOAL:g}x)")
    return worst
