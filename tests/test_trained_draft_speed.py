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
    assert row["gpu_projected_speedup"] == pytest.approx(3 / (1 + 3 * 0.1))
    step = (0.1 + 0.1 + 0.2 + 1 / 3) / 4  # plain seconds per token, the mean over the four plain runs
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
