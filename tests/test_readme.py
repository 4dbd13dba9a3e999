"""The README's Python examples run as printed, on the offline SmolLM2 pair."""

import re
from pathlib import Path

import pytest
import torch

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

README = Path(__file__).resolve().parents[1] / "README.md"


def examples(section: str) -> list[str]:
    """The ```python blocks of the README section titled ``section`` (up to the next ``## ``)."""
    text = README.read_text()
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start : end if end > 0 else None], re.S)


@pytest.mark.filterwarnings("ignore:draft_model is target_model")
def test_the_package_examples_run(capsys):
    token_level, sequence_level = examples("Use the package")
    exec(token_level, {})
    namespace = {}
    exec(sequence_level, namespace)
    out = namespace["out"]
    assert 1 <= len(out.token_ids) <= 32 and out.block_efficiency >= 1
    assert "The capital of France is" in capsys.readouterr().out  # the streamer printed the text


def test_the_transformers_example_runs(monkeypatch, capsys):
    example, folder_example = examples("Use it from transformers")
    namespace = {}
    exec(example, namespace)
    out, inputs = namespace["out"], namespace["inputs"]
    prompt = inputs["input_ids"].shape[1]
    assert torch.equal(out.sequences[:, :prompt], inputs["input_ids"])
    assert out.speculation.token_ids == out.sequences[0, prompt:].tolist()
    assert out.speculation.block_efficiency >= 1
    monkeypatch.chdir(README.parent)  # the Hub-style folder, from the repository's root
    capsys.readouterr()
    exec(folder_example, namespace)
    out = namespace["out"]
    assert torch.equal(out[:, :prompt], inputs["input_ids"]) and out.shape[1] > prompt
    assert "The capital of France is" in capsys.readouterr().out  # the streamer printed the text
