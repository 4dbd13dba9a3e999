"""Root solves for the slot edges of :mod:`mspec.fast.optimal_selection.pool`: ``u^K - g u = rhs``
on either branch (Newton from a point beyond the root, vectorised), and refinements of a
concave edge equation without cancellation."""

from __future__ import annotations

import math

import numpy as np

from mspec.fast.optimal_selection.greedy import NEWTON_STEPS
from mspec.fast.optimal_selection.induced import power_by_squaring

#: a slot edge's Newton iteration stops at a step this small (relative): the error after it
#: is about its square; the iterates can flip between floats a few ulps apart, so not 2e-16
NEWTON_STEP_TOLERANCE = 1e-15


_TINY = float(np.finfo(float).tiny)  # (looked up once: np.finfo costs microseconds a call)


#: below this u* (a piece within ~1e-12 of key 1) powers of u may underflow: slot edges are
#: then solved with overflow tolerated and clamped into their branch
DELICATE_U = 1e-12


def concave_root(z: np.ndarray, want: np.ndarray, phi, slope, most: float, g: float) -> np.ndarray:
    """Solve ``phi(z) = want`` in ``[0, most]`` for a concave ``phi`` rising from ``phi(0) = 0``,
    from guesses ``z``.

    For the slot edges of a piece short against its keys' scale (:meth:`PoolPiece.build`):
    ``phi`` is evaluated without cancellation, the guesses are the u-space roots. Newton
    from below a root climbs to it monotonically (the tangent lies above a concave
    function), and one step from above lands below it; a guess past the maximum restarts
    from 0. An entry stops when its residual is at the rounding of ``phi`` (``~g z``): the
    root is then as exact as the data (near the maximum ill-conditioned, but never past it;
    a piece so short that ``phi`` is all rounding gets edges that are noise, but inside it).
    """
    z = np.clip(np.array(z, dtype=float).reshape(-1), 0.0, most)
    want = np.broadcast_to(np.asarray(want, dtype=float).reshape(-1), z.shape)
    with np.errstate(invalid="ignore"):
        z[~(slope(z) > 0.0)] = 0.0
    active = np.arange(z.size)
    for _ in range(NEWTON_STEPS):
        if not active.size:
            break
        zi, wi = z[active], want[active]
        value = phi(zi) - wi
        rate = slope(zi)
        stop = (np.abs(value) <= 4e-16 * (2.0 * g * zi + np.abs(wi))) | ~(rate > 0.0)
        step = np.divide(value, rate, out=np.zeros_like(value), where=~stop)
        z[active] = np.clip(zi - step, 0.0, most)
        stop |= np.abs(step) <= 1e-16 * zi
        active = active[~stop]
    return z


def power_root(rhs: np.ndarray, g: float, k: int, rising: bool, start: float, steps: int = NEWTON_STEPS) -> np.ndarray:
    """Solve ``u^K - g u = rhs`` elementwise on its rising (``u >= u_star``) or falling branch.

    ``K = 2`` is the quadratic formula. Otherwise Newton's method from a point beyond the
    root (:func:`_newton_starts`; never further than ``start``, the far end of the branch):
    ``u^K - g u`` is convex, so the iterates move monotonically to the root without
    overshooting. Converged entries leave the iteration. A right-hand side at (or, by
    rounding, below) the minimum ``phi*`` is the minimum point ``u*`` itself (a double root,
    where Newton would only creep). ``steps``: most Newton steps per root.
    """
    rhs = np.asarray(rhs, dtype=float)
    if k == 2:
        root = np.sqrt(np.maximum(g * g + 4.0 * rhs, 0.0))
        return 0.5 * (g + root) if rising else 0.5 * (g - root)
    u_star = (g / k) ** (1.0 / (k - 1))
    phi_star = u_star**k - g * u_star
    low, high = min(u_star, start), max(u_star, start)  # the branch: every root lies in it
    floor = min(high, 0.5)  # (steps relative to the roots' scale, also for a piece near key 1)
    if not u_star > 0.0:  # g underflowed (a piece within ~1e-20 of key 1): u^K = rhs
        return _inside(np.power(np.maximum(rhs, 0.0), 1.0 / k).reshape(-1), low, high, start).reshape(rhs.shape)
    if rhs.size <= 8:  # a few roots: the same iteration on Python floats (no array overhead)
        out = np.empty(rhs.shape)
        flat = out.reshape(-1)
        for i, r in enumerate(rhs.reshape(-1).tolist()):
            z = _newton_start(r, g, k, rising, start, u_star, phi_star) if r > phi_star else u_star
            for _ in range(steps if r > phi_star else 0):
                power = z ** (k - 1)
                slope = k * power - g
                value = power * z - g * z - r
                step = value / slope if slope != 0.0 else 0.0
                # (inside the branch: where u^K underflows, value / slope is rounding noise)
                z = min(max(z - step, low), high)
                if abs(step) <= NEWTON_STEP_TOLERANCE * max(abs(z), floor) or abs(value) <= 4e-16 * (
                    abs(r) + abs(z) * (abs(power) + g)
                ):
                    break
            flat[i] = z
        return out
    starts = np.where(rhs <= phi_star, u_star, _newton_starts(rhs, g, k, rising, start))
    if u_star > DELICATE_U:
        return _newton(starts.reshape(-1), rhs.reshape(-1), g, k, 1.0 if rising else -1.0, phi_star, steps).reshape(rhs.shape)
    with np.errstate(over="ignore", invalid="ignore"):  # (rounding noise near key 1: _inside)
        roots = _newton(starts.reshape(-1), rhs.reshape(-1), g, k, 1.0 if rising else -1.0, phi_star, steps)
    return _inside(roots, low, high, start).reshape(rhs.shape)


def power_root_both(rising_rhs: np.ndarray, falling_rhs: np.ndarray, g: float, k: int, rising_start: float,
                    falling_start: float) -> np.ndarray:
    """:func:`power_root` on the rising branch for ``rising_rhs`` and on the falling one for
    ``falling_rhs``, concatenated, with one Newton iteration for all."""
    if k == 2:
        return np.concatenate([power_root(rising_rhs, g, k, True, rising_start),
                               power_root(falling_rhs, g, k, False, falling_start)])
    u_star = (g / k) ** (1.0 / (k - 1))
    if not u_star > 0.0:  # (g underflowed)
        return np.concatenate([power_root(rising_rhs, g, k, True, rising_start),
                               power_root(falling_rhs, g, k, False, falling_start)])
    phi_star = u_star**k - g * u_star
    rhs = np.concatenate([rising_rhs, falling_rhs])
    starts = np.concatenate([_newton_starts(rising_rhs, g, k, True, rising_start),
                             _newton_starts(falling_rhs, g, k, False, falling_start)])
    sign = np.concatenate([np.ones(rising_rhs.size), -np.ones(falling_rhs.size)])
    if u_star > DELICATE_U:
        return _newton(np.where(rhs <= phi_star, u_star, starts), rhs, g, k, sign, phi_star)
    with np.errstate(over="ignore", invalid="ignore"):
        roots = _newton(np.where(rhs <= phi_star, u_star, starts), rhs, g, k, sign, phi_star)
    n = rising_rhs.size
    return np.concatenate([_inside(roots[:n], min(u_star, rising_start), max(u_star, rising_start), rising_start),
                           _inside(roots[n:], min(u_star, falling_start), max(u_star, falling_start), falling_start)])


def _inside(roots: np.ndarray, low: float, high: float, start: float) -> np.ndarray:
    """``roots`` kept inside their branch ``[low, high]`` (a NaN becomes ``start``, its far
    end). Where ``u^K`` underflows (a piece within ~1e-20 of key 1 at K = 16; ``u* <=
    DELICATE_U``) Newton's steps are rounding noise and may leave the branch; the nu-masses
    there are below 1e-300, so any point of the branch is as good (and the piece's
    certificate checks). Elsewhere Newton from these starts stays inside by convexity."""
    if roots.size and not (roots.min() >= low and roots.max() <= high):  # (also catches a NaN)
        roots = np.clip(np.where(np.isnan(roots), start, roots), low, high)
    return roots


def _newton(starts: np.ndarray, rhs: np.ndarray, g: float, k: int, sign, phi_star: float,
            steps: int = NEWTON_STEPS) -> np.ndarray:
    """Newton's method for ``u^K - g u = rhs`` from ``starts`` (beyond the roots), on the
    branch where the slope has the sign ``sign`` (+1 rising, -1 falling; a scalar or per
    entry); entries with ``rhs <= phi*`` keep their start (``u*``)."""
    u = np.array(starts, dtype=float)
    active = np.flatnonzero(rhs > phi_star)
    z, r = u[active], rhs[active]
    sign = sign if np.isscalar(sign) else sign[active]
    # the slope keeps its branch's sign (it is 0 only at u*, which the iterates never pass)
    tiny = _TINY
    # the rounding level of each residual u^K - g u - rhs (its scale taken at the start, which
    # is close to the root): below it the root is as good as the data (near u* the root is
    # ill-conditioned, and Newton would only creep by rounding noise / slope)
    noise = 4e-16 * (np.abs(r) + z * (power_by_squaring(z.copy(), k - 1) + g))
    # steps count relative to the roots' scale (1/2 as a floor; less for a piece near key 1,
    # where every u is tiny)
    floor = 0.5 if not z.size or z[0] >= 0.5 else min(float(z.max()), 0.5)  # (one piece: one scale)
    for step_count in range(steps):
        if not active.size:
            break
        power = power_by_squaring(z * z, (k - 1) // 2) * (z if k % 2 == 0 else 1.0) if k > 2 else z.copy()
        slope = k * power - g
        slope *= sign
        np.maximum(slope, tiny, out=slope)
        slope *= sign
        value = power - g
        value *= z
        value -= r
        if step_count >= 8:  # the stragglers: converged entries leave one by one
            settled = np.abs(value) <= noise
        elif step_count >= 2 and (np.abs(value) <= noise).all():  # (from these starts Newton needs 3+ steps)
            break
        step = np.divide(value, slope, out=value)
        z -= step
        if step_count >= 8:
            done = settled | (np.abs(step) <= NEWTON_STEP_TOLERANCE * np.maximum(z, floor))
            if done.all():
                break
            if done.any():
                u[active[done]] = z[done]
                keep = ~done
                active, z, r, noise = active[keep], z[keep], r[keep], noise[keep]
                sign = sign if np.isscalar(sign) else sign[keep]
        elif step_count >= 2 and np.abs(step).max() <= NEWTON_STEP_TOLERANCE * floor:
            break
    u[active] = z
    return u


def _newton_starts(rhs: np.ndarray, g: float, k: int, rising: bool, start: float) -> np.ndarray:
    """Starting points for :func:`power_root`: beyond the root on its branch, and close.

    ``phi(u) = u^K - g u`` has its minimum ``phi*`` at ``u* = (g / K)^(1 / (K - 1))``, and
    its third derivative is >= 0. On the rising branch ``phi`` lies above its quadratic
    Taylor polynomial at ``u*``, so that polynomial's root is beyond the root; so is each
    step of ``u = (rhs + g u)^(1/K)`` from ``start`` (better far from ``u*``). On the
    falling branch the polynomial's root lies between the root and ``u*``; one Newton step
    from there (a tangent lies below a convex function) lands beyond the root; so does
    ``-rhs / g`` plus one fixed-point step, better far from ``u*`` (the larger of the two
    is taken). Either way no further than ``start``, the far end of the branch, which is
    beyond the root too.
    """
    u_star = (g / k) ** (1.0 / (k - 1))
    phi_star = u_star**k - g * u_star
    curve = k * (k - 1) * u_star ** (k - 2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        half = np.sqrt(np.maximum(2.0 * (rhs - phi_star), 0.0) / curve)
        if rising:  # (not at u* itself, where the slope is 0 up to rounding)
            # far from u*, better: two steps of u = (rhs + g u)^(1/K) from the far end, which
            # fall monotonically to the root (the map's slope g / (K u^(K-1)) is below 1 there)
            far = np.full(rhs.shape, float(start))
            for _ in range(2):
                far = np.power(np.maximum(rhs + g * far, 0.0), 1.0 / k)
            return np.minimum(np.minimum(u_star + np.maximum(half, 1e-6 * u_star), start), far)
        z = u_star - half
        power = power_by_squaring(z.copy(), k - 1)
        slope = k * power - g
        z = z - np.where(slope < 0.0, ((power - g) * z - rhs) / slope, np.inf)
        # far from u*, better: u0 = -rhs / g and one step of u = (u^K - rhs) / g from it
        # (phi(u0) - rhs = u0^K >= 0, so u0 and the step, u0 + u0^K / g, stay below the root)
        small = -rhs / g
        small += power_by_squaring(small.copy(), k) / g
        out = np.maximum(np.where(np.isfinite(z), np.maximum(z, start), start), small)
        # (g underflowing to 0 makes small infinite or NaN: the far end is beyond the root too)
        return np.where(out <= u_star, out, start)


def _newton_start(rhs: float, g: float, k: int, rising: bool, start: float, u_star: float, phi_star: float) -> float:
    """:func:`_newton_starts` for one ``rhs > phi*``, on Python floats."""
    curve = k * (k - 1) * u_star ** (k - 2)  # 0 where u* underflows: start at the far end
    half = math.sqrt(max(2.0 * (rhs - phi_star), 0.0) / curve) if curve > 0.0 else math.inf
    if rising:
        return min(u_star + max(half, 1e-6 * u_star), start)
    if not half <= 1.0:  # (z < 0 <= start; and z ** K could overflow, an error on floats)
        return start
    z = u_star - half
    slope = k * z ** (k - 1) - g
    if not slope < 0.0:
        return start
    z -= (z**k - g * z - rhs) / slope
    return max(z, start) if math.isfinite(z) else start
