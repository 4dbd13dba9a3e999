"""Every notebook runs without an error -- executed once per CI run, by the book build.

CI builds the book first, which executes every notebook; running them again here would
double the time. So each test checks the build's executed copy when it is current (same code
cells, package unchanged since; see ``tests/notebook_check.py``) and otherwise executes the
notebook itself: on a fresh machine without ``_build``, or after an edit, every notebook is
still run. A notebook passes when every non-empty code cell ran and no output is an error.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from notebook_check import ROOT, code_sources, executed_copy, execute, is_current, problems

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_without_errors(path):
    copy = executed_copy(path)
    current, why = is_current(path, copy)
    start = time.perf_counter()
    if current:
        nb, how = json.loads(copy.read_text()), f"checked the book build's {copy.relative_to(ROOT)}"
    else:
        nb, how = execute(path), f"executed here: {why}"
    print(f"{path.name}: {how} ({time.perf_counter() - start:.1f} s)")
    found = problems(nb)
    assert not found, f"{path.name} ({how}):\n" + "\n".join(found)


# ---------------------------------------------------------------------------------------
# the test can fail: its pieces on crafted notebooks


def _notebook(*cells):
    """cells: ("md", text) or (source, execution_count, outputs)."""
    out = []
    for i, cell in enumerate(cells):
        if cell[0] == "md":
            out.append({"cell_type": "markdown", "id": f"c{i}", "metadata": {}, "source": [cell[1]]})
        else:
            source, count, outputs = cell
            out.append({"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": [source],
                        "execution_count": count, "outputs": outputs})
    return {"cells": out, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


ERROR = {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero",
         "traceback": []}


def test_problems_finds_errors_and_cells_that_did_not_run():
    ok = _notebook(("md", "# title"), ("x = 1", 1, []), ("", None, []), ("print(x)", 2, [
        {"output_type": "stream", "name": "stdout", "text": ["1\n"]}]))
    assert problems(ok) == []
    bad = _notebook(("x = 1", 1, []), ("1 / 0", 2, [ERROR]), ("y = 2", None, []))
    assert problems(bad) == ["cell 1: ZeroDivisionError: division by zero", "cell 2 did not run"]


def test_a_copy_is_current_only_for_the_same_code_and_package(tmp_path):
    package = tmp_path / "mspec"
    package.mkdir()
    (package / "core.py").write_text("x = 1\n")
    old = time.time() - 100
    os.utime(package / "core.py", (old, old))
    notebook, copy = tmp_path / "nb.ipynb", tmp_path / "executed.ipynb"

    def write(path, nb):
        path.write_text(json.dumps(nb))

    write(notebook, _notebook(("md", "text"), ("x = 1", None, [])))
    assert is_current(notebook, copy, package) == (False, "no executed copy from a book build")
    write(copy, _notebook(("md", "text"), ("x = 1", 1, [])))
    assert is_current(notebook, copy, package) == (True, "")
    write(notebook, _notebook(("md", "other text"), ("x = 1", None, [])))
    assert is_current(notebook, copy, package)[0], "a markdown edit does not need a new run"
    write(notebook, _notebook(("md", "text"), ("x = 2", None, [])))
    assert is_current(notebook, copy, package) == (False, "its code changed after the book build")
    write(notebook, _notebook(("md", "text"), ("x = 1", None, [])))
    os.utime(package / "core.py")  # edited now, after the copy was written
    assert is_current(notebook, copy, package) == (False, "mspec/core.py changed after the book build")
    assert code_sources(json.loads(copy.read_text())) == ["x = 1"]


def test_executing_a_notebook_reports_the_raising_cell(tmp_path):
    notebook = tmp_path / "raises.ipynb"
    notebook.write_text(json.dumps(_notebook(("x = 1", None, []), ("x / 0", None, []),
                                             ("y = 2", None, []))))
    assert problems(execute(notebook, timeout=60)) == [
        "cell 1: ZeroDivisionError: division by zero", "cell 2 did not run"]
    where = executed_copy(ROOT / "notebooks" / "a.ipynb")
    assert where == ROOT / "_build" / "jupyter_execute" / "notebooks" / "a.ipynb"
