"""Exactly optimal multi-draft selection at the full vocabulary (identical drafts, any K).

Beyond the paper: its practical IS scheme truncates the optimal LP (``s`` tokens, an
alphabet of ~40) because the LP has ``V^K`` variables. This package reaches the exact
optimum at any ``V`` and ``K``; the book's chapter "Optimal at vocabulary scale" proves
each step, and the tests check each numerically.

Notation (paper): K i.i.d. drafts from ``p`` (``draft``), target ``q`` (``target``),
``g(m) = 1 - (1 - m)^K`` and ``f(A) = g(p(A))`` = P(some draft lies in A).

**The reference, in reading order** (``OptimalSelection.reference(draft=..., target=...,
num_drafts=K)``):

1. ``induced.py`` -- the best induced distribution ``x = p_I``: sort the tokens by
   ``q/p``, take the greatest convex minorant of ``(q(prefix), f(prefix))`` by isotonic
   regression; its acceptance ``sum_y min(q(y), x(y))`` is the closed-form optimum.
2. ``greedy.py`` -- key sets: each draft of token ``t`` gets a key uniform on a set
   ``M_t`` of length ``p_t`` and ``nu``-mass ``x_t`` (``nu`` has distribution function
   ``g``); the greedy tiling builds the sets piece by piece.
3. ``scheme.py`` -- the smallest key wins (token ``t`` is selected with probability
   ``nu(M_t) = x_t``), then one single-draft speculative sampling step from ``x`` to ``q``.

**The fast path** (the default, ``atoms="auto", tiling="pool"``), the same law by other
means, each part certified before use with the reference as its exact fallback:

4. ``runs.py`` -- the greedy with long runs of shells solved together, vectorised.
5. ``pool.py`` -- slots and a shared pool instead of sets (one vectorised root solve per
   piece; ``roots.py`` solves the slot edges).
6. ``buckets.py`` -- ratio buckets as atoms: no sort of the vocabulary.
7. ``spread.py`` -- an optimum of 1 without a sort.

``atoms.py`` chooses what shares a key law (tokens, buckets or the spread's units), and
``FastPath`` (``options.py``) holds the fast path's switches.
"""

from mspec.schemes.optimal_selection.induced import lex_optimal_induced
from mspec.schemes.optimal_selection.options import FastPath
from mspec.schemes.optimal_selection.scheme import OptimalSelection

__all__ = ["FastPath", "OptimalSelection", "lex_optimal_induced"]
