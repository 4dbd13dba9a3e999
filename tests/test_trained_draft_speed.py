"""The trained draft's speed benchmark (:mod:`mspec_lab.trained_draft.speed`): its arithmetic on
hand-made generations (no model): acceptance per position, block efficiency, the speed-up and its
standard error, the settings' checks; and the command on the committed draft (slow)."""

import math

import pytest

from mspec.lm.result import GenerationResult, RoundRecord
from mspec_lab.experiments.results import ratio_se
from mspec_lab.trained_draft import speed as tdb


def run(rounds, tokens, seconds, prefill=0.5, k=1, length=3):
    """A generation of ``tokens`` tokens decoded in ``seconds`` after a ``prefill``."""
    return GenerationResult(token_ids=[1] * tokens, rounds=rounds, method="single", num_drafts=k,
                            draft_length=length, wall_time=seconds + prefill, prefill_time=prefill)


def rnd(accepted, alive, emitted=None, draft=0.03, target=0.1):
    return RoundRecord(alive=alive, accepted_length=accepted, winner=0 if accepted else None, bonus=accepted == 3,
                       emitted=accepted + 1 if emitted is None else emitted, draft_time=draft, target_time=target)


def test_acceptance_per_position_counts_rounds_that_reached_it():
    # round 1 keeps 2 of 3 (reached 1, 2, 3), round 2 keeps none (reached 1), round 3 keeps all
    a = run([rnd(2, [1, 1, 1]), rnd(0, [1]), rnd(3, [1, 1, 1])], tokens=8, seconds=1.0)
    b = run([rnd(1, [1, 1])], tokens=2, seconds=0.2)  # stopped after position 2 (end of text)
    got = tdb._acceptance([a, b], 3)
    assert [x[0] for x in got] == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    assert [x[2] for x in got] == [2, 2, 2]
    assert got[0][0] == pytest.approx(ratio_se([2, 1], [3, 1])[0])


def test_summary_speedup_is_the_ratio_of_token_rates_on_the_same_prompts():
    s = tdb.TrainedDraftSpeedSettings(prompts=2, drafts_k=(1,), draft_lengths=(3,), threads=(1,))
    plain = [[run([rnd(0, [])] * 10, 10, 1.0), run([rnd(0, [])] * 10, 10, 1.0)],  # 10 tokens/s
             [run([rnd(0, [])] * 10, 10, 2.0), run([rnd(0, [])] * 10, 10, 1.0 / 0.3)]]  # mean 4 tokens/s
    spec = [run([rnd(3, [1, 1, 1])] * 3, 12, 1.0), run([rnd(1, [1, 1])] * 4, 8, 1.0)]  # 12 and 8 tokens/s
    result = tdb.summarize_speed({1: {"plain": plain, (1, 3): spec}}, s, draft_share=0.1)
    row, = result["settings"]
    assert row["speedup"] == pytest.approx((12 + 8) / (10 + 4))
    assert row["speedup_se"] == pytest.approx(ratio_se([12, 8], [10, 4])[1])
    assert row["block_efficiency"] == pytest.approx((4 + 2) / 2)
    step = (0.1 + 0.1 + 0.2 + 1 / 3) / 4  # plain seconds per token, the mean over the four plain runs
    # the flat-pass projection uses the measured draft step (not the weight share)
    assert row["gpu_projected_speedup"] == pytest.approx(3 / (1 + 3 * (0.03 / 3 / step)))
    assert row["cost"]["target_pass_steps"] == pytest.approx(0.1 / step)
    assert row["cost"]["draft_step_steps"] == pytest.approx(0.03 / 3 / step)
    assert result["plain"][1]["tokens_per_s"] == pytest.approx(7.0)
    # position 1 kept in all 7 rounds; position 2 reached 3 + 4 times, kept 3; position 3 reached 3, kept 3
    assert [a[0] for a in row["acceptance_per_position"]] == pytest.approx([1, 3 / 7, 1])


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompts=0), "`prompts` must be in 1..64"),
    (dict(prompts=65), "`prompts` must be in 1..64"),
    (dict(drafts_k=()), "`drafts_k` must be a non-empty list"),
    (dict(draft_lengths=(2, 0)), "`draft_lengths`"),
    (dict(threads=(1.5,)), "`threads`"),
    (dict(max_new_tokens=0), "`max_new_tokens`"),
    (dict(scheme="single"), "`scheme`"),
    (dict(scheme="nope"), "`scheme`"),
])
def test_bad_settings_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tdb.TrainedDraftSpeedSettings(**kwargs)


def test_quick_settings_are_a_smoke_test():
    q = tdb.TrainedDraftSpeedSettings.quick(seed=3)
    assert q.smoke_test and q.seed == 3 and q.prompts == 1 and not math.isnan(q.max_new_tokens)


@pytest.mark.slow
@pytest.mark.model  # runs the offline SmolLM2 and the trained draft
def test_the_speed_command_writes_its_results_file(tmp_path, capsys):
    """``python -m mspec_lab trained-draft-speed --quick`` on the committed draft: a smoke test
    that says so, one row per (threads, K, L) with the results file's fields."""
    from mspec_lab.cli import main

    out = tmp_path / "trained_draft.json"
    assert main(["trained-draft-speed", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.lstrip().startswith("SMOKE TEST") and "speed-up (CPU)" in printed
    doc = tdb.load_trained_draft_speed(out)
    assert doc["smoke_test"] is True and doc["command"].startswith("python -m mspec_lab trained-draft-speed")
    assert [(r["num_drafts"], r["draft_length"]) for r in doc["settings"]] == [(1, 2), (1, 3), (2, 2), (2, 3)]
    for row in doc["settings"]:
        assert set(tdb.SETTING_FIELDS) <= set(row) and len(row["acceptance_per_position"]) == row["draft_length"]
        assert 1 <= row["block_efficiency"] <= row["draft_length"] + 1 and row["speedup"] > 0


# -- the pass curve and the projection (structure only: no timing thresholds) --------------------------
@pytest.mark.model  # runs tiny torch models
def test_pass_curve_on_tiny_models_has_one_positive_time_per_size():
    from mspec_lab.models import tiny_model

    target, draft = tiny_model(seed=0), tiny_model(seed=1)
    curve = tdb.pass_curve(target, draft, [1, 2, 3, 4, 5], max_tokens=6, repeats=2, draft_rows=(1, 2),
                           command="test")
    assert curve["tokens"] == [1, 2, 3, 4, 5, 6] and len(curve["pass_s"]) == len(curve["pass_ratio"]) == 6
    assert all(t > 0 for t in curve["pass_s"]) and curve["pass_ratio"][0] == 1.0
    assert curve["pass_ratio"] == pytest.approx([t / curve["pass_s"][0] for t in curve["pass_s"]])
    assert set(curve["draft_step_s"]) == {1, 2} and all(t > 0 for t in curve["draft_step_s"].values())
    assert curve["draft_share"] == pytest.approx(curve["draft_step_s"][1] / curve["pass_s"][0])
    assert curve["device"] == "cpu" and curve["prefix"] == 5 and curve["threads"] >= 1
    assert curve["command"] == "test" and "cores" in curve["machine"]


@pytest.mark.model
def test_pass_curve_leaves_the_models_as_they_were():
    """Timing feeds the same tokens many times: the models' outputs afterwards are unchanged."""
    import torch

    from mspec_lab.models import tiny_model

    target, draft = tiny_model(seed=0), tiny_model(seed=1)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        before = target(ids).logits
    tdb.pass_curve(target, draft, [1, 2, 3], max_tokens=3, repeats=1, draft_rows=(1,))
    with torch.inference_mode():
        assert torch.equal(target(ids).logits, before)


def curve(ratios, draft_steps, one=0.1):
    return {"pass_s": [r * one for r in ratios], "pass_ratio": list(ratios), "draft_step_s": draft_steps}


def test_predicted_speedup_is_be_over_the_round_in_one_token_passes():
    c = curve([1.0, 1.2, 1.5, 2.0, 2.2, 2.4, 2.6, 3.0], {1: 0.01, 2: 0.015, 4: 0.02})
    assert tdb.predicted_speedup(c, 1.3, 1, 1) == pytest.approx(1.3 / (1.2 + 1 * 0.1))
    assert tdb.predicted_speedup(c, 1.5, 1, 3) == pytest.approx(1.5 / (2.0 + 3 * 0.1))
    assert tdb.predicted_speedup(c, 1.6, 2, 1) == pytest.approx(1.6 / (2.0 + 0.15))  # 2 rows x 2 tokens
    assert tdb.predicted_speedup(c, 1.7, 4, 1) == pytest.approx(1.7 / (3.0 + 0.2))
    assert math.isnan(tdb.predicted_speedup(c, 1.7, 4, 2))  # 12 tokens: beyond the curve
    # a flat curve (a GPU's) and a free draft: the speed-up is the block efficiency
    assert tdb.predicted_speedup(curve([1.0] * 8, {1: 0.0}), 1.4, 1, 3) == pytest.approx(1.4)
    # a pass that grows with the tokens lowers the projection, L by L
    steep = curve([1.0 + 0.5 * n for n in range(8)], {1: 0.01})
    assert all(tdb.predicted_speedup(steep, 2.0, 1, n) > tdb.predicted_speedup(steep, 2.0, 1, n + 1)
               for n in range(1, 7))


def test_load_pass_curve_reads_what_bench_writes(tmp_path):
    import json

    path = tmp_path / "curve.json"
    path.write_text(json.dumps({"tokens": [1], "pass_s": [0.1], "pass_ratio": [1.0], "draft_step_s": {"1": 0.01}}))
    assert tdb.load_pass_curve(path)["draft_step_s"] == {1: 0.01}
    with pytest.raises(FileNotFoundError, match="trained-draft-curve"):
        tdb.load_pass_curve(tmp_path / "missing.json")


# -- the reader's own prompts ---------------------------------------------------------------------------
def test_read_prompts_one_per_line_and_jsonl(tmp_path):
    text = tmp_path / "mine.txt"
    text.write_text("Write a haiku.\n\n  Translate: Guten Tag  \n", encoding="utf-8")
    assert tdb.read_prompts(text) == ["Write a haiku.", "  Translate: Guten Tag  "]
    lines = tmp_path / "mine.jsonl"
    lines.write_text('"one\\ntwo"\n{"prompt": "three", "id": 7}\n\n', encoding="utf-8")
    assert tdb.read_prompts(lines) == ["one\ntwo", "three"]


@pytest.mark.parametrize("name, content, match", [
    ("empty.txt", "\n \n", "no prompts"),
    ("bad.jsonl", '{"text": "x"}\n', ":1: a .jsonl line"),
    ("num.jsonl", '"ok"\n3\n', ":2: a .jsonl line"),
])
def test_bad_prompt_files_are_clear_errors(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        tdb.read_prompts(path)


class ChatTokenizer:
    """A tokenizer stand-in: ids are character codes; the chat template wraps the user turn."""
    chat_template = "{{ messages }}"

    def __call__(self, text):
        return {"input_ids": [ord(ch) for ch in text]}

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, return_dict):
        assert add_generation_prompt and tokenize and return_dict and messages[0]["role"] == "user"
        return {"input_ids": [ord(ch) for ch in f"<u>{messages[0]['content']}<a>"]}


def test_prompt_token_ids_applies_the_chat_template_only_when_asked():
    tok = ChatTokenizer()
    assert tdb.prompt_token_ids(tok, ["hi"], False) == [[ord("h"), ord("i")]]
    assert tdb.prompt_token_ids(tok, ["hi"], True) == [[ord(ch) for ch in "<u>hi<a>"]]
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        tdb.prompt_token_ids(tok, ["hi"], True)


def test_a_prompts_file_turns_the_chat_template_on_by_default(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("a\nb\n", encoding="utf-8")
    tok = ChatTokenizer()
    mine = tdb.TrainedDraftSpeedSettings(prompts_file=str(path))
    assert tdb.benchmark_prompts(tok, mine) == [[ord(ch) for ch in f"<u>{x}<a>"] for x in "ab"]
    plain = tdb.TrainedDraftSpeedSettings(prompts_file=str(path), chat_template=False)
    assert tdb.benchmark_prompts(tok, plain) == [[ord("a")], [ord("b")]]
    quick = tdb.TrainedDraftSpeedSettings.quick(prompts_file=str(path))
    assert len(tdb.benchmark_prompts(tok, quick)) == 1


def test_the_command_line_takes_a_prompts_file_and_the_chat_template_switch():
    from mspec_lab.cli import command_parser
    from mspec_lab.commands import _settings

    parser = command_parser("trained-draft-speed")
    args = parser.parse_args(["--quick", "--prompts-file", "mine.jsonl", "--no-chat-template"])
    s = _settings(tdb.TrainedDraftSpeedSettings, args, {"prompts_file": "prompts_file",
                                                        "chat_template": "chat_template"})
    assert s.smoke_test and s.prompts_file == "mine.jsonl" and s.chat_template is False
    assert parser.parse_args([]).chat_template is None
    assert parser.parse_args(["--chat-template"]).chat_template is True
    curve_args = command_parser("trained-draft-curve").parse_args(["--threads", "2"])
    assert (curve_args.threads, curve_args.max_tokens, curve_args.repeats) == (2, 16, 5)
