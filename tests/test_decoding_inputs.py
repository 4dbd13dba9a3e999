"""What :func:`mspec.lm.decoding.speculative_generate` takes from its users, on tiny offline models.

* transformers' inputs: a ``BatchEncoding`` (with its attention mask; left padding dropped), a
  dict, a ``(1, n)`` tensor -- the same tokens as the list of ids; a batch is refused;
* the end of text by default (the target's generation config and the tokenizer), ``False`` to
  run past it;
* a streamer (transformers' protocol: ``put`` the prompt, then each round's tokens; ``end``);
* a warning when the draft is the target at the target's temperature;
* every bad option refused before any model call, naming the fix;
* sliding-window models (Mistral) decode with exact cached logits; layers that cannot be rolled
  back are refused;
* the same seed gives the same tokens as before these inputs existed (recorded runs).
"""

import copy
import warnings

import pytest
import torch
from tokenizers import Tokenizer, models as word_models, pre_tokenizers
from transformers import BatchEncoding, MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast, TextStreamer

from mspec.lm import cache, decoding
from mspec.lm.decoding import autoregressive_generate, speculative_generate
from mspec_lab.models import tiny_model
from mspec_lab.rounding import logit_tolerance

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

torch.set_num_threads(1)

PROMPT = [3, 7, 1]
#: tokens of seeded runs recorded before the decoder took BatchEncodings, streamers and a default
#: eos (tiny_model seeds 0 (target) and 1 (draft), prompt PROMPT, max_new_tokens=40)
RECORDED = [
    (dict(num_drafts=2, draft_length=4, eos_token_id=2, generator=0),
     [15, 4, 14, 14, 14, 14, 13, 1, 13, 12, 10, 13, 10, 13, 13, 0, 15, 10, 3, 4, 13, 13, 13, 12, 6, 15, 4, 4, 12,
      13, 13, 15, 15, 1, 13, 15, 0, 0, 3, 15]),
    (dict(num_drafts=2, draft_length=5, draft_temperatures=[1.0, 1.6], eos_token_id=7, generator=1),
     [2, 8, 13, 4, 13, 0, 0, 15, 14, 15, 11, 13, 15, 15, 13, 2, 7]),
    (dict(num_drafts=3, draft_length=3, verify="traversal", eos_token_id=11, generator=2),
     [0, 4, 13, 14, 3, 14, 7, 8, 13, 4, 14, 6, 13, 15, 13, 15, 15, 3, 4, 13, 15, 15, 3, 4, 10, 15, 4, 15, 4, 13,
      15, 13, 0, 3, 4, 7, 10, 15, 8, 13]),
    (dict(num_drafts=2, draft_length=3, draft_cache="static", eos_token_id=2, generator=0),
     [15, 4, 14, 14, 13, 13, 3, 15, 13, 14, 4, 13, 2]),
    # no eos then meant none; now that is eos_token_id=False
    (dict(num_drafts=2, draft_length=4, eos_token_id=False, generator=1),
     [2, 15, 6, 12, 1, 15, 3, 8, 13, 3, 15, 15, 15, 11, 12, 0, 2, 2, 1, 3, 3, 0, 11, 0, 15, 2, 13, 11, 7, 13, 0, 0,
      15, 15, 3, 3, 9, 3, 15, 13]),
]


@pytest.fixture(scope="module")
def pair():
    """The tiny offline target (OPT; its generation config ends at id 2) and a draft of other weights."""
    return dict(draft_model=tiny_model(seed=1), target_model=tiny_model(seed=0))


@pytest.fixture(scope="module")
def tok():
    """A word-level tokenizer of the 16 ids: ``"w5"`` is id 5; eos ``"w9"``, padding ``"w1"``."""
    words = Tokenizer(word_models.WordLevel({f"w{i}": i for i in range(16)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=words, eos_token="w9", pad_token="w1", unk_token="w0")


@pytest.mark.parametrize("case, tokens", RECORDED, ids=["specinfer", "temperatures", "traversal", "static", "no-eos"])
def test_the_list_form_gives_the_recorded_tokens(pair, case, tokens):
    assert speculative_generate(PROMPT, max_new_tokens=40, **pair, **case).token_ids == tokens


def test_transformers_inputs_give_the_tokens_of_the_list_form(pair, tok):
    kwargs = dict(num_drafts=2, draft_length=3, max_new_tokens=25, eos_token_id=False, generator=4, **pair)
    expected = speculative_generate(PROMPT, **kwargs).token_ids
    encoding = tok("w3 w7 w1", return_tensors="pt")
    assert isinstance(encoding, BatchEncoding) and encoding["input_ids"].tolist() == [PROMPT]
    padded = tok(["w3 w7 w1", "w5 w5 w5 w5 w5"], padding=True, padding_side="left", return_tensors="pt")
    left_padded = BatchEncoding({key: value[:1] for key, value in padded.items()})  # the first prompt, padded
    assert left_padded["attention_mask"].tolist() == [[0, 0, 1, 1, 1]]
    for prompt in (encoding, dict(encoding), {"input_ids": torch.tensor([PROMPT])}, {"input_ids": PROMPT},
                   torch.tensor([PROMPT]), torch.tensor(PROMPT), [PROMPT], left_padded):
        assert speculative_generate(prompt, **kwargs).token_ids == expected
    # a padding that is not dropped changes the prompt, hence the tokens
    unmasked = {"input_ids": torch.tensor([[1, 1, *PROMPT]])}
    assert speculative_generate(unmasked, **kwargs).token_ids != expected


class EosTokenizer:
    """A tokenizer that only knows its end-of-text id (and decodes nothing)."""

    def __init__(self, eos_token_id):
        self.eos_token_id = eos_token_id

    def decode(self, ids):
        return ""


def test_the_end_of_text_stops_by_default(pair):
    kwargs = dict(num_drafts=2, draft_length=4, max_new_tokens=40, generator=1, **pair)
    assert pair["target_model"].generation_config.eos_token_id == 2
    full = speculative_generate(PROMPT, eos_token_id=False, **kwargs).token_ids
    assert len(full) == 40 and full[0] == 2  # the recorded "no-eos" run
    assert speculative_generate(PROMPT, **kwargs).token_ids == [2]
    assert speculative_generate(PROMPT, eos_token_id=[], **kwargs).token_ids == full
    for eos in (13, [13], (11, 13), torch.tensor(13), torch.tensor([11, 13])):
        assert speculative_generate(PROMPT, eos_token_id=eos, **kwargs).token_ids == full[: full.index(13) + 1]
    # a list in the generation config: stop at any of them; the tokenizer's eos stops too
    target = tiny_model(seed=0)
    target.generation_config.eos_token_id = [11, 13]
    kwargs["target_model"] = target
    assert speculative_generate(PROMPT, **kwargs).token_ids == full[: full.index(13) + 1]
    assert full.index(3) < full.index(13)
    with_tok = speculative_generate(PROMPT, tokenizer=EosTokenizer(3), **kwargs).token_ids
    assert with_tok == full[: full.index(3) + 1]
    # plain sampling takes the same default
    auto = autoregressive_generate(PROMPT, target_model=target, max_new_tokens=40, generator=0, eos_token_id=False)
    stopped = autoregressive_generate(PROMPT, target_model=target, max_new_tokens=40, generator=0).token_ids
    first = min(auto.token_ids.index(t) for t in (11, 13) if t in auto.token_ids)
    assert stopped == auto.token_ids[: first + 1]


class RecordingStreamer:
    """transformers' streamer protocol, recording what it gets and when."""

    def __init__(self, events):
        self.events = events

    def put(self, value):
        self.events.append(("put", value.tolist()))

    def end(self):
        self.events.append(("end", None))


def test_streamer_gets_the_prompt_then_each_round_as_it_is_accepted(pair):
    events = []
    result = speculative_generate(
        PROMPT, num_drafts=2, draft_length=4, max_new_tokens=30, eos_token_id=False, generator=0,
        streamer=RecordingStreamer(events), on_round=lambda *args: events.append(("round", None)), **pair)
    assert events[0] == ("put", [PROMPT]) and events[-1] == ("end", None)
    rounds = events[1:-1]
    assert [kind for kind, _ in rounds] == ["round", "put"] * len(result.rounds)  # each round streamed at once
    puts = [value for kind, value in rounds if kind == "put"]
    assert all(len(value) == 1 for value in puts)  # shape (1, m)
    assert [len(value[0]) for value in puts] == [r.emitted for r in result.rounds]
    assert sum((value[0] for value in puts), []) == result.token_ids


def test_text_streamer_prints_the_text(pair, tok, capsys):
    encoding = tok("w3 w7 w1", return_tensors="pt")
    result = speculative_generate(encoding, tokenizer=tok, streamer=TextStreamer(tok, skip_prompt=True),
                                  max_new_tokens=20, eos_token_id=False, generator=3, **pair)
    assert capsys.readouterr().out == result.text + "\n"
    speculative_generate(encoding, tokenizer=tok, streamer=TextStreamer(tok), max_new_tokens=20,
                         eos_token_id=False, generator=3, **pair)
    assert capsys.readouterr().out == "w3 w7 w1 " + result.text + "\n"


def test_drafting_with_the_target_at_its_temperature_warns(pair):
    target = pair["target_model"]
    kwargs = dict(draft_model=target, target_model=target, max_new_tokens=3, generator=0)
    with pytest.warns(UserWarning, match="every drafted token is accepted.*early_exit_model"):
        speculative_generate(PROMPT, **kwargs)
    with pytest.warns(UserWarning, match="measures nothing"):
        speculative_generate(PROMPT, draft_temperatures=[0.5, 0.5], target_temperature=0.5, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        speculative_generate(PROMPT, draft_temperatures=[1.0, 1.5], **kwargs)  # one draft differs
        speculative_generate(PROMPT, max_new_tokens=3, generator=0, **pair)  # another draft model


@pytest.fixture
def no_model_call(pair):
    """Fail the test if any model of ``pair`` (or the large-vocabulary target) runs."""
    big = tiny_model(seed=0, vocab_size=5000)
    hooks = [model.register_forward_pre_hook(lambda *args: pytest.fail("a model ran before the checks"))
             for model in (*pair.values(), big)]
    yield big
    for hook in hooks:
        hook.remove()


BAD_IDS = ["id-over-V", "id-over-V-in-mapping", "negative-id", "batch-tensor", "batch-lists", "right-padding",
           "mask-length", "all-padding", "no-input-ids", "eos-string", "eos-strings", "eos-bool", "eos-float",
           "single-K2", "optimal-temperatures", "spectr-temperatures"]
BAD = [
    (dict(prompt_ids=[3, 16]), "token id 16.*V = 16.*tokenize the prompt with the models' tokenizer"),
    (dict(prompt_ids={"input_ids": torch.tensor([[3, 99]])}), "token id 99"),
    (dict(prompt_ids=[3, -1]), "non-negative integer"),
    (dict(prompt_ids=torch.tensor([[3, 4], [5, 6]])), "batch of 2 prompts.*one prompt at a time"),
    (dict(prompt_ids=[[3, 4], [5, 6]]), "batch of 2 prompts"),
    (dict(prompt_ids={"input_ids": [[3, 4, 5]], "attention_mask": [[1, 1, 0]]}), "0s then 1s.*left-padded"),
    (dict(prompt_ids={"input_ids": [[3, 4, 5]], "attention_mask": [[1, 1]]}), "`attention_mask`"),
    (dict(prompt_ids={"input_ids": [[3, 4]], "attention_mask": [[0, 0]]}), "is empty"),
    (dict(prompt_ids={"ids": [3]}), "without 'input_ids'"),
    (dict(eos_token_id="</s>"), r"`eos_token_id`.*tokenizer.convert_tokens_to_ids\('</s>'\)"),
    (dict(eos_token_id=["</s>", 2]), "convert_tokens_to_ids"),
    (dict(eos_token_id=True), "`eos_token_id` must be token ids"),
    (dict(eos_token_id=2.0), "`eos_token_id` must be token ids"),
    (dict(scheme="single", num_drafts=2), "scheme='single'.*num_drafts=1"),
    (dict(scheme="optimal", draft_temperatures=[1.0, 1.5]),
     "scheme='optimal' needs identical drafts.*V = 16: 'specinfer', 'optimal-lp', 'canonical', 'is', 'is-ratio'"),
    (dict(scheme="spectr", draft_temperatures=[1.0, 1.5]), "scheme='spectr' needs identical drafts"),
]


@pytest.mark.parametrize("bad, match", BAD, ids=BAD_IDS)
def test_bad_options_fail_before_any_model_call(pair, no_model_call, bad, match):
    kwargs = dict(prompt_ids=PROMPT, max_new_tokens=5, generator=0, **pair)
    with pytest.raises(ValueError, match=match):
        speculative_generate(**{**kwargs, **bad})


def test_the_fix_for_identical_drafts_works_at_a_large_vocabulary(pair, no_model_call):
    """At V = 5000 the LP schemes (V^K tuples) are not offered; the offered ones are real schemes."""
    from mspec import registry

    with pytest.raises(ValueError, match="V = 5000: 'specinfer', 'is', 'is-ratio' \\(or verify='traversal'\\)$"):
        speculative_generate(PROMPT, draft_model=no_model_call, target_model=no_model_call,
                             scheme="optimal", draft_temperatures=[1.0, 1.5], generator=0)
    assert all(registry.SCHEMES[name].supports_non_identical for name in ("specinfer", "is", "is-ratio"))


def tiny_mistral(seed: int, sliding_window: int = 3, layer_types=None) -> MistralForCausalLM:
    """A random-weight 2-layer Mistral with a sliding window (large weights: peaked distributions)."""
    config = MistralConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, sliding_window=sliding_window,
                           max_position_embeddings=128, initializer_range=0.5)
    if layer_types is not None:
        config.layer_types = layer_types
    torch.manual_seed(seed)
    return MistralForCausalLM(config).eval()


def test_sliding_window_models_decode_with_exact_cached_logits(monkeypatch):
    """Prompts longer than the window, rounds that reject (the caches roll back past the window)
    and rounds that accept all: every cached forward pass equals a full recomputation."""
    target, draft = tiny_mistral(0), tiny_mistral(1)
    forward, worst, rows = cache.CachedModel.forward, [0.0], set()
    exact = {id(m): copy.deepcopy(m).double() for m in (target, draft)}

    def checked_forward(self, input_ids, last=1):
        before = self.tokens
        logits = forward(self, input_ids, last)
        ids = torch.cat([before, input_ids], dim=1)
        with torch.no_grad():
            full = self.model(input_ids=ids).logits.double()
        # the difference as a share of float32 rounding, measured (mspec_lab.rounding)
        tolerance = logit_tolerance(self.model, ids, exact[id(self.model)])
        worst[0] = max(worst[0], float((logits - full[:, -last:]).abs().max()) / tolerance)
        rows.add(input_ids.shape[0])
        return logits

    monkeypatch.setattr(cache.CachedModel, "forward", checked_forward)
    for prompt in ([3, 4], list(range(2, 12))):
        result = speculative_generate(prompt, draft_model=draft, target_model=target, num_drafts=3, draft_length=3,
                                      max_new_tokens=40, eos_token_id=False, generator=0)
        assert len(result.token_ids) == 40
        accepted = [r.accepted_length for r in result.rounds]
        assert 0 in accepted and 3 in accepted
    assert worst[0] <= 1 and 3 in rows


def test_cache_layers_that_cannot_roll_back_are_refused():
    model = tiny_mistral(0, layer_types=["full_attention", "linear_attention"])
    model.register_forward_pre_hook(lambda *args: pytest.fail("a model ran before the checks"))
    with pytest.raises(ValueError, match="LinearAttentionLayer layers"):
        speculative_generate([3, 4], draft_model=model, target_model=model, draft_temperatures=2.0,
                             max_new_tokens=5, generator=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(scheme="optimal-lp", num_drafts=2), "full optimal-transport LP would have"),
    (dict(scheme="canonical", num_drafts=3), "canonical LP would have"),
    (dict(scheme="canonical", num_drafts=2), r"canonical LP \(K = 2, identical\) would have"),
    (dict(scheme="is-ratio", num_drafts=2, scheme_params={"foo": 5}), "takes no parameter 'foo'.*'s', 'alphabet'"),
    (dict(scheme="spectr", num_drafts=2, scheme_params={"s": 5}), "takes no parameter 's'.*none"),
    (dict(scheme="is-ratio", num_drafts=2, scheme_params=[("s", 2)]), "`scheme_params` must be a dict"),
])
def test_schemes_that_cannot_run_are_refused_before_any_model_call(kwargs, message):
    """An LP scheme at a vocabulary it cannot solve over, or a parameter the scheme does not
    take, is a ValueError naming the fix, raised before the models run (here: models that fail
    when called)."""
    class Untouchable(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.inner = model
            self.config = model.config

        def get_output_embeddings(self):
            return self.inner.get_output_embeddings()

        def forward(self, *args, **kwargs):
            raise AssertionError("a model ran before the arguments were checked")

    big = tiny_model(seed=1, vocab_size=3000)
    draft, target = Untouchable(big).eval(), Untouchable(big).eval()
    with pytest.raises(ValueError, match=message):
        speculative_generate([1, 2], draft_model=draft, target_model=target, max_new_tokens=3,
                             draft_temperatures=1.5, **kwargs)


def test_lp_schemes_say_what_runs_at_vocabulary_scale():
    import mspec
    from mspec.schemes.canonical import CanonicalScheme
    from mspec.schemes.optimal_lp import OptimalLP

    with pytest.raises(ValueError, match="use scheme 'optimal'"):
        OptimalLP.check_scale(vocab_size=49152, num_drafts=2)
    OptimalLP.check_scale(vocab_size=20, num_drafts=2)  # 8,000 variables: fine
    CanonicalScheme.check_scale(vocab_size=400, num_drafts=2, weights=object())  # given weights: no LP (400^2 pairs)
    mspec.SpecInfer.check_scale(vocab_size=10**6, num_drafts=16)  # no limit


def test_a_scheme_too_slow_per_position_is_refused_before_any_model_call(pair, no_model_call):
    """The canonical tuple LP at V = 16, K = 4 (262,160 variables, within the variable limit) is
    estimated at tens of seconds per position: refused before the prefill, naming the estimate
    and a faster scheme; at K = 2 (the pair LP, 136 variables) it runs."""
    with pytest.raises(ValueError, match=r"'canonical' at V = 16, K = 4 takes about .* s to build .*once per "
                                         r"position.*use scheme 'optimal'"):
        speculative_generate(PROMPT, scheme="canonical", num_drafts=4, max_new_tokens=3, generator=0, **pair)
