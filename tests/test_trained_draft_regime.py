"""The trained draft as chapter 9's second regime (:mod:`mspec_lab.trained_draft.regime`):
its values recomputed on the tiny pair, its checks catching a broken document, and the committed
file on the paper run's very prompts and settings."""

import copy

import numpy as np
import pytest

from mspec_lab.experiments.acceptance import token_acceptance
from mspec_lab.experiments.inputs import load_dataset_prompts
from mspec_lab.experiments.paper_run import PaperRunSettings, distributions_from_logits, prompt_logits, load_results
from mspec_lab.models import load_pair
from mspec_lab.trained_draft import regime as tr

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

QUICK = PaperRunSettings.quick(data_source="builtin", datasets=("xsum", "dolly"), prompts=2, positions=4)


@pytest.fixture(scope="module")
def tiny_doc():
    pair = load_pair("tiny", device="cpu")
    return pair, tr.run_trained_draft_regime(pair, QUICK)


def test_values_are_the_exact_acceptances_of_the_pairs_positions(tiny_doc):
    pair, doc = tiny_doc
    prompt = load_dataset_prompts(pair, "xsum", 1, source="builtin", max_chars=QUICK.max_chars)[0]
    draft_logits, target_logits, _ = prompt_logits(pair, prompt, QUICK)
    top5 = {"top-5": 5, "full": None}
    assert doc["check"]["prompt"] == prompt.tag == doc["prompts"]["xsum"][0]
    assert {e["sampling"] for e in doc["check"]["values"]} == set(top5)
    for entry in doc["check"]["values"]:
        k = top5[entry["sampling"]]
        draft = distributions_from_logits(draft_logits, tr.DRAFT_TEMPERATURE, k)
        target = distributions_from_logits(target_logits, 1.0, k)
        params = None
        if entry["scheme"] == "is":  # the whole ranking: alphabet V
            alphabet = target.shape[-1] if entry["alphabet"] == tr.WHOLE_RANKING else entry["alphabet"]
            params = {"s": tr.IS_S, "alphabet": alphabet}
        expected = [token_acceptance(entry["scheme"], draft=d, target=t, num_drafts=entry["K"], params=params)
                    for d, t in zip(draft, target)][:QUICK.check_positions]
        assert entry["acceptance"] == pytest.approx(expected, abs=1e-12)
    assert not tr.check_trained_draft_regime(doc)
    jobs = [("single", None, 1)] + [(s, a, k) for k in tr.REGIME_DRAFTS for s, a in tr.REGIME_SCHEMES]
    assert {(r["sampling"], r["dataset"], r["scheme"], r["alphabet"], r["K"]) for r in doc["table3"]} == {
        (label, d, *job) for label, _, _ in tr.SAMPLINGS for d in QUICK.datasets for job in jobs}


def test_top_k_restricts_both_models_and_top_p_keeps_the_nucleus(tiny_doc):
    _, doc = tiny_doc
    assert doc["samplings"] == [list(x) for x in tr.SAMPLINGS]
    import torch

    logits = torch.from_numpy(np.random.default_rng(0).standard_normal((3, 50)) * 2).float()
    full = tr._distributions(logits, 1.0, None, None)
    for label, top_k, top_p in tr.SAMPLINGS:
        cut = tr._distributions(logits, 1.0, top_k, top_p)
        kept = cut > 0
        assert np.allclose(cut.sum(axis=1), 1.0)
        if top_k is not None:
            assert (kept.sum(axis=1) == top_k).all()
        if top_p is not None:  # the smallest set of most likely tokens reaching top_p
            mass = np.where(kept, full, 0).sum(axis=1)
            assert (mass >= top_p - 1e-12).all()
            assert ((mass - np.where(kept, full, np.inf).min(axis=1)) < top_p).all()
        if top_k is None and top_p is None:
            assert np.allclose(cut, full)


def test_the_optimum_bounds_every_scheme_and_gains_are_paired_differences(tiny_doc):
    _, doc = tiny_doc
    means = {(r["sampling"], r["dataset"], r["scheme"], r["alphabet"], r["K"]): r["mean"] for r in doc["table3"]}
    for (sampling, dataset, scheme, alphabet, k), mean in means.items():
        if k > 1:
            assert mean <= means[sampling, dataset, "optimal", None, k] + 1e-9
    for g in doc["gains"]:
        at = [means[g["sampling"], g["dataset"], g["scheme"], g["alphabet"], k] for k in (8, 2)]
        assert g["mean"] == pytest.approx(at[0] - at[1])
    for d in doc["differences"]:
        key = (d["sampling"], d["dataset"])
        assert d["mean"] == pytest.approx(means[(*key, d["a"], d["a_alphabet"], d["K"])]
                                          - means[(*key, d["b"], d["b_alphabet"], d["K"])])


def _spectr_above_optimum(doc):
    next(r for r in doc["table3"] if r["scheme"] == "spectr" and r["K"] == 2)["mean"] = 2.0


def _gain_off(doc):
    doc["gains"][0]["mean"] += 0.1


def _difference_off(doc):
    doc["differences"][0]["mean"] += 0.1


def _negative_se(doc):
    doc["table3"][0]["se"] = -1.0


@pytest.mark.parametrize("damage, message", [(_spectr_above_optimum, "above the optimum"),
                                             (_gain_off, "not the difference"), (_negative_se, "s.e."),
                                             (_difference_off, "differences:")])
def test_the_check_catches_a_broken_document(tiny_doc, damage, message):
    broken = copy.deepcopy(tiny_doc[1])
    damage(broken)
    assert any(message in p for p in tr.check_trained_draft_regime(broken))


def test_the_committed_file_scores_the_paper_runs_positions():
    doc, paper_run = tr.load_trained_draft_regime(), load_results()
    assert not doc["settings"]["smoke_test"] and doc["provenance"]["preset"] == "smollm2-distilled"
    assert doc["provenance"]["label"] == "SmolLM2-135M, trained small draft"
    assert doc["prompts"] == paper_run["prompts"]  # the same prompts, so the same continuations and q
    for name in ("prompts", "positions", "seed", "max_chars", "data_source", "target_temperature"):
        assert doc["settings"][name] == paper_run["settings"][name], name
    assert set(paper_run["settings"]["drafts"]) <= set(doc["settings"]["drafts"])  # Table 3's K and more
    assert doc["draft_temperature"] == doc["settings"]["target_temperature"] == 1.0
    n = {r["n"] for r in doc["table3"] if r["dataset"] == "xsum"}
    assert n == {r["n"] for r in paper_run["table3"] if r["dataset"] == "xsum"}  # as many positions
    assert np.isfinite([r["mean"] for r in doc["table3"]]).all()


def test_a_missing_file_says_how_to_write_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="trained-draft-regime --out"):
        tr.load_trained_draft_regime(tmp_path / "none.json")


@pytest.mark.slow
def test_the_command_writes_a_smoke_test_file(tmp_path, capsys):
    from mspec_lab.cli import main

    out = tmp_path / "trained_regime.json"
    argv = ["trained-draft-regime", "--quick", "--data-source", "builtin", "--datasets", "xsum", "--prompts", "1",
            "--positions", "3", "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    doc = tr.load_trained_draft_regime(out)
    assert doc["settings"]["smoke_test"] and doc["provenance"]["preset"] == "smollm2-distilled"
    assert doc["provenance"]["label"] == "SmolLM2-135M, trained small draft"
    assert doc["provenance"]["command"] == "python -m mspec_lab trained-draft-regime " + " ".join(argv[1:])
    printed = capsys.readouterr().out
    assert "SMOKE TEST" in printed and "gain K=2->8" in printed and "top-p 0.95" in printed


@pytest.mark.slow
def test_the_device_script_runs_dry_on_the_cpu(tmp_path):
    """tools/device_check.sh --dry-run: the GPU benchmark and the OPT regime's command, on tiny
    models (the script's GPU run cannot be tested without a GPU)."""
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(["bash", str(root / "tools" / "device_check.sh"), "--dry-run"], cwd=root,
                          env={**os.environ, "OUT": str(tmp_path)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "dry run" in (tmp_path / "gpu.txt").read_text()
    doc = tr.load_trained_draft_regime(tmp_path / "opt_regime.json")
    assert doc["settings"]["smoke_test"] and {s for s, _, _ in doc["samplings"]} == {s for s, _, _ in tr.SAMPLINGS}
