"""The canonical decomposition: importance-type selection, then single-draft speculative sampling.

The paper shows that an optimal multi-draft scheme can always be written in two steps:

1. **Selection.** Given the drafted tokens ``t = (x_1..x_K)``, pick one of them,
   ``Y_I = y`` with probability ``beta_y(t)`` (``beta_y(t) = 0`` unless ``y`` is in ``t``,
   ``sum_y beta_y(t) = 1``). Marginally ``Y_I`` has the *induced* distribution

       p_I(y) = sum_t P(t) beta_y(t),      P(t) = prod_i p_i(x_i).

2. **Single-draft speculative sampling** from ``p_I`` to the target ``q``: accept ``Y_I``
   with probability ``min(1, q(Y_I) / p_I(Y_I))``, otherwise output a sample of the
   residual ``norm(max(q - p_I, 0))``.

Step 2 makes ``Y ~ q`` exactly for *any* weights ``beta`` (that is why every such scheme
is lossless), and the acceptance is ``sum_y min(q(y), p_I(y))``. The best weights solve
the LP (linear in ``beta`` with auxiliaries ``u_y = min(q(y), p_I(y))``)::

    maximise   sum_y u_y
    subject to u_y <= q(y),  u_y <= p_I(y) = sum_t P(t) beta_y(t),
               beta_y(t) >= 0,  sum_{y in t} beta_y(t) = 1,

whose optimum equals the optimal transport LP of :mod:`mspec.optimal` (the paper's
canonical decomposition theorem; the tests check it).

Formulations implemented:

* general K: one variable per (tuple, distinct drafted token), as joint masses
  ``b_y(t) = P(t) beta_y(t)`` with ``sum_y b_y(t) = P(t)`` (deviation: joint masses
  instead of ``beta`` for conditioning; same LP);
* K = 2, identical drafts: ``V(V-1)/2`` weights ``w_ij`` (``i < j``) = P(select i | the
  drafts are {i, j}); symmetric weights lose nothing since ``P(i, j) = P(j, i)``, and
  ``p_I(i) = p_i^2 + 2 p_i sum_{j>i} p_j w_ij + 2 p_i sum_{j<i} p_j (1 - w_ji)``.

Non-identical K = 2 uses the general formulation (``V(V-1)`` ordered-pair weights).

"Accepted" here means step 2 accepted the selected draft (the paper's acceptance
``sum min(q, p_I)``). After a rejection the residual may, for non-optimal weights,
happen to return another drafted token; we still report that as a rejection
(conservative; at the optimum it cannot happen since acceptance is then ``P*``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .distributions import check_draft_target
from .optimal import MAX_LP_VARIABLES, check_lp_size, draft_tuples, run_linprog
from .selection import Selection, SelectionScheme, check_rng, residual, sample_index


def solve_canonical_lp(
    *, draft, target, num_drafts=None, max_variables: int = MAX_LP_VARIABLES
) -> tuple[float, np.ndarray]:
    """Optimal selection weights of the canonical decomposition.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        max_variables: refuse LPs with more variables than this.

    Returns:
        ``(value, weights)``: the optimal acceptance ``sum min(q, p_I)`` (computed from
        the returned weights) and ``weights`` of shape ``(V,) * K + (V,)`` with
        ``weights[x_1, .., x_K, y] = beta_y(x_1..x_K)``.

    Raises:
        ValueError: the LP is too big.
        mspec.optimal.LPSolveError: HiGHS failed.
    """
    draft, target, k = check_draft_target(draft, target, num_drafts)
    vocab = target.shape[0]
    if k == 2 and draft.ndim == 1:
        weights = _pair_weights_identical(draft, target, max_variables)
    else:
        weights = _tuple_weights(draft, target, k, max_variables)
    value = float(np.minimum(target, induced_distribution(draft, weights, k)).sum())
    assert weights.shape == (vocab,) * k + (vocab,)
    return value, weights


def _tuple_weights(draft, target, k, max_variables) -> np.ndarray:
    vocab = target.shape[0]
    check_lp_size(vocab**k * k + vocab, max_variables, "canonical LP")
    tuples, probs = draft_tuples(draft, k)
    n = tuples.shape[0]
    ordered = np.sort(tuples, axis=1)
    first = np.ones(ordered.shape, dtype=bool)  # first occurrence of each distinct token
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    var_tuple, var_pos = np.nonzero(first)
    var_token = ordered[var_tuple, var_pos]
    m = var_tuple.size  # variables b_y(t); then u_y (V of them)
    a_eq = sp.csr_array((np.ones(m), (var_tuple, np.arange(m))), shape=(n, m + vocab))
    # u_y - sum_t b_y(t) <= 0
    a_ub = sp.csr_array(
        (np.concatenate([-np.ones(m), np.ones(vocab)]), (np.concatenate([var_token, np.arange(vocab)]),
                                                           np.arange(m + vocab))),
        shape=(vocab, m + vocab),
    )
    c = np.concatenate([np.zeros(m), -np.ones(vocab)])
    bounds = np.concatenate([np.tile([0.0, np.inf], (m, 1)), np.column_stack([np.zeros(vocab), target])])
    res = run_linprog(c, A_ub=a_ub, b_ub=np.zeros(vocab), A_eq=a_eq, b_eq=probs, bounds=bounds)
    joint = np.maximum(res.x[:m], 0.0)
    weights = _uniform_weights(vocab, k)  # any valid weights for tuples never drafted
    beta = np.zeros((n, vocab))
    beta[var_tuple, var_token] = joint
    total = beta.sum(axis=1, keepdims=True)
    # a tuple whose variables are all ~0 (cannot happen beyond rounding): pick uniformly
    fallback = _membership_rows(tuples, vocab)
    beta = np.where(total > 0, beta / np.where(total > 0, total, 1.0), fallback)
    weights.reshape(-1, vocab)[np.ravel_multi_index(tuple(tuples.T), (vocab,) * k)] = beta
    return weights


def _pair_weights_identical(draft, target, max_variables) -> np.ndarray:
    vocab = target.shape[0]
    check_lp_size(vocab * (vocab - 1) // 2 + vocab, max_variables, "canonical LP (K = 2, identical)")
    i, j = np.triu_indices(vocab, k=1)
    m = i.size
    coef = 2.0 * draft[i] * draft[j]
    # p_I(y) = c_y + sum_{pairs (y, j)} coef w - sum_{pairs (i, y)} coef w
    below = np.concatenate([[0.0], np.cumsum(draft)[:-1]])
    c_y = draft**2 + 2.0 * draft * below
    # u_y - p_I(y) <= 0  <=>  u_y - sum coef w (y = i) + sum coef w (y = j) <= c_y
    a_ub = sp.csr_array(
        (np.concatenate([-coef, coef, np.ones(vocab)]),
         (np.concatenate([i, j, np.arange(vocab)]), np.concatenate([np.arange(m), np.arange(m), m + np.arange(vocab)]))),
        shape=(vocab, m + vocab),
    )
    c = np.concatenate([np.zeros(m), -np.ones(vocab)])
    bounds = np.concatenate([np.tile([0.0, 1.0], (m, 1)), np.column_stack([np.zeros(vocab), target])])
    res = run_linprog(c, A_ub=a_ub, b_ub=c_y, bounds=bounds)
    w = np.clip(res.x[:m], 0.0, 1.0)
    weights = np.zeros((vocab, vocab, vocab))
    diag = np.arange(vocab)
    weights[diag, diag, diag] = 1.0
    weights[i, j, i] = weights[j, i, i] = w
    weights[i, j, j] = weights[j, i, j] = 1.0 - w
    return weights


def _uniform_weights(vocab: int, k: int) -> np.ndarray:
    """Weights that pick uniformly among the distinct drafted tokens, ``(V,) * K + (V,)``."""
    tuples = np.indices((vocab,) * k).reshape(k, -1).T
    return _membership_rows(tuples, vocab).reshape((vocab,) * k + (vocab,))


def _membership_rows(tuples: np.ndarray, vocab: int) -> np.ndarray:
    rows = np.zeros((tuples.shape[0], vocab))
    for col in tuples.T:
        rows[np.arange(tuples.shape[0]), col] = 1.0
    return rows / rows.sum(axis=1, keepdims=True)


def induced_distribution(draft: np.ndarray, weights: np.ndarray, num_drafts: int) -> np.ndarray:
    """``p_I(y) = sum_t P(t) beta_y(t)``, shape ``(V,)``.

    Args:
        draft: validated ``(V,)`` or ``(K, V)``.
        weights: ``(V,) * K + (V,)`` selection weights.
        num_drafts: K.
    """
    joint = np.ones(())
    for i in range(num_drafts):
        row = draft if draft.ndim == 1 else draft[i]
        joint = np.multiply.outer(joint, row)
    return np.tensordot(joint, weights, axes=num_drafts)


class CanonicalScheme(SelectionScheme):
    """Two-step scheme: select a draft with weights ``beta``, then single-draft SpS to ``q``.

    Args:
        draft: ``(V,)`` with ``num_drafts=K`` or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        weights: optional ``(V,) * K + (V,)`` selection weights ``beta_y(x_1..x_K)``
            (non-negative, zero unless ``y`` is drafted, summing to 1 over ``y``). By
            default the optimal weights are found with :func:`solve_canonical_lp`.
        max_variables: LP size limit.

    Attributes:
        weights: ``(V,) * K + (V,)`` selection weights.
        induced: ``(V,)`` induced distribution ``p_I``.
    """

    name = "canonical"

    def __init__(self, *, draft, target, num_drafts=None, weights=None, max_variables: int = MAX_LP_VARIABLES):
        super().__init__(draft=draft, target=target, num_drafts=num_drafts)
        if weights is None:
            _, weights = solve_canonical_lp(
                draft=self.draft, target=self.target, num_drafts=self.num_drafts, max_variables=max_variables
            )
        else:
            weights = self._check_weights(weights)
        self.weights = weights
        self.induced = induced_distribution(self.draft, weights, self.num_drafts)
        positive = self.induced > 0
        self._accept = np.zeros(self.vocab_size)  # min(1, q / p_I), 0 where p_I = 0 (never selected)
        self._accept[positive] = np.minimum(1.0, self.target[positive] / self.induced[positive])
        self._residual = residual(self.target, self.induced)

    def _check_weights(self, weights) -> np.ndarray:
        vocab, k = self.vocab_size, self.num_drafts
        arr = np.asarray(weights, dtype=np.float64)
        if arr.shape != (vocab,) * k + (vocab,):
            raise ValueError(f"`weights` must have shape {(vocab,) * k + (vocab,)} = (V,)*K + (V,), got {arr.shape}")
        if not np.all(arr >= 0):
            raise ValueError("`weights` must be finite and >= 0")
        tuples = np.indices((vocab,) * k).reshape(k, -1).T
        flat = arr.reshape(-1, vocab)
        if np.any(flat * (_membership_rows(tuples, vocab) == 0) > 0):
            raise ValueError("`weights[x_1..x_K, y]` must be 0 unless y is one of x_1..x_K (only drafts can be selected)")
        if not np.allclose(flat.sum(axis=1), 1.0, atol=1e-9):
            raise ValueError("`weights[x_1..x_K, :]` must sum to 1 for every draft tuple")
        return arr / arr.sum(axis=-1, keepdims=True)

    def acceptance(self) -> float:
        """``sum_y min(q(y), p_I(y))``."""
        return float(np.minimum(self.target, self.induced).sum())

    def conditional(self, drafts):
        tokens = self.check_tokens(drafts)
        beta = self.weights[tuple(tokens)]
        accept = float(beta @ self._accept)
        return beta * self._accept + (1.0 - accept) * self._residual, accept

    def sample(self, drafts, rng: np.random.Generator) -> Selection:
        tokens = self.check_tokens(drafts)
        check_rng(rng)
        y = sample_index(self.weights[tuple(tokens)], rng)
        if rng.random() * self.induced[y] < self.target[y]:  # accept w.p. min(1, q(y)/p_I(y))
            return Selection(int(y), True, int(np.flatnonzero(tokens == y)[0]))
        return Selection(sample_index(self._residual, rng), False, None)


__all__ = ["CanonicalScheme", "induced_distribution", "solve_canonical_lp"]
