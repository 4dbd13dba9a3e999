"""The notebooks read correctly outside Jupyter Book: Colab, JupyterLab, VS Code, GitHub.

Those render a markdown cell as CommonMark with raw HTML. MyST syntax does not survive
there: ```` ```{admonition} ```` shows as a code block of raw LaTeX, ``:::{note}`` and
``:class: dropdown`` as literal text, {doc}`x` as ``{doc}`` plus code, and a solution written
as a MyST dropdown is shown, not hidden. So the notebooks use HTML that both renderers
understand (see CONTRIBUTING.md):

* boxes: ``<div class="admonition tip">`` + ``<p class="admonition-title">``, the markdown
  body between blank lines (the website's theme styles these classes);
* solutions: ``<details class="admonition">`` + ``<summary class="admonition-title">``,
  folded everywhere, the markdown body between blank lines.

Checked for every markdown cell, each check also on a known-bad text (it must be able to
fail):

1. no MyST-only syntax, found by parsing the cell as CommonMark with ``markdown-it-py``;
2. every solution is folded: inside ``<details>``, after its ``<summary>``;
3. ``<details>`` / admonition ``<div>`` blocks have a title and a body that is rendered
   markdown (blank lines around it), in CommonMark;
4. every ``$`` is math for MyST (the website): none is left as text, as happens with math
   inside raw HTML or with ``$$`` inside a paragraph (it cannot interrupt one).
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
COMMONMARK = MarkdownIt("commonmark")  # raw HTML on, as in Jupyter and Colab

# markdown elements: a body made of these was parsed as markdown, not kept as raw HTML text
BLOCKS = {"p", "ul", "ol", "pre", "blockquote", "table", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "div"}
# MyST syntax that CommonMark shows as literal text, at the start of a paragraph line
MYST_LINES = [
    (re.compile(r"^:{3,}"), "colon fence (:::{directive} / :::)"),
    (re.compile(r"^:[\w-]+:(\s|$)"), "directive option (:name: value)"),
    (re.compile(r"^\([\w.:-]+\)=\s*$"), "MyST target ((label)=)"),
    (re.compile(r"^\+\+\+"), "MyST block break (+++)"),
    (re.compile(r"^%"), "MyST comment (% ...)"),
]
ROLE = re.compile(r"\{[\w.:+-]+\}$")
# a title that says "Solution" (a heading, <summary>, <b>, an admonition title) ...
SOLUTION = re.compile(r"^\W*solution(\s*\d+|\s+(to|of)\b.*)?\W*$", re.IGNORECASE | re.DOTALL)
# ... a paragraph that starts "Solution." / "Solution:", or a MyST directive titled Solution
SOLUTION_LEAD = re.compile(r"^\s*solution(\s*\d+)?\s*[.:]", re.IGNORECASE)
SOLUTION_IN_DIRECTIVE = re.compile(r"^\s*(`{3,}|:{3,})\s*\{[\w-]+\}\s*solution", re.IGNORECASE)
TITLES = {"h1", "h2", "h3", "h4", "h5", "h6", "summary", "strong", "b", "em", "i", "dt"}


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    nb = json.loads(path.read_text())
    return [(i, "".join(c["source"])) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"]


# ---------------------------------------------------------------------------------------
# 1. MyST syntax


def myst_leftovers(text: str) -> list[str]:
    """MyST directives, roles, options, targets and comments that CommonMark shows raw."""
    problems = []
    for tok in COMMONMARK.parse(text):
        if tok.type == "fence" and tok.info.strip().startswith("{"):
            problems.append(f"line {tok.map[0] + 1}: MyST directive ```{tok.info.strip()}")
        if tok.type != "inline":
            continue
        for line in tok.content.split("\n"):
            for pattern, what in MYST_LINES:
                if pattern.match(line.strip()):
                    problems.append(f"line {tok.map[0] + 1}: {what}: {line.strip()[:60]!r}")
        kids = tok.children or []
        for a, b in zip(kids, kids[1:]):
            if a.type == "text" and b.type == "code_inline" and ROLE.search(a.content):
                problems.append(f"line {tok.map[0] + 1}: MyST role {ROLE.search(a.content).group()}`{b.content}`")
    return problems


# ---------------------------------------------------------------------------------------
# 2. and 3. solutions, boxes: the cell rendered as CommonMark, as a small element tree

VOID = {"br", "img", "hr", "input", "meta", "link", "area", "base", "col", "embed", "source", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, dict(attrs), parent, []

    @property
    def classes(self):
        return (self.attrs.get("class") or "").split()

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def elements(self):
        return [c for c in self.children if isinstance(c, Node)]

    def walk(self):
        for c in self.elements():
            yield c
            yield from c.walk()

    def ancestors(self):
        node = self.parent
        while node is not None:
            yield node
            node = node.parent


class TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {}, None)
        self.node = self.root
        self.errors = []

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.node)
        self.node.children.append(node)
        if tag not in VOID:
            self.node = node

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if self.node.tag != tag:
            self.errors.append(f"</{tag}> closes <{self.node.tag}>")
            for anc in [self.node, *self.node.ancestors()]:
                if anc.tag == tag:
                    self.node = anc
                    break
            else:
                return
        self.node = self.node.parent

    def handle_data(self, data):
        self.node.children.append(data)


def rendered(text: str) -> tuple[Node, list[str]]:
    builder = TreeBuilder()
    builder.feed(COMMONMARK.render(text))
    builder.close()
    errors = list(builder.errors)
    if builder.node is not builder.root:
        errors.append(f"<{builder.node.tag}> is never closed")
    return builder.root, errors


def unfolded_solutions(text: str) -> list[str]:
    """Solutions a reader would see without asking: not inside a <details> (after its <summary>)."""
    problems = []
    for tok in COMMONMARK.parse(text):  # MyST dropdowns: ```{admonition} Solution, :::{admonition} Solution
        if tok.type == "fence" and SOLUTION_IN_DIRECTIVE.search("```" + tok.info):
            problems.append(f"line {tok.map[0] + 1}: solution in a MyST directive (```{tok.info.strip()})")
        if tok.type == "inline":
            for line in tok.content.split("\n"):
                if SOLUTION_IN_DIRECTIVE.search(line):
                    problems.append(f"line {tok.map[0] + 1}: solution in a MyST directive ({line.strip()[:50]})")
    root, _ = rendered(text)
    for node in root.walk():
        first = next((c for c in node.children if not (isinstance(c, str) and not c.strip())), None)
        titled = (node.tag in TITLES or "admonition-title" in node.classes) and SOLUTION.match(node.text())
        led = node.tag == "p" and isinstance(first, str) and SOLUTION_LEAD.match(first)
        if (titled or led) and not any(a.tag == "details" for a in node.ancestors()):
            problems.append(f"solution not folded in <details>: <{node.tag}> {node.text().strip()[:60]!r}")
    return problems


def malformed_blocks(text: str) -> list[str]:
    """<details> and admonition <div>s without a title, or whose body is not rendered markdown."""
    root, errors = rendered(text)
    problems = [f"HTML: {e}" for e in errors]
    for node in root.walk():
        if node.tag == "details":
            kids = node.elements()
            if not kids or kids[0].tag != "summary":
                problems.append("<details> must start with a <summary>")
                continue
            body = kids[1:]
            title = "summary"
        elif node.tag == "div" and "admonition" in node.classes:
            kids = node.elements()
            if not kids or kids[0].tag != "p" or "admonition-title" not in kids[0].classes:
                problems.append(f'<div class="{" ".join(node.classes)}"> must start with '
                                '<p class="admonition-title">')
                continue
            body = kids[1:]
            title = "admonition-title"
        else:
            continue
        raw = "".join(c for c in node.children if isinstance(c, str)).strip()
        if raw or not body or any(k.tag not in BLOCKS for k in body):
            problems.append(f"<{node.tag}> {kids[0].text().strip()[:40]!r}: its body is not rendered as markdown "
                            f"in Jupyter/Colab; leave a blank line after the {title} line and before </{node.tag}>")
        if node.tag == "details" and "admonition" in node.classes and "admonition-title" not in kids[0].classes:
            problems.append('<details class="admonition">: give its <summary> class="admonition-title" '
                            "(the website styles it as a box)")
    return problems


# ---------------------------------------------------------------------------------------
# 4. math on the website: MyST's own parser, with the book's extensions


def myst_parser():
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser
    from markdown_it.renderer import RendererHTML

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    extensions = set(config.get("parse", {}).get("myst_enable_extensions") or [])
    return create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)


MYST = myst_parser()


def unrendered_math(text: str) -> list[str]:
    """``$`` that MyST leaves as text (shown with its dollar signs on the website)."""
    if "\\$" in text:  # an escaped, literal dollar: check by hand
        return []
    problems = []
    for tok in MYST.parse(text):
        if tok.type == "html_block" and "$" in tok.content:
            problems.append(f"line {tok.map[0] + 1}: math inside raw HTML is not typeset on the website: "
                            f"{tok.content.strip()[:70]!r}")
        for kid in tok.children or []:
            if kid.type in ("text", "html_inline") and "$" in kid.content:
                problems.append(f"line {tok.map[0] + 1}: '$' left as text (math inside HTML, or $$ inside a "
                                f"paragraph: give display math blank lines around it): {tok.content.strip()[:70]!r}")
    return problems


CHECKS = [myst_leftovers, unfolded_solutions, malformed_blocks, unrendered_math]


# ---------------------------------------------------------------------------------------
# the notebooks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_markdown_cells_read_outside_jupyter_book(path, check):
    problems = [f"cell {i}: {p}" for i, text in markdown_cells(path) for p in check(text)]
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_have_folded_solutions(path):
    # keeps the checks above honest: the solutions are found where they are
    text = "\n\n".join(t for _, t in markdown_cells(path))
    if not re.search(r"^#+\s+Exercises", text, re.MULTILINE):
        pytest.fail(f"{path.name}: no Exercises section")
    root, _ = rendered(text)
    folded = [n for n in root.walk() if n.tag == "summary" and SOLUTION.match(n.text().strip())
              and n.parent.tag == "details"]
    assert folded, f"{path.name}: the Exercises have no <details><summary>Solution</summary> block"


# ---------------------------------------------------------------------------------------
# the checks can fail: text as the notebooks had it before (chapters 2 and 4)

OLD_MYST = """\
:::{admonition} What you'll learn
:class: tip
* the accept/resample rule; see {doc}`../book/why`.
:::

```{admonition} Theorem
For all distributions $p, q$ on $\\Omega$ the output satisfies $P(Y = y) = q(y)$.
```

1. Compute the acceptance by hand.

```{admonition} Solution
:class: dropdown
$\\min(p, q) = (0.2, 0.3, 0.1)$, so $\\alpha = 0.6$.
```
"""

OLD_INLINE_DISPLAY_MATH = """\
1. **Selection.** Marginally $Y_I$ has the **induced distribution**
   $$p_I(y) = \\sum_t P(t)\\, \\beta_y(t), \\qquad P(t) = \\prod_i p_i(x_i).$$
2. **Single-draft speculative sampling** of $Y_I \\sim p_I$ against $q$.
"""

BAD_HTML = [
    # solutions that are not folded
    "**Solution.** $\\alpha = 0.6$.\n",
    "### Solution\n\n$\\alpha = 0.6$.\n",
    "Solution: $\\alpha = 0.6$.\n",
    # no blank lines: the body stays raw text in Jupyter and the math is not typeset on the website
    '<details class="admonition">\n<summary class="admonition-title">Solution</summary>\n'
    "$\\alpha = 0.6$\n</details>\n",
    # a box without its title paragraph
    '<div class="admonition tip">\n\n* one\n\n</div>\n',
]

GOOD = """\
<div class="admonition tip">
<p class="admonition-title"><b>What you'll learn</b></p>

* the rule $\\min(1, q/p)$;

</div>

1. Compute the acceptance by hand.

<details class="admonition">
<summary class="admonition-title">Solution</summary>

$\\min(p, q) = (0.2, 0.3, 0.1)$, so

$$
\\alpha = 0.6 .
$$

</details>
"""


def test_checks_fail_on_myst_syntax():
    problems = myst_leftovers(OLD_MYST)
    text = "\n".join(problems)
    assert "```{admonition} Theorem" in text and "```{admonition} Solution" in text
    assert "colon fence" in text and "directive option" in text and "{doc}`../book/why`" in text
    assert len(unfolded_solutions(OLD_MYST)) == 1
    assert unfolded_solutions(":::{admonition} Solution\n:class: dropdown\n$x$\n:::\n")


def test_checks_fail_on_inline_display_math():
    assert unrendered_math(OLD_INLINE_DISPLAY_MATH)
    fixed = OLD_INLINE_DISPLAY_MATH.replace("\n   $$", "\n\n   $$").replace("$$\n2.", "$$\n\n2.")
    assert not unrendered_math(fixed)


def test_checks_fail_on_bad_html():
    assert all(unfolded_solutions(t) for t in BAD_HTML[:3])
    assert not unfolded_solutions("Solutions of the LP are vertices.\n")  # prose is not a solution
    assert malformed_blocks(BAD_HTML[3]) and unrendered_math(BAD_HTML[3])
    assert malformed_blocks(BAD_HTML[4])


def test_checks_pass_on_the_house_style():
    for check in CHECKS:
        assert not check(GOOD), check.__name__
