"""Formulas typeset by real TeX (pdfLaTeX with amsmath), one PDF page per formula.

Why TeX rather than KaTeX or matplotlib's mathtext: the ground truth is LaTeX, and the only way to
prove that a LaTeX string is valid is to run LaTeX on it. TeX also gives the reference quality the
model will meet in real papers (Computer Modern metrics, proper fraction and operator spacing) and
it supports what mathtext cannot (``pmatrix``, ``cases``, ``aligned``). KaTeX would need a browser
per page; Debian's ``texlive-latex-base`` is a ~40 MB download and one pdfLaTeX run typesets all
formulas of a page in about a quarter of a second.

Each formula is shipped out on a page cut exactly to its box, with the box's height and depth
written to a side file, so the page composer can sit inline formulas on the text baseline and copy
them into the page PDF as vector graphics.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pymupdf

# TeX points per PDF point (big point).
_PT_PER_BP = 72.27 / 72.0

_PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage{amsmath,amssymb}
\pdfinfoomitdate=1 \pdftrailerid{} \pdfsuppressptexinfo=-1
\pdfhorigin=0pt \pdfvorigin=0pt
\newwrite\boxes \immediate\openout\boxes=boxes.txt
\newcommand\formula[1]{\setbox0\hbox{#1}%
  \pdfpagewidth=\wd0 \pdfpageheight=\dimexpr\ht0+\dp0\relax
  \immediate\write\boxes{\the\wd0,\the\ht0,\the\dp0}\shipout\hbox{\box0}}
\begin{document}
"""
_PREAMBLE_LINES = _PREAMBLE.count("\n")

# The size the formulas are set at; callers scale the vector pages to their body font size.
TEX_FONT_SIZE = 10.0


class FormulaError(ValueError):
    """A formula that LaTeX rejected; the message quotes TeX's complaint and the formula."""


class TexMissingError(RuntimeError):
    """pdflatex is not installed."""


@dataclass(frozen=True)
class Box:
    """A typeset formula's extent in PDF points at 10 pt: width, height above and depth below the baseline."""

    width: float
    height: float
    depth: float


def pdflatex() -> str:
    """The pdflatex executable, or :class:`TexMissingError` saying which package brings it."""
    exe = shutil.which("pdflatex")
    if exe is None:
        raise TexMissingError(
            "pdflatex was not found: JinaOCRSynth typesets formulas with LaTeX; install TeX Live "
            "(Debian: apt-get install texlive-latex-base)"
        )
    return exe


def typeset(formulas: Sequence[tuple[str, bool]]) -> tuple[pymupdf.Document, list[Box]]:
    """Typeset ``(latex, display)`` pairs in one pdfLaTeX run.

    Returns a PDF with page i holding formula i (its top-left corner at the page origin, baseline at
    ``height`` from the top) and the boxes. Display formulas use ``\\displaystyle``. Raises
    :class:`FormulaError` naming the first formula LaTeX could not typeset.
    """
    if not formulas:
        return pymupdf.open(), []
    exe = pdflatex()
    lines = []
    for latex, display in formulas:
        if "\n" in latex:
            raise FormulaError(f"formula spans several lines, write it on one: {latex!r}")
        style = r"\displaystyle " if display else ""
        lines.append(rf"\formula{{${style}{latex}$}}")
    source = _PREAMBLE + "\n".join(lines) + "\n\\immediate\\closeout\\boxes\n\\end{document}\n"
    env = dict(os.environ, SOURCE_DATE_EPOCH="0", FORCE_SOURCE_DATE="1")
    with tempfile.TemporaryDirectory(prefix="jina-ocr-tex-") as tmp:
        work = Path(tmp)
        (work / "f.tex").write_text(source, encoding="utf-8")
        proc = subprocess.run(
            [exe, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "f.tex"],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
        if proc.returncode != 0:
            raise _error_from_log(proc.stdout.decode("utf-8", "replace"), [f for f, _ in formulas])
        boxes = []
        for row in (work / "boxes.txt").read_text().split():
            width, height, depth = (float(v.removesuffix("pt")) / _PT_PER_BP for v in row.split(","))
            boxes.append(Box(width, height, depth))
        doc = pymupdf.open("pdf", (work / "f.pdf").read_bytes())
    if len(boxes) != len(formulas) or doc.page_count != len(formulas):
        raise FormulaError(f"LaTeX produced {len(boxes)} boxes for {len(formulas)} formulas")
    return doc, boxes


def _error_from_log(log: str, formulas: Sequence[str]) -> FormulaError:
    """Turn pdfLaTeX's terminal output into an error naming the formula at fault."""
    message = next((line[2:] for line in log.splitlines() if line.startswith("! ")), "LaTeX failed")
    where = re.search(r"^l\.(\d+)", log, flags=re.MULTILINE)
    if where:
        index = int(where.group(1)) - _PREAMBLE_LINES - 1
        if 0 <= index < len(formulas):
            return FormulaError(f"LaTeX cannot typeset formula {formulas[index]!r}: {message}")
    return FormulaError(f"LaTeX failed: {message}")
