"""Did a notebook run cleanly? Helpers for ``tests/test_notebooks_execute.py``.

The book build (``jupyter-book build``, ``execute_notebooks: force`` in ``_config.yml``)
executes every notebook and keeps the executed copy in
``_build/jupyter_execute/notebooks/NAME.ipynb``. A copy is *current* when its code cells are
the notebook's code cells and no file of the ``mspec`` package changed after it was written;
then it is checked as it is. Otherwise the notebook is executed here, with nbclient, as the
build does it: working directory ``notebooks/``, this process's environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = ROOT / "_build" / "jupyter_execute"  # where jupyter-book 1 (myst-nb) writes them
PACKAGE = ROOT / "mspec"
CELL_TIMEOUT = 1200  # seconds per cell; the book build allows 600


def executed_copy(notebook: Path, executed: Path = EXECUTED, root: Path = ROOT) -> Path:
    """Where the book build writes the executed copy of ``notebook``."""
    return executed / notebook.resolve().relative_to(root)


def code_sources(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def is_current(notebook: Path, copy: Path, package: Path = PACKAGE) -> tuple[bool, str]:
    """(whether ``copy`` is an execution of ``notebook`` as it is now, why not)."""
    if not copy.is_file():
        return False, "no executed copy from a book build"
    if code_sources(json.loads(copy.read_text())) != code_sources(json.loads(notebook.read_text())):
        return False, "its code changed after the book build"
    built = copy.stat().st_mtime
    changed = [p for p in package.rglob("*") if p.suffix in (".py", ".json") and p.stat().st_mtime > built]
    if changed:
        return False, f"{changed[0].relative_to(package.parent)} changed after the book build"
    return True, ""


def problems(nb: dict) -> list[str]:
    """Error outputs, and code cells that did not run (empty cells never run: skipped)."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or not "".join(cell["source"]).strip():
            continue
        for out in cell.get("outputs", []):
            if out["output_type"] == "error":
                found.append(f"cell {i}: {out['ename']}: {out['evalue']}")
        if cell.get("execution_count") is None:
            found.append(f"cell {i} did not run")
    return found


def execute(notebook: Path, timeout: int = CELL_TIMEOUT) -> dict:
    """Run ``notebook`` top to bottom in a fresh kernel; stop at the first error, as the build."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(notebook, as_version=4)
    env = dict(os.environ)  # MSPEC_DATA_DIR, HF_HUB_OFFLINE, ... as for the book build
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    client = NotebookClient(nb, timeout=timeout, resources={"metadata": {"path": str(notebook.parent)}})
    try:
        client.execute(env=env)
    except CellExecutionError:
        pass  # the error is in the cell's outputs, and the cells after it did not run
    return json.loads(nbformat.writes(nb))
