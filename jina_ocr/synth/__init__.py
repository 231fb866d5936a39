"""JinaOCRSynth: synthetic document pages with ground-truth Markdown and olmOCR-Bench unit tests.

Pages mix headings, paragraphs, lists, one- and two-column text, HTML tables (header rows, rowspan,
colspan) and inline and display formulas typeset by LaTeX, in varied faces, sizes and margins. The
"dense" profile packs formulas and tables as in jina-ocr-v1's post-training data; "plain" is text
only. Everything is determined by the seed.
"""

from jina_ocr.synth.degrade import Degradation, degrade
from jina_ocr.synth.page import (
    PAGE_SIZES,
    PROFILES,
    SynthPage,
    generate_page,
    page_seed,
    parse_page_size,
    write_pages,
)

__all__ = [
    "PAGE_SIZES",
    "PROFILES",
    "Degradation",
    "SynthPage",
    "degrade",
    "generate_page",
    "page_seed",
    "parse_page_size",
    "write_pages",
]
