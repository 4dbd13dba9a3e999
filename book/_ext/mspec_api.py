"""Sphinx extension for the book's API reference (``book/api/``): public names, and the command line.

**Objects under the names they are imported by.** ``mspec`` re-exports its public names
(``mspec.__all__``, and the sequence-level names it imports on first use, ``mspec._LAZY``);
a reader looks for ``mspec.make_scheme``, not ``mspec.registry.make_scheme``. So every
``.. automodule::`` with members documents such an object once, as ``mspec.<name>``, in the
module ``mspec`` imports it from (its *home*), first among the module's members; elsewhere
(its defining module, a module that re-exports it) a line links to that entry. The same
holds for the packages in ``PUBLIC_PACKAGES``: what their ``__all__`` lists is documented
under the package's name (``mspec.rounds.ROUND_RULES``), not again in their submodules.

Docstrings keep their cross-references as written: a reference that no longer resolves --
a module path such as ``mspec.registry.make_scheme``, or a short name written for the
context of the defining module (``:func:`bisect_rho``` in ``mspec.SpecTr``'s docstring) --
is resolved again under the public name and in the context of the module the object comes
from (``missing-reference``). What still fails is a nitpicky warning, as before.

**The command line.** ``.. mspec-command:: <program>`` documents a command from the very
``argparse`` parser that runs it (``python -m mspec``: ``mspec.__main__.demo_parser``;
``python -m mspec_lab``: ``mspec_lab.cli.overview_parser``; ``python -m mspec_lab <name>``:
``mspec_lab.cli.command_parser``): its description, its usage, and each option as a Sphinx
``option`` (searchable, in the index). The program gets the label ``cli_label(program)``;
the overview links every command of ``COMMANDS`` to it, so a command without its section
fails the nitpicky build.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
import re
import sys
from pathlib import Path
from unittest import mock

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.errors import PycodeError
from sphinx.ext.autodoc import DataDocumenter, FunctionDocumenter, ModuleDocumenter
from sphinx.ext.autosummary import Autosummary
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective
from sphinx.util.inspect import object_description
from sphinx.util.nodes import nested_parse_with_titles

REPO_ROOT = Path(__file__).resolve().parents[2]
#: packages whose ``__all__`` names are documented under the package (not in its submodules)
PUBLIC_PACKAGES = ("mspec.rounds", "mspec.fast.optimal_selection")
#: validators the package's modules call on their arguments, not part of the interface a reader
#: uses (a public function validates its own input): never documented, here or under ``mspec``
INTERNAL_NAMES = {"mspec.distributions": frozenset({"check_distribution", "check_draft_target",
                                                     "check_num_drafts", "check_tokens"})}
#: a value whose repr is longer is shown without it (its comment says what it holds)
MAX_VALUE_CHARS = 400
#: usage lines are wrapped to this width (the book's code blocks fit 88 characters)
USAGE_COLUMNS = 80


# -- public names ------------------------------------------------------------------------------
def top_level_homes() -> dict[str, str]:
    """``{name: module}`` for every public name of ``mspec``: the module ``mspec/__init__.py``
    imports it from (``from M import name``), or, for the names imported on first use, the
    module of ``mspec._LAZY`` (the documentation tooling may read it: it is what
    ``mspec.__getattr__`` serves)."""
    import mspec

    tree = ast.parse((REPO_ROOT / "mspec" / "__init__.py").read_text())
    homes = {alias.asname or alias.name: node.module for node in tree.body if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    missing = [name for name in mspec.__all__ if name not in homes]
    if missing:
        raise RuntimeError(f"mspec.__all__ names {missing}, which mspec/__init__.py does not import with "
                           "'from <module> import <name>': the API pages document each name in that module")
    homes = {name: homes[name] for name in mspec.__all__}
    homes.update(mspec._LAZY)  # noqa: SLF001 -- see the docstring
    return homes


def _kind(obj) -> str:
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if inspect.isroutine(obj):
        return "function"
    return "data"


class _Public:
    """Where each public object is documented, computed once per build."""

    def __init__(self):
        import mspec

        self.homes = top_level_homes()
        self.by_id: dict[int, str] = {}       # id(object) -> its public path
        self.home_of: dict[str, str] = {}     # public path -> module whose automodule documents it
        self.objects: dict[str, object] = {}  # public path -> object
        for name, home in self.homes.items():
            self._add(getattr(mspec, name), f"mspec.{name}", home)
        for package in PUBLIC_PACKAGES:
            module = importlib.import_module(package)
            for name in getattr(module, "__all__", []):
                obj = getattr(module, name)
                if id(obj) not in self.by_id:
                    self._add(obj, f"{package}.{name}", package)
        self._aliases: dict[str, str] | None = None

    def _add(self, obj, path: str, home: str) -> None:
        self.by_id[id(obj)] = path
        self.home_of[path] = home
        self.objects[path] = obj

    def path_of(self, obj) -> str | None:
        return self.by_id.get(id(obj))

    def is_public(self, obj) -> bool:
        """Whether ``obj`` has a public entry (then an automodule leaves it out of its members:
        its home module emits the entry, first)."""
        return id(obj) in self.by_id

    def aliases(self) -> dict[str, str]:
        """``{other path: public path}``: every module attribute bound to a public object
        (the defining module, re-exports), and each class's or function's own path."""
        if self._aliases is None:
            aliases = {}
            for modname, module in list(sys.modules.items()):
                if not modname.startswith(("mspec.", "mspec_lab.")) or module is None:
                    continue
                for attr, value in list(vars(module).items()):
                    path = self.by_id.get(id(value))
                    if path is not None and path != f"{modname}.{attr}":
                        aliases[f"{modname}.{attr}"] = path
            for path, obj in self.objects.items():
                own = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
                if inspect.isclass(obj) or inspect.isroutine(obj):
                    aliases.setdefault(own, path)
            self._aliases = aliases
        return self._aliases

    def rewrite(self, target: str) -> str | None:
        """``target`` with its longest aliased prefix replaced by the public path."""
        parts = target.split(".")
        aliases = self.aliases()
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in aliases:
                return ".".join([aliases[prefix], *parts[i:]])
        return None


#: the modules the book documents (``.. automodule::`` in its sources), read before the build
DOCUMENTED_MODULES: set[str] = set()


_PUBLIC: _Public | None = None


def public() -> _Public:
    """The public names, computed once the documented modules are imported (a build that
    reads no API page still resolves the references of the pages it writes)."""
    global _PUBLIC
    if _PUBLIC is None:
        for modname in sorted(DOCUMENTED_MODULES):
            importlib.import_module(modname)
        _PUBLIC = _Public()
    return _PUBLIC


class PublicNamesModuleDocumenter(ModuleDocumenter):
    """``automodule`` that documents public objects under their public names (see above)."""

    def document_members(self, all_members: bool = False) -> None:
        if self.options.members and self.modname != "mspec":
            self._public_entries()
        super().document_members(all_members)

    def _members_here(self) -> list[str]:
        """The module's member names: its ``__all__``, or what it defines, in source order."""
        if self.__all__ is not None:
            return list(self.__all__)
        order = self.analyzer.tagorder if self.analyzer else {}
        names = [name for name, value in vars(self.object).items() if not name.startswith("_")
                 and getattr(value, "__module__", None) == self.modname]
        return sorted(names, key=lambda name: order.get(name, len(order)))

    def _public_entries(self) -> None:
        pub, source = public(), self.get_sourcename()
        here = [(name, getattr(self.object, name)) for name in self._members_here() if hasattr(self.object, name)]
        homed = [path for path, home in pub.home_of.items() if home == self.modname]
        order = {path: i for i, path in enumerate(pub.path_of(obj) for _, obj in here)}
        for path in sorted(homed, key=lambda p: order.get(p, len(order))):
            self.add_line("", source)
            self.add_line(f".. auto{_kind(pub.objects[path])}:: {path}", source)
        elsewhere = [target for name, obj in here if (target := documented_elsewhere(obj, name, self.modname))]
        if elsewhere:
            refs = ", ".join(f":py:obj:`{path}`" for path in dict.fromkeys(elsewhere))
            self.add_line("", source)
            self.add_line(f"Also importable from here: {refs}.", source)
        self.add_line("", source)

    def filter_members(self, members, want_all):
        """The members autodoc keeps, less the public objects and re-exports (listed by
        ``_public_entries``); with an ``__all__``, every name it lists, documented or not (a
        module's ``__all__`` is what its API section shows)."""
        pub, undoc = public(), self.options.undoc_members
        if self.__all__ is not None:
            self.options.undoc_members = True
        try:
            kept = super().filter_members(members, want_all)
        finally:
            self.options.undoc_members = undoc
        # a value without a ``#:`` comment is documented as data too (autodoc leaves it out)
        internal = INTERNAL_NAMES.get(self.modname, frozenset())
        return [(name, obj, isattr or (self.__all__ is not None and _kind(obj) == "data"
                                       and not inspect.ismodule(obj)))
                for name, obj, isattr in kept if not pub.is_public(obj) and name not in internal
                and not documented_elsewhere(obj, name, self.modname)]


def note_documented_modules(app, env, docnames) -> None:
    """``env-before-read-docs``: every module an ``automodule`` of the book documents."""
    for docname in env.found_docs:
        path = Path(env.doc2path(docname))
        if path.suffix == ".md" and path.is_file():
            DOCUMENTED_MODULES.update(re.findall(r"^\.\. automodule:: (\S+)", path.read_text(), re.M))


def _assigned_in(modname: str, name: str) -> bool:
    try:
        analyzer = ModuleAnalyzer.for_module(modname)
        return ("", name) in analyzer.find_attr_docs()
    except PycodeError:
        return False


def documented_elsewhere(obj, name: str, modname: str) -> str | None:
    """The path under which ``obj``, a member ``name`` of module ``modname``, is documented
    elsewhere: its public name (``mspec.SpecTr``), or, for a re-export, its entry in the
    documented module that defines it (a class or function) or assigns it with a ``#:``
    comment (a value); ``None``: it is documented here."""
    pub = public()
    if pub.is_public(obj):
        path = pub.path_of(obj)
        return None if pub.home_of[path] == modname else path
    if inspect.isclass(obj) or inspect.isroutine(obj):
        home = getattr(obj, "__module__", None)
        listed = getattr(sys.modules.get(home), "__all__", None)
        if home != modname and home in DOCUMENTED_MODULES and (listed is None or obj.__name__ in listed):
            return f"{home}.{obj.__qualname__}"
        return None
    if inspect.ismodule(obj) or _assigned_in(modname, name):
        return None
    for other in sorted(DOCUMENTED_MODULES - {modname}):
        module = sys.modules.get(other)
        if module is not None and vars(module).get(name) is obj and _assigned_in(other, name):
            return f"{other}.{name}"
    return None


def _own_path(obj, name: str, fullname: str) -> str | None:
    """Where a public object lives, when it is documented under its public name ``fullname``:
    its defining module's path (a class or function), or the module that assigns it with a
    ``#:`` comment (a value); ``None`` if that is ``fullname`` or no other name is known."""
    if fullname not in public().objects:
        return None
    if inspect.isclass(obj) or inspect.isroutine(obj):
        own = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    else:
        owners = [modname for modname, module in sorted(sys.modules.items())
                  if modname.startswith(("mspec.", "mspec_lab.")) and module is not None
                  and vars(module).get(name) is obj and _assigned_in(modname, name)]
        own = f"{owners[0]}.{name}" if owners else fullname
    return None if own == fullname else own


class PublicFunctionDocumenter(FunctionDocumenter):
    """``autofunction`` of a public name (``mspec.speculative_generate``) that also answers to
    its own path (``mspec.lm.decoding.speculative_generate``), as autodoc does for classes."""

    def add_directive_header(self, sig: str) -> None:
        super().add_directive_header(sig)
        own = _own_path(self.object, self.objpath[-1], ".".join([self.modname, *self.objpath]))
        if own:
            self.add_line(f"   :canonical: {own}", self.get_sourcename())


class PublicDataDocumenter(DataDocumenter):
    """``autodata`` of a re-exported value (``mspec.SCHEMES``, ``mspec_lab.experiments.inputs.DATASETS``):
    its ``#:`` comment is read where it is assigned (``mspec/registry.py``), under the same name."""

    def add_directive_header(self, sig: str) -> None:
        super().add_directive_header(sig)
        own = _own_path(self.object, self.objpath[-1], ".".join([self.modname, *self.objpath]))
        if own:  # mspec.SCHEMES answers to mspec.registry.SCHEMES
            self.add_line(f"   :canonical: {own}", self.get_sourcename())

    def should_suppress_value_header(self) -> bool:
        """Long values (the built-in prompts, the command table) are not spelled out."""
        return super().should_suppress_value_header() or len(object_description(self.object)) > MAX_VALUE_CHARS

    def get_doc(self):
        """The value's ``#:`` comment, never the docstring of its type (``tuple``, ``dict``)."""
        comment = self.get_module_comment(self.objpath[-1])
        return [comment] if comment else []

    def get_module_comment(self, attrname: str):
        comment = super().get_module_comment(attrname)
        if comment:
            return comment
        obj = self.object
        for modname, module in sorted(sys.modules.items()):
            if not modname.startswith(("mspec.", "mspec_lab.")) or module is None:
                continue
            for name, value in list(vars(module).items()):
                if value is obj and name == attrname:
                    try:
                        analyzer = ModuleAnalyzer.for_module(modname)
                        analyzer.analyze()
                    except PycodeError:
                        continue
                    if ("", name) in analyzer.attr_docs:
                        return list(analyzer.attr_docs[("", name)])
        return None


# -- docstrings: fields napoleon leaves to be misread ----------------------------------------------
_IVAR_NAMES = re.compile(r"^(\s*):ivar (\w+(?:,\s*\w+)+):(.*)$")
_BUILTIN_TYPES = {"int", "float", "str", "bool", "bytes", "dict", "list", "tuple", "set", "frozenset", "object",
                  "complex", "type", "callable"}
_PLAIN_TYPE = re.compile(r"[\w.]+(?:\[[\w., |]*\])?(?:\s*\|\s*[\w.]+(?:\[[\w., |]*\])?)*")


_PROSE_COMMENTS: dict[str, list[str]] = {}


def split_attribute_fields(app, what, name, obj, options, lines) -> None:
    """After napoleon: ``Attributes:`` entries naming several fields (``a, b: their meaning``)
    become one ``:ivar:`` per field with the shared text (Sphinx would read ``a,`` as a type);
    a prose comment (``keep_prose_comments``) gets its own lines back."""
    if name in _PROSE_COMMENTS:
        lines[:] = _PROSE_COMMENTS.pop(name)
        return
    out, i = [], 0
    while i < len(lines):
        match = _IVAR_NAMES.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent, names, text = match.groups()
        more = []
        i += 1
        while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > len(indent):
            more.append(indent + "   " + lines[i].strip())
            i += 1
        for field in (n.strip() for n in names.split(",")):
            out += [f"{indent}:ivar {field}:{text}", *more]
    lines[:] = out


def keep_prose_comments(app, what, name, obj, options, lines) -> None:
    """Before napoleon: a data comment whose first sentence holds a colon (``#: rows of our
    Table 3, in print order: ...``) is prose, not ``type: description``; napoleon would show
    the words before the colon as the value's type: it keeps its lines (``split_attribute_fields``
    puts them back)."""
    if what not in ("data", "attribute") or not lines or ":" not in lines[0]:
        return
    head = lines[0].split(":", 1)[0].strip()
    if head and not is_type(head):
        _PROSE_COMMENTS[name] = list(lines)


def is_type(text: str) -> bool:
    """Whether ``text`` (before a comment's first colon) reads as a type: ``int``,
    ``dict[str, float]``, ``np.ndarray``, ``Path | None`` -- not ``goal`` or ``rows of ...``."""
    return bool(_PLAIN_TYPE.fullmatch(text)) and (
        text in _BUILTIN_TYPES or text[0].isupper() or any(c in text for c in ".[|"))


# -- cross-references written for another context -----------------------------------------------
def _entry_contexts(node) -> list[str]:
    """Modules whose context a docstring was written in: for a reference inside the entry of a
    public object, the module that documents it and the module that defines it."""
    pub, parent = public(), node.parent
    while parent is not None and not isinstance(parent, addnodes.desc):
        parent = parent.parent
    if parent is None:
        return _row_contexts(node)
    signatures = [child for child in parent.children if isinstance(child, addnodes.desc_signature)]
    if not signatures or not signatures[0].get("module"):
        return []
    modname, name = signatures[0]["module"], signatures[0].get("fullname", "").split(".")[0]
    head = f"{modname}.{name}"
    if head in pub.objects:
        obj, contexts = pub.objects[head], [pub.home_of[head]]
    else:
        obj, contexts = getattr(sys.modules.get(modname), name, None), []
    if obj is None:
        return contexts
    contexts.append(getattr(obj, "__module__", None) if inspect.isclass(obj) or inspect.isroutine(obj) else None)
    # a re-exported value's comment was written where it is assigned, under the same name
    contexts += [other for other, module in sorted(sys.modules.items()) if other.startswith(("mspec.", "mspec_lab."))
                 and module is not None and vars(module).get(name) is obj]
    return list(dict.fromkeys(filter(None, contexts)))


def _row_contexts(node) -> list[str]:
    """For a reference in the summary of an ``autosummary`` table row: the modules of the
    object the row names (its first cell)."""
    row = node.parent
    while row is not None and not isinstance(row, nodes.row):
        row = row.parent
    if row is None:
        return []
    name = row.children[0].astext().strip() if row.children else ""
    pub, contexts = public(), []
    if name in pub.objects:
        obj = pub.objects[name]
        contexts += [pub.home_of[name], getattr(obj, "__module__", None)]
    parts = name.split(".")
    contexts += [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1) if ".".join(parts[:i]) in sys.modules]
    return list(dict.fromkeys(filter(None, contexts)))


def python_paths(modname: str, cls: str | None, target: str) -> list[str]:
    """Where ``target``, written in module ``modname`` (class ``cls``), points to as Python sees
    it there: a name the module imports (``RowBudget`` in a module that imports it from
    ``mspec_lab.experiments.results``) is documented where it is defined, or under another
    module's name bound to the same object (a constant)."""
    module = sys.modules.get(modname)
    if module is None or not target:
        return []
    head, _, rest = target.partition(".")
    scopes = [getattr(module, cls, None)] if cls else []
    obj = None
    for scope in [*scopes, module]:
        if scope is not None and hasattr(scope, head):
            obj = getattr(scope, head)
            break
    if obj is None:
        return []
    paths = []
    if inspect.ismodule(obj):
        paths.append(obj.__name__)
    elif getattr(obj, "__module__", None) and getattr(obj, "__qualname__", None):
        paths.append(f"{obj.__module__}.{obj.__qualname__}")
    paths += [f"{name}.{head}" for name, other in sorted(sys.modules.items())
              if name.startswith(("mspec.", "mspec_lab.")) and other is not None
              and getattr(other, head, None) is obj]
    return [f"{path}.{rest}" if rest else path for path in paths]


def resolve_public(app, env, node, contnode):
    """``missing-reference``: resolve a Python reference under the public name, or in the
    context of the module the documented object comes from."""
    if node.get("refdomain") != "py":
        return None
    target, cls = node["reftarget"], node.get("py:class")
    contexts = [node.get("py:module"), *_entry_contexts(node)]
    candidates = [target]
    for module in filter(None, dict.fromkeys(contexts)):
        candidates += [f"{module}.{target}"] + ([f"{module}.{cls}.{target}"] if cls else [])
    for module in filter(None, dict.fromkeys(contexts)):
        candidates += python_paths(module, cls, target)
    parts = target.split(".")  # a full path: the longest module prefix, the rest inside it
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) in sys.modules:
            candidates += python_paths(".".join(parts[:i]), None, ".".join(parts[i:]))
            break
    domain = env.get_domain("py")
    for candidate in dict.fromkeys(candidates):
        for name in filter(None, (candidate, public().rewrite(candidate))):
            stub = node.deepcopy()
            stub["py:module"] = stub["py:class"] = None
            stub.attributes.pop("refspecific", None)
            found = domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], name, stub, contnode)
            if found is not None:
                return found
    return None


# -- the command line ---------------------------------------------------------------------------
def cli_label(program: str) -> str:
    """The label of a program's section: ``python -m mspec_lab gpu`` -> ``cli-python-m-mspec-lab-gpu``."""
    return "cli-" + re.sub(r"[^a-z0-9]+", "-", program.lower()).strip("-")


def parser_for(program: str) -> argparse.ArgumentParser:
    """The parser that runs ``program``."""
    words = program.split()
    if words[:2] != ["python", "-m"] or len(words) not in (3, 4):
        raise ValueError(f"not a program of the book: {program!r} (python -m mspec | mspec_lab [<command>])")
    if words[2] == "mspec" and len(words) == 3:
        from mspec.__main__ import demo_parser

        return demo_parser()
    if words[2] == "mspec_lab":
        from mspec_lab import cli

        return cli.overview_parser() if len(words) == 3 else cli.command_parser(words[3])
    raise ValueError(f"not a program of the book: {program!r}")


def index_program(prog: str) -> str:
    """The program's name in the index of options: the workshop's console script
    (``mspec-lab gpu``) rather than ``python -m mspec_lab gpu``, whose spaces Sphinx turns
    into dashes."""
    return re.sub(r"^python -m mspec_lab\b", "mspec-lab", prog)


_RST_SPECIAL = re.compile(r"([\\*`|_])")


def rst_text(text: str) -> str:
    """Plain text as rST inline text: markup characters escaped, whitespace folded, and ``--``
    escaped so that Sphinx's smart quotes keep an option's ``--help`` (not an en dash)."""
    return _RST_SPECIAL.sub(r"\\\1", " ".join(str(text).split())).replace("--", "\\-\\-")


#: choices longer than this (joined) are listed in an option's text, not in its signature
MAX_SIGNATURE_CHOICES = 24


def _choices_in_signature(action: argparse.Action) -> bool:
    return action.metavar is None and action.choices is not None \
        and len(",".join(map(str, action.choices))) <= MAX_SIGNATURE_CHOICES


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if _choices_in_signature(action):
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def invocation(action: argparse.Action) -> str:
    """How an option is written, as argparse's help writes it: ``--drafts DRAFTS [DRAFTS ...]``."""
    m, nargs = _metavar(action), action.nargs
    args = {None: m, "?": f"[{m}]", "*": f"[{m} ...]", "+": f"{m} [{m} ...]", 0: ""}.get(
        nargs, " ".join([m] * nargs) if isinstance(nargs, int) else m)
    names = ", ".join(action.option_strings) or m
    return f"{names} {args}".strip() if action.option_strings else names


def help_text(action: argparse.Action, prog: str) -> str:
    """An option's help with argparse's ``%(default)s``-style fields filled in, and its default
    and choices where the help does not give them."""
    params = {key: value for key, value in vars(action).items() if value is not argparse.SUPPRESS}
    params["prog"] = prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    text = (action.help or "") % params
    if action.choices is not None and not _choices_in_signature(action) and "choose" not in text:
        text += f" (one of: {', '.join(map(str, action.choices))})"
    default = action.default
    if not (default is None or default is False or default is argparse.SUPPRESS or default in ([], ())) \
            and "default" not in text.lower() and action.nargs != 0:
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        text += f"{'. ' if text else ''}Default: {shown}"
    return text


def usage_lines(parser: argparse.ArgumentParser, width: int = USAGE_COLUMNS) -> list[str]:
    """argparse's usage line, wrapped to ``width`` between its bracketed groups (argparse
    aligns continuation lines under the program's name, which makes them too wide); a group
    wider than a line (``--only`` with all its choices) is wrapped within."""
    with mock.patch.dict(os.environ, {"COLUMNS": "100000"}):  # one line: argparse does not wrap
        usage = " ".join(parser.format_usage().split())
    groups, depth, start = [], 0, 0
    for i, char in enumerate(usage + " "):
        depth += (char in "[{(") - (char in "]})")
        if char == " " and depth == 0:
            if usage[start:i]:
                groups.append(usage[start:i])
            start = i + 1
    lines = [""]
    for group in groups:
        wide = len(group) > width - 4
        for k, piece in enumerate(group.split(" ") if wide else [group]):
            if lines[-1].strip() and (len(lines[-1]) + 1 + len(piece) > width or wide and not k):
                lines.append("      " if k else "    ")
            lines[-1] += (" " if lines[-1].strip() else "") + piece
    return lines


def parser_rst(parser: argparse.ArgumentParser, *, links: bool = True) -> list[str]:
    """rST lines documenting ``parser``: description, usage, options (``-h`` left out: every
    program takes it) by group, sub-commands (linked to their sections), epilog."""
    lines = []
    if parser.description:
        lines += [rst_text(parser.description), ""]
    lines += [".. code-block:: text", "", *("   " + line for line in usage_lines(parser)), ""]
    lines += [f".. program:: {index_program(parser.prog)}", ""]
    for group in parser._action_groups:  # noqa: SLF001 -- argparse keeps its groups there
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]  # noqa: SLF001
        if not actions:
            continue
        if group.title not in ("options", "optional arguments", "positional arguments"):
            lines += [f".. rubric:: {rst_text(group.title)}", ""]
        for action in actions:
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                lines += _subcommand_rst(parser, action, links)
                continue
            lines += [f".. option:: {invocation(action)}", ""]
            text = help_text(action, parser.prog)
            if text:
                lines += [f"   {rst_text(text)}", ""]
    if parser.epilog:
        lines += [rst_text(parser.epilog), ""]
    return lines


def _subcommand_rst(parser, action, links: bool) -> list[str]:
    lines = []
    for choice in action._choices_actions:  # noqa: SLF001 -- the sub-commands' help lines
        program = f"{parser.prog} {choice.dest}"
        name = f":ref:`{choice.dest} <{cli_label(program)}>`" if links else f"``{choice.dest}``"
        lines += [f"* {name}: {rst_text(choice.help or '')}"]
    return lines + [""]


class CommandDirective(SphinxDirective):
    """``.. mspec-command:: python -m mspec_lab <command>``: the program's options, from its parser."""

    required_arguments = 1
    final_argument_whitespace = True

    def run(self):
        program = " ".join(self.arguments[0].split())
        try:
            parser = parser_for(program)
        except (ValueError, KeyError) as error:
            raise self.error(f"mspec-command: {error}") from error
        label = cli_label(program)
        self.env.get_domain("std").note_hyperlink_target(label, self.env.docname, label, program)
        lines = parser_rst(parser) + self._notes(program)
        container = nodes.container(classes=["mspec-command"])
        nested_parse_with_titles(self.state, StringList(lines, source=f"<argparse of {program}>"), container)
        return [nodes.target("", "", ids=[label]), *container.children]

    def _notes(self, program: str) -> list[str]:
        from mspec_lab.cli import OPTIONAL_PACKAGES
        from mspec_lab.commands import COMMANDS, RENAMED_COMMANDS

        words = program.split()
        if words[2:] == ["mspec_lab"]:
            renamed = ", ".join(f"``{old}`` (now ``{new}``)" for old, new in RENAMED_COMMANDS.items())
            return [f"Former names stop with one line naming the command to run: {renamed}.", ""]
        if len(words) == 4:
            packages = COMMANDS[words[3]].packages
            extras = sorted({OPTIONAL_PACKAGES[p][1] for p in packages if p in OPTIONAL_PACKAGES})
            if packages:
                return [f"Needs the optional packages {', '.join(f'``{p}``' for p in packages)} (``pip install "
                        f"\"mspec[{','.join(extras)}]\"``); without them it says so and exits with status 2.", ""]
        return []


class PublicAutosummary(Autosummary):
    """``autosummary`` whose rows of data (``mspec.SCHEMES``) summarise the ``#:`` comment, not
    the value's type (``PublicDataDocumenter``)."""

    def create_documenter(self, app, obj, parent, full_name):
        documenter = super().create_documenter(app, obj, parent, full_name)
        if type(documenter) is DataDocumenter:
            return PublicDataDocumenter(self.bridge, full_name)
        return documenter


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    app.add_autodocumenter(PublicNamesModuleDocumenter, override=True)
    app.add_autodocumenter(PublicDataDocumenter, override=True)
    app.add_autodocumenter(PublicFunctionDocumenter, override=True)
    app.connect("autodoc-process-docstring", keep_prose_comments, priority=400)  # napoleon: 500
    app.connect("autodoc-process-docstring", split_attribute_fields, priority=600)
    app.connect("missing-reference", resolve_public)
    app.connect("env-before-read-docs", note_documented_modules)
    app.add_directive("mspec-command", CommandDirective)
    app.setup_extension("sphinx.ext.autosummary")
    app.add_directive("autosummary", PublicAutosummary, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
