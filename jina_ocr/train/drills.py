"""Reading drills: plain printed A5 pages of random words, in the layouts of the curriculum's stages.

A model trained from scratch on full synth pages first learns the language of the ground truth and
never starts looking at the image, and synth pages can be predicted from their closed vocabulary
without reading. Drill words are drawn from the synth vocabulary, from pronounceable nonsense words and
from numbers, so the model must read letters rather than recall words; a recipe may also ask for a
share of words of random letters (``letters``), which no language model can guess at all. The layouts
grow with the curriculum (:mod:`jina_ocr.train.recipe`):

- ``line``: one to three lines of 18-24 pt type, each on its own row of visual tokens (one line per
  cell row is the geometry whose glyphs the vision towers learn fastest; where rows are too low for
  24 pt type, as on the tiles of a tiled mode, a line takes two rows);
- ``rows``: an optional 24-32 pt heading and two to eight body lines, still one per cell row;
- ``page``: the target format, a 24-32 pt heading and two to eight lines of 18-22 pt body text at
  natural leading (1.15-1.5), so a cell row holds parts of two lines.

Where in its row a line of the first two stages sits is drawn anew for each page: towers
trained on lines always at the same height in their row learn glyph templates of that one height and
read next to nothing a few points off it, where most lines of the target format are.

Pages are set with PyMuPDF's ``insert_text`` in the base-14 fonts, which is also how a plain printed
page outside the generator is made. The held-out pages of :mod:`jina_ocr.train.held_out_words` use the
same layouts with words no drill ever prints.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

import pymupdf
from PIL import Image

from jina_ocr.runtime.pdf import DEFAULT_DPI
from jina_ocr.synth.page import render
from jina_ocr.synth.text import ADJECTIVES, NOUNS, VERBS
from jina_ocr.train.held_out_words import HELD_OUT_WORDS

A5 = (419.53, 595.28)
BODY_FONTS = ("helv", "tiro", "cour")
BOLD_FONTS = {"helv": "hebo", "tiro": "tibo", "cour": "cobo"}
STAGES = ("line", "rows", "page")
ONSETS = "b c d f g h j k l m n p r s t v w z br cl dr fl gr pl pr st tr sh ch th".split()
VOWELS = "a e i o u a e i o ou ea ai".split()
CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "rk", "ng"]
WORDS = NOUNS + ADJECTIVES + VERBS
_HELD_OUT = frozenset(HELD_OUT_WORDS)


@dataclass(frozen=True)
class DrillPage:
    """A drill page: its rendered image, its PDF, the Markdown a reader should produce, and how it was
    laid out (curriculum stage, body font, number of body lines, body type size in points)."""

    image: Image.Image
    pdf_bytes: bytes
    markdown: str
    stage: str
    font: str
    lines: int
    size: float


def nonsense_word(rng: random.Random) -> str:
    """A pronounceable word that is in no dictionary: one to three syllables."""
    return "".join(
        rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(rng.randint(1, 3))
    )


def letter_word(rng: random.Random) -> str:
    """Two to nine letters, each drawn uniformly: only reading its glyphs lowers the loss of such a word,
    and rare letters get as much practice as common ones."""
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))


def drill_word(rng: random.Random, letters: float = 0.0) -> str:
    """A word of random letters (a share ``letters`` of the words), else a vocabulary word (47 %), a
    nonsense word (47 %) or a number (6 %); sometimes capitalised or followed by punctuation; never a
    held-out word. With ``letters`` 0 the draws are those of recipes that predate the option."""
    if letters and rng.random() < letters:
        word = letter_word(rng)
        while word in _HELD_OUT:
            word = letter_word(rng)
    elif (roll := rng.random()) < 0.06:
        word = str(rng.randint(0, 9999))
    elif roll < 0.53:
        word = nonsense_word(rng)
        while word in _HELD_OUT:
            word = nonsense_word(rng)
    else:
        word = rng.choice(WORDS)
    if rng.random() < 0.2:
        word = word.capitalize()
    if rng.random() < 0.1:
        word += rng.choice(",.;:")
    return word


def repeat_word(word: str, rng: random.Random, near: float = 0.5) -> str:
    """The word drawn before, again: the same word, or (a share ``near`` of the time) the same with one
    letter changed, never into a held-out word; punctuated as often as a drill word.

    Words drawn independently almost never repeat, so a decoder trained on them learns that the next
    word differs from the last one; where a page does repeat a word or a near copy of it, that decoder
    skips it. Near copies teach it that the next word may be a variant of the last, which it can also
    learn too well and invent one, so their share is a recipe choice."""
    bare = word.rstrip(",.;:")
    letters = [i for i, c in enumerate(bare) if c.isalpha()]
    if near and letters and rng.random() < near:
        while True:
            i = rng.choice(letters)
            letter = rng.choice(string.ascii_lowercase.replace(bare[i].lower(), ""))
            copy = bare[:i] + (letter.upper() if bare[i].isupper() else letter) + bare[i + 1 :]
            if copy.lower() not in _HELD_OUT:
                break
        bare = copy
    if rng.random() < 0.1:
        bare += rng.choice(",.;:")
    return bare


def held_out_word(rng: random.Random) -> str:
    """A held-out word, capitalised and punctuated as often as a drill word is."""
    word = rng.choice(HELD_OUT_WORDS)
    if rng.random() < 0.2:
        word = word.capitalize()
    if rng.random() < 0.1:
        word += rng.choice(",.;:")
    return word


def _fill_line(
    draw: Callable[[], str], font: str, size: float, width: float, max_words: int = 10**6
) -> list[str]:
    """Words for one line of ``width`` points: up to ``max_words``, until the next would not fit.

    A word too long for the line on its own is drawn again, so nothing is ever printed past the margin.
    """
    words: list[str] = []
    while len(words) < max_words:
        word = draw()
        if pymupdf.get_text_length(" ".join([*words, word]), fontname=font, fontsize=size) <= width:
            words.append(word)
        elif words:
            break
    return words


def drill_page(
    stage: str,
    seed: int | str,
    line_pitch: float,
    *,
    dpi: int = DEFAULT_DPI,
    fonts: tuple[str, ...] = BODY_FONTS,
    held_out: bool = False,
    lines: int | None = None,
    letters: float = 0.0,
    leading: float | None = None,
    repeats: float = 0.0,
    near_copies: float = 0.5,
) -> DrillPage:
    """Drill ``seed`` of ``stage`` on an A5 page; the lines of a ``line`` or ``rows`` drill are
    ``line_pitch`` points apart (a whole number of rows of visual tokens, :meth:`PageRecipe.line_pitch`).

    ``held_out`` draws the words from the held-out list instead; ``lines`` fixes the number of body
    lines (otherwise drawn from the stage's range); ``letters`` is the share of words of random letters
    (:func:`drill_word`); the baselines of a ``line`` or ``rows`` drill sit at any height in their
    row. ``leading`` fixes the distance between the body
    lines of a ``page`` drill in points (otherwise 1.15-1.5 times the type size). ``repeats`` is the
    share of words that repeat the word drawn before them, a share ``near_copies`` of those with one
    letter changed (:func:`repeat_word`; exact repeats only on held-out pages, which print held-out
    words alone); with 0 the pages are those of recipes that predate the option.
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}: choose one of {', '.join(STAGES)}")
    if leading is not None and stage != "page":
        raise ValueError(f"leading is set by the row height in a {stage!r} drill; only 'page' takes one")
    key = f"jina-ocr-train/{'held-out' if held_out else 'drill'}/{stage}/{seed}"
    rng = random.Random(key)
    words = random.Random(rng.random())

    again = random.Random(f"{key}/repeats")
    last: str | None = None  # the word drawn before

    def draw() -> str:
        nonlocal last
        if last is not None and repeats and again.random() < repeats:
            last = repeat_word(last, again, near=0.0 if held_out else near_copies)
        else:
            last = held_out_word(words) if held_out else drill_word(words, letters)
        return last

    width, height = A5
    font = rng.choice(fonts)
    margin = rng.uniform(30, 60)
    line_width = width - margin - rng.uniform(30, 60)
    doc = pymupdf.open()
    page = doc.new_page(width=width, height=height)
    markdown: list[str] = []

    if stage == "page":
        size = rng.choice((18.0, 20.0, 22.0))
        natural = size * rng.uniform(1.15, 1.5)  # drawn either way: the rest of the page stays the same
        leading = natural if leading is None else leading
        y = rng.uniform(50, 110)
    else:
        size = rng.choice((18.0, 20.0, 22.0, 24.0))
        leading = line_pitch
        # Baselines around 70 % of a line's rows (+-2 pt), where ascenders and descenders stay inside
        # them, moved by up to half a pitch either way, so the towers see glyphs at every height in a
        # row (a draw of its own, which leaves the rest of the page as it was before lines moved).
        y = line_pitch * (rng.randint(1, 3) + 0.7) + rng.uniform(-2, 2)
        y += line_pitch * (random.Random(f"{key}/phase").random() - 0.5)
    with_heading = (stage == "page" and rng.random() < 0.9) or (stage == "rows" and rng.random() < 0.4)
    if with_heading:
        head_size = rng.choice((24.0, 26.0, 28.0, 30.0, 32.0))
        bold = BOLD_FONTS[font]
        heading = _fill_line(draw, bold, head_size, line_width, max_words=rng.randint(1, 4))
        heading = [w.strip(",.;:") or w for w in heading]
        heading[0] = heading[0][:1].upper() + heading[0][1:]
        page.insert_text((margin, y), " ".join(heading), fontsize=head_size, fontname=bold)
        markdown.append("# " + " ".join(heading))
        y += head_size * 1.6 if stage == "page" else 2 * line_pitch
    if lines is None:
        lines = rng.randint(1, 3) if stage == "line" else rng.randint(2, 8)
    lines = max(1, min(lines, int((height - 40 - y) / leading) + 1))
    body: list[str] = []
    for number in range(lines):
        # A one-line drill is often short: the model must also learn where a line ends.
        short = stage == "line" and rng.random() < 0.5
        line = _fill_line(draw, font, size, line_width, max_words=rng.randint(1, 4) if short else 10**6)
        page.insert_text((margin, y + number * leading), " ".join(line), fontsize=size, fontname=font)
        body += line
    markdown.append(" ".join(body))
    pdf_bytes = doc.tobytes()
    return DrillPage(render(pdf_bytes, dpi), pdf_bytes, "\n\n".join(markdown), stage, font, lines, size)


def printed_layout(heading: str, lines: list[str]) -> pymupdf.Document:
    """An A5 page in the printed test page's layout: ``heading`` in 28 pt Helvetica Bold at 80 pt from
    the top, ``lines`` in 20 pt Helvetica from 130 pt at 28 pt leading, all 42 pt from the left edge.
    The README's main-job sample (``samples/make_sample.py``) is set the same way."""
    doc = pymupdf.open()
    page = doc.new_page(width=A5[0], height=A5[1])
    page.insert_text((42, 80), heading, fontsize=28, fontname="hebo")
    for number, line in enumerate(lines):
        page.insert_text((42, 130 + 28 * number), line, fontsize=20, fontname="helv")
    return doc


def printed_page(seed: int = 0, dpi: int = DEFAULT_DPI) -> DrillPage:
    """The fixed test page: A5, a 28 pt Helvetica Bold heading and two lines of 20 pt Helvetica at 28 pt
    leading, in held-out words drawn with ``seed``; every line fits inside 42 pt margins."""
    rng = random.Random(f"jina-ocr-train/printed/{seed}")
    width = A5[0] - 2 * 42

    def draw() -> str:
        return held_out_word(rng)

    heading = [w.strip(",.;:") or w for w in _fill_line(draw, "hebo", 28.0, width, max_words=3)]
    heading[0] = heading[0].capitalize()
    lines = [_fill_line(draw, "helv", 20.0, width) for _ in range(2)]
    pdf_bytes = printed_layout(" ".join(heading), [" ".join(line) for line in lines]).tobytes()
    markdown = "# " + " ".join(heading) + "\n\n" + " ".join(lines[0] + lines[1])
    return DrillPage(render(pdf_bytes, dpi), pdf_bytes, markdown, "page", "helv", 2, 20.0)
