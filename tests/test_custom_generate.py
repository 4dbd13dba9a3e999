"""``target.generate(..., custom_generate=mspec.multi_draft_sampling)`` on tiny offline models.

* the same seed gives the tokens of ``speculative_generate`` with the same settings;
* ``torch.manual_seed`` makes a call reproducible (no ``generator`` passed), as with ``generate``;
* ``return_dict_in_generate``: sequences, the processed scores and raw logits of every emitted
  token (the scores are the processors applied to the logits after the emitted prefix), and the
  rounds;
* a left-padded prompt (its attention mask) gives the tokens of the unpadded one;
* stopping: the end-of-text id of the generation config, stop strings, a user's criterion and
  the length limit end generation at the first token where the criteria fire, never later;
* every option the decoder cannot honour is refused before any model call, naming the fix.
The law of the output is tested in ``test_custom_generate_lossless.py``.
"""

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models as token_models
from transformers import (LogitsProcessorList, PreTrainedTokenizerFast, RepetitionPenaltyLogitsProcessor, StoppingCriteria,
                          StoppingCriteriaList, StopStringCriteria, TemperatureLogitsWarper)

import mspec
from mspec.lm.custom_generate import MultiDraftOutput
from mspec.lm.decoding import speculative_generate
from mspec_lab.models import tiny_model
from mspec_lab.rounding import UNIT_ROUNDOFF

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

torch.set_num_threads(1)

PROMPT = [3, 7, 4]
EOS = 2  # tiny_model's generation config ends at id 2


@pytest.fixture(scope="module")
def pair():
    return tiny_model(seed=1), tiny_model(seed=0)  # draft, target


@pytest.fixture(scope="module")
def tok():
    """A tokenizer of 16 letters, id i the (i + 1)-th letter ("a" is 0, ..., "p" is 15): stop strings
    span tokens; eos "c" (2) and padding "b" (1), as the tiny model's."""
    letters = Tokenizer(token_models.BPE({c: i for i, c in enumerate("abcdefghijklmnop")}, merges=[]))
    letters.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=letters, eos_token="c", pad_token="b")


def run(pair, prompt=PROMPT, **kwargs):
    draft, target = pair
    ids = torch.tensor([prompt]) if isinstance(prompt, list) else prompt
    options = dict(do_sample=True, max_new_tokens=20, custom_generate=mspec.multi_draft_sampling, draft_model=draft)
    return target.generate(ids, **{**options, **kwargs})


SAME_SEED = [
    dict(scheme="specinfer", num_drafts=2, draft_length=3, temperature=0.9, top_k=6),
    dict(scheme="optimal", num_drafts=3, draft_length=2, temperature=1.3, top_p=0.9),
    dict(scheme="spectr", num_drafts=2, draft_length=4, draft_cache="static"),
    dict(verify="traversal", num_drafts=3, draft_length=3, temperature=0.7),
    dict(verify="block", num_drafts=1, draft_length=4, top_k=8, top_p=0.95),
]


@pytest.mark.parametrize("case", SAME_SEED, ids=["specinfer", "optimal", "spectr-static", "traversal", "block"])
def test_the_same_seed_gives_the_tokens_of_speculative_generate(pair, case):
    draft, target = pair
    sampling = {key: case[key] for key in ("top_k", "top_p") if key in case}
    temperature = case.get("temperature", 1.0)
    decoder = {key: value for key, value in case.items() if key not in ("temperature", "top_k", "top_p")}
    for seed in range(4):
        expected = speculative_generate(PROMPT, draft_model=draft, target_model=target, generator=seed,
                                        max_new_tokens=20, target_temperature=temperature,
                                        draft_temperatures=temperature, **sampling, **decoder).token_ids
        out = run(pair, generator=seed, temperature=temperature, **sampling, **decoder)
        assert out[0, len(PROMPT):].tolist() == expected


def test_the_global_seed_makes_a_call_reproducible(pair):
    torch.manual_seed(11)
    first = run(pair)
    torch.manual_seed(11)
    assert torch.equal(run(pair), first)
    torch.manual_seed(12)
    assert not torch.equal(run(pair, max_new_tokens=40, eos_token_id=None), run(pair, max_new_tokens=40))


def test_the_dict_output_holds_scores_logits_and_rounds(pair):
    out = run(pair, generator=3, num_drafts=2, draft_length=3, repetition_penalty=1.4, temperature=0.8,
              return_dict_in_generate=True, output_scores=True, output_logits=True, top_k=None)
    assert isinstance(out, MultiDraftOutput)
    new = out.sequences[0, len(PROMPT):].tolist()
    assert len(out.scores) == len(out.logits) == len(new) == len(out.speculation.token_ids)
    assert out.speculation.token_ids == new
    assert sum(r.emitted for r in out.speculation.rounds) == len(new)
    assert out.speculation.block_efficiency >= 1
    warp = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.4), TemperatureLogitsWarper(0.8)])
    for t, (scores, logits) in enumerate(zip(out.scores, out.logits)):
        assert scores.shape == logits.shape == (1, 16)
        prefix = out.sequences[:, : len(PROMPT) + t]
        # the processors in float32 against float64 then rounded: the penalty and the
        # temperature divide or multiply once each (u each) and the cast rounds once (u):
        # 3 u, and 4 u covers the second-order terms
        torch.testing.assert_close(scores, warp(prefix, logits.double()).float(), rtol=4 * UNIT_ROUNDOFF, atol=0)
    assert not torch.equal(out.scores[0], out.logits[0] / 0.8)  # the penalty did act on some token
    plain = run(pair, generator=3, num_drafts=2, draft_length=3, repetition_penalty=1.4, temperature=0.8,
                top_k=None)
    assert torch.equal(plain, out.sequences)  # the tensor form: just the sequences


def test_a_left_padded_prompt_gives_the_tokens_of_the_unpadded_one(pair):
    expected = run(pair, generator=5)
    padded = torch.tensor([[1, 1, *PROMPT]])
    out = run(pair, prompt=padded, attention_mask=torch.tensor([[0, 0, 1, 1, 1]]), generator=5, pad_token_id=1)
    assert out[0, :5].tolist() == [1, 1, *PROMPT]
    assert out[0, 5:].tolist() == expected[0, len(PROMPT):].tolist()


class SecondN(StoppingCriteria):
    """A user's criterion: stop once "n" (id 13) has appeared twice after the prompt."""

    def __call__(self, input_ids, scores, **kwargs):
        return (input_ids[:, len(PROMPT):] == 13).sum(dim=1) >= 2


def fired(criteria, ids: list[int]) -> bool:
    return bool(criteria(torch.tensor([ids]), None).any())


def test_generation_ends_where_the_criteria_first_fire(pair, tok):
    """Each output ends at its first token where eos, a stop string or a user's criterion fires
    (or at the length limit); some outputs end early, so the test sees every criterion act."""
    # transformers 5.25 does not hand `tokenizer=` on to a callable: stop strings come as a criterion
    stop_string = StopStringCriteria(tok, ["pe", "fo"])  # two tokens each
    ends = {"eos": 0, "string": 0, "user": 0, "length": 0}
    for seed in range(40):
        out = run(pair, generator=seed, max_new_tokens=12, num_drafts=2, draft_length=4,
                  stopping_criteria=StoppingCriteriaList([stop_string, SecondN()]))[0].tolist()
        new = out[len(PROMPT):]
        checks = {"eos": lambda ids: ids[-1] == EOS, "string": lambda ids: fired(stop_string, ids),
                  "user": lambda ids: fired(SecondN(), ids), "length": lambda ids: len(ids) == len(PROMPT) + 12}
        for t in range(1, len(new)):
            assert not any(check(out[: len(PROMPT) + t]) for check in checks.values()), (seed, t, new)
        reasons = [name for name, check in checks.items() if check(out)]
        assert reasons, new
        ends[reasons[0]] += 1
    assert all(ends.values()), ends


WORKS = dict(do_sample=True, max_new_tokens=5)
BAD = [
    (dict(draft_model=None), "needs `draft_model=`"),
    (dict(do_sample=False), "pass do_sample=True"),
    (dict(num_return_sequences=2), "drop num_return_sequences"),
    (dict(num_beams=2), "drop num_beams"),
    (dict(return_dict_in_generate=True, output_attentions=True), "does not record attentions"),
    (dict(return_dict_in_generate=True, output_hidden_states=True), "does not record hidden_states"),
    (dict(prompt=torch.tensor([PROMPT, PROMPT])), "one prompt at a time"),
    (dict(prompt=torch.tensor([[3, 16]])), "token id 16.*V = 16"),
    (dict(scheme="nope"), "`scheme` must be one of"),
    (dict(scheme="single", num_drafts=2), "scheme='single'.*num_drafts=1"),
    (dict(scheme="optimal", draft_temperatures=[1.0, 1.5]), "needs identical drafts"),
    (dict(verify="tree"), "`verify` must be one of"),
    (dict(num_drafts=0), "`num_drafts` must be an integer >= 1"),
    (dict(draft_length=2.5), "`draft_length` must be an integer >= 1"),
    (dict(draft_cache="paged"), "`draft_cache` must be one of"),
    (dict(generator="seed"), "`generator` must be a torch.Generator"),
    (dict(draft_model=tiny_model(seed=1, vocab_size=20)), "different vocabularies"),
    (dict(prompt=torch.tensor([[3, 1, 4]])), "0s then 1s.*pass the tokenizer's attention_mask.*pad_token_id \\(1\\)"),
]


@pytest.fixture
def no_model_call(pair):
    hooks = [model.register_forward_pre_hook(lambda *args: pytest.fail("a model ran before the checks"))
             for model in pair]
    yield
    for hook in hooks:
        hook.remove()


@pytest.mark.parametrize("bad, match", BAD, ids=[next(iter(b)) + str(i) for i, (b, _) in enumerate(BAD)])
def test_bad_options_fail_before_any_model_call(pair, no_model_call, bad, match):
    with pytest.raises(ValueError, match=match):
        run(pair, **{**WORKS, **bad})


def test_drafting_with_the_target_at_its_temperature_warns(pair):
    target = pair[1]
    with pytest.warns(UserWarning, match="measures nothing"):
        run((target, target), generator=0, max_new_tokens=3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(scheme="optimal-lp"), "full optimal-transport LP would have"),
    (dict(scheme="canonical"), "canonical LP"),
    (dict(scheme="is-ratio", scheme_params={"foo": 5}), "takes no parameter 'foo'"),
])
def test_schemes_that_cannot_run_are_refused_before_any_model_call(kwargs, message):
    target, draft = tiny_model(seed=1, vocab_size=3000).eval(), tiny_model(seed=0, vocab_size=3000).eval()
    calls = []
    for model in (target, draft):
        model.register_forward_pre_hook(lambda *args: calls.append(1))
    with pytest.raises(ValueError, match=message):
        target.generate(torch.tensor([[1, 2]]), do_sample=True, max_new_tokens=3, custom_generate=mspec.multi_draft_sampling,
                        draft_model=draft, num_drafts=2, **kwargs)
    assert not calls


class Recorder:
    """A streamer that records what it is given (transformers' protocol: put, then end)."""

    def __init__(self):
        self.chunks, self.ended = [], 0

    def put(self, ids):
        self.chunks.append(ids.reshape(-1).tolist())

    def end(self):
        self.ended += 1


def test_stream_and_stop_texts_are_the_callables_own_arguments(pair, tok):
    """``stream=`` gets the prompt, then every emitted token, then ``end()``; ``stop_texts=`` ends
    the output where transformers' StopStringCriteria fires, the same tokens as the criterion."""
    stream = Recorder()
    out = run(pair, generator=3, stream=stream)[0].tolist()
    assert stream.chunks[0] == PROMPT and sum(stream.chunks[1:], []) == out[len(PROMPT):] and stream.ended == 1
    for seed in range(6):
        by_text = run(pair, generator=seed, max_new_tokens=12, stop_texts=["pe", "fo"], text_tokenizer=tok)
        by_criteria = run(pair, generator=seed, max_new_tokens=12,
                          stopping_criteria=StoppingCriteriaList([StopStringCriteria(tok, ["pe", "fo"])]))
        assert torch.equal(by_text, by_criteria)
    with pytest.raises(ValueError, match="pass text_tokenizer=tokenizer"):
        run(pair, stop_texts=["pe"])
    with pytest.raises(ValueError, match="`stream` must be a streamer"):
        run(pair, stream=print)


HUB_FOLDER = Path(__file__).resolve().parents[1] / "hub" / "multi-draft-sampling"


def test_the_hub_folder_takes_generates_own_streamer_tokenizer_and_stop_strings(pair, tok):
    """``generate(custom_generate=<folder>, trust_remote_code=True)`` loads the folder's
    ``custom_generate/generate.py``, which receives generate's own arguments: the same tokens
    as the callable with ``stream=`` and ``stop_texts=``; the model card names every argument."""
    draft, target = pair
    options = dict(do_sample=True, max_new_tokens=12, draft_model=draft, generator=5)
    stream = Recorder()
    via_folder = target.generate(torch.tensor([PROMPT]), custom_generate=str(HUB_FOLDER), trust_remote_code=True,
                                 streamer=stream, tokenizer=tok, stop_strings=["pe", "fo"], **options)
    direct = target.generate(torch.tensor([PROMPT]), custom_generate=mspec.multi_draft_sampling,
                             stop_texts=["pe", "fo"], text_tokenizer=tok, **options)
    assert torch.equal(via_folder, direct)
    assert stream.chunks[0] == PROMPT and sum(stream.chunks[1:], []) == via_folder[0, len(PROMPT):].tolist()
    assert stream.ended == 1
    with pytest.raises(ValueError, match="pass tokenizer= to generate"):
        target.generate(torch.tensor([PROMPT]), custom_generate=str(HUB_FOLDER), trust_remote_code=True,
                        stop_strings=["pe"], **options)
    card = (HUB_FOLDER / "README.md").read_text()
    assert all(f"`{name}`" in card for name in ("draft_model", "num_drafts", "draft_length", "scheme", "verify",
                                                "draft_temperatures", "generator"))
