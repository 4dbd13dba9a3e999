"""Browser test of the built book: every chapter page in headless Chromium, offline.

Serves ``_build/html`` on 127.0.0.1 and checks, for each page in ``_toc.yml``, that it renders
and reads right:

* math is typeset by the locally served MathJax (``mjx-container``, no ``mjx-merror``), and
  (a) no ``$``, ``\\(`` or ``\\[`` is left in the visible text outside code blocks and
  typeset math (math that failed to render), figure labels included;
* (b) no display equation is clipped: its container does not scroll (``scrollWidth >
  clientWidth``) or cut it off (``scrollHeight > clientHeight``), and it does not stick out
  of the text column;
* (c) no code block, input or output (``pre``), and no output table is wider than its
  column: no text out of sight (text reaching into the block's right padding is allowed);
* every plotly figure is drawn and (d) moving each slider changes its figure's data;
* (f) at a phone's width (390 px) and a laptop's (1280 px) no text of a figure runs into
  another: the figure title, subplot titles and other annotations, legends, colour bars,
  slider labels, axis titles and a ternary plot's tick labels (``label_overlaps``), no page
  scrolls sideways as a whole (``document.scrollingElement.scrollWidth <= innerWidth``), and
  no display equation is clipped at 390 px either;
* the browser logged no errors (a missing local asset or a CDN request would).

Without a browser: (c') every line of every notebook code cell is at most ``MAX_CODE_LINE``
(88) characters, the most a code block shows without scrolling at a window width of 1280 px
(``WINDOW``; code at 12 px, ``book/_static/mspec.css``), and (e) every
page's prose -- the words of its markdown (notebook markdown cells, or the ``.md`` file),
not counting code, math, HTML tags or link targets -- stays within ``WORD_BUDGET`` words
(about 4,000: the test fails above 4,200). ``python tests/test_book.py`` prints the counts.

Each check is a small function of data the page reports (``PROBE``); the functions are tested
on crafted input, and the whole chain on a real page into which a raw ``$x$``, a too wide
equation and a too wide code block are injected (``test_checks_catch_crafted_problems``).
Screenshots go to ``_build/screenshots/``.

Needs Debian's ``chromium`` and ``chromium-driver`` and PyPI's ``selenium``. If
``_build/html`` is missing, the book is built first (``jupyter-book build . -W -n
--keep-going``); set ``MSPEC_BOOK_REBUILD=1`` to force a rebuild.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
BUILD_CMD = ["jupyter-book", "build", ".", "-W", "-n", "--keep-going"]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

# A 1280 px window (a common laptop): with code at 12 px (book/_static/mspec.css, 7.2 px a
# character) an 88-character line fits the text column, reaching into the block's padding.
WINDOW = (1280, 1400)
PHONE = (390, 900)  # a phone held upright: figures must still fit the column
MAX_CODE_LINE = 88
TOLERANCE_PX = 3  # sub-pixel rounding and MathJax's 1-2 px overhangs
WORD_BUDGET, WORD_LIMIT = 4000, 4200


def toc_pages() -> list[str]:
    """Document names (no suffix) of every page in _toc.yml, root first."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                pages.append(e["file"])
            walk(e.get("sections"))
            walk(e.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [str(Path(p).with_suffix("")) for p in pages]


PAGES = toc_pages()
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


# ---------------------------------------------------------------------------------------
# the checks, as functions of what a page reports (tested on crafted input below)

RAW_MATH = re.compile(r"\$|\\\(|\\\)|\\\[|\\\]")


def raw_math(texts: list[str]) -> list[str]:
    """Visible text (outside code and typeset math) that still holds a TeX delimiter."""
    return [" ".join(t.split())[:120] for t in texts if RAW_MATH.search(t)]


def clipped_equations(displays: list[dict], tol: float = TOLERANCE_PX) -> list[str]:
    """Display equations that scroll in their container or stick out of the text column.

    Each item: ``tex``, ``scroll``/``client`` and ``vscroll``/``vclient`` (the container's
    scrollWidth/clientWidth and scrollHeight/clientHeight: MathJax's containers scroll
    sideways and cut off what is taller), ``left``/``right`` (the typeset formula's box) and
    ``col_left``/``col_right`` (the column's).
    """
    bad = []
    for d in displays:
        why = []
        if d["scroll"] > d["client"] + tol:
            why.append(f"scrolls: {d['scroll']} px wide in {d['client']} px")
        if d["vscroll"] > d["vclient"] + tol:
            why.append(f"cut off: {d['vscroll']} px high in {d['vclient']} px")
        if d["right"] > d["col_right"] + tol or d["left"] < d["col_left"] - tol:
            why.append(f"sticks out of the column ({d['left']:.0f}..{d['right']:.0f} px,"
                       f" column {d['col_left']:.0f}..{d['col_right']:.0f} px)")
        if why:
            bad.append(f"{' '.join(d['tex'].split())[:100]!r}: {'; '.join(why)}")
    return bad


def wide_blocks(blocks: list[dict], tol: float = TOLERANCE_PX) -> list[str]:
    """Code blocks / output tables wider than their column: some text is out of sight.

    Each item: ``kind`` (input, output, table), ``scroll``/``client`` (scrollWidth and
    clientWidth), ``pad`` (its right padding, which scrollWidth counts: text that reaches
    into it is still in sight), ``right``/``col_right`` (its and the column's right edge),
    ``col_width`` and ``line`` (its longest line).
    """
    bad = []
    for b in blocks:
        if b["scroll"] - b["pad"] > b["client"] + tol or b["right"] > b["col_right"] + tol:
            bad.append(f"{b['kind']} {b['scroll']} px wide in {min(b['client'], b['col_width'])} px:"
                       f" {b['line'][:100]!r}")
    return bad


def _overlap(a: dict | None, b: dict | None, tol: float) -> bool:
    return bool(a and b) and min(a["right"], b["right"]) - max(a["left"], b["left"]) > tol \
        and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > tol


def figure_problems(figures: list[dict], tol: float = TOLERANCE_PX) -> list[str]:
    """Plotly figures wider than the text column, or whose title runs into the toolbar/legend.

    Each item: ``index``, ``title``, ``left``/``right`` (the figure's box), ``col_left``/
    ``col_right`` (the column's), ``scroll``/``client`` (of the output area holding it: a
    figure wider than its area makes it scroll), and the boxes (``left``, ``right``,
    ``top``, ``bottom``, or ``None``) of its ``title_box``, ``modebar`` and ``legend``.
    """
    bad = []
    for f in figures:
        name = f"figure {f['index']} ({' '.join(f['title'].split())[:60]!r})"
        if f["right"] > f["col_right"] + tol or f["left"] < f["col_left"] - tol or \
                f["scroll"] > f["client"] + tol:
            bad.append(f"{name} is wider than the column: {f['left']:.0f}..{f['right']:.0f} px,"
                       f" column {f['col_left']:.0f}..{f['col_right']:.0f} px")
        for other in ("modebar", "legend"):
            if _overlap(f["title_box"], f[other], tol):
                bad.append(f"{name}: the title runs into the {other}")
    return bad


#: kinds of figure text that may not overlap another (a tick label only in a ternary plot, and
#: only with the labels of its other axes and with the other kinds)
LABEL_KINDS = ("title", "annotation", "legend", "colour bar", "slider", "axis title", "tick")


def label_overlaps(figures: list[dict], tol: float = TOLERANCE_PX) -> list[str]:
    """Texts of a figure that run into each other.

    Each figure has ``labels``: items with ``kind`` (of ``LABEL_KINDS``), ``group`` (texts of
    one group -- one legend, one slider, one axis's tick labels -- are not compared with each
    other), ``text`` and a box (``left``, ``right``, ``top``, ``bottom``). Tick labels are
    compared only with labels of another kind or of another axis of their ternary plot.
    """
    bad = []
    for f in figures:
        name = f"figure {f['index']} ({' '.join(f['title'].split())[:60]!r})"
        labels = f.get("labels", [])
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                if a["group"] == b["group"] or not _overlap(a, b, tol):
                    continue
                if a["kind"] == b["kind"] == "tick" and a["plot"] != b["plot"]:
                    continue
                bad.append(f"{name}: the {a['kind']} {a['text'][:30]!r} runs into the {b['kind']}"
                           f" {b['text'][:30]!r}")
    return bad


def sideways_scroll(page: dict, tol: float = 1) -> list[str]:
    """The page as a whole scrolls sideways: ``page`` holds the scrolling element's
    ``scroll`` (scrollWidth) and the window's ``inner`` (innerWidth) width."""
    if page["scroll"] > page["inner"] + tol:
        return [f"the page scrolls sideways: {page['scroll']} px wide in a {page['inner']} px window"
                f" (widest: {page.get('widest', '?')})"]
    return []


def long_code_lines(source: str, limit: int = MAX_CODE_LINE) -> list[str]:
    """Lines of a code cell longer than ``limit`` characters."""
    return [f"{len(line)} chars: {line.strip()[:70]!r}" for line in source.split("\n") if len(line) > limit]


_FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1\s*$", re.MULTILINE | re.DOTALL)
_PROSE_DROP = [
    re.compile(r"<!--.*?-->", re.DOTALL),
    re.compile(r"\$\$.*?\$\$", re.DOTALL),
    re.compile(r"\\begin\{(\w+\*?)\}.*?\\end\{\1\}", re.DOTALL),
    re.compile(r"(?<!\\)\$[^$]+?(?<!\\)\$", re.DOTALL),
    re.compile(r"(`+).+?\1", re.DOTALL),
    re.compile(r"!\[[^\]]*\]\([^)]*\)"),   # images
    re.compile(r"\]\([^)]*\)"),            # link targets (the link text stays)
    re.compile(r"<[^>]+>"),                # HTML tags (their text stays)
]
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")


def prose_words(markdown: str) -> int:
    """Words of markdown prose: fenced code, inline code, math, HTML tags and link targets
    are dropped; a word is a run of letters/digits (inner apostrophes and hyphens join)."""
    text = _FENCE.sub(" ", markdown)
    for pattern in _PROSE_DROP:
        text = pattern.sub(" ", text)
    return len(_WORD.findall(text))


def page_markdown(page: str) -> str:
    """The markdown of a toc page: a notebook's markdown cells, or the .md file."""
    nb = ROOT / f"{page}.ipynb"
    if nb.is_file():
        cells = json.loads(nb.read_text())["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return (ROOT / f"{page}.md").read_text()


#: pages with no formula, on which Sphinx loads no MathJax: the bibliography, and the API pages
#: other than its index (docstrings write their formulas as code)
PAGES_WITHOUT_MATH = {page for page in PAGES if not page.startswith("notebooks/") and "$" not in page_markdown(page)}


def word_counts() -> dict[str, int]:
    return {page: prose_words(page_markdown(page)) for page in PAGES}


# ---------------------------------------------------------------------------------------
# without a browser


def test_prose_word_budget():
    counts = word_counts()
    print(f"\nprose words per page (budget ~{WORD_BUDGET:,}, limit {WORD_LIMIT:,}):")
    for page, n in counts.items():
        print(f"  {n:6,d}  {page}")
    over = {p: n for p, n in counts.items() if n > WORD_LIMIT}
    assert not over, f"pages over {WORD_LIMIT:,} words of prose (split or shorten them): {over}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_lines_fit_the_column(path):
    problems = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code":
            problems += [f"cell {i}: {p}" for p in long_code_lines("".join(cell["source"]))]
    assert not problems, (f"{path.name}: code lines over {MAX_CODE_LINE} characters scroll on the"
                          " website; wrap them:\n" + "\n".join(problems))


def test_checks_fail_on_crafted_input():
    assert raw_math(["We have $x$ here", "plain text", r"as \(a\) and \[b\]", "costs 5"]) == [
        "We have $x$ here", r"as \(a\) and \[b\]"]
    assert raw_math(["no math left", "p(x) = 0.5"]) == []

    col = dict(col_left=100.0, col_right=900.0)
    fine = dict(tex="x", scroll=800, client=800, vscroll=40, vclient=40, left=120.0, right=880.0,
                **col)
    assert clipped_equations([fine, dict(fine, scroll=802, vscroll=42)]) == []
    assert len(clipped_equations([dict(fine, scroll=1200)])) == 1
    assert "cut off" in clipped_equations([dict(fine, vscroll=60)])[0]
    assert "sticks out" in clipped_equations([dict(fine, right=950.0)])[0]
    assert "sticks out" in clipped_equations([dict(fine, left=40.0)])[0]

    block = dict(kind="input", scroll=700, client=700, pad=16, right=880.0, col_right=900.0,
                 col_width=800, line="x = 1")
    assert wide_blocks([block, dict(block, scroll=702), dict(block, scroll=718)]) == []
    assert len(wide_blocks([dict(block, scroll=720)])) == 1
    assert "input 900 px" in wide_blocks([dict(block, scroll=900)])[0]
    assert len(wide_blocks([dict(block, kind="table", right=1000.0)])) == 1

    box = dict(left=0.0, right=100.0, top=0.0, bottom=20.0)
    fig = dict(index=0, title="t", left=120.0, right=880.0, scroll=760, client=760,
               title_box=box, modebar=dict(box, left=700.0, right=860.0),
               legend=dict(box, top=400.0, bottom=420.0), **col)
    assert figure_problems([fig, dict(fig, right=902.0, legend=None)]) == []
    assert "wider than the column" in figure_problems([dict(fig, right=1000.0)])[0]
    assert "wider than the column" in figure_problems([dict(fig, scroll=900)])[0]
    assert figure_problems([dict(fig, modebar=dict(box, left=90.0))]) == [
        "figure 0 ('t'): the title runs into the modebar"]
    assert "legend" in figure_problems([dict(fig, legend=dict(box, top=10.0))])[0]

    assert long_code_lines("x = 1\n" + "y" * 88) == []
    assert long_code_lines("x = 1\n" + "y" * 89) == [f"89 chars: {'y' * 70!r}"]

    assert prose_words("Two words.") == 2
    assert prose_words("One $x + y = z$ two `code here` three [four](http://a.b/c d) five") == 5
    assert prose_words("A\n\n$$\n\\sum_i x_i\n$$\n\n```python\nprint(1)\n```\n\nB") == 2
    assert prose_words('<div class="admonition tip">\n\nIt\'s well-known\n\n</div>') == 2
    assert prose_words("\\begin{align} a &= b \\end{align} end <!-- a comment -->") == 1


# ---------------------------------------------------------------------------------------
# in the browser


def build_book() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    jb = shutil.which("jupyter-book")
    cmd = BUILD_CMD if jb else [sys.executable, "-m", "jupyter_book", *BUILD_CMD[1:]]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"book build failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"


@pytest.fixture(scope="module")
def site():
    stale = not (HTML / "index.html").is_file() or any(
        not (HTML / f"{p}.html").is_file() for p in PAGES
    )
    if stale or os.environ.get("MSPEC_BOOK_REBUILD") == "1":
        build_book()
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output readable
        pass


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert Path(CHROMIUM).exists(), "install Debian's chromium: apt-get install chromium chromium-driver"
    assert Path(CHROMEDRIVER).exists(), "install Debian's chromium-driver"
    profile = tempfile.mkdtemp(prefix="mspec-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size={},{}".format(*WINDOW),
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait(driver, script, timeout=30.0, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _shot(driver, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def _figure_data(driver, index):
    return driver.execute_script(
        "const gd = document.querySelectorAll('.js-plotly-plot')[arguments[0]];"
        "return JSON.stringify(gd.data.map(t => [t.x, t.y, t.base, t.a, t.b, t.c,"
        " t.marker && t.marker.color]));",
        index,
    )


def _load(driver, url):
    driver.get(url)
    _wait(driver, "return window.MathJax && MathJax.startup && MathJax.startup.promise &&"
                  " (MathJax.startup.promise.then(() => window.__mj_done = true), window.__mj_done)",
          what="MathJax to finish")


# What a page reports for checks (a)-(c). Text: every text node outside code blocks, inline
# code, kbd and typeset math (mjx-container, with its hidden MathML), figure labels (SVG)
# included; only nodes holding a "$" or a backslash come back.
PROBE = r"""
const column = document.querySelector('article.bd-article') || document.querySelector('main');
const col = column.getBoundingClientRect();
const texts = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n; (n = walker.nextNode());) {
  const el = n.parentElement;
  const skip = 'pre, code, kbd, samp, script, style, textarea, noscript, mjx-container, .highlight';
  if (!el || el.closest(skip)) continue;
  if (/[$\\]/.test(n.data)) texts.push(n.data);
}
const tex = new Map();
const mathjax = window.MathJax && MathJax.startup && MathJax.startup.document;
for (const item of ((mathjax && mathjax.math) || [])) {
  if (item.typesetRoot) tex.set(item.typesetRoot, item.math);
}
const displays = [...document.querySelectorAll('mjx-container[display="true"]')].map(m => {
  const box = (m.querySelector('mjx-math') || m).getBoundingClientRect();
  return {tex: tex.get(m) || m.textContent, scroll: m.scrollWidth, client: m.clientWidth,
          vscroll: m.scrollHeight, vclient: m.clientHeight,
          left: box.left, right: box.right, col_left: col.left, col_right: col.right};
});
const blocks = [...column.querySelectorAll('pre, .cell_output table')].map(b => {
  const lines = b.textContent.split('\n');  // innerText is empty in a folded <details>
  return {kind: b.tagName === 'TABLE' ? 'table' : (b.closest('.cell_output') ? 'output' : 'input'),
          scroll: b.scrollWidth, client: b.clientWidth,
          pad: parseFloat(getComputedStyle(b).paddingRight), right: b.getBoundingClientRect().right,
          col_right: col.right, col_width: Math.round(col.width),
          line: lines.reduce((a, l) => (l.length > a.length ? l : a), '')};
});
const box = el => {
  if (!el) return null;
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0 ? {left: r.left, right: r.right, top: r.top, bottom: r.bottom} : null;
};
const figures = [...column.querySelectorAll('.js-plotly-plot')].map((f, index) => {
  const r = f.getBoundingClientRect();
  const area = f.closest('.cell_output, .output') || f.parentElement;
  const title = f.querySelector('.gtitle');
  const labels = [];
  const add = (kind, el, group, plot) => {
    const b = box(el), text = (el.textContent || '').trim();
    if (b && text) labels.push({kind, group, plot: plot || '', text, ...b});
  };
  f.querySelectorAll('.g-gtitle').forEach(el => add('title', el, 'title'));
  f.querySelectorAll('.annotation').forEach((el, i) => add('annotation', el, 'annotation' + i));
  f.querySelectorAll('.legend').forEach((el, i) => add('legend', el, 'legend' + i));
  f.querySelectorAll('.colorbar').forEach((el, i) => add('colour bar', el, 'colorbar' + i));
  f.querySelectorAll('.slider-container').forEach((s, i) =>
    s.querySelectorAll('text').forEach(el => add('slider', el, 'slider' + i)));
  f.querySelectorAll('.infolayer > g[class^="g-"][class$="title"]:not(.g-gtitle)').forEach(
    (el, i) => add('axis title', el, 'axis title' + i));
  f.querySelectorAll('.ternary').forEach((tern, i) => ['aaxis', 'baxis', 'caxis'].forEach(ax =>
    tern.querySelectorAll(`.${ax} .xtick text, .${ax} .ytick text`).forEach(
      el => add('tick', el, `ternary${i} ${ax}`, `ternary${i}`))));
  return {index, title: title ? title.textContent : '', left: r.left, right: r.right,
          col_left: col.left, col_right: col.right, scroll: area.scrollWidth, client: area.clientWidth,
          title_box: box(title), modebar: box(f.querySelector('.modebar')),
          legend: box(f.querySelector('.legend')), labels};
});
const scroller = document.scrollingElement || document.documentElement;
let widest = '';
if (scroller.scrollWidth > window.innerWidth) {  // name the element that sticks out furthest
  let far = 0;
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.right > far && r.width > 0) { far = r.right; widest = el.tagName.toLowerCase() + (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : '') + ': ' + (el.textContent || '').trim().slice(0, 60); }
  }
}
const page = {scroll: scroller.scrollWidth, inner: window.innerWidth, widest};
return {texts, displays, blocks, figures, page};
"""


def readability_problems(driver, math: bool = True) -> list[str]:
    """What does not read right on the loaded page; ``math=False``: a page without MathJax,
    where a ``$`` is plain text (a command's ``$MSPEC_DATA_DIR``), not failed math."""
    report = driver.execute_script(PROBE)
    problems = [f"raw TeX in the text: \"{t}\"" for t in raw_math(report["texts"])] if math else []
    problems += [f"clipped equation {e}" for e in clipped_equations(report["displays"])]
    problems += [f"too wide: {b}" for b in wide_blocks(report["blocks"])]
    problems += figure_problems(report["figures"])
    problems += label_overlaps(report["figures"])
    problems += sideways_scroll(report["page"])
    return problems


def phone_problems(report: dict) -> list[str]:
    """What does not read right at a phone's width: figures (their box and their texts),
    display equations, a page that scrolls sideways. (Code blocks scroll within themselves
    there: 88-character lines cannot fit.)"""
    problems = figure_problems(report["figures"]) + label_overlaps(report["figures"])
    problems += [f"clipped equation {e}" for e in clipped_equations(report["displays"])]
    return problems + sideways_scroll(report["page"])


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_offline(site, browser, page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.get_log("browser")  # drop entries from earlier pages
    if page in PAGES_WITHOUT_MATH:
        browser.get(f"{site}/{page}.html")
    else:
        _load(browser, f"{site}/{page}.html")
    name = page.replace("/", "__")

    # math: MathJax (served from _static) typeset every formula
    if page in PAGES_WITHOUT_MATH:  # Sphinx loads no MathJax there
        assert not browser.find_elements(By.CSS_SELECTOR, ".math"), "math on a page without MathJax"
        assert browser.find_elements(By.CSS_SELECTOR, "article.bd-article h1"), "the page has no title"
        problems = readability_problems(browser, math=False)
        assert not problems, f"{page} does not read right:\n" + "\n".join(problems)
        _shot(browser, name)
        severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, "browser console errors:\n" + json.dumps(severe, indent=1)
        return
    assert "_static/mathjax/tex-chtml.js" in browser.page_source, "MathJax is not served locally"
    n_math = browser.execute_script("return document.querySelectorAll('mjx-container').length")
    n_source = browser.execute_script(
        "return document.querySelectorAll('.math, span.math, div.math').length")
    assert n_math > 0, "no rendered math (mjx-container) on the page"
    assert n_math >= n_source, f"only {n_math} of {n_source} formulas were typeset"
    errors = browser.execute_script("return document.querySelectorAll('mjx-merror').length")
    assert errors == 0, f"{errors} formulas failed to typeset (mjx-merror)"

    # plotly: every figure on the page is drawn; sliders change the data
    n_divs = browser.execute_script("return document.querySelectorAll('.plotly-graph-div').length")
    if n_divs:
        _wait(browser, "return document.querySelectorAll('.js-plotly-plot .main-svg').length"
                       f" >= {n_divs}", what="plotly figures to render")
        n_sliders = browser.execute_script(
            "return document.querySelectorAll('.js-plotly-plot .slider-container').length")
        if page.startswith("notebooks/"):
            assert n_sliders > 0, "an interactive chapter shows no figure with a slider"
        for i in range(n_divs):
            plot = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")[i]
            rails = plot.find_elements(By.CSS_SELECTOR, ".slider-rail-touch-rect")
            if not rails:
                continue
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", plot)
            before = _figure_data(browser, i)
            rail = rails[0]
            width = rail.size["width"]
            # click near the right end of the slider rail, as a reader would
            ActionChains(browser).move_to_element_with_offset(rail, int(width * 0.45), 0).click().perform()
            time.sleep(0.5)
            after = _figure_data(browser, i)
            assert after != before, f"figure {i}: moving the slider did not change the data"
            _shot(browser, f"{name}__figure{i}_slider_moved")
    else:
        assert not page.startswith("notebooks/"), "a notebook chapter without plotly figures"

    # readability: no raw TeX, no clipped equation, no code block wider than the column
    problems = readability_problems(browser)
    assert not problems, f"{page} does not read right:\n" + "\n".join(problems)

    browser.execute_script("window.scrollTo(0, 0)")
    _shot(browser, name)

    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, "browser console errors:\n" + json.dumps(severe, indent=1)


# a raw formula in a paragraph, a display equation and a code line twice the column's width
INJECT = r"""
const column = document.querySelector('article.bd-article');
const math = document.createElement('div');
math.className = 'math notranslate nohighlight';
math.textContent = '\\[' + Array(60).fill('a_{1} + b_{2}').join(' + ') + '\\]';
column.prepend(math);
return MathJax.typesetPromise([math]).then(() => {
  const div = document.createElement('div');  // added after typesetting: left as it is
  div.innerHTML = '<p>A formula that failed: $x + y$ and \\(z\\).</p>'
    + '<div class="highlight"><pre>' + 'x = 1; '.repeat(40) + '</pre></div>';
  column.prepend(div);
  return true;
});
"""


def test_checks_catch_crafted_problems(site, browser):
    _load(browser, f"{site}/{PAGES[0]}.html")
    assert readability_problems(browser) == []
    browser.execute_script(INJECT)
    problems = readability_problems(browser)
    assert len(problems) == 3, problems
    raw, eq, code = problems
    assert raw.startswith("raw TeX") and "$x + y$" in raw and "\\(z\\)" in raw
    assert eq.startswith("clipped equation") and "a_{1} + b_{2}" in eq
    assert code.startswith("too wide: input") and "x = 1;" in code


FIGURE_PAGES = [p for p in PAGES if p.startswith("notebooks/")]


def _figures_drawn(driver):
    n_divs = driver.execute_script("return document.querySelectorAll('.plotly-graph-div').length")
    _wait(driver, "return document.querySelectorAll('.js-plotly-plot .main-svg').length"
                  f" >= {n_divs}", what="plotly figures to render")


@pytest.mark.parametrize("page", FIGURE_PAGES)
def test_figures_fit_a_phone(site, browser, page):
    browser.set_window_size(*PHONE)
    try:
        _load(browser, f"{site}/{page}.html")
        _figures_drawn(browser)
        problems = phone_problems(browser.execute_script(PROBE))
        _shot(browser, page.replace("/", "__") + "__phone")
    finally:
        browser.set_window_size(*WINDOW)
    assert not problems, f"{page} at {PHONE[0]} px:\n" + "\n".join(problems)


# a figure twice the column's width, and one whose legend sits on its title
INJECT_FIGURES = r"""
const column = document.querySelector('article.bd-article');
const wide = document.createElement('div'), crowded = document.createElement('div');
column.prepend(crowded); column.prepend(wide);
return Promise.all([
  Plotly.newPlot(wide, [{y: [1, 2, 3]}], {width: 2 * column.clientWidth, title: {text: 'wide'}}),
  Plotly.newPlot(crowded, [{y: [1, 2], name: 'a long legend entry'}, {y: [2, 1], name: 'another one'}],
                 {title: {text: 'crowded title', x: 0.5}, showlegend: true,
                  legend: {orientation: 'h', x: 0.5, xanchor: 'center', y: 1.12, yanchor: 'bottom'}}),
]).then(() => true);
"""


def test_checks_catch_crafted_figures(site, browser):
    _load(browser, f"{site}/{FIGURE_PAGES[0]}.html")
    _figures_drawn(browser)
    assert figure_problems(browser.execute_script(PROBE)["figures"]) == []
    _wait(browser, INJECT_FIGURES, what="the injected figures")
    problems = figure_problems(browser.execute_script(PROBE)["figures"])
    assert any("'wide'" in p and "wider than the column" in p for p in problems), problems
    assert any("'crowded title'" in p and "runs into the legend" in p for p in problems), problems


def crafted_figure_page(tmp_path: Path, figures: list, extra_html: str = "") -> str:
    """A page like the book's (a text column, plotly.js from the installed package) holding
    ``figures`` (plotly figures) and ``extra_html``; its ``file://`` URL."""
    import plotly
    import plotly.io as pio

    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    divs = "".join(f'<div class="cell_output">{pio.to_html(fig, include_plotlyjs=False, full_html=False)}</div>'
                   for fig in figures)
    page = tmp_path / "crafted.html"
    page.write_text(f"""<!DOCTYPE html><html><head><meta name="viewport" content="width=device-width">
<script src="{plotly_js.as_uri()}"></script></head>
<body style="margin: 0; overflow-y: scroll"><main><article class="bd-article" style="padding: 0 12px">{divs}{extra_html}
</article></main></body></html>""")
    return page.as_uri()


def test_figure_text_checks_catch_a_crafted_page(browser, tmp_path):
    """A legend on its title, overprinted subplot titles, a colour bar on an annotation, a
    ternary plot's corner labels and a page wider than the window are found; a figure laid
    out for a phone (title, then plot, legend below) is not."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fine = go.Figure([go.Scatter(y=[1, 2], name="a"), go.Scatter(y=[2, 1], name="b")])
    fine.update_layout(title="fine", legend=dict(orientation="h", x=0, y=-0.25, yanchor="top"),
                       margin=dict(t=50, b=90), height=350)
    crowded = go.Figure([go.Scatter(y=[1, 2], name="a long legend entry"), go.Scatter(y=[2, 1], name="another")])
    crowded.update_layout(title=dict(text="crowded title", x=0.5), showlegend=True,
                          legend=dict(orientation="h", x=0.5, xanchor="center", y=1.1, yanchor="bottom"))
    panels = make_subplots(rows=1, cols=2, subplot_titles=["a subplot title that is long",
                                                           "another subplot title, also long"])
    panels.add_trace(go.Heatmap(z=[[1, 2], [3, 4]], colorbar=dict(x=0.45)), row=1, col=1)
    panels.add_trace(go.Scatter(y=[1, 2]), row=1, col=2)
    panels.add_annotation(x=0.46, y=0.5, xref="paper", yref="paper", text="a corner label", showarrow=False)
    panels.update_layout(title="panels")
    ternary = go.Figure(go.Scatterternary(a=[0.2], b=[0.3], c=[0.5]))
    ternary.update_layout(title="ternary")
    browser.set_window_size(*PHONE)
    try:
        browser.get(crafted_figure_page(tmp_path, [fine]))
        _figures_drawn(browser)
        report = browser.execute_script(PROBE)
        assert phone_problems(report) == [] and len(report["figures"][0]["labels"]) == 2, report["figures"]
        browser.get(crafted_figure_page(tmp_path, [fine, crowded, panels, ternary]))
        _figures_drawn(browser)
        problems = phone_problems(browser.execute_script(PROBE))
        _shot(browser, "crafted_figures__phone")
        browser.get(crafted_figure_page(tmp_path, [], "<p><code>an_unbreakable_literal_" + "x" * 80 + "</code></p>"))
        problems += phone_problems(browser.execute_script(PROBE))
    finally:
        browser.set_window_size(*WINDOW)
    assert not any("'fine'" in p for p in problems), problems
    assert any("'crowded title'" in p and "title 'crowded title' runs into the legend" in p
               for p in problems), problems
    assert any("'panels'" in p and "annotation 'a subplot title" in p and "annotation 'another" in p
               for p in problems), problems
    assert any("'panels'" in p and "colour bar" in p and "a corner label" in p for p in problems), problems
    assert any("'ternary'" in p and "tick" in p for p in problems), problems
    assert any(p.startswith("the page scrolls sideways") and "an_unbreakable_literal" in p
               for p in problems), problems
    assert label_overlaps([dict(index=0, title="t", labels=[
        dict(kind="tick", group="ternary0 aaxis", plot="ternary0", text="1", left=0, right=10, top=0, bottom=10),
        dict(kind="tick", group="ternary0 aaxis", plot="ternary0", text="0.8", left=5, right=15, top=0, bottom=10),
    ])]) == []  # one axis's own labels are not compared
    assert sideways_scroll(dict(scroll=390, inner=390)) == []


if __name__ == "__main__":  # print the word counts
    for page, n in word_counts().items():
        print(f"{n:6,d}  {page}")


def test_the_website_ships_no_build_error_logs(site):
    """myst-nb writes a failed notebook's log under the output folder; the book's extension
    moves it out to ``_build/reports``, so no reader downloads a build's error log."""
    assert not (HTML / "reports").exists()
    assert not list(HTML.rglob("*.err.log"))


def test_the_extension_moves_execution_reports_out_of_the_site(tmp_path):
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import mspec_book_assets as ext
    finally:
        sys.path.pop(0)
    log = tmp_path / "html" / "reports" / "notebooks" / "09.err.log"
    log.parent.mkdir(parents=True)
    log.write_text("CellExecutionError")
    app = types.SimpleNamespace(outdir=str(tmp_path / "html"), builder=types.SimpleNamespace(format="html"))
    ext._move_reports(app, None)
    assert not (tmp_path / "html" / "reports").exists()
    assert (tmp_path / "reports" / "notebooks" / "09.err.log").read_text() == "CellExecutionError"


# ---------------------------------------------------------------------------------------
# the API reference (book/api/): found by public names, commands and options documented

#: the largest an API page may be (the whole reference was one page of ~1 MB before it was split)
MAX_API_PAGE_BYTES = 300_000
#: dotted names the README and CONTRIBUTING write, in prose or code: ``mspec.make_scheme(``,
#: ``mspec_lab.models`` (not file paths: ``mspec/fast/``)
DOTTED_NAME = re.compile(r"(?<![\w./-])((?:mspec|mspec_lab)(?:\.[A-Za-z_]\w*)+)")
#: ``from mspec_lab.models import load_pair``-style imports in their examples
FROM_IMPORT = re.compile(r"^from ((?:mspec|mspec_lab)[\w.]*) import ([\w, ]+)$", re.M)


def search_index() -> dict:
    text = (HTML / "searchindex.js").read_text()
    return json.loads(text[text.index("(") + 1: text.rindex(")")])


def searchable_objects() -> dict[str, str]:
    """``{full name: page}`` of every object the website's search finds by name."""
    index = search_index()
    return {f"{prefix}.{entry[4]}" if prefix else entry[4]: index["docnames"][entry[0]]
            for prefix, entries in index["objects"].items() for entry in entries}


def inventory() -> dict[str, str]:
    """``{name: page}`` of every Python object a reference can point to (``objects.inv``),
    aliases included (``mspec.registry.make_scheme`` for ``mspec.make_scheme``)."""
    from sphinx.util.inventory import InventoryFile

    with open(HTML / "objects.inv", "rb") as stream:
        data = InventoryFile.load(stream, "", lambda base, uri: uri)
    return {name: entry[2].partition("#")[0] for kind, entries in data.items() if kind.startswith("py:")
            for name, entry in entries.items()}


def public_names() -> list[str]:
    """Every public name of ``mspec``: ``mspec.__all__`` and the names it imports on first use."""
    import mspec

    return [f"mspec.{name}" for name in [*mspec.__all__, *mspec._LAZY]]  # noqa: SLF001 -- the lazy names


def readme_names() -> set[str]:
    text = "\n".join((ROOT / name).read_text() for name in ("README.md", "CONTRIBUTING.md"))
    names = set(DOTTED_NAME.findall(text))
    for module, imported in FROM_IMPORT.findall(text):
        names |= {f"{module}.{name.strip()}" for name in imported.split(",")}
    return names


def test_the_readme_names_are_read_from_the_readme():
    names = readme_names()
    assert {"mspec.make_scheme", "mspec.multi_draft_sampling", "mspec.SCHEMES", "mspec_lab.models.load_pair",
            "mspec.lm.decoding.speculative_generate", "mspec.rounds.ROUND_RULES"} <= names
    assert DOTTED_NAME.findall("`mspec.x(1)` and mspec_lab.y.z, not numpy.mspec.a or mspec/fast/b.py") == [
        "mspec.x", "mspec_lab.y.z"]


def test_every_public_name_is_found_by_that_name(site):
    """The search box finds ``mspec.make_scheme`` and every other public name under the name
    one imports it by, on a page of the API reference."""
    found = searchable_objects()
    missing = [name for name in public_names() if name not in found]
    assert not missing, f"public names the search does not find by name: {missing}"
    elsewhere = {name: found[name] for name in public_names() if not found[name].startswith("book/api/")}
    assert not elsewhere, f"public names documented outside book/api/: {elsewhere}"


def test_every_name_the_readme_writes_has_an_entry(site):
    """Every dotted name of the README and CONTRIBUTING (``mspec.rounds.ROUND_RULES``,
    ``mspec_lab.models.load_pair``, ``mspec.schemes.two_step.TwoStepScheme``) is a target of
    the API reference: an entry, or another name of one."""
    targets = inventory()
    missing = sorted(name for name in readme_names() if not targets.get(name, "").startswith("book/api/"))
    assert not missing, f"names the README writes without an entry in the API reference: {missing}"


def test_every_command_and_option_is_documented(site):
    """The command-line page has a section for every command of ``python -m mspec_lab``, with
    every option of its parser in the search index (``mspec-lab gpu --dry-run``)."""
    from mspec_lab.cli import COMMANDS, command_parser

    page = (HTML / "book" / "api" / "cli.html").read_text()
    found = searchable_objects()
    for name in COMMANDS:
        assert f'id="cli-python-m-mspec-lab-{name}"' in page, f"no section for python -m mspec_lab {name}"
        options = {option for action in command_parser(name)._actions  # noqa: SLF001 -- the parser's options
                   for option in action.option_strings if option.startswith("--") and option != "--help"}
        documented = {full.rpartition(".")[2] for full in found if full.startswith(f"mspec-lab-{name}.")}
        assert options <= documented, f"{name}: options without an entry: {sorted(options - documented)}"


def test_the_api_pages_stay_small(site):
    sizes = {path.name: path.stat().st_size for path in (HTML / "book" / "api").glob("*.html")}
    assert len(sizes) >= 10, sizes
    big = {name: size for name, size in sizes.items() if size > MAX_API_PAGE_BYTES}
    assert not big, f"API pages over {MAX_API_PAGE_BYTES:,} bytes (split them): {big}"
