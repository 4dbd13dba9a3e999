"""Exactly optimal multi-draft selection at the full vocabulary (identical drafts, any K).

Beyond the paper: its practical IS scheme truncates the optimal LP (``s`` tokens, an
alphabet of ~40) because the LP has ``V^K`` variables. This package reaches the exact
optimum at any ``V`` and ``K``; the book's chapter "Optimal at vocabulary scale" proves
each step, and the tests hold the fast path to :class:`mspec.ReferenceOptimalSelection`.

Notation (paper): K i.i.d. drafts from ``p`` (``draft``), target ``q`` (``target``),
``g(m) = 1 - (1 - m)^K`` and ``f(A) = g(p(A))`` = P(some draft lies in A).

**The reference**, :mod:`mspec.schemes.optimal_reference`
(``OptimalSelection.reference(draft=..., target=..., num_drafts=K)``), is one file in plain
floats, in reading order: sort the tokens by ``q/p``; the best induced distribution
``x = p_I``, the greatest convex minorant of ``(q(prefix), f(prefix))`` by isotonic
regression (its acceptance ``sum_y min(q(y), x(y))`` is the closed-form optimum); key sets,
each draft of token ``t`` a key uniform on a set ``M_t`` of length ``p_t`` and ``nu``-mass
``x_t`` (``nu`` has distribution function ``g``), by the greedy tiling token by token; the
smallest key wins, then one single-draft step from ``x`` to ``q``. The tests hold everything
below to it.

**The fast path**, the same law by other means: ``scheme.py`` (:class:`OptimalSelection`,
a :class:`~mspec.schemes.two_step.TwoStepScheme`: the smallest key wins, the base class
does the single-draft step), ``induced.py`` (``x`` by isotonic regression, at ``V ~ 5e4``),
``greedy.py`` (the greedy tiling with rounding guards: the exact fallback of what follows)
and, by default (``atoms="auto", tiling="pool"``), each part certified before use:

* ``runs.py`` -- the greedy with long runs of shells solved together, vectorised.
* ``pool.py`` -- slots and a shared pool instead of sets (one vectorised root solve per
   piece; ``roots.py`` solves the slot edges).
* ``buckets.py`` -- ratio buckets as atoms: no sort of the vocabulary (fact 5).
* ``spread.py`` -- an optimum of 1 without a sort (fact 6).

``atoms.py`` chooses what shares a key law (tokens, buckets or the spread's units), and
``FastPath`` (``options.py``) holds the fast path's switches.
"""

from mspec.fast.optimal_selection.induced import lex_optimal_induced
from mspec.fast.optimal_selection.options import FastPath
from mspec.fast.optimal_selection.scheme import OptimalSelection

__all__ = ["FastPath", "OptimalSelection", "lex_optimal_induced"]
