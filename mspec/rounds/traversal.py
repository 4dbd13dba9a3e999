"""Traversal verification for K drafted blocks (after Weng et al., "Traversal Verification for
Speculative Tree Decoding", NeurIPS 2025): the drafts form a tree sharing the root, and the
tree is verified from the leaves to the root.

Notation (the paper's letters): the draft model ``p``, the target ``q``. The K drafted blocks
share their prefix as far as their tokens agree, so they form a tree (a trie): node ``u`` is a
drafted prefix, and each draft passing through ``u`` contributes one *draw* at ``u``, its next
token, drawn from its own draft law ``p_i(. | u)`` (``p_i = p`` for identical drafts).

Each node ``u`` carries a weight ``m_u`` and a law ``t_u`` over the next token (Weng et al.'s
``p_alpha`` and ``M_b``). At a child ``ux`` first drafted by draw ``i``,

    m_ux = min(1, m_u t_u(x) / p_i(x | u)),     t_ux = q(. | ux),     (m_root = 1, t_root = q)

the likelihood ratio carried along the path and capped at 1, as in block verification. The
tree is walked in post-order: at ``u``, the draws are taken in draft order; a draw whose token
opens a new child sends the walk through that child's whole subtree, which either keeps a
prefix (the round ends) or rejects (the walk comes back); a draw repeating a token already
tried adds nothing (its continuation was already in that child's subtree). After *every* draw
``i`` at ``u`` the walk knows it was rejected and updates

    e = max(m_u t_u - p_i(. | u), 0),   m_u <- sum(e) / (1 - m_u + sum(e)),   t_u <- e / sum(e),

and when no draw is left, ``u`` itself is kept with probability ``m_u``; the round then emits
one more token from ``t_u`` (the bonus ``q(. | u)`` at a full block, else the residual).

**Why it is lossless.** Claim: entered with ``(m_u, t_u)``, the subtree of ``u`` keeps some
prefix with probability ``m_u``, and emits ``u`` then ``v`` (``v`` kept or the final token)
with probability ``m_u t_u(v)``, on average over the draws below ``u`` (given them, the
subtree keeps a prefix with its own probability, which :func:`traversal_verification_law`
follows; the draws below different children are independent, and a subtree's average does
not depend on how many drafts pass through it, so the averages compose). By induction on
the draws left at ``u``: a draw ``x ~ p_i`` opens a subtree kept with probability ``m_ux`` (induction
on depth), so it accounts for ``sum_x p_i(x) min(1, m_u t_u(x) / p_i(x)) = sum min(p_i, m_u
t_u)`` of the mass and ``min(p_i, m_u t_u)(v)`` of token ``v``; it is rejected with probability
``sum max(p_i - m_u t_u, 0) = 1 - m_u + sum(e)``, and after it the rest emits ``m_u' t_u' =
e / (1 - m_u + sum(e))`` by induction on the draws. In total ``min(p_i, m_u t_u) + e = m_u
t_u``. A repeated token has ``m_ux = 0`` (the first try was rejected, so ``m_u t_u(x) < p(x)``
then, and ``e(x) = 0`` since), which is why it only updates. At the root ``m = 1``: the round
emits its first token with law ``q``, and given a kept token ``v`` the child's subtree emits
with ``q(. | uv)``, the stopping-time condition of :mod:`mspec.rounds.optimum`. The update does not
depend on which token was rejected, which is what makes the claim hold for any tree.

For one draft this is block verification (:mod:`mspec.rounds.block`, the same law); for
blocks of one token it is SpecInfer's recursive rejection sampling with replacement.

Deviation from Weng et al. (marked): their trees are built by sampling children without
replacement and update the draft law after a rejection; here the K blocks are drawn
independently (with replacement, as everywhere in ``mspec``), so each draw keeps its own
``p_i`` and the proof above is ours. The tests check the law by enumeration on tiny
models.

Accuracy: ``m_root`` is exactly 1; elsewhere the laws are exact up to floating-point rounding
(relative ``1e-15`` per update); where ``sum(e)`` underflows, the node is never kept.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mspec.rounds.rule import RoundOutcome, RoundRule, eos_set

__all__ = ["TraversalRule", "expected_traversal_tokens", "traversal_verification_law", "traversal_verify"]


def _draws(drafted: np.ndarray, rows: list[int], depth: int) -> list[tuple[int, int, list[int] | None]]:
    """The draws at the node shared by ``rows`` at ``depth``, in draft order: ``(row, token,
    child_rows)``, ``child_rows`` the drafts through the new child, or ``None`` for a token
    already drafted at this node by an earlier row."""
    seen, out = set(), []
    for r in rows:
        x = int(drafted[r, depth])
        out.append((r, x, None if x in seen else [s for s in rows if int(drafted[s, depth]) == x]))
        seen.add(x)
    return out


def _child_weight(m: float, t: np.ndarray, p: np.ndarray, x: int) -> float:
    """``m_ux = min(1, m t(x) / p(x))`` (0 for a token the draft gives probability 0)."""
    carried, px = m * float(t[x]), float(p[x])
    return 0.0 if px <= 0.0 else (1.0 if carried >= px else carried / px)  # (no overflow for a subnormal p)


def _rejected(m: float, t: np.ndarray, p: np.ndarray) -> tuple[float, np.ndarray]:
    """``(m, t)`` after a rejected draw from ``p``.

    Where ``e`` vanishes (``m t <= p`` everywhere) the node can no longer be kept: ``m = 0``.
    With ``m = 1`` that means ``t = p``, and then no draw is ever rejected; rounding can still
    send the walk here, and ``m`` stays 1 (``t = p`` up to rounding), so the root and every
    weight-1 node stay kept, as in exact arithmetic.
    """
    e = np.maximum(m * t - p, 0.0)
    s = float(e.sum())
    if s <= 0.0:
        return (1.0, t) if m >= 1.0 else (0.0, t)
    return s / (1.0 - m + s), e / s


class _Tree:
    """One round's drafted tree and its laws (arrays as in :func:`traversal_verification_law`)."""

    def __init__(self, drafted, draft_probs, target_probs):
        self.drafted = np.asarray(drafted, dtype=np.int64)
        self.draft_probs = np.asarray(draft_probs, dtype=float)
        self.target_probs = np.asarray(target_probs, dtype=float)
        self.length = self.drafted.shape[1]

    def walk(self, keep: Callable[[float], bool], rows: list[int], depth: int, m: float, t: np.ndarray):
        """Post-order walk of the subtree at the node shared by ``rows`` at ``depth``.

        ``keep(probability)`` decides each coin; returns ``(rows, depth, t)`` of the kept
        node, or ``None`` if the subtree is rejected."""
        for row, x, child_rows in self._node_draws(rows, depth):
            p = self.draft_probs[row, depth]
            if child_rows is not None:
                w = _child_weight(m, t, p, x)
                kept = self.walk(keep, child_rows, depth + 1, w, self.target_probs[child_rows[0], depth + 1])
                if kept is not None:
                    return kept
            m, t = _rejected(m, t, p)
        return (rows, depth, t) if keep(m) else None

    def stops(self, rows: list[int], depth: int, m: float, t: np.ndarray, reach: float, visit) -> float:
        """The exact version of :meth:`walk`: ``visit(rows, depth, P(kept here), t)`` for every
        node, ``reach`` the probability that the walk enters this subtree; returns the
        probability that the subtree, once entered, is rejected.

        Given the drafted tokens, a child subtree entered with weight ``w`` is rejected with
        its own probability (``1 - w`` only on average over the draws below it), so the walk
        goes on past it with ``reach`` times that probability."""
        rejected = 1.0
        for row, x, child_rows in self._node_draws(rows, depth):
            p = self.draft_probs[row, depth]
            if child_rows is not None:
                w = _child_weight(m, t, p, x)
                target = self.target_probs[child_rows[0], depth + 1]
                below = self.stops(child_rows, depth + 1, w, target, reach * rejected, visit)
                rejected *= below
            m, t = _rejected(m, t, p)
        visit(rows, depth, reach * rejected * m, t)
        return rejected * (1.0 - m)

    def _node_draws(self, rows, depth):
        return _draws(self.drafted, rows, depth) if depth < self.length else []

    def root(self) -> tuple[list[int], int, float, np.ndarray]:
        return list(range(self.drafted.shape[0])), 0, 1.0, self.target_probs[0, 0]


def traversal_verification_law(drafted, draft_probs, target_probs) -> dict[tuple[int, ...], float]:
    """Exact law of what traversal verification emits for one round of K drafted blocks.

    Args:
        drafted: ``(K, L)`` drafted token ids.
        draft_probs: ``(K, L, V)``: ``draft_probs[i, j]`` is draft ``i``'s law of its token
            ``j`` (0-based) after its tokens before it.
        target_probs: ``(K, L + 1, V)``: the target's laws after ``0..L`` tokens of draft ``i``
            (rows of drafts with the same prefix are the same law).

    Returns:
        ``{emitted: probability}``: ``emitted`` is a kept drafted prefix followed by one more
        token.
    """
    tree, law = _Tree(drafted, draft_probs, target_probs), {}

    def visit(rows, depth, mass, t):
        if mass > 0.0:
            prefix = tuple(int(y) for y in tree.drafted[rows[0], :depth])
            for v in np.flatnonzero(t > 0.0):
                law[prefix + (int(v),)] = law.get(prefix + (int(v),), 0.0) + mass * float(t[v])

    tree.stops(*tree.root(), 1.0, visit)
    return law


def traversal_verify(drafted, draft_probs, target_probs, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """One round of traversal verification, drawn with ``rng``; arguments as for
    :func:`traversal_verification_law`.

    Returns:
        ``(emitted, rows)``: the kept drafted prefix followed by one more token, and the
        drafts that hold the kept prefix.
    """
    tree = _Tree(drafted, draft_probs, target_probs)
    rows, depth, t = tree.walk(lambda prob: rng.random() < prob, *tree.root())
    token = int(rng.choice(t.size, p=t / t.sum()))
    return [int(y) for y in tree.drafted[rows[0], :depth]] + [token], rows


def expected_traversal_tokens(drafted, draft_probs, target_probs, *, eos_token_id=None) -> float:
    """Exact expected number of tokens traversal verification emits for one round (the kept
    prefix and one more token), its coins averaged out; arguments as for
    :func:`traversal_verification_law`. An end-of-sequence token (``eos_token_id``: an id or
    ids) in a kept prefix ends the count there, as in
    :func:`mspec.lm.decoding.expected_round_tokens`."""
    eos = eos_set(eos_token_id)
    tree, total = _Tree(drafted, draft_probs, target_probs), [0.0]

    def visit(rows, depth, mass, t):
        block = tree.drafted[rows[0], :depth].tolist()
        first_eos = next((i for i, y in enumerate(block) if y in eos), depth)
        total[0] += mass * (first_eos + 1 if depth > first_eos else depth + 1)

    tree.stops(*tree.root(), 1.0, visit)
    return total[0]


class TraversalRule(RoundRule):
    """Traversal verification as a :class:`~mspec.rounds.rule.RoundRule` (any K drafts,
    identical or not)."""

    name = "traversal"

    def _law(self, drafted, draft_probs, target_probs) -> dict[tuple[int, ...], float]:
        return traversal_verification_law(drafted, draft_probs, target_probs)

    def _verify(self, drafted, draft_probs, target_probs, rng) -> RoundOutcome:
        return RoundOutcome.of(drafted, *traversal_verify(drafted, draft_probs, target_probs, rng))

    def _expected_tokens(self, drafted, draft_probs, target_probs, eos) -> float:
        return expected_traversal_tokens(drafted, draft_probs, target_probs, eos_token_id=list(eos))
