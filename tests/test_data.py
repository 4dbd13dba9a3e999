"""Prompt loading: the shared data directory, the environment variable, the built-in set."""

import sys
import types
from pathlib import Path

import pytest

from mspec_lab.data import (
    BUILTIN,
    DATA_DIR_ENV,
    DATASETS,
    Example,
    hub_available,
    load_prompts,
    xsum_prompt,
)

#: ../shared/data relative to the repository root (read-only, never copied into the repo)
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SIZES = {"xsum": 1000, "dolly": 151, "wmt": 2998}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)


@pytest.mark.parametrize("dataset", DATASETS)
def test_reads_the_shared_data(dataset):
    examples = load_prompts(dataset, data_dir=SHARED)
    assert len(examples) == SIZES[dataset]
    assert all(isinstance(e, Example) and e.prompt and e.reference for e in examples)
    assert len({e.id for e in examples}) == len(examples)
    first = examples[0]
    if dataset == "xsum":
        assert first.prompt.startswith("Summarize: The owners said")
        assert first.prompt.endswith("\nSummary:") and first.id == "xsum-34268361"
        assert first.reference.startswith("Proposals for an indoor water park")
    elif dataset == "dolly":
        assert "### Instruction:\nWhy is Citizen Kane" in first.prompt
        assert first.prompt.endswith("### Response:")
        assert not any(e.reference.endswith("###eos_token###") for e in examples)
    else:
        assert first.prompt == (
            "Translate German to English: München 1856: Vier Karten, die Ihren Blick auf die Stadt "
            "verändern\nEnglish:"
        )
        assert first.reference == "Munich 1856: Four maps that will change your view of the city"


def test_env_var_names_the_directory(monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(SHARED))
    assert load_prompts("dolly", n=3) == load_prompts("dolly", n=3, data_dir=SHARED)
    assert load_prompts("dolly", n=3)[0].id == "dolly-0"


@pytest.mark.parametrize("dataset", DATASETS)
def test_builtin_fallback_without_directory(dataset):
    examples = load_prompts(dataset)
    assert len(examples) == len(BUILTIN[dataset]) >= 8
    assert all(e.id.startswith(f"builtin-{dataset}-") and e.prompt and e.reference for e in examples)
    assert load_prompts(dataset, source="builtin", n=2) == examples[:2]


def test_n_and_seed():
    assert [e.id for e in load_prompts("wmt", n=3, data_dir=SHARED)] == ["wmt-0", "wmt-1", "wmt-2"]
    a = load_prompts("xsum", n=5, seed=7, data_dir=SHARED)
    assert a == load_prompts("xsum", n=5, seed=7, data_dir=SHARED)
    assert len({e.id for e in a}) == 5
    assert a != load_prompts("xsum", n=5, seed=8, data_dir=SHARED)
    assert len(load_prompts("dolly", n=10_000, data_dir=SHARED)) == 151


def test_xsum_prompt_is_cut_at_a_word_boundary():
    prompt = xsum_prompt("alpha beta gamma delta", max_chars=12)
    assert prompt == "Summarize: alpha beta ...\nSummary:"
    long = load_prompts("xsum", n=20, data_dir=SHARED, max_chars=300)
    assert all(len(e.prompt) <= len("Summarize: ") + 300 + len(" ...\nSummary:") for e in long)


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="'xsum', 'dolly', 'wmt'"):
        load_prompts("cnn")
    with pytest.raises(ValueError, match="`source`"):
        load_prompts("xsum", source="web")
    with pytest.raises(ValueError, match="`n`"):
        load_prompts("xsum", n=0)
    with pytest.raises(ValueError, match="lacks wmt18-de-en.de"):
        load_prompts("wmt", data_dir=tmp_path)
    with pytest.raises(ValueError, match=DATA_DIR_ENV):
        load_prompts("wmt", source="local")


def test_hub_unavailable_when_offline():
    assert hub_available() is False


def test_hub_source_maps_rows(monkeypatch):
    """The hub path, with a stand-in for `datasets.load_dataset` (no network)."""
    calls = []
    rows = {
        "EdinburghNLP/xsum": [{"document": "A long story.", "summary": "Short.", "id": "42"}],
        "databricks/databricks-dolly-15k": [
            {"instruction": "Name a colour.", "context": "", "response": "Blue."},
            {"instruction": "Summarise it.", "context": "Some text.", "response": "Text."},
        ],
        "wmt/wmt18": [{"translation": {"de": "Guten Morgen.", "en": "Good morning."}}],
    }

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        return rows[name]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    (xsum,) = load_prompts("xsum", source="hub", n=1)
    assert xsum == Example("Summarize: A long story.\nSummary:", "Short.", "xsum-42")
    dolly = load_prompts("dolly", source="hub")
    assert dolly[0].prompt.endswith("### Instruction:\nName a colour.\n\n### Response:")
    assert "### Input:\nSome text.\n\n### Response:" in dolly[1].prompt and dolly[1].reference == "Text."
    (wmt,) = load_prompts("wmt", source="hub", split="validation")
    assert wmt.prompt == "Translate German to English: Guten Morgen.\nEnglish:"
    assert calls == [
        ("EdinburghNLP/xsum", None, "test[:1]"),
        ("databricks/databricks-dolly-15k", None, "train"),
        ("wmt/wmt18", "de-en", "validation"),
    ]
