"""The trained-draft pieces on a tiny random Llama (no download): the draft's structure, its
head over frequent tokens, saving and loading, one distillation step, and decoding with it."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mspec.lm.decoding import speculative_generate
from mspec.lm.models import early_exit_model
from mspec_lab import train_draft as td
from mspec_lab.distilled_draft import FrequentTokenHead, distilled_draft, load_adapter, save_adapter, trained_parameters

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
    draft = distilled_draft(target, exit_layers=2, token_ids=torch.arange(VOCAB))
    with torch.no_grad():
        torch.testing.assert_close(draft(input_ids=ids).logits, early_exit_model(target, 3)(input_ids=ids).logits)
    assert set(trained_parameters(draft)) and all(  # its own parameters are not the target's
        p.data_ptr() not in {q.data_ptr() for q in target.parameters()} for p in trained_parameters(draft).values())


def test_the_head_proposes_only_its_tokens(target):
    kept = torch.tensor([1, 5, 7, 30])
    head = FrequentTokenHead(target.lm_head.weight, kept)
    h = torch.randn(3, 16)
    logits = head(h)
    assert logits.shape == (3, VOCAB)
    assert torch.isinf(logits[:, [i for i in range(VOCAB) if i not in kept.tolist()]]).all()
    torch.testing.assert_close(logits[:, kept], h @ target.lm_head.weight[kept].T)


def test_saved_weights_load_back(target, tmp_path):
    draft = distilled_draft(target, exit_layers=1, token_ids=torch.tensor([0, 3, 4, 9]))
    save_adapter(draft, tmp_path, {"seed": 0})
    state, token_ids, exit_layers = load_adapter(tmp_path)
    again = distilled_draft(target, exit_layers=exit_layers, token_ids=token_ids, adapter_state=state)
    ids = torch.tensor([[3, 4, 9, 0]])
    with torch.no_grad():  # float16 storage: equal to its precision
        torch.testing.assert_close(again(input_ids=ids).logits, draft(input_ids=ids).logits, rtol=1e-2, atol=1e-2)
    with pytest.raises(FileNotFoundError, match="train-draft"):
        load_adapter(tmp_path / "missing")


def test_bad_exit_layers_is_a_clear_error(target):
    with pytest.raises(ValueError, match="`exit_layers` must be an integer in 1..3"):
        distilled_draft(target, exit_layers=4, token_ids=torch.arange(VOCAB))


def test_distillation_lowers_the_loss_and_keeps_the_target(target):
    before = {k: v.clone() for k, v in target.state_dict().items()}
    target.requires_grad_(False)
    chunks = torch.randint(0, VOCAB, (8, 16), generator=torch.Generator().manual_seed(2))
    top_ids, top_logps = td.teacher_pass(target, chunks, batch=4, top=8)
    tokens = td.frequent_tokens(chunks, 24, VOCAB)
    assert len(tokens) == 24 and torch.equal(tokens, torch.sort(tokens).values)
    draft = distilled_draft(target, exit_layers=1, token_ids=tokens)
    settings = td.TrainSettings(exit_layers=1, epochs=6, batch=4, lr=1e-2)
    losses = td.train_adapter(draft, chunks, top_ids, top_logps, settings, torch.Generator().manual_seed(0),
                              log=lambda *_: None)
    assert losses[-1] < losses[0]
    assert all(torch.equal(v, target.state_dict()[k]) for k, v in before.items())
    acc, se, cover = td.held_out_acceptance(draft, target, chunks)
    assert 0 < acc <= cover <= 1 and se >= 0


def test_decoding_with_the_draft_is_the_target_law_shape(target):
    draft = distilled_draft(target, exit_layers=2, token_ids=torch.arange(0, VOCAB, 2))
    out = speculative_generate([3, 4], draft_model=draft, target_model=target, num_drafts=2, draft_length=3,
                               max_new_tokens=12, eos_token_id=False, generator=0)
    assert len(out.token_ids) == 12 and all(0 <= t < VOCAB for t in out.token_ids)


def test_the_command_needs_the_data(monkeypatch, capsys):
    from mspec_lab.cli import main
    from mspec_lab.data import DATA_DIR_ENV

    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert main(["train-draft", "--epochs", "1"]) == 2
    assert "--data-dir" in capsys.readouterr().out
