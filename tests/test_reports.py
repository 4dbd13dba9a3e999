"""How the experiments report their numbers (:mod:`mspec_lab.experiments.report` and the
reports built on it), on small crafted inputs, no model runs:

* quick settings are a smoke test: the report says so first, under each table and in the
  results file it writes; the full settings say nothing of the kind;
* a number computed from samples is printed as mean ± s.e., and one that rests on a single
  sample says ``n = 1, no s.e.`` instead of standing bare;
* "significantly" is printed only where a two-sided paired t-test rejects at its level,
  from enough pairs on; with fewer the report says the comparison is too few to test.
"""

import json
import math

import numpy as np
import pytest
from scipy import stats

from mspec_lab.experiments import paired_schemes
from mspec_lab.experiments.paired_schemes import (MIN_PAIRS, RoundsRun, RoundsSettings, behind_lines,
                                                  cluster_mean_se, paired_t_test, report_rounds)
from mspec_lab.experiments.report import (SMOKE_TEST_BANNER, SMOKE_TEST_LINE, fmt, format_table, print_block,
                                          sample_note, smoke_test_fields)
from mspec_lab.experiments.results import ratio_se

L = 5  # draft length of the crafted rounds (one control variate per position)


# -- mean ± s.e. ------------------------------------------------------------------------------------
def test_fmt_prints_the_standard_error_and_says_when_there_is_none():
    assert fmt(2.134, 0.051, n=8) == "2.13±0.05"
    assert fmt(2.134, float("nan"), n=1) == "2.13 (n = 1, no s.e.)"  # never a bare number from one sample
    assert fmt(2.134, None, 3, n=1) == "2.134 (n = 1, no s.e.)"
    assert fmt(-4.04, float("nan"), 1, n=1, unit="%") == "-4.0% (n = 1, no s.e.)"
    assert fmt(12.04, 3.06, 1, n=9, unit="%") == "12.0±3.1%"
    assert fmt(float("nan"), 0.1, n=3) == fmt(None) == "-"
    assert fmt(2.13) == "2.13" and fmt((2.13, 0.05)) == "2.13±0.05"  # the paper's numbers: no n


def test_a_table_of_one_sample_numbers_says_so_in_every_cell_and_under_it(capsys):
    cells = [fmt(v, float("nan"), n=1) for v in (1.33, 2.0)]
    print_block("Table 1", format_table(["method", "K=2", "K=4"], [["optimal", *cells]]),
                [sample_note([1, 1], "generations")])
    out = capsys.readouterr().out
    assert out.count("(n = 1, no s.e.)") == 2 and "1.33 " in out
    assert "n = 1 generation per number; n = 1: no standard error" in out
    assert sample_note([4, 2, 4], "generations", over="(prompt x seed)") == (
        "mean ± s.e. over n = 2 to 4 generations (prompt x seed) per number")
    assert sample_note([], "generations") == ""


def test_ratio_se_is_the_ratio_of_sums_with_a_linearised_standard_error():
    rng = np.random.default_rng(3)
    b = rng.uniform(1.0, 3.0, size=400)
    a = 0.8 * b + 0.05 * rng.standard_normal(400)
    ratio, se, n = ratio_se(a, b)
    assert ratio == pytest.approx(a.sum() / b.sum()) and n == 400
    assert abs(ratio - 0.8) < 4 * se and 0 < se < 0.01
    assert math.isnan(ratio_se([2.0], [1.0])[1]) and ratio_se([2.0], [1.0])[::2] == (2.0, 1)
    with pytest.raises(ValueError, match="numerators"):
        ratio_se([1.0, 2.0], [1.0])


# -- the paired test ----------------------------------------------------------------------------------
def differences(mean: float, pairs: int, rng) -> tuple[float, float]:
    """Mean and s.e. of ``pairs`` crafted paired differences (one per pair) around ``mean``."""
    d = mean + 0.05 * rng.standard_normal(pairs)
    d += mean - d.mean()  # exactly this mean difference
    return cluster_mean_se(d, np.arange(pairs))


def test_a_clear_difference_over_many_pairs_is_significant():
    rng = np.random.default_rng(0)
    d = -0.1 + 0.05 * rng.standard_normal(40)
    mean, se = cluster_mean_se(d, np.arange(40))
    test = paired_t_test(mean, se, 40)
    assert test.tested and test.significant and test.p_value < 0.05
    assert test.p_value == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)  # the textbook paired t-test
    assert test.describe().startswith("behind (p = ")
    assert paired_t_test(-mean, se, 40).describe().startswith("ahead (p = ")


def test_the_same_difference_over_two_pairs_is_not_tested():
    mean, se = differences(-0.1, 40, np.random.default_rng(0))
    test = paired_t_test(mean, se, 2)
    assert not test.tested and not test.significant and math.isnan(test.p_value)
    assert test.describe() == f"untested (n = 2 < {MIN_PAIRS})"
    assert not paired_t_test(mean, float("nan"), 40).tested  # no s.e.: nothing to test with


def test_no_difference_is_level_and_the_level_is_a_parameter():
    mean, se = differences(0.001, 40, np.random.default_rng(1))
    test = paired_t_test(mean, se, 40)
    assert test.tested and not test.significant and test.describe().startswith("level (p = ")
    loose = paired_t_test(mean, se, 40, level=0.999)
    assert loose.significant and loose.p_value == test.p_value
    with pytest.raises(ValueError, match="level"):
        paired_t_test(mean, se, 40, level=0.0)
    with pytest.raises(ValueError, match="min_pairs"):
        paired_t_test(mean, se, 40, min_pairs=1)


def test_significantly_is_printed_only_when_the_test_rejects():
    rng = np.random.default_rng(2)
    clear = paired_t_test(*differences(-0.1, 40, rng), 40)
    few = paired_t_test(*differences(-0.1, 40, rng), 2)
    null = paired_t_test(*differences(0.001, 40, rng), 40)
    lines = behind_lines({"spectr K=2": clear, "is K=2": null})
    assert lines[0].startswith("optimal significantly behind (two-sided paired t-test")
    assert "level 0.05" in lines[0] and "spectr K=2 (p = " in lines[0] and "is K=2" not in lines[0]
    for tests in ({"spectr K=2": few}, {"is K=2": null}, {"spectr K=2": few, "is K=2": null}):
        text = "\n".join(behind_lines(tests))
        assert "significant" not in text.lower(), text
    assert "too few samples to test 1 of 1 comparisons" in behind_lines({"spectr K=2": few})[0]
    assert behind_lines({"is K=2": null})[0].startswith("optimal behind: nowhere in the 1 tested comparisons")


# -- the rounds report on crafted rows ----------------------------------------------------------------
def crafted_run(settings: RoundsSettings, generations: int, gap: float, rng) -> RoundsRun:
    """Rows of ``generations`` reference generations of 6 rounds each: every scheme's expected
    tokens per round, optimal ``gap`` above the others (the same noise for all, as on shared
    rounds), controls zero."""
    rows = []
    for g in range(generations):
        shared = 2.0 + 0.3 * rng.standard_normal(6)
        for method, k in paired_schemes.scheme_methods(settings.drafts_k, settings.variants):
            own = shared + (gap if method == "optimal" else 0.0) + 0.02 * rng.standard_normal(6)
            rows.append({"method": method, "num_drafts": k, "prompt": f"p{g}", "seed": 0,
                         "per_round": own.tolist(), "control": np.zeros((6, L)).tolist()})
    return RoundsRun(settings, "tiny", "a crafted pair", "crafted", rows)


@pytest.mark.parametrize("quick", [True, False])
def test_rounds_report_says_smoke_test_only_in_quick_mode(quick, tmp_path, capsys):
    make = RoundsSettings.quick if quick else RoundsSettings
    settings = make(drafts_k=(2,), variants=(), draft_length=L)
    assert settings.smoke_test is quick
    report_rounds(crafted_run(settings, 2, 0.0, np.random.default_rng(4)), tmp_path)
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "rounds.json").read_text())
    assert doc["smoke_test"] is quick and doc["settings"]["smoke_test"] is quick
    if quick:
        assert out.lstrip("\n").startswith(SMOKE_TEST_BANNER) and SMOKE_TEST_LINE in out
        assert doc["smoke_test_note"] == SMOKE_TEST_BANNER
    else:
        assert "SMOKE TEST" not in out and "smoke_test_note" not in doc
    assert "±" in out and "mean ± s.e. over n = 2 reference generations" in out


def test_rounds_report_says_significantly_only_from_enough_generations(capsys):
    settings = RoundsSettings(drafts_k=(2,), variants=(), draft_length=L)
    report_rounds(crafted_run(settings, 12, -0.1, np.random.default_rng(5)))
    out = capsys.readouterr().out
    assert "optimal significantly behind (two-sided paired t-test" in out and "spectr K=2 (p = " in out
    assert "behind (p = " in out  # the table's verdict column

    report_rounds(crafted_run(settings, 2, -0.1, np.random.default_rng(5)))
    out = capsys.readouterr().out
    assert "significant" not in out.lower()
    assert "too few samples to test" in out and f"untested (n = 2 < {MIN_PAIRS})" in out

    report_rounds(crafted_run(settings, 1, -0.1, np.random.default_rng(5)))
    assert "(n = 1, no s.e.)" in capsys.readouterr().out


def test_results_files_carry_the_smoke_test_field():
    assert smoke_test_fields(True) == {"smoke_test": True, "smoke_test_note": SMOKE_TEST_BANNER}
    assert smoke_test_fields(False) == {"smoke_test": False}
    assert "not results" in SMOKE_TEST_BANNER and "not results" in SMOKE_TEST_LINE


def test_round_rules_tables_say_smoke_test_and_test_their_verdicts(capsys):
    from mspec_lab.experiments.round_rules import print_round_rules

    record = {"dataset": "dolly", "K": 2, "method": "traversal", "rounds": 30, "generations": 2,
              "tokens_per_round": 2.1, "se": 0.1, "minus_baseline": -0.3, "minus_baseline_se": 0.01,
              "relative_gain": -0.12, "relative_gain_se": 0.004}
    doc = {"smoke_test": True, "provenance": {"label": "crafted"}, "settings": {"prompts": 1, "seeds": 2},
           "tokens_per_round": [record], "verification_cost": []}
    print_round_rules(doc)
    out = capsys.readouterr().out
    assert out.count(SMOKE_TEST_LINE) == 2 and SMOKE_TEST_BANNER in out
    assert f"untested (n = 2 < {MIN_PAIRS})" in out and "-12.0±0.4%" in out
    print_round_rules({**doc, "smoke_test": False, "tokens_per_round": [{**record, "generations": 20}]})
    out = capsys.readouterr().out
    assert "SMOKE TEST" not in out and "behind (p = " in out
