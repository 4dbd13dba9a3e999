"""Fast path of the greedy tiling: long runs of shells solved together, vectorised.

The scalar greedy (:class:`~mspec.fast.optimal_selection.greedy.GreedyPiece`) tiles one token per
step. After :data:`SHELL_RUN` shells in a row, :class:`RunPiece` instead solves the windows
of many tokens at once: in the free space with the used blocks squeezed out, the tokens
``first..j`` of a run of shells together occupy one window ``[S_j, S_j + c_j]`` (``c_j`` their
total length) whose ``nu``-mass is their total ``x``; the window of each prefix is one
root of a monotone function of ``S_j``, solved for all ``j`` by one vectorised Newton
iteration. The run ends at the first token whose window does not grow on both sides (it
needs a new block); the scalar step takes it from there. The result is the same tiling as
the scalar greedy's and ``reference.py``'s, to rounding (tested on the same inputs).
"""

from __future__ import annotations

import numpy as np

from mspec.fast.optimal_selection.greedy import NEWTON_STEPS, GreedyPiece

#: after this many shells in a row, solve the following ones together (vectorised)
SHELL_RUN = 16
#: first number of tokens such a run tries at once (then x4 while no new block is needed)
FIRST_CHUNK = 32


class _FreeSpace:
    """The free keys of a piece during a run: the stack of gaps plus everything below the
    frontier, in *squeezed* coordinates ``z`` (free length from the top)."""

    def __init__(self, piece: GreedyPiece):
        self.gap_start = np.array(piece.gap_start + [piece.frontier])
        gap_end = np.array(piece.gap_end + [piece.length])
        self.lengths = gap_end - self.gap_start
        self.squeezed = np.concatenate([[0.0], np.cumsum(self.lengths)])  # squeezed start of each gap
        self.nu_before = np.concatenate([[0.0], np.cumsum(piece.nu(gap_end) - piece.nu(self.gap_start))])
        self.free, self.last = self.squeezed[-1], self.gap_start.size - 1
        self.seam = self.squeezed[-2]  # the active block sits here, squeezed out
        self.base, self.k, self.fine, self.nu = piece.base, piece.k, piece.fine, piece.nu
        # nu(m) - nu(gap start) = gap_nu0 - rest^k (fine: gap_nu0 = nu(gap start))
        self.gap_nu0 = piece.nu(self.gap_start) if piece.fine else np.maximum(self.base - self.gap_start, 0.0) ** self.k

    def where(self, z):
        """Gap index and original position of squeezed coordinate ``z >= 0``."""
        j = np.minimum(np.searchsorted(self.squeezed, z, side="right") - 1, self.last)
        return j, self.gap_start[j] + np.minimum(z - self.squeezed[j], self.lengths[j])

    def nu_and_density(self, z):
        """``nu`` of the first ``z`` of free length, and the density at ``z``."""
        j, m = self.where(z)
        rest = np.maximum(self.base - m, 0.0)
        density = self.k * rest ** (self.k - 1)
        if self.fine:  # (no cancellation in a short piece)
            return self.nu_before[j] + (self.nu(m) - self.gap_nu0[j]), density
        return self.nu_before[j] + self.gap_nu0[j] - rest**self.k, density


class RunPiece(GreedyPiece):
    """The greedy tiling with runs of shells solved together (the fast path's greedy)."""

    def __init__(self, masses: np.ndarray, targets: np.ndarray, start: float, num_drafts: int):
        super().__init__(masses, targets, start, num_drafts)
        # windows of prefix sums, in extended precision: a float cumsum over ~1e4 tokens
        # drifts by ~1e-12, which the last token would absorb
        self.cum_mass = np.concatenate([[0.0], np.cumsum(masses, dtype=np.longdouble).astype(float)])
        self.cum_target = np.concatenate([[0.0], np.cumsum(targets, dtype=np.longdouble).astype(float)])
        self.runs = 0  # runs of shells solved together so far

    def ensure(self, i: int) -> None:
        """Tile tokens ``0..i`` (local indices)."""
        while self.done <= i:
            if self.shell_run >= SHELL_RUN:
                self._shell_run()
                self.shell_run = 0
                continue
            self._step()

    def _shell_run(self) -> None:
        """Tile a run of shells at once: the windows ``[S, S + c]`` (squeezed coordinates)
        of all prefixes of the run, until a token needs a new block."""
        self.runs += 1
        space = _FreeSpace(self)
        first = self.done
        scale = self._scale(first)  # (the run's windows make up for the rounding before it)
        begin, chunk = first, FIRST_CHUNK
        prev_s = prev_b = space.seam
        while True:
            end = min(self.size, begin + chunk)
            c = self.cum_mass[begin + 1 : end + 1] - self.cum_mass[first]  # window length
            c_first = self.cum_mass[begin] - self.cum_mass[first]  # (the window before)
            d = (self.cum_target[begin + 1 : end + 1] - self.cum_target[first]) * scale  # its nu-mass
            s, slope = self._window_starts(space, c, d)
            s, bad = self._follow(s, slope, np.diff(c, prepend=c_first), prev_s)
            b = s + c
            s_prev = np.concatenate([[prev_s], s[:-1]])
            b_prev = np.concatenate([[prev_b], b[:-1]])
            n_ok = int(np.argmax(bad)) if bad.any() else s.size
            self._store(begin, space, s[:n_ok], s_prev[:n_ok], b_prev[:n_ok], b[:n_ok])
            self.done = begin + n_ok
            if n_ok:
                prev_s, prev_b = float(s[n_ok - 1]), float(b[n_ok - 1])
            if n_ok < s.size or end == self.size:
                break
            begin, chunk = end, chunk * 4
        self._use(float(space.nu_and_density(prev_b)[0] - space.nu_and_density(prev_s)[0]))
        self._eat(space.seam, prev_s, prev_b)

    def _window_starts(self, space: _FreeSpace, c: np.ndarray, d: np.ndarray):
        """Starts ``S`` of the windows ``[S, S + c]`` with ``nu``-mass ``d`` (its ``nu`` falls
        as ``S`` grows): Newton inside a shrinking bracket, bisection when a step leaves it.
        Returns ``S`` and the slope of the window's ``nu`` in ``S`` there."""
        nu_and_density = space.nu_and_density
        lo, hi = np.zeros_like(c), np.maximum(space.free - c, 0.0)
        # no root inside [0, free - c] (a prefix past the end of this run): clamp
        at_top = nu_and_density(c)[0] - d
        at_bottom = nu_and_density(hi + c)[0] - nu_and_density(hi)[0] - d
        open_ = (at_top > 0) & (at_bottom < 0)
        s = np.where(at_top <= 0, 0.0, np.where(at_bottom >= 0, hi, np.clip(space.seam - 0.5 * c, lo, hi)))
        for _ in range(NEWTON_STEPS):
            nu_b, dens_b = nu_and_density(s + c)
            nu_t, dens_t = nu_and_density(s)
            gap = np.where(open_, nu_b - nu_t - d, 0.0)
            converged = np.all((np.abs(gap) <= self.nu_tol) | (hi - lo <= self.width_tol))
            if not converged:
                lo = np.where(gap > 0, s, lo)
                hi = np.where(gap < 0, s, hi)
            with np.errstate(divide="ignore", invalid="ignore"):
                step = s - gap / (dens_b - dens_t)
            inside = (step >= lo) & (step <= hi)
            if converged:  # one more Newton step: residuals at rounding, of either sign
                s = np.where((gap != 0) & inside, step, s)
                break
            s = np.where(gap == 0, s, np.where(inside, step, 0.5 * (lo + hi)))
        return s, dens_b - dens_t

    def _follow(self, s: np.ndarray, slope: np.ndarray, p: np.ndarray, prev_s: float):
        """A shell needs its window to grow on both sides, ``S`` in ``[S' - p, S']`` for the
        window ``S'`` before; else a new block starts. A short window's root is
        ill-conditioned (its ``nu`` moves little with ``S``), so a window a little off that
        range is rounding: it is moved into it (the token's length stays exact, its ``nu``
        moves by at most the tolerance). Returns the moved ``S`` and where the move was not
        rounding (there the run ends)."""
        clamped, last_s = s.copy(), prev_s
        for n, (raw, p_n) in enumerate(zip(s.tolist(), p.tolist())):
            last_s = min(max(raw, last_s - p_n), last_s)
            clamped[n] = last_s
        bad = np.abs(s - clamped) * np.abs(slope) > self.nu_tol
        return clamped, bad

    def _eat(self, seam: float, prev_s: float, prev_b: float) -> None:
        """The run's window ``[prev_s, prev_b]`` is used: eat ``[prev_s, seam)`` from the stack
        (the bottom of the nearest gap upwards) and ``[seam, prev_b)`` below the frontier."""
        eat = max(seam - prev_s, 0.0)
        while eat > 0.0 and self.gap_start:
            room = self.gap_end[-1] - self.gap_start[-1]
            if eat >= room:
                eat -= room
                self.gap_start.pop()
                self.gap_end.pop()
            else:
                self.gap_end[-1] -= eat
                eat = 0.0
        self.frontier += max(prev_b - seam, 0.0)

    def _store(self, begin, space: _FreeSpace, s, s_prev, b_prev, b):
        """Record key sets (two squeezed intervals each) in original coordinates."""
        if s.size == 0:
            return
        squeezed, gap_start, lengths = space.squeezed, space.gap_start, space.lengths
        z0 = np.stack([s, b_prev], axis=1)  # (n, 2): top and bottom interval of each token
        z1 = np.stack([np.maximum(s_prev, s), np.maximum(b, b_prev)], axis=1)
        j = np.clip(np.searchsorted(squeezed, z0, side="right") - 1, 0, gap_start.size - 1)
        simple = z1 <= squeezed[j] + lengths[j] + 1e-300  # inside one gap: one fragment
        lo = gap_start[j] + (z0 - squeezed[j])
        hi = gap_start[j] + np.minimum(z1 - squeezed[j], lengths[j])
        starts: list[float] = []
        ends: list[float] = []
        for n in range(s.size):
            self.first[begin + n] = len(self._frag_start) + len(starts)
            for side in (0, 1):
                if z1[n, side] <= z0[n, side]:
                    continue
                if simple[n, side]:
                    starts.append(lo[n, side])
                    ends.append(hi[n, side])
                    continue
                k = j[n, side]
                while k < gap_start.size and squeezed[k] < z1[n, side]:
                    a = max(z0[n, side], squeezed[k])
                    e = min(z1[n, side], squeezed[k] + lengths[k])
                    if e > a:
                        starts.append(gap_start[k] + a - squeezed[k])
                        ends.append(gap_start[k] + e - squeezed[k])
                    k += 1
            if len(self._frag_start) + len(starts) == self.first[begin + n]:
                # the window did not grow in floats (p below the keys' resolution): a point
                starts.append(lo[n, 1])
                ends.append(lo[n, 1])
                self.point_x += self._x[begin + n]
            self.count[begin + n] = len(self._frag_start) + len(starts) - self.first[begin + n]
        self._frag_start.extend(starts)
        self._frag_end.extend(ends)
