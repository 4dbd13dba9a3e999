"""Key sets by the greedy tiling (facts 2 and 3 of :mod:`mspec.fast.optimal_selection`), with
the rounding guards of the fast path: its exact fallback (``reference.py`` is the plain one).

Notation (paper): K i.i.d. drafts from ``p`` (``draft``), target ``q`` (``target``),
``g(m) = 1 - (1 - m)^K`` and ``f(A) = g(p(A))`` = P(some draft lies in A).

Fact 2 (:mod:`mspec.fast.optimal_selection.scheme`): if the key of a draft of token ``t`` is
uniform on a set ``M_t`` of length ``p_t`` and the sets tile ``[0, 1]``, the smallest key
selects ``t`` with probability ``nu(M_t)``, so realising ``x`` is a tiling problem: sets
``M_t`` of length ``p_t`` and ``nu``-mass ``x_t``.

**3. The tiling, piece by piece, greedily.** Pieces of the minorant are tight
(``x(prefix) = f(prefix)`` at their ends), so piece ``j`` gets its own interval
``[u_j, u_j + P_j]`` of key space (earlier pieces first). Inside a piece, take the tokens
in order of ``x_t / p_t`` descending; each takes the interval of length ``p_t`` of the
still-free part of the piece, *measured with the used parts squeezed out*, whose
``nu``-mass is exactly ``x_t``. This greedy never gets stuck (book: the free part keeps
majorising what is left). In practice each new token wraps as a shell around the block
of the tokens before it (a *window* ``[S, S + c]`` that grows on both sides); when a
token's share is too small for that, it opens a new block further down, leaving a gap
that later shells fill from below. So the free space is a stack of gaps above the
active block plus everything below it, each token is one scalar root solve, and long
runs of shells are solved together, vectorised.
"""

from __future__ import annotations

import math

import numpy as np

#: most safeguarded-Newton steps for a window position
NEWTON_STEPS = 80


#: stop when every window's nu-mass is this close to its target ...
NU_TOLERANCE = 1e-15


#: ... or its bracket is this narrow
WIDTH_TOLERANCE = 1e-15


#: a piece of slots and a pool (and fact 6's spread) must realise every atom's nu-mass x,
#: and keep keys uniform, to this (absolute nu-measure; rounding leaves ~1e-15, slots may
#: exceed their token by SLOT_TOLERANCE), or the scheme falls back to the greedy tiling,
#: recorded in ``OptimalSelection.fallbacks``; the greedy fallback, the exact path of last
#: resort, is held to GREEDY_CERTIFY_FACTOR times it (else SchemeError)
CERTIFY_TOLERANCE = 1e-12


GREEDY_CERTIFY_FACTOR = 10.0


class GreedyPiece:
    """Greedy tiling of one piece, built lazily token by token (fact 3).

    Coordinates: ``m`` in ``[0, P]`` is draft mass below the top of the piece; the piece
    starts at global key ``u``, so ``nu`` of ``[a, b]`` is ``R(a) - R(b)`` with
    ``R(m) = (1 - u - m)^K``.

    State of the greedy: the used blocks lie above ``frontier`` and everything below it is
    still free; the free gaps between blocks form a stack (``gap_start``/``gap_end``, the
    last one nearest the active block). A token either wraps the active block as a shell
    -- its top part eats the stack from the bottom of the nearest gap upwards, its bottom
    part eats from ``frontier`` down -- or, when even the bottom alone would give it too
    much ``nu``, opens a new block further down, leaving a new gap. Each step is a scalar
    root solve (:mod:`.runs` solves long runs of shells together, vectorised: the fast
    path's greedy). Each tiled token keeps its key set as intervals (``frag_start`` /
    ``frag_end``, rows ``first[i]:first[i] + count[i]``).

    Rounding: windows are measured without cancellation (:meth:`_window`), a new block is
    placed by the token's own density ``x / p``, targets are scaled to what the free keys
    hold (:meth:`_scale`, so that roundings do not pile up on the last token), a window that
    rounding put a little off the one before is moved back, and a token below the keys'
    resolution is a point that opens no block (see "Exactness" in :mod:`mspec.fast.optimal_selection.scheme`).
    """

    def __init__(self, masses: np.ndarray, targets: np.ndarray, start: float, num_drafts: int):
        self.masses, self.targets, self.start, self.k = masses, targets, start, num_drafts
        self.size = masses.size
        self.length = float(masses.sum())
        self.base = 1.0 - start
        # what the tokens from i on should hold, in extended precision: a float cumsum over
        # ~1e4 tokens drifts by ~1e-12, which the last token would absorb
        self.rest_target = np.append(np.cumsum(targets[::-1], dtype=np.longdouble)[::-1].astype(float), 0.0)
        self.point_x = 0.0  # x of the tokens tiled as points (no float length; see _scale)
        self._used = [0.0, 0.0]  # nu of the sets so far, and its rounding (Kahan)
        # a piece short against its keys' scale (as in PoolPiece.build) takes nu without
        # cancellation, and tolerances relative to its own length and nu-mass
        self.fine = self.length < 0.5 * self.base
        self.nu_tol = NU_TOLERANCE * (float(self.nu(self.length)) if self.fine else 1.0)
        self.width_tol = WIDTH_TOLERANCE * (self.length if self.fine else 1.0)
        self._p, self._x = masses.tolist(), targets.tolist()
        self.done = 0  # tokens tiled so far
        self.blocks = 0  # blocks opened (a shell never opens one)
        self.shell_run = 0  # consecutive shells just tiled
        self.gap_start: list[float] = []
        self.gap_end: list[float] = []
        self.frontier = 0.0
        self.first = np.zeros(self.size, dtype=np.int64)
        self.count = np.zeros(self.size, dtype=np.int64)
        self._frag_start: list[float] = []
        self._frag_end: list[float] = []

    @property
    def phases(self) -> int:
        """Blocks the tiling opened so far (1 when every token after the first is a shell)."""
        return self.blocks

    def nu(self, m):
        if self.fine:  # -base^K expm1(K log1p(-m / base)): relative rounding (m <= length < base)
            return -(self.base**self.k) * np.expm1(self.k * np.log1p(-np.asarray(m) / self.base))
        return self.base**self.k - np.maximum(self.base - m, 0.0) ** self.k

    def _density(self, m: float) -> float:
        r = self.base - m
        return self.k * r ** (self.k - 1) if r > 0.0 else 0.0

    def ensure(self, i: int) -> None:
        """Tile tokens ``0..i`` (local indices), one by one."""
        while self.done <= i:
            self._step()

    def _solve(self, fn, slope, lo: float, hi: float, increasing: bool, tol: float | None = None) -> float:
        """Root of the monotone ``fn`` on ``[lo, hi]`` (clamped): Newton in a bracket, to
        ``|fn| <= tol`` (default: the piece's) or a bracket of the piece's width tolerance."""
        tol = self.nu_tol if tol is None else tol
        f_lo, f_hi = fn(lo), fn(hi)
        if (f_lo >= 0.0) if increasing else (f_lo <= 0.0):
            return lo
        if (f_hi <= 0.0) if increasing else (f_hi >= 0.0):
            return hi
        z = 0.5 * (lo + hi)
        for _ in range(NEWTON_STEPS):
            val = fn(z)
            if abs(val) <= tol or hi - lo <= self.width_tol:
                d = slope(z)  # one more Newton step: the residual drops to rounding, of either sign
                step = z - val / d if d != 0.0 else z
                z = step if lo <= step <= hi else z
                break
            if (val < 0.0) == increasing:
                lo = z
            else:
                hi = z
            d = slope(z)
            step = z - val / d if d != 0.0 else lo - 1.0
            z = step if lo < step < hi else 0.5 * (lo + hi)
        return z

    def _window(self, a: float, size: float) -> float:
        """``nu([a, a + size])`` (piece coordinates), relatively exact: ``w^K (1 - (1 - size /
        w)^K)`` with ``w = base - a``. (A difference of powers loses a tiny window to rounding,
        and so do its float ends, ``a + size``: a token's window was then placed by noise,
        where the density is off by up to ~1e-16 / size -- a first token of 1e-16 anywhere.)"""
        w = self.base - a
        if not (w > 0.0 and size > 0.0):
            return 0.0
        share = size / w
        return w**self.k if share >= 1.0 else -(w**self.k) * math.expm1(self.k * math.log1p(-share))

    def _mean_density(self, a: float, size: float) -> float:
        """``nu([a, a + size]) / size`` without cancellation (nor subnormal ``nu``)."""
        w = self.base - a
        if not w > 0.0:
            return 0.0
        share = size / w
        if share < 1e-10:  # (two terms of the series: the rest is below rounding)
            return self.k * w ** (self.k - 1) * (1.0 - 0.5 * (self.k - 1) * share)
        return self._window(a, size) / size

    def _mean_slope(self, a: float, size: float) -> float:
        """The derivative of :meth:`_mean_density` in ``a``."""
        w = self.base - a
        if not w > 0.0:
            return 0.0
        if size < 1e-10 * w:
            return -self.k * (self.k - 1) * w ** (self.k - 2) if self.k > 1 else 0.0
        return (self._density(a + size) - self._density(a)) / size

    def _scale(self, i: int) -> float:
        """The free space's ``nu`` over what tokens ``i..`` should hold: their targets are
        scaled by it (by at most 1e-6). Else the roundings and tolerances of earlier root
        solves would all land on the piece's last token (~1e-12 over ~1e4 tokens). (A token
        below the keys' resolution is a point, which takes no length but is selected with
        ``~p h(point) ~ x``: its ``x`` counts as used.)"""
        free = self._window(0.0, self.length) - self._used[0]
        rest = float(self.rest_target[i])
        return min(max((free - self.point_x) / rest, 1.0 - 1e-6), 1.0 + 1e-6) if rest > 0.0 else 1.0

    def _use(self, nu: float) -> None:
        """Add the ``nu`` of new sets to the used keys' (compensated: ~1e4 terms)."""
        used, rounding = self._used
        step = nu - rounding
        total = used + step
        self._used = [total, (total - used) - step]

    def _step(self) -> None:
        """Tile token ``done`` by itself (a shell or a new block)."""
        i = self.done
        p, top = self._p[i], self.frontier
        x = self._x[i] * (self._scale(i) if i else 1.0)
        self.first[i] = len(self._frag_start)
        bottom_only = self._window(top, min(p, self.length - top))
        if i == 0 or bottom_only > x + min(self.nu_tol, NU_TOLERANCE * x) or not self.gap_start:
            self._new_block(p, top, x)
        else:
            self._shell(p, top, x)
            if len(self._frag_start) == self.first[i]:  # p below the keys' resolution: a point
                self._frag_start.append(top)
                self._frag_end.append(top)
                self.point_x += x
            self.shell_run += 1
        self.count[i] = len(self._frag_start) - self.first[i]
        self.done = i + 1

    def _new_block(self, p: float, top: float, x: float) -> None:
        """A new block ``[top + g, top + g + p]`` below the frontier, leaving the gap ``g``.

        Its mean density falls as ``g`` grows: solved to the token's own density ``x / p``,
        which picks where the block goes."""
        g = self._solve(lambda g: self._mean_density(top + g, p) - x / p,
                        lambda g: self._mean_slope(top + g, p),
                        0.0, max(self.length - top - p, 0.0), increasing=False,
                        tol=NU_TOLERANCE * x / p)
        if self.start + (top + g) == self.start + (top + g + p):
            # below the keys' resolution there: a point, which opens no block (a block
            # would anchor the shells after it, at a density that p and x this small do
            # not resolve: the first token of 4e-323 put them 2% off)
            self._frag_start.append(top + g)
            self._frag_end.append(top + g)
            self.point_x += x
            return
        if g > 0.0:
            self.gap_start.append(top)
            self.gap_end.append(top + g)
        self._frag_start.append(top + g)
        self._frag_end.append(top + g + p)
        self.frontier = top + g + p
        self.blocks += 1
        self.shell_run = 0
        self._use(self._window(top + g, p))

    def _shell(self, p: float, top: float, x: float) -> None:
        """A shell around the active block: length ``a`` from the nearest gaps (eaten from
        their bottom upwards), ``p - a`` below the frontier, with ``nu``-mass ``x``."""
        nu, dens = self._window, self._density
        used, nu_used = 0.0, 0.0  # length and nu of whole gaps eaten so far
        while True:
            a_gap, e_gap = self.gap_start[-1], self.gap_end[-1]
            room = min(e_gap - a_gap, p - used)

            def total(a, e=e_gap, used=used, nu_used=nu_used):
                return nu_used + nu(e - a, a) + nu(top, p - used - a) - x

            if total(room) < 0.0 and room == e_gap - a_gap and len(self.gap_start) > 1:
                used, nu_used = used + room, nu_used + nu(a_gap, room)  # the whole gap
                self._frag_start.append(a_gap)
                self._frag_end.append(e_gap)
                self.gap_start.pop()
                self.gap_end.pop()
                continue
            a = self._solve(total, lambda a, e=e_gap, used=used: dens(e - a) - dens(top + p - used - a),
                            0.0, room, increasing=True)
            if a > 0.0:
                self._frag_start.append(e_gap - a)
                self._frag_end.append(e_gap)
            self.gap_end[-1] = e_gap - a
            if self.gap_end[-1] <= self.gap_start[-1]:
                self.gap_start.pop()
                self.gap_end.pop()
            below = p - used - a
            if below > 0.0:
                self._frag_start.append(top)
                self._frag_end.append(top + below)
            self.frontier = top + below
            self._use(nu_used + nu(e_gap - a, a) + nu(top, below))
            return

    def fragments(self, i: int, mass: float = 0.0) -> list[tuple[float, float, float]]:
        """Key set of local token ``i`` as global intervals ``(start, end, 1.0)``."""
        self.ensure(i)
        a = self.first[i]
        return [(self.start + self._frag_start[r], self.start + self._frag_end[r], 1.0)
                for r in range(a, a + self.count[i])]

    def sample_key(self, i: int, mass: float, uniform: float) -> float:
        """Global key of a draft of local token ``i`` from one uniform number."""
        self.ensure(i)
        a = self.first[i]
        starts = self._frag_start[a : a + self.count[i]]
        ends = self._frag_end[a : a + self.count[i]]
        w = uniform * sum(e - s for s, e in zip(starts, ends))
        for s, e in zip(starts, ends):
            if w < e - s:
                return self.start + s + w
            w -= e - s
        return self.start + ends[-1]


def certify_greedy(piece, masses: np.ndarray, targets: np.ndarray, tolerance: float | None = None):
    """``None`` if the greedy tiling ``piece`` (a :class:`GreedyPiece`, tiled in full here) realises
    its atoms, else what fails: as ``PoolPiece.certify``, every atom's ``nu``-mass
    ``p_t nu(sets) / |sets|`` and the ``nu``-measure of the keys not covered exactly once
    (gaps, overlaps, sets outside the piece, lengths other than ``p_t``), to ``tolerance``."""
    tol = GREEDY_CERTIFY_FACTOR * CERTIFY_TOLERANCE if tolerance is None else tolerance
    k, lo, hi = piece.k, piece.start, piece.start + piece.length

    def nu(a, b):
        return (1.0 - a) ** k - (1.0 - b) ** k

    starts, ends, defect = [], [], 0.0
    for i in range(piece.size):
        sets = np.array([f[:2] for f in piece.fragments(i)], dtype=float).reshape(-1, 2)
        a, b = sets[:, 0], sets[:, 1]
        drawn, held = float(np.sum(b - a)), float(np.sum(nu(a, b)))
        # (an empty set, p_t below the keys' resolution, is a point: nu-mass p_t x density)
        error = abs(float(masses[i]) * held / drawn - float(targets[i])) if drawn > 0.0 else max(
            float(masses[i]) * k * (1.0 - lo) ** (k - 1), float(targets[i]))
        if not error <= tol:
            return f"greedy: the set of atom {i} has a nu-mass off by {error:.3g}"
        if drawn > 0.0:
            defect += abs(float(masses[i]) / drawn - 1.0) * held  # (keys drawn at density 1 / |sets|)
        starts.append(a)
        ends.append(b)
    a, b = np.concatenate(starts), np.concatenate(ends)
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    reach = np.maximum.accumulate(b)  # the union of the sets, as merged intervals
    new = np.flatnonzero(np.concatenate([[True], a[1:] > reach[:-1]]))
    u0, u1 = a[new], reach[np.append(new[1:] - 1, a.size - 1)]
    union = float(np.sum(nu(u0, u1)))
    inside = float(np.sum(nu(np.clip(u0, lo, hi), np.clip(u1, lo, hi))))
    defect += float(np.sum(nu(a, b))) - union + union - inside + float(nu(lo, hi)) - inside
    if not defect <= tol:
        return f"greedy: keys not uniform on nu-measure {defect:.3g}"
    return None
