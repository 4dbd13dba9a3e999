#!/usr/bin/env python
"""Copy the repository URL from ``_config.yml`` to every place that repeats it.

The URL lives in one place: ``repository.url`` (and ``repository.branch``) in
``_config.yml``, which also drives the website's GitHub button and its Colab launch button.
These repeat it, because Colab, JupyterLab and GitHub do not read ``_config.yml``:

* the "Open in Colab" badge in the first cell of every notebook,
  ``https://colab.research.google.com/github/OWNER/NAME/blob/BRANCH/notebooks/FILE.ipynb``;
* the install line of every notebook's setup cell (and the pip lines of the README and the Hub folders' model cards),
  ``git+https://github.com/OWNER/NAME@BRANCH``.

After editing ``_config.yml``::

    python tools/set_repo_url.py            # rewrite badges, install lines and README
    python tools/set_repo_url.py --check    # list what disagrees, exit 1 if anything does

``tests/test_notebooks_clean.py`` runs the check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GITHUB = re.compile(r"^https://github\.com/(?P<owner>[\w.-]+)/(?P<name>[\w.-]+?)(?:\.git)?/?$")
# a Colab badge link, up to the end of the notebook path
BADGE = re.compile(r"https://colab\.research\.google\.com/github/[^\s\"'<>()\\]+")
# a pip requirement pointing at a git repository, with its optional @ref
PIP_GIT = re.compile(r"git\+https?://[^\s\"'@<>()\\]+(?:@[^\s\"'<>()\\#]+)?")


def read_config(root: Path = ROOT) -> dict:
    """``{"url", "owner", "name", "branch", "path_to_book"}`` from ``root/_config.yml``.

    Raises:
        ValueError: if ``repository.url`` is missing or not a GitHub repository (Colab opens
            notebooks from GitHub only).
    """
    config = yaml.safe_load((root / "_config.yml").read_text())
    repo = config.get("repository") or {}
    url = str(repo.get("url") or "")
    m = GITHUB.match(url)
    if not m:
        raise ValueError(f"_config.yml: repository.url is {url!r}; set it to https://github.com/OWNER/NAME "
                         "(Colab opens notebooks from GitHub only)")
    return {
        "url": f"https://github.com/{m['owner']}/{m['name']}",
        "owner": m["owner"],
        "name": m["name"],
        "branch": str(repo.get("branch") or "main"),
        "path_to_book": str(repo.get("path_to_book") or "."),
    }


def colab_url(cfg: dict, notebook: str) -> str:
    """The "Open in Colab" link of ``notebook`` (path relative to the book's root)."""
    path = Path(cfg["path_to_book"], notebook).as_posix()
    path = re.sub(r"^(\./)+", "", path)
    return f"https://colab.research.google.com/github/{cfg['owner']}/{cfg['name']}/blob/{cfg['branch']}/{path}"


def pip_url(cfg: dict) -> str:
    """What follows ``mspec @`` in a pip install line: ``git+URL@BRANCH``."""
    return f"git+{cfg['url']}@{cfg['branch']}"


def _fix_text(text: str, cfg: dict, notebook: str | None) -> str:
    if notebook is not None:
        text = BADGE.sub(colab_url(cfg, notebook), text)
    return PIP_GIT.sub(pip_url(cfg), text)


def targets(root: Path = ROOT) -> list[Path]:
    """The files that repeat the URL: every notebook under ``notebooks/``, README.md and the
    Hub folders' model cards (``hub/*/README.md``)."""
    return sorted((root / "notebooks").glob("*.ipynb")) + [root / "README.md"] + sorted(root.glob("hub/*/README.md"))


def sync(root: Path = ROOT, *, write: bool = True) -> list[str]:
    """Make badges, install lines and README agree with ``_config.yml``.

    Args:
        root: the repository root (holding ``_config.yml``).
        write: rewrite the files; ``False`` only reports.

    Returns:
        One line per place that disagreed (``"notebooks/x.ipynb cell 0: OLD -> NEW"``);
        empty when everything agrees.
    """
    cfg = read_config(root)
    book = root / cfg["path_to_book"]
    report = []
    for path in targets(root):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if path.suffix == ".ipynb":
            raw = path.read_text()
            nb = json.loads(raw)
            notebook = path.resolve().relative_to(book.resolve()).as_posix()
            changed = False
            for i, cell in enumerate(nb["cells"]):
                old = "".join(cell["source"])
                new = _fix_text(old, cfg, notebook)
                if new != old:
                    report += [f"{rel} cell {i}: {a} -> {b}" for a, b in _diffs(old, new)]
                    cell["source"] = new.splitlines(keepends=True)
                    changed = True
            if changed and write:
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        else:
            old = path.read_text()
            new = _fix_text(old, cfg, None)
            if new != old:
                report += [f"{rel}: {a} -> {b}" for a, b in _diffs(old, new)]
                if write:
                    path.write_text(new)
    return report


def _diffs(old: str, new: str) -> list[tuple[str, str]]:
    pairs = []
    for pattern in (BADGE, PIP_GIT):
        for a, b in zip(pattern.findall(old), pattern.findall(new)):
            if a != b:
                pairs.append((a, b))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only report what disagrees with _config.yml; exit 1 if anything does")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    cfg = read_config(args.root)
    report = sync(args.root, write=not args.check)
    for line in report:
        print(line)
    if args.check:
        if report:
            print(f"{len(report)} place(s) disagree with _config.yml ({cfg['url']} @ {cfg['branch']}): "
                  "run `python tools/set_repo_url.py`", file=sys.stderr)
        return 1 if report else 0
    print(f"{len(report)} place(s) updated to {cfg['url']} @ {cfg['branch']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
