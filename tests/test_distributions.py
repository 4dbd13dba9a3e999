"""Validation and logits -> distribution helpers (numpy and torch must agree)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mspec
from mspec.distributions import check_distribution, check_draft_target

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

LOGITS = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -np.inf])


def test_softmax_with_temperature():
    probs = mspec.distribution_from_logits(LOGITS, temperature=2.0)
    expected = np.exp(LOGITS / 2.0)
    np.testing.assert_allclose(probs, expected / expected.sum())
    assert probs[-1] == 0.0  # -inf masks a token


def test_top_k_keeps_k_tokens():
    probs = mspec.distribution_from_logits(LOGITS, top_k=2)
    assert np.count_nonzero(probs) == 2
    np.testing.assert_allclose(probs[:2], np.exp([2.0, 1.0]) / np.exp([2.0, 1.0]).sum())


def test_top_p_keeps_the_smallest_nucleus():
    full = mspec.distribution_from_logits(LOGITS)
    # full[0] ~ 0.57 < 0.6 so the nucleus for top_p = 0.6 is {0, 1}
    probs = mspec.distribution_from_logits(LOGITS, top_p=0.6)
    assert np.flatnonzero(probs).tolist() == [0, 1]
    np.testing.assert_allclose(probs[:2], full[:2] / full[:2].sum())
    # a tiny top_p still keeps the most likely token
    assert np.flatnonzero(mspec.distribution_from_logits(LOGITS, top_p=1e-9)).tolist() == [0]


@settings(max_examples=60, deadline=None)
@given(
    logits=st.lists(st.floats(-20, 20), min_size=1, max_size=12),
    temperature=st.floats(0.1, 3.0),
    top_k=st.one_of(st.none(), st.integers(1, 12)),
    top_p=st.one_of(st.none(), st.floats(0.05, 1.0)),
)
def test_numpy_and_torch_agree(logits, temperature, top_k, top_p):
    arr = np.array(logits)
    a = mspec.distribution_from_logits(arr, temperature=temperature, top_k=top_k, top_p=top_p)
    b = mspec.distribution_from_logits(torch.tensor(arr), temperature=temperature, top_k=top_k, top_p=top_p)
    assert isinstance(b, torch.Tensor)
    np.testing.assert_allclose(a, b.numpy(), atol=1e-12)
    assert a.sum() == pytest.approx(1.0)
    check_distribution(a)


def test_torch_batches_over_last_axis():
    logits = torch.randn(3, 4, 10, generator=torch.Generator().manual_seed(0))
    probs = mspec.distribution_from_logits(logits, temperature=1.3, top_k=4)
    assert probs.shape == (3, 4, 10)
    # float32 sums of V = 10 entries are within V u = 6e-7 of 1 (mspec_lab.rounding), inside
    # assert_close's float32 tolerance (atol 1e-5)
    torch.testing.assert_close(probs.sum(-1), torch.ones(3, 4))
    assert (probs > 0).sum(-1).max() == 4


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(temperature=0.0), "temperature"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
    ],
)
def test_bad_sampling_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mspec.distribution_from_logits(LOGITS, **kwargs)
    with pytest.raises(ValueError, match=match):
        mspec.distribution_from_logits(torch.tensor(LOGITS), **kwargs)


def test_bad_logits():
    with pytest.raises(ValueError, match="NaN"):
        mspec.distribution_from_logits([0.0, np.nan])
    with pytest.raises(ValueError, match="every token"):
        mspec.distribution_from_logits([-np.inf, -np.inf])
    with pytest.raises(ValueError, match="every token"):
        mspec.distribution_from_logits(torch.tensor([-np.inf, -np.inf]))
    with pytest.raises(ValueError, match="shape"):
        mspec.distribution_from_logits(np.float64(1.0))


def test_validation_renormalises_within_tolerance_and_accepts_tensors():
    x = check_distribution(np.array([0.5, 0.5 + 1e-6]))
    assert x.sum() == pytest.approx(1.0, abs=1e-15)
    draft, target, k = check_draft_target(torch.tensor([[0.25, 0.75]] * 3), torch.tensor([0.5, 0.5]))
    assert draft.shape == (3, 2) and k == 3 and target.dtype == np.float64
    with pytest.raises(ValueError, match="`target` must sum to 1"):
        check_distribution([0.5, 0.4], "target")
    with pytest.raises(ValueError, match="`draft` must be an array"):
        check_draft_target(object(), [1.0], 1)
    with pytest.raises(ValueError, match="inf"):
        check_distribution([np.inf, 0.0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_logits_give_a_valid_distribution(dtype):
    """A float16/bfloat16 softmax over 50272 tokens underflows or misses 1 by ~1e-4; the
    softmax runs in float32, so the package's own validation accepts the result."""
    torch = pytest.importorskip("torch")
    from mspec.distributions import check_distribution

    from mspec_lab.rounding import UNIT_ROUNDOFF, softmax_sum_tolerance

    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(50272, generator=gen)).to(getattr(torch, dtype))
    for kwargs in ({}, {"temperature": 0.7, "top_p": 0.9}, {"top_k": 50}):
        probs = mspec.distribution_from_logits(logits, **kwargs)
        assert probs.dtype == torch.float32
        check_distribution(probs)
        # Tolerances from float32 rounding (mspec_lab.rounding), not from one CPU: each
        # normalisation sums V float32 numbers, exact within V u in any order, and top-p
        # normalises twice, so the sum is 1 within 2 V u (3e-3 at V = 50272).
        assert abs(float(probs.double().sum()) - 1.0) <= 2 * softmax_sum_tolerance(50272)
        # That bound cannot tell float32 from a half-precision softmax (which misses by
        # ~1e-4), but the entries can: against the float64 softmax of the same logits each
        # kept entry has one common factor (the normalisers) times its own rounding, which
        # is at most (4 max|z|/T + 6) u: z/T and the max subtracted before exp round by
        # u each (an absolute error u |z/T| in the exponent, twice), exp itself by at most
        # 4 u, each division by u. bfloat16 rounds each entry by 2^-9, 2^15 times more.
        exact = mspec.distribution_from_logits(logits.double(), **kwargs)
        kept = exact > 0
        ratio = probs.double()[kept] / exact[kept]
        scale = float(logits.double().abs().max()) / kwargs.get("temperature", 1.0)
        bound = 2 * (4 * scale + 6) * UNIT_ROUNDOFF
        assert float(ratio.max() - ratio.min()) <= bound
    # the control: a softmax run in bfloat16 itself breaks the entry bound
    half = torch.softmax(logits.to(torch.bfloat16), dim=-1).double()
    ratio = half / mspec.distribution_from_logits(logits.double())
    assert float(ratio.max() - ratio.min()) > 2 * (4 * float(logits.double().abs().max()) + 6) * UNIT_ROUNDOFF
    assert (mspec.distribution_from_logits(logits) > 0).all()  # no underflow to 0 at these logits


def test_float16_overflow_names_the_precision():
    torch = pytest.importorskip("torch")
    logits = torch.tensor([7e4, 0.0], dtype=torch.float32).to(torch.float16)  # inf in float16
    with pytest.raises(ValueError, match="float16"):
        mspec.distribution_from_logits(logits)


def test_complex_ragged_and_wrapped_ids_are_refused_clearly():
    with pytest.raises(ValueError, match="complex"):
        mspec.make_scheme("specinfer", draft=[0.5 + 1j, 0.5], target=[0.5, 0.5], num_drafts=1)
    with pytest.raises(ValueError, match="ragged"):
        mspec.make_scheme("specinfer", draft=[[0.5, 0.5], [1.0]], target=[0.5, 0.5])
    rule = mspec.make_scheme("specinfer", draft=[0.5, 0.5], target=[0.5, 0.5], num_drafts=2)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="18446744073709551615 outside"):
        rule.sample(np.array([2**64 - 1, 0], dtype=np.uint64), rng)
    with pytest.raises(ValueError, match="ragged"):
        rule.sample([[0], [1, 1]], rng)
