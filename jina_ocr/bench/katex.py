"""Rendered comparison of equations, as olmOCR-Bench's math test does it: KaTeX in Chromium.

Two spellings of one formula (``x^2`` and ``x^{2}``, ``\\frac12`` and ``\\frac{1}{2}``) render the
same, so the benchmark compares renderings, not strings. An equation passes when

1. the reference's MathML (KaTeX's semantic output, annotation removed) occurs inside the
   hypothesis's MathML, or
2. every rendered glyph of the reference can be mapped to a distinct glyph of the hypothesis with
   the same character such that each glyph's nearest neighbour above, below, left and right
   (centres aligned within 5 px, 24 px font) maps to the corresponding neighbour.

KaTeX's stylesheet is inlined into the generated page, as olmOCR-Bench adds it to its page, so the
font files it names do not load (``document.fonts`` reports them in state ``error``) and glyphs are
drawn in Chromium's fall-back fonts, whose metrics decide the positions compared in step 2. The
benchmark bundles KaTeX 0.16.21 and renders this way; ``.ci/deps/bench.sh`` pins that release and
installs the fonts (DejaVu, Liberation) the fall-back resolves to here, so verdicts match it.

Rendering runs Debian's ``chromium`` headless with ``--dump-dom`` on one generated page holding a
whole batch of equations, so a run of the scorer costs one browser start per batch, not one per
equation. KaTeX comes from npm (``.ci/deps/bench.sh`` installs it); ``JINA_OCR_KATEX`` may point
at the folder holding ``katex.min.js``, ``JINA_OCR_CHROMIUM`` at the browser.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from jina_ocr.errors import UserError

# The KaTeX release olmOCR-Bench (olmocr 0.4.27) bundles; .ci/deps/bench.sh installs this one.
BENCHMARK_KATEX = "0.16.21"
_BATCH = 200
_ALIGN_TOLERANCE = 5.0
_SEARCH_BUDGET = 200_000


@dataclass(frozen=True)
class Glyph:
    """One rendered character and the centre of its box, in CSS pixels."""

    text: str
    x: float
    y: float


@dataclass(frozen=True)
class Rendering:
    mathml: str
    glyphs: tuple[Glyph, ...]


def find_chromium() -> str | None:
    """The Chromium binary: ``$JINA_OCR_CHROMIUM``, else the first of the usual names on PATH.

    A ``JINA_OCR_CHROMIUM`` that names no file is an error, not a quiet fall-back to the LaTeX rule:
    whoever set it meant math tests to be rendered.
    """
    configured = os.environ.get("JINA_OCR_CHROMIUM")
    if configured:
        if not Path(configured).is_file():
            raise UserError(f"JINA_OCR_CHROMIUM={configured}: no such file")
        return configured
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def find_katex() -> Path | None:
    """The KaTeX ``dist`` folder: ``$JINA_OCR_KATEX``, else where ``.ci/deps/bench.sh`` installs it."""
    candidates = []
    if os.environ.get("JINA_OCR_KATEX"):
        candidates.append(Path(os.environ["JINA_OCR_KATEX"]))
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    candidates.append(cache / "jina-ocr" / "katex" / "node_modules" / "katex" / "dist")
    for folder in candidates:
        if (folder / "katex.min.js").is_file() and (folder / "katex.min.css").is_file():
            return folder
    return None


def katex_version(katex_dir: Path) -> str | None:
    """The release of the KaTeX in ``katex_dir`` (from the npm package.json beside ``dist/``), if known."""
    try:
        return json.loads((Path(katex_dir).parent / "package.json").read_text(encoding="utf-8"))["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8">
<style>{css}</style>
<script src="{js}"></script>
<style>body {{ margin: 0; }} .eq {{ font-size: 24px; padding: 40px; }}</style>
</head><body><div id="result"></div>
<script>
const equations = {equations};
const boxes = equations.map((tex) => {{
  const div = document.createElement("div");
  div.className = "eq";
  document.body.appendChild(div);
  try {{
    katex.render(tex, div, {{displayMode: true, throwOnError: true}});
    return div;
  }} catch (error) {{
    return String(error.message || error);
  }}
}});
document.body.offsetHeight;
document.fonts.ready.then(() => {{
  const out = boxes.map((div) => {{
    if (typeof div === "string") return {{error: div}};
    const spans = Array.from(div.querySelectorAll(".katex-html span"))
      .filter((s) => s.children.length === 0 && /\\S/.test(s.textContent))
      .map((s) => {{
        const r = s.getBoundingClientRect();
        return [s.textContent.trim(), r.x, r.y, r.width, r.height];
      }});
    const sem = div.querySelector(".katex-mathml semantics");
    const mathml = sem ? Array.from(sem.children).filter((c) => c.tagName !== "annotation")
      .map((c) => c.outerHTML).join("") : "";
    return {{spans: spans, mathml: mathml}};
  }});
  const json = JSON.stringify(out);
  document.getElementById("result").setAttribute("data-json",
    btoa(unescape(encodeURIComponent(json))));
}});
</script></body></html>
"""
_RESULT = re.compile(r'data-json="([A-Za-z0-9+/=]*)"')


class Renderer:
    """Renders equations with KaTeX in headless Chromium and compares renderings; caches per instance."""

    def __init__(self, chromium: str, katex_dir: Path, timeout: float = 120.0):
        self.chromium = chromium
        self.katex_dir = Path(katex_dir)
        self.timeout = timeout
        self._cache: dict[str, Rendering | None] = {}
        self._errors: dict[str, str] = {}

    def render_many(self, equations: list[str]) -> dict[str, Rendering | None]:
        """Renderings of the equations (None where KaTeX rejects one), rendering only unseen ones."""
        todo = list(dict.fromkeys(eq for eq in equations if eq not in self._cache))
        for start in range(0, len(todo), _BATCH):
            batch = todo[start : start + _BATCH]
            for equation, item in zip(batch, self._render_batch(batch), strict=True):
                self._cache[equation] = _to_rendering(item)
                if "error" in item:
                    self._errors[equation] = item["error"]
        return {eq: self._cache[eq] for eq in equations}

    def error(self, equation: str) -> str | None:
        """KaTeX's message for an equation it refused to render (after rendering it), else None."""
        return self._errors.get(equation)

    def render(self, equation: str) -> Rendering | None:
        return self.render_many([equation])[equation]

    def _render_batch(self, equations: list[str]) -> list[dict]:
        with tempfile.TemporaryDirectory(prefix="jina-ocr-katex-") as tmp:
            page = Path(tmp) / "render.html"
            page.write_text(
                _PAGE.format(
                    css=(self.katex_dir / "katex.min.css").read_text(encoding="utf-8"),
                    js=(self.katex_dir / "katex.min.js").as_uri(),
                    equations=json.dumps(equations).replace("</", "<\\/"),
                ),
                encoding="utf-8",
            )
            command = [
                self.chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--allow-file-access-from-files",
                f"--user-data-dir={tmp}/profile",
                "--virtual-time-budget=60000",
                "--dump-dom",
                page.as_uri(),
            ]
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout, check=False)
        match = _RESULT.search(done.stdout)
        if not match:
            raise RuntimeError(
                f"Chromium produced no KaTeX result (exit {done.returncode}): {done.stderr[-500:]}"
            )
        return json.loads(base64.b64decode(match.group(1)).decode("utf-8"))

    def matches_any(self, reference: str, hypotheses: list[str]) -> bool:
        """Whether some hypothesis renders like the reference (an unrenderable reference matches nothing)."""
        rendered = self.render_many([reference, *hypotheses])
        ref = rendered[reference]
        if ref is None:
            return False
        return any(rendered[h] is not None and same_rendering(ref, rendered[h]) for h in hypotheses)


def _to_rendering(item: dict) -> Rendering | None:
    if "error" in item:
        return None
    glyphs = []
    for text, x, y, width, height in item["spans"]:
        # A span holding several characters is split into equal-width boxes, one per character.
        chars = [ch for ch in text if ch != "\u200b"]
        for k, ch in enumerate(text):
            if ch == "\u200b" or not chars:
                continue
            glyphs.append(Glyph(ch, x + width * (k + 0.5) / len(text), y + height / 2))
    return Rendering(mathml=re.sub(r"\s+", "", item["mathml"]), glyphs=tuple(glyphs))


def _neighbours(glyphs: tuple[Glyph, ...]) -> list[dict[str, int]]:
    """For each glyph, the index of the nearest glyph above, below, left and right of it.

    "Left" means a smaller centre x with the centres' y within the alignment tolerance (and so on
    for the other directions). Walking outwards in x (or y) order from each glyph finds the
    nearest one without comparing all pairs, which matters for long equations.
    """
    result: list[dict[str, int]] = [{} for _ in glyphs]
    for axis, before, after in (("x", "left", "right"), ("y", "up", "down")):
        other = "y" if axis == "x" else "x"
        order = sorted(range(len(glyphs)), key=lambda k: getattr(glyphs[k], axis))
        coords = [getattr(glyphs[k], axis) for k in order]
        for rank, i in enumerate(order):
            here, across = coords[rank], getattr(glyphs[i], other)
            for name, step in ((before, -1), (after, 1)):
                pos = rank + step
                while 0 <= pos < len(order):
                    j = order[pos]
                    if coords[pos] != here and abs(getattr(glyphs[j], other) - across) <= _ALIGN_TOLERANCE:
                        result[i][name] = j
                        break
                    pos += step
    return result


def same_rendering(reference: Rendering, hypothesis: Rendering) -> bool:
    """The two-step comparison in the module docstring: MathML containment, then glyph neighbourhoods."""
    if reference.mathml and reference.mathml in hypothesis.mathml:
        return True
    ref, hyp = reference.glyphs, hypothesis.glyphs
    if not ref:
        return False
    candidates = []
    for g in ref:
        options = [j for j, h in enumerate(hyp) if h.text == g.text]
        if not options:
            return False
        candidates.append(options)
    ref_nb, hyp_nb = _neighbours(ref), _neighbours(hyp)
    assignment: dict[int, int] = {}
    used: set[int] = set()
    budget = _SEARCH_BUDGET

    def consistent(i: int, j: int) -> bool:
        for direction, ri in ref_nb[i].items():
            hj = hyp_nb[j].get(direction)
            if hj is None:
                return False
            if ri in assignment:
                if assignment[ri] != hj:
                    return False
            elif hyp[hj].text != ref[ri].text:
                return False
        return True

    # Depth-first search over assignments, iterative so that long equations cannot exhaust the
    # interpreter's recursion limit; choice[i] is the candidate index tried for glyph i.
    choice = [-1] * len(ref)
    i = 0
    while 0 <= i < len(ref):
        if choice[i] >= 0:
            used.discard(assignment.pop(i))
        k = choice[i] + 1
        while k < len(candidates[i]):
            j = candidates[i][k]
            if j not in used:
                budget -= 1  # only consistency checks count: skipping used glyphs is cheap
                if budget < 0:
                    return False
                if consistent(i, j):
                    break
            k += 1
        if k < len(candidates[i]):
            choice[i] = k
            assignment[i] = candidates[i][k]
            used.add(candidates[i][k])
            i += 1
        else:
            choice[i] = -1
            i -= 1
    return i == len(ref)


@lru_cache(maxsize=1)
def default_renderer() -> Renderer | None:
    """A shared renderer when Chromium and KaTeX are both installed, else None."""
    chromium, katex_dir = find_chromium(), find_katex()
    if chromium is None or katex_dir is None:
        return None
    return Renderer(chromium, katex_dir)
