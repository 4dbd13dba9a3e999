"""The trained draft (:mod:`mspec_lab.trained_draft.model` and its training,
:mod:`mspec_lab.trained_draft.train`) on a tiny random Llama (no download): the draft's
structure, its head over frequent tokens, saving and loading, one distillation step, and
decoding with it; then the committed draft around the offline SmolLM2."""

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mspec.lm.decoding import speculative_generate
from mspec.lm.models import early_exit_model
from mspec_lab.rounding import UNIT_ROUNDOFF, logit_tolerance
from mspec_lab.trained_draft import train as td
from mspec_lab.trained_draft.model import (FrequentTokenHead, load_adapter, save_adapter, trained_draft_model,
                                           trained_parameters)

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

torch.set_num_threads(1)
VOCAB = 32


@pytest.fixture(scope="module")
def target():
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                         tie_word_embeddings=True, initializer_range=0.5)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def test_with_every_token_and_the_next_layer_it_is_the_early_exit(target):
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    draft = trained_draft_model(target, exit_layers=2, token_ids=torch.arange(VOCAB))
    early = early_exit_model(target, 3)
    with torch.no_grad():  # two float32 paths (a gathered head): within d (mspec_lab.rounding)
        torch.testing.assert_close(draft(input_ids=ids).logits, early(input_ids=ids).logits,
                                   atol=logit_tolerance(early, ids), rtol=0)
    assert set(trained_parameters(draft)) and all(  # its own parameters are not the target's
        p.data_ptr() not in {q.data_ptr() for q in target.parameters()} for p in trained_parameters(draft).values())


def test_the_head_proposes_only_its_tokens(target):
    kept = torch.tensor([1, 5, 7, 30])
    head = FrequentTokenHead(target.lm_head.weight, kept)
    h = torch.randn(3, 16)
    logits = head(h)
    assert logits.shape == (3, VOCAB)
    assert torch.isinf(logits[:, [i for i in range(VOCAB) if i not in kept.tolist()]]).all()
    # two float32 dot products of length n = 16, each within n u sum|h w| of the exact one
    # (Higham, Accuracy and Stability of Numerical Algorithms, eq. 3.5)
    weight = target.lm_head.weight[kept].detach()
    bound = 2 * 16 * UNIT_ROUNDOFF * (h.abs() @ weight.abs().T)
    assert ((logits[:, kept] - h @ weight.T).abs() <= bound).all()


def test_saved_weights_load_back(target, tmp_path):
    draft = trained_draft_model(target, exit_layers=1, token_ids=torch.tensor([0, 3, 4, 9]))
    save_adapter(draft, tmp_path, {"seed": 0})
    state, token_ids, exit_layers = load_adapter(tmp_path)
    again = trained_draft_model(target, exit_layers=exit_layers, token_ids=token_ids, adapter_state=state)
    ids = torch.tensor([[3, 4, 9, 0]])
    rounded = copy.deepcopy(draft)  # the weights as float16 storage keeps them, in this process
    with torch.no_grad():
        for p in trained_parameters(rounded).values():
            p.copy_(p.to(torch.float16).to(p.dtype))
        assert torch.equal(again(input_ids=ids).logits, rounded(input_ids=ids).logits)
        assert not torch.equal(again(input_ids=ids).logits, draft(input_ids=ids).logits)
    with pytest.raises(FileNotFoundError, match="trained-draft-train"):
        load_adapter(tmp_path / "missing")


def test_bad_exit_layers_is_a_clear_error(target):
    with pytest.raises(ValueError, match="`exit_layers` must be an integer in 1..3"):
        trained_draft_model(target, exit_layers=4, token_ids=torch.arange(VOCAB))


def test_samples_carry_the_targets_distributions(target):
    """Left padding, positions and the KV cache of the batched sampler: every recorded top-k is
    the target's own next-token law on that sample, recomputed alone without padding."""
    prompts = [[3, 4, 5, 6, 7], [9], [1, 2, 3], [8, 8, 8, 8, 8, 8, 8]]
    samples = td.sample_continuations(target, prompts, new_tokens=6, batch=3, gen=torch.Generator().manual_seed(0),
                                      eos_token_id=0, top=5)
    assert [s.prompt for s in samples] == prompts
    for s in samples:
        assert 1 <= len(s.tokens) <= 6 and (0 not in s.tokens[:-1])  # stops at eos, included
        with torch.no_grad():
            logits = target(input_ids=torch.tensor([s.prompt + s.tokens])).logits[0, len(s.prompt) - 1 : -1]
        best = torch.log_softmax(logits, -1).topk(5)
        assert torch.equal(s.top_ids.long(), best.indices)
        # float16 storage rounds to a relative 2^-11; the batched, padded, cached pass and this
        # one are two float32 paths, within d of each other (mspec_lab.rounding), and a
        # log-softmax moves by at most 2 d
        atol = 2 * logit_tolerance(target, torch.tensor([s.prompt + s.tokens]))
        torch.testing.assert_close(s.top_logps.float(), best.values, atol=atol, rtol=2.0**-11)


def test_the_first_sampled_token_follows_the_target():
    """Chi-square of 2,000 first tokens against the target's law; the same counts reject the law
    at temperature 2 (the test can fail)."""
    from scipy import stats

    config = LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True, initializer_range=0.3)
    torch.manual_seed(1)
    model = LlamaForCausalLM(config).eval()
    samples = td.sample_continuations(model, [[3, 4]] * 2000, new_tokens=1, batch=500,
                                      gen=torch.Generator().manual_seed(0), eos_token_id=0, top=8)
    counts = torch.bincount(torch.tensor([s.tokens[0] for s in samples]), minlength=8).double()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[3, 4]])).logits[0, -1].double()
    for temperature, passes in ((1.0, True), (2.0, False)):
        expected = torch.softmax(logits / temperature, -1) * 2000
        assert (stats.chisquare(counts.numpy(), expected.numpy()).pvalue > 1e-3) == passes


def test_distillation_lowers_the_loss_and_keeps_the_target(target):
    before = {k: v.clone() for k, v in target.state_dict().items()}
    target.requires_grad_(False)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(1, VOCAB, (n,), generator=gen).tolist() for n in (3, 9, 5, 12, 4, 7, 6, 8)]
    samples = td.sample_continuations(target, prompts, new_tokens=10, batch=4, gen=gen, eos_token_id=0, top=8)
    tokens = td.frequent_tokens([s.prompt + s.tokens for s in samples], 24, VOCAB)
    assert len(tokens) == 24 and torch.equal(tokens, torch.sort(tokens).values)
    ids, top_ids, top_logps, mask = examples = td.training_examples(samples, context=4, pad_id=0)
    assert int(mask.sum()) == sum(len(s.tokens) for s in samples)
    n = 3  # the third sample: its last 4 prompt tokens, then its tokens but the last
    s = samples[n]
    assert ids[n, : 4 + len(s.tokens) - 1].tolist() == s.prompt[-4:] + s.tokens[:-1]
    assert mask[n].nonzero()[0, 0] == 3 and torch.equal(top_ids[n, 3 : 3 + len(s.tokens)], s.top_ids)
    draft = trained_draft_model(target, exit_layers=1, token_ids=tokens)
    settings = td.TrainSettings(exit_layers=1, epochs=6, batch=4, lr=1e-2)
    losses = td.train_adapter(draft, examples, settings, torch.Generator().manual_seed(0), log=lambda *_: None)
    assert losses[-1] < losses[0]
    assert all(torch.equal(v, target.state_dict()[k]) for k, v in before.items())
    acc, se, cover = td.held_out_acceptance(draft, target, samples)
    assert 0 < acc <= cover <= 1 and se >= 0


def test_decoding_with_the_draft_is_the_target_law_shape(target):
    draft = trained_draft_model(target, exit_layers=2, token_ids=torch.arange(0, VOCAB, 2))
    out = speculative_generate([3, 4], draft_model=draft, target_model=target, num_drafts=2, draft_length=3,
                               max_new_tokens=12, eos_token_id=False, generator=0)
    assert len(out.token_ids) == 12 and all(0 <= t < VOCAB for t in out.token_ids)


def test_the_command_needs_the_data(monkeypatch, capsys):
    from mspec_lab.cli import main
    from mspec_lab.data import DATA_DIR_ENV

    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert main(["trained-draft-train", "--epochs", "1"]) == 2
    assert "--data-dir" in capsys.readouterr().out


@pytest.mark.slow
def test_the_committed_draft_loads_offline_and_decodes(monkeypatch):
    """``load_pair()`` is ``load_pair("smollm2-distilled")``: the committed weights (small, with
    their provenance) around the offline SmolLM2, sharing its layers, proposing only its frequent
    tokens, and decoding text with them."""
    import json

    from mspec_lab.trained_draft.model import DEFAULT_WEIGHTS
    from mspec_lab.models import load_pair

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    files = list(DEFAULT_WEIGHTS.iterdir())
    assert sum(f.stat().st_size for f in files) <= 20 * 2**20
    provenance = json.loads((DEFAULT_WEIGHTS / "provenance.json").read_text())
    assert {"settings", "held_out", "seconds", "command", "code"} <= set(provenance)
    pair = load_pair(device="cpu")
    assert pair.name == "smollm2-distilled"
    draft, target = pair.draft_model, pair.target_model
    exit_layers = provenance["settings"]["exit_layers"]
    assert all(draft.model.layers[i] is target.model.layers[i] for i in range(exit_layers))
    assert "trained adapter" in pair.description
    ids = pair.tokenizer("Translate German to English: Guten Morgen, wie geht es dir?\nEnglish:",
                         return_tensors="pt").input_ids
    with torch.no_grad():
        logits = draft(input_ids=ids).logits[0, -1]
    assert int(torch.isfinite(logits).sum()) == provenance["settings"]["frequent_tokens"]
    out = speculative_generate(ids, draft_model=draft, target_model=target, num_drafts=2, draft_length=3,
                               max_new_tokens=16, tokenizer=pair.tokenizer, generator=0)
    assert 1 <= len(out.token_ids) <= 16 and out.block_efficiency > 1  # drafted tokens are accepted


@pytest.mark.slow
def test_sequences_with_the_committed_draft_follow_the_target():
    """Chi-square of 300 three-token continuations (K = 2 SpecInfer drafts of the trained draft,
    L = 2, the target's law cut to its top 3 tokens: 27 sequences) against their exact law under
    the target, by the chain rule; the same counts reject the draft's own law (the test can fail)."""
    import numpy as np
    from test_decoding_lossless import binned_chisquare

    from mspec.distributions import distribution_from_logits
    from mspec_lab.models import load_pair

    pair = load_pair("smollm2-distilled", device="cpu")
    prompt = pair.tokenizer("Summarize: The council voted to close the old bridge.\nSummary:")["input_ids"]

    def law(model, prefix):  # the top-3 law after each prefix, {token: probability}
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + prefix])).logits[0, -1].double()
        probs = distribution_from_logits(logits, temperature=1.0, top_k=3)
        return {int(t): float(probs[t]) for t in torch.nonzero(probs)[:, 0]}

    def sequence_law(model):
        out = {}
        for a, pa in law(model, []).items():
            for b, pb in law(model, [a]).items():
                for c, pc in law(model, [a, b]).items():
                    out[(a, b, c)] = pa * pb * pc
        return out

    target_law, draft_law = sequence_law(pair.target_model), sequence_law(pair.draft_model)
    gen, counts = torch.Generator().manual_seed(7), {}
    for _ in range(300):
        ids = speculative_generate(prompt, draft_model=pair.draft_model, target_model=pair.target_model,
                                   scheme="specinfer", num_drafts=2, draft_length=2, top_k=3, max_new_tokens=3,
                                   eos_token_id=False, generator=gen).token_ids
        counts[tuple(ids)] = counts.get(tuple(ids), 0) + 1
    assert set(counts) <= set(target_law)  # nothing outside the target's support
    for reference, passes in ((target_law, True), (draft_law, False)):
        keys = sorted(set(reference) | set(counts))
        observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
        expected = 300 * np.array([reference.get(k, 0.0) for k in keys])
        if not passes and (observed[expected == 0] > 0).any():
            continue  # a sequence the draft's law forbids was generated: rejected outright
        assert (binned_chisquare(observed, expected) > 1e-3) == passes


def test_the_trained_draft_refuses_a_cast_that_would_change_the_target(target):
    draft = trained_draft_model(target, exit_layers=2, token_ids=torch.tensor([0, 3, 4, 9]))
    with pytest.raises(ValueError, match="Cast or move the target instead"):
        draft.to(torch.bfloat16)
    assert {p.dtype for p in target.parameters()} == {torch.float32}
    with torch.no_grad():
        target(input_ids=torch.tensor([[3, 4]]))  # the target still runs
