"""The fast path's switches, in one place (:class:`FastPath`).

Every setting gives the same output law, exactly the target: the fast path only changes how
the key laws are built, and whatever it builds is certified before use, with the greedy
tiling (``greedy.py``) as its fallback. The defaults are what ``"optimal"`` uses; the tests
turn single parts off (or force rare branches) to check each of them against the reference
(``reference.py``) on the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from mspec.fast.optimal_selection.buckets import BUCKET_BITS, CERTIFICATE_MARGIN, SORT_BELOW, SPREAD_BITS
from mspec.fast.optimal_selection.pool import MAX_DEPTH


@dataclass(frozen=True)
class FastPath:
    """Options of the fast path of :class:`~mspec.fast.optimal_selection.OptimalSelection`.

    Attributes:
        spread: try fact 6 (an optimum of 1 without a sort) when the bucket sums allow it;
            ``False``: fact 5 only.
        spread_bits: the bucket widths (mantissa bits of ``q/p``) fact 6 tries, in order:
            coarse first (fewer units, cheaper), then the buckets of fact 5.
        expand_buckets: ``"failing"`` (default): fact 6 expands into token units only the
            buckets whose tokens do not fit their share; ``"all"``: at its first try, every
            bucket whose tokens' ratios differ (more units; reaches the expansion on small
            inputs).
        bucket_margin: relative margin of fact 5's bucket certificate. A margin of -1 passes
            every bucket, so nothing is split into tokens: still lossless (the keys tile),
            but no longer optimal next to ``x = q`` (a control for the certificate).
        sort_below: a split segment of at most this many tokens is sorted rather than
            bucketed again.
        max_depth: tiled groups of slots are realised by slots and a pool down to this
            depth, below it by the greedy tiling (0: the greedy inside every tiled group).
    """

    spread: bool = True
    spread_bits: tuple[int, ...] = (SPREAD_BITS, BUCKET_BITS)
    expand_buckets: str = "failing"
    bucket_margin: float = CERTIFICATE_MARGIN
    sort_below: int = SORT_BELOW
    max_depth: int = MAX_DEPTH

    def __post_init__(self):
        if self.expand_buckets not in ("failing", "all"):
            raise ValueError(f"FastPath.expand_buckets must be 'failing' or 'all', got {self.expand_buckets!r}")
        if not self.spread_bits or any(not 1 <= b <= BUCKET_BITS for b in self.spread_bits):
            raise ValueError(f"FastPath.spread_bits must be bucket widths of 1..{BUCKET_BITS} bits, got {self.spread_bits!r}")
        if self.sort_below < 0 or self.max_depth < 0:
            raise ValueError("FastPath.sort_below and FastPath.max_depth must be >= 0")


#: the fast path as ``"optimal"`` uses it
DEFAULT = FastPath()
