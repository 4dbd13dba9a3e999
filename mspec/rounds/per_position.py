"""The per-position round rule: a token-level scheme (:mod:`mspec.registry`) decides
the round one position at a time, over the drafts still *alive* (holding every token emitted
so far); a drafted token the scheme emits keeps its drafts alive, any other token ends the
round, and after all L positions a bonus token is drawn from ``q``. Why it is lossless:
:mod:`mspec.lm.decoding`. ``_Trie`` averages the scheme's randomness out exactly over the
trie of the K drafts, for the rule's ``law`` and ``expected_tokens``.
"""

from __future__ import annotations

import numpy as np

from mspec.rounds.rule import RoundOutcome, RoundRule, eos_set
from mspec import registry
from mspec.schemes.selection import sample_index
from mspec.schemes.single import SingleDraft

__all__ = ["PerPositionRule", "position_scheme"]


def position_scheme(scheme: str, params: dict, draft_rows, target_rows, temps, alive: list[int]):
    """The selection scheme for one position of a round, given the drafts still alive.

    The one place that decides it: alive drafts share their prefix, so the target rows of
    the alive drafts agree and drafts of equal temperature have one (bit-identical, see
    :func:`mspec.lm.decoding.speculative_generate`) distribution -- passed as a ``(V,)`` row
    (identical drafts), else one row per alive draft. With one draft left every scheme of
    the registry is single-draft speculative sampling (the selected token is that draft,
    ``p_I = p``), so that is built directly (no K-draft construction such as the optimal
    scheme's sort).

    Args:
        scheme: a key of :data:`mspec.registry.SCHEMES`.
        params: the scheme's extra keyword arguments.
        draft_rows: ``(K, V)`` every draft's distribution at this position.
        target_rows: ``(K, V)`` the target distribution after each draft's prefix.
        temps: the K draft temperatures.
        alive: indices of the drafts whose tokens all match the output so far.

    Returns:
        A built :class:`~mspec.schemes.selection.SelectionScheme`.
    """
    target = np.asarray(target_rows[alive[0]])
    if len(alive) == 1:
        return SingleDraft(draft=np.asarray(draft_rows[alive[0]]), target=target)
    same_temp = len({temps[i] for i in alive}) == 1
    draft = np.asarray(draft_rows[alive[0]]) if same_temp else np.asarray(draft_rows[alive])
    return registry.make_scheme(scheme, draft=draft, target=target, num_drafts=len(alive), **params)


class PerPositionRule(RoundRule):
    """A token-level scheme run position by position over the alive drafts.

    Attributes:
        scheme: a key of :data:`mspec.registry.SCHEMES`.
        params: the scheme's extra keyword arguments.
        temperatures: the K draft temperatures (equal ones make the alive drafts identical).
    """

    name = "per-position"
    takes_scheme = True

    def __init__(self, *, scheme: str, params: dict, num_drafts: int, temperatures: list[float]):
        super().__init__(num_drafts=num_drafts)
        self.scheme, self.params, self.temperatures = scheme, params, temperatures

    def position(self, draft_rows, target_rows, alive: list[int]):
        """:func:`position_scheme` of this rule at one position."""
        return position_scheme(self.scheme, self.params, draft_rows, target_rows, self.temperatures, alive)

    def _verify(self, drafted, draft_probs, target_probs, rng) -> RoundOutcome:
        alive, out = list(range(drafted.shape[0])), []  # alive: drafts whose tokens all match the output so far
        for j in range(drafted.shape[1]):
            tokens = drafted[alive, j]
            y = self.position(draft_probs[:, j], target_probs[:, j], alive).sample(tokens, rng).token
            out.append(y)
            # continue with the drafts that hold y -- decided by matching, not by
            # `Selection.accepted`, so a drafted token output from a residual also continues
            # (either way y ~ q and the drafts holding y share the new prefix)
            holding = [i for i, x in zip(alive, tokens) if x == y]
            if not holding:
                return RoundOutcome.of(drafted, out, alive)  # rejection ends the round
            alive = holding
        # all L accepted: a bonus token from q after the full draft
        out.append(sample_index(target_probs[alive[0], drafted.shape[1]], rng))
        return RoundOutcome.of(drafted, out, alive)

    def _law(self, drafted, draft_probs, target_probs) -> dict[tuple[int, ...], float]:
        trie = _Trie(self, drafted, draft_probs, target_probs, law={})
        trie.value(0, list(range(drafted.shape[0])), 1.0)
        return trie.law

    def expected_tokens(self, drafted, draft_probs, target_probs, *, eos_token_id=None, control: bool = False):
        """Expected number of tokens the round emits, the scheme's randomness averaged out exactly.

        At position ``j`` with alive drafts ``A`` the scheme outputs ``Y = y`` with
        probability ``P(y | A's tokens)`` and the drafts holding ``y`` carry on, so

            E(j, A) = 1 + sum_y P(y | A) E(j + 1, A_y),      E(L, A) = 1 (the bonus token),

        where ``y`` runs over the drafted tokens that are not end-of-sequence (an EOS ends
        the generation).

        With ``control=True`` it also returns a *control variate* with mean zero over the
        drafts, one entry per position ``j``:

            Z_j = sum over the trie's nodes at position j of  r(node) (a(node) - alpha(node)),

        where ``r`` is the probability that the selection reaches the node (the product of the
        ``P(y | A)`` above it), ``a`` the scheme's acceptance given the node's drafted tokens
        (:meth:`~mspec.schemes.selection.SelectionScheme.accept_probability`) and ``alpha`` its
        acceptance averaged over them (:meth:`~mspec.schemes.selection.SelectionScheme.acceptance`).
        Given all earlier positions, the alive drafts' tokens at ``j`` are fresh draws from
        the node's draft distribution, so ``E[a] = alpha`` there and ``E[Z_j] = 0``.

        Returns:
            The expected number of emitted tokens, in ``[1, L + 1]``; with ``control=True``
            the pair ``(expected, Z)``, ``Z`` of shape ``(L,)``.
        """
        drafted, draft_probs, target_probs = self._checked(drafted, draft_probs, target_probs)
        trie = _Trie(self, drafted, draft_probs, target_probs, eos=eos_set(eos_token_id), control=control)
        expected = trie.value(0, list(range(drafted.shape[0])), 1.0)
        return (expected, trie.z) if control else expected



class _Trie:
    """The recursion over the trie of a round's K drafts (see the module docstring).

    Attributes:
        z: ``(L,)`` the control variate, accumulated by :meth:`value` when ``control``.
        law: ``{w: probability}`` of the emitted string, accumulated when given (a dict).
    """

    def __init__(self, rule: PerPositionRule, drafted, draft_probs, target_probs, *, eos=frozenset(),
                 control: bool = False, law: dict | None = None):
        self.rule, self.drafted, self.draft_probs, self.target_probs = rule, drafted, draft_probs, target_probs
        self.eos, self.control, self.law = eos, control, law
        self.z = np.zeros(drafted.shape[1])

    def value(self, j: int, alive: list[int], reach: float) -> float:
        """``E(j, A)``: expected tokens from position ``j`` on with alive drafts ``alive``,
        reached with probability ``reach``."""
        if j == self.drafted.shape[1]:
            self._emit(j, alive, reach, self.target_probs[alive[0], j], ())
            return 1.0
        tokens = self.drafted[alive, j]
        scheme = self.rule.position(self.draft_probs[:, j], self.target_probs[:, j], alive)
        dist, _ = scheme.conditional(tokens)
        if self.control:
            self.z[j] += reach * (scheme.accept_probability(tokens) - scheme.acceptance())
        self._emit(j, alive, reach, dist, tokens.tolist())
        total = 1.0
        for y in np.unique(tokens):
            if int(y) not in self.eos:
                total += float(dist[y]) * self.value(j + 1, [i for i in alive if self.drafted[i, j] == y],
                                                     reach * float(dist[y]))
        return total

    def _emit(self, j: int, alive: list[int], reach: float, dist: np.ndarray, drafted_tokens) -> None:
        """Add the strings that end the round at this node to :attr:`law`: the prefix, then
        a token of ``dist`` that no alive draft holds (those go on)."""
        if self.law is None:
            return
        prefix = tuple(int(t) for t in self.drafted[alive[0], :j])
        for v in np.flatnonzero(dist > 0.0):
            mass = reach * float(dist[v])
            if int(v) not in drafted_tokens and mass > 0.0:
                self.law[prefix + (int(v),)] = self.law.get(prefix + (int(v),), 0.0) + mass
