"""Sphinx extension for the mspec book: make the website work offline.

* copies ``plotly.min.js`` from the installed ``plotly`` package to
  ``_static/plotly/plotly.min.js`` and loads it on every page that holds a plotly
  figure (the notebooks render figures as HTML without plotly.js, see their setup cell);
* copies MathJax 3 (``es5`` build) to ``_static/mathjax/`` so that ``mathjax_path:
  mathjax/tex-chtml.js`` in ``_config.yml`` works without a CDN. MathJax is looked up,
  in order, in ``$MSPEC_MATHJAX_DIR`` (a folder holding ``tex-chtml.js``), the PyPI
  package ``django-static-mathjax`` (module ``mathjax``), ``node_modules/mathjax`` in the
  repository and the global npm root. Without MathJax the build fails with a message
  saying how to install it;
* moves the notebook execution reports (``reports/*.err.log``, written by myst-nb when a
  notebook cell fails) out of the website into ``_build/reports``: a reader never gets a
  build's error log, and the build says where it went;
* puts the repository root first on ``sys.path`` and ``PYTHONPATH`` so that autodoc and
  the executed notebooks document *this* checkout of ``mspec``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PLOTLY_JS = "plotly/plotly.min.js"
# parts of MathJax's es5 folder that tex-chtml.js may load (the rest is ~20 MB of
# alternative bundles, SVG output and the speech engine)
MATHJAX_KEEP = ("tex-chtml.js", "input", "output/chtml.js", "output/chtml", "ui", "a11y", "adaptors")
MATHJAX_MISSING = (
    "MathJax 3 not found: the book serves MathJax from _static so it works offline. "
    "Install it with `pip install django-static-mathjax==3.2.2.1` (or "
    "`npm install mathjax@3` in the repository root), or set MSPEC_MATHJAX_DIR to a "
    "folder holding MathJax's es5 build (tex-chtml.js)"
)


def _mathjax_dir() -> Path | None:
    candidates = []
    if os.environ.get("MSPEC_MATHJAX_DIR"):
        candidates.append(Path(os.environ["MSPEC_MATHJAX_DIR"]))
    spec = importlib.util.find_spec("mathjax")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            candidates.append(Path(loc) / "static" / "mathjax" / "es5")
    candidates.append(REPO_ROOT / "node_modules" / "mathjax" / "es5")
    if shutil.which("npm"):
        try:
            root = subprocess.run(["npm", "root", "-g"], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            root = ""
        if root:
            candidates.append(Path(root) / "mathjax" / "es5")
    for cand in candidates:
        if (cand / "tex-chtml.js").is_file():
            return cand
    return None


def _copy_assets(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    import plotly

    src = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    dst = static / PLOTLY_JS
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)

    mj_src = _mathjax_dir()
    if mj_src is None:
        raise RuntimeError(MATHJAX_MISSING)
    mj_dst = static / "mathjax"
    for part in MATHJAX_KEEP:
        s, d = mj_src / part, mj_dst / part
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        elif s.is_file():
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(s, d)


def _plotly_on_page(app, pagename, templatename, context, doctree):
    body = context.get("body", "") or ""
    if "Plotly.newPlot" in body:
        app.add_js_file(PLOTLY_JS, priority=100)


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    # sphinx-thebe and sphinx-togglebutton register their inline scripts twice under
    # Sphinx 7 + Jupyter Book 1; the second `const THEBE_JS_URL = ...` is a SyntaxError in
    # the browser console. Keep the first copy of every identical script.
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        key = (getattr(js, "filename", str(js)) or "", repr(sorted(getattr(js, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def _check_mathjax(app):
    # fail early, before minutes of notebook execution
    if app.builder.format == "html" and _mathjax_dir() is None:
        raise RuntimeError(MATHJAX_MISSING)


def _move_reports(app, exception):
    """Keep myst-nb's execution error logs out of the website (they go to ``_build/reports``)."""
    reports = Path(app.outdir) / "reports"
    if app.builder.format != "html" or not reports.is_dir():
        return
    target = Path(app.outdir).parent / "reports"
    shutil.rmtree(target, ignore_errors=True)
    shutil.move(str(reports), str(target))
    logs = sorted(str(p.relative_to(target)) for p in target.rglob("*.log"))
    if logs:
        print(f"notebook execution reports moved out of the website to {target}: {', '.join(logs)}")


def setup(app):
    root = str(REPO_ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    app.connect("builder-inited", _check_mathjax)
    app.connect("html-page-context", _plotly_on_page)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("build-finished", _copy_assets)
    app.connect("build-finished", _move_reports)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
