"""The ``jina-ocr`` command.

Each subcommand is one module in :mod:`jina_ocr.commands` that defines ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; this file only discovers and dispatches them,
so adding a command never means editing a shared file.

Commands import torch, Transformers and PyMuPDF, which take seconds. So the list of commands is read
from the modules' source (their ``NAME`` and ``HELP`` constants) without importing them, and only
the command being run is imported: ``jina-ocr --help`` answers at once. A Ctrl-C while a command
starts (in the middle of those imports) ends with one line, not a traceback.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Sequence

from jina_ocr import __version__, commands
from jina_ocr.errors import UserError


def _declared(module_name: str) -> dict[str, str]:
    """The module-level string constants ``NAME`` and ``HELP`` of a command module, from its source."""
    source = importlib.util.find_spec(module_name).loader.get_source(module_name)
    constants = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in ("NAME", "HELP"):
                    constants[target.id] = node.value.value
    return constants


def _commands() -> list[tuple[str, str, str]]:
    """``(name, help, module name)`` of every subcommand, sorted by module."""
    found = []
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            module_name = f"{commands.__name__}.{info.name}"
            declared = _declared(module_name)
            found.append((declared["NAME"], declared["HELP"], module_name))
    return found


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given ``argv``, with only the arguments of the command it runs."""
    parser = argparse.ArgumentParser(prog="jina-ocr", description="Page images and PDFs to Markdown.")
    parser.add_argument("--version", action="version", version=f"jina-ocr {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = None if argv is None else next((a for a in argv if not a.startswith("-")), None)
    for name, help_text, module_name in _commands():
        command = sub.add_parser(name, help=help_text, description=help_text)
        if argv is None or name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(command)
            command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser(argv).parse_args(argv)
        try:
            return int(args._run(args) or 0)
        except UserError as error:
            print(f"jina-ocr {args.command}: error: {error}", file=sys.stderr)
            return 2
    except KeyboardInterrupt:
        print("jina-ocr: interrupted", file=sys.stderr)
        return 130


def program() -> None:
    """The ``jina-ocr`` program: :func:`main`, and an interrupted command's process ends at once.

    Tearing down an interpreter that imported torch and Transformers takes seconds on a busy machine,
    all of it after the user pressed Ctrl-C; an interrupted command has already written (atomically)
    what it finished and removed what it had not, so nothing is lost by ending without the teardown.
    """
    status = main()
    if status == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    program()
