"""The experiment commands (``python -m mspec.bench experiments|acceptance|decoding``) on the tiny pair.

Checks that a sweep stopped after a few rows resumes without recomputing them, that the
tables come out complete and next to the paper's numbers, and the resumable CSV itself.
"""

import argparse
import csv
import json

import numpy as np
import pytest

from mspec.bench import acceptance, decoding, experiments, paper, rounds
from mspec.bench.__main__ import COMMANDS
from mspec.bench.results import ResultTable, RowBudget, StopSweep, mean_se

# tiny settings: a few seconds per full sweep
COMMON = ["--preset", "tiny", "--quick", "--threads", "1", "--datasets", "dolly", "wmt"]
ACCEPTANCE = ["--acc-prompts", "1", "--positions", "4"]
DECODING = ["--max-new-tokens", "8"]
TINY = COMMON + ACCEPTANCE + DECODING


def parse(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def csv_rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_commands_registered():
    for name in ("experiments", "acceptance", "decoding", "rounds"):
        assert name in COMMANDS


def test_interrupted_sweep_resumes_without_recomputing(tmp_path, capsys):
    argv = TINY + ["--out", str(tmp_path)]
    first = []
    assert experiments.run(parse(experiments, argv + ["--max-rows", "7"]), on_row=first.append) == 3
    assert len(first) == 7
    stored = {row["key"]: row for name in ("acceptance_prompts.csv", "acceptance.csv", "decoding.csv")
              if (tmp_path / name).exists() for row in csv_rows(tmp_path / name)}
    assert len(stored) == 7
    assert "rerun the same command to resume" in capsys.readouterr().out

    second = []
    assert experiments.run(parse(experiments, argv), on_row=second.append) == 0
    out = capsys.readouterr().out

    final = {}
    for name in ("acceptance_prompts.csv", "acceptance.csv", "decoding.csv"):
        rows = csv_rows(tmp_path / name)
        keys = [row["key"] for row in rows]
        assert len(keys) == len(set(keys)), f"duplicate rows in {name}: a stored row was recomputed"
        final.update({row["key"]: row for row in rows})
    assert len(final) == len(first) + len(second)  # every row computed exactly once
    for key, row in stored.items():  # rows of the first run are untouched
        assert final[key] == row

    # a third run computes nothing and prints the same tables
    third = []
    assert experiments.run(parse(experiments, argv), on_row=third.append) == 0
    assert third == []
    assert capsys.readouterr().out.split("== Performance goals")[0] == out.split("== Performance goals")[0]

    # complete tables, next to the paper's numbers, with the pair named
    assert "Table 3: token-level acceptance, dolly" in out and "Table 3: token-level acceptance, wmt" in out
    for title in ("Table 1:", "Table 2:", "Table 4:", "Table 6:", "Figure 3:", "Figure 4:", "Where the time goes",
                  "Goal (a)", "Goal (b)", "Goal (c)"):
        assert title in out, title
    assert f"{paper.TABLE3_ACCEPTANCE['dolly']['optimal'][2]:.4f}" in out
    assert "tiny random OPT pair" in out and paper.PAIR in out
    assert "Absolute numbers differ" in out

    summary = json.loads((tmp_path / "acceptance.json").read_text())
    for k in (2, 4, 8):
        st = summary["stats"]["dolly"]
        assert st["optimal"][str(k)]["n"] == 4
        # the optimum bounds every scheme at every position, hence on average
        for scheme in ("is", "spectr", "specinfer"):
            assert st["optimal"][str(k)]["mean"] >= st[scheme][str(k)]["mean"] - 1e-12
    dec = json.loads((tmp_path / "decoding.json").read_text())
    assert set(dec["stats"]) == {"drafts", "temperature", "nonidentical", "topk", "truncation", "timing"}
    assert (tmp_path / "decoding.html").stat().st_size > 1000


def test_acceptance_rows_exact(tmp_path):
    """Each stored acceptance equals the scheme's exact acceptance at that position."""
    from mspec.models import load_pair
    from mspec.registry import make_scheme

    args = parse(acceptance, COMMON + ACCEPTANCE + ["--out", str(tmp_path), "--datasets", "dolly", "--acc-drafts", "2"])
    assert acceptance.run(args) == 0
    pair = load_pair("tiny")
    prompt = acceptance.common.load_dataset_prompts(pair, "dolly", 1, source="auto", max_chars=400)[0]
    seed = acceptance.common.derived_seed(args.seed, prompt.tag)
    draft, target, cont = acceptance.collect_distributions(pair, prompt.ids, positions=4, draft_temperature=1.5,
                                                           target_temperature=1.0, seed=seed)
    assert draft.shape == target.shape == (len(cont), pair.vocab_size)
    table = ResultTable(tmp_path / "acceptance.csv", config_fields=acceptance.ROW_FIELDS,
                        value_fields=["acceptance", "time_ms"])
    for row in table.select(scheme="spectr", num_drafts=2):
        j = row["position"]
        want = make_scheme("spectr", draft=draft[j], target=target[j], num_drafts=2).acceptance()
        assert row["acceptance"] == pytest.approx(want, abs=1e-9)


def test_decoding_only_one_experiment(tmp_path, capsys):
    args = parse(decoding, COMMON + DECODING + ["--out", str(tmp_path), "--only", "drafts", "--drafts-k", "2", "3"])
    assert decoding.run(args) == 0
    out = capsys.readouterr().out
    assert "Table 1: block efficiency vs K" in out and "Table 4" not in out
    rows = csv_rows(tmp_path / "decoding.csv")
    methods = sorted(json.loads(r["key"])["method"] for r in rows)
    assert methods == ["autoregressive", "is", "is", "optimal", "optimal", "single", "specinfer", "specinfer",
                       "spectr", "spectr"]
    for r in rows:
        assert 1.0 <= float(r["block_efficiency"]) <= 6.0
        assert 1 <= int(float(r["tokens"])) <= 8  # EOS (id 2) may stop it early
        config = json.loads(r["key"])
        alive, reached = json.loads(r["alive"]), json.loads(r["reached"])
        if config["method"] == "autoregressive":
            assert alive == reached == []
        else:  # every round offers all K drafts at its first position, then never more
            assert alive[0] == config["num_drafts"] * reached[0] == config["num_drafts"] * float(r["target_calls"])
            assert all(a <= config["num_drafts"] * n for a, n in zip(alive, reached))
    assert "Drafts alive per position" in out


def test_paired_rounds(tmp_path, capsys):
    """Every scheme's expected tokens on the same reference rounds; a rerun recomputes nothing."""
    argv = COMMON + ["--out", str(tmp_path), "--gen-prompts", "1", "--max-new-tokens", "8", "--drafts-k", "2", "3",
                     "--draft-length", "3"]
    computed = []
    assert rounds.run(parse(rounds, argv), on_row=computed.append) == 0
    out = capsys.readouterr().out
    assert "Paired block efficiency" in out
    assert len(computed) == 1 + 2 * len(rounds.ROUND_SCHEMES)  # 1 prompt x 1 seed
    by = {(r["method"], r["num_drafts"]): r["per_round"] for r in computed}
    lengths = {len(v) for v in by.values()}
    assert len(lengths) == 1 and lengths.pop() >= 1  # the same rounds for every method
    assert all(1.0 <= x <= 4.0 for v in by.values() for x in v)
    assert all(np.shape(r["control"]) == (len(r["per_round"]), 3) for r in computed)  # L = 3 controls per round
    assert "optimal significantly behind:" in out
    again = []
    assert rounds.run(parse(rounds, argv), on_row=again.append) == 0 and again == []
    stats = json.loads((tmp_path / "rounds.json").read_text())["stats"]
    assert set(stats["optimal_minus"]) == {f"{s} K={k}" for s in rounds.ROUND_SCHEMES if s != "optimal" for k in (2, 3)}
    assert "optimal-tokens" in rounds.ROUND_SCHEMES


def test_rounds_estimators():
    """Clustered standard errors reduce to the plain ones for one round per generation and grow
    when rounds of a generation move together; the control fit keeps the mean and removes the
    noise it explains; the verdict needs two standard errors."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=400)
    mean, se = rounds.cluster_mean_se(x, np.arange(400))
    assert mean == pytest.approx(x.mean()) and se == pytest.approx(x.std(ddof=1) / 20)
    shared = np.repeat(rng.normal(size=40), 10)  # 40 generations of 10 rounds with a common shift
    assert rounds.cluster_mean_se(shared + 0.1 * x, np.repeat(np.arange(40), 10))[1] > 2 * (shared + 0.1 * x).std() / 20
    z = rng.normal(size=(400, 2))
    values = 3.0 + z @ np.array([1.0, -2.0]) + 0.1 * x
    adjusted = rounds.control_adjusted(values, z)
    assert abs(adjusted.mean() - 3.0) < 0.05 and adjusted.std() < 0.2 < values.std()
    assert rounds.control_adjusted(values, np.zeros((400, 2))) is values
    short = values[:19]  # too few rounds to fit 2 coefficients: unadjusted
    np.testing.assert_array_equal(rounds.control_adjusted(short, z[:19]), short)
    assert not np.array_equal(rounds.control_adjusted(values[:20], z[:20]), values[:20])
    assert [rounds.comparison_verdict(m, 0.1) for m in (0.3, 0.1, -0.1, -0.3)] == ["ahead", "level", "level", "BEHIND"]


def test_result_table_resume_and_budget(tmp_path):
    path = tmp_path / "t.csv"
    budget = RowBudget(max_rows=2)
    table = ResultTable(path, config_fields=["a"], value_fields=["v", "text"], budget=budget)
    calls = []

    def value(a):
        calls.append(a)
        return {"v": a * 1.5, "text": f"x,\"{a}\"\n"}

    for a in range(2):
        table.compute({"a": a, "b": [1, 2]}, lambda a=a: value(a))
    with pytest.raises(StopSweep):
        table.compute({"a": 2, "b": [1, 2]}, lambda: value(2))
    again = ResultTable(path, config_fields=["a"], value_fields=["v", "text"])
    assert len(again) == 2
    row = again.compute({"b": [1, 2], "a": 1}, lambda: value(99))  # key order does not matter
    assert row == {"a": 1, "b": [1, 2], "v": 1.5, "text": "x,\"1\"\n"}
    assert calls == [0, 1]
    with pytest.raises(ValueError, match="another version"):
        ResultTable(path, config_fields=["a"], value_fields=["other"])


def test_mean_se():
    mean, se, n = mean_se([1.0, 2.0, 3.0, float("nan")])
    assert (mean, n) == (2.0, 3)
    assert se == pytest.approx(np.std([1, 2, 3], ddof=1) / np.sqrt(3))
    assert np.isnan(mean_se([5.0])[1])
    assert mean_se([])[2] == 0


def test_paper_tables_shape():
    assert set(paper.TABLE1_BLOCK_EFFICIENCY) == {"is", "spectr", "specinfer"}
    for dataset in ("xsum", "dolly"):
        for k in (2, 4, 8):  # the paper's ordering, which ours should reproduce
            t = paper.TABLE3_ACCEPTANCE[dataset]
            assert t["optimal"][k] >= t["is"][k] >= t["spectr"][k] >= t["specinfer"][k]
    for table in (paper.TABLE5_ROUGE_L, paper.TABLE6_BLEU):
        assert all(len(v) == len(paper.TEMPERATURES) for v in table.values())
