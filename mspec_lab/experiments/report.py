"""How the experiments report: plain-text tables, the model pair's label, JSON and HTML files.

>>> print(format_table(["scheme", "K=2"], [["is", fmt(0.6348, 0.004, 3)]]))
scheme  K=2
------  -----------
is      0.635±0.004
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from mspec_lab.experiments import paper

__all__ = ["ORDERING_NOTE", "fmt", "format_table", "pair_label", "print_block", "write_html", "write_json"]

ORDERING_NOTE = (
    "Absolute numbers differ from the paper's because the model pair differs (the paper: "
    f"{paper.PAIR} on GPUs); what should match is the ordering of the schemes."
)


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


# -- text ----------------------------------------------------------------------------------------
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
