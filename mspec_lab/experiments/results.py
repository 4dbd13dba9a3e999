"""Resumable result tables: one CSV row per finished configuration.

A long sweep calls :meth:`ResultTable.compute` once per configuration. The row is
appended to the CSV (and flushed to disk) as soon as it is computed, keyed by the
configuration's canonical JSON. A rerun reads the existing rows first and returns them
instead of recomputing, so an interrupted sweep resumes where it stopped. The key is the
configuration only (not the code version): results of changed code need a fresh file.
Without a file (``path=None``, what a notebook uses) the rows are kept in memory only.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "rows.csv"
>>> table = ResultTable(path, config_fields=["x"], value_fields=["y"])
>>> table.compute({"x": 2}, lambda: {"y": 4.0})["y"]
4.0
>>> ResultTable(path, config_fields=["x"], value_fields=["y"]).compute({"x": 2}, None)["y"]
4.0
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["ResultTable", "RowBudget", "StopSweep", "config_key", "mean_se", "ratio_se"]


class StopSweep(Exception):
    """Raised when a :class:`RowBudget` is used up (rows computed so far are kept)."""


class RowBudget:
    """How many new rows a run may compute, and a hook called after each one.

    Args:
        max_rows: stop (raise :class:`StopSweep`) before computing more than this many new
            rows; ``None`` for no limit. Used to test resumption and to split long sweeps.
        on_row: optional ``on_row(row)`` called after each newly computed row.
    """

    def __init__(self, max_rows: int | None = None, on_row: Callable[[dict], None] | None = None):
        if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0):
            raise ValueError(f"`max_rows` must be an integer >= 0 or None, got {max_rows!r}")
        self.max_rows, self.on_row = max_rows, on_row
        self.computed = 0

    def check(self) -> None:
        """Raise :class:`StopSweep` if no new row may be computed."""
        if self.max_rows is not None and self.computed >= self.max_rows:
            raise StopSweep(f"stopped after {self.computed} new rows (max_rows={self.max_rows})")

    def spend(self, row: dict) -> None:
        """Count one new row and call the hook."""
        self.computed += 1
        if self.on_row is not None:
            self.on_row(row)


def config_key(config: dict) -> str:
    """Canonical JSON of a configuration (sorted keys): the row's identity."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


class ResultTable:
    """A CSV of rows keyed by configuration, appended to row by row.

    Columns: ``key`` (the configuration's canonical JSON), then ``config_fields`` (copies
    for reading the CSV by eye; missing fields are left empty), then ``value_fields``.

    Args:
        path: the CSV file, created (with its folder) on the first row; ``None`` keeps the
            rows in memory only.
        config_fields: configuration entries shown as columns.
        value_fields: the computed values, in column order.
        budget: shared :class:`RowBudget` (default: unlimited).

    Raises:
        ValueError: the existing CSV has other columns (written by another version).
    """

    def __init__(
        self,
        path: str | os.PathLike | None,
        *,
        config_fields: Sequence[str],
        value_fields: Sequence[str],
        budget: RowBudget | None = None,
    ):
        self.path = None if path is None else Path(path)
        self.fields = ["key", *config_fields, *value_fields]
        self.value_fields = list(value_fields)
        self.budget = budget or RowBudget()
        self.rows: dict[str, dict] = {}
        if self.path is not None and self.path.is_file() and self.path.stat().st_size > 0:
            with open(self.path, newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                if reader.fieldnames != self.fields:
                    raise ValueError(
                        f"{self.path} has columns {reader.fieldnames}, expected {self.fields}; it was "
                        "written by another version of this experiment: write to another folder "
                        "(--out) or delete the file"
                    )
                for raw in reader:
                    self.rows[raw["key"]] = self._parse(raw)

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, config: dict) -> bool:
        return config_key(config) in self.rows

    def compute(self, config: dict, fn: Callable[[], dict] | None) -> dict:
        """The row of ``config``: the stored one, or ``fn()`` computed, written and returned.

        Args:
            config: JSON-serialisable configuration (the row's identity).
            fn: computes the values, a dict with the ``value_fields`` keys.

        Returns:
            ``{**config, **values}``.

        Raises:
            StopSweep: the row is missing and the budget is used up.
        """
        key = config_key(config)
        if key in self.rows:
            return self.rows[key]
        self.budget.check()
        values = fn()
        missing = set(self.value_fields) - set(values)
        if missing:
            raise ValueError(f"computed row lacks the values {sorted(missing)}")
        row = {**config, **{name: values[name] for name in self.value_fields}}
        if self.path is not None:
            self._append(key, row)
        self.rows[key] = row
        self.budget.spend(row)
        return row

    def select(self, **where) -> list[dict]:
        """Stored rows whose configuration matches every ``name=value`` given."""
        return [row for row in self.rows.values() if all(row.get(k) == v for k, v in where.items())]

    def _append(self, key: str, row: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.is_file() or self.path.stat().st_size == 0
        with open(self.path, "a", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.fields)
            if new:
                writer.writeheader()
            cells = {name: _cell(row.get(name)) for name in self.fields[1:]}
            writer.writerow({"key": key, **cells})
            handle.flush()
            os.fsync(handle.fileno())

    def _parse(self, raw: dict) -> dict:
        row = json.loads(raw["key"])
        for name in self.value_fields:
            row[name] = _value(raw[name])
        return row


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return value


def _value(text: str):
    """Parse a value cell: a float when it reads as one, else the string."""
    try:
        return float(text)
    except ValueError:
        return text


def mean_se(values: Iterable[float]) -> tuple[float, float, int]:
    """Mean, standard error of the mean (``std(ddof=1) / sqrt(n)``) and n, nan ignored.

    The standard error is ``nan`` for fewer than two values; ``(nan, nan, 0)`` for none.
    """
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan"), 0
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")
    return float(x.mean()), se, int(x.size)


def ratio_se(numerators: Iterable[float], denominators: Iterable[float]) -> tuple[float, float, int]:
    """Ratio of sums ``R = sum(a) / sum(b)`` over ``n`` independent pairs ``(a_i, b_i)``, its
    standard error (the linearised one of a ratio estimator,
    ``sqrt(n / (n - 1) * sum((a_i - R b_i)^2)) / sum(b)``) and n.

    A ratio of means of paired samples (e.g. one scheme's block efficiency over another's on
    the same generations), or a mean pooled over clusters (``a_i``: the sum over cluster
    ``i``, ``b_i``: its size). The standard error is ``nan`` for fewer than two pairs;
    ``(nan, nan, n)`` when ``sum(b)`` is 0.

    Raises:
        ValueError: ``numerators`` and ``denominators`` differ in length.
    """
    a, b = np.asarray(list(numerators), dtype=np.float64), np.asarray(list(denominators), dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"`numerators` ({a.size}) and `denominators` ({b.size}) must pair up one to one")
    total = float(b.sum())
    if a.size == 0 or total == 0.0:
        return float("nan"), float("nan"), int(a.size)
    ratio = float(a.sum()) / total
    if a.size < 2:
        return ratio, float("nan"), 1
    return ratio, float(math.sqrt(a.size / (a.size - 1) * np.sum((a - ratio * b) ** 2)) / total), int(a.size)
