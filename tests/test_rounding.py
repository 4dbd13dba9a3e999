"""Tolerances from float32 rounding (:mod:`mspec_lab.rounding`): the bounds they rest on hold
(and are tight enough to matter), and a file check built on them catches a changed value."""

import numpy as np
import pytest

import mspec
from mspec_lab.rounding import (LOGIT_MARGIN, UNIT_ROUNDOFF, acceptance_tolerance, logit_rounding_error,
                                softmax_sum_tolerance)

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model


def softmax(z, t=1.0):
    e = np.exp((z - z.max()) / t)
    return e / e.sum()


def tv(a, b):
    return 0.5 * np.abs(a - b).sum()


def test_a_logit_change_moves_the_softmax_by_at_most_half_of_it_over_t():
    rng = np.random.default_rng(0)
    for _ in range(500):
        v, t = int(rng.integers(2, 60)), float(rng.choice([0.05, 0.5, 1.0, 2.0, 5.0]))
        z = rng.normal(0, rng.choice([0.1, 3.0, 20.0]), v)
        delta = float(rng.choice([1e-6, 1e-3, 0.3]))
        eps = rng.uniform(-delta, delta, v)
        assert tv(softmax(z, t), softmax(z + eps, t)) <= delta / (2 * t) * (1 + 1e-9) + 1e-15
    # the bound is tight: two equal logits moved apart by +-delta
    delta, t = 1e-4, 0.7
    moved = tv(softmax(np.zeros(2), t), softmax(np.array([delta, -delta]), t))
    assert moved > 0.99 * delta / (2 * t)


def test_the_optimal_acceptance_moves_by_at_most_k_tv_p_plus_tv_q():
    rng = np.random.default_rng(1)
    for _ in range(300):
        v, k = int(rng.integers(2, 12)), int(rng.integers(1, 9))
        p, q = rng.dirichlet(np.full(v, 0.5)), rng.dirichlet(np.full(v, 0.5))
        p2 = 0.9 * p + 0.1 * rng.dirichlet(np.ones(v)) if rng.random() < 0.5 else p
        q2 = 0.95 * q + 0.05 * rng.dirichlet(np.ones(v))
        a = mspec.optimal_acceptance(draft=p, target=q, num_drafts=k)
        b = mspec.optimal_acceptance(draft=p2, target=q2, num_drafts=k)
        assert abs(a - b) <= k * tv(p, p2) + tv(q, q2) + 1e-12


def test_acceptance_tolerance_is_the_documented_formula_and_checks_its_arguments():
    got = acceptance_tolerance(draft_error=1e-5, target_error=2e-5, draft_temperature=1.5,
                               target_temperature=1.0, num_drafts=4)
    assert got == pytest.approx(4 * LOGIT_MARGIN * 1e-5 / 3.0 + LOGIT_MARGIN * 2e-5 / 2.0, rel=1e-15)
    good = dict(draft_error=1e-5, target_error=1e-5, draft_temperature=1.0, target_temperature=1.0, num_drafts=2)
    for name, bad in [("draft_error", -1.0), ("target_error", np.nan), ("draft_temperature", 0.0),
                      ("target_temperature", np.inf), ("num_drafts", 0), ("num_drafts", 1.5)]:
        with pytest.raises(ValueError, match=f"`{name}`"):
            acceptance_tolerance(**{**good, name: bad})


def test_logit_rounding_error_compares_finite_entries_and_refuses_other_masks():
    torch = pytest.importorskip("torch")
    a = torch.tensor([[0.0, 1.0, float("-inf")]])
    assert logit_rounding_error(a, a.double() + torch.tensor([[1e-6, -3e-6, 0.0]], dtype=torch.float64)) \
        == pytest.approx(3e-6)
    with pytest.raises(ValueError, match="mask"):
        logit_rounding_error(a, torch.tensor([[0.0, float("-inf"), 1.0]]))
    with pytest.raises(ValueError, match="shape"):
        logit_rounding_error(np.zeros(3), np.zeros(4))


def test_a_float32_softmax_sums_to_one_within_v_u():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    for v in (3, 1000, 50272, 152064):
        z = 4 * torch.randn(v, generator=gen)
        total = float(torch.softmax(z, dim=-1).double().sum())
        assert abs(total - 1.0) <= softmax_sum_tolerance(v)
    assert softmax_sum_tolerance(50272) == 50272 * UNIT_ROUNDOFF
    with pytest.raises(ValueError, match="`vocab_size`"):
        softmax_sum_tolerance(0)


def test_a_file_check_holds_on_its_own_values_and_catches_a_changed_one():
    torch = pytest.importorskip("torch")
    from mspec_lab.experiments.acceptance import check_against_file, collect_logits, token_acceptance
    from mspec_lab.models import load_pair

    pair = load_pair("tiny", device="cpu")
    exact = load_pair("tiny", device="cpu", dtype=torch.float64)
    prompt, seed = [1, 2, 3], 7
    draft_logits, target_logits, _ = collect_logits(pair, prompt, positions=4, target_temperature=1.0, seed=seed)
    p = mspec.distribution_from_logits(draft_logits, temperature=1.5).numpy()
    q = mspec.distribution_from_logits(target_logits).numpy()
    values = [{"scheme": s, "K": k, "draft_temperature": 1.5,
               "acceptance": [token_acceptance(s, draft=p[j], target=q[j], num_drafts=k) for j in range(len(q))]}
              for s, k in [("single", 1), ("optimal", 2), ("specinfer", 3)]]
    found = check_against_file(pair, exact, prompt, values, target_temperature=1.0, seed=seed)
    assert found.holds and found.recomputed == 3 * len(q) and found.worst == 0.0
    assert 0 < found.target_error < 1e-4
    bound = acceptance_tolerance(draft_error=found.draft_error, target_error=found.target_error,
                                 draft_temperature=1.5, target_temperature=1.0, num_drafts=2)
    values[1]["acceptance"][0] += 2 * bound  # a value no rounding explains
    broken = check_against_file(pair, exact, prompt, values, target_temperature=1.0, seed=seed)
    assert not broken.holds and broken.worst_share == pytest.approx(2.0)
