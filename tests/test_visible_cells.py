"""A reader who copies the code the website shows gets code that runs.

The website leaves out some cells of a notebook (the tag ``remove-cell``) or their code
(``remove-input``: the hidden checks, whose outputs may stay); a cell tagged ``hide-input`` is
shown collapsed, one click away, and ``remove-output`` shows the code without its output.
nbval runs every cell of every notebook, hidden ones included, so a visible cell that uses a
name defined only in a hidden cell passes nbval and fails for the reader. Here each notebook's
visible code cells run alone, in order, in a fresh kernel, and must not raise.

One test per notebook (they run in the notebook's folder, in the environment nbval uses);
those whose code loads a language model are marked ``model`` and ``slow``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: tags whose cells (or whose code) the website does not show
HIDDEN_CODE = {"remove-cell", "remove-input"}
#: code that loads a language model or runs torch kernels (the marks of tests/test_structure.py)
LOADS_MODELS = re.compile(r"^\s*(import torch|from torch)|load_pair\(|make_pair\(|ForCausalLM|tiny_lm",
                          re.MULTILINE)
#: one visible cell may take this long (chapters 8 and 9 load SmolLM2; their longest cells
#: take a few minutes on two busy cores)
TIMEOUT_S = 600


def visible_code(cells: list[dict]) -> list[str]:
    """The sources of the code cells whose code the website shows, in order."""
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"
            and not HIDDEN_CODE & set(cell.get("metadata", {}).get("tags", []))]


def run_cells(sources: list[str], cwd: Path) -> str | None:
    """Run ``sources`` as the code cells of a fresh notebook; the first error, or ``None``."""
    import tempfile

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    # the kernel talks over Unix sockets, not TCP ports: under pytest-xdist other workers start
    # kernels (nbval) at the same moment, and TCP ports picked as "free" can race between them
    with tempfile.TemporaryDirectory(prefix="mspec-kernel-") as sockets:
        manager = KernelManager(kernel_name="python3", transport="ipc", ip=f"{sockets}/kernel")
        client = NotebookClient(notebook, km=manager, timeout=TIMEOUT_S,
                                resources={"metadata": {"path": str(cwd)}})
        error = _first_error(client)
    if error is None:
        return None
    index = next((i for i, cell in enumerate(notebook.cells)
                  if any(o.get("output_type") == "error" for o in cell.get("outputs", []))), None)
    source = sources[index].strip().splitlines()[0] if index is not None else "?"
    return f"visible code cell {index} ({source!r}) fails: {error.ename}: {error.evalue}"


def _first_error(client):
    """Run ``client``'s notebook; the ``CellExecutionError`` it raised, or ``None``."""
    from nbclient.exceptions import CellExecutionError

    try:
        client.execute()
    except CellExecutionError as error:
        return error
    return None


def notebook_param(path: Path):
    code = "\n".join(visible_code(json.loads(path.read_text())["cells"]))
    marks = [pytest.mark.model, pytest.mark.slow] if LOADS_MODELS.search(code) else []
    return pytest.param(path, marks=marks, id=path.name)


@pytest.mark.parametrize("path", [notebook_param(p) for p in NOTEBOOKS])
def test_the_visible_cells_run_alone(path):
    cells = json.loads(path.read_text())["cells"]
    error = run_cells(visible_code(cells), path.parent)
    assert error is None, f"{path.name}: {error}"


def test_hidden_cells_are_left_out_and_a_missing_name_is_caught(tmp_path):
    def cell(source, *tags):
        return {"cell_type": "code", "source": source, "metadata": {"tags": list(tags)}}

    cells = [cell("x = 1", "hide-input"), cell("y = 2", "remove-cell"), cell("z = 3", "remove-input"),
             cell("w = 4", "remove-output"), {"cell_type": "markdown", "source": "text", "metadata": {}},
             cell("print(x + w)")]
    assert visible_code(cells) == ["x = 1", "w = 4", "print(x + w)"]
    assert run_cells(visible_code(cells), tmp_path) is None
    broken = cells + [cell("print(y)")]  # y is defined only in a removed cell
    error = run_cells(visible_code(broken), tmp_path)
    assert error is not None and "visible code cell 3" in error and "NameError" in error
