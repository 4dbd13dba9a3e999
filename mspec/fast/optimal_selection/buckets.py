"""Fast path, fact 5 of :mod:`mspec.fast.optimal_selection`: ratio buckets as atoms (no sort).

Notation (paper): K i.i.d. drafts from ``p`` (``draft``), target ``q`` (``target``),
``g(m) = 1 - (1 - m)^K`` and ``f(A) = g(p(A))`` = P(some draft lies in A).

**5. No sort: ratio buckets as atoms (the default from V = 4096 on, ``atoms="buckets"``).**
Facts 1-4 work for any *atoms* (sets of tokens that share one key law, scaled by ``p_t``,
so ``x_t = p_t x_a / P_a``). Bucket the tokens by the exponent and first 6 mantissa bits of
``q/p`` (one pass, no sort; ratios in a bucket lie in ``[r_lo, r_hi)``, within a factor
``1 + 2^-6``), and solve the bucket problem (each bucket one atom, target stand-in
``P_b`` times its middle ratio). Any such rule is lossless (keys stay uniform). It is
*optimal* when a certificate holds: buckets with level ``x_a / P_a <= r_lo`` (``x <= q`` on
all their tokens) come first and end at a piece boundary (tight), and all later buckets
have level ``>= r_hi`` (``x >= q``): then ``sum min(q, x) = f(T) + q(rest) >= P*``. The
pieces from the first bucket that is not "under" to the last that is not "over" are split
into tokens, sorted, and solved exactly as one segment of key space (tight at both ends),
which makes the certificate hold by construction. A large segment is bucketed again with
6 more bits per level (the same argument inside the segment) while that certifies some of
it; the rest is sorted. An optimum of 1 (``x = q`` on one huge piece) would end in a full sort; fact 6 avoids it.
The ``x`` is a different optimal one from fact 1's; ``atoms="tokens"`` gives that one.
"""

from __future__ import annotations

import numpy as np

from mspec.fast.optimal_selection.induced import argsort_positive, lex_pieces

#: mantissa bits of q/p that name a bucket: ratios in one bucket differ by a factor < 1 + 2^-6
BUCKET_BITS = 6


#: fact 6 tries coarser buckets first (fewer units: cheaper; 6 bits if they fail)
SPREAD_BITS = 4


#: relative margin of the bucket certificate (float rounding of q/p and of x never flips it)
CERTIFICATE_MARGIN = 1e-12


#: a split segment of at most this many tokens is sorted rather than bucketed again
SORT_BELOW = 2048


#: finest buckets of a split segment (6 more mantissa bits per level)
MAX_BUCKET_BITS = 30


_FLOAT_MAX = float(np.finfo(float).max)  # (looked up once: np.finfo costs microseconds a call)


def bucket_sums(targets, masses, bits, most=None, positive=False):
    """Bucket tokens by ``bits`` mantissa bits of ``q/p`` (one pass, no sort). Without
    ``most`` the count spans up to ``2^(11 + bits)`` keys (pass ``most`` for many bits).

    Returns:
        ``None`` if ``q/p`` overflowed (or the buckets would span ``most`` keys or more, or,
        with ``positive``, some ratio is 0, subnormal, infinite or NaN), else ``(desc,
        occupied, bucket_mass, r_lo, r_hi, n_keys, top_key)``: each token's bucket (0 holds
        the largest ratios), the buckets that hold tokens, their draft masses and ratio
        ranges ``[r_lo, r_hi)``, the number of bucket keys and the largest key.
    """
    shift = np.uint64(52 - bits)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # (p = 0 or overflow: seen below)
        ratio = np.divide(targets, masses)
    key = np.right_shift(ratio.view(np.uint64), shift, out=ratio.view(np.uint64)).view(np.int64)  # rises with q/p
    hi = int(key.max())
    if hi >= int(np.float64(np.inf).view(np.uint64) >> shift):
        return None
    if most is not None and hi - int(key.min()) >= most:  # (checked before counting)
        return None
    desc = np.subtract(hi, key, out=key)  # bucket 0 holds the largest ratios
    mass_b = np.bincount(desc, weights=masses)  # one per key from the smallest: hi - lo + 1
    nb = mass_b.size
    if positive and hi - (nb - 1) < 1 << bits:  # lo has exponent bits 0: a ratio of 0 (or subnormal)
        return None
    occupied = np.flatnonzero(mass_b)  # p > 0 on every counted token
    edge = (hi - occupied).astype(np.uint64)
    r_lo, r_hi = (edge << shift).view(np.float64), ((edge + np.uint64(1)) << shift).view(np.float64)
    return desc, occupied, mass_b[occupied], r_lo, r_hi, nb, hi


def coarser_sums(sums, bits: int, coarse_bits: int):
    """:func:`bucket_sums` with ``coarse_bits`` instead of ``bits``, from the finer sums
    (one pass over the vocabulary for the tokens' buckets; the rest over the buckets)."""
    desc, occupied, bucket_mass, _, _, _, hi = sums
    drop = bits - coarse_bits
    top = hi >> drop
    # (in place: a fresh V-long temporary can cost more in page faults than the arithmetic)
    coarse_desc = np.subtract(hi, desc)
    np.right_shift(coarse_desc, drop, out=coarse_desc)  # the coarse key ...
    np.subtract(top, coarse_desc, out=coarse_desc)  # ... counted from the top
    of_bucket = top - ((hi - occupied) >> drop)  # non-decreasing along the occupied buckets
    starts = np.flatnonzero(np.concatenate(([True], of_bucket[1:] != of_bucket[:-1])))  # (np.diff is slower)
    coarse_occupied = of_bucket[starts]
    edge = (top - coarse_occupied).astype(np.uint64)
    shift = np.uint64(52 - coarse_bits)
    r_lo, r_hi = (edge << shift).view(np.float64), ((edge + np.uint64(1)) << shift).view(np.float64)
    return (coarse_desc, coarse_occupied, np.add.reduceat(bucket_mass, starts), r_lo, r_hi,
            int(coarse_occupied[-1]) + 1, top)


def may_be_one(bucket_mass, r_lo, k) -> bool:
    """False when the buckets alone show that the optimum is below 1: ``x = q`` needs
    ``q(C) <= f(C)`` for every prefix ``C`` in ``q/p`` order, and ``q`` of a bucket prefix
    is at least ``sum r_lo P``. (True says nothing: fact 6 checks it exactly.)"""
    top = np.minimum(np.cumsum(bucket_mass), 1.0)
    least = np.cumsum(r_lo * bucket_mass)
    return not (least > (1.0 - (1.0 - top) ** k) * (1.0 + 1e-9)).any()


def bucket_level(targets, masses, k, start, bits, most=None, sums=None, margin=CERTIFICATE_MARGIN):
    """One level of fact 5: bucket tokens by ``bits`` mantissa bits of ``q/p``, solve the
    bucket problem on keys from ``start``, and find the buckets the certificate cannot pass.

    Args:
        targets: ``(n,)`` target masses of the tokens (positive).
        masses: ``(n,)`` their draft masses (positive).
        k: K.
        start: draft mass before these tokens (they are tight at both ends).
        bits: mantissa bits of ``q/p`` that name a bucket.
        most: give up (``None``) if the buckets would span more than this many keys.
        margin: relative margin of the certificate (negative: no bucket is certified).

    Returns:
        ``None`` if ``q/p`` overflowed (or ``most`` was exceeded), else ``(masses, x, blocks, top, desc,
        atom_of_bucket, uncertified, (r_lo, r_hi))``: the bucket atoms (largest ratios
        first), each token's bucket ``desc``, the atom of each bucket, ``None`` or ``(j0,
        j1, a0, a1, inside, b0, b1)``: the pieces ``j0..j1`` (atoms ``a0..a1-1``, buckets
        ``b0..b1``) to split, with the tokens ``inside`` them, and each atom's ratio range.
    """
    sums = sums if sums is not None else bucket_sums(targets, masses, bits, most)
    if sums is None:
        return None
    desc, occupied, bucket_mass, r_lo, r_hi, nb = sums[:6]
    # the bucket problem: every ratio rounded to its bucket's middle (any positive
    # stand-in for q keeps x feasible; the certificate below uses the true ratios)
    # (r_lo + r_hi overflows for ratios near the float maximum, e.g. a subnormal p: halves first)
    middle = 0.5 * r_lo + 0.5 * np.minimum(r_hi, _FLOAT_MAX)
    x, blocks, top = lex_pieces(bucket_mass.copy(), bucket_mass * middle, k, start)
    # certificate: token t of bucket a has x_t / q_t = level_a / r_t, r_t in [r_lo, r_hi)
    level = x / bucket_mass
    under = level <= r_lo * (1.0 - margin)  # x_t <= q_t for every token
    over = level >= r_hi * (1.0 + margin)  # x_t >= q_t for every token
    not_under, not_over = np.flatnonzero(~under), np.flatnonzero(~over)
    atom_of_bucket = np.full(nb, -1, dtype=np.int64)
    atom_of_bucket[occupied] = np.arange(occupied.size)
    uncertified = None
    if not_under.size and not_over.size and not_under[0] <= not_over[-1]:
        # the pieces from the first bucket that may be under-served to the last that may
        # be over-served: split into tokens, solved as one segment (tight at both ends)
        j0 = int(np.searchsorted(blocks, not_under[0], side="right")) - 1
        j1 = int(np.searchsorted(blocks, not_over[-1], side="right")) - 1
        a0, a1 = int(blocks[j0]), int(blocks[j1 + 1])
        b0, b1 = int(occupied[a0]), int(occupied[a1 - 1])
        if a0 == 0 and a1 == occupied.size:  # everything (typically an optimum of 1)
            inside = np.arange(desc.size)
        else:
            inside = np.flatnonzero(desc == b0 if b0 == b1 else (desc >= b0) & (desc <= b1))
        uncertified = (j0, j1, a0, a1, inside, b0, b1)
    return bucket_mass, x, blocks, top, desc, atom_of_bucket, uncertified, (r_lo, r_hi)


def split_segment(targets, masses, k, start, bits, margin=CERTIFICATE_MARGIN, sort_below=SORT_BELOW):
    """Solve the tokens of a split segment: finer buckets while they help, else exactly.

    The segment is tight at both ends, so it is a problem of its own on the keys from
    ``start``. Its tokens are bucketed again with 6 more bits per level while the segment
    is large and the finer buckets certify some of it; the rest is sorted and solved with
    every token its own atom (``margin``: of the certificate; ``sort_below``: a segment of at
    most this many tokens is sorted at once).

    Returns:
        ``(masses, x, blocks, top, local, n_buckets)``: the segment's atoms, the atom of
        each of its tokens (in input order) and how many atoms are buckets.
    """
    n = masses.size
    level = None
    if n > sort_below and bits <= MAX_BUCKET_BITS:
        level = bucket_level(targets, masses, k, start, bits, most=2 * n + 1024, margin=margin)
    if level is not None:
        a_masses, x, blocks, top, desc, atom_of_bucket, uncertified, _ = level
        if uncertified is None:
            return a_masses, x, blocks, top, atom_of_bucket[desc], a_masses.size
        j0, j1, a0, a1, inside, _, _ = uncertified
        # if finer buckets certify nothing, more bits will not help (x = q on the whole
        # segment, typically an optimum of 1): sort instead
        if inside.size < n:
            sub = split_segment(targets[inside], masses[inside], k, float(top[a0]), bits + BUCKET_BITS, margin,
                                sort_below)
            n_buckets = a_masses.size - (a1 - a0) + sub[5]
            a_masses, x, blocks, top = splice(a_masses, x, blocks, top, j0, j1, a0, a1, sub[:4])
            atom_of_bucket[atom_of_bucket >= a1] += sub[0].size - (a1 - a0)
            local = atom_of_bucket[desc]
            local[inside] = a0 + sub[4]
            return a_masses, x, blocks, top, local, n_buckets
    order = argsort_positive(np.divide(targets, masses))[::-1]
    x, blocks, top = lex_pieces(masses[order], targets[order], k, start)
    local = np.empty(n, dtype=np.int64)
    local[order] = np.arange(n)
    return masses[order], x, blocks, top, local, 0


def splice(masses, x, blocks, top, j0, j1, a0, a1, sub):
    """Replace atoms ``a0..a1-1`` (pieces ``j0..j1``) by a solved segment ``sub``."""
    s_masses, s_x, s_blocks, s_top = sub
    n_sub = s_masses.size
    masses = np.concatenate([masses[:a0], s_masses, masses[a1:]])
    x = np.concatenate([x[:a0], s_x, x[a1:]])
    top = np.concatenate([top[:a0], s_top[:-1], top[a1:]])
    blocks = np.concatenate([blocks[: j0 + 1], a0 + s_blocks[1:-1], blocks[j1 + 1 :] - (a1 - a0) + n_sub])
    return masses, x, blocks, top
