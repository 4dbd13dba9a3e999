"""Sequence-level speculative decoding (mspec.lm.decoding) on tiny random OPT models.

The statistical losslessness test lives in tests/test_decoding_lossless.py.
"""

import copy

import numpy as np
import pytest
import torch
from transformers import OPTConfig, OPTForCausalLM

from mspec.lm import cache, decoding

from mspec import registry
from mspec.lm.decoding import autoregressive_generate, generate_with_baselines, speculative_generate
from mspec.rounds import make_round_rule, per_position
from mspec_lab.rounding import logit_tolerance

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

torch.set_num_threads(1)


def tiny_opt(seed: int, vocab_size: int = 8, init_std: float = 0.5) -> OPTForCausalLM:
    """A random-weight 2-layer OPT (no download); init_std 0.5 makes its distributions peaked."""
    torch.manual_seed(seed)
    config = OPTConfig(
        vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, ffn_dim=32, num_attention_heads=2,
        word_embed_proj_dim=16, max_position_embeddings=64, init_std=init_std, dropout=0.0,
        pad_token_id=0, bos_token_id=0, eos_token_id=1,
    )
    return OPTForCausalLM(config).eval()


def perturbed(model: OPTForCausalLM, sigma: float = 0.12, seed: int = 1) -> OPTForCausalLM:
    """A different model near ``model``: every weight plus seeded N(0, sigma^2) noise.

    sigma = 0.12 gives a total variation of about 0.15-0.3 between the two next-token
    distributions, so drafts are often accepted and often rejected.
    """
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(sigma * torch.randn(param.shape, generator=gen))
    return other


@pytest.fixture(scope="module")
def models():
    target_model = tiny_opt(0)
    return perturbed(target_model), target_model


def test_cached_logits_equal_full_recomputation(models, monkeypatch):
    """Every cached forward pass (both models, all K rows) equals a forward pass without cache."""
    draft_model, target_model = models
    calls = {"n": 0, "rows": set()}
    forward = cache.CachedModel.forward
    exact_models = {}

    def checked_forward(self, input_ids, last=1):
        before = self.tokens
        logits = forward(self, input_ids, last)
        ids = torch.cat([before, input_ids], dim=1)
        with torch.no_grad():
            full = self.model(input_ids=ids).logits.double()
        assert logits.shape == (input_ids.shape[0], last, 8)
        # two float32 paths (cache, none): within float32 rounding, measured (mspec_lab.rounding)
        exact = exact_models.setdefault(id(self.model), copy.deepcopy(self.model).double())
        assert (logits - full[:, -last:]).abs().max() <= logit_tolerance(self.model, ids, exact)
        calls["n"] += 1
        calls["rows"].add(input_ids.shape[0])
        return logits

    monkeypatch.setattr(cache.CachedModel, "forward", checked_forward)
    result = speculative_generate(
        [2, 5, 3], draft_model=draft_model, target_model=target_model, num_drafts=3, draft_length=3,
        max_new_tokens=30, generator=3, eos_token_id=False,  # no end-of-sequence: run all 30 tokens
    )
    assert len(result.rounds) >= 5 and calls["n"] > 3 * len(result.rounds)
    assert 3 in calls["rows"]
    # some rounds accepted everything (draft cache lags one token) and some rejected early
    assert any(r.bonus for r in result.rounds) and any(r.accepted_length == 0 for r in result.rounds)


def test_caches_hold_the_accepted_prefix(models, monkeypatch):
    """After each round both batch-1 caches hold a prefix of prompt + output."""
    draft_model, target_model = models
    kept = []
    keep = cache.CachedModel.keep

    def recording_keep(self, row, length):
        keep(self, row, length)
        kept.append(self.tokens[0].tolist())
        assert self.cache.get_seq_length() == self.tokens.shape[1] == length

    monkeypatch.setattr(cache.CachedModel, "keep", recording_keep)
    prompt = [4, 1]
    result = speculative_generate(prompt, draft_model=draft_model, target_model=target_model,
                                  num_drafts=2, draft_length=4, max_new_tokens=25, generator=0)
    full = prompt + result.token_ids
    # (the last round's caches may run past the output, which max_new_tokens truncated)
    assert kept and all(full[: len(tokens)] == tokens[: len(full)] for tokens in kept)


def test_output_and_metrics(models):
    draft_model, target_model = models
    result = speculative_generate(
        torch.tensor([[2, 3]]), draft_model=draft_model, target_model=target_model, scheme="spectr",
        num_drafts=3, draft_length=4, max_new_tokens=23, generator=torch.Generator().manual_seed(1),
        eos_token_id=False,  # no end-of-sequence: run all 23 tokens
    )
    assert len(result.token_ids) == 23  # truncated exactly at max_new_tokens
    assert all(0 <= t < 8 for t in result.token_ids)
    assert sum(r.emitted for r in result.rounds) == 23
    assert result.num_target_calls == len(result.rounds)
    assert 1.0 <= result.block_efficiency <= 5.0
    acc = result.acceptance_per_position()
    assert acc.shape == (4,) and np.all((acc[~np.isnan(acc)] >= 0) & (acc[~np.isnan(acc)] <= 1))
    for r in result.rounds:
        assert len(r.alive) == min(r.accepted_length + 1, 4) and r.alive[0] == 3
        assert all(a >= b for a, b in zip(r.alive, r.alive[1:]))
        assert (r.winner is None) == (r.accepted_length == 0)
        assert min(r.draft_time, r.target_time, r.selection_time, r.cache_time) >= 0
    timing = result.timing()
    assert set(timing) == {"draft", "target", "selection", "cache", "other", "draft_step"}
    assert min(timing.values()) >= 0 and timing["draft_step"] == pytest.approx(timing["draft"] / 4)
    # the five parts add up to the mean round (decoding time after the prefill, per round)
    parts = sum(timing[part] for part in ("draft", "target", "selection", "cache", "other"))
    assert parts == pytest.approx((result.wall_time - result.prefill_time) / len(result.rounds))
    assert result.tokens_per_second > 0


def test_scheme_is_built_only_for_two_or_more_alive_drafts(models, monkeypatch):
    """A position with one alive draft runs single-draft sampling without building the scheme."""
    from mspec import registry

    draft_model, target_model = models
    built = []
    make = registry.make_scheme

    def recording_make(name, **kwargs):
        built.append(kwargs["num_drafts"])
        return make(name, **kwargs)

    monkeypatch.setattr(registry, "make_scheme", recording_make)
    result = speculative_generate([1, 6], draft_model=draft_model, target_model=target_model, scheme="optimal",
                                  num_drafts=3, draft_length=4, draft_temperatures=2.0, max_new_tokens=40,
                                  generator=5)
    alive = [a for r in result.rounds for a in r.alive]
    assert 1 in alive and 3 in alive  # both paths ran
    assert sorted(built) == sorted(a for a in alive if a >= 2)


def test_expected_round_tokens(models):
    """The expected tokens of a round, averaged over the scheme's randomness exactly, match
    the mean of many selections on the same drafts; K = 1 has a closed form."""
    draft_model, target_model = models
    rounds = []
    speculative_generate([3, 1], draft_model=draft_model, target_model=target_model, num_drafts=3, draft_length=3,
                         draft_temperatures=1.6, max_new_tokens=12, generator=2,
                         on_round=lambda *r: rounds.append([x.clone() for x in r]))
    assert rounds
    drafted, draft_probs, target_probs = rounds[0]
    rng = np.random.default_rng(0)
    for scheme in ("optimal", "is-ratio", "spectr"):
        expected = decoding.expected_round_tokens(drafted, draft_probs, target_probs, scheme=scheme,
                                                  draft_temperatures=[1.6] * 3)
        assert 1.0 <= expected <= 4.0
        rule = make_round_rule("per-position", scheme=scheme, num_drafts=3, draft_temperatures=1.6)
        arrays = (drafted.numpy(), draft_probs.numpy(), target_probs.numpy())
        emitted = np.array([len(rule.verify(*arrays, rng).tokens) for _ in range(3000)])
        assert abs(emitted.mean() - expected) < 4 * emitted.std() / np.sqrt(emitted.size) + 1e-9, scheme
    # one draft: E = 1 + a_1 + a_1 a_2 + a_1 a_2 a_3 with a_j = min(1, q(x_j) / p(x_j))
    x = drafted[0].numpy()
    p = draft_probs[0].numpy()[np.arange(3), x]
    q = target_probs[0].numpy()[np.arange(3), x]
    a = np.minimum(1.0, q / p)
    want = 1 + a[0] + a[0] * a[1] + a[0] * a[1] * a[2]
    got = decoding.expected_round_tokens(drafted[:1], draft_probs[:1], target_probs[:1], scheme="specinfer",
                                         draft_temperatures=1.6)
    assert got == pytest.approx(want, abs=1e-12)
    # an end-of-sequence token ends the generation: with the second drafted token as EOS,
    # E = 1 + a_1 (position 2 emits one token, nothing follows), or 1 if the first is EOS too
    got = decoding.expected_round_tokens(drafted[:1], draft_probs[:1], target_probs[:1], scheme="specinfer",
                                         draft_temperatures=1.6, eos_token_id=int(x[1]))
    assert got == pytest.approx(1.0 if x[0] == x[1] else 1 + a[0], abs=1e-12)
    with pytest.raises(ValueError, match="target_probs"):
        decoding.expected_round_tokens(drafted, draft_probs, target_probs[:, :-1], scheme="spectr",
                                       draft_temperatures=1.6)


def _toy_tree_model(vocab, temperature):
    """Prefix-dependent draft and target distributions over ``vocab`` tokens: both logits are
    a fixed function of the prefix, the draft's noisier and at ``temperature``."""
    def dists(prefix):
        rng = np.random.default_rng([25, *prefix])  # 25: the root is far from easy (P* < 0.9)
        logits = rng.normal(size=vocab) * 2.0
        q = np.exp(logits - logits.max())
        p = np.exp((logits + rng.normal(size=vocab) - logits.max()) / temperature)
        return p / p.sum(), q / q.sum()
    return dists


@pytest.mark.parametrize("scheme, k, eos", [("optimal", 3, None), ("spectr", 2, None), ("specinfer", 3, 2),
                                           ("is-ratio", 2, None)])
def test_expected_round_tokens_control_has_mean_zero(scheme, k, eos):
    """Z_j (reach-weighted acceptance given the drafts minus its mean) averages to exactly 0
    over every draft tree, enumerated with its probability (V = 3, L = 2); it is not 0 on
    single trees, so it can absorb noise, and the round's expected tokens come back unchanged."""
    import itertools

    vocab, big_l, temp = 3, 2, 1.6
    dists = _toy_tree_model(vocab, temp)
    mean_z, mean_sq, mean_e = np.zeros(big_l), np.zeros(big_l), 0.0
    for flat in itertools.product(range(vocab), repeat=k * big_l):
        drafted = np.array(flat).reshape(k, big_l)
        draft_probs, target_probs, weight = np.zeros((k, big_l, vocab)), np.zeros((k, big_l + 1, vocab)), 1.0
        for i in range(k):
            for j in range(big_l + 1):
                p, q = dists(tuple(drafted[i, :j]))
                target_probs[i, j] = q
                if j < big_l:
                    draft_probs[i, j] = p
                    weight *= p[drafted[i, j]]
        e, z = decoding.expected_round_tokens(drafted, draft_probs, target_probs, scheme=scheme,
                                              draft_temperatures=temp, eos_token_id=eos, control=True)
        assert e == decoding.expected_round_tokens(drafted, draft_probs, target_probs, scheme=scheme,
                                                   draft_temperatures=temp, eos_token_id=eos)
        assert z.shape == (big_l,)
        mean_z += weight * z
        mean_sq += weight * z ** 2
        mean_e += weight * e
    np.testing.assert_allclose(mean_z, 0.0, atol=1e-12)
    assert np.all(mean_sq > 1e-4)
    assert 1.0 < mean_e < big_l + 1


def test_seeded_runs_repeat(models):
    draft_model, target_model = models
    kwargs = dict(draft_model=draft_model, target_model=target_model, num_drafts=2,
                  draft_temperatures=[1.2, 1.6], max_new_tokens=12)
    a = speculative_generate([3], generator=7, **kwargs)
    b = speculative_generate([3], generator=torch.Generator().manual_seed(7), **kwargs)
    assert a.token_ids == b.token_ids


def test_eos_stops_generation(models):
    draft_model, target_model = models
    kwargs = dict(draft_model=draft_model, target_model=target_model, num_drafts=2, draft_length=3,
                  max_new_tokens=30)
    ids = speculative_generate([2], generator=5, **kwargs).token_ids
    eos = ids[6]
    # the same seed makes the same choices up to the first EOS, then stops right after it
    stopped = speculative_generate([2], generator=5, eos_token_id=eos, **kwargs).token_ids
    assert stopped == ids[: ids.index(eos) + 1]
    auto = autoregressive_generate([2], target_model=target_model, max_new_tokens=30, generator=5)
    eos = auto.token_ids[4]
    stopped = autoregressive_generate([2], target_model=target_model, max_new_tokens=30, generator=5,
                                      eos_token_id=[eos]).token_ids
    assert stopped == auto.token_ids[: auto.token_ids.index(eos) + 1]


def test_baselines(models):
    draft_model, target_model = models
    out = generate_with_baselines(
        [2, 4], draft_model=draft_model, target_model=target_model, scheme="specinfer", num_drafts=3,
        draft_length=3, draft_temperatures=[1.0, 1.2, 1.4], max_new_tokens=16, generator=0, eos_token_id=False,
    )
    assert set(out) == {"autoregressive", "single", "multi"}
    assert out["autoregressive"].block_efficiency == 1.0 and len(out["autoregressive"].token_ids) == 16
    assert out["single"].num_drafts == 1 and out["single"].method == "single"
    assert out["multi"].num_drafts == 3 and len(out["multi"].token_ids) == 16


def test_sampling_settings_restrict_tokens(models):
    """With top_k = 1 both models are deterministic, so every draft agrees with the target."""
    draft_model, target_model = models
    spec = speculative_generate([2], draft_model=target_model, target_model=target_model, top_k=1,
                                num_drafts=2, draft_length=3, max_new_tokens=12, generator=0)
    auto = autoregressive_generate([2], target_model=target_model, top_k=1, max_new_tokens=12, generator=1)
    assert spec.token_ids == auto.token_ids
    assert all(r.bonus for r in spec.rounds)  # identical draft and target: never a rejection


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_drafts=0), "num_drafts"),
        (dict(draft_length=0), "draft_length"),
        (dict(prompt_ids=[]), "prompt_ids"),
        (dict(prompt_ids=torch.zeros((2, 3), dtype=torch.long)), "prompt_ids"),
        (dict(target_temperature=0.0), "target_temperature"),
        (dict(draft_temperatures=-1.0), "draft_temperatures"),
        (dict(draft_temperatures=[1.0, 1.0, 1.0]), "draft_temperatures"),
        (dict(scheme="nope"), "scheme"),
        (dict(scheme="single"), "num_drafts"),
        (dict(scheme="spectr", draft_temperatures=[1.0, 1.5]), "identical"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(max_new_tokens=100), "positions"),
        (dict(top_k=0), "top_k"),
        (dict(generator="seed"), "generator"),
        # round rules: a scheme a rule would ignore, a K it cannot verify, an unknown rule
        (dict(num_drafts=1, verify="block", scheme="optimal"), "verify='block'.*scheme='optimal'"),
        (dict(verify="traversal", scheme="specinfer"), "verify='traversal'.*scheme='specinfer'"),
        (dict(verify="traversal", scheme_params=dict(s=2)), "scheme_params"),
        (dict(verify="block"), "num_drafts=1"),
        (dict(verify="selected-block", scheme="specinfer"), "scheme"),
        (dict(verify="nope"), "verify"),
    ],
)
def test_bad_input(models, kwargs, match):
    draft_model, target_model = models
    call = dict(prompt_ids=[2], draft_model=draft_model, target_model=target_model, num_drafts=2,
                max_new_tokens=5, generator=0)
    call.update(kwargs)
    with pytest.raises(ValueError, match=match):
        speculative_generate(call.pop("prompt_ids"), **call)


def test_bad_models(models):
    draft_model, target_model = models
    with pytest.raises(ValueError, match="vocabularies"):
        speculative_generate([2], draft_model=tiny_opt(0, vocab_size=9), target_model=target_model,
                             max_new_tokens=5)
    training = tiny_opt(0).train()
    with pytest.raises(ValueError, match="draft_model"):
        speculative_generate([2], draft_model=training, target_model=target_model, max_new_tokens=5)
    with pytest.raises(ValueError, match="temperature"):
        autoregressive_generate([2], target_model=target_model, temperature=0)


def test_drafts_with_one_prefix_sample_from_one_bit_identical_row(models):
    """Alive drafts that share their prefix and temperature are identical drafts for the
    selection, which is only exact if they were drawn from one bit-identical distribution
    (a batched forward pass may differ between rows in the last bits, e.g. with several
    CPU threads)."""
    draft_model, target_model = models

    class RowNoise(type(draft_model)):
        """Logits that differ between batch rows in the last bits, as batched kernels may."""

        def forward(self, *args, cache=None, **kwargs):  # `cache`: the decoder looks for it by name
            out = super().forward(*args, cache=cache, **kwargs)
            rows = torch.arange(out.logits.shape[0], dtype=out.logits.dtype)[:, None, None]
            out.logits = out.logits + 1e-6 * rows * torch.linspace(0, 1, out.logits.shape[-1])
            return out

    noisy = RowNoise(draft_model.config).eval()
    noisy.load_state_dict(draft_model.state_dict())
    rounds = []
    speculative_generate([3, 1, 4], draft_model=noisy, target_model=target_model, num_drafts=6,
                         draft_length=4, draft_temperatures=[1.6, 1.6, 1.6, 1.6, 2.0, 2.0], max_new_tokens=40,
                         generator=5, eos_token_id=False,
                         on_round=lambda *r: rounds.append([x.clone() for x in r]))
    groups = 0
    for drafted, draft_probs, _ in rounds:
        temps = [1.6] * 4 + [2.0] * 2
        for j in range(drafted.shape[1]):
            for i in range(6):
                for r in range(i):
                    if temps[i] == temps[r] and torch.equal(drafted[i, :j], drafted[r, :j]):
                        assert torch.equal(draft_probs[i, j], draft_probs[r, j])
                        groups += 1
    assert groups > 50


def test_position_scheme_is_the_one_place_that_decides():
    rows = np.array([[0.5, 0.5], [0.5, 0.5], [0.2, 0.8]])
    target = np.tile([0.9, 0.1], (3, 1))
    assert isinstance(per_position.position_scheme("optimal", {}, rows, target, [1.0] * 3, [1]), registry.get_scheme("single"))
    rule = per_position.position_scheme("spectr", {}, rows, target, [1.0, 1.0, 2.0], [0, 1])
    assert rule.identical and rule.num_drafts == 2
    rule = per_position.position_scheme("specinfer", {}, rows, target, [1.0, 1.0, 2.0], [0, 2])
    assert not rule.identical and rule.num_drafts == 2
