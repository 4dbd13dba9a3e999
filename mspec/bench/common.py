"""Shared pieces of the sequence-level experiments (``acceptance``, ``decoding``, ``experiments``).

Options common to the commands, the model pair and its label, prompts as token ids,
plain-text tables, and the CSV / JSON / HTML outputs.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from . import paper

#: default output folder (gitignored)
DEFAULT_OUT = "bench-results"
#: default draft temperature: with the same-weights draft it is all that makes the draft differ
DEFAULT_DRAFT_TEMPERATURE = 1.5
#: tokens of a prompt for a pair without tokenizer ("tiny")
TOKENLESS_PROMPT_LENGTH = 12

ORDERING_NOTE = (
    "Absolute numbers differ from the paper's because the model pair differs (the paper: "
    f"{paper.PAIR} on GPUs); what should match is the ordering of the schemes."
)


def add_common_arguments(parser) -> None:
    """Options every experiment command takes."""
    from ..models import DEFAULT_PRESET, PRESETS

    parser.add_argument("--preset", default=DEFAULT_PRESET, choices=PRESETS,
                        help=f"model pair (mspec.models.load_pair; default {DEFAULT_PRESET!r}, offline)")
    parser.add_argument("--quick", action="store_true",
                        help="small settings (fewer prompts, positions, tokens, seeds, grid points): minutes on a CPU")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT}/)")
    parser.add_argument("--draft-temperature", type=float, default=DEFAULT_DRAFT_TEMPERATURE,
                        help="draft temperature where one is not swept (default %(default)s)")
    parser.add_argument("--target-temperature", type=float, default=1.0, help="target temperature (default 1.0)")
    parser.add_argument("--datasets", nargs="+", default=["xsum", "dolly", "wmt"], choices=["xsum", "dolly", "wmt"],
                        help="datasets (mspec.data.load_prompts; local $MSPEC_DATA_DIR, hub or built-in)")
    parser.add_argument("--data-source", default="auto", choices=["auto", "local", "hub", "builtin"],
                        help="where prompts come from (default: auto)")
    parser.add_argument("--max-chars", type=int, default=None,
                        help="XSum documents are cut to this many characters (default 1000, quick 400)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of all randomness")
    parser.add_argument("--max-rows", type=int, default=None,
                        help="stop after computing this many new rows (rerun to resume)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (torch.set_num_threads); 1 helps on a busy machine")


def quick_default(value, quick: bool, full, small):
    """``value`` if given, else ``small`` under ``--quick`` and ``full`` otherwise."""
    if value is not None:
        return value
    return small if quick else full


def setup_torch(args) -> None:
    """Apply ``--threads`` (the command owns its process, so this is its own setting)."""
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)


def pair_label(pair, draft_temperature: float | None) -> str:
    """Short name of what runs, e.g. ``"SmolLM2-135M, same-weights draft at T=1.5"``.

    ``draft_temperature=None`` leaves the temperature out (for tables that sweep it).
    """
    at = "" if draft_temperature is None else f" at T={draft_temperature:g}"
    if pair.name == "tiny":
        return f"tiny random OPT pair (V={pair.vocab_size}), draft{at}"
    if pair.name.startswith("smollm2"):
        if pair.same_model:
            return f"SmolLM2-135M, same-weights draft{at}"
        layers = pair.draft_model.config.num_hidden_layers
        total = pair.target_model.config.num_hidden_layers
        return f"SmolLM2-135M, {layers}/{total}-layer early-exit draft{at}"
    if pair.name == "opt":
        target = getattr(pair.target_model.config, "_name_or_path", "OPT")
        return f"OPT-125M -> {target.split('/')[-1]}, draft{at}"
    return f"{pair.name}, draft{at}"


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


def load_dataset_prompts(pair, dataset: str, n: int, *, source: str, max_chars: int) -> list[Prompt]:
    """The first ``n`` prompts of ``dataset``, as token ids of ``pair``.

    A pair without tokenizer (``"tiny"``) gets :data:`TOKENLESS_PROMPT_LENGTH` ids derived
    from a hash of the prompt text (meaningless, but distinct per prompt).
    """
    from ..data import load_prompts

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
    """A 62-bit seed determined by ``parts`` (e.g. base seed and prompt tag), order-free of runs."""
    return int(hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()[:15], 16)


# -- printing ------------------------------------------------------------------------------------
def fmt(value, se=None, digits: int = 2) -> str:
    """``"2.13±0.05"``; ``value`` may be a ``(mean, se)`` pair; ``"-"`` for missing/nan."""
    if isinstance(value, tuple):
        value, se = value[0], value[1]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if se is None or (isinstance(se, float) and math.isnan(se)):
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f}±{se:.{digits}f}"


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table, columns padded to their widest cell."""
    cells = [header, *rows]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_block(title: str, text: str, notes: list[str] = ()) -> None:
    """Print a titled table and its notes."""
    print(f"\n== {title}")
    print(text)
    for note in notes:
        if note:
            print(f"   {note}")


# -- files ---------------------------------------------------------------------------------------
def write_json(path: Path, obj) -> None:
    """Write ``obj`` as indented JSON (nan written as null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(obj), indent=1, sort_keys=False) + "\n", encoding="utf-8")


def _clean(obj):
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_html(path: Path, title: str, figures: list) -> None:
    """Write plotly ``figures`` into one self-contained HTML page (plotly.js embedded once)."""
    import plotly.io as pio

    parts = [f"<html><head><meta charset='utf-8'><title>{title}</title></head><body><h1>{title}</h1>"]
    for i, fig in enumerate(figures):
        parts.append(pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False))
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")


def run_sweep(args, sweep, report, *, on_row=None) -> int:
    """Body shared by the sweep commands: load the pair, run, report.

    Args:
        args: parsed options (``--preset``, ``--max-rows``, thread settings).
        sweep: ``sweep(args, pair, budget) -> summary``; stores each row as it finishes.
        report: ``report(summary)`` prints the tables.
        on_row: optional hook called with every newly computed row (tests count them).

    Returns:
        0, or 3 when ``--max-rows`` stopped the sweep (rerunning resumes it).
    """
    from ..models import load_pair
    from .results import RowBudget, StopSweep

    setup_torch(args)
    pair = load_pair(args.preset)
    budget = RowBudget(args.max_rows, on_row)
    try:
        summary = sweep(args, pair, budget)
    except StopSweep as stop:
        print(f"\n{stop}; rerun the same command to resume (stored rows are skipped)")
        return 3
    report(summary)
    return 0
