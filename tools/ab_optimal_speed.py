#!/usr/bin/env python
"""Time the optimal scheme's first step against an earlier commit, in one process.

A speed claim such as "no slower than commit X" needs both versions timed on the same
machine at the same time: separate runs of ``python -m mspec_lab optimal`` differ by more
than the effect on a busy machine. This script copies ``mspec/`` at ``REV`` into a temporary
folder as the package ``mspec_base``, then alternates between the two versions in chunks of
calls (the set-up of ``OptimalSelection`` at a fresh position plus its first sample, as the
bench's "1st step"), on the bench's synthetic LM-shaped pair at V = 50272, and prints
medians, means and their ratios (now / REV; below 1 is faster now).

    python tools/ab_optimal_speed.py a861a9a            # atoms auto and tokens, K = 2, 4, 8
    python tools/ab_optimal_speed.py a861a9a --calls 600 --atoms auto --drafts 2

Thread time (``time.thread_time``) is measured, so other processes matter less; the
ratios still move by a few percent between runs on a shared machine.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def base_package(rev: str, folder: Path):
    """Import ``mspec/`` as it is at ``rev`` under the name ``mspec_base`` (its absolute
    imports of ``mspec`` renamed to match)."""
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "mspec"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in files:
        target = folder / "mspec_base" / Path(name).relative_to("mspec")
        target.parent.mkdir(parents=True, exist_ok=True)
        source = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=ROOT, check=True,
                                capture_output=True).stdout
        if name.endswith(".py"):
            source = re.sub(rb"^(\s*)(from|import) mspec\b", rb"\1\2 mspec_base", source, flags=re.M)
        target.write_bytes(source)
    sys.path.insert(0, str(folder))
    return importlib.import_module("mspec_base")


def first_steps(package, draft, target, k: int, atoms: str, tuples):
    """A function running one first step (set-up + sample) at the next drafted tuple."""
    scheme = package.make_scheme
    cycle, rng = itertools.cycle(tuples), np.random.default_rng(1)
    return lambda: scheme("optimal", draft=draft, target=target, num_drafts=k, atoms=atoms).sample(next(cycle), rng)


def compare(steps: dict, calls: int, chunk: int = 5) -> dict:
    """Thread times (s) of each function, interleaved in chunks of ``chunk`` calls."""
    times = {name: [] for name in steps}
    for f in steps.values():  # warm-up
        for _ in range(3):
            f()
    for _ in range(calls // chunk):
        for name, f in steps.items():
            for _ in range(chunk):
                start = time.thread_time()
                f()
                times[name].append(time.thread_time() - start)
    return {name: np.array(t) for name, t in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the earlier commit (e.g. a861a9a)")
    parser.add_argument("--calls", type=int, default=300, help="calls per version and setting (default 300)")
    parser.add_argument("--atoms", nargs="+", default=["auto", "tokens"], choices=["auto", "tokens"])
    parser.add_argument("--drafts", type=int, nargs="+", default=[2, 4, 8], help="values of K")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    import mspec
    from mspec_lab.synthetic import OPT_VOCAB_SIZE, lm_like_pair

    with tempfile.TemporaryDirectory() as folder:
        base = base_package(args.rev, Path(folder))
        draft, target = lm_like_pair(OPT_VOCAB_SIZE, seed=0, draft_temperature=1.5)
        rng = np.random.default_rng(0)
        print(f"first step of 'optimal' at V = {OPT_VOCAB_SIZE}, ms; ratio = now / {args.rev}")
        print(f"{'K':>2} {'atoms':6} {'median ' + args.rev:>16} {'now':>7} {'ratio':>6}   "
              f"{'mean ' + args.rev:>14} {'now':>7} {'ratio':>6}")
        for k in args.drafts:
            tuples = rng.choice(OPT_VOCAB_SIZE, size=(64, k), p=draft)
            for atoms in args.atoms:
                t = compare({"base": first_steps(base, draft, target, k, atoms, tuples),
                             "now": first_steps(mspec, draft, target, k, atoms, tuples)}, args.calls)
                med = {n: 1e3 * float(np.median(v)) for n, v in t.items()}
                mean = {n: 1e3 * float(np.mean(v)) for n, v in t.items()}
                print(f"{k:>2} {atoms:6} {med['base']:>16.3f} {med['now']:>7.3f} {med['now'] / med['base']:>6.3f}   "
                      f"{mean['base']:>14.3f} {mean['now']:>7.3f} {mean['now'] / mean['base']:>6.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
