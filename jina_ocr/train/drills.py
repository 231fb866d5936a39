"""Reading drills: plain printed A5 pages of random words, from one line up to a full page.

A model trained from scratch on full synth pages first learns the language of the ground truth and
never starts looking at the image: with ~400 characters spread over 100 visual tokens, no single
token says much about the next word, so the gradient that would teach the vision tower to read is
lost in noise (measured: the loss with another page's image equals the loss with the right one after
thousands of pages). A page with one line of large words fixes that: only a few visual tokens carry
ink, so the decoder finds them, and the words are random, so it cannot guess them without reading.

Drills grow in three phases as ``level`` goes from 0 to 1: up to 0.15, one to three vocabulary words in
56-48 pt type (a few hundred possible words: the decoder learns to look at the image); up to 0.4, the type
shrinks to body size (18-22 pt) while pronounceable nonsense words built from syllables and numbers
come in, so the model must read letters rather than recall words (half the words at full level); then
the lines fill the page. Pages are set with PyMuPDF's ``insert_text`` in
the base-14 fonts, which is also how a plain printed page outside the generator is made.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pymupdf
from PIL import Image

from jina_ocr.synth.page import render
from jina_ocr.synth.text import ADJECTIVES, NOUNS, VERBS

A5 = (419.53, 595.28)
BODY_FONTS = ("helv", "tiro", "cour")
BOLD_FONTS = {"helv": "hebo", "tiro": "tibo", "cour": "cobo"}
ONSETS = "b c d f g h j k l m n p r s t v w z br cl dr fl gr pl pr st tr sh ch th".split()
VOWELS = "a e i o u a e i o ou ea ai".split()
CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "rk", "ng"]
WORDS = NOUNS + ADJECTIVES + VERBS


@dataclass(frozen=True)
class DrillPage:
    """A drill page: its rendered image, its PDF and the Markdown a reader should produce."""

    image: Image.Image
    pdf_bytes: bytes
    markdown: str


def nonsense_word(rng: random.Random) -> str:
    """A pronounceable word that is in no dictionary: one to three syllables."""
    return "".join(
        rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(rng.randint(1, 3))
    )


def drill_word(rng: random.Random, novelty: float = 1.0) -> str:
    """A vocabulary or nonsense word, sometimes capitalised, sometimes a number, sometimes punctuated.

    ``novelty`` (0 to 1) scales the share of numbers (up to 6 %) and nonsense words (up to 47 %).
    """
    roll = rng.random() / max(novelty, 1e-9)
    if roll < 0.06:
        word = str(rng.randint(0, 9999))
    elif roll < 0.53:
        word = nonsense_word(rng)
    else:
        word = rng.choice(WORDS)
    if novelty:
        if rng.random() < 0.2:
            word = word.capitalize()
        if rng.random() < 0.1:
            word += rng.choice(",.;:")
    return word


def _fill_line(
    rng: random.Random, font: str, size: float, width: float, novelty: float, max_words: int = 10**6
) -> list[str]:
    """Words for one line of ``width`` points: up to ``max_words``, until the next would not fit.

    A word too long for the line on its own is drawn again, so nothing is ever printed past the margin.
    """
    words: list[str] = []
    while len(words) < max_words:
        word = drill_word(rng, novelty)
        if pymupdf.get_text_length(" ".join([*words, word]), fontname=font, fontsize=size) <= width:
            words.append(word)
        elif words:
            break
    return words


def drill_page(
    seed: int | str, level: float, dpi: int = 144, fonts: tuple[str, ...] = BODY_FONTS
) -> DrillPage:
    """Drill ``seed`` at ``level`` (0: one line of large type, 1: a full A5 page), rendered at ``dpi``.

    The body font is one of ``fonts`` (base-14 names of :data:`BODY_FONTS`), headings its bold face.
    """
    rng = random.Random(f"jina-ocr-train/drill/{seed}")
    width, height = A5
    font = rng.choice(fonts)
    body_size = rng.choice((18.0, 20.0, 22.0))
    size = body_size + (56.0 - body_size) * max(0.0, 1.0 - level / 0.4)
    novelty = min(1.0, max(0.0, level - 0.15) / 0.25)
    leading = size * rng.uniform(1.25, 1.5)
    margin = rng.uniform(30, 60)
    top = rng.uniform(50, 90)
    max_lines = int((height - top - 40) / leading)
    fill = max(0.0, level - 0.4) / 0.6
    lines = min(max_lines, 1 + round(fill * rng.uniform(0.5, 1.0) * (max_lines - 1)))

    doc = pymupdf.open()
    page = doc.new_page(width=width, height=height)
    y = top
    markdown = []
    if level >= 0.15 and rng.random() < 0.4:
        head_size = rng.choice((26.0, 28.0, 30.0))
        heading = [drill_word(rng, novelty).strip(",.;:") for _ in range(rng.randint(1, 3))]
        heading[0] = heading[0].capitalize()
        page.insert_text((margin, y), " ".join(heading), fontsize=head_size, fontname=BOLD_FONTS[font])
        markdown.append("# " + " ".join(heading))
        y += head_size * 1.6
        lines = max(1, min(lines, int((height - y - 40) / leading) + 1))
    body: list[str] = []
    if level < 0.15:
        words = _fill_line(rng, font, size, width - 2 * margin, novelty, max_words=rng.randint(1, 3))
        page.insert_text((margin, y), " ".join(words), fontsize=size, fontname=font)
        lines, body = 0, words
    for _ in range(lines):
        words = _fill_line(rng, font, size, width - 2 * margin, novelty)
        page.insert_text((margin, y), " ".join(words), fontsize=size, fontname=font)
        body += words
        y += leading
    markdown.append(" ".join(body))
    pdf_bytes = doc.tobytes()
    return DrillPage(render(pdf_bytes, dpi), pdf_bytes, "\n\n".join(markdown))
