"""Quality and efficiency metrics for generated text.

* ROUGE-L (XSum, Dolly) through the ``rouge-score`` package, BLEU (WMT) through
  ``sacrebleu``: they check that speculative decoding leaves output quality unchanged
  (it samples from the target exactly, so only noise should differ).
* Block efficiency: mean number of tokens emitted per target call, the paper's measure
  of how much a drafting scheme saves (Khisti et al., ICLR 2025, Section 6).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["METRIC_FOR_DATASET", "block_efficiency", "bleu", "rouge_l", "score"]

#: The paper's quality metric per dataset of :mod:`mspec_lab.data`.
METRIC_FOR_DATASET = {"xsum": "rouge-l", "dolly": "rouge-l", "wmt": "bleu"}


def rouge_l(
    predictions: Sequence[str], references: Sequence[str], *, use_stemmer: bool = True
) -> float:
    """Mean ROUGE-L F1 over pairs, in ``[0, 1]``.

    Args:
        predictions: generated texts, length N.
        references: one reference text per prediction, length N.
        use_stemmer: Porter-stem words before matching (as usual for summarisation).
    """
    predictions, references = _check_texts(predictions, references)
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)
    scores = [scorer.score(ref, pred)["rougeL"].fmeasure for pred, ref in zip(predictions, references)]
    return float(np.mean(scores))


def bleu(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (sacrebleu defaults: 13a tokenisation, exponential smoothing), in ``[0, 100]``.

    Args:
        predictions: generated translations, length N.
        references: one reference translation per prediction, length N.
    """
    predictions, references = _check_texts(predictions, references)
    import sacrebleu

    return float(sacrebleu.corpus_bleu(predictions, [references]).score)


def score(
    dataset: str, predictions: Sequence[str], references: Sequence[str]
) -> tuple[str, float]:
    """The paper's metric for ``dataset``: ``("rouge-l", value)`` or ``("bleu", value)``."""
    if dataset not in METRIC_FOR_DATASET:
        choices = ", ".join(map(repr, METRIC_FOR_DATASET))
        raise ValueError(f"unknown `dataset` {dataset!r}; choose one of {choices}")
    name = METRIC_FOR_DATASET[dataset]
    return name, (rouge_l if name == "rouge-l" else bleu)(predictions, references)


def block_efficiency(tokens_per_call: Sequence[int]) -> float:
    """Mean tokens emitted per target call.

    Args:
        tokens_per_call: shape ``(R,)``: tokens emitted by each of R target calls (each
            ``>= 1``; with drafts of length L at most ``L + 1``).

    Returns:
        ``sum(tokens_per_call) / R``; 1.0 for autoregressive sampling.
    """
    counts = np.asarray(tokens_per_call)
    if counts.ndim != 1 or counts.size == 0:
        raise ValueError(
            f"`tokens_per_call` must be a non-empty 1-D sequence of counts, got shape {counts.shape}"
        )
    if not np.issubdtype(counts.dtype, np.integer) or (counts < 1).any():
        raise ValueError(
            "`tokens_per_call` must hold integers >= 1 (every target call emits a token)"
        )
    return float(counts.mean())


def _check_texts(predictions, references):
    if isinstance(predictions, str) or isinstance(references, str):
        raise ValueError(
            "`predictions` and `references` must be lists of strings, not one string; "
            "wrap it in [...]"
        )
    predictions, references = list(predictions), list(references)
    if not predictions or len(predictions) != len(references):
        raise ValueError(
            f"`predictions` ({len(predictions)}) and `references` ({len(references)}) must be "
            "non-empty and of equal length, one reference per prediction"
        )
    if not all(isinstance(t, str) for t in predictions + references):
        raise ValueError("`predictions` and `references` must contain only strings")
    return predictions, references
