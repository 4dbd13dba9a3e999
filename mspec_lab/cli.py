"""Command line: ``python -m mspec_lab <command> [options]`` (``--help`` lists the commands).

Every command is always listed (:data:`mspec_lab.commands.COMMANDS`). One that needs an
optional package that is not installed stops with exit status 2 and says which package is
missing and the ``pip`` command that installs it. Exit status 3: a sweep stopped by
``--max-rows`` (rerun the same command to resume). A former name of a command
(``mspec_lab.commands.RENAMED_COMMANDS``) stops with exit status 2 and a one-line message that
names the command to run instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from mspec_lab.commands import COMMANDS, RENAMED_COMMANDS

__all__ = ["COMMANDS", "OPTIONAL_PACKAGES", "command_parser", "main", "missing_packages", "overview_parser",
           "renamed_message"]

#: the optional packages a command may need: import name -> (distribution, extra of mspec
#: that installs it), as in pyproject.toml (a test keeps the two in step)
OPTIONAL_PACKAGES = {
    "torch": ("torch", "lm"), "transformers": ("transformers", "lm"), "gguf": ("gguf", "lm"),
    "accelerate": ("accelerate", "lm"), "tqdm": ("tqdm", "lm"),
    "datasets": ("datasets", "data"), "rouge_score": ("rouge-score", "data"), "sacrebleu": ("sacrebleu", "data"),
    "plotly": ("plotly", "book"), "ipywidgets": ("ipywidgets", "book"),
}
#: exit status of a command whose optional packages are missing
MISSING_PACKAGE_STATUS = 2


def missing_packages(names) -> list[str]:
    """The import names among ``names`` that cannot be imported (not installed, or blocked
    by a ``None`` entry in ``sys.modules``)."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except ValueError:  # imported already, without a spec: it is there
            found = True
        if not found:
            missing.append(name)
    return missing


def _requirement(distribution: str) -> str:
    """``distribution``'s version range from mspec's installed metadata (pyproject.toml),
    e.g. ``"plotly>=5.20"``; the bare name without metadata."""
    from importlib import metadata

    try:
        requirements = metadata.requires("mspec") or []
    except metadata.PackageNotFoundError:  # run from a checkout that pip did not install
        return distribution
    for requirement in requirements:
        spec = requirement.split(";")[0].strip()
        name = spec.split("<")[0].split(">")[0].split("=")[0].split("!")[0].split("~")[0].strip()
        if name.lower() == distribution.lower():
            return spec
    return distribution


def missing_message(command: str, names: list[str]) -> str:
    """What ``python -m mspec_lab <command>`` prints when ``names`` are not installed."""
    extras = sorted({OPTIONAL_PACKAGES[n][1] for n in names if n in OPTIONAL_PACKAGES})
    specs = [_requirement(OPTIONAL_PACKAGES.get(n, (n, None))[0]) for n in names]
    which = ", ".join(f"'{n}'" for n in names)
    return (f"python -m mspec_lab {command}: needs the package{'s' * (len(names) > 1)} {which}, not installed"
            + (f" (mspec's optional extra{'s' * (len(extras) > 1)} {', '.join(extras)})" if extras else "") + ".\n"
            + "install with:\n    pip install " + " ".join(f'"{spec}"' for spec in specs))


def renamed_message(command: str) -> str:
    """What ``python -m mspec_lab <command>`` prints when ``command`` is a former name
    (``RENAMED_COMMANDS``): one line naming the command now."""
    return (f"python -m mspec_lab {command}: renamed; run `python -m mspec_lab {RENAMED_COMMANDS[command]}` "
            "(same options)")


def overview_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m mspec_lab`` itself: the list of commands."""
    parser = argparse.ArgumentParser(
        prog="python -m mspec_lab", description="Speed benchmarks and the paper's experiments. A command that "
        "needs an optional package that is not installed says which, and how to install it (exit status 2).",
        epilog="python -m mspec_lab <command> --help: the options of a command")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    for name, command in COMMANDS.items():
        sub.add_parser(name, help=command.summary)
    return parser


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of ``python -m mspec_lab <name>``, with every option of the command (building
    it may import the command's optional packages: check ``COMMANDS[name].packages`` first).
    The book's command-line page is generated from these parsers."""
    parser = argparse.ArgumentParser(prog=f"python -m mspec_lab {name}", description=COMMANDS[name].summary)
    COMMANDS[name].add_arguments(parser)
    return parser


def main(argv=None) -> int:
    """Run a command; returns its exit status (2: a missing package or a usage error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in RENAMED_COMMANDS:
        print(renamed_message(argv[0]), file=sys.stderr)
        return 2
    if not argv or argv[0] not in COMMANDS:
        overview_parser().parse_args(argv)  # prints the help, or the usage error, and exits
        return 2
    name, command = argv[0], COMMANDS[argv[0]]
    missing = missing_packages(command.packages)  # before the options: building them may import these
    if not missing:
        args = command_parser(name).parse_args(argv[1:])
        args.command, args.argv = name, argv[1:]  # argv: the options as typed, for the results' provenance
        missing = missing_packages(command.more_packages(args))
    if missing:
        print(missing_message(name, missing), file=sys.stderr)
        return MISSING_PACKAGE_STATUS
    try:
        return command.run(args) or 0
    except ModuleNotFoundError as error:  # a package needed only on some path of the run
        package = (error.name or "").partition(".")[0]
        if package not in OPTIONAL_PACKAGES:
            raise
        print(missing_message(name, [package]), file=sys.stderr)
        return MISSING_PACKAGE_STATUS


if __name__ == "__main__":
    sys.exit(main())
