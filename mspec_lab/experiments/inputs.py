"""What the experiments run on: datasets, prompts as token ids of a model pair, seeds.

Every experiment takes a model pair (:func:`mspec_lab.models.load_pair`) and prompts of the
paper's datasets (:func:`mspec_lab.data.load_prompts`: XSum, Dolly-15k, WMT18 de-en), tokenized
here for the pair. Seeds of a generation are derived from the base seed and the prompt's
identity, so a row computes the same whatever else a run contains.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

from mspec_lab.data import DATASETS

__all__ = ["DATASETS", "DATA_SOURCES", "DEFAULT_DRAFT_TEMPERATURE", "Prompt", "SharedSettings",
           "TOKENLESS_PROMPT_LENGTH", "checked_choices", "derived_seed", "load_dataset_prompts", "with_progress"]

#: where prompts come from (:func:`mspec_lab.data.load_prompts`' ``source``)
DATA_SOURCES = ("auto", "local", "hub", "builtin")
#: draft temperature where an experiment sweeps none. The offline default pair drafts with
#: the target's own weights, so its temperature is all that makes the draft differ (at 1 the
#: draft would be the target); 1.5 lies inside the range the paper's Figure 3 sweeps (1.2-2.4)
DEFAULT_DRAFT_TEMPERATURE = 1.5
#: tokens of a prompt for a pair without tokenizer (``"tiny"``)
TOKENLESS_PROMPT_LENGTH = 12


@dataclass(frozen=True)
class Prompt:
    """One prompt ready for a model pair.

    Attributes:
        dataset: ``"xsum"``, ``"dolly"`` or ``"wmt"``.
        tag: ``"<example id>#<hash of the prompt text>"``, the prompt's identity in row keys.
        ids: prompt token ids.
        reference: the human reference text.
    """

    dataset: str
    tag: str
    ids: tuple[int, ...]
    reference: str


def load_dataset_prompts(pair, dataset: str, n: int, *, source: str = "auto", max_chars: int = 1000) -> list[Prompt]:
    """The first ``n`` prompts of ``dataset``, as token ids of ``pair``.

    Args:
        pair: :class:`mspec.lm.models.ModelPair`.
        dataset: one of :data:`DATASETS`.
        n: number of prompts.
        source: one of :data:`DATA_SOURCES` (``"auto"``: local ``$MSPEC_DATA_DIR``, the
            hub, else the built-in prompts).
        max_chars: XSum documents are cut to this many characters.

    A pair without tokenizer (``"tiny"``) gets :data:`TOKENLESS_PROMPT_LENGTH` ids derived
    from a hash of the prompt text (meaningless, but distinct per prompt).
    """
    from mspec_lab.data import load_prompts

    prompts = []
    for example in load_prompts(dataset, n=n, source=source, max_chars=max_chars):
        digest = hashlib.sha256(example.prompt.encode("utf-8")).digest()
        if pair.tokenizer is not None:
            ids = tuple(pair.tokenizer(example.prompt)["input_ids"])
        else:
            ids = tuple(b % pair.vocab_size for b in digest[:TOKENLESS_PROMPT_LENGTH])
        prompts.append(Prompt(dataset, f"{example.id}#{digest.hex()[:8]}", ids, example.reference))
    return prompts


def derived_seed(*parts) -> int:
    """A 60-bit seed determined by ``parts`` (e.g. base seed and prompt tag), whatever else runs."""
    return int(hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()[:15], 16)


def checked_choices(name: str, values, allowed) -> tuple:
    """``values`` as a tuple (a single string counts as one value), each one of ``allowed``.

    Raises:
        ValueError: naming the setting ``name`` and the allowed values.
    """
    values = (values,) if isinstance(values, str) else tuple(values)
    wrong = [v for v in values if v not in allowed]
    if wrong:
        raise ValueError(f"`{name}`: {', '.join(map(repr, wrong))} not among {', '.join(map(repr, allowed))}")
    return values


def with_progress(items, show: bool, **bar):
    """``items``, wrapped in a ``tqdm`` progress bar (keywords ``bar``) when ``show``."""
    if not show:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, **bar)


@dataclass(frozen=True)
class SharedSettings:
    """The settings every experiment shares; each experiment's settings extend it.

    Attributes:
        draft_temperature, target_temperature: temperatures of ``p`` and ``q``.
        data_source: where prompts come from (:func:`mspec_lab.data.load_prompts`).
        max_chars: XSum documents are cut to this many characters.
        seed: base seed of the run.
        smoke_test: the run is a smoke test of the pipeline (what :meth:`quick` makes): its
            reports say that their numbers are not results. Not part of any row's key.
    """

    #: the small settings of :meth:`quick` (each experiment sets its own)
    QUICK: ClassVar[dict] = {}

    draft_temperature: float = DEFAULT_DRAFT_TEMPERATURE
    target_temperature: float = 1.0
    data_source: str = "auto"
    max_chars: int = 1000
    seed: int = 0
    smoke_test: bool = False

    def __post_init__(self):
        checked_choices("data_source", self.data_source, DATA_SOURCES)
        for name in ("draft_temperature", "target_temperature"):  # 1 and 1.0 are one row key
            object.__setattr__(self, name, float(getattr(self, name)))
        object.__setattr__(self, "smoke_test", bool(self.smoke_test))

    @classmethod
    def quick(cls, **changes):
        """Small settings (the class's ``QUICK``), marked as a smoke test, then ``changes``."""
        return cls(**{**cls.QUICK, "smoke_test": True, **changes})
