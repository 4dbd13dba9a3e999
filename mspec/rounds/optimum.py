"""Round-level verification on tiny language models: the exact round optimum as a linear program.

A *round* of speculative decoding drafts ``K`` blocks of ``L`` tokens, i.i.d. from the draft
model ``p`` (the paper's letters: draft ``p``, target ``q``), and emits a string ``w``: a
prefix ``u`` of some drafted block followed by one more token ``v`` (a correction, or the
bonus token after a whole block), so ``1 <= |w| <= L + 1``. Per-position schemes (chapters
2-7) decide one position at a time; a *round rule* may decide on the whole round at once.
This module finds the best round rule on tiny models, where every round can be enumerated.

**Lossless rounds.** Write ``A(w)`` for the probability that the round emits exactly ``w``
and ``S(u) = sum over w strictly extending u of A(w)`` for the probability that it emits more
than the prefix ``u`` (``S(root) = 1``). The rounds generate the target's law, whatever the
context, if and only if, at every node ``u`` with ``|u| <= L`` and for every token ``v``,

    A(uv) + S(uv) = q(v | u) S(u),          (S(w) = 0 when w has L + 1 tokens)

that is: given that the round goes past ``u``, its next token is ``v`` with the target's
probability ``q(v | u)``, whether the round then stops or goes on. (Necessity: compare the
law of the first ``|u| + 1`` tokens of the output with the target's, by induction over
``u``. Sufficiency: a round with these ``A`` is the target's own generation stopped at a
randomised stopping time that never looks at tokens it has not emitted, and such stops
compose over rounds.) The naive bound ``sum over positions of min(p, q)`` ignores that the
stop cannot look ahead, and is not attained (Sun et al., ICLR 2025: 12/9 against 11/9).

**The linear program.** A round rule is a joint law ``pi(X, w)`` of the drafted blocks
``X = (x^1, ..., x^K)`` and the emitted string, with ``sum_w pi(X, w) = P(X) = prod_i p(x^i)``
and ``pi(X, w) = 0`` unless the part of ``w`` before its last token is a prefix of some
``x^i`` (accepted tokens must have been drafted). ``A(w) = sum_X pi(X, w)``; the conditions
above are linear in ``pi``, and so is the expected number of emitted tokens
``sum_w |w| A(w)``. :func:`round_optimum` maximises it: the bar every round rule is measured
against. :func:`round_rule_value` computes any round rule's value on the same models exactly
(:func:`per_position_value` a per-position scheme's), and :func:`next_tokens_law` the law of
the first tokens a rule emits over several rounds, to check losslessness end to end by
enumeration.

A *language model* here is any function ``lm(context) -> (V,) probabilities`` of a tuple of
token ids; :func:`tiny_lm_pair` makes seeded random ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix

from mspec.rounds.registry import make_round_rule
from mspec.schemes.lp import HIGHS_ATTEMPTS, LPSolveError, run_highs

#: the linear program is refused above this many variables (about (V^L)^K blocks times the
#: strings each can emit): it is meant for tiny models, where it is exact
MAX_ROUND_LP_VARIABLES = 400_000
#: the round optimum's constraints hold to this after the solve (HiGHS' tolerances), else an error
LP_FEASIBILITY_TOLERANCE = 1e-9

LanguageModel = Callable[[tuple[int, ...]], np.ndarray]


def tiny_lm_pair(vocab: int, *, seed: int = 0, logit_scale: float = 2.0, draft_noise: float = 0.5,
                 draft_temperature: float = 1.5) -> tuple[LanguageModel, LanguageModel]:
    """A seeded ``(draft_lm, target_lm)`` pair of tiny context-dependent models.

    After every context the target is the softmax of ``logit_scale * N(0, 1)`` logits drawn
    from a generator seeded by ``(seed, context)``; the draft is the softmax of the same logits
    plus ``draft_noise * N(0, 1)``, at ``draft_temperature`` (a smaller, flatter model).

    Args:
        vocab: V.
        seed: the pair is a function of the arguments.
        logit_scale, draft_noise, draft_temperature: see above.

    Returns:
        ``(draft_lm, target_lm)``: functions ``context -> (V,)`` probabilities.
    """
    def logits(context: tuple[int, ...]):
        rng = np.random.default_rng([seed, len(context), *context])
        z = logit_scale * rng.standard_normal(vocab)
        return z, z + draft_noise * rng.standard_normal(vocab)

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    return (lambda c: softmax(logits(tuple(c))[1] / draft_temperature)), (lambda c: softmax(logits(tuple(c))[0]))


def context_free(probs) -> LanguageModel:
    """A model whose next-token law is ``probs`` after every context (i.i.d. tokens)."""
    probs = np.asarray(probs, dtype=float)
    return lambda context: probs


def _strings(vocab: int, max_length: int) -> list[tuple[int, ...]]:
    """Every string of length 1..max_length, shortest first."""
    return [w for n in range(1, max_length + 1) for w in itertools.product(range(vocab), repeat=n)]


def _block_probability(lm: LanguageModel, context: tuple[int, ...], block: tuple[int, ...]) -> float:
    prob = 1.0
    for j, token in enumerate(block):
        prob *= float(lm(context + block[:j])[token])
    return prob


@dataclass
class RoundOptimum:
    """The best lossless round rule found by :func:`round_optimum`.

    Attributes:
        value: the expected number of tokens one round emits (``1`` to ``L + 1``).
        plan: ``{drafted blocks X: {emitted string w: pi(X, w)}}`` (entries above zero).
        emitted: ``{w: A(w)}``, the law of the emitted string.
        variables: the size of the linear program.
    """

    value: float
    plan: dict = field(repr=False)
    emitted: dict = field(repr=False)
    variables: int = 0


def round_optimum(draft_lm: LanguageModel, target_lm: LanguageModel, *, vocab: int, num_drafts: int,
                  draft_length: int, context: tuple[int, ...] = ()) -> RoundOptimum:
    """The best expected number of tokens per round over all lossless round rules.

    Args:
        draft_lm, target_lm: the models (``context -> (V,)``; draft ``p``, target ``q``).
        vocab: V.
        num_drafts: K i.i.d. drafted blocks.
        draft_length: L tokens per block.
        context: the tokens before the round.

    Returns:
        :class:`RoundOptimum`.

    Raises:
        ValueError: the program would exceed :data:`MAX_ROUND_LP_VARIABLES` (pass smaller V, K or
            L), or an argument is not a positive integer.
        RuntimeError: the solver failed, or its plan breaks a constraint by more than
            :data:`LP_FEASIBILITY_TOLERANCE`.
    """
    for name, value in (("vocab", vocab), ("num_drafts", num_drafts), ("draft_length", draft_length)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
    blocks = list(itertools.product(range(vocab), repeat=draft_length))
    tuples = list(itertools.product(range(len(blocks)), repeat=num_drafts))
    if len(tuples) * (num_drafts * draft_length + 1) * vocab > MAX_ROUND_LP_VARIABLES:
        raise ValueError(
            f"the round LP for V = {vocab}, K = {num_drafts}, L = {draft_length} has over "
            f"{MAX_ROUND_LP_VARIABLES} variables; it is exact for tiny models only: lower V, K or L")
    strings = _strings(vocab, draft_length + 1)
    index = {w: i for i, w in enumerate(strings)}
    block_prob = np.array([_block_probability(draft_lm, context, b) for b in blocks])
    columns = []  # (tuple index, emitted string) per variable
    for t, tup in enumerate(tuples):
        prefixes = {blocks[b][:n] for b in tup for n in range(draft_length + 1)}
        columns += [(t, u + (v,)) for u in sorted(prefixes, key=lambda u: (len(u), u)) for v in range(vocab)]
    a_eq, b_eq = _round_constraints(columns, tuples, block_prob, strings, index, target_lm, context, vocab)
    lengths = np.array([len(w) for _, w in columns], dtype=float)
    pi = _solve(-lengths, a_eq, b_eq)
    plan: dict = {}
    emitted: dict = {}
    for (t, w), mass in zip(columns, pi.tolist()):
        if mass > 0.0:
            drafted = tuple(blocks[b] for b in tuples[t])
            plan.setdefault(drafted, {})[w] = plan.get(drafted, {}).get(w, 0.0) + mass
            emitted[w] = emitted.get(w, 0.0) + mass
    return RoundOptimum(float(lengths @ pi), plan, emitted, len(columns))


def _solve(cost, a_eq, b_eq) -> np.ndarray:
    """HiGHS on ``min cost . x, a_eq x = b_eq, x >= 0``, checked, with the settings of
    :data:`~mspec.schemes.lp.HIGHS_ATTEMPTS` in turn: its presolve can call these programs
    infeasible when draft masses span many orders of magnitude (the plan "emit one target
    token" is always feasible), so a failed solve is retried without it."""
    messages = []
    for label, settings in HIGHS_ATTEMPTS:
        try:
            pi = np.maximum(run_highs(cost, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), **settings).x, 0.0)
        except LPSolveError as err:
            messages.append(f"{label}: {err}")
            continue
        worst = float(np.max(np.abs(a_eq @ pi - b_eq)))
        if worst <= LP_FEASIBILITY_TOLERANCE:
            return pi
        messages.append(f"{label}: a plan that breaks a constraint by {worst:.3g}")
    raise RuntimeError(f"the round LP was not solved: {'; '.join(messages)}")


def _round_constraints(columns, tuples, block_prob, strings, index, target_lm, context, vocab):
    """``A_eq pi = b_eq``: each drafted tuple's mass, then the lossless condition at every
    node ``u`` and token ``v`` (one row per string ``uv``), as in the module docstring."""
    rows, cols, vals = [], [], []
    n_tuples = len(tuples)
    for c, (t, w) in enumerate(columns):
        rows.append(t)  # sum_w pi(X, w) = P(X)
        cols.append(c)
        vals.append(1.0)
        for n in range(1, len(w) + 1):  # A(uv) + S(uv) for every prefix uv of w (w itself included)
            rows.append(n_tuples + index[w[:n]])
            cols.append(c)
            vals.append(1.0)
        for n in range(1, len(w)):  # - q(v | u) S(u) for the strict prefixes u of w (not the root)
            u = w[:n]
            q = target_lm(context + u)
            for v in range(vocab):
                rows.append(n_tuples + index[u + (v,)])
                cols.append(c)
                vals.append(-float(q[v]))
    shape = (n_tuples + len(strings), len(columns))
    a_eq = coo_matrix((vals, (rows, cols)), shape=shape).tocsr()
    p_tuple = np.array([np.prod(block_prob[list(tup)]) for tup in tuples])
    q_root = target_lm(context)
    b_root = [float(q_root[w[0]]) if len(w) == 1 else 0.0 for w in strings]  # S(root) = 1
    return a_eq, np.concatenate([p_tuple, b_root])


def per_position_value(draft_lm: LanguageModel, target_lm: LanguageModel, *, scheme: str, vocab: int,
                       num_drafts: int, draft_length: int, context: tuple[int, ...] = ()) -> float:
    """Exact expected tokens per round of a per-position scheme on the same models:
    :func:`round_rule_value` of the rule ``"per-position"`` with ``scheme``."""
    return round_rule_value(draft_lm, target_lm, rule="per-position", scheme=scheme, vocab=vocab,
                            num_drafts=num_drafts, draft_length=draft_length, context=context)


def round_rule_value(draft_lm: LanguageModel, target_lm: LanguageModel, *, rule: str, vocab: int, num_drafts: int,
                     draft_length: int, context: tuple[int, ...] = (), scheme: str | None = None) -> float:
    """Exact expected tokens per round of round rule ``rule`` (with ``scheme``, as for
    :func:`~mspec.rounds.registry.make_round_rule`) on the models of :func:`round_optimum`
    (same arguments): every tuple of K i.i.d. drafted blocks enumerated, the rule's randomness
    averaged out given the blocks (:meth:`~mspec.rounds.rule.RoundRule.expected_tokens`)."""
    round_rule = make_round_rule(rule, scheme=scheme, num_drafts=num_drafts)
    blocks = list(itertools.product(range(vocab), repeat=draft_length))
    total = 0.0
    for tup in itertools.product(blocks, repeat=num_drafts):
        weight = float(np.prod([_block_probability(draft_lm, context, b) for b in tup]))
        if weight > 0.0:
            draft = np.array([[draft_lm(context + b[:j]) for j in range(draft_length)] for b in tup])
            target = np.array([[target_lm(context + b[:j]) for j in range(draft_length + 1)] for b in tup])
            total += weight * round_rule.expected_tokens(np.array(tup), draft, target)
    return total


def next_tokens_law(emitted_at: Callable[[tuple[int, ...]], dict], count: int,
                    context: tuple[int, ...] = ()) -> dict:
    """Law of the next ``count`` tokens a round rule emits, over as many rounds as it takes.

    Args:
        emitted_at: ``context -> {w: A(w)}``, the rule's law of the emitted string after a
            context (for the round optimum: ``round_optimum(..., context=c).emitted``).
        count: how many tokens.
        context: where the first round starts.

    Returns:
        ``{tokens (a tuple of length count): probability}``.
    """
    law: dict = {}
    for w, mass in emitted_at(context).items():
        if len(w) >= count:
            law[w[:count]] = law.get(w[:count], 0.0) + mass
            continue
        for rest, sub in next_tokens_law(emitted_at, count - len(w), context + w).items():
            law[w + rest] = law.get(w + rest, 0.0) + mass * sub
    return law


def target_tokens_law(target_lm: LanguageModel, *, vocab: int, count: int, context: tuple[int, ...] = ()) -> dict:
    """The target's law of its next ``count`` tokens, ``{tokens: probability}``."""
    return {w: _block_probability(target_lm, context, w) for w in itertools.product(range(vocab), repeat=count)}
