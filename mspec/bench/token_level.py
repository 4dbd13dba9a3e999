"""Token-level speed of the baseline schemes at OPT's vocabulary, as ratios to single-draft.

For each scheme and K it times, with the set-up (validation, SpecTr's rho search, ...)
included: one selection step (build the scheme for a position, then ``sample`` the
drafted tokens) and one exact-acceptance computation. Both are printed as ratios to one
single-draft step measured in the same run. Goal: every baseline step within 3x of a
single-draft step (they are all O(K V)).
"""

import time

import numpy as np

from ..registry import make_scheme
from . import lm_like_pair

OPT_VOCAB = 50272


def add_arguments(parser):
    parser.add_argument("--vocab", type=int, default=OPT_VOCAB, help="vocabulary size V (default: OPT's 50272)")
    parser.add_argument("--drafts", type=int, nargs="+", default=[2, 4, 8], help="values of K")
    parser.add_argument("--schemes", nargs="+", default=["specinfer", "spectr"], help="multi-draft schemes to time")
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per figure (median is printed)")
    parser.add_argument("--seed", type=int, default=0)


def step_timer(name, draft, target, k, rng, *, params=None):
    """A function that performs one selection step on freshly drafted tokens."""
    drafts = rng.choice(draft.size, size=(256, k), p=draft)
    counter = iter(range(10**9))

    def step():
        tokens = drafts[next(counter) % len(drafts)]
        return make_scheme(name, draft=draft, target=target, num_drafts=k, **(params or {})).sample(tokens, rng)

    return step


def interleaved_times(functions: dict, *, repeats: int, chunk: int = 10) -> dict:
    """Seconds of each call of each function (``repeats`` calls each), timed in
    interleaved chunks.

    Alternating short chunks of calls spreads any drift of the machine's speed (other
    processes, frequency scaling) evenly over all functions, so their ratios are fair.
    """
    times = {name: [] for name in functions}
    for fn in functions.values():  # warm-up
        fn()
    for _ in range(max(1, repeats // chunk)):
        for name, fn in functions.items():
            for _ in range(chunk):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return times


def interleaved_medians(functions: dict, *, repeats: int, chunk: int = 10) -> dict:
    """Median seconds per call of each function, timed in interleaved chunks
    (:func:`interleaved_times`)."""
    times = interleaved_times(functions, repeats=repeats, chunk=chunk)
    return {name: float(np.median(t)) for name, t in times.items()}


def run(args):
    rng = np.random.default_rng(args.seed)
    draft, target = lm_like_pair(args.vocab, seed=args.seed)
    steps = {("single", 1): step_timer("single", draft, target, 1, rng)}
    accs = {("single", 1): lambda: make_scheme("single", draft=draft, target=target).acceptance()}
    for name in args.schemes:
        for k in args.drafts:
            steps[(name, k)] = step_timer(name, draft, target, k, rng)
            accs[(name, k)] = (lambda name=name, k=k:
                               make_scheme(name, draft=draft, target=target, num_drafts=k).acceptance())
    step = interleaved_medians(steps, repeats=args.repeats)
    acc = interleaved_medians(accs, repeats=args.repeats)
    single_step, single_acc = step[("single", 1)], acc[("single", 1)]
    print(f"V = {args.vocab}; synthetic LM-like draft/target (draft at temperature 1.5); "
          f"median of {args.repeats} calls each, interleaved")
    print(f"single-draft: step {single_step * 1e6:8.1f} us, exact acceptance {single_acc * 1e6:8.1f} us "
          f"(acceptance {make_scheme('single', draft=draft, target=target).acceptance():.4f})")
    print(f"{'scheme':<10} {'K':>2} {'step us':>9} {'step/single':>12} {'accept us':>10} {'acc/single':>11} "
          f"{'acceptance':>10}  goal (step <= 3x)")
    worst = 0.0
    for name in args.schemes:
        for k in args.drafts:
            ratio = step[(name, k)] / single_step
            worst = max(worst, ratio)
            value = make_scheme(name, draft=draft, target=target, num_drafts=k).acceptance()
            print(f"{name:<10} {k:>2} {step[(name, k)] * 1e6:9.1f} {ratio:12.2f} {acc[(name, k)] * 1e6:10.1f} "
                  f"{acc[(name, k)] / single_step:11.2f} {value:10.4f}  {'ok' if ratio <= 3 else 'MISSED'}")
    print(f"worst step ratio: {worst:.2f}x single-draft (goal <= 3x)")
    return 0
