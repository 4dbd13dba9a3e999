"""The API reference's extension (``book/_ext/mspec_api.py``) and pages (``book/api/``), without a build.

* every public name of ``mspec`` has a home module that a page documents with its members,
  every API page is in ``_toc.yml``, and no module is documented twice;
* the command-line page has a section for every command of ``python -m mspec_lab``;
* a parser becomes the right rST (options, defaults, choices, groups, sub-commands, usage
  lines that fit the column), tested on a crafted parser and on every command's own;
* the docstring fixes: several attributes on one line, prose comments with a colon.

The built website is checked in ``tests/test_book.py`` (search by public name, every
option in the index, page sizes).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "book" / "api"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
try:
    import mspec_api as ext
finally:
    sys.path.pop(0)

AUTOMODULE = re.compile(r"^\.\. automodule:: (\S+)\n((?:   :[\w-]+:.*\n)*)", re.M)


def automodules() -> list[tuple[str, str, bool]]:
    """``(page, module, with members)`` for every ``automodule`` of the API pages."""
    found = []
    for page in sorted(API.glob("*.md")):
        for module, options in AUTOMODULE.findall(page.read_text()):
            found.append((page.stem, module, ":no-members:" not in options))
    return found


def test_every_public_name_lives_in_a_module_a_page_documents():
    import mspec

    homes = ext.top_level_homes()
    assert set(homes) == set(mspec.__all__) | set(mspec._LAZY)  # noqa: SLF001 -- the lazy names
    with_members = {module for _, module, members in automodules() if members}
    missing = {name: home for name, home in homes.items() if home not in with_members}
    assert not missing, f"public names whose module no API page documents with its members: {missing}"
    packages = {package for package in ext.PUBLIC_PACKAGES if package not in with_members}
    assert not packages, f"public packages no API page documents with their members: {packages}"


def test_each_module_is_documented_once_and_each_api_page_is_in_the_toc():
    modules = [module for _, module, _ in automodules()]
    twice = sorted({module for module in modules if modules.count(module) > 1})
    assert not twice, f"modules documented twice (duplicate targets): {twice}"
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    api = next(chapter for part in toc["parts"] for chapter in part["chapters"]
               if chapter["file"] == "book/api/index")
    listed = {"index"} | {Path(section["file"]).name for section in api["sections"]}
    assert listed == {page.stem for page in API.glob("*.md")}


def test_every_command_has_its_section_on_the_command_line_page():
    from mspec_lab.commands import COMMANDS

    page = (API / "cli.md").read_text()
    programs = re.findall(r"^\.\. mspec-command:: (.+)$", page, re.M)
    assert programs == ["python -m mspec", "python -m mspec_lab",
                        *(f"python -m mspec_lab {name}" for name in COMMANDS)]


def crafted_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mspec_lab demo", description="A *demo* with `marks`_.",
                                     epilog="See also --help.")
    parser.add_argument("--drafts", type=int, nargs="+", default=[2, 4], help="values of K")
    parser.add_argument("--scheme", choices=["a", "b"], default="a", help="the scheme (default %(default)s)")
    parser.add_argument("--targets", nargs="+", metavar="TARGET", choices=["x", "y"], default=["x"],
                        help="targets to time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a smoke test")
    group = parser.add_argument_group("live decoding")
    group.add_argument("--top-k", type=int, nargs="?", help="top-k values")
    group.add_argument("--only", nargs="+", choices=["drafts", "temperature", "nonidentical"], help="experiments")
    return parser


def test_a_parser_becomes_options_with_their_defaults_and_choices():
    rst = "\n".join(ext.parser_rst(crafted_parser()))
    assert r"A \*demo\* with \`marks\`\_." in rst  # prose is not markup
    assert ".. program:: mspec-lab demo" in rst
    assert ".. option:: --drafts DRAFTS [DRAFTS ...]\n\n   values of K. Default: 2 4" in rst
    assert ".. option:: --scheme {a,b}\n\n   the scheme (default a)" in rst
    assert ".. option:: --targets TARGET [TARGET ...]\n\n   targets to time (one of: x, y). Default: x" in rst
    assert ".. option:: --seed SEED\n\n   Default: 0" in rst  # a default of 0 is a default
    assert ".. option:: --quick\n\n   a smoke test\n" in rst  # no "Default: False"
    assert ".. rubric:: live decoding\n\n.. option:: --top-k [TOP_K]" in rst
    assert ".. option:: --only ONLY [ONLY ...]\n\n   experiments (one of: drafts, temperature, nonidentical)" in rst
    # the epilog's "--help", escaped so that smart quotes do not make an en dash of it
    assert "--help" not in rst.replace("See also \\-\\-help.", "")
    assert rst.index(".. code-block:: text") < rst.index(".. option::") < rst.index("See also \\-\\-help.")
    assert ext.rst_text("run --quick, then a_b") == "run \\-\\-quick, then a\\_b"


def test_usage_lines_fit_the_column_and_keep_each_option_whole():
    parser = crafted_parser()
    for name in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"):
        parser.add_argument(f"--{name}-with-a-long-name", nargs="+", metavar=name.upper() * 3)
    lines = ext.usage_lines(parser, width=60)
    assert lines[0].startswith("usage: python -m mspec_lab demo [-h]")
    assert len(lines) > 3 and all(len(line) <= 60 for line in lines)
    assert all(line.startswith("    ") for line in lines[1:])
    assert any("[--drafts DRAFTS [DRAFTS ...]]" in line for line in lines)  # a group that fits stays whole
    assert "      [ALPHAALPHAALPHA ...]]" in lines  # one wider than a line is wrapped within
    with_argparse = " ".join(parser.format_usage().split())
    assert " ".join(" ".join(lines).split()) == with_argparse


def test_the_overview_links_every_command_and_labels_are_stable():
    parser = argparse.ArgumentParser(prog="python -m mspec_lab")
    sub = parser.add_subparsers(metavar="<command>")
    sub.add_parser("gpu", help="GPU timing")
    rst = "\n".join(ext.parser_rst(parser))
    assert "* :ref:`gpu <cli-python-m-mspec-lab-gpu>`: GPU timing" in rst
    assert ext.cli_label("python -m mspec_lab trained-draft-speed") == "cli-python-m-mspec-lab-trained-draft-speed"
    with pytest.raises(ValueError, match="not a program of the book"):
        ext.parser_for("python -m numpy")


def test_every_command_renders_from_its_own_parser():
    from mspec_lab.cli import COMMANDS, command_parser

    for name in COMMANDS:
        parser = command_parser(name)
        rst = ext.parser_rst(parser)
        options = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]  # noqa: SLF001
        assert sum(line.startswith(".. option:: ") for line in rst) == len(options), name
        usage = rst[rst.index(".. code-block:: text") + 2:]
        usage = usage[:usage.index("")]
        assert all(len(line) <= 3 + ext.USAGE_COLUMNS for line in usage), (name, usage)


def test_several_attributes_on_one_line_become_one_field_each():
    lines = [":ivar is_s, is_alphabet: LP tokens and ranked tokens of the IS scheme,",
             "                         which continue.", ":ivar seed: base seed."]
    ext.split_attribute_fields(None, "class", "x.Settings", None, {}, lines)
    assert lines == [":ivar is_s: LP tokens and ranked tokens of the IS scheme,", "   which continue.",
                     ":ivar is_alphabet: LP tokens and ranked tokens of the IS scheme,", "   which continue.",
                     ":ivar seed: base seed."]


def test_a_comment_with_a_colon_stays_prose_and_a_type_stays_a_type():
    prose = ["rows of our Table 3, in print order: the compared schemes"]
    ext.keep_prose_comments(None, "data", "m.TABLE3_ROWS", None, {}, list(prose))
    napoleon_output = ["the compared schemes", "", ":type: rows of our Table 3, in print order"]
    ext.split_attribute_fields(None, "data", "m.TABLE3_ROWS", None, {}, napoleon_output)
    assert napoleon_output == prose
    for text in ("goal", "rows of our Table 3", "calls of one function"):
        assert not ext.is_type(text), text
    for text in ("int", "dict[str, float]", "np.ndarray", "Path | None", "RoundRule"):
        assert ext.is_type(text), text


# -- the reference documents the public interface only ---------------------------------------------
#: what a reader of the API reference must never meet: our test files, maintainers' notes, the
#: development machine's data folder
LEAKS = re.compile(r"tests/|(?<![\w])test_\w|ENGINEERING\.md|\.\./shared|for maintainers")


def leaks(text: str) -> list[str]:
    """The lines of ``text`` that speak of the repository's tests, notes or data folder."""
    return [line.strip() for line in text.splitlines() if LEAKS.search(line)]


def member_names(module) -> list[str]:
    """The members an ``automodule`` of ``module`` documents: its ``__all__``, or the public
    names it defines, less the extension's internal names."""
    import inspect

    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name, value in vars(module).items() if not name.startswith("_")
                 and not inspect.ismodule(value) and getattr(value, "__module__", module.__name__) == module.__name__]
    internal = ext.INTERNAL_NAMES.get(module.__name__, frozenset())
    return [name for name in names if name not in internal and hasattr(module, name)]


def rendered_sources() -> dict[str, str]:
    """``{where: text}``: everything the API pages render: the pages, every documented module's
    docstring, its members' docstrings (and their public methods'), the ``#:`` comments, and
    the command-line page's parsers."""
    import importlib
    import inspect

    from sphinx.pycode import ModuleAnalyzer

    texts = {f"book/api/{page.name}": page.read_text() for page in sorted(API.glob("*.md"))}
    for modname in sorted({module for _, module, _ in automodules()}):
        module = importlib.import_module(modname)
        texts[modname] = module.__doc__ or ""
        for name in member_names(module):
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isroutine(obj):
                texts[f"{modname}.{name}"] = inspect.getdoc(obj) or ""
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if not attr.startswith("_") and (inspect.isroutine(value) or isinstance(value, property)):
                        texts[f"{modname}.{name}.{attr}"] = inspect.getdoc(value) or ""
        try:
            comments = ModuleAnalyzer.for_module(modname).find_attr_docs()
        except Exception:  # noqa: BLE001 -- a module without source has no comments
            comments = {}
        for (scope, attr), lines in comments.items():
            texts[f"{modname}.{scope + '.' if scope else ''}{attr} (comment)"] = "\n".join(lines)
    for program in re.findall(r"^\.\. mspec-command:: (.+)$", (API / "cli.md").read_text(), re.M):
        texts[program] = "\n".join(ext.parser_rst(ext.parser_for(program)))
    return texts


def test_the_api_reference_speaks_of_the_interface_only():
    texts = rendered_sources()
    assert len(texts) > 200 and "mspec.schemes.selection.SelectionScheme" in texts
    found = {where: lines for where, text in texts.items() if (lines := leaks(text))}
    assert not found, f"the API reference would show the repository's internals: {found}"


def test_internal_validators_are_not_documented():
    import mspec
    import mspec.distributions as distributions

    internal = ext.INTERNAL_NAMES["mspec.distributions"]
    assert {"check_tokens", "check_num_drafts", "check_distribution"} <= internal
    assert all(hasattr(distributions, name) for name in internal)  # the names still exist
    assert not internal & set(member_names(distributions))
    assert "distribution_from_logits" in member_names(distributions)
    assert not internal & (set(mspec.__all__) | set(ext.top_level_homes()))
    texts = rendered_sources()
    for name in internal:
        assert not any(name in text for where, text in texts.items() if where.startswith("book/api/")), name
        assert not any(f":func:`mspec.distributions.{name}`" in text for text in texts.values()), name


def test_the_leak_check_flags_crafted_docstrings():
    assert leaks("Checked by ``tests/test_traversal.py``.") == ["Checked by ``tests/test_traversal.py``."]
    assert leaks("see test_lp_hostile for the cases") != []
    assert leaks("written up for maintainers in ``ENGINEERING.md``") != []
    assert leaks("CI points it at ``../shared/data``") != []
    assert leaks("``smoke_test=True`` marks a quick run; the tests check the law.") == []
    crafted = type("Crafted", (), {"__doc__": "A scheme.", "__module__": "crafted"})
    module = type(sys)("crafted")
    module.Scheme, module.check_tokens = crafted, lambda: None
    module.check_tokens.__module__ = "crafted"
    assert member_names(module) == ["Scheme", "check_tokens"]  # not internal outside distributions
