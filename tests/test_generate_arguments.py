"""Every argument of ``generate`` with ``custom_generate=mspec.multi_draft_sampling``, one case each.

Each field of ``GenerationConfig`` and each parameter of ``generate`` (with the keyword arguments
``generate`` reads itself) is in one or more of these lists, and ``test_every_argument_is_classified``
fails on a field or parameter a new transformers adds until it is classified here:

* ``PROCESSED``: works, as a logits processor: every recorded score row is the processors
  ``generate`` builds for it, applied to the emitted prefix and the target's logits, and the
  processors did act on some row (where they act on finite logits);
* ``STOPPING``, ``INPUTS``, ``OUTPUTS``: works, checked by their effect;
* ``NO_EFFECT``: the tokens of the same seed without it (it does nothing in plain sampling either,
  or nothing to the law);
* ``REFUSED``: a ``ValueError`` naming the fix, before any model call;
* ``REFUSED_BY_TRANSFORMERS``: transformers raises before the callable runs (it drops ``tokenizer=``
  for a callable), before any model call.

``cache_implementation="paged"`` is not tested: transformers then runs continuous batching instead
of any ``custom_generate`` (the README says so).
"""

import inspect
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from transformers import (CompileConfig, DynamicCache, EncoderNoRepeatNGramLogitsProcessor,
                          EncoderRepetitionPenaltyLogitsProcessor, EpsilonLogitsWarper, EtaLogitsWarper,
                          ExponentialDecayLengthPenalty, ForcedBOSTokenLogitsProcessor, ForcedEOSTokenLogitsProcessor,
                          GenerationConfig, InfNanRemoveLogitsProcessor, LogitNormalization, LogitsProcessor,
                          LogitsProcessorList, MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor,
                          MinPLogitsWarper, NoBadWordsLogitsProcessor, NoRepeatNGramLogitsProcessor,
                          PrefixConstrainedLogitsProcessor, RepetitionPenaltyLogitsProcessor,
                          SequenceBiasLogitsProcessor, StoppingCriteria, StoppingCriteriaList,
                          SuppressTokensAtBeginLogitsProcessor, SuppressTokensLogitsProcessor,
                          SynthIDTextWatermarkingConfig, TemperatureLogitsWarper, TopHLogitsWarper, TopKLogitsWarper,
                          TopPLogitsWarper, TypicalLogitsWarper, UnbatchedClassifierFreeGuidanceLogitsProcessor,
                          WatermarkingConfig)
from transformers.generation.utils import GenerationMixin

import mspec
from mspec.lm.custom_generate import REFUSED_ARGUMENTS, REFUSED_FIELDS
from mspec_lab.models import tiny_model
from test_custom_generate import Recorder, tok  # noqa: F401 -- tok: the letters tokenizer fixture
from mspec_lab.rounding import UNIT_ROUNDOFF

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

torch.set_num_threads(1)

PROMPT = [3, 7, 4]
EOS = 2  # tiny_model's generation config ends at id 2 and pads with id 1
V = 16


@pytest.fixture(scope="module")
def pair():
    return tiny_model(seed=1), tiny_model(seed=0)  # draft, target


def run(pair, prompt=PROMPT, **kwargs):
    draft, target = pair
    ids = torch.tensor([prompt]) if isinstance(prompt, list) else prompt
    options = dict(do_sample=True, max_new_tokens=10, custom_generate=mspec.multi_draft_sampling,
                   draft_model=draft, num_drafts=2, draft_length=3, generator=0)
    return target.generate(ids, **{**options, **kwargs})


@contextmanager
def counted_model_calls(pair):
    """The list of forward calls of both models while the block runs."""
    calls = []
    hooks = [model.register_forward_pre_hook(lambda *args: calls.append(1)) for model in pair]
    try:
        yield calls
    finally:
        for hook in hooks:
            hook.remove()


class FavourFive(LogitsProcessor):
    """A user's processor, a function of the ids: +2 to token 5 after an odd token."""

    def __call__(self, input_ids, scores):
        return scores + 2.0 * (input_ids[:, -1:] % 2) * (torch.arange(scores.shape[-1]) == 5)


class Allowed:
    """A ``prefix_allowed_tokens_fn``: the allowed tokens depend on the last one; records the batch ids."""

    def __init__(self):
        self.batch_ids = set()

    def __call__(self, batch_id, ids):
        self.batch_ids.add(batch_id)
        return [4, 5, 6, EOS] if int(ids[-1]) % 2 else [7, 8, 9, 10, EOS]


ALLOWED = Allowed()
PADDED = [1, 1, *PROMPT]
PADDED_MASK = torch.tensor([[0, 0, 1, 1, 1]])

# (argument, generate's keyword arguments, the processors generate builds for them, the prompt, acts on finite logits)
PROCESSED = [
    ("temperature", dict(temperature=0.7), lambda: [TemperatureLogitsWarper(0.7)], PROMPT, True),
    ("top_k", dict(top_k=4), lambda: [TopKLogitsWarper(4)], PROMPT, True),
    ("top_p", dict(top_p=0.6), lambda: [TopPLogitsWarper(0.6)], PROMPT, True),
    ("min_p", dict(min_p=0.1), lambda: [MinPLogitsWarper(0.1)], PROMPT, True),
    ("top_h", dict(top_h=0.5), lambda: [TopHLogitsWarper(top_h=0.5)], PROMPT, True),
    ("typical_p", dict(typical_p=0.6), lambda: [TypicalLogitsWarper(mass=0.6)], PROMPT, True),
    ("epsilon_cutoff", dict(epsilon_cutoff=0.05), lambda: [EpsilonLogitsWarper(0.05)], PROMPT, True),
    ("eta_cutoff", dict(eta_cutoff=0.05), lambda: [EtaLogitsWarper(0.05)], PROMPT, True),
    ("repetition_penalty", dict(repetition_penalty=1.5), lambda: [RepetitionPenaltyLogitsProcessor(1.5)], PROMPT, True),
    ("encoder_repetition_penalty", dict(encoder_repetition_penalty=1.5),
     lambda: [EncoderRepetitionPenaltyLogitsProcessor(1.5, torch.tensor([PROMPT]))], PROMPT, True),
    ("no_repeat_ngram_size", dict(no_repeat_ngram_size=1), lambda: [NoRepeatNGramLogitsProcessor(1)], PROMPT, True),
    ("encoder_no_repeat_ngram_size", dict(encoder_no_repeat_ngram_size=1),
     lambda: [EncoderNoRepeatNGramLogitsProcessor(1, torch.tensor([PROMPT]))], PROMPT, True),
    ("bad_words_ids", dict(bad_words_ids=[[5], [6]]), lambda: [NoBadWordsLogitsProcessor([[5], [6]], EOS)], PROMPT,
     True),
    ("sequence_bias", dict(sequence_bias=[[[5], 3.0]]), lambda: [SequenceBiasLogitsProcessor([[[5], 3.0]])], PROMPT,
     True),
    ("min_length", dict(min_length=9), lambda: [MinLengthLogitsProcessor(9, EOS)], PROMPT, True),
    ("min_new_tokens", dict(min_new_tokens=6), lambda: [MinNewTokensLengthLogitsProcessor(3, 6, EOS)], PROMPT, True),
    ("forced_bos_token_id", dict(forced_bos_token_id=5), lambda: [ForcedBOSTokenLogitsProcessor(5)], [3], True),
    ("forced_eos_token_id", dict(forced_eos_token_id=5, eos_token_id=None),
     lambda: [ForcedEOSTokenLogitsProcessor(13, 5)], PROMPT, True),
    ("remove_invalid_values", dict(remove_invalid_values=True), lambda: [InfNanRemoveLogitsProcessor()], PROMPT, False),
    ("exponential_decay_length_penalty", dict(exponential_decay_length_penalty=(2, 1.5)),
     lambda: [ExponentialDecayLengthPenalty((2, 1.5), EOS, 3)], PROMPT, True),
    ("suppress_tokens", dict(suppress_tokens=[5, 6]), lambda: [SuppressTokensLogitsProcessor([5, 6])], PROMPT, True),
    ("begin_suppress_tokens", dict(begin_suppress_tokens=[5, 6, 15]),
     lambda: [SuppressTokensAtBeginLogitsProcessor([5, 6, 15], 3)], PROMPT, True),
    ("renormalize_logits", dict(renormalize_logits=True), lambda: [LogitNormalization()], PROMPT, True),
    ("watermarking_config", dict(watermarking_config=WatermarkingConfig(bias=3.0)),
     lambda: [WatermarkingConfig(bias=3.0).construct_processor(V, "cpu")], PROMPT, True),
    ("prefix_allowed_tokens_fn", dict(prefix_allowed_tokens_fn=ALLOWED),
     lambda: [PrefixConstrainedLogitsProcessor(lambda batch_id, ids: ALLOWED(0, ids), 1)], PROMPT, True),
    ("logits_processor", dict(logits_processor=LogitsProcessorList([FavourFive()])), lambda: [FavourFive()], PROMPT,
     True),
    ("generation_config", dict(generation_config=GenerationConfig(do_sample=True, top_k=5, max_new_tokens=10)),
     lambda: [TopKLogitsWarper(5)], PROMPT, True),
    # a left-padded prompt: the processors see the padding, as generate gives it (lengths count it)
    ("attention_mask", dict(attention_mask=PADDED_MASK, repetition_penalty=1.5, min_new_tokens=4),
     lambda: [RepetitionPenaltyLogitsProcessor(1.5, prompt_ignore_length=2),
              MinNewTokensLengthLogitsProcessor(5, 4, EOS)], PADDED, True),
]


@pytest.mark.parametrize("name, kwargs, processors, prompt, acts", PROCESSED, ids=[c[0] for c in PROCESSED])
def test_processed_arguments_define_the_target_law(pair, name, kwargs, processors, prompt, acts):
    acted = False
    for seed in range(2):
        out = run(pair, prompt, generator=seed, return_dict_in_generate=True, output_scores=True,
                  output_logits=True, **kwargs)
        expected = LogitsProcessorList(processors())
        for t, (scores, logits) in enumerate(zip(out.scores, out.logits)):
            prefix = out.sequences[:, : len(prompt) + t]
            # the same float32 operations on the same logits, one row instead of K: equal up to the
            # order of a row's sums. Elementwise processors: within a few u (rtol). A log-softmax
            # (renormalize_logits) is z - log(sum exp z): summed in another order (another batch
            # shape or CPU kernel) the sum moves by up to V u relative, its log by V u absolute,
            # and the subtraction adds u (|z| + |lse|): an absolute bound, since z - lse can be ~0
            bound = (logits.shape[-1] + 2) * UNIT_ROUNDOFF * (1 + 2 * float(logits.abs().max()))
            torch.testing.assert_close(scores, expected(prefix, logits.clone()), rtol=4 * UNIT_ROUNDOFF,
                                       atol=bound if name == "renormalize_logits" else 0.0)
            acted |= not torch.equal(scores, logits)
            assert torch.isfinite(scores[0, out.sequences[0, len(prompt) + t]])  # the emitted token was allowed
    assert acted == acts, name
    if name == "prefix_allowed_tokens_fn":
        assert ALLOWED.batch_ids == {0}  # one prompt: batch id 0 for every drafted row
    if name == "attention_mask":  # the padded prompt gives the tokens of the unpadded one
        unpadded = run(pair, PROMPT, generator=1, repetition_penalty=1.5, min_new_tokens=4)
        assert out.sequences[0, 2:].tolist() == unpadded[0].tolist()


class AfterThirteen(StoppingCriteria):
    """A user's criterion: stop after token 13."""

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] == 13


def new_tokens(out, prompt=PROMPT):
    return out[0, len(prompt):].tolist()


# (argument, keyword arguments, whether the argument ended the new tokens): over seeds 0..5 each output
# ends where it first fires, or at the length limit, and it fires in some
STOPPING = [
    ("max_new_tokens", dict(max_new_tokens=4, eos_token_id=None), lambda new, t: t == 4),
    ("max_length", dict(max_length=8, max_new_tokens=None, eos_token_id=None), lambda new, t: t == 5),
    ("max_time", dict(max_time=1e-9), lambda new, t: t == 1),
    ("eos_token_id", dict(eos_token_id=[9, 10], max_new_tokens=30), lambda new, t: new[t - 1] in (9, 10)),
    ("stopping_criteria", dict(stopping_criteria=StoppingCriteriaList([AfterThirteen()]), eos_token_id=None,
                               max_new_tokens=30), lambda new, t: new[t - 1] == 13),
]


@pytest.mark.parametrize("name, kwargs, fires", STOPPING, ids=[c[0] for c in STOPPING])
def test_stopping_arguments_end_the_output(pair, name, kwargs, fires):
    ended = 0
    for seed in range(6):
        new = new_tokens(run(pair, generator=seed, **kwargs))
        assert not any(fires(new, t) for t in range(1, len(new))), (seed, new)
        assert fires(new, len(new)) or len(new) == kwargs.get("max_new_tokens", 10), (seed, new)
        ended += fires(new, len(new))
    assert ended, name


def test_output_arguments(pair):
    """``return_dict_in_generate``, ``output_scores``, ``output_logits``: what is returned."""
    plain = run(pair)
    assert isinstance(plain, torch.Tensor)
    scores = run(pair, return_dict_in_generate=True, output_scores=True)
    assert torch.equal(scores.sequences, plain) and scores.logits is None
    assert len(scores.scores) == plain.shape[1] - len(PROMPT)
    logits = run(pair, return_dict_in_generate=True, output_logits=True)
    assert logits.scores is None and len(logits.logits) == plain.shape[1] - len(PROMPT)
    assert run(pair, output_scores=True).shape == plain.shape  # without return_dict_in_generate: the tensor


def test_input_arguments(pair):
    """``inputs`` (None: the BOS id), ``input_ids=``, ``bos_token_id``, ``pad_token_id`` (which masks the
    padding of a prompt given without its mask), ``do_sample=True``, ``custom_generate`` (the callable),
    ``synced_gpus=False``."""
    draft, target = pair
    plain = run(pair)
    assert torch.equal(target.generate(input_ids=torch.tensor([PROMPT]), do_sample=True, max_new_tokens=10,
                                       custom_generate=mspec.multi_draft_sampling, draft_model=draft, num_drafts=2,
                                       draft_length=3, generator=0, synced_gpus=False), plain)
    from_bos = run(pair, None, bos_token_id=7)
    assert from_bos[0, 0] == 7 and from_bos.shape[1] > 1
    assert torch.equal(run(pair, [3], bos_token_id=7), run(pair, [3]))  # with a prompt: no effect
    padded = run(pair, PADDED, pad_token_id=1)  # no mask: generate masks the pad ids
    assert padded[0, :5].tolist() == PADDED and padded[0, 5:].tolist() == plain[0, 3:].tolist()
    assert not torch.equal(run(pair, PADDED, pad_token_id=0)[0, 5:], plain[0, 3:])  # unmasked: another prompt


# (argument, keyword arguments): the tokens of the same seed without it
NO_EFFECT = [
    ("decoder_start_token_id", dict(decoder_start_token_id=5)),  # encoder-decoder models only
    ("use_cache", dict(use_cache=False)),  # the decoder keeps its own KV caches, the law is the same
    ("max_cache_len", dict(max_cache_len=64)),  # read with a static cache_implementation (refused)
    ("cache_config", dict(cache_config={"nbits": 4})),  # read with cache_implementation="quantized" (refused)
    ("compile_config", dict(compile_config=CompileConfig())),  # generate compiles only with a static cache
    ("disable_compile", dict(disable_compile=True)),  # the decoder does not compile the models
    ("continuous_batching_config", dict(continuous_batching_config={})),  # read by generate_batch only
    ("_from_model_config", dict(_from_model_config=True)),  # the config's bookkeeping
    ("transformers_version", dict(transformers_version="0.0.0")),  # the config's bookkeeping
    ("early_stopping", dict(early_stopping=False)),  # a refused field at its default does nothing
    ("num_beams", dict(num_beams=1)),
    ("stop_strings", dict(stop_strings=None)),
    ("token_healing", dict(token_healing=False)),
    ("tokenizer", dict(tokenizer="tok")),  # transformers drops it for a callable: read with stop strings only
    ("assistant_tokenizer", dict(assistant_tokenizer="tok")),  # read with assistant_model (refused) only
    ("trust_remote_code", dict(trust_remote_code=True)),  # read for a custom_generate folder only
    ("cache", dict(cache="empty")),  # an empty cache: the decoder fills its own
    ("past_key_values", dict(past_key_values="empty")),  # the former name of cache=
]


@pytest.mark.filterwarnings("ignore:.*past_key_values")
@pytest.mark.parametrize("name, kwargs", NO_EFFECT, ids=[c[0] for c in NO_EFFECT])
def test_arguments_without_effect_give_the_same_tokens(pair, tok, name, kwargs):
    values = {"tok": tok, "empty": DynamicCache(config=pair[1].config)}
    kwargs = {key: values.get(value, value) if isinstance(value, str) else value for key, value in kwargs.items()}
    assert torch.equal(run(pair, generator=4, **kwargs), run(pair, generator=4))


def filled_cache(pair):
    return pair[1](torch.tensor([PROMPT[:2]]), use_cache=True).cache


def guidance(pair):
    return LogitsProcessorList([UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, pair[1])])


# (argument, keyword arguments (a callable value: built from the models first), the message)
REFUSED = [
    ("do_sample", dict(do_sample=False), "pass do_sample=True"),
    ("num_beams", dict(num_beams=2), "drop num_beams=2"),
    ("num_return_sequences", dict(num_return_sequences=2), "drop num_return_sequences=2"),
    ("num_beam_groups", dict(num_beam_groups=2), "has no beams: drop num_beam_groups=2"),
    ("diversity_penalty", dict(diversity_penalty=0.5), "has no beams: drop diversity_penalty=0.5"),
    ("length_penalty", dict(length_penalty=2.0), "has no beams: drop length_penalty=2.0"),
    ("early_stopping", dict(early_stopping=True), "has no beams: drop early_stopping=True"),
    ("constraints", dict(constraints=[[5, 6]]), "has no beams: drop constraints="),
    ("force_words_ids", dict(force_words_ids=[[5]]), "has no beams: drop force_words_ids="),
    ("low_memory", dict(low_memory=True), "drop low_memory=True"),
    ("penalty_alpha", dict(penalty_alpha=0.6, top_k=4), "contrastive search.*drop penalty_alpha=0.6"),
    ("dola_layers", dict(dola_layers="low"), "DoLa.*drop dola_layers='low'"),
    ("guidance_scale", dict(guidance_scale=1.5), "classifier-free guidance.*drop guidance_scale=1.5"),
    ("prompt_lookup_num_tokens", dict(prompt_lookup_num_tokens=3), "not assisted.*drop prompt_lookup_num_tokens=3"),
    ("max_matching_ngram_size", dict(max_matching_ngram_size=2), "not assisted.*drop max_matching_ngram_size=2"),
    ("use_mtp", dict(use_mtp=True), "not assisted.*drop use_mtp=True"),
    ("assistant_early_exit", dict(assistant_early_exit=1), "not assisted.*drop assistant_early_exit=1"),
    ("assistant_ensemble_weight", dict(assistant_ensemble_weight=0.5), "drop assistant_ensemble_weight=0.5"),
    ("speculation_type", dict(speculation_type="dflash"), "drop speculation_type='dflash'"),
    ("is_assistant", dict(is_assistant=True), "drop is_assistant=True"),
    ("num_assistant_tokens", dict(num_assistant_tokens=5), "drop num_assistant_tokens=5"),
    ("num_assistant_tokens_schedule", dict(num_assistant_tokens_schedule="heuristic"),
     "drop num_assistant_tokens_schedule='heuristic'"),
    ("assistant_confidence_threshold", dict(assistant_confidence_threshold=0.2),
     "drop assistant_confidence_threshold=0.2"),
    ("assistant_lookbehind", dict(assistant_lookbehind=5), "drop assistant_lookbehind=5"),
    ("target_lookbehind", dict(target_lookbehind=5), "drop target_lookbehind=5"),
    ("cache_implementation", dict(cache_implementation="static"), "own caches.*drop cache_implementation='static'"),
    ("prefill_chunk_size", dict(prefill_chunk_size=2), "drop prefill_chunk_size=2"),
    ("output_attentions", dict(output_attentions=True), "does not record attentions"),
    ("output_hidden_states", dict(output_hidden_states=True, return_dict_in_generate=True),
     "does not record hidden_states"),
    ("watermarking_config", dict(watermarking_config=SynthIDTextWatermarkingConfig(ngram_len=2, keys=[1, 2, 3])),
     "function of the ids and scores.*drop SynthID's watermarking_config"),
    ("logits_processor", dict(logits_processor=guidance), "function of the ids and scores.*drop guidance_scale"),
    ("streamer", dict(streamer="recorder"), "streamer=: pass stream= instead.*hub/multi-draft-sampling"),
    ("synced_gpus", dict(synced_gpus=True), "synced_gpus=: pass synced_gpus=False"),
    ("assistant_model", dict(assistant_model=lambda pair: pair[0]), "pass the draft model as draft_model="),
    ("negative_prompt_ids", dict(negative_prompt_ids=torch.tensor([[5]])), "negative_prompt_ids=: drop it"),
    ("negative_prompt_attention_mask", dict(negative_prompt_attention_mask=torch.tensor([[1]])),
     "negative_prompt_attention_mask=: drop it"),
    ("inputs", dict(prompt=torch.tensor([PROMPT, PROMPT])), "one prompt at a time"),
    ("inputs_embeds", dict(inputs_embeds=torch.zeros(1, 3, 16)), r"does not pass \['inputs_embeds'\]"),
    ("attention_mask", dict(attention_mask=torch.tensor([[1, 0, 1]])), "0s then 1s"),
    ("position_ids", dict(position_ids=torch.tensor([[0, 2, 4]])), "drop position_ids"),
    ("cache", dict(cache=filled_cache), "cannot continue a filled one"),
]


@pytest.mark.parametrize("name, kwargs, match", REFUSED, ids=[f"{c[0]}-{i}" for i, c in enumerate(REFUSED)])
def test_refused_arguments_fail_before_any_model_call(pair, name, kwargs, match):
    kwargs = {key: value(pair) if inspect.isfunction(value) else value
              for key, value in kwargs.items()}
    streamer = kwargs["streamer"] = Recorder() if kwargs.get("streamer") == "recorder" else None
    with counted_model_calls(pair) as calls, pytest.raises(ValueError, match=match):
        run(pair, **kwargs)
    assert not calls
    if name == "streamer":  # generate echoed the prompt to it before the callable ran; no end()
        assert streamer.chunks == [PROMPT] and streamer.ended == 0


# (argument, keyword arguments, transformers' message): it raises before the callable runs
REFUSED_BY_TRANSFORMERS = [
    ("stop_strings", dict(stop_strings=["pe"], tokenizer="tok"), "could not locate a tokenizer"),
    ("token_healing", dict(token_healing=True, tokenizer="tok"), "token healing, you must pass the model's tokenizer"),
    ("use_model_defaults", dict(use_model_defaults=False), r"not used by the model: \['use_model_defaults'\]"),
]


@pytest.mark.parametrize("name, kwargs, match", REFUSED_BY_TRANSFORMERS, ids=[c[0] for c in REFUSED_BY_TRANSFORMERS])
def test_transformers_refuses_before_the_callable_runs(pair, tok, name, kwargs, match):
    kwargs = {key: tok if value == "tok" else value for key, value in kwargs.items()}
    with counted_model_calls(pair) as calls, pytest.raises(ValueError, match=match):
        run(pair, **kwargs)
    assert not calls


def test_stop_texts_are_the_fix_for_stop_strings(pair, tok):
    """The fix the docs name for ``stop_strings=`` with ``tokenizer=``: ``stop_texts=`` with ``text_tokenizer=``."""
    for seed in range(4):
        new = new_tokens(run(pair, generator=seed, max_new_tokens=20, stop_texts=["pe", "fo"], text_tokenizer=tok))
        text = tok.decode(new)
        assert not any(s in text[:-1] for s in ("pe", "fo")) and (len(new) == 20 or new[-1] == EOS
                                                                   or text.endswith(("pe", "fo")))


HUB_FOLDER = Path(__file__).resolve().parents[1] / "hub" / "multi-draft-sampling"


def test_the_hub_folder_hands_every_argument_on(pair):
    """The Hub-style folder passes generate's arguments on to the callable: a prefix function works
    as there, an assistant model is refused as there, before any model call."""
    draft, target = pair
    options = dict(do_sample=True, max_new_tokens=10, draft_model=draft, num_drafts=2, draft_length=3, generator=2,
                   prefix_allowed_tokens_fn=Allowed())
    via_folder = target.generate(torch.tensor([PROMPT]), custom_generate=str(HUB_FOLDER), trust_remote_code=True,
                                 **options)
    assert torch.equal(via_folder, run(pair, **options))
    with counted_model_calls(pair) as calls, pytest.raises(ValueError, match="pass the draft model as draft_model="):
        target.generate(torch.tensor([PROMPT]), custom_generate=str(HUB_FOLDER), trust_remote_code=True,
                        assistant_model=draft, **options)
    assert not calls


#: the keyword arguments generate reads itself (the rest of ``**kwargs``: GenerationConfig fields, model inputs)
GENERATE_KWARGS = {"tokenizer", "assistant_tokenizer", "trust_remote_code", "input_ids", "attention_mask",
                   "position_ids", "inputs_embeds", "cache", "past_key_values", "use_model_defaults"}


def test_every_argument_is_classified():
    """Every GenerationConfig field and every parameter of generate has a case above; a field that a
    new transformers adds fails here until it is classified. Every field the library refuses has a
    refused case, and every refused case names a field or argument the library knows."""
    cases = {"works": [c[0] for c in PROCESSED + STOPPING] + ["return_dict_in_generate", "output_scores",
                                                               "output_logits", "inputs", "input_ids", "bos_token_id",
                                                               "pad_token_id", "do_sample", "custom_generate",
                                                               "synced_gpus"],
             "no effect": [c[0] for c in NO_EFFECT], "refused": [c[0] for c in REFUSED],
             "refused by transformers": [c[0] for c in REFUSED_BY_TRANSFORMERS]}
    covered = set().union(*cases.values())
    fields = set(GenerationConfig().to_dict())
    parameters = set(inspect.signature(GenerationMixin.generate).parameters) - {"self", "kwargs"}
    assert len(fields) >= 73 and not fields - covered, sorted(fields - covered)
    assert not parameters - covered, sorted(parameters - covered)
    assert not GENERATE_KWARGS - covered, sorted(GENERATE_KWARGS - covered)
    assert not covered - fields - parameters - GENERATE_KWARGS, sorted(covered - fields - parameters - GENERATE_KWARGS)
    refused = set(cases["refused"])
    assert set(REFUSED_FIELDS) <= refused and set(REFUSED_ARGUMENTS) <= refused
    assert set(REFUSED_FIELDS) <= fields and set(REFUSED_ARGUMENTS) <= parameters
