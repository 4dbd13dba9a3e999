"""Metrics on strings whose scores are known by hand."""

import math

import pytest

from mspec_lab.metrics import block_efficiency, bleu, rouge_l, score


def test_rouge_l_known_values():
    assert rouge_l(["the cat sat on the mat"], ["the cat sat on the mat"]) == pytest.approx(1.0)
    assert rouge_l(["dogs bark"], ["the cat sat"]) == 0.0
    # LCS "the cat on the mat" = 5 of 6 words each side: P = R = F = 5/6
    assert rouge_l(["the cat sat on the mat"], ["the cat is on the mat"]) == pytest.approx(5 / 6)
    # mean over pairs
    assert rouge_l(["a b", "x"], ["a b", "y"]) == pytest.approx(0.5)


def test_bleu_known_values():
    assert bleu(["the cat sat on the mat"], ["the cat sat on the mat"]) == pytest.approx(100.0)
    # n-gram precisions 5/6, 3/5, 2/4, 1/3, equal lengths (no brevity penalty)
    expected = 100 * math.exp((math.log(5 / 6) + math.log(3 / 5) + math.log(1 / 2) + math.log(1 / 3)) / 4)
    assert bleu(["the cat sat on the mat"], ["the cat sat on a mat"]) == pytest.approx(expected, abs=1e-6)


def test_score_picks_the_papers_metric():
    assert score("xsum", ["a b"], ["a b"]) == ("rouge-l", pytest.approx(1.0))
    assert score("wmt", ["a b c d"], ["a b c d"]) == ("bleu", pytest.approx(100.0))
    with pytest.raises(ValueError, match="`dataset`"):
        score("cnn", ["a"], ["a"])


def test_block_efficiency():
    assert block_efficiency([1, 3, 2]) == 2.0
    assert block_efficiency([1] * 5) == 1.0
    for bad in ([], [0, 2], [1.5], [[1, 2]]):
        with pytest.raises(ValueError, match="tokens_per_call"):
            block_efficiency(bad)


def test_text_checks():
    with pytest.raises(ValueError, match="equal length"):
        rouge_l(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="not one string"):
        bleu("a b", "a b")
    with pytest.raises(ValueError, match="only strings"):
        bleu([1], ["a"])
