"""``python -m mspec``: the acceptance of every registered scheme on a few examples.

A quick look at what the package does, no models needed. Paper notation: the draft
distribution is p, the target q.
"""

import argparse

import numpy as np

from mspec.registry import SCHEMES, make_scheme

EXAMPLES = {
    "paper Fig. 2 (p uniform, q = [1/3, 0.5, 1/6])": ([1 / 3, 1 / 3, 1 / 3], [1 / 3, 0.5, 1 / 6]),
    "draft too flat (T = 2 vs 1)": (
        np.exp(np.array([2.0, 1.0, 0.5, 0.0, -1.0]) / 2.0),
        np.exp(np.array([2.0, 1.0, 0.5, 0.0, -1.0])),
    ),
    "disjoint-ish (p = [.7, .2, .1], q = [.1, .2, .7])": ([0.7, 0.2, 0.1], [0.1, 0.2, 0.7]),
}


HEADER = ("Acceptance of each scheme, computed exactly: P(output is one of the K drafts); for\n"
          "the IS schemes ('is', 'is-ratio') P(the selected draft is accepted), a lower bound\n"
          "on it. Every scheme is lossless (its output follows q exactly).")


def demo_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m mspec`` (no options but ``--help``; the book's command-line
    page is generated from it)."""
    return argparse.ArgumentParser(prog="python -m mspec", description="The acceptance of every registered scheme "
                                   "on a few small examples (no models needed). Paper notation: draft p, target q.")


def main(argv=None):
    demo_parser().parse_args(argv)
    print(HEADER)
    names = [n for n in SCHEMES if n != "single"]
    for title, (p, q) in EXAMPLES.items():
        p = np.asarray(p, dtype=float) / np.sum(p)
        q = np.asarray(q, dtype=float) / np.sum(q)
        print(f"\n{title}\n  p = {np.round(p, 3)}, q = {np.round(q, 3)}")
        print(f"  {'K':>2}  {'single':>8}" + "".join(f"  {n:>9}" for n in names))
        single = make_scheme("single", draft=p, target=q).acceptance()
        for k in (1, 2, 4):
            cells = []
            for name in names:
                try:
                    cells.append(f"{make_scheme(name, draft=p, target=q, num_drafts=k).acceptance():9.4f}")
                except ValueError:  # e.g. a scheme that needs more drafts
                    cells.append(f"{'-':>9}")
            print(f"  {k:>2}  {single:8.4f}" + "".join(f"  {c}" for c in cells))


if __name__ == "__main__":
    main()
