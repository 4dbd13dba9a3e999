"""``python -m mspec``: the demo table, and ``--help`` that only helps."""

import subprocess
import sys

import pytest

from mspec.__main__ import main


def test_the_demo_prints_every_scheme_and_says_what_acceptance_means(capsys):
    main([])
    out = capsys.readouterr().out
    assert "lower bound" in out and "'is'" in out and "lossless" in out
    assert all(name in out for name in ("specinfer", "spectr", "optimal", "is"))


def test_help_prints_usage_and_runs_nothing():
    done = subprocess.run([sys.executable, "-m", "mspec", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m mspec")
    assert "Acceptance of each scheme" not in done.stdout
    with pytest.raises(SystemExit):
        main(["--bogus"])
