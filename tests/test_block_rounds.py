"""Block against token-by-token verification on the same rounds (mspec.experiments.block_rounds)."""

import numpy as np
import pytest

from mspec.block_verification import expected_block_tokens
from mspec.experiments.block_rounds import BlockRoundsSettings, block_vs_token


def test_end_of_sequence_ends_the_count():
    draft, target = np.full((3, 4), 0.25), np.full((4, 4), 0.25)  # draft = target: every block kept
    assert expected_block_tokens([1, 2, 3], draft, target) == pytest.approx(4.0)
    assert expected_block_tokens([1, 2, 3], draft, target, eos_token_id=2) == pytest.approx(2.0)
    assert expected_block_tokens([1, 2, 3], draft, target, eos_token_id=[9, 3]) == pytest.approx(3.0)


def test_block_and_token_scored_on_the_same_rounds():
    # Per drafted block, block verification can expect fewer tokens than token by token;
    # over the drafts it expects at least as many (Sun et al.). Seeded: the paired mean
    # difference is not significantly negative.
    from mspec.models import load_pair

    pair = load_pair("tiny")
    settings = BlockRoundsSettings(datasets=("dolly",), prompts=2, max_new_tokens=12, draft_length=3)
    stats = block_vs_token(pair, settings)["dolly"]
    assert stats["rounds"] > 0
    mean, se = stats["difference"]
    assert se >= 0.0 and mean > -4.0 * se - 1e-12
    for name in ("token", "block"):
        assert 1.0 <= stats[name][0] <= settings.draft_length + 1.0
