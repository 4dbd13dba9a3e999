"""The static draft cache of the decoder (``speculative_generate(..., draft_cache="static")``).

On tiny random OPT models, on the CPU: the static cache gives the same tokens and rounds as
the default dynamic cache for fixed seeds, its cached logits equal a full recomputation, its
K rows hold the accepted prefix bit for bit after every round, and the output passes the
sequence-level chi-square test of ``tests/test_decoding_lossless.py``. ``compile_draft``
needs a CUDA draft and says so; its plumbing (which calls run compiled, and that the
compiled step traces as one graph) is checked here with torch.compile's ``eager`` backend.
"""

import copy

import pytest
import torch
from test_decoding import perturbed, tiny_opt
from test_decoding_lossless import ALPHA, VOCAB, memoized_schemes, sequence_pvalue  # noqa: F401
from transformers import MistralConfig, MistralForCausalLM

from mspec.lm import cache, decoding
from mspec_lab.rounding import logit_tolerance
from mspec.lm.cache import COMPILED_STEP_WIDTH, STATIC_CACHE_MULTIPLE
from mspec.lm.decoding import speculative_generate

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

torch.set_num_threads(1)

#: decoder settings that reach every path of a round: rejections, all-accept rounds (the
#: draft's cache then lags one token), alive drafts of one or several temperatures, EOS,
#: top-k / top-p, and prompts of one token (no prefill) and of several
CASES = [
    dict(scheme="specinfer", num_drafts=3, draft_length=3, max_new_tokens=30, generator=3),
    dict(scheme="spectr", num_drafts=3, draft_length=4, max_new_tokens=23, generator=1),
    dict(scheme="optimal", num_drafts=3, draft_length=4, draft_temperatures=2.0, max_new_tokens=40, generator=5),
    dict(scheme="is-ratio", num_drafts=2, draft_length=5, max_new_tokens=40, generator=11, top_p=0.9),
    dict(scheme="specinfer", num_drafts=4, draft_length=3, draft_temperatures=[1.0, 1.2, 1.2, 1.6],
         max_new_tokens=30, generator=2, top_k=5),
    dict(scheme="single", num_drafts=1, draft_length=4, max_new_tokens=30, generator=8, eos_token_id=1),
]


@pytest.fixture(scope="module")
def models():
    target_model = tiny_opt(0)
    return perturbed(target_model), target_model


def _run(models, prompt, case, **draft_cache):
    """The generation and its rounds' draft distributions."""
    draft_model, target_model = models
    draft_probs = []
    result = speculative_generate(prompt, draft_model=draft_model, target_model=target_model,
                                  on_round=lambda d, p, q: draft_probs.append(p.clone()), **case, **draft_cache)
    return result, draft_probs


def _rounds(result):
    return [(r.alive, r.accepted_length, r.winner, r.bonus, r.emitted) for r in result.rounds]


@pytest.mark.parametrize("prompt", [[2, 5, 3], [4]], ids=["prompt3", "prompt1"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['scheme']}-K{c['num_drafts']}")
def test_static_cache_gives_the_tokens_of_the_dynamic_cache(models, prompt, case):
    """Same seed, same tokens and rounds; the draft distributions agree to float32 rounding
    (attention over the static buffer may change the last bits, never more)."""
    dynamic, dynamic_probs = _run(models, prompt, case)
    static, static_probs = _run(models, prompt, case, draft_cache="static")
    assert static.token_ids == dynamic.token_ids and _rounds(static) == _rounds(dynamic)
    # float32 rounding, measured (mspec_lab.rounding): the two caches' logits differ by at
    # most d; a softmax at T >= 1 moves by at most d in L1, and a top-k/top-p renormalisation
    # (it keeps at least 5/8 of the mass in these cases) by at most 2 / (5/8) = 3.2 times that
    ids = torch.randint(0, VOCAB, (3, len(prompt) + case["max_new_tokens"] + 5),
                        generator=torch.Generator().manual_seed(0))
    atol = 4 * logit_tolerance(models[0], ids)
    for a, b in zip(dynamic_probs, static_probs, strict=True):
        torch.testing.assert_close(a, b, atol=atol, rtol=0)


def test_static_cache_holds_the_accepted_prefix_in_every_row(models, monkeypatch):
    """Cached logits equal a full recomputation (all K rows), and after each round every row
    of every layer holds the same keys and values, bit for bit, up to the kept length."""
    draft_model, target_model = models
    forward, keep = cache.CachedModel.forward, cache.StaticCachedModel.keep
    seen = {"forward": 0, "keep": 0}
    exact_models = {}

    def checked_forward(self, input_ids, last=1):
        before = self.tokens
        logits = forward(self, input_ids, last)
        if isinstance(self, cache.StaticCachedModel):
            ids = torch.cat([before, input_ids], dim=1)
            with torch.no_grad():
                full = self.model(input_ids=ids).logits.double()
            assert logits.shape == (3, last, 8)
            # two float32 paths: within float32 rounding, measured (mspec_lab.rounding)
            exact = exact_models.setdefault(id(self.model), copy.deepcopy(self.model).double())
            atol = logit_tolerance(self.model, ids, exact)
            torch.testing.assert_close(logits, full[:, -last:], atol=atol, rtol=0)
            seen["forward"] += 1
        return logits

    def checked_keep(self, row, length):
        keep(self, row, length)
        assert self.tokens.shape == (3, length) and all(torch.equal(r, self.tokens[0]) for r in self.tokens)
        for layer in self.cache.layers:
            assert int(layer.cumulative_length) == length
            for buffer in (layer.keys, layer.values):
                assert buffer.shape[2] == STATIC_CACHE_MULTIPLE
                assert all(torch.equal(buffer[r, :, :length], buffer[0, :, :length]) for r in range(3))
        seen["keep"] += 1

    monkeypatch.setattr(cache.CachedModel, "forward", checked_forward)
    monkeypatch.setattr(cache.StaticCachedModel, "keep", checked_keep)
    result = speculative_generate([2, 5, 3], draft_model=draft_model, target_model=target_model, num_drafts=3,
                                  draft_length=3, max_new_tokens=30, generator=3, draft_cache="static",
                                  eos_token_id=False)
    assert seen["keep"] == len(result.rounds) >= 5 and seen["forward"] > 3 * len(result.rounds)
    assert any(r.bonus for r in result.rounds) and any(r.accepted_length == 0 for r in result.rounds)


@pytest.mark.parametrize("scheme, kwargs", [("specinfer", dict(num_drafts=2)),
                                            ("optimal", dict(num_drafts=3, draft_temperatures=1.5))])
def test_static_cache_sequences_follow_the_target(scheme, kwargs):
    """The chi-square test of tests/test_decoding_lossless.py, with the static draft cache."""
    target_model = tiny_opt(0, vocab_size=VOCAB)
    draft_model = perturbed(target_model)
    assert sequence_pvalue(draft_model, target_model, scheme, draft_cache="static", **kwargs) > ALPHA


def test_bad_draft_cache_arguments_fail_before_any_randomness(models):
    draft_model, target_model = models
    call = dict(draft_model=draft_model, target_model=target_model, max_new_tokens=5)
    for kwargs, match in [(dict(draft_cache="paged"), "draft_cache.*dynamic.*static"),
                          (dict(compile_draft=True), "needs draft_cache='static'"),
                          (dict(draft_cache="static", compile_draft=True),
                           "CUDA GPU, but it is on cpu; drop compile_draft.*any device.*or move the draft to a GPU")]:
        gen = torch.Generator().manual_seed(0)
        state = gen.get_state()
        with pytest.raises(ValueError, match=match):
            speculative_generate([2], generator=gen, **call, **kwargs)
        assert torch.equal(gen.get_state(), state)


def test_static_cache_refuses_a_sliding_window_draft():
    """A sliding-window layer's static buffer rolls, so rows cannot be copied position by
    position: the static cache refuses such a draft and names the default."""
    config = MistralConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, sliding_window=4,
                           max_position_embeddings=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        windowed = MistralForCausalLM(config).eval()
    with pytest.raises(ValueError, match="Sliding.*use draft_cache='dynamic'"):
        speculative_generate([2], draft_model=windowed, target_model=windowed, max_new_tokens=5, generator=0,
                             draft_cache="static")


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # torch.compile
def test_compiled_draft_step_runs_decoding_steps_as_one_graph(models, monkeypatch):
    """With ``compile_draft`` the draft's decoding steps (inputs of 1 or 2 tokens after the
    first call) go to the compiled call and the prefill does not; the compiled step traces
    as one graph (``fullgraph=True``: no break, e.g. on the cache's fill counter), and with
    the ``eager`` backend (exact: no kernel changes) it gives the static cache's tokens.
    On a GPU the decoder compiles with inductor and CUDA graphs instead; this machine
    skips the device check."""
    draft_model, target_model = models
    case = dict(scheme="specinfer", num_drafts=3, draft_length=3, max_new_tokens=30, generator=3)
    static, _ = _run(models, [2, 5, 3], case, draft_cache="static")
    widths = []

    def eager_compiled_call(model):
        compiled = torch.compile(model, backend="eager", fullgraph=True)

        def step(**kwargs):
            widths.append(kwargs["input_ids"].shape)
            return compiled(**kwargs)

        return step

    monkeypatch.setattr(cache, "compiled_call", eager_compiled_call)
    monkeypatch.setattr(decoding, "check_compilable", lambda draft_model, draft_cache: None)
    try:
        compiled = speculative_generate([2, 5, 3], draft_model=draft_model, target_model=target_model,
                                        draft_cache="static", compile_draft=True, **case)
    finally:
        torch._dynamo.reset()
    assert compiled.token_ids == static.token_ids and _rounds(compiled) == _rounds(static)
    # every round's L = 3 draft steps, none of the prefill (a 2-token input into an empty cache)
    assert len(widths) == 3 * len(compiled.rounds)
    assert {tuple(shape) for shape in widths} == {(3, 1), (3, COMPILED_STEP_WIDTH)}


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # torch.compile
def test_compiled_call_is_transformers_own():
    """``compile_draft`` compiles as transformers' ``generate`` does for a static cache: the
    model's ``get_compiled_call`` with the default ``CompileConfig`` (CUDA graphs), built once
    per model and lazily (nothing compiles until a step runs)."""
    from transformers import CompileConfig

    model = tiny_opt(0)
    step = cache.compiled_call(model)
    assert CompileConfig().mode == "reduce-overhead"
    assert model.get_compiled_call(CompileConfig()) is step
    assert step._torchdynamo_orig_callable == model.__call__
