"""Fast path, fact 4 of :mod:`mspec.fast.optimal_selection`: slots and a pool.

Notation (paper): K i.i.d. drafts from ``p`` (``draft``), target ``q`` (``target``),
``g(m) = 1 - (1 - m)^K`` and ``f(A) = g(p(A))`` = P(some draft lies in A).

**4. Faster: slots and a pool (the default, ``tiling="pool"``).** Keys need not come from
sets: if a draft of token ``t`` draws its key with density ``w_t(y) / p_t`` and the shares
``w_t(y)`` add up to 1 at every key, keys are still uniform and P(select t) is the
``nu``-integral of ``w_t``. In a piece of mean density ``g``, tokens denser than ``g`` own
*front slots* in ``x/p`` order from the top, sparser ones *back slots* from the bottom,
and each puts the rest of its length into one shared *pool* between them. The slot edges
solve ``H(C) - g C = sum (x - g p)`` over the tokens so far (prefix sums, one vectorised
root solve), which makes the pool's mean density exactly ``g`` and every token's
``nu``-mass exactly ``x_t`` (``PoolPiece``). A token that would need a slot longer
than itself shares one with the tokens before it (a group, spread evenly; a run of such
tokens makes one group at once). Next to a nearly tight prefix or suffix the members
instead fill the group's slot by water-filling and *tile* it: the slot is then tight, a
piece of its own, realised again by slots and a pool (the greedy of fact 3 only where
that fails); if no group works, the piece falls back to the greedy. Pieces of up to 4096
atoms solve all their edges in one vectorised Newton iteration; larger ones only the
edges that a chord bound cannot clear.

Sampling needs only the drafted tokens' key laws, so pieces are built lazily, only those
the drafts reach.
"""

from __future__ import annotations

import math

import numpy as np

from mspec.schemes.selection import SchemeError
from mspec.fast.optimal_selection.greedy import CERTIFY_TOLERANCE, GREEDY_CERTIFY_FACTOR, certify_greedy
from mspec.fast.optimal_selection.induced import power_by_squaring
from mspec.fast.optimal_selection.roots import concave_root, power_root, power_root_both
from mspec.fast.optimal_selection.runs import RunPiece

#: a slot may exceed its token's length by this fraction (rounding) before the pool
#: construction is refused for the piece
SLOT_TOLERANCE = 1e-12


#: most tokens in one group (a token needing more falls back to the greedy for its piece)
MAX_GROUP = 4096


#: a piece of at most this many atoms solves all its slot edges at once
ALL_EDGES_BELOW = 4096


#: tiled groups are realised as pieces of slots and a pool down to this depth (then greedily)
MAX_DEPTH = 8


#: absolute rounding of a slot edge (the edges are solved to ~1e-16)
EDGE_TOLERANCE = 1e-15


_SEAM = np.zeros(1)  # (the seam between front and back slots in PoolPiece._certify_plain; never written)


def _piece_nu(base: float, k: int, fine: bool, length: float):
    """``(H, window, from_bottom)``: ``H(m) = nu([0, m])``, ``window(lo, hi) = nu([lo, hi])``
    and ``from_bottom(lo, hi) = nu([P - hi, P - lo])`` in the coordinates of a piece of
    length ``P`` whose top is at key ``1 - base``; with ``fine``, without cancellation
    (``-base^K expm1(K log1p(-m / base))``: relative rounding)."""
    if fine:
        def big_h(m):
            return -(base**k) * np.expm1(k * np.log1p(-np.minimum(m, base) / base))

        def window(lo, hi):
            w = base - lo
            return -(w**k) * np.expm1(k * np.log1p(-(hi - lo) / w))

        def from_bottom(lo, hi):
            return window(length - hi, length - lo)
    else:
        def big_h(m):
            if not isinstance(m, np.ndarray):
                return base**k - np.maximum(base - m, 0.0) ** k
            rest = np.subtract(base, m)  # (the same, in one buffer: V long at full vocabulary)
            np.maximum(rest, 0.0, out=rest)
            rest **= k
            return np.subtract(base**k, rest, out=rest)

        def window(lo, hi):
            return big_h(hi) - big_h(lo)

        def from_bottom(lo, hi):  # (one end at a time: fewer V-long temporaries at once)
            return big_h(length - lo) - big_h(length - hi)
    return big_h, window, from_bottom


class PoolPiece:
    """Slots and a shared pool: a vectorised realisation of one piece (fact 4).

    Coordinates as in :class:`GreedyPiece` (``m`` in ``[0, P]`` below the top of the piece,
    ``H(m) = nu([0, m])`` and density ``h = H'``, decreasing). ``g`` is the piece's mean
    density ``H(P) / P``. Tokens denser than ``g`` (``b_t = x_t / p_t > g``) get *front slots*
    ``[C_{t-1}, C_t]`` in ``b`` order from the top, tokens sparser than ``g`` get *back slots*
    from the bottom, and every token puts the rest of its length, ``r_t = p_t - |slot|``,
    into one shared *pool* -- the interval between the front and the back slots -- spread
    uniformly over it. A key of token ``t`` is uniform on its slot with probability
    ``|slot| / p_t``, else uniform on the pool. The slot edges solve, with prefix sums only,

        H(C_t) - g C_t = sum_{u <= t} (x_u - g p_u)                 (front, in b order)
        g D_t - (H(P) - H(P - D_t)) = sum_{u >= t} (g p_u - x_u)    (back, from the end)

    because the pool's mean density is then exactly ``g`` and each token gets
    ``nu(slot) + r_t g = x_t``. A token must not need a slot longer than itself
    (``r_t >= 0``); where one does, it shares one slot with the tokens before it: a
    *group* of tokens spreads uniformly over the union of their slots, token ``t`` owning
    ``l_t = p_t (b_t - g) / (mean density of the slot - g)`` of it (the same equations at
    the group's edges). Where spreading evenly fails too (next to a nearly tight prefix or
    suffix), the group's slot is tiled by the greedy (:meth:`_Side._tile_group`).
    :meth:`build` returns ``None`` if even that fails, and the caller falls back to the
    greedy :class:`GreedyPiece` for the whole piece.
    """

    #: where certificate failures of the tiled groups' pieces are noted (the scheme's
    #: ``fallbacks``), and their tolerance (None: CERTIFY_TOLERANCE); set by the owner
    notes: list | None = None
    tolerance: float | None = None
    #: built lazily (not every slot edge solved): certified by its ends, then atom by atom
    #: (the atoms certified so far: ``checked``); set by the owner
    lazy: bool = False
    #: tiled groups are realised by slots and a pool down to this depth (then the greedy)
    max_depth: int = MAX_DEPTH

    def __init__(self, start, length, n, front, back, num_drafts, depth=0):
        self.start, self.length, self.n, self.k = start, length, n, num_drafts
        self.front, self.back = front, back
        self.depth = depth  # how many tiled groups this piece lies inside
        self._tilings: dict[tuple[bool, int], RunPiece | PoolPiece] = {}
        self.pool_start = float(front.edge(front.size)) if front.size else 0.0
        pool_end = length - (float(back.edge(back.size)) if back.size else 0.0)
        self.pool_len = max(pool_end - self.pool_start, 0.0)
        self.phases = 0  # no greedy blocks
        self._slots: dict[int, tuple[float, float, float]] = {}  # local token -> _slot(token)

    @classmethod
    def build(cls, masses: np.ndarray, targets: np.ndarray, start: float, num_drafts: int, depth: int = 0,
              all_edges: bool = False):
        """The piece's slots and pool, or ``None`` when some token needs a slot longer than
        itself even in a group. ``depth``: tiled groups around the piece (0: a whole piece);
        ``all_edges``: solve every slot edge at once (for a caller that needs them all)."""
        k, base = num_drafts, 1.0 - start
        length = float(masses.sum())
        n = masses.size

        # A piece short against its keys' scale (length < base / 2, base = 1 - start): nu as a
        # difference of powers of u = base - m keeps only ~1e-16 base^K absolute, which is
        # not small against the piece's nu there -- its mean density g would not be that of
        # its x (relatively exact, from lex_pieces), and the u-space slot edges would be
        # exact only to ~1e-16 base, not to ~1e-16 of the piece. Such a piece gets nu without
        # cancellation and its edges refined in m itself.
        fine = length < 0.5 * base and k > 1
        big_h, window, from_bottom = _piece_nu(base, k, fine, length)
        total = float(big_h(length))
        g = total / length if length > 0 else 0.0
        dens = targets / masses
        # the densities are sorted descending: front is a prefix, back a suffix
        n_front, n_back = (np.count_nonzero(dens > g), np.count_nonzero(dens < g)) if k > 1 else (0, 0)
        del dens  # (V long at full vocabulary: not kept through the slots' temporaries)
        # with u = base - m the edge equations read u^K - g u = const; h = g at u_star
        u_star = min(max((g / k) ** (1.0 / (k - 1)), base - length), base) if k > 1 else base
        phi_star = u_star**k - g * u_star
        top_value, bottom = base**k - g * base, base - length
        bottom_value = bottom**k - g * bottom
        front = _Side(
            masses[:n_front], targets[:n_front], g,
            want=np.cumsum(targets[:n_front] - g * masses[:n_front]),  # Phi(C_t) = H(C_t) - g C_t
            root=(lambda want: np.maximum(top_value - want, phi_star), lambda u: base - u, k, True, base),
            window_nu=window,
            extent=base - u_star, most=top_value - phi_star, denser=True)
        back = _Side(  # measured from the bottom of the piece, the sparsest token first
            masses[n - n_back:][::-1], targets[n - n_back:][::-1], g,
            want=np.cumsum((g * masses[n - n_back:] - targets[n - n_back:])[::-1]),  # Psi(D_t)
            root=(lambda want: np.maximum(bottom_value - want, phi_star), lambda u: u - bottom, k, False, bottom),
            window_nu=from_bottom,
            extent=u_star - bottom, most=bottom_value - phi_star, denser=False)
        if fine:  # Phi(C) = H(C) - g C from the top, Psi(D) = g D - nu([P - D, P]) from the bottom
            front.refine = (lambda c: big_h(c) - g * c, lambda c: k * (base - c) ** (k - 1) - g, length)
            back.refine = (lambda d: g * d + (bottom + d) ** k * np.expm1(k * np.log1p(-d / (bottom + d))),
                           lambda d: g - k * (bottom + d) ** (k - 1), length)
        if all_edges or fine:  # (fine: every edge refined and checked, no chord bounds)
            _Side.solve_all(front, back)
        if not (front.settle() and back.settle()):
            return None
        return cls(start, length, n, front, back, k, depth)

    def _slot(self, i: int):
        """``(lo, hi, own)``: local token ``i``'s slot in piece coordinates, and the length
        of it the token owns (0 for a slot that rounds to nothing). Kept once computed (a
        drafted token's slot is read by its certificate and by every key drawn from it)."""
        slot = self._slots.get(i)
        if slot is None:
            if i < self.front.size:
                lo, hi, own = self.front.slot(i)
            elif self.n - 1 - i < self.back.size:
                lo, hi, own = self.back.slot(self.n - 1 - i)
                lo, hi = self.length - hi, self.length - lo
            else:
                lo = hi = own = 0.0
            slot = self._slots[i] = (lo, hi, own) if hi > lo else (lo, lo, 0.0)
        return slot

    def _group_tiling(self, i: int):
        """``(tiling, position, own)`` if local token ``i`` is in a tiled group, else None.

        A tiled group's slot is tiled exactly by its members (lengths ``own``, ``nu``-masses
        ``held``): a piece of its own, realised like any piece -- slots and a pool inside
        the slot (which needs no sequential greedy, however many members), or the greedy
        where that fails."""
        if i < self.front.size:
            side, j, front = self.front, i, True
        elif self.n - 1 - i < self.back.size:
            side, j, front = self.back, self.n - 1 - i, False
        else:
            return None
        first = side.group_first(j)
        if first < 0 or first not in side.tiled:
            return None
        own, held, tokens = side.tiled[first]
        key = (front, first)
        if key not in self._tilings:
            self._tilings[key] = self.tile_slot(front, first, side.group_end(j), own, held)
        position = int(j - first if front else tokens.size - 1 - (j - first))
        return self._tilings[key], position, float(own[position])

    def tile_slot(self, front: bool, first: int, end: int, own: np.ndarray, held: np.ndarray):
        """The piece that tiles the slot of group ``first..end-1`` of the front (or back)
        with members of lengths ``own`` and ``nu``-masses ``held``, densest first (they fill
        it exactly and pass the greedy's prefix test): slots and a pool, else the greedy."""
        side = self.front if front else self.back
        top = self.start + float(side.edge(first) if front else self.length - side.edge(end))  # densest end
        sub = None
        if self.depth < self.max_depth and own.size > 1 and own.min() > 0.0:
            sub = PoolPiece.build(own, held, top, self.k, self.depth + 1)
        why = sub.certify(own, held, tolerance=self.tolerance) if sub is not None else None
        if why is not None:  # (rounding broke it: the greedy, checked in full, noted)
            sub = RunPiece(own, held, top, self.k)
            failed = certify_greedy(sub, own, held)
            if self.notes is not None:
                self.notes.append(f"group of {own.size} at depth {self.depth + 1}: slots and pool -> greedy: {why}"
                                  + (f"; the greedy: {failed}" if failed else ""))
            if failed is not None:
                raise SchemeError(f"scheme 'optimal' could not certify its key laws ({why}; the greedy "
                                  f"fallback: {failed}); please report the draft and target. 'specinfer' is "
                                  "exact on every input and can stand in meanwhile")
        if isinstance(sub, PoolPiece):
            sub.notes, sub.tolerance, sub.max_depth = self.notes, self.tolerance, self.max_depth
        return sub if sub is not None else RunPiece(own, held, top, self.k)

    def fragments(self, i: int, mass: float) -> list[tuple[float, float, float]]:
        """Key law of local token ``i`` (draft mass ``mass``): ``(start, end, weight)``, with
        weight = the share of the keys there that belong to the token."""
        lo, hi, own = self._slot(i)
        share = max(mass - own, 0.0)
        out = []
        tiled = self._group_tiling(i)
        if tiled is not None:
            out += tiled[0].fragments(tiled[1], tiled[2])
        elif own > 0.0:
            out.append((self.start + lo, self.start + hi, own / (hi - lo)))
        if share > 0.0 and self.pool_len > 0.0:
            a = self.start + self.pool_start
            out.append((a, a + self.pool_len, share / self.pool_len))
        return out

    def sample_key(self, i: int, mass: float, uniform: float) -> float:
        """Global key of a draft of local token ``i`` from one uniform number."""
        lo, hi, own = self._slot(i)
        share = max(mass - own, 0.0)
        w = uniform * (own + share)
        if w < own or share <= 0.0 or self.pool_len <= 0.0:
            tiled = self._group_tiling(i)
            if tiled is not None:
                return tiled[0].sample_key(tiled[1], tiled[2], min(w / own, 1.0) if own > 0.0 else 0.0)
            return float(self.start + lo + (min(w / own, 1.0) * (hi - lo) if own > 0.0 else 0.0))
        return float(self.start + self.pool_start + (w - own) / share * self.pool_len)

    def certify(self, masses: np.ndarray, targets: np.ndarray, skip=(), tolerance: float | None = None):
        """``None`` if the slots and pool realise the atoms to float rounding, else what fails.

        The construction is exact in exact arithmetic; rounding can break it where its edge
        equations are ill-conditioned (a piece far shorter than 1e-8, keys whose powers
        underflow) or a root does not converge. So check, vectorised, the key laws as
        :meth:`sample_key` draws them: finite slot edges; keys that stay uniform -- the
        ``nu``-measure of the keys where the shares do not add up to 1 (a slot longer than
        its owners, reversed edges, slots past the piece or over each other, a pool its
        shares do not fill) -- and every atom's ``nu``-mass ``p_t nu(law) / |law|``, both
        to ``tolerance`` (absolute; default ``CERTIFY_TOLERANCE``: float keys resolve
        ~1e-16). A tiled group's own piece is certified when it is built (:meth:`tile_slot`);
        its members' ``nu``-masses here are the ones it is built for. ``skip``: groups (keys
        ``(front, first)``) whose members the caller checks instead.

        Args:
            masses: ``(n,)`` the atoms' draft masses, in piece order (as built).
            targets: ``(n,)`` their ``x``.
        """
        tol = CERTIFY_TOLERANCE if tolerance is None else tolerance
        n, length, k, pool_len = self.n, self.length, self.k, self.pool_len
        base = 1.0 - self.start
        dense = k * base ** (k - 1) if k > 1 else 1.0  # the largest nu-density in (and next to) the piece
        ends = [float(side.edges[-1] if side.solved else side.edge(side.size)) for side in (self.front, self.back)]
        defect = dense * max(ends[0] + ends[1] - length, 0.0)  # nu of keys not covered once
        if pool_len > 0.0:
            top, bottom = base - ends[0], max(base - ends[0] - pool_len, 0.0)
            nu_pool = max(top, 0.0) ** k - bottom**k
            density = nu_pool / pool_len
        else:
            density = None
        owned_sum, worst = 0.0, 0.0
        plain = None
        if density is not None and not skip and self.front._first is None and self.back._first is None:
            plain = self._certify_plain(dense, density)  # (the usual case: both sides at once)
        for front, side in ((True, self.front), (False, self.back)):
            if not side.size:
                continue
            checked = self._certify_side(front, side, skip, dense, density) if plain is None else plain[front]
            if isinstance(checked, str):
                return checked
            defect, owned_sum, worst = defect + checked[0], owned_sum + checked[1], max(worst, checked[2])
        middle = slice(self.front.size, n - self.back.size)  # (density exactly g: the pool only)
        if middle.start < middle.stop:
            if pool_len > 0.0:
                error = np.abs(masses[middle] * density - targets[middle])
            else:
                zero = np.zeros(middle.stop - middle.start)
                error = self._without_pool(masses[middle], targets[middle], zero, zero, dense)
            worst = max(worst, float(error.max()))
        if pool_len > 0.0:  # the shares p_t - own_t must fill the pool
            defect += abs((length - owned_sum) / pool_len - 1.0) * nu_pool
        if not defect <= tol:  # (also a NaN)
            return f"keys not uniform on nu-measure {defect:.3g}"
        if not worst <= tol:
            return f"a key law's nu-mass is off by {worst:.3g}"
        return None

    def _certify_side(self, front: bool, side, skip, dense: float, density):
        """:meth:`certify` for the slots of one side: ``(defect, owned length, worst error)``,
        or what fails. ``density``: the pool's mean ``nu``-density (``None``: no pool)."""
        m, length, k, base = side.size, self.length, self.k, 1.0 - self.start
        edges = side.edges if side.solved else side.edge(np.arange(m + 1))
        width = edges[1:] - edges[:-1]
        narrowest, last = float(width.min()), float(edges[-1])
        if not (math.isfinite(narrowest) and math.isfinite(last)):  # (a NaN or inf edge shows here)
            return "slot edges not finite"
        defect = dense * (max(-narrowest, 0.0) * m + max(last - length, 0.0))
        u = np.subtract(base, edges) if front else np.add(edges, base - length)
        power = power_by_squaring(np.maximum(u, 0.0, out=u), k)  # (1 - key)^K at every edge
        nu_slot = power[:-1] - power[1:] if front else power[1:] - power[:-1]
        owned, held, over, unshared = self._slot_shares(front, side, edges, width, power, nu_slot)
        defect += unshared
        checked = None
        for first_, (_, t_held, tokens) in side.tiled.items():
            if held is nu_slot:
                held = held.copy()
            held[tokens] = t_held  # (the group's own piece realises these)
            if (front, first_) in skip:
                checked = np.ones(m, dtype=bool) if checked is None else checked
                checked[first_ : int(side._end[first_])] = False
        owned_sum = last - float(edges[0]) if over is not None else float(owned.sum())
        if density is not None and over is not None:  # (the usual case: every slot owned in full)
            over *= density
            error = np.abs(np.subtract(held, over, out=over) - side.targets)  # (p_t - own_t = -over_t)
        elif density is not None:  # a key is drawn from the slot w.p. own / p_t, else from the pool
            error = np.abs(held + (side.masses - owned) * density - side.targets)
        else:
            error = self._without_pool(side.masses, side.targets, owned, held, dense)
        return defect, owned_sum, float(error.max() if checked is None else error[checked].max(initial=0.0))

    def _certify_plain(self, dense: float, density: float):
        """:meth:`_certify_side` for both sides at once (one vectorised pass), where no token
        is grouped and there is a pool: ``{True: front's (defect, owned length, worst error),
        False: back's}``, or ``None`` where a slot is reversed, longer than its token or not
        finite (then :meth:`_certify_side` checks, and says what fails).

        The same quantities as :meth:`_certify_side` in its usual case (every slot owned in
        full), bit for bit, on the two sides' edges laid end to end (with a *seam* between
        them, of width and mass 0, whose error is not read)."""
        front, back, nf = self.front, self.back, self.front.size
        edges = [side.edges if side.solved else side.edge(np.arange(side.size + 1)) for side in (front, back)]
        joined = np.concatenate(edges)
        width = np.subtract(joined[1:], joined[:-1])  # (np.diff, without its overhead)
        width[nf] = 0.0  # (the seam)
        over = width - np.concatenate((front.masses, _SEAM, back.masses))
        if not (width.min() >= 0.0 and over.max() <= 0.0):  # (also a NaN)
            return None
        base = 1.0 - self.start
        u = np.empty(joined.size)
        np.subtract(base, edges[0], out=u[: nf + 1])
        np.add(edges[1], base - self.length, out=u[nf + 1 :])
        power = power_by_squaring(np.maximum(u, 0.0, out=u), self.k)  # (1 - key)^K at every edge
        held = np.subtract(power[1:], power[:-1])
        np.negative(held[:nf], out=held[:nf])  # (front: nu from the top down)
        over *= density
        error = np.abs(np.subtract(held, over, out=over) - np.concatenate((front.targets, _SEAM, back.targets)))
        out = {}
        for is_front, side_edges, part in ((True, edges[0], error[:nf]), (False, edges[1], error[nf + 1 :])):
            last = float(side_edges[-1])  # (no slot is reversed: only the end can stick out)
            out[is_front] = (dense * max(last - self.length, 0.0), last - float(side_edges[0]),
                             float(part.max(initial=0.0)))
        return out

    @staticmethod
    def _slot_shares(front: bool, side, edges, width, power, nu_slot):
        """``(owned, held, over, defect)``: the length of its slot each token owns, the
        ``nu`` of that, ``width - p`` where every token owns all of its slot (else ``None``),
        and the ``nu``-measure of slot keys nobody owns."""
        m, side_masses = side.size, side.masses
        if side._first is None:  # one token per slot: it owns all of it unless too long
            over = width - side_masses
            if not (float(width.min()) < 0.0 or float(over.max()) > 0.0):  # (reversed: counted by the caller)
                return width, nu_slot, over, 0.0
            owned = np.maximum(np.minimum(width, side_masses), 0.0)
            part = np.divide(owned, width, out=np.zeros(m), where=width > 0.0)
            defect = float(np.sum(np.where(width > 0.0, (1.0 - part) * nu_slot, 0.0)))
            return owned, part * nu_slot, None, defect
        # a group's members share the group's slot
        grouped = side._first >= 0
        first, end = np.maximum(side._first, 0), side._end
        lo = np.where(grouped, edges[first], edges[:-1])
        hi = np.where(grouped, edges[end], edges[1:])
        slot_nu = np.where(grouped, (power[first] - power[end]) * (1.0 if front else -1.0), nu_slot)
        owned = np.where(hi > lo, np.where(grouped, side._own, np.minimum(width, side_masses)), 0.0)
        part = np.divide(owned, hi - lo, out=np.zeros(m), where=hi > lo)
        defect = float(np.sum(np.where(grouped | ~(hi > lo), 0.0, (1.0 - part) * slot_nu)))
        heads = np.flatnonzero(side._first == np.arange(m))
        g_width = edges[end[heads]] - edges[heads]
        g_own = np.bincount(side._first[grouped], weights=side._own[grouped], minlength=m)[heads]
        defect += float(np.sum(np.abs(g_width - g_own) * np.divide(
            slot_nu[heads], g_width, out=np.zeros(heads.size), where=g_width > 0.0)))
        return owned, part * slot_nu, None, defect

    @staticmethod
    def _without_pool(masses, targets, owned, held, dense):
        """|nu-mass - x| of atoms whose keys come from their slots only (no pool): an empty
        law (p_t below the keys' resolution) is a point, of nu-mass at most p_t dense."""
        real = np.divide(masses * held, owned, out=masses * dense, where=owned > 0.0)
        return np.where(owned > 0.0, np.abs(real - targets), np.maximum(real, targets))

    def certify_ends(self, tolerance: float | None = None):
        """What :meth:`certify` checks without solving every slot edge, for a piece built
        lazily (more than ``ALL_EDGES_BELOW`` atoms; solving all its edges would cost more than
        building it): finite ends of the slots, front and back slots apart. Its atoms are
        then certified one by one, before any key is drawn from them (:meth:`certify_atom`)."""
        tol = CERTIFY_TOLERANCE if tolerance is None else tolerance
        k, base = self.k, 1.0 - self.start
        dense = k * base ** (k - 1) if k > 1 else 1.0
        ends = [float(side.edge(side.size)) if side.size else 0.0 for side in (self.front, self.back)]
        if not all(math.isfinite(e) for e in ends):
            return "slot edges not finite"
        if not dense * max(ends[0] + ends[1] - self.length, 0.0) <= tol:
            return "front and back slots overlap"
        return None

    def certify_atom(self, i: int, mass: float, target: float, tolerance: float | None = None):
        """:meth:`certify` for local atom ``i`` alone (draft mass ``mass``, ``x`` ``target``):
        finite, ordered slot edges, the part of its slot that nobody owns and its ``nu``-mass,
        to ``tolerance`` (a tiled group's piece is built, and so certified, here)."""
        tol = CERTIFY_TOLERANCE if tolerance is None else tolerance
        k, base = self.k, 1.0 - self.start
        dense = k * base ** (k - 1) if k > 1 else 1.0
        if i < self.front.size:
            side, j = self.front, i
        elif self.n - 1 - i < self.back.size:
            side, j = self.back, self.n - 1 - i
        else:
            side = None  # (density exactly g: the pool only)
        defect, held = 0.0, 0.0
        lo, hi, own = self._slot(i)
        if side is not None:
            raw = side.pair(j)
            if not (math.isfinite(raw[0]) and math.isfinite(raw[1])):
                return "slot edges not finite"
            defect += dense * max(raw[0] - raw[1], 0.0)
            if hi > lo:
                nu_slot = (base - lo) ** k - max(base - hi, 0.0) ** k
                first = side.group_first(j)
                if first >= 0:  # the group's slot: its members must own all of it
                    owned = float(side._own[first : side.group_end(j)].sum())
                    defect += abs(1.0 - owned / (hi - lo)) * nu_slot
                else:
                    defect += (1.0 - own / (hi - lo)) * nu_slot
                tiled = self._group_tiling(i)
                if tiled is not None:
                    _, held_all, _ = side.tiled[first]
                    held = float(held_all[tiled[1]])
                else:
                    held = own / (hi - lo) * nu_slot
        if self.pool_len > 0.0:
            start = self.pool_start
            density = ((base - start) ** k - max(base - start - self.pool_len, 0.0) ** k) / self.pool_len
            error = abs(held + max(mass - own, 0.0) * density - target)
        else:
            error = abs(mass * held / own - target) if own > 0.0 else max(mass * dense, target)
        if not defect <= tol:
            return f"keys not uniform on nu-measure {defect:.3g}"
        if not error <= tol:
            return f"a key law's nu-mass is off by {error:.3g}"
        return None


def certify_piece(piece, masses: np.ndarray, targets: np.ndarray, tolerance: float | None = None):
    """``PoolPiece.certify`` for either kind of piece (the greedy: :func:`certify_greedy`)."""
    if isinstance(piece, PoolPiece):
        return piece.certify(masses, targets, tolerance=tolerance)
    tol = CERTIFY_TOLERANCE if tolerance is None else tolerance
    return certify_greedy(piece, masses, targets, GREEDY_CERTIFY_FACTOR * tol)


class _Side:
    """The front (or back) slots of a :class:`PoolPiece`, built lazily.

    Tokens come from the most extreme density inwards and ``edges`` are measured from that
    end of the piece: token ``i``'s own slot is ``[edges[i], edges[i + 1]]`` where
    ``edges[i + 1]`` solves ``Phi(edge) = want[i]`` (``Phi`` concave, rising on
    ``[0, extent]`` up to ``most``). Only the edges that are needed are solved: a token
    provably fits its slot when the window of length ``p_t`` that starts at an *upper
    bound* of its first edge (the chord of ``Phi``) already holds enough (front) or
    little enough (back) ``nu``; the others are checked exactly, and the ones that do not
    fit are grouped with the tokens before them (:meth:`settle`).
    """

    def __init__(self, masses, targets, g, *, want, root, window_nu, extent, most, denser):
        self.masses, self.targets, self.g, self.want = masses, targets, g, want
        # edges[i + 1] = to_edge(u) where u^K - g u = rhs_of(want[i]) on the branch rising
        # (or not), whose far end is far
        self.rhs_of, self.to_edge, self.k, self.rising, self.far = root
        self.window_nu, self.denser = window_nu, denser
        self.extent, self.most = extent, most
        self.size = masses.size
        self.edges = np.full(self.size + 1, np.nan)
        self.edges[0] = 0.0
        self.solved = self.size == 0  # all edges known
        # (phi, slope, most): the edge equation phi(edge) = want without cancellation, edges
        # in [0, most], to refine the u-space roots (a piece short against its keys' scale,
        # see PoolPiece.build); None: not needed
        self.refine = None
        # groups: (first, end, own) of every token, as arrays made at the first group
        # (first = -1: no group); first -> (own lengths, nu-masses, tokens) of a tiled
        # group, densest first
        self._first = self._end = self._own = None
        self.group_attempts = 0  # calls of _group (a run of tokens is grouped at once)
        self.tiled: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def group_first(self, i: int) -> int:
        """First token of token ``i``'s group, -1 if it has none."""
        return -1 if self._first is None else int(self._first[i])

    def group_end(self, i: int) -> int:
        return int(self._end[i])

    def group_spans(self) -> list[tuple[int, int]]:
        """``(first, end)`` of every group."""
        if self._first is None:
            return []
        firsts = np.unique(self._first[self._first >= 0])
        return [(int(s), int(self._end[s])) for s in firsts]

    def edge(self, i):
        """``edges[i]`` (an int or an index array), solving the missing ones."""
        if self.solved:  # (nothing missing)
            return self.edges[i]
        idx = np.atleast_1d(i)
        missing = idx[np.isnan(self.edges[idx])]
        if missing.size:  # (a repeated index is solved twice, to the same value)
            roots = power_root(self.rhs_of(self.want[missing - 1]), self.g, self.k, self.rising, self.far)
            self.edges[missing] = self._refined(np.clip(self.to_edge(roots), 0.0, self.extent), missing - 1)
            if idx.size == self.edges.size:  # all of them: ordered (roots of neighbours can
                np.maximum.accumulate(self.edges, out=self.edges)  # cross by rounding, ~1e-28)
        return self.edges[i]

    def _refined(self, edges: np.ndarray, rows) -> np.ndarray:
        """``edges`` (of ``want[rows]``), refined where the side has an exact edge equation."""
        if self.refine is None:
            return edges
        return concave_root(edges, self.want[rows], *self.refine, self.g)

    @staticmethod
    def solve_all(front: _Side, back: _Side) -> None:
        """Every edge of both sides, in one Newton iteration (one call's overhead, not two)."""
        if front.size + back.size <= 16:
            for side in (front, back):
                side.edge(np.arange(side.size + 1))
                side.solved = True
            return
        rhs = [side.rhs_of(side.want) for side in (front, back)]
        roots = power_root_both(rhs[0], rhs[1], front.g, front.k, front.far, back.far)
        for side, part in zip((front, back), (roots[: front.size], roots[front.size :])):
            side.edges[1:] = side._refined(np.minimum(np.maximum(side.to_edge(part), 0.0), side.extent), slice(None))
            np.maximum.accumulate(side.edges, out=side.edges)  # (rounding can cross neighbours)
            side.solved = True

    def settle(self) -> bool:
        """Find the tokens that need a group, and group them; False if impossible."""
        if self.size == 0:
            return True
        masses = self.masses
        if self.solved:  # every edge is known: check every slot
            widths = self.edges[1:] - self.edges[:-1]
            too_long = np.flatnonzero(widths > masses * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE)
            return self._group_all(too_long)
        if self.size <= 64 or self.extent <= 0.0 or self.most <= 0.0:
            suspects = np.arange(self.size)
        else:
            bound = np.concatenate([[0.0], self.want[:-1]])  # (want before each token, then
            np.divide(bound, self.most, out=bound)  # in place: fewer V-long arrays at once)
            np.clip(bound, 0.0, 1.0, out=bound)
            bound *= self.extent  # >= edges[:-1] (chord)
            held = self.window_nu(bound, bound + masses)
            fits = held >= self.targets if self.denser else held <= self.targets
            suspects = np.flatnonzero(~fits)
        too_long = suspects
        if suspects.size:
            needed = np.zeros(self.size + 1, dtype=bool)  # both edges of each suspect, once
            needed[suspects] = needed[suspects + 1] = True
            self.edge(np.flatnonzero(needed))
            widths = self.edges[suspects + 1] - self.edges[suspects]
            too_long = suspects[widths > masses[suspects] * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE]
        return self._group_all(too_long)

    def _group_all(self, too_long: np.ndarray) -> bool:
        """Group the tokens ``too_long`` (ascending) with their neighbours; False if impossible."""
        if not too_long.size:
            return True
        dens = self.targets / self.masses
        i = 0
        while i < too_long.size:
            t = int(too_long[i])
            if self.group_first(t) >= 0:  # already in the group of an earlier token
                i += 1
                continue
            reach = 1  # the group reaches this many tokens back (and forward), doubling
            while True:
                s = max(t - reach, 0)
                s = max(self.group_first(s), 0) if self.group_first(s) >= 0 else s  # never split a group
                # the too-long tokens after t, each within reach of the one before: one group
                # (next to a nearly tight prefix or suffix they come in long runs)
                steps = np.diff(too_long[i:])
                last = i + (int(np.argmax(steps > reach)) if np.any(steps > reach) else steps.size)
                e = int(too_long[last]) + 1
                if any(self._group(s, end, dens) for end in dict.fromkeys((e, min(e + reach, self.size)))):
                    break
                if (s == 0 and e + reach >= self.size) or reach >= MAX_GROUP:
                    return False  # give up: the greedy fallback for the piece
                reach *= 2
            i = int(np.searchsorted(too_long, self.group_end(t)))
        return True

    def _group(self, s: int, e: int, dens) -> bool:
        """Make tokens ``s..e-1`` a group, spread evenly or else tiled; False if neither works."""
        self.group_attempts += 1
        masses, g = self.masses[s:e], self.g
        lo, hi = float(self.edge(s)), float(self.edge(e))
        if hi <= lo:
            return False
        d = float(self.window_nu(lo, hi)) / (hi - lo)
        with np.errstate(divide="ignore", invalid="ignore"):  # (d = g: no spreading; tiled below)
            own = masses * (dens[s:e] - g) / (d - g)
        if np.all(own <= masses * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE):
            own *= (hi - lo) / own.sum()  # the group owns exactly its width
            self._members(s, e, np.minimum(own, masses))
            return True
        return self._tile_group(s, e, lo, hi)

    def _tile_group(self, s: int, e: int, lo: float, hi: float) -> bool:
        """Tiling instead of spreading: tokens ``s..e-1`` whose uniform group fails (a nearly
        tight prefix or suffix, whose densest keys the spreading would dilute) tile their
        joint slot ``[lo, hi]`` with the greedy (fact 3).

        Token ``t`` owns ``own_t <= p_t`` of the slot, where it needs the ``nu``-mass
        ``x_t - g (p_t - own_t)`` (the rest of its length is in the pool), i.e. the mean
        density ``g + p_t (b_t - g) / own_t`` (front; back: ``g - p_t (g - b_t) / own_t``).
        *Water-filling*: the most extreme tokens own all their length (density ``b_t``), the
        others share one level ``|density - g| = A``, with ``A`` set so that the owned
        lengths fill the slot. Densities then fall monotonically from the slot's denser end,
        and the greedy's prefix test holds whenever every prefix of the group (from this
        side's end) is at least as long as its own slots -- always for a group that starts
        at the end (``s = 0``), by the prefix lemma. The test is checked, not assumed."""
        filled = self.fill_slot(self.masses[s:e], self.targets[s:e], lo, hi)
        if filled is None:
            return False
        own, held, order = filled
        self._members(s, e, np.minimum(own, self.masses[s:e]))
        self.tiled[s] = (own[order], held[order], s + order)
        return True

    def fill_slot(self, masses, targets, lo: float, hi: float):
        """Water-filling (:meth:`_tile_group`) of members with ``masses``/``targets`` (this
        side's order) into the slot ``[lo, hi]``, checked for the greedy's prefix test.

        Returns:
            ``None`` if it fails, else ``(own, held, order)``: each member's owned length
            and ``nu``-mass, and the members densest first.
        """
        width = hi - lo
        total = float(masses.sum())
        if width > total * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE:
            return None  # the tokens cannot own more than their length
        gap = np.abs(targets / masses - self.g) * masses  # p_t |b_t - g|, side order
        if width >= total:
            own = masses.copy()
        else:
            # j tokens own fully: A_j = (gap of the others) / (width - their length); the
            # first j with A_j >= |b_j - g| is the level (|b - g| falls along the side)
            owned_before = np.concatenate([[0.0], np.cumsum(masses)[:-1]])
            gap_after = np.cumsum(gap[::-1])[::-1]
            with np.errstate(divide="ignore", invalid="ignore"):  # full tokens past the width
                level = np.where(owned_before < width, gap_after / (width - owned_before), -1.0)
            j = int(np.argmax(level >= gap / masses))
            own = np.concatenate([masses[:j], gap[j:] / level[j]])
        own *= width / own.sum()  # exactly the slot's width
        held = targets - self.g * (masses - own)
        order = np.arange(masses.size) if self.denser else np.arange(masses.size)[::-1]  # densest first
        reach = np.cumsum(own[order])
        room = self.window_nu(lo, lo + reach) if self.denser else self.window_nu(hi - reach, hi)
        if np.any(held < 0.0) or np.any(own > masses * (1.0 + SLOT_TOLERANCE) + EDGE_TOLERANCE) or np.any(
            np.cumsum(held[order]) > room + EDGE_TOLERANCE
        ):
            return None
        return own, held, order

    def _members(self, s: int, e: int, own: np.ndarray) -> None:
        """Record tokens ``s..e-1`` as one group owning ``own`` of its slot (it may swallow
        earlier groups: their tilings go)."""
        if self._first is None:
            self._first = np.full(self.size, -1, dtype=np.int64)
            self._end = np.zeros(self.size, dtype=np.int64)
            self._own = np.zeros(self.size)
        self._first[s:e], self._end[s:e], self._own[s:e] = s, e, own
        for first in [f for f in self.tiled if s <= f < e]:
            del self.tiled[first]

    def slot(self, i: int):
        """``(lo, hi, own)`` of token ``i``, measured from this side's end."""
        s = self.group_first(i)
        if s >= 0:
            return float(self.edge(s)), float(self.edge(int(self._end[i]))), float(self._own[i])
        lo, hi = self.pair(i)
        return lo, hi, min(hi - lo, float(self.masses[i]))

    def pair(self, i: int) -> tuple[float, float]:
        """``(edges[i], edges[i + 1])`` as floats, solving them if missing."""
        lo, hi = float(self.edges[i]), float(self.edges[i + 1])
        if math.isnan(lo) or math.isnan(hi):  # (not solved yet)
            lo, hi = map(float, self.edge(np.array([i, i + 1])))
        return lo, hi
