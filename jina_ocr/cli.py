"""The ``jina-ocr`` command.

Each subcommand is one module in :mod:`jina_ocr.commands` that defines ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; this file only discovers and dispatches them,
so adding a command never means editing a shared file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from jina_ocr import __version__, commands
from jina_ocr.errors import UserError


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{commands.__name__}.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jina-ocr", description="Page images and PDFs to Markdown.")
    parser.add_argument("--version", action="version", version=f"jina-ocr {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _command_modules():
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except UserError as error:
        print(f"jina-ocr {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
