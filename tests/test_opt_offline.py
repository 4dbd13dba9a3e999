"""The real ``load_pair("opt", ...)`` code path, offline, in float32, float16 and bfloat16.

A tiny random-weight OPT draft and target are saved with ``save_pretrained`` into local folders,
together with a small byte-level BPE tokenizer trained here with the ``tokenizers`` library
(its vocabulary is the models' ``vocab_size``). ``load_pair("opt", draft=folder, target=folder,
dtype=...)`` loads them exactly as it would load facebook/opt-125m and facebook/opt-13b from the
hub, and then, in every dtype: every scheme of the registry decodes a prompt, the cached logits
equal a full recomputation, and a sequence-level chi-square test finds the output law to be the
target's. float16 and bfloat16 run on the CPU too (slowly, which does not matter at this size).

Also here: the decoder's GPU-readiness fixes that a CPU can check (row index of the KV-cache
selection, generator device, per-device synchronisation) and the dry run of
``python -m mspec_lab gpu``.
"""

import copy

import numpy as np
import pytest
import torch
from test_decoding_lossless import binned_chisquare
from transformers import DynamicCache, OPTConfig, OPTForCausalLM

from mspec.lm import cache, checks, decoding

from mspec import registry
from mspec.lm.decoding import speculative_generate
from mspec.distributions import distribution_from_logits
from mspec_lab.models import load_pair
from mspec_lab.rounding import logit_tolerance

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

torch.set_num_threads(1)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0-3, as OPT's (pad 1, bos = eos 2)
# a few letters only, so the vocabulary stays small enough for the LP schemes (V^K * V variables)
CORPUS = ["a stone sat near a rose", "ten tons of tea at sea", "no one ate the toast",
          "rest on a neat stone seat", "tess sent notes to ana", "stars rose at the east"]
VOCAB = 24
PROMPT_TEXT = "a neat stone"
NUM_RUNS = 300  # chi-square runs per dtype: about 8 s each on one core
ALPHA = 1e-3


def train_tokenizer():
    """A byte-level BPE tokenizer of exactly VOCAB tokens, as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL_TOKENS, initial_alphabet=[],
                                  min_frequency=1, show_progress=False)
    tok.train_from_iterator(CORPUS * 10, trainer)
    assert tok.get_vocab_size() == VOCAB
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="</s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")


def tiny_opt(seed: int, vocab_size: int) -> OPTForCausalLM:
    """A 2-layer random OPT; init_std 0.5 (OPT's default: 0.02) makes its distributions far from uniform."""
    config = OPTConfig(vocab_size=vocab_size, hidden_size=16, word_embed_proj_dim=16, num_hidden_layers=2,
                       num_attention_heads=2, ffn_dim=32, max_position_embeddings=64, init_std=0.5,
                       dropout=0.0, attention_dropout=0.0, pad_token_id=1, bos_token_id=2, eos_token_id=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return OPTForCausalLM(config).eval()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Draft and target checkpoint folders (weights in float32, tokenizer in both)."""
    root = tmp_path_factory.mktemp("opt-checkpoints")
    tokenizer = train_tokenizer()
    target_model = tiny_opt(0, len(tokenizer))
    draft_model = tiny_opt(0, len(tokenizer))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the draft: the target plus noise, so drafts are often but not always accepted
        for param in draft_model.parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=gen))
    out = {}
    for name, model in (("draft", draft_model), ("target", target_model)):
        out[name] = root / name
        model.save_pretrained(out[name])
        tokenizer.save_pretrained(out[name])
    return out


@pytest.fixture(scope="module", params=DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def pair(request, folders):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")  # folders never need the hub; make sure nothing tries
        return load_pair("opt", draft=folders["draft"], target=folders["target"], device="cpu",
                         dtype=request.param)


def dtype_of(pair):
    return next(pair.target_model.parameters()).dtype


def test_pair_loads_from_folders_in_its_dtype(pair, folders):
    dtype = dtype_of(pair)
    for model in (pair.draft_model, pair.target_model):
        assert {p.dtype for p in model.parameters()} == {dtype}
        assert {p.device for p in model.parameters()} == {torch.device("cpu")}
        assert not model.training
    assert pair.name == "opt" and not pair.same_model and pair.vocab_size == VOCAB
    assert pair.tokenizer is not None and len(pair.tokenizer) == VOCAB and pair.eos_token_id == 2
    assert str(folders["draft"]) in pair.description and str(folders["target"]) in pair.description
    assert str(dtype).removeprefix("torch.") in pair.description
    # the two models differ (a perturbed draft), and the tokenizer round-trips the prompt
    ids = torch.tensor([pair.tokenizer(PROMPT_TEXT)["input_ids"]])
    with torch.no_grad():
        assert not torch.equal(pair.draft_model(input_ids=ids).logits, pair.target_model(input_ids=ids).logits)
    assert pair.tokenizer.decode(ids[0]) == PROMPT_TEXT


def test_weights_load_straight_onto_the_device(folders, monkeypatch):
    """Both models are read in the requested dtype directly onto the device
    (``device_map={"": device}``), not loaded on the host and moved afterwards."""
    from transformers import AutoModelForCausalLM

    calls = []
    load = AutoModelForCausalLM.from_pretrained

    def recording(name, *args, **kwargs):
        calls.append(kwargs)
        return load(name, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", recording)
    monkeypatch.setattr(torch.nn.Module, "to", lambda *a, **k: pytest.fail("a model was moved after loading"))
    pair = load_pair("opt", draft=folders["draft"], target=folders["target"], device="cpu", dtype=torch.float16)
    assert len(calls) == 2
    assert all(c["device_map"] == {"": torch.device("cpu")} and c["dtype"] == torch.float16 for c in calls)
    assert {p.dtype for m in (pair.draft_model, pair.target_model) for p in m.parameters()} == {torch.float16}


@pytest.mark.parametrize("scheme", sorted(registry.SCHEMES))
def test_every_scheme_decodes_a_prompt(pair, scheme):
    k = 1 if scheme == "single" else 2
    result = speculative_generate(PROMPT_TEXT, draft_model=pair.draft_model, target_model=pair.target_model,
                                  tokenizer=pair.tokenizer, scheme=scheme, num_drafts=k, draft_length=2,
                                  max_new_tokens=6, generator=11)
    assert 1 <= len(result.token_ids) <= 6 and all(0 <= t < VOCAB for t in result.token_ids)
    assert result.text == pair.tokenizer.decode(result.token_ids)
    assert result.num_drafts == k and result.rounds


def test_cached_logits_equal_full_recomputation(pair, monkeypatch):
    """Every cached forward pass (both models, all K rows) equals one without a cache, in the
    pair's dtype (within its rounding, measured against float64: mspec_lab.rounding)."""
    forward = cache.CachedModel.forward
    calls = {"n": 0, "rows": set(), "worst": 0.0}
    exact = {id(m): copy.deepcopy(m).double() for m in (pair.draft_model, pair.target_model)}

    def checked_forward(self, input_ids, last=1):
        before = self.tokens
        logits = forward(self, input_ids, last)
        ids = torch.cat([before, input_ids], dim=1)
        with torch.no_grad():
            full = self.model(input_ids=ids).logits.double()
        assert logits.shape == (input_ids.shape[0], last, VOCAB)
        tolerance = logit_tolerance(self.model, ids, exact[id(self.model)])
        calls["worst"] = max(calls["worst"], float((logits - full[:, -last:]).abs().max()) / tolerance)
        calls["n"] += 1
        calls["rows"].add(input_ids.shape[0])
        return logits

    monkeypatch.setattr(cache.CachedModel, "forward", checked_forward)
    result = speculative_generate(pair.tokenizer(PROMPT_TEXT)["input_ids"], draft_model=pair.draft_model,
                                  target_model=pair.target_model, num_drafts=3, draft_length=3,
                                  max_new_tokens=24, generator=3)
    assert calls["worst"] <= 1, f"cached logits differ by {calls['worst']:.0%} of their rounding bound"
    assert len(result.rounds) >= 4 and calls["n"] > 3 * len(result.rounds) and 3 in calls["rows"]
    assert any(r.accepted_length > 0 for r in result.rounds) and any(r.accepted_length < 3 for r in result.rounds)


def test_sequences_follow_the_target(pair):
    """Chi-square: NUM_RUNS 3-token continuations against their exact law under the target
    (computed from the target's full forward passes in the pair's dtype)."""
    prompt = pair.tokenizer(PROMPT_TEXT)["input_ids"]
    v = VOCAB
    contexts = torch.tensor([prompt + [a, b] for a in range(v) for b in range(v)])  # row a * V + b
    with torch.no_grad():
        logits = pair.target_model(input_ids=contexts).logits.double()[:, len(prompt) - 1 :, :]
    q = distribution_from_logits(logits).numpy()
    probs = q[0, 0][:, None, None] * q[::v, 1][:, :, None] * q[:, 2].reshape(v, v, v)
    gen = torch.Generator().manual_seed(2024)
    counts = np.zeros(v**3)
    accepted = 0
    for _ in range(NUM_RUNS):
        result = speculative_generate(prompt, draft_model=pair.draft_model, target_model=pair.target_model,
                                      scheme="specinfer", num_drafts=2, draft_length=2, max_new_tokens=3,
                                      generator=gen, eos_token_id=False)  # the law of 3 tokens, no end
        ids = result.token_ids
        counts[(ids[0] * v + ids[1]) * v + ids[2]] += 1
        accepted += sum(r.accepted_length for r in result.rounds)
    assert 0.2 * NUM_RUNS < accepted < 2 * NUM_RUNS  # drafts are accepted, but not always
    # (at this size the test has power: SpecInfer without its residual, the broken scheme of
    # tests/test_decoding_lossless.py, gets p < 1e-6 here)
    assert binned_chisquare(counts, NUM_RUNS * probs.ravel()) > ALPHA


# -- the decoder on GPUs, as far as a CPU can check it ---------------------------------------------


def test_keep_selects_the_row_with_a_cpu_index(monkeypatch):
    """``keep`` passes the surviving row as a CPU index, which selects rows of cache layers on
    any device (with device_map="auto" layers live on several GPUs; a CUDA index only works on
    its own GPU)."""
    model = tiny_opt(0, VOCAB)
    cached = cache.CachedModel(model)
    with torch.no_grad():
        cached.forward(torch.tensor([[2, 5, 7, 9]]))
        cached.expand(3)
        cached.forward(torch.tensor([[4], [6], [8]]))
    rows = [layer.keys[1].clone() for layer in cached.cache.layers]
    seen = []
    select = cached.cache.batch_select_indices
    monkeypatch.setattr(cached.cache, "batch_select_indices", lambda idx: (seen.append(idx), select(idx)))
    cached.keep(1, 5)
    assert len(seen) == 1 and seen[0].device == torch.device("cpu") and seen[0].tolist() == [1]
    assert cached.tokens.tolist() == [[2, 5, 7, 9, 6]]
    for layer, row in zip(cached.cache.layers, rows):
        assert torch.equal(layer.keys[0], row)

    # a cache whose layers sit on two devices (CPU and meta here; two GPUs in the field)
    split = DynamicCache()
    split.update(torch.randn(3, 2, 4, 8), torch.randn(3, 2, 4, 8), 0)
    split.update(torch.randn(3, 2, 4, 8, device="meta"), torch.randn(3, 2, 4, 8, device="meta"), 1)
    split.batch_select_indices(seen[0])
    assert [tuple(layer.keys.shape) for layer in split.layers] == [(1, 2, 4, 8)] * 2


def test_default_generator_lives_on_the_draft_models_device():
    gen = checks.check_generator(5, torch.device("cpu"))
    assert gen.device == torch.device("cpu") and gen.initial_seed() == 5
    assert checks.check_generator(None, "cpu").device == torch.device("cpu")
    assert checks.check_generator(3, "meta").device == torch.device("cpu")  # no meta generators
    given = torch.Generator()
    assert checks.check_generator(given, "meta") is given
    with pytest.raises(ValueError, match="generator"):
        checks.check_generator(True)
    # the decoder asks for one on the draft's device (CPU here); an int seed stays reproducible
    seen = []
    check = checks.check_generator

    def spy(generator, device=None):
        seen.append(device)
        return check(generator, device)

    draft_model, target_model = tiny_opt(1, VOCAB), tiny_opt(0, VOCAB)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decoding, "check_generator", spy)
        a = speculative_generate([2, 5], draft_model=draft_model, target_model=target_model, max_new_tokens=8, generator=9)
    b = speculative_generate([2, 5], draft_model=draft_model, target_model=target_model, max_new_tokens=8, generator=9)
    assert seen == [torch.device("cpu")] and a.token_ids == b.token_ids


def test_clock_synchronizes_every_device_the_models_use(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    decoding._clock(())  # CPU models: no synchronisation at all
    assert synced == []
    devices = (torch.device("cuda", 0), torch.device("cuda", 1))
    decoding._clock(devices)
    assert synced == list(devices)
    assert decoding._cuda_devices(tiny_opt(0, VOCAB), None) == ()


def test_bench_gpu_dry_run(capsys):
    from mspec_lab.cli import main

    assert main(["gpu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "random weights" in out
    for needed in ("draft ms", "target ms", "selection ms", "cache ms", "other ms", "draft step ms",
                   "overhead ms", "round ms", "autoregressive", "HF assisted", "K=1", "K=8", "K=8 static",
                   "mspec K=2 (specinfer, static draft cache)", "projected speed-up", "compiling needs CUDA"):
        assert needed in out, needed
    assert "skipped" not in out  # the static draft cache runs on the CPU
    assert "PASS" not in out and "FAIL" not in out  # goals are judged on a GPU only


def test_bench_gpu_round_split_adds_up():
    """The dry run's numbers: for each K and draft cache, the five parts of a round add up to
    the round, a draft step is the draft time over L, and the overhead is the non-model rest."""
    from mspec_lab.bench import speed_gpu

    s = speed_gpu._settings(True, (1, 2), 3, "specinfer", 9, 6, 1, 0, None)
    draft_model, target_model = (speed_gpu._random_model(speed_gpu._dry_config(role), device=torch.device("cpu"),
                                                         dtype=torch.float32, seed=i)
                                 for i, role in enumerate(("draft", "target")))
    m = speed_gpu.measure(draft_model, target_model, speed_gpu._random_prompt(6, 512, 0), s)
    assert list(m["split"]) == ["K=1", "K=2", "K=1 static", "K=2 static"]
    for row, t in m["split"].items():
        parts = [t[part] for part in ("draft", "target", "selection", "cache", "other")]
        assert min(parts) >= 0 and sum(parts) == pytest.approx(t["round"], rel=1e-9), row
        assert t["draft_step"] == pytest.approx(t["draft"] / 3)
        assert t["overhead"] == pytest.approx(t["selection"] + t["cache"] + t["other"])
        assert t["rounds"] >= 1 and 1 <= t["block_efficiency"] <= 4
    assert {"mspec K=1 (single)", "mspec K=2 (specinfer, static draft cache)"} <= set(m["rates"])
