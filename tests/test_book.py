"""Browser test of the built book: every chapter page in headless Chromium, offline.

Serves ``_build/html`` on 127.0.0.1 and checks, for each page in ``_toc.yml``: math is
rendered by the locally served MathJax (``mjx-container`` elements, no raw ``$...$``
errors), every plotly figure is drawn, moving a slider under a figure changes the figure's
data, and the browser logged no errors (a missing local asset or a CDN request would).
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
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
BUILD_CMD = ["jupyter-book", "build", ".", "-W", "-n", "--keep-going"]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


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
        "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,1400",
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


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_offline(site, browser, page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    browser.get_log("browser")  # drop entries from earlier pages
    browser.get(f"{site}/{page}.html")
    name = page.replace("/", "__")

    # math: MathJax (served from _static) typeset every formula
    assert "_static/mathjax/tex-chtml.js" in browser.page_source, "MathJax is not served locally"
    _wait(browser, "return window.MathJax && MathJax.startup && MathJax.startup.promise &&"
                   " (MathJax.startup.promise.then(() => window.__mj_done = true), window.__mj_done)",
          what="MathJax to finish")
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

    browser.execute_script("window.scrollTo(0, 0)")
    _shot(browser, name)

    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, "browser console errors:\n" + json.dumps(severe, indent=1)
