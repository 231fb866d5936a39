"""The content of a page as a stream of blocks, each with its page HTML and its ground-truth Markdown.

A block is the unit the composer fits onto the page (it is either entirely on the page and in the
ground truth, or neither). Its HTML is what PyMuPDF lays out; formulas in it are placeholders
``\\x00N\\x00`` that the composer replaces by boxes of the typeset formula's size. Its Markdown is
the model's output convention: ``#`` headings, blank-line separated paragraphs, ``- `` lists, HTML
tables, ``$...$`` and ``$$...$$`` LaTeX. The block also keeps what the unit tests are drawn from:
the plain sentences (no math, no emphasis, so normalisation cannot change them), its formulas and
its table.
"""

from __future__ import annotations

import html
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from jina_ocr.synth import formulas, tables, text


@dataclass
class Formula:
    latex: str
    display: bool


@dataclass
class Block:
    """One fit-or-drop unit of a page: a heading, paragraph, list, table (with caption) or display formula."""

    kind: str
    html: str
    markdown: str
    sentences: list[str] = field(default_factory=list)
    formulas: list[int] = field(default_factory=list)
    table: tables.Table | None = None
    # True for the title and author line, which span all columns of a two-column page.
    wide: bool = False


class Content:
    """Builds blocks and collects the page's formulas so they can be typeset in one TeX run."""

    def __init__(self, rng: random.Random, math: bool, max_sentences: int = 7) -> None:
        self.rng = rng
        self.math = math
        # Paragraphs are shorter on small pages, so that one paragraph never outgrows a page.
        self.max_sentences = max_sentences
        self.formulas: list[Formula] = []
        self.section = 0
        self.subsection = 0
        self.table_number = rng.randint(1, 6)

    def _formula(self, latex: str, display: bool) -> tuple[int, str]:
        self.formulas.append(Formula(latex, display))
        return len(self.formulas) - 1, f"\x00{len(self.formulas) - 1}\x00"

    def _sentence(self, block: Block) -> tuple[str, str]:
        """One sentence as (html, markdown): plain, emphasised, or carrying inline math."""
        rng = self.rng
        roll = rng.random()
        if self.math and roll < 0.45:
            index, mark = self._formula(formulas.inline_formula(rng), display=False)
            block.formulas.append(index)
            latex = self.formulas[index].latex
            shape = rng.choice(
                (
                    ("Let ", " denote " + text.noun_phrase(rng) + "."),
                    (text.noun_phrase(rng).capitalize() + " satisfies ", "."),
                    ("We set ", " " + rng.choice(text.PREPOSITIONS) + " " + text.noun_phrase(rng) + "."),
                    ("In this case ", " holds " + rng.choice(text.ADVERBS) + "."),
                    (text.sentence(rng)[:-1] + ", where ", " is " + text.noun_phrase(rng) + "."),
                )
            )
            return (
                html.escape(shape[0]) + mark + html.escape(shape[1]),
                f"{shape[0]}${latex}${shape[1]}",
            )
        sentence = text.sentence(rng)
        if roll > 0.93:
            words = sentence.split(" ")
            k = rng.randrange(1, len(words) - 1)
            tag, md = rng.choice((("b", "**"), ("i", "*")))
            word = words[k].rstrip(".,")
            rest = words[k][len(word) :]
            html_words = [html.escape(w) for w in words]
            html_words[k] = f"<{tag}>{html.escape(word)}</{tag}>{rest}"
            md_words = list(words)
            md_words[k] = f"{md}{word}{md}{rest}"
            return " ".join(html_words), " ".join(md_words)
        block.sentences.append(sentence)
        return html.escape(sentence), sentence

    def paragraph(self, n_sentences: int | None = None) -> Block:
        block = Block("paragraph", "", "")
        n_sentences = min(n_sentences or self.rng.randint(2, 7), self.max_sentences)
        parts = [self._sentence(block) for _ in range(n_sentences)]
        block.html = "<p>" + " ".join(h for h, _ in parts) + "</p>"
        block.markdown = " ".join(m for _, m in parts)
        return block

    def heading(self, level: int) -> Block:
        if level == 2:
            self.section += 1
            self.subsection = 0
            number = str(self.section)
        else:
            self.subsection += 1
            number = f"{self.section}.{self.subsection}"
        words = text.heading(self.rng, number if self.rng.random() < 0.8 else "")
        return Block(
            "heading", f"<h{level}>{html.escape(words)}</h{level}>", f"{'#' * level} {words}", [words]
        )

    def title(self) -> list[Block]:
        words = text.title(self.rng)
        names = text.authors(self.rng)
        return [
            Block("title", f"<h1>{html.escape(words)}</h1>", f"# {words}", [words], wide=True),
            Block("authors", f'<p class="authors">{html.escape(names)}</p>', names, [names], wide=True),
        ]

    def item_list(self) -> Block:
        ordered = self.rng.random() < 0.3
        block = Block("list", "", "")
        items_html, items_md = [], []
        for k in range(self.rng.randint(2, 5)):
            if self.math and self.rng.random() < 0.3:
                h, m = self._sentence(block)
            else:
                m = text.list_item(self.rng)
                h = html.escape(m)
                block.sentences.append(m)
            items_html.append(f"<li>{h}</li>")
            items_md.append(f"{k + 1}. {m}" if ordered else f"- {m}")
        tag = "ol" if ordered else "ul"
        block.html = f"<{tag}>{''.join(items_html)}</{tag}>"
        block.markdown = "\n".join(items_md)
        return block

    def display(self) -> Block:
        index, mark = self._formula(formulas.display_formula(self.rng), display=True)
        latex = self.formulas[index].latex
        return Block("formula", f'<p class="eq">{mark}</p>', f"$${latex}$$", formulas=[index])

    def table(self, max_cols: int) -> Block:
        table = tables.random_table(self.rng, max_cols)
        caption = f"Table {self.table_number}: {table.caption}" if table.caption else ""
        self.table_number += 1
        page_html = _page_table_html(table)
        markdown = table.html()
        if caption:
            page_html = f'<p class="caption">{html.escape(caption)}</p>' + page_html
            markdown = f"{caption}\n\n{markdown}"
        return Block("table", page_html, markdown, [caption] if caption else [], table=table)


def _page_table_html(table: tables.Table) -> str:
    """The table as laid out on the page: the ground-truth structure plus rule classes for the CSS."""
    parts = ["<table>"]
    last = len(table.rows) - 1
    for r, row in enumerate(table.rows):
        parts.append("<tr>")
        for cell in row:
            classes = []
            if r == 0:
                classes.append("first")
            if table.header_rows and r + cell.rowspan == table.header_rows:
                classes.append("headend")
            if r + cell.rowspan - 1 == last:
                classes.append("last")
            name = "th" if cell.header else "td"
            attrs = f' class="{" ".join(classes)}"' if classes else ""
            attrs += f' rowspan="{cell.rowspan}"' if cell.rowspan > 1 else ""
            attrs += f' colspan="{cell.colspan}"' if cell.colspan > 1 else ""
            parts.append(f"<{name}{attrs}>{html.escape(cell.text, quote=False)}</{name}>")
        parts.append("</tr>")
    parts.append("</table>")
    return "".join(parts)


def stream(content: Content, profile: str, with_title: bool, max_table_cols: int) -> Iterator[Block]:
    """An endless, seeded sequence of blocks in document order for the given profile.

    "dense" packs display formulas, tables and math-heavy paragraphs (JinaOCRSynth's mix);
    "plain" is headings, paragraphs and lists only.
    """
    rng = content.rng
    if with_title:
        yield from content.title()
        if rng.random() < 0.5:
            yield content.paragraph(rng.randint(3, 6))
    yield content.heading(2)
    since_heading, last = 0, "heading"
    while True:
        since_heading += 1
        roll = rng.random()
        if since_heading > rng.randint(3, 7):
            since_heading = 0
            block = content.heading(2 if rng.random() < 0.5 else 3)
        elif profile == "dense" and roll < 0.3:
            block = content.display()
        elif profile == "dense" and roll < 0.5:
            block = content.table(max_table_cols)
        elif roll > 0.85 and last != "list":  # two lists in a row would read as one in Markdown
            block = content.item_list()
        else:
            block = content.paragraph()
        last = block.kind
        yield block
