"""Command line: ``python -m mspec.bench <command> [options]``."""

import argparse
import importlib
import sys

#: command -> module in mspec.bench that defines ``add_arguments(parser)`` and ``run(args)``
COMMANDS = {
    "token-level": "token_level",
}


def _optional(name, module):
    try:
        importlib.import_module(f"mspec.bench.{module}")
    except ModuleNotFoundError:
        return
    COMMANDS[name] = module


_optional("optimal", "optimal")
_optional("experiments", "experiments")
_optional("acceptance", "acceptance")
_optional("decoding", "decoding")
_optional("rounds", "rounds")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mspec.bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"mspec.bench.{module_name}")
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0]))
    args = parser.parse_args(argv)
    return modules[args.command].run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
