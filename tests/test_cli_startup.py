"""``jina-ocr`` starts without importing the commands it does not run, and a Ctrl-C while a command
starts ends in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import jina_ocr.cli as cli

HELP_AND_LIST_HEAVY_MODULES = """
import json, sys
from jina_ocr.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in ("torch", "transformers", "pymupdf", "PIL") if m in sys.modules)))
"""


def test_the_top_level_help_lists_every_command_and_imports_none():
    done = subprocess.run(
        [sys.executable, "-c", HELP_AND_LIST_HEAVY_MODULES], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    *help_lines, imported = done.stdout.strip().splitlines()
    assert json.loads(imported) == []
    for command in ("bench", "convert", "export", "push", "serve", "synth", "train"):
        assert any(line.strip().startswith(command) for line in help_lines), command


def test_the_declared_names_are_the_modules_own():
    """What the CLI reads from the source is what the modules define when imported."""
    import importlib

    for name, help_text, module_name in cli._commands():
        module = importlib.import_module(module_name)
        assert (module.NAME, module.HELP) == (name, help_text)


def test_ctrl_c_while_a_command_starts_is_one_line(monkeypatch, capsys):
    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    assert cli.main(["convert", "page.pdf"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == "jina-ocr: interrupted\n"
