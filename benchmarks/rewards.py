"""Throughput of the GRPO reward (jina_ocr.rewards), single process, on real page text.

The reference pages are the text layers of the olmOCR-Bench fixture PDFs (a two-column article and
a paper page), the predictions the same text with OCR-like character noise, and the unit tests the
fixture's own olmOCR-Bench tests. Two table-and-formula pages show the cost of TEDS: a misread
cell keeps the table's shape (the exact shortcut applies), a dropped cell needs the full APTED. Prints pages
per second per case, by the wall clock and per CPU second (one process: the numbers are per core;
the CPU-time figure stays meaningful when other work shares the machine).

    python benchmarks/rewards.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import pymupdf

from jina_ocr.bench.olmocr import load_tests
from jina_ocr.rewards import prepare_reference, reward

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "olmocr"


def page_text(pdf: Path) -> str:
    with pymupdf.open(pdf) as doc:
        return doc[0].get_text()


def noisy(text: str, rate: float, seed: int = 0) -> str:
    """Substitute, drop or duplicate a share of the characters, as a mediocre OCR would."""
    rng = random.Random(seed)
    out = []
    for ch in text:
        roll = rng.random()
        if roll < rate / 3:
            out.append(rng.choice("abcdefghijklmnopqrstuvwxyz"))
        elif roll < 2 * rate / 3:
            continue
        elif roll < rate:
            out.append(ch + ch)
        else:
            out.append(ch)
    return "".join(out)


def table_page(rows: int = 12) -> str:
    body = "".join(
        f"<tr><td>Source {i}</td><td>{1.5 * i:.1f}B</td><td>{0.7 * i:.2f}T</td><td>{i * 13}</td></tr>"
        for i in range(rows)
    )
    return (
        "# Data mix\n\nTable 2 lists the sources and their sizes.\n\n"
        "<table><tr><th>Source</th><th>Tokens</th><th>Words</th><th>Docs</th></tr>" + body + "</table>\n\n"
        "The loss is $L = -\\sum_{t} \\log p_\\theta(x_t \\mid x_{<t})$ and\n\n$$\\eta_t = \\eta_0 \\frac{1}{\\sqrt{t}}$$\n"
    )


def measure(prediction: str, reference, seconds: float) -> tuple[float, float]:
    """Pages per wall-clock second and per CPU second (the latter holds on a busy machine too)."""
    reward(prediction, reference)  # warm caches shared by every call (regexes, imports)
    done, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        reward(prediction, reference)
        done += 1
    return done / (time.perf_counter() - start), done / (time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per case")
    args = parser.parse_args()

    tests = load_tests(FIXTURES / "tests.jsonl")
    article = page_text(FIXTURES / "multi_column_miss.pdf")
    paper = page_text(FIXTURES / "olmo2-pg4.pdf")
    article_tests = [t for t in tests if t["pdf"] == "multi_column_miss.pdf"]
    table = table_page()
    cases = [
        ("article text, no unit tests", article, noisy(article, 0.02), ()),
        (f"article text + {len(article_tests)} olmOCR tests", article, noisy(article, 0.02), article_tests),
        ("paper page text, no unit tests", paper, noisy(paper, 0.02), ()),
        ("12-row table + 2 formulas, a cell misread", table, table.replace("Source 3", "Sorce 3"), ()),
        ("12-row table + 2 formulas, a cell dropped", table, table.replace("<td>Source 3</td>", ""), ()),
    ]
    rows = [("case", "chars", "pages/s", "pages/CPU-s", "CPU ms/page")]
    for name, ref_text, prediction, case_tests in cases:
        reference = prepare_reference(ref_text, case_tests)
        wall, cpu = measure(prediction, reference, args.seconds)
        rows.append((name, str(len(ref_text)), f"{wall:,.0f}", f"{cpu:,.0f}", f"{1000 / cpu:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for k, row in enumerate(rows):
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if k == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
