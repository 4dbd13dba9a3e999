"""Benchmarks and experiments: every command of ``python -m mspec_lab``, the plain functions behind them.

* every command through :func:`mspec_lab.cli.main` on tiny settings (the ``tiny``
  model pair, a few rows): a sweep stopped after a few rows resumes without recomputing
  them, and the tables come out complete and next to the paper's numbers;
* the experiments of :mod:`mspec_lab.experiments` called directly, as a notebook does (rows in
  memory, no files);
* a command whose optional package is missing says which and how to install it (a
  subprocess with the package blocked in ``sys.modules``);
* the resumable CSV, the statistics, the timer and the synthetic pairs.
"""

import csv
import dataclasses
import json
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

from mspec_lab.cli import COMMANDS, OPTIONAL_PACKAGES, main, missing_message, missing_packages
from mspec_lab.experiments import acceptance, live_decoding, paired_schemes, paper
from mspec_lab.experiments.acceptance import AcceptanceSettings
from mspec_lab.experiments.live_decoding import DecodingSettings
from mspec_lab.experiments.paired_schemes import RoundsSettings
from mspec_lab.experiments.report import SMOKE_TEST_BANNER, SMOKE_TEST_LINE
from mspec_lab.experiments.results import ResultTable, RowBudget, StopSweep, mean_se

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[1]
# tiny settings: a few seconds per full sweep
COMMON = ["--preset", "tiny", "--quick", "--threads", "1"]
DATASETS = ["--datasets", "dolly", "wmt"]
ACCEPTANCE = ["--acc-prompts", "1", "--positions", "4"]
DECODING = ["--max-new-tokens", "8"]
TINY = COMMON + DATASETS + ACCEPTANCE + DECODING
SWEEP_FILES = ("acceptance_prompts.csv", "acceptance.csv", "decoding.csv")


@pytest.fixture(scope="module")
def tiny_pair():
    from mspec_lab.models import load_pair

    return load_pair("tiny")


def csv_rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def stored(folder, names=SWEEP_FILES) -> dict:
    """key -> row of every CSV file of a sweep in ``folder``."""
    return {row["key"]: row for name in names if (folder / name).exists() for row in csv_rows(folder / name)}


# -- the command line ----------------------------------------------------------------------------
def test_every_command_is_listed(capsys):
    assert set(COMMANDS) == {"token-level", "optimal", "gpu", "experiments", "acceptance", "decoding", "rounds",
                             "paper-run", "round-rules", "trained-draft-train", "trained-draft-speed", "trained-draft-curve",
                             "trained-draft-regime"}
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    with pytest.raises(SystemExit) as stop:
        main(["no-such-command"])
    assert stop.value.code == 2


@pytest.mark.parametrize("former, now", [("train-draft", "trained-draft-train"),
                                          ("draft-speed", "trained-draft-speed"),
                                          ("trained-regime", "trained-draft-regime")])
def test_a_former_command_name_says_the_name_now(former, now, capsys):
    """A renamed command stops with a usage error (status 2) and one line naming the command
    to run instead; it runs nothing and is not listed."""
    assert former not in COMMANDS and now in COMMANDS
    assert main([former, "--quick", "--out", "never-written.json"]) == 2
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1
    assert f"python -m mspec_lab {former}: renamed" in captured.err
    assert f"`python -m mspec_lab {now}`" in captured.err
    done = subprocess.run([sys.executable, "-m", "mspec_lab", former, "--help"], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 2 and not done.stdout and done.stderr.strip() == captured.err.strip()


def test_round_rules_command(tmp_path, capsys):
    # The whole path on the tiny pair: every rule scored on the same rounds, the verification
    # timed, a results file with provenance that reads back.
    from mspec_lab.experiments.round_rules import load_round_rules

    assert main(["round-rules", "--preset", "tiny", "--quick", "--data-source", "builtin", "--datasets", "dolly",
                 "--timing-tokens", "6", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "traversal" in out and "selected-block" in out and "Verification time per round" in out
    assert out.startswith(SMOKE_TEST_BANNER) and out.count(SMOKE_TEST_LINE) == 2  # --quick: a smoke test
    doc = load_round_rules(tmp_path / "round_rules.json")
    assert doc["smoke_test"] is True and doc["smoke_test_note"] == SMOKE_TEST_BANNER
    assert doc["provenance"]["preset"] == "tiny" and doc["provenance"]["command"].startswith("python -m mspec_lab")
    methods = {(r["K"], r["method"]) for r in doc["tokens_per_round"]}
    assert methods == {(1, "single"), (1, "block"), (2, "optimal"), (2, "spectr"), (2, "specinfer"),
                       (2, "traversal"), (2, "selected-block")}
    for r in doc["tokens_per_round"]:
        assert 1.0 <= r["tokens_per_round"] <= 6.0  # L = 5: between 1 and L + 1 tokens per round
    assert all(c["share"] > 0.0 for c in doc["verification_cost"])


def test_token_level_command(capsys):
    assert main(["token-level", "--vocab", "500", "--drafts", "2", "--repeats", "10"]) == 0
    out = capsys.readouterr().out
    assert "V = 500" in out and "specinfer   2" in out and "spectr      2" in out
    assert "worst step ratio" in out and "goal <= 3x" in out


def test_optimal_command(capsys):
    argv = ["optimal", "--vocab", "600", "--repeats", "3", "--lp-vocabs", "4", "--lp-drafts", "2",
            "--full-vocabs", "300", "--full-drafts", "2", "--full-repeats", "5", "--real", "0"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for needed in ("V = 600, K = 2", "closed-form optimum", "IS step", "full optimal-transport LP",
                   "exactly optimal selection at any V", "goal: one step, set-up included"):
        assert needed in out, needed
    assert "first step on real distributions" not in out  # --real 0 skips it


def test_gpu_command_dry_run(capsys):
    assert main(["gpu", "--dry-run", "--drafts-k", "1", "2", "--max-new-tokens", "6", "--prompt-length", "4"]) == 0
    out = capsys.readouterr().out
    for needed in ("dry run", "where a round's time goes", "tokens per second", "projected speed-up", "K=2"):
        assert needed in out, needed
    assert "PASS" not in out and "FAIL" not in out  # goals are judged on a GPU only
    from mspec_lab.bench.speed_gpu import DRY_RUN_BANNER, DRY_RUN_LINE

    assert out.startswith(DRY_RUN_BANNER) and out.count(DRY_RUN_LINE) == out.count("\n== ") == 4  # under each table


def test_interrupted_sweep_resumes_without_recomputing(tmp_path, capsys):
    argv = ["experiments", *TINY, "--out", str(tmp_path)]
    assert main(argv + ["--max-rows", "7"]) == 3
    first = stored(tmp_path)
    assert len(first) == 7
    assert "rerun the same command to resume" in capsys.readouterr().out

    assert main(argv) == 0
    out = capsys.readouterr().out
    for name in SWEEP_FILES:
        keys = [row["key"] for row in csv_rows(tmp_path / name)]
        assert len(keys) == len(set(keys)), f"duplicate rows in {name}: a stored row was recomputed"
    final = stored(tmp_path)
    assert all(final[key] == row for key, row in first.items())  # rows of the first run are untouched

    # a third run computes nothing and prints the same tables
    assert main(argv) == 0
    assert stored(tmp_path) == final
    again = capsys.readouterr().out
    assert again.split("== Performance goals")[0] == out.split("== Performance goals")[0]
    assert "0 new rows" in again.split("== Performance goals")[1]

    # complete tables, next to the paper's numbers, with the pair named
    assert "Table 3: token-level acceptance, dolly" in out and "Table 3: token-level acceptance, wmt" in out
    for title in ("Table 1:", "Table 2:", "Table 4:", "Table 6:", "Figure 3:", "Figure 4:", "Where the time goes",
                  "Goal (a)", "Goal (b)", "Goal (c)"):
        assert title in out, title
    assert f"{paper.TABLE3_ACCEPTANCE['dolly']['optimal'][2]:.4f}" in out
    assert "tiny random OPT pair" in out and paper.PAIR in out
    assert "Absolute numbers differ" in out
    # --quick is a smoke test: said first, under every table, and in the files; one generation
    # per number (quick decoding) is printed as such, never as a bare number
    assert out.startswith(SMOKE_TEST_BANNER) and out.count(SMOKE_TEST_LINE) >= out.count("\n== ") - 3
    assert "1.00 (n = 1, no s.e.)" in out and "n = 1: no standard error" in out

    summary = json.loads((tmp_path / "acceptance.json").read_text())
    assert summary["smoke_test"] is True and summary["smoke_test_note"] == SMOKE_TEST_BANNER
    for k in (2, 4, 8):
        st = summary["stats"]["dolly"]
        assert st["optimal"][str(k)]["n"] == 4
        # the optimum bounds every scheme at every position, hence on average
        for scheme in ("is-ratio", "spectr", "specinfer"):
            assert st["optimal"][str(k)]["mean"] >= st[scheme][str(k)]["mean"] - 1e-12
    dec = json.loads((tmp_path / "decoding.json").read_text())
    assert dec["smoke_test"] is True and dec["settings"]["smoke_test"] is True
    assert set(dec["stats"]) == {"drafts", "temperature", "nonidentical", "topk", "truncation", "timing"}
    assert (tmp_path / "decoding.html").stat().st_size > 1000


def test_acceptance_command_rows_are_exact(tmp_path, tiny_pair):
    """Each stored acceptance equals the scheme's exact acceptance at that position."""
    from mspec_lab.experiments.inputs import derived_seed, load_dataset_prompts
    from mspec.registry import make_scheme

    argv = ["acceptance", *COMMON, *ACCEPTANCE, "--out", str(tmp_path), "--datasets", "dolly", "--acc-drafts", "2"]
    assert main(argv) == 0
    prompt = load_dataset_prompts(tiny_pair, "dolly", 1, max_chars=400)[0]
    draft, target, cont = acceptance.collect_distributions(tiny_pair, prompt.ids, positions=4, draft_temperature=1.5,
                                                           target_temperature=1.0, seed=derived_seed(0, prompt.tag))
    assert draft.shape == target.shape == (len(cont), tiny_pair.vocab_size)
    table = ResultTable(tmp_path / "acceptance.csv", config_fields=acceptance.ROW_FIELDS,
                        value_fields=["acceptance", "time_ms"])
    rows = table.select(scheme="spectr", num_drafts=2)
    assert len(rows) == len(cont)
    for row in rows:
        j = row["position"]
        want = make_scheme("spectr", draft=draft[j], target=target[j], num_drafts=2).acceptance()
        assert row["acceptance"] == pytest.approx(want, abs=1e-9)
    assert (tmp_path / "acceptance.html").is_file() and (tmp_path / "acceptance.json").is_file()


def test_decoding_command_one_experiment(tmp_path, capsys):
    argv = ["decoding", *COMMON, *DECODING, "--out", str(tmp_path), "--only", "drafts", "--drafts-k", "2", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Table 1: block efficiency vs K" in out and "Table 4" not in out
    rows = csv_rows(tmp_path / "decoding.csv")
    methods = sorted(json.loads(r["key"])["method"] for r in rows)
    assert methods == ["autoregressive", "is", "is", "is-ratio", "is-ratio", "optimal", "optimal", "single",
                       "specinfer", "specinfer", "spectr", "spectr"]
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


def test_rounds_command_without_variants(tmp_path, capsys):
    argv = ["rounds", *COMMON, "--out", str(tmp_path), "--gen-prompts", "1", "--max-new-tokens", "6",
            "--drafts-k", "2", "--draft-length", "2", "--variants"]
    assert main(argv) == 0
    methods = {json.loads(r["key"])["method"] for r in csv_rows(tmp_path / "rounds.csv")}
    assert methods == {"single", *paper.COMPARED_SCHEMES}
    assert "optimal-tokens" not in capsys.readouterr().out


def test_rounds_command_without_quick_is_no_smoke_test(tmp_path, capsys):
    argv = ["rounds", "--preset", "tiny", "--threads", "1", "--out", str(tmp_path), "--gen-prompts", "1",
            "--seeds", "1", "--max-new-tokens", "6", "--drafts-k", "2", "--draft-length", "2", "--variants"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "SMOKE TEST" not in out and "Paired block efficiency" in out
    doc = json.loads((tmp_path / "rounds.json").read_text())
    assert doc["smoke_test"] is False and "smoke_test_note" not in doc


def test_rounds_command(tmp_path, capsys):
    """Every scheme's expected tokens on the same reference rounds; a rerun recomputes nothing."""
    argv = ["rounds", *COMMON, "--out", str(tmp_path), "--gen-prompts", "1", "--max-new-tokens", "8",
            "--drafts-k", "2", "3", "--draft-length", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Paired block efficiency" in out and "too few samples to test" in out
    assert "significant" not in out.lower()  # one reference generation: nothing is tested
    rows = csv_rows(tmp_path / "rounds.csv")
    assert len(rows) == 1 + 2 * len(paired_schemes.ROUND_SCHEMES)  # 1 prompt x 1 seed
    assert main(argv) == 0
    assert csv_rows(tmp_path / "rounds.csv") == rows
    stats = json.loads((tmp_path / "rounds.json").read_text())["stats"]
    assert set(stats["optimal_minus"]) == {f"{s} K={k}" for s in paired_schemes.ROUND_SCHEMES if s != "optimal"
                                           for k in (2, 3)}


def test_options_left_out_keep_the_settings_defaults():
    """The command line and the settings classes agree: no option repeats a default."""
    from mspec_lab.commands import ACCEPTANCE_DESTS, DECODING_DESTS, PAPER_RUN_DESTS, ROUNDS_DESTS, _settings
    from mspec_lab.experiments.paper_run import PaperRunSettings

    class Args:  # what argparse gives when no option was passed
        quick = False

        def __getattr__(self, name):
            return None

    assert _settings(AcceptanceSettings, Args(), ACCEPTANCE_DESTS) == AcceptanceSettings()
    assert _settings(DecodingSettings, Args(), DECODING_DESTS) == DecodingSettings()
    assert _settings(RoundsSettings, Args(), ROUNDS_DESTS) == RoundsSettings()
    for cls, dests in ((AcceptanceSettings, ACCEPTANCE_DESTS), (DecodingSettings, DECODING_DESTS),
                       (RoundsSettings, ROUNDS_DESTS)):
        assert set(dests) == {f.name for f in dataclasses.fields(cls)}, cls  # every setting has an option
    # paper-run: the defaults are the committed run; its options change some of them
    assert _settings(PaperRunSettings, Args(), PAPER_RUN_DESTS) == PaperRunSettings()
    assert set(PAPER_RUN_DESTS) <= {f.name for f in dataclasses.fields(PaperRunSettings)}


# -- the plain functions (what the notebooks call) -------------------------------------------------
def test_acceptance_in_memory(tiny_pair, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    computed = []
    settings = AcceptanceSettings.quick(datasets="dolly", prompts=2, positions=3, drafts=(4, 2))
    assert settings.drafts == (2, 4) and settings.datasets == ("dolly",) and settings.max_chars == 400
    run = acceptance.run_acceptance(tiny_pair, settings, budget=RowBudget(on_row=computed.append))
    assert list(tmp_path.iterdir()) == []  # no files without `out`
    positions = sum(len(target) for _, target in run.distributions["dolly"])
    assert len(run.distributions["dolly"]) == 2 and positions >= 2
    assert len(run.rows["dolly"]) == positions * len(settings.jobs()) == len(computed) - 2  # + 2 prompt rows
    values = run.acceptances()
    assert set(values) == {("dolly", s, k) for s, k, _ in settings.jobs()}
    assert all(v.shape == (positions,) for v in values.values())
    for k in settings.drafts:
        assert np.all(values["dolly", "optimal", k] >= values["dolly", "is-ratio", k] - 1e-9)
    stats = acceptance.summarize_acceptance(run)
    assert stats["dolly"]["optimal"][2]["mean"] == pytest.approx(values["dolly", "optimal", 2].mean())
    assert [(d, k) for d, k, _, _ in acceptance.check_ordering(stats, settings.drafts)] == [("dolly", 2), ("dolly", 4)]
    with pytest.raises(StopSweep):
        acceptance.run_acceptance(tiny_pair, settings, budget=RowBudget(max_rows=3))
    with pytest.raises(ValueError, match="datasets"):
        AcceptanceSettings(datasets=("cnn",))


def test_decoding_and_rounds_in_memory(tiny_pair, capsys):
    from mspec_lab.experiments.live_decoding_report import check_goals, print_table1

    settings = DecodingSettings.quick(experiments="drafts", max_new_tokens=6, drafts_k=(2,))
    run = live_decoding.run_decoding(tiny_pair, settings)
    assert list(run.rows) == ["drafts"] and len(run.rows["drafts"]) == 2 + len(paper.COMPARED_SCHEMES)
    stats = live_decoding.summarize_decoding(run)
    assert stats["drafts"][live_decoding.AUTOREGRESSIVE]["block_efficiency"]["mean"] == 1.0
    print_table1(stats["drafts"], settings)
    assert "Table 1: block efficiency vs K, dolly" in capsys.readouterr().out
    assert {g["what"] for g in check_goals(stats, settings)["b"]} == {f"{s} K=2" for s in paper.COMPARED_SCHEMES}

    rounds_run = paired_schemes.run_rounds(tiny_pair, RoundsSettings.quick(prompts=1, max_new_tokens=6, drafts_k=(2,),
                                                                            draft_length=3))
    assert len(rounds_run.rows) == 1 + len(paired_schemes.ROUND_SCHEMES)
    by = {(r["method"], r["num_drafts"]): r["per_round"] for r in rounds_run.rows}
    assert len({len(v) for v in by.values()}) == 1  # the same rounds for every method
    assert all(1.0 <= x <= 4.0 for v in by.values() for x in v)
    assert all(np.shape(r["control"]) == (len(r["per_round"]), 3) for r in rounds_run.rows)  # L = 3 per round
    assert set(paired_schemes.summarize_rounds(rounds_run)["optimal_minus"]) == {
        f"{s} K=2" for s in paired_schemes.ROUND_SCHEMES if s != "optimal"}


def test_suite_in_memory(tiny_pair, capsys):
    from mspec_lab.experiments.suite import report_suite, run_suite

    run = run_suite(tiny_pair, AcceptanceSettings.quick(datasets="wmt", prompts=1, positions=2, drafts=(2,)), None)
    assert run.decoding is None and run.new_rows == 1 + len(run.acceptance.rows["wmt"])  # + the prompt's row
    goals = report_suite(run)
    out = capsys.readouterr().out
    assert "Table 3: token-level acceptance, wmt" in out and "(a) not checked in this run" in out
    assert [g["what"] for g in goals["c"]] == ["wmt K=2"] and "wrote" not in out  # no files without `out`


# -- missing packages ----------------------------------------------------------------------------
def run_blocked(blocked, argv):
    """``main(argv)`` in a fresh interpreter where the packages ``blocked`` cannot be imported."""
    code = textwrap.dedent(f"""
        import sys
        for name in {list(blocked)!r}:
            sys.modules[name] = None  # `import name` now raises ModuleNotFoundError
        from mspec_lab.cli import main
        sys.exit(main({list(argv)!r}))
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_a_missing_package_is_named_with_its_pip_command(tmp_path):
    result = run_blocked(["plotly"], ["acceptance", *COMMON, "--out", str(tmp_path)])
    assert result.returncode == 2, result.stderr
    assert "needs the package 'plotly', not installed (mspec's optional extra book)" in result.stderr
    assert 'pip install "plotly' in result.stderr
    assert not list(tmp_path.iterdir())  # stopped before computing anything

    result = run_blocked(["torch", "transformers"], ["gpu", "--dry-run"])
    assert result.returncode == 2
    assert "'torch', 'transformers'" in result.stderr and 'pip install "torch' in result.stderr

    # without torch every command is still listed, and the token-level benchmark runs
    result = run_blocked(["torch"], ["--help"])
    assert result.returncode == 0 and all(name in result.stdout for name in COMMANDS)
    result = run_blocked(["torch"], ["token-level", "--vocab", "100", "--drafts", "2", "--repeats", "10"])
    assert result.returncode == 0 and "worst step ratio" in result.stdout


def test_a_package_missing_midway_is_named_too(monkeypatch, capsys):
    """A command that reaches an import of a missing optional package only on some path."""
    from mspec_lab.commands import Command

    def run(args):
        raise ModuleNotFoundError("No module named 'sacrebleu'", name="sacrebleu")

    monkeypatch.setitem(COMMANDS, "needs-sacrebleu", Command("a test command", lambda parser: None, run))
    assert main(["needs-sacrebleu"]) == 2
    assert "'sacrebleu'" in capsys.readouterr().err


def test_optional_packages_follow_pyproject():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {extra: {spec.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip() for spec in specs}
             for extra, specs in extras.items()}
    assert {(dist, extra) for dist, extra in OPTIONAL_PACKAGES.values()} == {
        (dist, extra) for extra, dists in names.items() for dist in dists}
    for command in COMMANDS.values():
        assert set(command.packages) <= set(OPTIONAL_PACKAGES)
    assert missing_packages(["numpy", "no_such_package_here"]) == ["no_such_package_here"]
    assert "(mspec's optional extra data)" in missing_message("decoding", ["rouge_score"])


# -- pieces --------------------------------------------------------------------------------------
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
    memory = ResultTable(None, config_fields=["a"], value_fields=["v"])
    assert memory.compute({"a": 1}, lambda: {"v": 2.0})["v"] == 2.0 and len(memory) == 1


def test_mean_se():
    mean, se, n = mean_se([1.0, 2.0, 3.0, float("nan")])
    assert (mean, n) == (2.0, 3)
    assert se == pytest.approx(np.std([1, 2, 3], ddof=1) / np.sqrt(3))
    assert np.isnan(mean_se([5.0])[1])
    assert mean_se([])[2] == 0


def test_rounds_estimators():
    """Clustered standard errors reduce to the plain ones for one round per generation and grow
    when rounds of a generation move together; the control fit keeps the mean and removes the
    noise it explains."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=400)
    mean, se = paired_schemes.cluster_mean_se(x, np.arange(400))
    assert mean == pytest.approx(x.mean()) and se == pytest.approx(x.std(ddof=1) / 20)
    shared = np.repeat(rng.normal(size=40), 10)  # 40 generations of 10 rounds with a common shift
    clustered = paired_schemes.cluster_mean_se(shared + 0.1 * x, np.repeat(np.arange(40), 10))[1]
    assert clustered > 2 * (shared + 0.1 * x).std() / 20
    z = rng.normal(size=(400, 2))
    values = 3.0 + z @ np.array([1.0, -2.0]) + 0.1 * x
    adjusted = paired_schemes.control_adjusted(values, z)
    assert abs(adjusted.mean() - 3.0) < 0.05 and adjusted.std() < 0.2 < values.std()
    assert paired_schemes.control_adjusted(values, np.zeros((400, 2))) is values
    short = values[:19]  # too few rounds to fit 2 coefficients: unadjusted
    np.testing.assert_array_equal(paired_schemes.control_adjusted(short, z[:19]), short)
    assert not np.array_equal(paired_schemes.control_adjusted(values[:20], z[:20]), values[:20])


def test_paper_tables_shape():
    assert set(paper.TABLE1_BLOCK_EFFICIENCY) == {"is", "spectr", "specinfer"}
    assert set(paper.TABLE1_BLOCK_EFFICIENCY) < set(paper.COMPARED_SCHEMES)
    for dataset in ("xsum", "dolly"):
        for k in (2, 4, 8):  # the paper's ordering, which ours should reproduce
            t = paper.TABLE3_ACCEPTANCE[dataset]
            assert t["optimal"][k] >= t["is"][k] >= t["spectr"][k] >= t["specinfer"][k]
    for table in (paper.TABLE5_ROUGE_L, paper.TABLE6_BLEU):
        assert all(len(v) == len(paper.TEMPERATURES) for v in table.values())


def test_timer_and_synthetic_pairs():
    from mspec_lab.bench import lm_like_pair as reexported, median_time as reexported_timer
    from mspec_lab.bench.speed_optimal import TEMPERATURE_ONLY
    from mspec_lab.bench.timing import call_times, cycling, median_time
    from mspec.distributions import distribution_from_logits
    from mspec_lab.synthetic import OPT_VOCAB_SIZE, lm_like_pair

    assert reexported is lm_like_pair and reexported_timer is median_time  # chapter 6 imports them from bench
    calls = []
    times = call_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=4, chunk=2)
    assert [len(t) for t in times.values()] == [4, 4]
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 2  # one warm-up call each, then interleaved chunks
    assert median_time(lambda: None, repeats=5) >= 0.0
    step = cycling(lambda x: x, [1, 2, 3])
    assert [step() for _ in range(4)] == [1, 2, 3, 1]

    draft, target = lm_like_pair(1000, seed=3, draft_temperature=1.2)
    assert draft.shape == target.shape == (1000,) and draft.sum() == pytest.approx(1.0)
    assert np.array_equal(lm_like_pair(1000, seed=3, draft_temperature=1.2)[0], draft)  # a function of its arguments
    logits = 3.0 * np.random.default_rng(7).standard_normal(50)  # the pair the optimal benchmark's tables use
    draft, target = lm_like_pair(50, seed=7, **TEMPERATURE_ONLY)
    np.testing.assert_array_equal(target, distribution_from_logits(logits))
    np.testing.assert_array_equal(draft, distribution_from_logits(logits, temperature=1.5))
    assert OPT_VOCAB_SIZE == 50272


# -- the committed results of the reproducing-the-paper chapter ----------------------------------
PAPER_RUN_TINY = ["paper-run", "--preset", "tiny", "--quick", "--threads", "1"]


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory):
    """The results document of ``paper-run`` on the tiny pair, quick settings (seconds)."""
    folder = tmp_path_factory.mktemp("paper-run")
    assert main([*PAPER_RUN_TINY, "--out", str(folder / "out"), "--work", str(folder / "work")]) == 0
    return folder


def test_paper_run_command_writes_a_file_the_loader_reads(tiny_results, tiny_pair, capsys):
    from mspec_lab.experiments.paper_run import (REGIMES, SCHEMA, TABLES, PaperRunSettings, check_results,
                                             choose_temperature, load_results, print_summary, record, records)

    doc = load_results(tiny_results / "out")  # a folder or the file; raises when inconsistent
    assert doc == load_results(tiny_results / "out" / "paper_run.json")
    assert doc["schema"] == SCHEMA and check_results(doc) == []
    prov = doc["provenance"]
    assert prov["preset"] == "tiny" and "tiny random-weight OPT pair" in prov["model_pair"]
    assert prov["command"].startswith("python -m mspec_lab paper-run --preset tiny") and "--quick" in prov["command"]
    assert prov["mspec_version"] and len(prov["source_sha256"]) == 64 and prov["wall_time_s"] > 0
    assert prov["torch_threads"] == 1 and prov["date"] >= prov["started"]
    assert doc["settings"] == json.loads(json.dumps(dataclasses.asdict(PaperRunSettings.quick())))
    assert doc["smoke_test"] is True and doc["smoke_test_note"] == SMOKE_TEST_BANNER  # --quick
    assert all(doc[t] for t in TABLES)

    # the paper regime is the sweep's temperature closest to the paper's optimal acceptance
    sweep = {r["draft_temperature"]: r["mean"] for r in records(doc, "sweep", scheme="optimal")}
    assert set(sweep) == set(PaperRunSettings.QUICK["sweep_temperatures"])
    chosen = doc["regimes"]["paper"]["draft_temperature"]
    assert chosen == choose_temperature(sweep, paper.TABLE3_ACCEPTANCE["xsum"]["optimal"][2])
    assert record(doc, "table3", regime="paper", dataset="xsum", scheme="optimal", K=2)["mean"] == sweep[chosen]

    # every table is complete: each regime, dataset, scheme and K
    for regime in REGIMES:
        for dataset in DATASETS_ALL:
            assert len(records(doc, "table3", regime=regime, dataset=dataset)) == 1 + 3 * len(paper.COMPARED_SCHEMES)
            assert len(records(doc, "truncation", regime=regime, dataset=dataset)) == 2 * 6 + 2  # 2 IS x settings + 2
        assert {r["top_k"] for r in records(doc, "topk", regime=regime)} == {None, 5, 10}
        assert {(r["scheme"], r["K"]) for r in records(doc, "rounds", regime=regime)} == {
            ("single", 1), *((s, k) for s in paper.COMPARED_SCHEMES for k in (2, 4, 8))}
    with pytest.raises(KeyError):
        record(doc, "table3", scheme="optimal")  # several match
    print_summary(doc)  # what the command printed
    out = capsys.readouterr().out
    assert "Table 3, paper regime" in out and "Block efficiency, default regime" in out
    assert SMOKE_TEST_BANNER in out and out.count(SMOKE_TEST_LINE) == 4  # two tables in each regime
    assert "mean ± s.e. over n = 2 prompts" in out


DATASETS_ALL = ("xsum", "dolly", "wmt")


def test_paper_run_check_values_are_recomputable(tiny_results, tiny_pair):
    """The file's check values are what the code computes again (what the chapter shows)."""
    from mspec_lab.experiments.inputs import derived_seed, load_dataset_prompts
    from mspec_lab.experiments.paper_run import load_results

    doc = load_results(tiny_results / "out")
    check, s = doc["check"], doc["settings"]
    prompt = load_dataset_prompts(tiny_pair, check["dataset"], 1, max_chars=s["max_chars"])[0]
    assert prompt.tag == check["prompt"] == doc["prompts"][check["dataset"]][0]
    for entry in check["values"]:
        draft, target, _ = acceptance.collect_distributions(
            tiny_pair, prompt.ids, positions=check["positions"], draft_temperature=entry["draft_temperature"],
            target_temperature=s["target_temperature"], seed=derived_seed(s["seed"], prompt.tag))
        again = [acceptance.token_acceptance(entry["scheme"], draft=draft[j], target=target[j], num_drafts=entry["K"],
                                             params={"s": s["is_s"], "alphabet": s["is_alphabet"]}
                                             if entry["scheme"] == "is-ratio" else None)
                 for j in range(len(entry["acceptance"]))]
        np.testing.assert_allclose(again, entry["acceptance"], atol=1e-9)


def test_check_results_finds_what_is_wrong(tiny_results):
    """Each kind of inconsistency is reported (the check can fail)."""
    import copy

    from mspec_lab.experiments.paper_run import check_results, load_results, record

    good = load_results(tiny_results / "out")

    def broken(change):
        doc = copy.deepcopy(good)
        change(doc)
        return check_results(doc)

    def lower_optimal(doc):
        record(doc, "table3", regime="default", dataset="dolly", scheme="optimal", K=4)["mean"] -= 0.5

    def big_rounds_deficit(doc):
        r = record(doc, "rounds_differences", regime="default", b="spectr", K=2)
        r.update(mean=-1.0, se=0.01, generations=40)

    cases = {
        "schema": lambda doc: doc.update(schema="mspec-paper-run/0"),
        "provenance lacks 'model_pair'": lambda doc: doc["provenance"].pop("model_pair"),
        "wall_time_s": lambda doc: doc["provenance"].update(wall_time_s=0),
        "tables missing": lambda doc: doc.update(topk=[]),
        "negative s.e.": lambda doc: doc["table3"][0].update(se=-0.1),
        "above the optimum": lower_optimal,
        "outside [0, 1]": lambda doc: doc["sweep"][0].update(mean=1.5),
        "not the difference of the means": lambda doc: doc["table3_differences"][0].update(
            mean=doc["table3_differences"][0]["mean"] + 0.01),
        "by more than 3 s.e.": big_rounds_deficit,
        "not the sweep's choice": lambda doc: doc["regimes"]["paper"].update(draft_temperature=9.0),
        "tokens per round outside": lambda doc: doc["rounds"][0].update(mean=0.5),
    }
    for what, change in cases.items():
        problems = broken(change)
        assert any(what in p for p in problems), (what, problems)


#: the workshop's command line, now and under its earlier name (as committed result files record it)
COMMAND_NAMES = ("python -m mspec_lab", "python -m mspec.bench")


def test_committed_results_are_consistent():
    """The committed run: the documented command on the offline default, whole and consistent."""
    from mspec_lab.experiments.paper_run import PAPER_RUN_RESULTS, PaperRunSettings, default_results_path, load_results

    path = default_results_path()
    assert path == ROOT / PAPER_RUN_RESULTS and path.is_file(), "run: python -m mspec_lab paper-run (see README)"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT, check=False)
    assert ignored.returncode == 1, f"{PAPER_RUN_RESULTS} is gitignored: it must be committed"
    doc = load_results()  # raises on any inconsistency (check_results)
    prov = doc["provenance"]
    assert prov["preset"] == "smollm2" and "SmolLM2-135M" in prov["model_pair"]
    program, _, arguments = prov["command"].partition(" paper-run ")
    assert program in COMMAND_NAMES, program
    # where the file was first written (--out) does not change a number; every other option does
    arguments = re.sub(r"--out \S+ ", "", arguments)
    assert arguments == "--preset smollm2 --threads 1 --data-source local"
    assert prov["torch_threads"] == 1 and "data_source='local'" in prov["data"]
    assert 0 < prov["wall_time_s"] < 45 * 60  # the run is sized for 45 minutes on a 2-core machine
    settings = dataclasses.asdict(PaperRunSettings(data_source="local"))
    committed = {"smoke_test": False, **doc["settings"]}  # a file written before settings had the field
    assert committed == json.loads(json.dumps(settings)), "the committed file ran other settings"
    assert not doc.get("smoke_test"), "the committed file is a smoke test (--quick): rerun without it"
    generations = {r["regime"]: r["generations"] for r in doc["rounds"]}
    assert generations == {"default": settings["rounds_prompts"] * settings["rounds_seeds"],
                           "paper": settings["paper_rounds_prompts"] * settings["rounds_seeds"]}
    rows = sum(generations[r["regime"]] for r in doc["rounds"])  # one row per generation and method
    assert doc["rows"]["rounds_rows_computed"] == rows, "rows were read back from an older run"
    assert path.stat().st_size < 500_000
