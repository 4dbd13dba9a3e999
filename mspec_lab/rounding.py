"""Tolerances from float32 rounding, for checks that compare model outputs across machines.

A float32 forward pass rounds every sum it makes. A CPU with other vector instructions, a
GPU, or another version of a math library sums in another order, so the same model gives
slightly different logits on different machines. A check that compares numbers computed
on this machine with numbers stored by another one (a committed results file) must allow
for that difference, and no more: its tolerance comes from float32 rounding, never from
what one CPU happened to give.

The recipe used by the book's check cells and the tests:

1. **Measure** this machine's float32 rounding: the same forward pass in float64 (the
   model cast to float64) gives the logits to about 1e-15, so
   ``e = max |z_float32 - z_float64|`` (:func:`logit_rounding_error`) is the size of the
   float32 error here. It is measured, not assumed, so it holds on any CPU or GPU.
2. **Another machine** sums the same products in another order: its error has the same
   size. We allow it twice ours, so the two machines' logits differ by at most
   ``e + 2 e <= LOGIT_MARGIN * e`` with ``LOGIT_MARGIN = 4``.
3. **Propagate** to what the check compares. A softmax at temperature ``T`` moves by at
   most ``max |dz| / (2 T)`` in total variation (``dp_i = p_i (v_i - p.v) / T``, and the
   mean absolute deviation of ``v`` is at most ``max |v|``). The optimal acceptance of K
   i.i.d. drafts changes by at most ``K TV(p, p') + TV(q, q')`` (compose an optimal
   coupling with couplings of the perturbed laws), so :func:`acceptance_tolerance` is
   ``K * d_p / (2 T_p) + d_q / (2 T_q)``. The baselines and the IS schemes are built from
   the same ``min(p, q)`` terms; the checks print the largest difference beside the bound
   (a few percent of it in practice).

Sums over a vocabulary (:func:`softmax_sum_tolerance`): ``n`` float32 numbers summed in any
order carry an error of at most ``(n - 1) u`` times their total (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., eq. 4.4), ``u = 2**-24``, plus one rounding
``u`` per division when the softmax normalises.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "LOGIT_MARGIN",
    "UNIT_ROUNDOFF",
    "acceptance_tolerance",
    "logit_rounding_error",
    "logit_tolerance",
    "softmax_sum_tolerance",
]

#: Unit roundoff of IEEE float32: a float32 operation has relative error at most this.
UNIT_ROUNDOFF = 2.0**-24
#: Two machines' float32 logits differ by at most this many times this machine's measured
#: float32 error: ours (1) plus another summation order's, allowed twice ours (2), rounded up.
LOGIT_MARGIN = 4.0


def logit_rounding_error(logits, exact_logits) -> float:
    """This machine's float32 rounding of a forward pass, ``max |z - z_exact|``.

    Args:
        logits: float32 logits ``(..., V)`` (numpy array or torch tensor, any dtype).
        exact_logits: the same logits from the model cast to float64, same shape.

    Returns:
        The largest absolute difference over the finite entries (0.0 if there are none).

    Raises:
        ValueError: if the shapes differ or the two mask (``-inf``) different tokens.
    """
    a, b = _as_float64(logits), _as_float64(exact_logits)
    if a.shape != b.shape:
        raise ValueError(
            f"`logits` has shape {a.shape} but `exact_logits` has {b.shape}: pass the same "
            "positions computed in float32 and in float64"
        )
    finite = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(a[~finite], b[~finite]):
        raise ValueError(
            "`logits` and `exact_logits` mask (-inf) different tokens: that is no rounding "
            "difference; pass the same model's logits in float32 and in float64"
        )
    return float(np.max(np.abs(a[finite] - b[finite]))) if finite.any() else 0.0


def logit_tolerance(model, input_ids, exact_model=None) -> float:
    """How far two float32 paths to ``model``'s logits may differ, measured on ``input_ids``.

    Two ways to the same logits (with and without a KV cache, a static or a dynamic cache,
    one row or a batch) sum the same products in other orders; each rounds by about this
    machine's float32 error ``e`` of a forward pass, measured against a float64 copy of the
    model. Their difference is at most ``LOGIT_MARGIN * e`` (module doc, step 2).

    Args:
        model: a causal LM (``model(input_ids=...).logits``) in float32, or in float16 or
            bfloat16 (then ``e`` is that precision's rounding); it is copied, not changed.
        input_ids: token ids ``(B, T)``, as long as the sequences the check compares.
        exact_model: ``model`` cast to float64, if the caller keeps one for many checks
            (default: a copy made here).

    Returns:
        ``LOGIT_MARGIN * logit_rounding_error(float32 logits, float64 logits)``.
    """
    import copy

    import torch

    exact = copy.deepcopy(model).to(torch.float64) if exact_model is None else exact_model
    with torch.no_grad():
        error = logit_rounding_error(model(input_ids=input_ids).logits, exact(input_ids=input_ids).logits)
    return LOGIT_MARGIN * error


def acceptance_tolerance(*, draft_error: float, target_error: float, draft_temperature: float,
                         target_temperature: float, num_drafts: int) -> float:
    """How far an acceptance from float32 logits may move between two machines.

    Args:
        draft_error: :func:`logit_rounding_error` of the draft logits on this machine.
        target_error: the same for the target logits.
        draft_temperature: temperature of the draft softmax ``p``.
        target_temperature: temperature of the target softmax ``q``.
        num_drafts: K, the number of i.i.d. drafts.

    Returns:
        ``K * d_p / (2 T_p) + d_q / (2 T_q)`` with ``d = LOGIT_MARGIN * error`` (module doc).
    """
    for name, value in (("draft_error", draft_error), ("target_error", target_error)):
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"`{name}` must be a finite number >= 0, got {value!r}")
    for name, value in (("draft_temperature", draft_temperature),
                        ("target_temperature", target_temperature)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"`{name}` must be a positive temperature, got {value!r}")
    if int(num_drafts) != num_drafts or num_drafts < 1:
        raise ValueError(f"`num_drafts` must be an integer >= 1, got {num_drafts!r}")
    d_p, d_q = LOGIT_MARGIN * draft_error, LOGIT_MARGIN * target_error
    return num_drafts * d_p / (2 * draft_temperature) + d_q / (2 * target_temperature)


def softmax_sum_tolerance(vocab_size: int, unit_roundoff: float = UNIT_ROUNDOFF) -> float:
    """Worst-case distance from 1 of the sum of a softmax over ``vocab_size`` entries.

    The normaliser is a sum of ``V`` positive numbers, exact within ``(V - 1) u`` of its
    value in any summation order; each division adds ``u``; summing the result in float64
    adds nothing that matters. So ``|sum - 1| <= V u``.

    Args:
        vocab_size: V, the number of entries.
        unit_roundoff: ``u`` of the dtype the softmax ran in (default float32's).
    """
    if int(vocab_size) != vocab_size or vocab_size < 1:
        raise ValueError(f"`vocab_size` must be an integer >= 1, got {vocab_size!r}")
    return vocab_size * unit_roundoff


def _as_float64(x) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, on any device
        x = x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)
