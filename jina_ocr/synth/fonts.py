"""The text faces synthetic pages are set in, found on the system and read once per process.

A fixed catalogue (not "whatever is installed") keeps generation deterministic: the same seed
picks the same face on every machine that has the catalogue, and a missing face is an error that
says which package brings it, rather than a silent fallback that changes the pages. Latin Modern
comes with TeX (it is the face of LaTeX papers, matching the formulas); DejaVu and Liberation (metric
twins of Times and Arial) come from Debian's font packages and are located through fontconfig.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

STYLES = ("regular", "bold", "italic", "bolditalic")


@dataclass(frozen=True)
class Face:
    """A family with its four style files; ``files`` maps style to (archive name, bytes)."""

    name: str
    files: dict[str, tuple[str, bytes]]

    def css(self) -> str:
        """``@font-face`` rules that make the family available to the page's HTML under ``name``."""
        rules = []
        for style in STYLES:
            weight = "bold" if "bold" in style else "normal"
            slant = "italic" if "italic" in style else "normal"
            rules.append(
                f"@font-face {{font-family: '{self.name}'; src: url({self.files[style][0]}); "
                f"font-weight: {weight}; font-style: {slant};}}"
            )
        return "\n".join(rules)


# family name -> how to find each style: ("tex", file names) or ("fontconfig", fontconfig patterns)
CATALOGUE: dict[str, tuple[str, tuple[str, ...]]] = {
    "Latin Modern Roman": (
        "tex",
        ("lmroman10-regular.otf", "lmroman10-bold.otf", "lmroman10-italic.otf", "lmroman10-bolditalic.otf"),
    ),
    "Latin Modern Sans": (
        "tex",
        ("lmsans10-regular.otf", "lmsans10-bold.otf", "lmsans10-oblique.otf", "lmsans10-boldoblique.otf"),
    ),
    "DejaVu Serif": ("fontconfig", ("Book", "Bold", "Italic", "Bold Italic")),
    "DejaVu Sans": ("fontconfig", ("Book", "Bold", "Oblique", "Bold Oblique")),
    "Liberation Serif": ("fontconfig", ("Regular", "Bold", "Italic", "Bold Italic")),
    "Liberation Sans": ("fontconfig", ("Regular", "Bold", "Italic", "Bold Italic")),
}
FAMILIES = tuple(CATALOGUE)
SERIF = ("Latin Modern Roman", "DejaVu Serif", "Liberation Serif")


class FontMissingError(RuntimeError):
    """A face of the catalogue is not installed."""


def _run(args: list[str]) -> str:
    if shutil.which(args[0]) is None:
        raise FontMissingError(f"{args[0]} is not installed (Debian: texlive-latex-base, fontconfig)")
    return subprocess.run(args, capture_output=True, text=True, check=False).stdout.strip()


def _locate(family: str, how: str, spec: str) -> Path:
    if how == "tex":
        found = _run(["kpsewhich", spec])
    else:
        found, got = _run(["fc-match", "-f", "%{file}\t%{family[0]}", f"{family}:style={spec}"]).partition(
            "\t"
        )[::2]
        if got != family:
            found = ""
    if not found:
        raise FontMissingError(
            f"font {family} ({spec}) is not installed (Debian: fonts-lmodern, fonts-dejavu-core, "
            "fonts-dejavu-extra, fonts-liberation)"
        )
    return Path(found)


@functools.cache
def face(family: str) -> Face:
    """Load one family of the catalogue (cached: pages of one process share the bytes)."""
    how, specs = CATALOGUE[family]
    files = {}
    for style, spec in zip(STYLES, specs, strict=True):
        path = _locate(family, how, spec)
        files[style] = (f"{family.replace(' ', '_')}-{style}{path.suffix}", path.read_bytes())
    return Face(family, files)
