"""Prompt sets for the paper's three tasks: XSum, Dolly-15k and WMT18 German-English.

:func:`load_prompts` returns a list of :class:`Example` (prompt, reference, id) from the first
source that is available, in this order (``source="auto"``):

1. a local directory: the ``data_dir`` argument, else the ``MSPEC_DATA_DIR`` environment
   variable, holding ``xsum.jsonl`` (``{"document", "summary", "id"}``), ``dolly.jsonl``
   (``{"prompt", "answer"}``, the prompt Alpaca-formatted) and ``wmt18-de-en.de`` /
   ``wmt18-de-en.en`` (aligned lines). The book's checks set it;
2. the Hugging Face hub through the ``datasets`` package, when it is installed and the hub
   is reachable (e.g. on Colab): ``EdinburghNLP/xsum``, ``databricks/databricks-dolly-15k``,
   ``wmt/wmt18`` (``de-en``);
3. a few built-in prompts written for this project (:data:`BUILTIN`), so the offline default
   runs on a fresh machine.

Prompt templates (as in the paper's Section 6 setting; the exact wording is ours):

* XSum: ``"Summarize: <document, cut to max_chars at a word boundary>\\nSummary:"``;
* Dolly: the Alpaca format (``"### Instruction:" ... "### Response:"``);
* WMT: ``"Translate German to English: <German sentence>\\nEnglish:"``.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

__all__ = [
    "BUILTIN",
    "DATASETS",
    "DATA_DIR_ENV",
    "Example",
    "alpaca_prompt",
    "hub_available",
    "load_prompts",
    "translation_prompt",
    "xsum_prompt",
]

#: Dataset names accepted by :func:`load_prompts`.
DATASETS = ("xsum", "dolly", "wmt")
#: Environment variable naming the local data directory.
DATA_DIR_ENV = "MSPEC_DATA_DIR"
#: Default cut of an XSum document, in characters (keeps CPU prompts short).
XSUM_MAX_CHARS = 1000
#: Hub dataset (name, config, default split) per dataset. Dolly only has a "train" split.
HUB = {
    "xsum": ("EdinburghNLP/xsum", None, "test"),
    "dolly": ("databricks/databricks-dolly-15k", None, "train"),
    "wmt": ("wmt/wmt18", "de-en", "test"),
}
_EOS_MARK = "###eos_token###"
_ALPACA_HEAD = (
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request."
)
_ALPACA_HEAD_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request."
)


@dataclass(frozen=True)
class Example:
    """One prompt and its reference output.

    Attributes:
        prompt: text to feed the model (already in the task's template).
        reference: the human reference (summary, answer or English translation).
        id: a stable identifier, e.g. ``"xsum-34268361"``, ``"dolly-17"``, ``"wmt-5"``.
    """

    prompt: str
    reference: str
    id: str


def xsum_prompt(document: str, max_chars: int = XSUM_MAX_CHARS) -> str:
    """XSum template: ``"Summarize: <document>\\nSummary:"``, document cut to ``max_chars``."""
    text = " ".join(document.split())
    if len(text) > max_chars:
        cut = text[:max_chars]
        text = (cut.rsplit(" ", 1)[0] if " " in cut else cut) + " ..."
    return f"Summarize: {text}\nSummary:"


def alpaca_prompt(instruction: str, context: str = "") -> str:
    """Alpaca template (as in the Dolly file), with an ``### Input:`` block if ``context``."""
    if context.strip():
        return (
            f"{_ALPACA_HEAD_INPUT}\n\n### Instruction:\n{instruction.strip()}\n\n"
            f"### Input:\n{context.strip()}\n\n### Response:"
        )
    return f"{_ALPACA_HEAD}\n\n### Instruction:\n{instruction.strip()}\n\n### Response:"


def translation_prompt(german: str) -> str:
    """WMT template: ``"Translate German to English: <german>\\nEnglish:"``."""
    return f"Translate German to English: {german.strip()}\nEnglish:"


def load_prompts(
    dataset: str,
    *,
    n: int | None = None,
    data_dir: str | os.PathLike | None = None,
    source: str = "auto",
    split: str | None = None,
    seed: int | None = None,
    max_chars: int = XSUM_MAX_CHARS,
) -> list[Example]:
    """Load prompts and references of one dataset.

    Args:
        dataset: one of :data:`DATASETS`: ``"xsum"``, ``"dolly"``, ``"wmt"``.
        n: at most this many examples (default: all the source has). Must be >= 1.
        data_dir: local data directory; default ``$MSPEC_DATA_DIR``.
        source: ``"auto"`` (local dir, else hub, else built-in), or force one of
            ``"local"``, ``"hub"``, ``"builtin"``.
        split: hub split; default ``"test"`` (``"train"`` for Dolly, its only split).
            Ignored by the local and built-in sources.
        seed: if given, ``n`` examples drawn uniformly without replacement with
            ``numpy.random.default_rng(seed)``; if ``None``, the first ``n`` in file order.
        max_chars: XSum documents are cut to this many characters.

    Returns:
        list of :class:`Example`.

    Raises:
        ValueError: unknown dataset/source, bad ``n``, or a local directory lacking the files.
        RuntimeError: ``source="hub"`` without ``datasets`` or without network.
    """
    if dataset not in DATASETS:
        raise ValueError(
            f"unknown `dataset` {dataset!r}; choose one of {', '.join(map(repr, DATASETS))}"
        )
    sources = ("auto", "local", "hub", "builtin")
    if source not in sources:
        raise ValueError(
            f"unknown `source` {source!r}; choose one of {', '.join(map(repr, sources))}"
        )
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"`n` must be a positive integer or None (all), got {n!r}")

    directory = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV) or None
    if source == "local" and directory is None:
        raise ValueError(
            f"source='local' needs `data_dir` or the {DATA_DIR_ENV} environment variable"
        )
    if source == "local" or (source == "auto" and directory is not None):
        examples = _load_local(dataset, Path(directory), max_chars)
    elif source == "hub" or (source == "auto" and _datasets_installed() and hub_available()):
        # only as many rows as needed, unless a random subset is asked for
        examples = _load_hub(dataset, split, None if seed is not None else n, max_chars)
    else:
        examples = _load_builtin(dataset, max_chars)
    return _subset(examples, n, seed)


def hub_available(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub looks reachable (checked quickly, without retries).

    ``False`` when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set, or when a TCP
    connection to the hub's host (``HF_ENDPOINT``, default huggingface.co) fails within
    ``timeout`` seconds. Checked at call time, so tests can set the variables.
    """
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
            return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def _subset(examples: list[Example], n: int | None, seed: int | None) -> list[Example]:
    if n is None or n >= len(examples):
        n = len(examples)
    if seed is None:
        return examples[:n]
    picks = np.random.default_rng(seed).choice(len(examples), size=n, replace=False)
    return [examples[i] for i in picks]


def _load_local(dataset: str, directory: Path, max_chars: int) -> list[Example]:
    files = {
        "xsum": ["xsum.jsonl"],
        "dolly": ["dolly.jsonl"],
        "wmt": ["wmt18-de-en.de", "wmt18-de-en.en"],
    }[dataset]
    missing = [name for name in files if not (directory / name).is_file()]
    if missing:
        raise ValueError(
            f"data directory {str(directory)!r} (from `data_dir` or ${DATA_DIR_ENV}) lacks "
            f"{', '.join(missing)}; point it at a directory with those files (see "
            f"shared/data/README.md), or unset it to use the hub or the built-in prompts"
        )
    if dataset == "wmt":
        german = (directory / files[0]).read_text(encoding="utf-8").splitlines()
        english = (directory / files[1]).read_text(encoding="utf-8").splitlines()
        if len(german) != len(english):
            raise ValueError(
                f"{files[0]} has {len(german)} lines but {files[1]} has {len(english)}; "
                "they must be aligned line by line"
            )
        return [
            Example(translation_prompt(de), en.strip(), f"wmt-{i}")
            for i, (de, en) in enumerate(zip(german, english))
        ]
    with open(directory / files[0], encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    if dataset == "xsum":
        return [
            Example(
                xsum_prompt(row["document"], max_chars),
                row["summary"].strip(),
                f"xsum-{row.get('id', i)}",
            )
            for i, row in enumerate(rows)
        ]
    return [  # dolly: the prompt is already Alpaca-formatted
        Example(row["prompt"], row["answer"].removesuffix(_EOS_MARK).strip(), f"dolly-{i}")
        for i, row in enumerate(rows)
    ]


def _datasets_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("datasets") is not None


def _load_hub(dataset: str, split: str | None, n: int | None, max_chars: int) -> list[Example]:
    try:
        import datasets  # optional: `pip install datasets`
    except ImportError as error:
        raise RuntimeError(
            "source='hub' needs the `datasets` package (`pip install datasets`); offline, use "
            f"source='builtin' or a local directory (${DATA_DIR_ENV})"
        ) from error
    name, config, default_split = HUB[dataset]
    split = split or default_split
    if n is not None:
        split = f"{split}[:{n}]"
    try:
        rows = datasets.load_dataset(name, config, split=split)
    except (OSError, ConnectionError) as error:
        raise RuntimeError(
            f"cannot load {name!r} from the Hugging Face hub ({error}); offline, use "
            f"source='builtin' or a local directory (${DATA_DIR_ENV})"
        ) from error
    examples = []
    for i, row in enumerate(rows):
        if dataset == "xsum":
            prompt, reference, key = xsum_prompt(row["document"], max_chars), row["summary"], row["id"]
        elif dataset == "dolly":
            prompt = alpaca_prompt(row["instruction"], row.get("context") or "")
            reference, key = row["response"], i
        else:
            pair = row["translation"]
            prompt, reference, key = translation_prompt(pair["de"]), pair["en"], i
        examples.append(Example(prompt, reference.strip(), f"{dataset}-{key}"))
    return examples


def _load_builtin(dataset: str, max_chars: int) -> list[Example]:
    template = {
        "xsum": lambda text: xsum_prompt(text, max_chars),
        "dolly": alpaca_prompt,
        "wmt": translation_prompt,
    }[dataset]
    return [
        Example(template(text), reference, f"builtin-{dataset}-{i}")
        for i, (text, reference) in enumerate(BUILTIN[dataset])
    ]


#: Built-in (source text, reference) pairs, written for this project (not from the datasets):
#: short news-style documents with a one-sentence summary, instructions with an answer, and
#: German sentences with an English translation.
BUILTIN: dict[str, tuple[tuple[str, str], ...]] = {
    "xsum": (
        (
            "The town council of Lindenford voted on Tuesday to close the old stone bridge to cars "
            "from next spring. Engineers found cracks in two of its three arches during an "
            "inspection in the summer. Pedestrians and cyclists will still be able to cross. The "
            "council said a new road bridge would be built downstream within four years.",
            "An old stone bridge in Lindenford will be closed to cars after engineers found cracks in its arches.",
        ),
        (
            "A hospital in the north of the region has started using robots to deliver medicines "
            "between its wards at night. The four machines follow markings on the floor and can "
            "call the lifts themselves. Nurses said the robots save them several kilometres of "
            "walking per shift. The hospital plans to buy two more next year.",
            "A hospital is using robots to carry medicines between wards at night.",
        ),
        (
            "The local football club Harbour Rovers has been promoted for the first time in its "
            "ninety-year history after a 2-1 win on Saturday. Their captain scored the winning goal "
            "in the last minute. Around three thousand fans invaded the pitch after the final "
            "whistle. The club will play in the regional league next season.",
            "Harbour Rovers won promotion for the first time in the club's history with a late winner.",
        ),
        (
            "Heavy rain over the weekend flooded more than two hundred homes in the valley. "
            "Emergency services rescued about forty people by boat. The river rose by three metres "
            "in twelve hours, the highest level since records began. Forecasters expect drier "
            "weather later in the week, but warned that the ground remains saturated.",
            "Floods after weekend rain hit more than two hundred homes and forced boat rescues.",
        ),
        (
            "A small bakery in the city centre has won a national prize for the best sourdough "
            "bread. The owner, who opened the shop six years ago, said she still uses the starter "
            "she made in her kitchen before the bakery opened. Queues formed outside the shop on "
            "Monday morning after the result was announced.",
            "A city-centre bakery has won a national award for its sourdough bread.",
        ),
        (
            "Scientists at a coastal research station have counted a record number of seal pups on "
            "a nearby island this winter. Volunteers recorded more than 1,200 births, up from about "
            "900 five years ago. Researchers said calmer autumn storms and fewer disturbances from "
            "boats may explain the increase.",
            "A record number of seal pups has been born on an island this winter.",
        ),
        (
            "The regional rail company will replace all its diesel trains on the coastal line with "
            "battery-powered trains by 2030. The new trains will charge at the two end stations and "
            "while running under the short electrified section in the middle. The company said "
            "journey times would stay the same and the trains would be quieter.",
            "Diesel trains on a coastal rail line are to be replaced by battery trains by 2030.",
        ),
        (
            "A primary school has stopped using its playground bell after parents living nearby "
            "complained about the noise. Teachers now signal the end of break by raising a flag. "
            "The head teacher said the children adapted within a week and that classes start on "
            "time as before.",
            "A primary school has replaced its playground bell with a flag after noise complaints.",
        ),
    ),
    "dolly": (
        ("Name three primary colours.", "Red, yellow and blue are the traditional primary colours."),
        (
            "Explain in two sentences why the sky looks blue during the day.",
            "Sunlight is scattered by the molecules in the air, and blue light is scattered much more "
            "than red light because of its shorter wavelength. This scattered blue light reaches our "
            "eyes from every direction, so the sky looks blue.",
        ),
        (
            "Give me three tips for keeping a house plant healthy.",
            "Water it only when the top of the soil is dry, place it where it gets the amount of light "
            "its species needs, and repot it when the roots fill the pot.",
        ),
        (
            "What is the difference between weather and climate?",
            "Weather is the state of the atmosphere at a given place and time, such as today's rain or "
            "sunshine. Climate is the average pattern of weather in a region over many years.",
        ),
        (
            "Write a short friendly message inviting a colleague to lunch on Friday.",
            "Hi! Would you like to join me for lunch on Friday? I was thinking of the new cafe around "
            "the corner, around half past twelve. Let me know if that works for you.",
        ),
        (
            "Classify each of these as a fruit or a vegetable: apple, carrot, banana, spinach.",
            "Apple: fruit. Carrot: vegetable. Banana: fruit. Spinach: vegetable.",
        ),
        (
            "Why do people use a to-do list?",
            "A to-do list keeps tasks out of one's head and in one place, which makes it easier to "
            "remember them, decide what to do first and see progress.",
        ),
        (
            "How many minutes are there in a day? Show the calculation.",
            "A day has 24 hours and each hour has 60 minutes, so there are 24 x 60 = 1440 minutes in a day.",
        ),
    ),
    "wmt": (
        ("Der Zug nach Hamburg hat heute zwanzig Minuten Verspätung.", "The train to Hamburg is twenty minutes late today."),
        ("Im Sommer schwimmen viele Menschen im See.", "In summer, many people swim in the lake."),
        (
            "Die Stadt will im nächsten Jahr drei neue Schulen bauen.",
            "The city wants to build three new schools next year.",
        ),
        ("Meine Schwester arbeitet als Ärztin in einem Krankenhaus.", "My sister works as a doctor in a hospital."),
        (
            "Wegen des starken Schnees blieben die Straßen am Morgen geschlossen.",
            "Because of the heavy snow, the roads stayed closed in the morning.",
        ),
        ("Das Museum ist montags geschlossen.", "The museum is closed on Mondays."),
        (
            "Die Regierung hat einen neuen Plan für erneuerbare Energien vorgestellt.",
            "The government has presented a new plan for renewable energy.",
        ),
        ("Wir haben am Wochenende einen langen Spaziergang im Wald gemacht.", "We took a long walk in the forest at the weekend."),
    ),
}
