"""Citations: every paper a page links has an entry in the bibliography, and in the page's list.

Pages cite a work with an author-year link to the paper (``[Khisti et al.,
2025](https://arxiv.org/abs/2410.18234)``), which reads the same on the website, Colab and
GitHub, and list the works they cite under a closing ``## References`` heading. The book's
bibliography page (``book/references.md``) is rendered by sphinxcontrib-bibtex from
``book/references.bib``. These tests hold the three together: every paper link and every
author-year citation of a page's prose ("Gale (1957)", "(Ford and Fulkerson, 1956)",
"[Narayan et al., 2018](...)") has an entry in the bibliography (matched by the first author's
surname and the year) and in the page's own list, so the book's promise that every work the
chapters cite is on the references page holds.
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
    r"\bSpecHub\b": "https://arxiv.org/abs/2411.05289",
    r"\bJeon et al\b": "https://arxiv.org/abs/2402.14160",
    r"\bXSum\b": "https://arxiv.org/abs/1808.08745",
    r"\bDolly\b": "https://www.databricks.com/blog/2023/04/12/"
                  "dolly-first-open-commercially-viable-instruction-tuned-llm",
    r"\bWMT ?18\b": "https://aclanthology.org/W18-6401/",
    r"\bSmolLM2\b": "https://arxiv.org/abs/2502.02737",
    r"\bGale\b": "https://doi.org/10.2140/pjm.1957.7.1073",
    r"\bFord and Fulkerson\b": "https://doi.org/10.4153/CJM-1956-045-5",
    r"\bFujishige\b": "https://doi.org/10.1287/moor.5.2.186",
    r"\bBarlow et al\b": "https://openlibrary.org/isbn/0471049700",
}

PAPER_LINK = re.compile(r"https?://(?:arxiv\.org/abs/\d{4}\.\d{4,5}|openreview\.net/forum\?id=[\w-]+)")


SURNAME = r"[A-Z][a-z\u00c0-\u017f]+(?:-[A-Z][a-z\u00c0-\u017f]+)?"
#: the authors of a citation: "Gale", "Ford and Fulkerson", "Narayan et al.", "A, B, and C"
AUTHORS = rf"(?P<first>{SURNAME})(?: et al\.|(?:, {SURNAME})*,? (?:and|&) {SURNAME})?"
YEAR = r"(?P<year>1[89]\d\d|20\d\d)[a-z]?"
#: "Gale (1957)" in a sentence, or "(Gale, 1957; ...)", "[Narayan et al., 2018](...)"
CITATIONS = [re.compile(rf"{AUTHORS} \({YEAR}\)"),
             re.compile(rf"(?:(?<=[\[(])|(?<=[\[(;] )){AUTHORS}, {YEAR}")]


def citations(prose: str) -> set[tuple[str, str]]:
    """``{(first author's surname, year)}`` of every author-year citation in prose."""
    prose = re.sub(r"\s+", " ", prose)
    return {(m.group("first"), m.group("year")) for pattern in CITATIONS
            for m in pattern.finditer(prose)}


def listed_works(refs: str) -> set[tuple[str, str]]:
    """``{(first author's surname, year)}`` of every item of a ``## References`` list."""
    items = re.split(r"\n(?=\* )", "\n" + refs)
    found = set()
    for item in items:
        item = re.sub(r"\s+", " ", item.strip())
        match = re.match(rf"\* ({SURNAME}(?: {SURNAME})*),.*?\((\d{{4}})[a-z]?\)", item)
        if match:
            found.add((match.group(1), match.group(2)))
    return found


def bib_works(text: str) -> set[tuple[str, str]]:
    """``{(first author's surname, year)}`` of every entry of a BibTeX file's text."""
    works = set()
    for match in re.finditer(r"@\w+\{[\w-]+,(.*?)\n\}", text, flags=re.S):
        author = re.search(r"\bauthor\s*=\s*\{(.*?)\},?\n", match.group(1), flags=re.S)
        year = re.search(r"\byear\s*=\s*\{(\d{4})\}", match.group(1))
        if author and year:
            first = re.sub(r"[{}\\]|\\[a-z]+", "", author.group(1).split(",")[0]).strip()
            works.add((first.split()[-1], year.group(1)))
    return works


def author_year_problems(markdown: str, works: set[tuple[str, str]]) -> list[str]:
    """Author-year citations of a page's prose missing from the bibliography or the page's list."""
    head, _, refs = markdown.partition("\n## References")
    cited = citations(head)
    problems = [f"{name} ({year}) is not in book/references.bib"
                for name, year in sorted(cited - works)]
    listed = listed_works(refs)
    problems += [f"{name} ({year}) is cited but not listed under '## References'"
                 for name, year in sorted(cited - listed)]
    return problems


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


MARKDOWN_LINK = re.compile(r"\]\((https?://[^)\s]+)\)")


def citation_problems(markdown: str, urls: set[str]) -> list[str]:
    """Paper links missing from the bibliography, or from the page's ``## References`` list.

    A paper link is an arXiv or OpenReview link, or a link to any work of the bibliography
    (a DOI, the ACL Anthology, a blog post).
    """
    head, _, refs = markdown.partition("\n## References")
    links = set(PAPER_LINK.findall(markdown)) | set(MARKDOWN_LINK.findall(markdown))
    problems = [f"{link} is not in book/references.bib" for link in sorted(set(PAPER_LINK.findall(markdown)))
                if link not in urls]
    problems += [f"the page names {pattern!r} but never links {url}"
                 for pattern, url in MENTIONS.items() if re.search(pattern, head) and url not in links]
    cited = set(PAPER_LINK.findall(head)) | (set(MARKDOWN_LINK.findall(head)) & urls)
    if cited and not refs:
        problems.append("the page links papers but has no '## References' section")
    listed = set(PAPER_LINK.findall(refs)) | set(MARKDOWN_LINK.findall(refs))
    problems += [f"{link} is cited but not listed under '## References'"
                 for link in sorted(cited - listed) if refs]
    return problems


def test_bibliography_has_the_required_works():
    entries = bib_entries(BIB.read_text())
    assert REQUIRED <= set(entries), f"missing: {sorted(REQUIRED - set(entries))}"
    assert all(url.startswith("https://") for url in entries.values()), entries


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_linked_paper_is_in_the_bibliography_and_the_page_list(path):
    urls = set(bib_entries(BIB.read_text()).values())
    problems = citation_problems(page_markdown(path), urls)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_author_year_citation_is_in_the_bibliography_and_the_page_list(path):
    works = bib_works(BIB.read_text())
    problems = author_year_problems(page_markdown(path), works)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_the_bibliography_holds_the_works_the_chapters_name():
    works = bib_works(BIB.read_text())
    for work in [("Gale", "1957"), ("Ford", "1956"), ("Barlow", "1972"), ("Fujishige", "1980"),
                 ("Narayan", "2018"), ("Conover", "2023"), ("Bojar", "2018"), ("Allal", "2025"),
                 ("Sun", "2024"), ("Thomas", "2026"), ("Jeon", "2024"), ("Khisti", "2025")]:
        assert work in works, work


def test_author_year_checker_flags_crafted_pages():
    works = {("Gale", "1957"), ("Ford", "1956"), ("Narayan", "2018")}
    refs = ("\n## References\n\n* Gale, D. (1957). A Theorem on Flows in Networks.\n"
            "* Ford, L. R., and Fulkerson, D. R. (1956). Maximal Flow Through a\n  Network.\n")
    good = ("By the supply-demand theorem (Gale, 1957; a version of Hall's) and the max-flow\n"
            "theorem of Ford and Fulkerson\n(1956) ..." + refs)
    assert citations(good.partition("\n## References")[0]) == {("Gale", "1957"), ("Ford", "1956")}
    assert author_year_problems(good, works) == []
    assert citations("On XSum ([Narayan et al., 2018](https://arxiv.org/abs/1808.08745))") == {
        ("Narayan", "2018")}
    assert citations("as Thomas and Pal (2026) show; (Barlow, Bartholomew, and Brunk, 1972)") == {
        ("Thomas", "2026"), ("Barlow", "1972")}
    assert citations("In 2023 the ICLR 2025 paper (Table 2, 2024) and NeurIPS (2023)") == set()
    unlisted = "Narayan et al. (2018) built XSum." + refs
    assert author_year_problems(unlisted, works) == [
        "Narayan (2018) is cited but not listed under '## References'"]
    unknown = "See Thomas and Pal (2025)." + refs
    assert author_year_problems(unknown, works) == [
        "Thomas (2025) is not in book/references.bib",
        "Thomas (2025) is cited but not listed under '## References'"]
    assert bib_works("@article{g,\n  author = {Gale, David},\n  year = {1957},\n}\n") == {
        ("Gale", "1957")}
    assert bib_works("@misc{b,\n  author = {Bojar, Ond{\\v{r}}ej and Koehn, P.},\n"
                     "  year = {2018},\n}\n") == {("Bojar", "2018")}


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
    doi = "https://doi.org/10.2140/pjm.1957.7.1073"
    gale = f"By [Gale, 1957]({doi}).\n\n## References\n\n* Gale, D. (1957). ..."
    assert citation_problems(gale + f" [doi]({doi}).", urls | {doi}) == []
    assert citation_problems(gale, urls | {doi}) == [f"{doi} is cited but not listed under '## References'"]
    assert citation_problems("On XSum.", urls) == [
        "the page names '\\\\bXSum\\\\b' but never links https://arxiv.org/abs/1808.08745"]
    named = citation_problems("SpecTr is a scheme.", urls)
    assert len(named) == 1 and "never links https://arxiv.org/abs/2310.15141" in named[0]
    assert bib_entries("@misc{a1,\n  url = {https://arxiv.org/abs/1},\n}\n") == {"a1": "https://arxiv.org/abs/1"}
