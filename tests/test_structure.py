"""The shape of the code base: rules a reader relies on, checked on every run.

* **No import cycles** between the modules of :mod:`mspec` and :mod:`mspec_lab`
  (module-level and function-level imports, relative and absolute), so every module can be
  read after the ones it imports; and the library never imports the workshop.
* **Rooms**: the algorithms are in folders (``schemes/``, ``fast/``, ``rounds/``, ``lm/``),
  at most :data:`MAX_LOOSE_MODULES` modules at the top of :mod:`mspec`, no module over
  :data:`MAX_MODULE_LINES` lines and the library at most :data:`MAX_PACKAGE_LINES` lines.
* **Short functions**: at most :data:`MAX_FUNCTION_LINES` lines from ``def`` to the last
  line, unless a comment ``# long: <reason>`` on the line before the ``def`` (or its
  decorators) or on its first body line says why it is longer.
* **Plain wording**: no file speaks of how the work was handed out; the code and the book
  state the mathematics.

Files still being reworked are listed in :data:`PENDING_LONG_FUNCTIONS` and
:data:`PENDING_WORDING` with what removes them; their check is
expected to fail (``xfail``; reported as ``XPASS`` once it passes, so the entry can go).
Likewise :data:`PENDING_IMPORTS` names the imports the cycle check leaves out for now.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mspec"
#: the library and the workshop beside it (experiments, benchmarks, model presets)
PACKAGES = ("mspec", "mspec_lab")
#: the library's rooms
ROOMS = ("schemes", "fast", "rounds", "lm")
#: the paper's room (``schemes/``) stays a sitting's read: at most this many lines
MAX_PAPER_LINES = 3_000
#: modules allowed at the top of the library, ``__init__.py`` not counted
MAX_LOOSE_MODULES = 4
#: longest module (lines), and the whole library
MAX_MODULE_LINES = 800
MAX_PACKAGE_LINES = 10_000

#: longest function allowed without a ``# long: <reason>`` comment
MAX_FUNCTION_LINES = 60
#: the comment that allows a longer function
LONG_MARK = re.compile(r"#\s*long:\s*\S")

#: phrases about how the work was assigned (matched case-insensitively, as whole words)
ASSIGNMENT_PHRASES = ("the brief", "brief we were given", "goal (issue)", "the issue says", "issue #")
#: what the wording check reads
WORDING_SCOPE = ("mspec", "mspec_lab", "tests", "book", "notebooks", "README.md", "CONTRIBUTING.md")
#: folders the wording check skips (build output, version control)
SKIPPED_DIRS = {"_build", ".git", "__pycache__", ".ipynb_checkpoints"}

# Files still being reworked, each with the clean-up item that removes its entry. Their
# check is expected to fail; pytest reports XPASS once it passes: then delete the entry.
#: files with functions over the limit -> what removes the entry
PENDING_LONG_FUNCTIONS = {
}
#: files that speak of how the work was assigned -> what removes the entry
PENDING_WORDING: dict = {}
#: imports left out of the cycle check -> what removes the entry
PENDING_IMPORTS: dict = {}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _param(path: Path, pending: dict[str, str]):
    """``path`` as a test parameter, expected to fail while it is listed in ``pending``."""
    rel = _rel(path)
    marks = [pytest.mark.xfail(reason=pending[rel], strict=False)] if rel in pending else []
    return pytest.param(path, id=rel, marks=marks)


# --- import graph -------------------------------------------------------------------------

def module_name(path: Path, root: Path = ROOT) -> str:
    """``mspec_lab/bench/common.py`` -> ``mspec_lab.bench.common``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the packages :data:`PACKAGES` under ``root``, by dotted name."""
    return {module_name(path, root): path for package in PACKAGES for path in sorted((root / package).rglob("*.py"))}


def imported_modules(name: str, path: Path, modules: set[str]) -> set[str]:
    """The :mod:`mspec` modules that module ``name`` imports, anywhere in its code.

    ``from X import y`` imports the module ``X.y`` when there is one, else (a name defined
    in ``X``) the module ``X``; relative imports are resolved against the module's package.
    The implicit import of parent packages is not counted (every module would then depend
    on ``mspec``).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # `from ..x import y` in package a.b: a.x
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {target for target in found if target in modules and target != name}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``module -> modules it imports``, over the modules of the package ``root/mspec``."""
    modules = package_modules(root)
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def shortest_path(graph: dict[str, set[str]], source: str, target: str) -> list[str] | None:
    """Shortest import chain ``[source, ..., target]`` of at least one step, or None (breadth first)."""
    came_from = {}
    queue = [source]
    for node in queue:
        for child in sorted(graph[node]):
            if child == target:
                chain = [node]
                while chain[-1] != source:
                    chain.append(came_from[chain[-1]])
                return chain[::-1] + [target]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    return None


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles ``[a, b, ..., a]``: the shortest through each module not yet on one."""
    cycles, on_a_cycle = [], set()
    for module in sorted(graph):
        cycle = None if module in on_a_cycle else shortest_path(graph, module, module)
        if cycle:
            cycles.append(cycle)
            on_a_cycle.update(cycle)
    return cycles


def test_the_cycle_finder(tmp_path):
    """The checker itself: relative, absolute and function-level imports, and cycles."""
    package = tmp_path / "mspec"
    (package / "sub").mkdir(parents=True)
    sources = {
        "__init__.py": "from .a import f\n",
        "a.py": "import numpy\nfrom mspec.sub import g\n",
        "sub/__init__.py": "from .b import g\n",
        "sub/b.py": "def g():\n    from .. import a  # a function-level import closes a -> sub -> sub.b -> a\n",
    }
    for name, text in sources.items():
        (package / name).write_text(text)
    graph = import_graph(tmp_path)
    assert graph == {"mspec": {"mspec.a"}, "mspec.a": {"mspec.sub"}, "mspec.sub": {"mspec.sub.b"},
                     "mspec.sub.b": {"mspec.a"}}
    assert find_cycles(graph) == [["mspec.a", "mspec.sub", "mspec.sub.b", "mspec.a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = import_graph()
    for (module, imported), reason in PENDING_IMPORTS.items():
        if imported in graph[module]:
            graph[module].discard(imported)
            print(f"left out: {module} -> {imported} ({reason})")
    cycles = find_cycles(graph)
    report = "\n".join(" -> ".join(cycle) for cycle in cycles)
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports between them")
    print(report or "no import cycles")
    assert not cycles, f"import cycles between mspec modules:\n{report}"


def test_the_library_never_imports_the_workshop():
    graph = import_graph()
    wrong = sorted(f"{module} -> {imported}" for module, targets in graph.items() if module.split(".")[0] == "mspec"
                   for imported in targets if imported.split(".")[0] == "mspec_lab")
    assert not wrong, f"mspec must not import mspec_lab (move the code, or pass it in): {wrong}"


# --- rooms and sizes ------------------------------------------------------------------------

def test_the_library_is_in_rooms():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, f"modules at the top of mspec/: {loose}; move them into a room"
    for room in ROOMS:
        assert (PACKAGE / room / "__init__.py").is_file(), room


def private_imports(source: str, packages=PACKAGES) -> list[str]:
    """Underscore names a module takes from another module of the packages: ``from m import
    _x``, or ``m._x`` on an imported module ``m`` (dunder names aside)."""
    tree, modules, found = ast.parse(source), {}, []

    def private(name):
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in packages:
            for alias in node.names:
                if private(alias.name):
                    found.append(f"{node.module}.{alias.name}")
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            modules.update({a.asname or a.name.split(".")[0]: a.name for a in node.names
                            if a.name.split(".")[0] in packages})
    found += [f"{modules[n.value.id]}.{n.attr}" for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and private(n.attr) and isinstance(n.value, ast.Name)
              and n.value.id in modules]
    return found


def test_rooms_talk_through_public_names():
    """No module of the library or the workshop uses an underscore name of another module:
    what crosses a module's border is public, documented where it lives."""
    found = {_rel(p): names for p in package_modules().values() if (names := private_imports(p.read_text()))}
    assert not found, f"make these public (no leading underscore) or keep them in their module: {found}"
    # the rule can fire, both ways
    assert private_imports("from mspec.lm.cache import _x\n") == ["mspec.lm.cache._x"]
    assert private_imports("from mspec.lm import cache\ncache._y()\n") == ["mspec.lm.cache._y"]
    assert not private_imports("from numpy import _z\nimport mspec\nmspec.__name__\n")


def test_modules_and_the_library_are_small():
    sizes = {_rel(p): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    big = {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES}
    print(f"mspec/: {sum(sizes.values())} lines in {len(sizes)} modules; largest "
          f"{max(sizes, key=sizes.get)} ({max(sizes.values())})")
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split them): {big}"
    assert sum(sizes.values()) <= MAX_PACKAGE_LINES, "mspec/ is over its size: move workshop code to mspec_lab/"


def test_the_paper_stands_alone_in_schemes():
    """``mspec/schemes/`` holds the paper and its exact references, small enough to read in one
    sitting, and imports nothing of the faster paths or the registry above it; the fast paths
    build on it, and the registry sits above both."""
    paper = sorted((PACKAGE / "schemes").rglob("*.py"))
    lines = sum(len(p.read_text().splitlines()) for p in paper)
    assert lines <= MAX_PAPER_LINES, f"mspec/schemes/ is {lines} lines; move what is not the paper to mspec/fast/"
    graph = import_graph()
    upward = sorted(f"{module} -> {imported}" for module, targets in graph.items()
                    if module.startswith("mspec.schemes") for imported in targets
                    if imported.startswith(("mspec.fast", "mspec.registry", "mspec.rounds", "mspec.lm")))
    assert not upward, f"the paper's room must not import the rooms above it: {upward}"
    assert any(t.startswith("mspec.schemes") for t in graph["mspec.fast.spectr_newton"])
    assert {"mspec.fast.spectr_newton", "mspec.schemes.importance"} <= set(graph["mspec.registry"])


#: public names two modules may both define: the command-line entry points (``python -m``)
SHARED_NAMES = {"main"}


def public_definitions(path: Path) -> list[str]:
    """The public names a module defines at its top level (functions, classes, constants)."""
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


def test_one_meaning_per_name():
    """No two modules of the library and the workshop define the same public name: a name
    found in the docs or a traceback opens one file."""
    homes: dict[str, list[str]] = {}
    for path in package_modules().values():
        for name in public_definitions(path):
            homes.setdefault(name, []).append(_rel(path))
    shared = {name: paths for name, paths in homes.items() if len(paths) > 1 and name not in SHARED_NAMES}
    assert not shared, f"public names defined in more than one module (rename one): {shared}"


# --- function length ------------------------------------------------------------------------

def long_functions(path: Path) -> list[str]:
    """``name (lines, line number)`` of each function over the limit without a ``# long:`` reason."""
    lines = path.read_text().splitlines()
    found = []
    for node in ast.walk(ast.parse("\n".join(lines), filename=str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = node.end_lineno - node.lineno + 1
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        marked = {lines[n - 2] for n in (first, node.lineno) if n >= 2} | {lines[node.body[0].lineno - 1]}
        if length > MAX_FUNCTION_LINES and not any(LONG_MARK.search(line) for line in marked):
            found.append(f"{node.name} ({length} lines, line {node.lineno})")
    return found


@pytest.mark.parametrize("path", [_param(p, PENDING_LONG_FUNCTIONS) for package in PACKAGES
                                  for p in sorted((ROOT / package).rglob("*.py"))])
def test_functions_are_short(path):
    long = long_functions(path)
    assert not long, f"{_rel(path)}: over {MAX_FUNCTION_LINES} lines without '# long: <reason>': {long}"


# --- wording --------------------------------------------------------------------------------

def wording_files() -> list[Path]:
    """The text files of :data:`WORDING_SCOPE`, this file excepted (it names the phrases)."""
    files = []
    for entry in WORDING_SCOPE:
        top = ROOT / entry
        candidates = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in candidates:
            if path.is_file() and not SKIPPED_DIRS & set(path.relative_to(ROOT).parts):
                files.append(path)
    return [path for path in files if path != Path(__file__).resolve()]


def phrase_pattern(phrase: str) -> str:
    """A regex for ``phrase`` as whole words: any run of white space (a line break in a
    wrapped docstring) between its words, and no letter just before or after it."""
    words = r"\s+".join(re.escape(word) for word in phrase.split())
    return rf"(?<!\w){words}" + (r"(?!\w)" if phrase[-1].isalnum() else "")


ASSIGNMENT_WORDS = re.compile("|".join(map(phrase_pattern, ASSIGNMENT_PHRASES)), re.IGNORECASE)


def assignment_words(text: str) -> list[str]:
    """``line n: 'words'`` for each phrase of :data:`ASSIGNMENT_PHRASES` in ``text``."""
    return [f"line {text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}"
            for match in ASSIGNMENT_WORDS.finditer(text)]


def test_the_length_and_wording_checks(tmp_path):
    """The checkers themselves: a long function needs its reason, and wrapped phrases are found."""
    body = "".join(f"    x{n} = {n}\n" for n in range(MAX_FUNCTION_LINES))
    path = tmp_path / "module.py"
    path.write_text(f"def too_long():\n{body}\n\n# long: a table\ndef allowed():\n{body}")
    assert long_functions(path) == [f"too_long ({MAX_FUNCTION_LINES + 1} lines, line 1)"]
    assert assignment_words("ok\nas The\n   brief said") == ["line 2: 'The\\n   brief'"]
    assert assignment_words("the briefly stated issue #") == ["line 1: 'issue #'"]


@pytest.mark.parametrize("path", [_param(p, PENDING_WORDING) for p in wording_files()])
def test_no_words_about_how_work_was_assigned(path):
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # a binary file (an image): no words
        return
    hits = assignment_words(text)
    assert not hits, f"{_rel(path)} speaks of how the work was assigned ({', '.join(hits)}); state the mathematics instead"



#: what makes a test model-dependent: it runs a language model or torch kernels
MODEL_SIGNS = re.compile(r"^\s*(import torch|from torch)|importorskip\(\"torch\"\)|load_pair\(|ForCausalLM",
                         re.MULTILINE)
MODEL_MARK = "pytestmark = pytest.mark.model"


def unmarked_model_tests(source: str) -> list[str]:
    """Tests of a module that run models but are not marked ``model`` (by the module's
    ``pytestmark`` or their own ``@pytest.mark.model``); ``["<module>"]`` when the module's
    own imports need the module mark."""
    if MODEL_MARK in source:
        return []
    tree = ast.parse(source)
    top = "\n".join(ast.get_source_segment(source, n) for n in tree.body
                    if isinstance(n, (ast.Import, ast.ImportFrom)))
    if MODEL_SIGNS.search(top):
        return ["<module>"]
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
            and MODEL_SIGNS.search(ast.get_source_segment(source, n))
            and "pytest.mark.model" not in [ast.unparse(d) for d in n.decorator_list]]


def test_every_model_dependent_test_is_marked_for_the_second_kernel_path():
    """CI runs the tests marked ``model`` again on other CPU kernels (``.ci/run``): a test
    that runs a model or torch kernels is marked, by its module or by itself."""
    unmarked = {p.name: found for p in sorted((ROOT / "tests").glob("test_*.py"))
                if (found := unmarked_model_tests(p.read_text()))}
    assert not unmarked, f"mark these with `{MODEL_MARK}` or `@pytest.mark.model`: {unmarked}"
    # the rule can fire, both ways
    assert unmarked_model_tests("import torch\n") == ["<module>"]
    assert unmarked_model_tests("def test_a():\n    load_pair('tiny')\n") == ["test_a"]
    assert not unmarked_model_tests("@pytest.mark.model\ndef test_a():\n    load_pair('tiny')\n")
