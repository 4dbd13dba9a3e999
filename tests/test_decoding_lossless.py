"""Speculative decoding is lossless at the sequence level: a seeded chi-square test.

For each scheme in the registry, generate 3 tokens from a fixed prompt many times with a
tiny random OPT target and a different (perturbed) draft model, and compare the counts of
the V^3 = 512 possible sequences with their exact probabilities under the target,
computed from the target model's conditionals. A deliberately broken scheme must fail the
same test, which shows the test has power.
"""

import numpy as np
import pytest
import torch
from scipy import stats
from sampling import memoized
from test_decoding import perturbed, tiny_opt

from mspec import registry
from mspec.lm.decoding import speculative_generate
from mspec.distributions import distribution_from_logits
from mspec.schemes.selection import Selection, SelectionScheme, sample_index

# runs language models or float32 torch kernels: CI runs it on two kernel paths (.ci/run)
pytestmark = pytest.mark.model

torch.set_num_threads(1)

PROMPT = [2]
VOCAB = 8
NUM_RUNS = 1000  # per configuration: about 4 s on one core
ALPHA = 1e-3


@pytest.fixture(scope="module")
def models():
    target = tiny_opt(0, vocab_size=VOCAB)
    return perturbed(target), target


@pytest.fixture(autouse=True)
def memoized_schemes(monkeypatch):
    """Build each scheme once per (draft, target, K, params) (:func:`sampling.memoized`): the LP
    schemes take ~10 ms per build and the runs revisit the same 73 contexts. Only speed."""
    make_scheme = memoized(registry.make_scheme)
    monkeypatch.setattr(registry, "make_scheme", make_scheme)


def exact_sequence_probs(target_model, *, temperature=1.0, top_k=None, top_p=None) -> np.ndarray:
    """P(y1, y2, y3 | prompt) under the target, shape ``(V, V, V)``, by the chain rule."""
    v = VOCAB
    contexts = torch.tensor([PROMPT + [a, b] for a in range(v) for b in range(v)])  # row a * V + b
    with torch.no_grad():
        logits = target_model(input_ids=contexts).logits.double()[:, len(PROMPT) - 1 :, :]
    q = distribution_from_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p).numpy()
    q1 = q[0, 0]  # (V,): every row starts with the prompt
    q2 = q[::v, 1]  # (V, V): rows b = 0 hold q(. | prompt, a)
    q3 = q[:, 2].reshape(v, v, v)  # q(. | prompt, a, b)
    return q1[:, None, None] * q2[:, :, None] * q3


def sequence_pvalue(draft_model, target_model, scheme, **kwargs) -> float:
    """Chi-square p-value of NUM_RUNS generated 3-token sequences against the exact law."""
    sampling = {k: kwargs[k] for k in ("top_k", "top_p") if k in kwargs}
    probs = exact_sequence_probs(target_model, temperature=kwargs.get("target_temperature", 1.0), **sampling)
    gen = torch.Generator().manual_seed(2024)
    counts = np.zeros(VOCAB**3)
    for _ in range(NUM_RUNS):
        ids = speculative_generate(PROMPT, draft_model=draft_model, target_model=target_model, scheme=scheme,
                                   draft_length=2, max_new_tokens=3, eos_token_id=False, generator=gen,
                                   **kwargs).token_ids
        counts[(ids[0] * VOCAB + ids[1]) * VOCAB + ids[2]] += 1
    return binned_chisquare(counts, NUM_RUNS * probs.ravel())


def binned_chisquare(observed: np.ndarray, expected: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-square p-value, with the cells expected fewer than ``min_expected`` times pooled."""
    assert observed[expected == 0].sum() == 0, "a sequence of probability 0 was generated"
    big = expected >= min_expected
    obs = list(observed[big]) + [observed[~big].sum()]
    exp = list(expected[big]) + [expected[~big].sum()]
    if exp[-1] < min_expected:  # pool the small rest into the smallest big cell
        i = int(np.argmin(exp[:-1]))
        obs[i] += obs.pop()
        exp[i] += exp.pop()
    return stats.chisquare(obs, exp).pvalue


def configurations():
    """(scheme, kwargs) for every scheme in the registry, plus a few settings."""
    configs = []
    for name, cls in registry.SCHEMES.items():
        if name == "single":
            configs.append((name, dict(num_drafts=1)))
            continue
        configs.append((name, dict(num_drafts=2)))
        if name in ("specinfer", "spectr"):
            configs.append((name, dict(num_drafts=3)))
        if cls.supports_non_identical:
            configs.append((name, dict(num_drafts=2, draft_temperatures=[1.2, 1.6])))
    configs.append(("specinfer", dict(num_drafts=2, target_temperature=0.8, top_k=5, top_p=0.9)))
    if "is-ratio" in registry.SCHEMES:  # truncated LP and alphabet, three drafts: scheme_params reach the scheme
        configs.append(("is-ratio", dict(num_drafts=3, scheme_params=dict(s=2, alphabet=4))))
    # block verification (one draft, the block verified jointly), also with top-k / top-p
    configs.append((None, dict(num_drafts=1, verify="block")))
    configs.append((None, dict(num_drafts=1, verify="block", target_temperature=0.8, top_k=5, top_p=0.9)))
    # traversal verification (the tree of K drafts) and selected-block verification
    configs.append((None, dict(num_drafts=3, verify="traversal")))
    configs.append((None, dict(num_drafts=2, verify="traversal", draft_temperatures=[1.2, 1.6])))
    configs.append((None, dict(num_drafts=2, verify="traversal", target_temperature=0.8, top_k=5, top_p=0.9)))
    configs.append(("optimal", dict(num_drafts=3, verify="selected-block")))
    configs.append(("is-ratio", dict(num_drafts=2, verify="selected-block", top_k=5, top_p=0.9)))
    return configs


def _config_id(config):
    scheme, kwargs = config
    return "-".join([scheme or "no-scheme"] + [f"{k}={v}" for k, v in kwargs.items()]).replace(" ", "")


@pytest.mark.parametrize("scheme, kwargs", configurations(), ids=map(_config_id, configurations()))
def test_sequences_follow_the_target(models, scheme, kwargs):
    draft_model, target_model = models
    assert sequence_pvalue(draft_model, target_model, scheme, **kwargs) > ALPHA


class NoResidual(SelectionScheme):
    """Broken on purpose (a classic bug): SpecInfer that resamples from the target, not
    from the residual, when every draft is rejected. Its output law is not the target."""

    name = "no_residual"

    def sample(self, drafts, rng):
        tokens = self.check_tokens(drafts)
        for i, x in enumerate(tokens):
            if rng.random() * self.draft_row(i)[x] < self.target[x]:
                return Selection(int(x), True, i)
        return self.selection(tokens, sample_index(self.target, rng))


def test_broken_scheme_fails(models, monkeypatch):
    """The same test rejects a subtly wrong scheme: it can fail."""
    draft_model, target_model = models
    monkeypatch.setitem(registry.SCHEMES, "no_residual", NoResidual)
    assert sequence_pvalue(draft_model, target_model, "no_residual", num_drafts=2) < ALPHA


def test_block_verification_errors_name_the_fix(models):
    draft_model, target_model = models
    with pytest.raises(ValueError, match="pass num_drafts=1"):
        speculative_generate(PROMPT, draft_model=draft_model, target_model=target_model, num_drafts=2, verify="block",
                             max_new_tokens=3)
    with pytest.raises(ValueError, match="selects with `scheme`"):
        speculative_generate(PROMPT, draft_model=draft_model, target_model=target_model, num_drafts=2,
                             scheme="specinfer", verify="selected-block", max_new_tokens=3)
    with pytest.raises(ValueError, match="needs identical drafts"):
        speculative_generate(PROMPT, draft_model=draft_model, target_model=target_model, num_drafts=2,
                             scheme="optimal", verify="selected-block", draft_temperatures=[1.0, 1.5],
                             max_new_tokens=3)
    with pytest.raises(ValueError, match="`verify` must be one of"):
        speculative_generate(PROMPT, draft_model=draft_model, target_model=target_model, verify="tree",
                             max_new_tokens=3)
