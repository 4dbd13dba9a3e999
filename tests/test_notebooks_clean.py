"""Notebooks are committed without outputs: the book build executes them."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_no_outputs(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") for c in code), f"{path.name}: clear the outputs before committing"
    assert all(c.get("execution_count") is None for c in code), f"{path.name}: clear execution counts"
    # every chapter opens with an "Open in Colab" badge
    assert "colab.research.google.com" in "".join(nb["cells"][0]["source"]), f"{path.name}: Colab badge missing"


# ---------------------------------------------------------------------------------------
# the repository URL lives in _config.yml; badges, install lines and README repeat it

ROOT = Path(__file__).resolve().parents[1]


def _set_repo_url():
    import importlib.util

    spec = importlib.util.spec_from_file_location("set_repo_url", ROOT / "tools" / "set_repo_url.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_badge_and_install_line_use_the_configured_repository(path):
    import yaml

    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    url, branch = repo["url"].rstrip("/"), repo["branch"]
    owner_name = url.removeprefix("https://github.com/")
    nb = json.loads(path.read_text())
    badge = f"https://colab.research.google.com/github/{owner_name}/blob/{branch}/notebooks/{path.name}"
    assert f'href="{badge}"' in "".join(nb["cells"][0]["source"]), \
        f"{path.name}: the Colab badge must open {badge}; run `python tools/set_repo_url.py`"
    setup = "".join(nb["cells"][1]["source"])
    assert f'"mspec @ git+{url}@{branch}"' in setup, \
        f"{path.name}: the setup cell must install git+{url}@{branch}; run `python tools/set_repo_url.py`"


def test_nothing_disagrees_with_config_yml():
    report = _set_repo_url().sync(ROOT, write=False)
    assert not report, "run `python tools/set_repo_url.py`:\n" + "\n".join(report)
    assert "git+" + _set_repo_url().read_config(ROOT)["url"] in (ROOT / "README.md").read_text()


def test_changing_the_url_is_one_line_and_one_command(tmp_path):
    import shutil
    import subprocess
    import sys

    for name in ("_config.yml", "README.md", "notebooks"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, tmp_path / name)
    config = tmp_path / "_config.yml"
    old = _set_repo_url().read_config(tmp_path)
    config.write_text(config.read_text().replace(f"url: {old['url']}", "url: https://github.com/someone/fork", 1))
    tool = [sys.executable, str(ROOT / "tools" / "set_repo_url.py"), "--root", str(tmp_path)]
    assert subprocess.run([*tool, "--check"], capture_output=True).returncode == 1
    assert subprocess.run(tool, capture_output=True).returncode == 0
    assert subprocess.run([*tool, "--check"], capture_output=True).returncode == 0
    texts = [p.read_text() for p in [tmp_path / "README.md", *sorted((tmp_path / "notebooks").glob("*.ipynb"))]]
    assert all(old["url"] not in t for t in texts)
    assert sum(t.count("/someone/fork") for t in texts) == 2 * len(NOTEBOOKS) + 1  # badges, installs, README
    for path in NOTEBOOKS:  # nothing else changed
        before = path.read_text().replace(old["owner"] + "/" + old["name"], "someone/fork")
        assert (tmp_path / "notebooks" / path.name).read_text() == before


# ---------------------------------------------------------------------------------------
# helpers that notebooks share live once, in mspec_lab/display.py


def _functions(path):
    """name -> ast dump of every top-level function of the notebook's code cells."""
    import ast

    found = {}
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = []
        for line in "".join(cell["source"]).split("\n"):
            stripped = line.lstrip()
            # IPython: !shell and %magic lines
            lines.append(line[: len(line) - len(stripped)] + "pass" if stripped[:1] in "!%" and stripped else line)
        for node in ast.parse("\n".join(lines)).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                found[node.name] = ast.dump(node)
    return found


def test_no_helper_is_copied_between_notebooks():
    import mspec_lab.display

    seen = {}
    for path in NOTEBOOKS:
        for name, body in _functions(path).items():
            assert name not in mspec_lab.display.__all__, \
                f"{path.name} redefines mspec_lab.display.{name}: import it instead"
            assert (name, body) not in seen, \
                f"{name} is defined in both {seen[name, body]} and {path.name}: move it to mspec_lab/display.py"
            seen[name, body] = path.name


def test_with_precomputed_slider():
    import plotly.graph_objects as go

    from mspec_lab.display import with_precomputed_slider

    def make(v):
        fig = go.Figure([go.Bar(x=["a", "b"], y=[v, 1 - v]),
                         go.Bar(x=["a", "b"], y=[v / 2, v / 3], error_y=dict(type="data", array=[v, v]))])
        fig.update_layout(title=f"v = {v}")
        return fig

    values = [0.1, 0.25, 0.5]
    fig = with_precomputed_slider(make, values, label="weight", active=1)
    assert list(fig.data[0].y) == [0.25, 0.75] and fig.layout.title.text == "v = 0.25"
    (slider,) = fig.layout.sliders
    assert slider.active == 1 and slider.currentvalue.prefix == "weight = "
    assert [s.label for s in slider.steps] == ["0.10", "0.25", "0.50"]
    for v, step in zip(values, slider.steps):
        data, layout = step.args
        assert step.method == "update" and layout == {"title.text": f"v = {v}"}
        assert data["y"] == [[v, 1 - v], [v / 2, v / 3]]
        assert data["error_y.array"] == [None, [v, v]]
        assert "base" not in data and "text" not in data  # set in no figure: not sent
    strings = with_precomputed_slider(make, [0.5, 0.1], label="k", fmt="{}").layout.sliders[0]
    assert [s.label for s in strings.steps] == ["0.5", "0.1"]
    names = with_precomputed_slider(lambda d: make(0.5), ["xsum", "dolly"], label="dataset").layout.sliders[0]
    assert [s.label for s in names.steps] == ["xsum", "dolly"]
    with pytest.raises(ValueError, match="same traces"):
        with_precomputed_slider(lambda v: go.Figure([go.Bar(y=[1])] * v), [1, 2], label="n")
    with pytest.raises(ValueError, match="active"):
        with_precomputed_slider(make, values, label="weight", active=3)
    with pytest.raises(ValueError, match="empty"):
        with_precomputed_slider(make, [], label="weight")
