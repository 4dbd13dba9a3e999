"""Probability vectors: validation, and turning logits into sampling distributions.

Every public function of :mod:`mspec` validates its distributions here, so bad input gets
a :class:`ValueError` that names the argument and says how to fix it, instead of a
traceback from deep inside numpy.

Paper notation: the *draft* distribution is ``p`` (drafts ``p_1..p_K``) and the *target*
is ``q``. The code always says ``draft=`` / ``target=``.
"""

from __future__ import annotations

import numbers

import numpy as np

#: Largest accepted deviation of a distribution's sum from 1. Anything closer is
#: renormalised (float32 softmax over 50k tokens is typically off by ~1e-6).
SUM_TOLERANCE = 1e-4
#: A sum within this of 1 counts as normalised already (it covers the rounding of a float64
#: sum over a vocabulary): the array is returned as is, without the copy renormalising makes.
NORMALISED_TOLERANCE = 1e-13


def check_distribution(x, name: str = "distribution") -> np.ndarray:
    """Validate one probability vector and return it as a normalised float64 array.

    Args:
        x: array-like of shape ``(V,)``: non-negative, finite, summing to 1.
        name: argument name used in error messages.

    Returns:
        float64 array of shape ``(V,)`` that sums to 1 (renormalised within
        :data:`SUM_TOLERANCE`).

    Raises:
        ValueError: if ``x`` is not 1-D, empty, has NaN/inf/negative entries, or does not
            sum to 1 within :data:`SUM_TOLERANCE`.
    """
    arr = _as_float_array(x, name)
    if arr.ndim != 1:
        raise ValueError(
            f"`{name}` must be a 1-D probability vector of shape (V,), got shape {arr.shape}; "
            "pass one distribution over the vocabulary"
        )
    return _check_rows(arr, name)


def check_draft_target(draft, target, num_drafts=None):
    """Validate the ``draft`` / ``target`` pair shared by every selection scheme.

    Args:
        draft: shape ``(V,)`` for K identical (i.i.d.) drafts, or ``(K, V)`` with one
            distribution per draft (non-identical drafts).
        target: shape ``(V,)``.
        num_drafts: K. Required when ``draft`` is 1-D; optional (but must agree) when it
            is 2-D.

    Returns:
        ``(draft, target, K)``: validated float64 arrays (``draft`` keeps its rank) and
        the number of drafts.
    """
    target = check_distribution(target, "target")
    arr = _as_float_array(draft, "draft")
    if arr.ndim == 1:
        if num_drafts is None:
            raise ValueError(
                "`num_drafts` is required when `draft` is a single distribution of shape (V,) "
                "(K identical drafts); pass num_drafts=K, or pass `draft` with shape (K, V)"
            )
        k = check_num_drafts(num_drafts)
    elif arr.ndim == 2:
        if arr.shape[0] < 1:
            raise ValueError("`draft` of shape (K, V) needs K >= 1 rows, got K = 0")
        k = arr.shape[0]
        if num_drafts is not None and check_num_drafts(num_drafts) != k:
            raise ValueError(
                f"`num_drafts`={num_drafts} disagrees with `draft` of shape {arr.shape} "
                f"(K = {k} rows); drop num_drafts or make them agree"
            )
    else:
        raise ValueError(
            f"`draft` must have shape (V,) (identical drafts) or (K, V) (one row per draft), "
            f"got shape {arr.shape}"
        )
    if arr.shape[-1] != target.shape[0]:
        raise ValueError(
            f"vocabulary sizes differ: `draft` has V = {arr.shape[-1]} but `target` has "
            f"V = {target.shape[0]}; both must be distributions over the same vocabulary"
        )
    return _check_rows(arr, "draft"), target, k


def check_num_drafts(num_drafts) -> int:
    """Return ``num_drafts`` as an int >= 1, or raise a ValueError naming it."""
    if isinstance(num_drafts, bool) or not isinstance(num_drafts, numbers.Integral):
        raise ValueError(f"`num_drafts` must be an integer K >= 1, got {num_drafts!r}")
    if num_drafts < 1:
        raise ValueError(f"`num_drafts` must be >= 1 (the number of drafts K), got {num_drafts}")
    return int(num_drafts)


def check_tokens(drafts, *, draft: np.ndarray, num_drafts: int) -> np.ndarray:
    """Validate drafted token ids against the (validated) draft distribution(s).

    Args:
        drafts: sequence of K token ids ``x_1..x_K``.
        draft: validated draft array, ``(V,)`` or ``(K, V)``.
        num_drafts: K.

    Returns:
        int64 array of shape ``(K,)``.

    Raises:
        ValueError: wrong count, non-integer ids, ids outside ``[0, V)``, or an id whose
            draft probability is zero (it could not have been drafted).
    """
    if hasattr(drafts, "detach") and hasattr(drafts, "cpu"):  # a torch tensor
        drafts = drafts.detach().cpu().numpy()
    try:
        arr = np.asarray(drafts)
    except ValueError as err:  # ragged nested lists
        raise ValueError(f"`drafts` must be K = {num_drafts} integer token ids, got a ragged sequence") from err
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1 or arr.shape[0] != num_drafts:
        raise ValueError(
            f"`drafts` must hold exactly K = {num_drafts} token ids, got shape {arr.shape}"
        )
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"`drafts` must be integer token ids, got dtype {arr.dtype}")
    vocab = draft.shape[-1]
    # compare before any cast: a uint64 id such as 2**64 - 1 would wrap to -1 in int64
    bad = (arr < 0) | (arr >= vocab)
    if bad.any():
        raise ValueError(
            f"`drafts` holds token id {arr[bad][0]} outside the vocabulary [0, {vocab}); "
            "token ids must index the distributions"
        )
    arr = arr.astype(np.int64)
    probs = draft[arr] if draft.ndim == 1 else draft[np.arange(num_drafts), arr]
    if (probs <= 0).any():
        i = int(np.flatnonzero(probs <= 0)[0])
        raise ValueError(
            f"`drafts[{i}]` = {int(arr[i])} has zero probability under `draft`, so it cannot "
            "have been drafted; sample the drafts from `draft`"
        )
    return arr


def _as_float_array(x, name: str) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor
        if x.is_complex():
            raise ValueError(f"`{name}` is complex; probabilities must be real numbers")
        x = x.detach().cpu().double().numpy()
    try:
        raw = np.asarray(x)
    except ValueError as err:  # numpy refuses ragged nested lists
        raise ValueError(
            f"`{name}` is ragged (rows of different lengths); pass one (V,) vector or K rows of "
            "the same length V"
        ) from err
    if np.iscomplexobj(raw):  # numpy would silently drop the imaginary part
        raise ValueError(f"`{name}` is complex; probabilities must be real numbers")
    if raw.dtype == object or raw.dtype.kind in "USV":
        raise ValueError(
            f"`{name}` must be an array of probabilities (real numbers), got {type(x).__name__} "
            f"of dtype {raw.dtype}"
        )
    try:
        return raw.astype(np.float64, copy=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"`{name}` must be an array of probabilities, got {type(x).__name__}") from err


def _check_rows(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.shape[-1] == 0:
        raise ValueError(f"`{name}` is empty; the vocabulary needs at least one token")
    lo = arr.min()
    if not lo >= 0:  # also catches NaN, since NaN comparisons are False
        what = "NaN" if np.isnan(arr).any() else "negative"
        raise ValueError(f"`{name}` has {what} entries; probabilities must be finite and >= 0")
    sums = arr.sum(axis=-1)
    bad = ~(np.abs(sums - 1.0) <= SUM_TOLERANCE)  # catches inf too
    if np.any(bad):
        raise ValueError(
            f"`{name}` must sum to 1 along its last axis (got {np.atleast_1d(sums)[np.atleast_1d(bad)][0]!r}); "
            "normalise it, e.g. with mspec.distribution_from_logits (which computes a softmax of "
            "float16/bfloat16 logits in float32; a half-precision softmax does not sum to 1)"
        )
    if np.all(np.abs(sums - 1.0) <= NORMALISED_TOLERANCE):  # already normalised: skip a copy
        return arr
    return arr / sums[..., None] if arr.ndim > 1 else arr / sums


def check_temperature(value, name: str = "temperature") -> float:
    """``value`` as a float, or a ``ValueError`` naming ``name`` unless it is a number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"`{name}` must be a number > 0, got {value!r}; for (near-)greedy decoding use a "
                         "small positive temperature")
    return float(value)


def distribution_from_logits(logits, *, temperature: float = 1.0, top_k=None, top_p=None):
    """Softmax of ``logits / temperature`` restricted to the top-k and/or top-p tokens.

    Works on numpy arrays and torch tensors (returned in the same library), over the last
    axis, so a batch of logits ``(..., V)`` gives a batch of distributions.

    Args:
        logits: array or tensor of shape ``(..., V)``.
        temperature: > 0. Greedy decoding is not sampling; use a small temperature instead.
        top_k: keep the ``top_k`` most likely tokens (``None`` keeps all). Ties at the
            k-th value are kept.
        top_p: keep the smallest set of most likely tokens whose probability reaches
            ``top_p`` in ``(0, 1]`` (nucleus sampling; at least one token is kept).

    Returns:
        Distribution of shape ``(..., V)``, float64 for numpy; for torch float64 from float64
        logits and float32 otherwise: half-precision (float16/bfloat16) logits are upcast
        before the softmax, since a float16 softmax over 50k tokens underflows thousands of
        entries to 0 and a bfloat16 one sums to 1 only within ~1e-4.
    """
    check_temperature(temperature)
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1
    ):
        raise ValueError(f"`top_k` must be None or an integer >= 1, got {top_k!r}")
    if top_p is not None and (
        isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1
    ):
        raise ValueError(f"`top_p` must be None or a number in (0, 1], got {top_p!r}")
    if hasattr(logits, "detach"):
        return _from_logits_torch(logits, float(temperature), top_k, top_p)
    arr = np.asarray(logits, dtype=np.float64)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"`logits` must have shape (..., V) with V >= 1, got shape {arr.shape}")
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValueError("`logits` contain NaN or +inf; -inf is allowed to mask a token")
    z = arr / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = np.partition(z, -top_k, axis=-1)[..., -top_k, None]
        z = np.where(z >= kth, z, -np.inf)
    top = z.max(axis=-1, keepdims=True)
    if np.isneginf(top).any():
        raise ValueError("`logits` mask every token (all -inf) in some row; keep at least one token")
    z = z - top
    probs = np.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1:
        order = np.argsort(-probs, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(probs, order, axis=-1)
        # keep token i if the mass strictly before it is < top_p (so the first is always kept)
        keep_sorted = (np.cumsum(sorted_p, axis=-1) - sorted_p) < top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
    return probs


def _from_logits_torch(logits, temperature, top_k, top_p):
    import torch

    if logits.dim() == 0 or logits.shape[-1] == 0:
        raise ValueError(f"`logits` must have shape (..., V) with V >= 1, got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        z = logits.double()
    elif logits.dtype in (torch.float16, torch.bfloat16):
        z = logits.float()  # see Returns: a half-precision softmax is not a usable distribution
    else:
        z = logits
    if torch.isnan(z).any() or torch.isposinf(z).any():
        hint = ""
        if logits.dtype == torch.float16:
            hint = (" (the logits are float16, which overflows to inf above 65504: run the model's "
                    "last layer in float32 or bfloat16, e.g. torch_dtype=torch.bfloat16)")
        raise ValueError(f"`logits` contain NaN or +inf; -inf is allowed to mask a token{hint}")
    z = z / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if torch.isneginf(z).all(dim=-1).any():
        raise ValueError("`logits` mask every token (all -inf) in some row; keep at least one token")
    probs = torch.softmax(z, dim=-1)
    if top_p is not None and top_p < 1:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs * keep
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
