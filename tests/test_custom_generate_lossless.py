"""``generate(custom_generate=mspec.multi_draft_sampling)`` is lossless: seeded chi-square tests.

The target law here is that of plain ``generate(do_sample=True)`` with a repetition penalty,
a temperature, top-k, top-p and an end-of-text id, on a tiny random OPT (V = 8) and a draft of
perturbed weights: sequences of up to 3 tokens, ending early at the end-of-text id.

* The exact law of such sequences is computed by the chain rule, with transformers' own
  processors built here by hand in generate's order; plain ``generate`` matches it, and plain
  ``generate`` *without* the repetition penalty does not (the test sees a missing processor).
* For each way through the callable (per-position verification with one draft or several,
  draft temperatures of their own, the static draft cache, and each round rule), its
  sequences match the exact law, and match plain ``generate``'s sample (a two-sample test);
  a broken scheme fails both.

The callable runs the decoder loop of :func:`mspec.lm.decoding.speculative_generate`, whose
sequence law is tested for every scheme of the registry and every round rule in
``tests/test_decoding_lossless.py``; this file tests what the callable adds (the logits
processors as the target law, generate's stopping and seeding), so it needs one scheme per
path, not every scheme again.
"""

import numpy as np
import pytest
import torch
from scipy import stats
from sampling import memoized
from test_decoding import perturbed, tiny_opt
from test_decoding_lossless import NoResidual, binned_chisquare
from transformers import (LogitsProcessorList, RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                          TopKLogitsWarper, TopPLogitsWarper)

from mspec.lm.custom_generate import multi_draft_sampling
from mspec import registry

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

torch.set_num_threads(1)

PROMPT = [2, 5]
VOCAB = 8
EOS = 1  # tiny_opt's eos_token_id
MAX_NEW = 3
NUM_RUNS = 1000  # per configuration of the callable: about 8 s on one core
NUM_PLAIN = 20000  # plain generate samples in batches: a second or two
ALPHA = 1e-3
#: generate's sampling options of every test here
OPTIONS = dict(repetition_penalty=1.3, temperature=0.8, top_k=5, top_p=0.9)


def processors(repetition_penalty, temperature, top_k, top_p) -> LogitsProcessorList:
    """transformers' processors for OPTIONS, in the order generate applies them."""
    return LogitsProcessorList([RepetitionPenaltyLogitsProcessor(repetition_penalty),
                                TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k),
                                TopPLogitsWarper(top_p)])


@pytest.fixture(scope="module")
def models():
    target = tiny_opt(0, vocab_size=VOCAB)
    assert target.generation_config.eos_token_id == EOS
    return perturbed(target), target


@pytest.fixture(autouse=True)
def memoized_schemes(monkeypatch):
    """Only speed: each scheme is built once per context (:func:`sampling.memoized`)."""
    monkeypatch.setattr(registry, "make_scheme", memoized(registry.make_scheme))


def exact_law(target, options: dict) -> dict[tuple, float]:
    """P(sequence) of every sequence of up to MAX_NEW tokens, ending early at EOS, by the chain rule."""
    warp, law = processors(**options), {}

    def walk(prefix: list[int], prob: float) -> None:
        if len(prefix) == MAX_NEW or (prefix and prefix[-1] == EOS):
            law[tuple(prefix)] = prob
            return
        ids = torch.tensor([PROMPT + prefix])
        with torch.no_grad():
            logits = target(input_ids=ids).logits[:, -1].double()
        q = torch.softmax(warp(ids, logits), dim=-1)[0].tolist()
        for y, qy in enumerate(q):
            if qy > 0:
                walk(prefix + [y], prob * qy)

    walk([], 1.0)
    return law


def counts_of(sequences, law: dict) -> np.ndarray:
    """Counts of the outputs over the sequences of ``law`` (an output outside it fails)."""
    index = {seq: i for i, seq in enumerate(law)}
    counts = np.zeros(len(law))
    for seq in sequences:
        assert tuple(seq) in index, f"{seq} has probability 0"
        counts[index[tuple(seq)]] += 1
    return counts


def cut(row: list[int]) -> list[int]:
    """A generated row without the prompt, ending at its first EOS (generate pads after it)."""
    out = row[len(PROMPT):]
    return out[: out.index(EOS) + 1] if EOS in out else out


@pytest.fixture(scope="module")
def plain(models):
    """NUM_PLAIN sequences of plain generate(do_sample=True) with OPTIONS."""
    return plain_sample(models[1], OPTIONS)


def plain_sample(target, options) -> list[list[int]]:
    torch.manual_seed(7)
    ids = torch.tensor([PROMPT] * NUM_PLAIN)
    rows = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=MAX_NEW,
                           pad_token_id=0, **options).tolist()
    return [cut(row) for row in rows]


def two_sample_pvalue(a: np.ndarray, b: np.ndarray, min_count: float = 10) -> float:
    """Chi-square test that two count vectors come from one law (rare cells pooled)."""
    big = (a + b) >= min_count
    table = np.array([list(a[big]) + [a[~big].sum()], list(b[big]) + [b[~big].sum()]])
    table = table[:, table.sum(axis=0) > 0]
    return stats.chi2_contingency(table)[1]


def callable_sample(models, seed=2024, **kwargs) -> list[list[int]]:
    draft, target = models
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.tensor([PROMPT])
    return [cut(target.generate(prompt, do_sample=True, max_new_tokens=MAX_NEW, custom_generate=multi_draft_sampling,
                                draft_model=draft, draft_length=2, generator=gen, **OPTIONS, **kwargs)[0].tolist())
            for _ in range(NUM_RUNS)]


def configurations():
    """One draft, several (SpecInfer, SpecTr, the optimal scheme), and every other round rule."""
    configs = [(name, dict(scheme=name, num_drafts=1 if name == "single" else 2))
               for name in ("single", "specinfer", "spectr", "optimal")]
    configs += [
        ("specinfer-K3-temperatures", dict(scheme="specinfer", num_drafts=3, draft_temperatures=[0.6, 1.0, 1.5])),
        ("spectr-static-cache", dict(scheme="spectr", num_drafts=2, draft_cache="static")),
        ("block", dict(verify="block", num_drafts=1)),
        ("traversal", dict(verify="traversal", num_drafts=3)),
        ("selected-block", dict(verify="selected-block", scheme="optimal", num_drafts=2)),
    ]
    return configs


def test_plain_generate_has_the_exact_law(models, plain):
    law = exact_law(models[1], OPTIONS)
    assert abs(sum(law.values()) - 1) < 1e-12
    counts = counts_of(plain, law)
    assert binned_chisquare(counts, NUM_PLAIN * np.array(list(law.values()))) > ALPHA


def test_a_missing_processor_is_seen(models):
    """Control: without its repetition penalty, generate's sequences do not have the exact law."""
    law = exact_law(models[1], OPTIONS)
    other = plain_sample(models[1], dict(OPTIONS, repetition_penalty=1.0))
    assert binned_chisquare(counts_of(other, law), NUM_PLAIN * np.array(list(law.values()))) < ALPHA


@pytest.mark.parametrize("name, kwargs", configurations(), ids=[c[0] for c in configurations()])
def test_sequences_follow_plain_generate(models, plain, name, kwargs):
    law = exact_law(models[1], OPTIONS)
    counts = counts_of(callable_sample(models, **kwargs), law)
    exact_p = binned_chisquare(counts, NUM_RUNS * np.array(list(law.values())))
    plain_p = two_sample_pvalue(counts, counts_of(plain, law))
    print(f"{name}: p = {exact_p:.3f} against the exact law, {plain_p:.3f} against plain generate")  # pytest -s
    assert exact_p > ALPHA and plain_p > ALPHA


def test_a_broken_scheme_fails(models, plain, monkeypatch):
    """The same tests reject SpecInfer that resamples from the target after a rejection."""
    monkeypatch.setitem(registry.SCHEMES, "no_residual", NoResidual)
    law = exact_law(models[1], OPTIONS)
    counts = counts_of(callable_sample(models, scheme="no_residual", num_drafts=2), law)
    exact_p = binned_chisquare(counts, NUM_RUNS * np.array(list(law.values())))
    plain_p = two_sample_pvalue(counts, counts_of(plain, law))
    print(f"no_residual (broken): p = {exact_p:.1e} against the exact law, {plain_p:.1e} against plain generate")
    assert exact_p < ALPHA and plain_p < ALPHA
