"""Write the README's samples: ``page.pdf``, which the main job converts, and ``sample.pdf``.

They are generated rather than downloaded so that their licence is ours and every byte can be
reproduced. ``page.pdf`` is one page in the format the bundled demo model jina-ocr-tiny reads (A5, a
28 pt Helvetica Bold heading and two lines of 20 pt Helvetica, the layout of its printed test page);
``sample.pdf`` is the example for jina-ocr-v1: a report page with headings, a paragraph, a list and a
table, and a second page with a formula and two columns of text, which are what an OCR model for
documents must get right (reading order, tables, structure). Run ``python samples/make_sample.py``
to rebuild both.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pymupdf

PAGE = pymupdf.paper_rect("a4")
MARGIN = 56

# page.pdf: its heading and two body lines, and the Markdown a reader should write for them.
SHORT_HEADING = "Reading Room Notes"
SHORT_LINES = ("Evening visits rose again; the scan", "desk now returns most requests.")
SHORT_MARKDOWN = f"# {SHORT_HEADING}\n\n{' '.join(SHORT_LINES)}"

CSS = """
body { font-family: serif; font-size: 11pt; line-height: 1.35; }
h1 { font-size: 20pt; margin-bottom: 4pt; }
h2 { font-size: 14pt; margin-top: 14pt; }
p.meta { color: #555555; font-size: 9pt; }
table { border-collapse: collapse; margin-top: 6pt; }
th, td { border: 1px solid #333333; padding: 3pt 8pt; font-size: 10pt; }
th { background-color: #e8e8e8; }
td.num { text-align: right; }
p.formula { text-align: center; font-style: italic; font-size: 12pt; margin: 12pt 0; }
"""

PAGE_ONE = """
<h1>Quarterly Report: Reading Room Services</h1>
<p class="meta">City Library, Research Department &mdash; Q3 2025</p>
<h2>1. Summary</h2>
<p>Visits to the reading room rose for the third quarter in a row. Most of the growth came from
evening opening hours, introduced in July, and from the digitisation desk, which now scans about
two hundred pages per day for remote readers.</p>
<ul>
<li>Evening visits: up 38% on the previous quarter.</li>
<li>Digitised pages delivered: 12,480.</li>
<li>Average wait for a scan request: 1.6 days (target: 2 days).</li>
</ul>
<h2>2. Visits by month</h2>
<table>
<tr><th>Month</th><th>Day visits</th><th>Evening visits</th><th>Scan requests</th></tr>
<tr><td>July</td><td class="num">4,210</td><td class="num">860</td><td class="num">1,305</td></tr>
<tr><td>August</td><td class="num">3,975</td><td class="num">1,020</td><td class="num">1,412</td></tr>
<tr><td>September</td><td class="num">4,630</td><td class="num">1,145</td><td class="num">1,598</td></tr>
<tr><th>Total</th><th>12,815</th><th>3,025</th><th>4,315</th></tr>
</table>
"""

PAGE_TWO = """
<h2>3. Forecast</h2>
<p>We model monthly visits <i>v</i>(<i>t</i>) as a linear trend with a seasonal term, fitted to the
last 24 months by least squares:</p>
<p class="formula">v(t) = a + b&middot;t + c&middot;sin(2&pi;t / 12), &nbsp; with b = 41.5 and c = 310</p>
<p>The model predicts 4,900 day visits for October, with a 90% interval of 4,550 to 5,250.</p>
<h2>4. Recommendations</h2>
<ol>
<li>Keep the evening hours through the winter and review them in January.</li>
<li>Add a second scanner to the digitisation desk before the spring term.</li>
<li>Publish the scan queue length on the library website every morning.</li>
</ol>
<h2>5. The digitisation desk</h2>
"""

COLUMNS = (
    "The digitisation desk started as a pilot with one book scanner and a single member of staff. "
    "Requests are now taken through the online catalogue; readers choose pages, and the desk returns "
    "a PDF with a searchable text layer within two working days.",
    "Fragile material is scanned only after a conservator has checked it. In the third quarter, 46 "
    "items were referred to conservation, and 9 of them could not be scanned until repairs were made. "
    "These requests are excluded from the waiting-time figures above.",
)


def build() -> bytes:
    document = pymupdf.open()
    document.set_metadata({"title": "Quarterly Report: Reading Room Services", "author": "jina-ocr sample"})
    width = PAGE.width - 2 * MARGIN
    page = document.new_page(width=PAGE.width, height=PAGE.height)
    page.insert_htmlbox(pymupdf.Rect(MARGIN, MARGIN, MARGIN + width, PAGE.height - MARGIN), PAGE_ONE, css=CSS)
    page = document.new_page(width=PAGE.width, height=PAGE.height)
    page.insert_htmlbox(pymupdf.Rect(MARGIN, MARGIN, MARGIN + width, 330), PAGE_TWO, css=CSS)
    column = (width - 24) / 2
    for index, text in enumerate(COLUMNS):
        left = MARGIN + index * (column + 24)
        box = pymupdf.Rect(left, 330, left + column, PAGE.height - MARGIN - 30)
        page.insert_htmlbox(box, f"<p>{text}</p>", css=CSS)
    for number, page in enumerate(document, start=1):
        footer = pymupdf.Rect(MARGIN, PAGE.height - MARGIN, PAGE.width - MARGIN, PAGE.height - MARGIN + 20)
        page.insert_htmlbox(footer, f"<p style='text-align:center;font-size:9pt'>{number} / 2</p>")
    return document.tobytes(garbage=4, deflate=True, no_new_id=True)


def build_page() -> bytes:
    """``page.pdf``: set exactly as the bundled model's printed test page."""
    from jina_ocr.train.drills import printed_layout

    document = printed_layout(SHORT_HEADING, list(SHORT_LINES))
    document.set_metadata({"title": SHORT_HEADING, "author": "jina-ocr sample"})
    return document.tobytes(garbage=4, deflate=True, no_new_id=True)


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    for name, data in (("page.pdf", build_page()), ("sample.pdf", build())):
        target = folder / name
        target.write_bytes(data)
        print(f"wrote {target} ({target.stat().st_size:,} bytes)")
