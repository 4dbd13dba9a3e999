"""What shares a key law: tokens (fact 1 and a sort), ratio buckets (fact 5) or the units of
fact 6's spread. :class:`Atoms` is the one interface the scheme reads: the atoms' draft
masses, their ``x``, the pieces over them, and each token's atom."""

from __future__ import annotations

import math

import numpy as np

from mspec.fast.optimal_selection.buckets import (
    BUCKET_BITS,
    MAX_BUCKET_BITS,
    bucket_level,
    bucket_sums,
    coarser_sums,
    may_be_one,
    splice,
    split_segment,
)
from mspec.fast.optimal_selection.induced import lex_optimal_induced
from mspec.fast.optimal_selection.options import DEFAULT
from mspec.fast.optimal_selection.spread import Spread


class Atoms:
    """The atoms of a selection rule, in ``q/p``-descending order, with their pieces.

    An atom is a set of tokens that share one key law (normalised by the atom's draft
    mass), so token ``t`` of atom ``a`` gets ``x_t = p_t x_a / P_a``. Atoms are single tokens
    (:meth:`tokens`, the lexicographically optimal ``x``) or ratio buckets with single
    tokens where buckets would lose acceptance (:meth:`buckets`, fact 5).

    Attributes:
        masses: ``(n,)`` draft mass ``P_a`` of each atom.
        x: ``(n,)`` ``x`` of each atom (every block tight).
        blocks: ``(m + 1,)`` block (piece) starts, ``n`` appended.
        top: ``(n + 1,)`` draft mass of the atoms before each atom.
        bucket_atoms: number of atoms that are buckets (0 for :meth:`tokens`).
        token_atoms: number of atoms that are single tokens.
        spread: ``None``, or the :class:`Spread` of fact 6 (then ``x = q`` and the tokens
            of a bucket spread over its own part and the pool in their own proportions).
    """

    def __init__(self, masses, x, blocks, top, atom_of, ranks, token_x, bucket_atoms=0, spread=None,
                 positive=False):
        self.masses, self.x, self.blocks, self.top = masses, x, blocks, top
        self.positive = positive  # every p and q > 0 (checked)
        self.spread = spread  # a Spread (fact 6): tokens of an atom do not share one key law
        # atom_of(t): atom of token t (-1: none); ranks(): all of them, (V,);
        # token_x(): x of every token, (V,) (0 where p = 0 or q = 0)
        self.atom_of, self.ranks, self.token_x = atom_of, ranks, token_x
        self.bucket_atoms = bucket_atoms
        self.token_atoms = masses.size - bucket_atoms

    @classmethod
    def tokens(cls, draft, target, k):
        order, x, blocks, top = lex_optimal_induced(draft=draft, target=target, num_drafts=k)
        rank = np.full(draft.size, -1, dtype=np.int64)
        rank[order] = np.arange(order.size)

        def token_x():
            out = np.zeros(draft.size)
            out[order] = x
            return out

        atoms = cls(np.take(draft, order), x, blocks, top, lambda t: int(rank[t]), lambda: rank, token_x)
        atoms.order = order
        return atoms

    @classmethod
    def buckets(cls, draft, target, k, fallbacks=None, tolerance=None, fast=DEFAULT):
        """Ratio buckets as atoms (fact 5). ``None`` (use :meth:`tokens`) if ``q/p``
        overflows or no token has ``p > 0`` and ``q > 0``. A spread (fact 6) that fails its
        certificate (``tolerance``: :meth:`Spread.certify`) is noted in the list
        ``fallbacks`` and fact 5 goes on. ``fast``: the :class:`FastPath` switches."""
        # the usual case (softmax outputs): every p, q > 0, seen from the buckets themselves
        # (a zero p makes q/p infinite or NaN, a zero q makes it 0: the extreme bucket keys)
        main, pm, qm = None, draft, target
        sums = bucket_sums(qm, pm, BUCKET_BITS, positive=True)
        if sums is None:  # some p or q is 0 (or q/p overflowed): only tokens with p, q > 0
            main = np.flatnonzero((draft > 0) & (target > 0))
            pm, qm = draft[main], target[main]
            if pm.size == 0:  # no token with p > 0 and q > 0: nothing to bucket
                return None
            sums = bucket_sums(qm, pm, BUCKET_BITS)
            if sums is None:  # q/p overflowed
                return None
        if fast.spread and main is None and may_be_one(sums[2], sums[3], k):  # fact 6 first: no bucket problem
            spread = cls._spread(sums, qm, pm, k, fallbacks, tolerance, fast)
            if spread is not None:
                return spread
        return cls._split_buckets(sums, qm, pm, k, main, draft.size, fast)

    @classmethod
    def _spread(cls, sums, target, draft, k, fallbacks, tolerance, fast):
        """Fact 6's atoms (its units), trying the bucket widths ``fast.spread_bits`` in turn;
        ``None`` if none serves (then fact 5)."""
        for bits in fast.spread_bits:
            level = sums if bits == BUCKET_BITS else coarser_sums(sums, BUCKET_BITS, bits)
            desc, occupied, bucket_mass, r_lo, r_hi, nb = level[:6]
            atom_of_bucket = np.full(nb, -1, dtype=np.int64)
            atom_of_bucket[occupied] = np.arange(occupied.size)
            spread = Spread.build(target, draft, k, bucket_mass, desc, atom_of_bucket, (r_lo, r_hi),
                                   expand_all=fast.expand_buckets == "all")
            why = spread.certify(tolerance, fallbacks, fast.max_depth) if spread is not None else None
            if why is not None:  # (rounding broke it: the next level, else fact 5)
                if fallbacks is not None:
                    fallbacks.append(f"spread (fact 6, {spread.masses.size} units) -> next: {why}")
                spread = None
            if spread is not None:  # fact 6: an optimum of 1, no sort; the atoms are its units
                n_units = spread.masses.size
                return cls(spread.masses, spread.x, np.array([0, n_units]), spread.top,
                           lambda t, a=atom_of_bucket, d=desc, s=spread: s.unit_of(t, int(a[d[t]])),
                           lambda a=atom_of_bucket, d=desc, s=spread: s.units(a[d]), lambda: target.copy(),
                           bucket_atoms=n_units - len(spread.expanded), spread=spread, positive=True)
        return None

    @classmethod
    def _split_buckets(cls, sums, qm, pm, k, main, vocab, fast):
        """Fact 5: the bucket problem, with the pieces its certificate cannot pass split
        into tokens (``main``: the tokens counted, ``None`` for all of them)."""
        masses, x, blocks, top, desc, atom_of_bucket, uncertified, _ = bucket_level(
            qm, pm, k, 0.0, BUCKET_BITS, sums=sums, margin=fast.bucket_margin)
        n_buckets = masses.size
        split_pos = split_atoms = None  # positions (ascending) and atoms of the split tokens
        if uncertified is not None:
            j0, j1, a0, a1, inside, b0, b1 = uncertified
            bits = _split_bits(x, masses, blocks, qm, uncertified)
            sub = split_segment(qm[inside], pm[inside], k, float(top[a0]), bits, fast.bucket_margin, fast.sort_below)
            masses, x, blocks, top = splice(masses, x, blocks, top, j0, j1, a0, a1, sub[:4])
            atom_of_bucket[atom_of_bucket >= a1] += sub[0].size - (a1 - a0)
            atom_of_bucket[b0 : b1 + 1] = -2  # split: look the token up
            split_pos, split_atoms = inside, a0 + sub[4]
            n_buckets += sub[5] - (a1 - a0)
        lookup = _TokenLookup(desc, atom_of_bucket, split_pos, split_atoms, main, vocab)
        return cls(masses, x, blocks, top, lookup.atom_of, lookup.ranks, lambda: lookup.token_x(x / masses, pm),
                   bucket_atoms=n_buckets, positive=main is None)


def _split_bits(x, masses, blocks, targets, uncertified) -> int:
    """Mantissa bits of the buckets that re-bucket a split segment."""
    j0, j1, a0, a1, inside, _, _ = uncertified
    # one piece over everything is x = q up to the buckets' rounding (an optimum of 1
    # that fact 6 could not serve): finer buckets cannot certify any of it, so sort
    whole = blocks.size == 2 and a0 == 0 and a1 == masses.size
    bits = MAX_BUCKET_BITS + 1 if whole else BUCKET_BITS + BUCKET_BITS
    if j0 == j1 and not whole:
        # one piece: x = s q on its tokens, s = its x over its true q. Buckets narrower
        # than a factor 1 + |s - 1| certify it, so a few more bits than log2(1/|s - 1|)
        # are enough (often 8 or 9 instead of 12: far fewer atoms)
        slope_gap = abs(float(x[a0:a1].sum()) / float(targets[inside].sum()) - 1.0)
        if slope_gap > 0.0:
            bits = min(max(math.ceil(-math.log2(slope_gap)) + 1, BUCKET_BITS + 1), bits)
    return bits


class _TokenLookup:
    """Token -> atom for fact 5's atoms: each counted token's bucket ``desc``, the atom of
    each bucket (-1: empty, -2: split into tokens), the split tokens' positions (ascending)
    and atoms; ``main``: the counted tokens (``None``: all ``vocab`` of them)."""

    def __init__(self, desc, atom_of_bucket, split_pos, split_atoms, main, vocab):
        self.desc, self.atom_of_bucket = desc, atom_of_bucket
        self.split_pos, self.split_atoms, self.main, self.vocab = split_pos, split_atoms, main, vocab
        self.position = None if main is None else np.full(vocab, -1, dtype=np.int64)
        if self.position is not None:
            self.position[main] = np.arange(main.size)

    def atom_of(self, t):
        i = t if self.position is None else self.position[t]
        if i < 0:
            return -1
        a = int(self.atom_of_bucket[self.desc[i]])
        return a if a != -2 else int(self.split_atoms[np.searchsorted(self.split_pos, i)])

    def _full(self, values, fill):  # values per counted token -> (V,)
        if self.main is None:
            return values
        out = np.full(self.vocab, fill, dtype=values.dtype)
        out[self.main] = values
        return out

    def ranks(self):
        out = self.atom_of_bucket[self.desc]
        if self.split_pos is not None:
            out[self.split_pos] = self.split_atoms
        return self._full(out, -1)

    def token_x(self, level, masses):
        """One V-long array: ``x_t = p_t`` times the level (``x / P``) of its atom."""
        # per bucket; the markers -1 (empty) and -2 (split: set per token below) are
        # never used as indices (level[-2] would be another atom's, or out of bounds)
        kept = self.atom_of_bucket >= 0
        per_bucket = np.zeros(self.atom_of_bucket.size)
        per_bucket[kept] = level[self.atom_of_bucket[kept]]
        out = per_bucket[self.desc]
        out *= masses
        if self.split_pos is not None:
            out[self.split_pos] = masses[self.split_pos] * level[self.split_atoms]
        return self._full(out, 0.0)
