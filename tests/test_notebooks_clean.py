"""Notebooks are committed without outputs: the book build executes them."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_no_outputs(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") for c in code), f"{path.name}: clear the outputs before committing"
    assert all(c.get("execution_count") is None for c in code), f"{path.name}: clear execution counts"
    # every chapter opens with an "Open in Colab" badge
    assert "colab.research.google.com" in "".join(nb["cells"][0]["source"]), f"{path.name}: Colab badge missing"
