"""How the experiments report: plain-text tables, the model pair's label, JSON and HTML files.

A number computed from samples is printed as mean ± standard error (:func:`fmt` with the
sample size ``n``; ``n = 1``: no s.e., and the cell says so), and each table says what ``n``
its numbers rest on (:func:`sample_note`). Quick settings (``--quick``) are a smoke test of
the pipeline: every report says so first, under each table (:func:`print_block` with
``smoke_test=True``) and in the files it writes (:func:`smoke_test_fields`).

>>> rows = [["is-ratio", fmt(0.6348, 0.004, 3, n=8), fmt(0.71, None, 3, n=1)]]
>>> print(format_table(["scheme", "K=2", "K=4"], rows))
scheme    K=2          K=4
--------  -----------  ----------------------
is-ratio  0.635±0.004  0.710 (n = 1, no s.e.)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from mspec_lab.experiments import paper

__all__ = ["ORDERING_NOTE", "SMOKE_TEST_BANNER", "SMOKE_TEST_LINE", "fmt", "format_table", "pair_label",
           "print_block", "print_smoke_banner", "sample_note", "smoke_test_fields", "write_html", "write_json"]

ORDERING_NOTE = (
    "Absolute numbers differ from the paper's because the model pair differs (the paper: "
    f"{paper.PAIR} on GPUs); what should match is the ordering of the schemes."
)
#: the first line of a report on quick settings (``--quick``), and what its results files store
SMOKE_TEST_BANNER = (
    "SMOKE TEST (quick settings, --quick): a check that the pipeline runs end to end. Its numbers rest "
    "on a handful of samples and are not results; run without --quick for results."
)
#: the line under each table of such a report
SMOKE_TEST_LINE = "SMOKE TEST (--quick): these numbers check the pipeline; they are not results"


def pair_label(pair, draft_temperature: float | None) -> str:
    """Short name of what runs, e.g. ``"SmolLM2-135M, same-weights draft at T=1.5"``.

    ``draft_temperature=None`` leaves the temperature out (for tables that sweep it).
    """
    at = "" if draft_temperature is None else f" at T={draft_temperature:g}"
    if pair.name == "tiny":
        return f"tiny random OPT pair (V={pair.vocab_size}), draft{at}"
    if pair.name == "smollm2-distilled" and type(getattr(pair.draft_model, "lm_head", None)).__name__ == \
            "FrequentTokenHead":  # not an early exit asked for with `draft_layers`
        return f"SmolLM2-135M, trained small draft{at}"
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
def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt(value, se=None, digits: int = 2, *, n: int | None = None, unit: str = "") -> str:
    """``"2.13±0.05"``; ``"-"`` for a missing or nan value.

    Args:
        value: the number, or a ``(mean, se)`` pair.
        se: its standard error; ``None``/nan: none.
        digits: decimals of both.
        n: how many samples a mean computed from samples rests on; leave it out for a number
            that is not a mean of samples (the paper's). Without a standard error the cell
            says why: ``"2.13 (n = 1, no s.e.)"``, never a bare number.
        unit: written after the number(s), e.g. ``"%"``: ``"12.0±3.1%"``, ``"-4.0% (n = 1, no s.e.)"``.
    """
    if isinstance(value, tuple):
        value, se = value[0], value[1]
    if _missing(value):
        return "-"
    if _missing(se):
        return f"{value:.{digits}f}{unit}" + ("" if n is None else f" (n = {n}, no s.e.)")
    return f"{value:.{digits}f}±{se:.{digits}f}{unit}"


def sample_note(sizes, unit: str, *, over: str = "") -> str:
    """The line under a table that says what its means rest on, e.g. ``"mean ± s.e. over
    n = 4 generations per number"`` (``"n = 2 to 4"`` when the numbers differ).

    Args:
        sizes: the ``n`` of every number of the table computed from samples.
        unit: what one sample is (plural), e.g. ``"generations"``.
        over: what else to say after ``unit``, e.g. ``"(prompt x seed)"``.
    """
    sizes = sorted({int(n) for n in sizes})
    if not sizes:
        return ""
    n = f"n = {sizes[0]}" if len(sizes) == 1 else f"n = {sizes[0]} to {sizes[-1]}"
    unit = unit.removesuffix("s") if sizes[-1] == 1 else unit
    few = "; n = 1: no standard error, one sample is not a result" if sizes[0] <= 1 else ""
    return f"mean ± s.e. over {n} {unit}{' ' + over if over else ''} per number{few}"


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table, columns padded to their widest cell."""
    cells = [header, *rows]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_block(title: str, text: str, notes: list[str] = (), *, smoke_test: bool = False) -> None:
    """Print a titled table and its notes; with ``smoke_test``, :data:`SMOKE_TEST_LINE` under them."""
    print(f"\n== {title}")
    print(text)
    for note in [*notes, SMOKE_TEST_LINE if smoke_test else ""]:
        if note:
            print(f"   {note}")


def print_smoke_banner(smoke_test: bool) -> None:
    """Print :data:`SMOKE_TEST_BANNER` after a blank line (what a report opens with) when ``smoke_test``."""
    if smoke_test:
        print(f"\n{SMOKE_TEST_BANNER}")


def smoke_test_fields(smoke_test: bool) -> dict:
    """The fields a results file opens with: ``{"smoke_test": bool}``, and the banner as
    ``"smoke_test_note"`` when it is one."""
    return {"smoke_test": bool(smoke_test), **({"smoke_test_note": SMOKE_TEST_BANNER} if smoke_test else {})}


# -- files ---------------------------------------------------------------------------------------
def write_json(path: Path, obj) -> None:
    """Write ``obj`` as indented JSON (nan written as null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean_for_json(obj), indent=1, sort_keys=False) + "\n", encoding="utf-8")


def clean_for_json(obj):
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {str(k): clean_for_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_for_json(v) for v in obj]
    return obj


def write_html(path: Path, title: str, figures: list, *, smoke_test: bool = False) -> None:
    """Write plotly ``figures`` into one self-contained HTML page (plotly.js embedded once);
    with ``smoke_test``, the title opens with :data:`SMOKE_TEST_LINE`."""
    import plotly.io as pio

    title = f"{SMOKE_TEST_LINE}. {title}" if smoke_test else title
    parts = [f"<html><head><meta charset='utf-8'><title>{title}</title></head><body><h1>{title}</h1>"]
    for i, fig in enumerate(figures):
        parts.append(pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False))
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
