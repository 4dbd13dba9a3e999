"""Citations: every paper a page links has an entry in the bibliography, and in the page's list.

Pages cite a work with an author-year link to the paper (``[Khisti et al.,
2025](https://arxiv.org/abs/2410.18234)``), which reads the same on the website, Colab and
GitHub, and list the works they cite under a closing ``## References`` heading. The book's
bibliography page (``book/references.md``) is rendered by sphinxcontrib-bibtex from
``book/references.bib``. These tests hold the three together.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIB = ROOT / "book" / "references.bib"
#: the chapters; not the bibliography, nor the API reference (book/api/: the docstrings)
PAGES = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
    p for p in (ROOT / "book").glob("*.md") if p.name != "references.md")

#: the works issue 25 names: the book must be able to cite each of them
REQUIRED = {"leviathan2023", "chen2023", "miao2024specinfer", "sun2023spectr", "khisti2025", "hu2025",
            "sun2025block", "weng2025traversal", "thomas2026"}

#: a page that names a work (regex, on its prose) must link the work somewhere on the page
MENTIONS = {
    r"\bthe paper\b|\bthe paper's\b|Khisti": "https://arxiv.org/abs/2410.18234",
    r"\bSpecTr\b": "https://arxiv.org/abs/2310.15141",
    r"\bSpecInfer\b": "https://arxiv.org/abs/2305.09781",
    r"\b[Bb]lock verification\b": "https://arxiv.org/abs/2403.10444",
    r"\b[Tt]raversal verification\b": "https://arxiv.org/abs/2505.12398",
    r"Thomas (?:and|&) Pal": "https://arxiv.org/abs/2511.15898",
    r"\bHu et al\b": "https://arxiv.org/abs/2502.18779",
    r"\bLeviathan\b": "https://arxiv.org/abs/2211.17192",
    r"\bChen et al\b": "https://arxiv.org/abs/2302.01318",
}

PAPER_LINK = re.compile(r"https?://(?:arxiv\.org/abs/\d{4}\.\d{4,5}|openreview\.net/forum\?id=[\w-]+)")


def bib_entries(text: str) -> dict[str, str]:
    """``{key: url}`` of every entry of a BibTeX file's text."""
    entries = {}
    for match in re.finditer(r"@\w+\{([\w-]+),(.*?)\n\}", text, flags=re.S):
        url = re.search(r"\burl\s*=\s*\{([^}]*)\}", match.group(2))
        entries[match.group(1)] = url.group(1).strip() if url else ""
    return entries


def page_markdown(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text()


def citation_problems(markdown: str, urls: set[str]) -> list[str]:
    """Paper links missing from the bibliography, or from the page's ``## References`` list."""
    head, _, refs = markdown.partition("\n## References")
    links = set(PAPER_LINK.findall(markdown))
    problems = [f"{link} is not in book/references.bib" for link in sorted(set(PAPER_LINK.findall(markdown)))
                if link not in urls]
    problems += [f"the page names {pattern!r} but never links {url}"
                 for pattern, url in MENTIONS.items() if re.search(pattern, head) and url not in links]
    cited = set(PAPER_LINK.findall(head))
    if cited and not refs:
        problems.append("the page links papers but has no '## References' section")
    problems += [f"{link} is cited but not listed under '## References'"
                 for link in sorted(cited - set(PAPER_LINK.findall(refs))) if refs]
    return problems


def test_bibliography_has_the_required_works():
    entries = bib_entries(BIB.read_text())
    assert REQUIRED <= set(entries), f"missing: {sorted(REQUIRED - set(entries))}"
    assert all(PAPER_LINK.fullmatch(url) for url in entries.values()), entries


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_linked_paper_is_in_the_bibliography_and_the_page_list(path):
    urls = set(bib_entries(BIB.read_text()).values())
    problems = citation_problems(page_markdown(path), urls)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_checks_fail_on_crafted_pages():
    urls = {"https://arxiv.org/abs/2410.18234"}
    good = "See [Khisti et al., 2025](https://arxiv.org/abs/2410.18234).\n\n## References\n\n" \
           "* Khisti ... [arXiv:2410.18234](https://arxiv.org/abs/2410.18234)."
    assert citation_problems(good, urls) == []
    assert citation_problems("No papers here.", urls) == []
    unknown = good.replace("2410.18234", "2302.01318")
    assert any("not in book/references.bib" in p for p in citation_problems(unknown, urls))
    assert citation_problems(good.partition("\n## References")[0], urls) == [
        "the page links papers but has no '## References' section"]
    unlisted = good + "\n\nAlso [Hu et al., 2025](https://arxiv.org/abs/2502.18779)."
    head, sep, refs = good.partition("\n## References")
    late = head + " And [x](https://arxiv.org/abs/2502.18779)." + sep + refs
    assert any("not listed" in p for p in citation_problems(late, urls | {"https://arxiv.org/abs/2502.18779"}))
    assert any("not in book/references.bib" in p for p in citation_problems(unlisted, urls))
    named = citation_problems("SpecTr is a scheme.", urls)
    assert len(named) == 1 and "never links https://arxiv.org/abs/2310.15141" in named[0]
    assert bib_entries("@misc{a1,\n  url = {https://arxiv.org/abs/1},\n}\n") == {"a1": "https://arxiv.org/abs/1"}
