"""Fast path, fact 6 of :mod:`mspec.fast.optimal_selection`: an optimum of 1 without a sort.

Notation (paper): K i.i.d. drafts from ``p`` (``draft``), target ``q`` (``target``),
``g(m) = 1 - (1 - m)^K`` and ``f(A) = g(p(A))`` = P(some draft lies in A).

**6. An optimum of 1 without a sort: tokens spread inside their bucket.** When ``x = q``
is feasible (certified from the buckets alone: every prefix in ``q/p`` order has
``q(C) <= f(C)``, checked at the bucket ends and at the worst point inside each bucket
that its ratio range allows), the whole vocabulary is one piece of mean density ``g = 1``.
Build its slots and pool with the *buckets* as units (fact 4, ``x_a = Q_a``). Inside
bucket ``a`` token ``t`` takes the fraction ``l_t / own_a`` of the bucket's own (slot)
part and the rest of its length, ``p_t - l_t``, in the pool, with
``l_t = p_t (b_t - g) / (d_a - g)``, ``b_t = q_t / p_t`` and ``d_a`` the mean density of the
bucket's own part. Then ``sum_t l_t = own_a`` and token ``t``'s ``nu``-mass is
``l_t d_a + (p_t - l_t) g = p_t b_t = q_t``. It needs ``0 <= l_t <= p_t``: every bucket lies
on one side of ``g = 1`` (a power of two is a bucket edge), and ``b_t <= d_a`` (front) or
``b_t >= d_a`` (back), checked with the bucket's ratio range. A bucket that owns (nearly) all
its length fails it; such buckets sit in tiled groups next to a nearly tight suffix or
prefix, whose slots are then water-filled and tiled by the buckets' *tokens* in place
(the group keeps its length and ``nu``-mass, so nothing else changes). A failing bucket
elsewhere is expanded into token units and the slots are built again; if that needs too
many tokens, fact 5. Fact 6 is tried first when the bucket sums allow an optimum of 1,
with 4-bit buckets (merged from the 6-bit ones: fewer units), then with the 6-bit ones.
"""

from __future__ import annotations

import numpy as np

from mspec.fast.optimal_selection.buckets import CERTIFICATE_MARGIN
from mspec.fast.optimal_selection.pool import MAX_DEPTH, SLOT_TOLERANCE, certify_piece, PoolPiece

#: fact 6 checks at most this many buckets token by token where the bucket bound is too loose
SPREAD_EXACT_BUCKETS = 4


#: fact 6 expands buckets into tokens in at most this many rounds, and at most this many tokens
SPREAD_ROUNDS = 4


SPREAD_EXPAND_TOKENS = 1024


#: ... and tiles groups of buckets token by token (in place) up to this many tokens in all
SPREAD_GROUP_TOKENS = 16384


class Spread:
    """Fact 6: ``x = q`` (an optimum of 1) on one piece whose *units* are ratio buckets, and
    every token of a bucket spread over the bucket's own part and the pool.

    Token ``t`` of unit ``u`` owns ``l_t = (q_t - g p_t) c_u`` of the unit's own part
    (``c_u = own_u / (Q_u - g P_u)``, so the ``l_t`` add up to ``own_u``) and puts
    ``p_t - l_t`` into the pool. A bucket whose own part is not dense (front) or sparse
    (back) enough for all its tokens -- typically a top bucket that owns all its length --
    is *expanded*: its tokens become units of their own (sorted; such buckets are few).

    Attributes:
        piece: the :class:`PoolPiece` over the units.
        masses, x: ``(n,)`` ``P_u`` and ``Q_u`` of the units, ``q/p`` descending.
        top: ``(n + 1,)`` draft mass before each unit.
        c: ``(n,)`` ``c_u`` above.
        g: the piece's mean density (1 up to rounding).
        unit_of_atom: ``(buckets,)`` the unit of each bucket (-1: expanded).
        expanded: ``{token: unit}`` for the tokens of expanded buckets.
    """

    def __init__(self, piece, masses, x, top, c, g, unit_of_atom, expanded, local=None):
        self.piece, self.masses, self.x, self.top, self.c, self.g = piece, masses, x, top, c, g
        self.unit_of_atom, self.expanded = unit_of_atom, expanded
        # token -> (group, position, own) for the tokens of groups tiled token by token;
        # group -> [(front, first, end, own, held), its piece once built]
        self.local, self._groups = local if local is not None else ({}, {})

    @classmethod
    def build(cls, targets, masses, k, bucket_mass, desc, atom_of_bucket, bounds, expand_all=False):
        """The spread rule, or ``None`` when ``x = q`` is not certified feasible or some
        token would need more than its length (then fact 5 goes on). ``expand_all``: at the
        first try, treat every bucket whose tokens' ratios differ as not fitting (expanded)."""
        r_lo, r_hi = bounds
        occupied = np.flatnonzero(atom_of_bucket >= 0)
        q_a = np.bincount(desc, weights=targets, minlength=atom_of_bucket.size)[occupied]
        tokens = _BucketTokens(targets, masses, desc, atom_of_bucket, occupied)
        if not _optimum_is_one(bucket_mass, q_a, r_lo, r_hi, k, tokens):
            return None
        expand: list[int] = []
        for _ in range(SPREAD_ROUNDS):
            u_p, u_q, u_lo, u_hi, unit_of_atom, expanded = _units(bucket_mass, q_a, r_lo, r_hi, expand, tokens)
            built = cls._tile(u_p, u_q, u_lo, u_hi, k)
            if built is None:
                return None
            piece, own, gap, g, bad = built
            if expand_all and not expand:
                bad = np.flatnonzero(u_lo < u_hi)
            local = None
            if bad.size:  # in tiled groups: tile those groups token by token, in place
                atom_of_unit = _inverse(unit_of_atom, u_p.size)
                token_of_unit = {v: t for t, v in expanded.items()}

                def unit_tokens(units, atom_of_unit=atom_of_unit, token_of_unit=token_of_unit):
                    atoms = atom_of_unit[units]
                    tokens.fetch(atoms[atoms >= 0])  # (one pass over the vocabulary)
                    return [tokens.of(int(a)) if a >= 0 else np.array([token_of_unit[int(u)]])
                            for a, u in zip(atoms, units)]

                local = cls._tile_groups_by_token(piece, bad, unit_tokens, targets, masses)
            if bad.size == 0 or local is not None:
                top = np.concatenate([[0.0], np.cumsum(u_p)])
                return cls(piece, u_p, u_q, top, own / gap, g, unit_of_atom, expanded, local)
            # expand the buckets whose units do not fit (a token unit always fits)
            new = [int(a) for a in np.flatnonzero(np.isin(unit_of_atom, bad))]
            if not new or tokens.count(expand + new) > SPREAD_EXPAND_TOKENS:
                return None
            expand += new
            tokens.fetch(expand)
        return None

    @staticmethod
    def _tile_groups_by_token(piece, bad, unit_tokens, targets, masses):
        """``(local, groups)`` when every unit in ``bad`` lies in a tiled group: each such
        group's slot is water-filled and tiled by the *tokens* of its units (the group's
        total length and ``nu``-mass, so the rest of the piece is unchanged); else ``None``."""
        n = piece.n
        keys = {}
        for u in bad.tolist():
            front = u < piece.front.size
            side = piece.front if front else piece.back
            first = side.group_first(u if front else n - 1 - u)
            if first < 0 or first not in side.tiled:
                return None
            keys[(front, first)] = side
        local, groups, total = {}, {}, 0
        for key, side in keys.items():
            front, first = key
            end = side.group_end(first)
            units = np.arange(first, end) if front else n - 1 - np.arange(first, end)  # this side's order
            tokens = np.concatenate([t if front else t[::-1] for t in unit_tokens(units)])
            total += tokens.size
            if total > SPREAD_GROUP_TOKENS:
                return None
            filled = side.fill_slot(masses[tokens], targets[tokens], float(side.edge(first)), float(side.edge(end)))
            if filled is None:
                return None
            own, held, order = filled
            groups[key] = [(front, first, end, own[order], held[order]), None]
            local.update(zip(tokens[order].tolist(), zip([key] * tokens.size, range(tokens.size), own[order].tolist())))
        return local, groups

    def certify(self, tolerance=None, notes=None, max_depth=MAX_DEPTH):
        """``None`` if the spread realises ``x = q`` to float rounding, else what fails: the
        units' piece (``PoolPiece.certify``, ``x`` of a unit = its ``Q``) and the pieces
        of the groups tiled token by token (built here). ``notes``: where the piece notes the
        fallbacks of its tiled groups (built later, lazily); ``max_depth``: see
        :class:`FastPath`."""
        self.piece.notes, self.piece.tolerance, self.piece.max_depth = notes, tolerance, max_depth
        why = self.piece.certify(self.masses, self.x, skip=self._groups.keys(), tolerance=tolerance)
        if why is not None:
            return why
        for key, entry in self._groups.items():
            _, _, _, own, held = entry[0]
            why = certify_piece(self._group_piece(key), own, held, tolerance)
            if why is not None:
                return f"group tiled by tokens: {why}"
        return None

    def _group_piece(self, key):
        """The piece tiling a group token by token, built at its first use."""
        entry = self._groups[key]
        if entry[1] is None:
            entry[1] = self.piece.tile_slot(*entry[0])
        return entry[1]

    @staticmethod
    def _tile(u_p, u_q, u_lo, u_hi, k):
        """Slots and pool over the units; ``None``, or ``(piece, own, gap, g, bad)`` with the
        units whose tokens would not fit (``bad``)."""
        n = u_p.size
        piece = PoolPiece.build(u_p, u_q, 0.0, k, all_edges=True)
        if piece is None or piece.pool_len <= 0.0:
            return None
        g = piece.front.g
        n_front, n_back = piece.front.size, piece.back.size
        if n_front + n_back != n:
            return None  # a unit of mean density exactly g owns nothing
        own = np.zeros(n)
        for side, units in ((piece.front, np.arange(n_front)), (piece.back, n - 1 - np.arange(n_back))):
            if side.size:
                edges = side.edge(np.arange(side.size + 1))
                width = edges[1:] - edges[:-1]
                side_own = np.where(width > 0.0, np.minimum(width, side.masses), 0.0)
                if side._first is not None:  # members of a group own their share of the group's slot
                    members = np.flatnonzero(side._first >= 0)
                    first, end = side._first[members], side._end[members]
                    side_own[members] = np.where(edges[end] > edges[first], side._own[members], 0.0)
                own[units] = side_own
        front = np.arange(n) < n_front
        gap = u_q - g * u_p  # > 0 in front, < 0 at the back
        if (own <= 0.0).any() or np.where(front, gap <= 0.0, gap >= 0.0).any():
            return None
        mean = g + gap / own  # d_u, the mean density of unit u's own part
        # 0 <= l_t <= p_t: every token on its unit's side of g, and b_t <= d_u (front) or
        # b_t >= d_u (back); the ratios of unit u lie in [u_lo, u_hi]
        tol = SLOT_TOLERANCE
        side_ok = np.where(front, u_lo >= g * (1.0 - tol), u_hi <= g * (1.0 + tol))
        if not side_ok.all():
            return None
        fits = np.where(front, u_hi <= mean * (1.0 + tol), u_lo >= mean * (1.0 - tol))
        return piece, own, gap, g, np.flatnonzero(~fits)

    def unit_of(self, token: int, atom: int) -> int:
        """The unit of ``token`` (of bucket atom ``atom``)."""
        unit = int(self.unit_of_atom[atom])
        return unit if unit >= 0 else self.expanded[int(token)]

    def units(self, atom_of_token: np.ndarray) -> np.ndarray:
        """The unit of every token, from the bucket atom of every token."""
        out = self.unit_of_atom[atom_of_token]
        for t, u in self.expanded.items():
            out[t] = u
        return out

    def own(self, u: int, mass: float, target: float) -> float:
        """``l_t``: how much of unit ``u``'s own part a token owns."""
        return min(max((target - self.g * mass) * float(self.c[u]), 0.0), mass)

    def fragments(self, token: int, u: int, mass: float, target: float) -> list[tuple[float, float, float]]:
        """Key law of ``token`` of unit ``u``: its share of the unit's own part (or of its
        group's slot, tiled token by token) and of the pool, as ``(start, end, weight)``."""
        piece = self.piece
        if token in self.local:
            key, position, l_t = self.local[token]
            out = self._group_piece(key).fragments(position, l_t) if l_t > 0.0 else []
            if mass - l_t > 0.0:
                out.append((piece.start + piece.pool_start, piece.start + piece.pool_start + piece.pool_len,
                            (mass - l_t) / piece.pool_len))
            return out
        l_t = self.own(u, mass, target)
        unit_own = piece._slot(u)[2]
        out = [(s, e, w * l_t / unit_own) for s, e, w in piece.fragments(u, unit_own)] if l_t > 0.0 else []
        if mass - l_t > 0.0:
            out.append((piece.start + piece.pool_start, piece.start + piece.pool_start + piece.pool_len,
                        (mass - l_t) / piece.pool_len))
        return out

    def sample_key(self, token: int, u: int, mass: float, target: float, uniform: float) -> float:
        """Global key of a draft of ``token`` (of unit ``u``) from one uniform number."""
        piece = self.piece
        if token in self.local:
            key, position, l_t = self.local[token]
            w = uniform * mass
            if w < l_t:
                return self._group_piece(key).sample_key(position, l_t, w / l_t)
            return float(piece.start + piece.pool_start + (w - l_t) / (mass - l_t) * piece.pool_len)
        l_t = self.own(u, mass, target)
        w = uniform * mass
        if w < l_t:
            return piece.sample_key(u, piece._slot(u)[2], w / l_t)
        return float(piece.start + piece.pool_start + (w - l_t) / (mass - l_t) * piece.pool_len)


def _inverse(unit_of_atom: np.ndarray, n_units: int) -> np.ndarray:
    """``atom_of_unit``: the bucket atom of each unit (-1 for a token unit)."""
    out = np.full(n_units, -1, dtype=np.int64)
    kept = unit_of_atom >= 0
    out[unit_of_atom[kept]] = np.flatnonzero(kept)
    return out


class _BucketTokens:
    """The tokens of bucket atoms, ``q/p`` descending, fetched in one pass over the
    vocabulary for all the atoms asked at once, and kept."""

    def __init__(self, targets, masses, desc, atom_of_bucket, occupied):
        self.targets, self.masses, self.desc = targets, masses, desc
        self.atom_of_bucket, self.occupied = atom_of_bucket, occupied
        self._tokens: dict[int, np.ndarray] = {}
        self._counts = None  # tokens per bucket atom, counted when first needed

    def fetch(self, atoms) -> None:
        if not len(atoms):
            return
        need = sorted({int(a) for a in atoms} - self._tokens.keys())
        if not need:
            return
        chosen = np.zeros(self.atom_of_bucket.size, dtype=bool)
        chosen[self.occupied[need]] = True
        inside = np.flatnonzero(chosen[self.desc])
        inside = inside[np.lexsort((self.masses[inside] / self.targets[inside], self.desc[inside]))]
        cuts = np.searchsorted(self.desc[inside], self.occupied[need])
        for a, part in zip(need, np.split(inside, cuts[1:])):
            self._tokens[a] = part

    def of(self, atom: int) -> np.ndarray:
        if atom not in self._tokens:
            self.fetch([atom])
        return self._tokens[atom]

    def count(self, atoms) -> int:
        if self._counts is None:
            self._counts = np.bincount(self.desc, minlength=self.atom_of_bucket.size)[self.occupied]
        return int(self._counts[np.asarray(atoms, dtype=np.int64)].sum())


def _optimum_is_one(p_a, q_a, r_lo, r_hi, k, tokens: _BucketTokens) -> bool:
    """Whether ``x = q`` is certified feasible from the buckets: ``q(C) <= f(C)`` for every
    prefix ``C`` in ``q/p`` order, i.e. for the rest ``R = V \\ C``: ``q(R) >= p(R)^K``."""
    # rests are summed from the tail, so that the tiny masses there keep their digits
    p_rest = np.concatenate([np.cumsum(p_a[::-1])[::-1], [0.0]])  # p of buckets a.. n-1
    q_rest = np.concatenate([np.cumsum(q_a[::-1])[::-1], [0.0]])
    c = np.minimum(p_rest, 1.0) ** k  # 1 - f at the bucket ends
    margin = 1.0 + CERTIFICATE_MARGIN
    # at the bucket ends (the first is 1 = 1) ...
    if (q_rest[1:-1] < c[1:-1] * margin).any():
        return False
    # ... and inside bucket a, after draft mass s of it: q(R) >= q_rest[a + 1] +
    # max(Q_a - r_hi s, r_lo (P_a - s)), a convex bound whose kink is its worst point
    # against the chord of the convex 1 - f
    with np.errstate(divide="ignore", invalid="ignore"):
        kink = np.minimum(np.maximum((q_a - r_lo * p_a) / (r_hi - r_lo), 0.0), p_a)  # (np.clip, faster)
    bound = q_rest[1:] + np.maximum(q_a - r_hi * kink, r_lo * (p_a - kink))
    chord = c[:-1] + (c[1:] - c[:-1]) * (kink / p_a)
    loose = np.flatnonzero(bound < chord * margin)
    if loose.size > SPREAD_EXACT_BUCKETS:
        return False
    tokens.fetch(loose)
    for a in loose:  # too loose (typically the top bucket): check its tokens exactly
        inside = tokens.of(int(a))
        s = np.cumsum(tokens.masses[inside])[:-1]
        u = np.cumsum(tokens.targets[inside])[:-1]
        if np.any(q_rest[a] - u < np.maximum(p_rest[a] - s, 0.0) ** k * margin):
            return False
    return True


def _units(p_a, q_a, r_lo, r_hi, expand: list[int], tokens: _BucketTokens):
    """The units of the spread: bucket atoms, with the buckets in ``expand`` replaced by
    their tokens, in place. Returns ``(P_u, Q_u, ratio lows, ratio highs, unit of each
    bucket atom (-1: expanded), {token: unit} of the expanded tokens)``."""
    n = p_a.size
    unit_of_atom = np.arange(n)
    if not expand:
        return p_a, q_a, r_lo, r_hi, unit_of_atom, {}
    extra = np.zeros(n, dtype=np.int64)
    for a in expand:
        extra[a] = tokens.of(a).size - 1
    unit_of_atom = unit_of_atom + np.concatenate([[0], np.cumsum(extra)[:-1]])
    cuts = np.sort(expand)
    parts_p, parts_q, parts_lo, parts_hi, prev = [], [], [], [], 0
    for a in cuts:
        t = tokens.of(int(a))
        ratio = tokens.targets[t] / tokens.masses[t]
        parts_p += [p_a[prev:a], tokens.masses[t]]
        parts_q += [q_a[prev:a], tokens.targets[t]]
        parts_lo += [r_lo[prev:a], ratio]
        parts_hi += [r_hi[prev:a], ratio]
        prev = a + 1
    sizes = [tokens.of(int(a)).size for a in cuts]
    expanded_tokens = np.concatenate([tokens.of(int(a)) for a in cuts])
    firsts = np.repeat(unit_of_atom[cuts], sizes)
    starts = np.repeat(np.cumsum([0] + sizes)[:-1], sizes)
    expanded = dict(zip(expanded_tokens.tolist(), (firsts + np.arange(expanded_tokens.size) - starts).tolist()))
    unit_of_atom[cuts] = -1
    return (np.concatenate(parts_p + [p_a[prev:]]), np.concatenate(parts_q + [q_a[prev:]]),
            np.concatenate(parts_lo + [r_lo[prev:]]), np.concatenate(parts_hi + [r_hi[prev:]]),
            unit_of_atom, expanded)
