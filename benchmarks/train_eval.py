"""Evaluate a trained small model (jina-ocr-tiny by default) on what it was trained for, and beyond.

    python benchmarks/train_eval.py OUT [--model jina_ocr/models/jina-ocr-tiny] [--pages 100] [--seed 7]

1. Held-out pages of the target format (A5, a 24-32 pt heading, 2-8 lines of 18-22 pt body text in
   Helvetica, Times or Courier, set with ``insert_text``), printed in words no training page uses
   (:mod:`jina_ocr.train.held_out_words`): character error rate of our Markdown, per font and per line
   count, and our model against Tesseract on the same images (both compared on the words alone, with
   whitespace folded and heading marks dropped), with seconds per page of each.
2. Held-out pages of each curriculum stage (``--stage-pages`` each): character error rate.
3. Held-out JinaOCRSynth pages (run seed ``--seed``), A5, text only ("plain") and with tables and
   formulas ("dense"): character error rate and the olmOCR-style pass rate of ``jina-ocr bench``, however
   poor: the model was not trained to read them.
4. The printed test page (:func:`jina_ocr.train.drills.printed_page`: a 28 pt heading, two 20 pt lines
   of held-out words) converted by ``jina-ocr convert`` with no ``--model`` when ``--model`` is the
   bundled one (the README's main job), with its character error rate.
5. FastMTP on the target-format pages: acceptance per depth, committed tokens per verification step,
   tokens per second against plain greedy in the same run at batch 1 (``--batch1-pages`` pages) and
   batch 8, what a whole FastMTP step (drafts, verification, bookkeeping) costs against a greedy step
   (seconds per main-model forward), and whether FastMTP's tokens equal greedy's on every page.
6. Held-out target-format pages on which a share of the words repeat the word before them
   (``--repeat-pages`` pages, ``repeats`` of :meth:`PageRecipe.held_out_pages`): character error rate,
   and how many of the adjacent repeated words the transcription keeps (a decoder that never saw a word
   repeat tends to skip the second).
7. The first ``--dpi-pages`` held-out target-format pages rendered at each of ``--dpis`` (the same words at
   the same places in points): character error rate per resolution. A model trained on pages of one
   resolution (``DEFAULT_DPI``, ``jina-ocr convert``'s default) meets users' pages at their ``--dpi``.
8. The first ``--degraded-pages`` held-out target-format pages through each degradation group of
   :data:`jina_ocr.train.degrade.EVALUATION_GROUPS` (paper tone, a photographed sheet, noise and blur,
   JPEG, rotation, 96 / 200 / 300 dpi, a bilevel scan), each page from its own seed: character error
   rate of ours and Tesseract's on the same images (words alone), per group.

9. Page confidence (``confidence`` of :mod:`jina_ocr.runtime.confidence`, the JSON's) on a mixed set:
   the first ``--confidence-pages`` clean target-format pages, as many through the degradation groups
   (in turn), A4 pages of one 11 pt Times paragraph, the Tesseract fixtures, the first page of each
   olmOCR fixture (its text layer as reference) and synth pages. A page read at words CER under 0.05 is
   good, over 0.30 bad: the area under the ROC curve of confidence (and of the mean and the lowest token
   log-probability) ranking good above bad, and for each threshold the share of bad and of good pages
   it flags.

Everything is written under OUT (pages, outputs, ``summary.json``) and a table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import torch
from PIL import Image

from jina_ocr.bench.peers import tesseract_text, unavailable
from jina_ocr.cli import main as cli
from jina_ocr.model_files import load_model_files
from jina_ocr.models import BUNDLED
from jina_ocr.runtime.batching import BatchDriver, Page
from jina_ocr.runtime.confidence import summarize
from jina_ocr.runtime.pdf import DEFAULT_DPI
from jina_ocr.synth import write_pages
from jina_ocr.synth.page import render
from jina_ocr.train.degrade import EVALUATION_GROUPS
from jina_ocr.train.drills import STAGES, printed_page
from jina_ocr.train.evaluate import character_error_rate
from jina_ocr.train.recipe import PageRecipe


def words_only(text: str) -> str:
    """The text with heading marks dropped and every run of whitespace folded to one space."""
    return " ".join(re.sub(r"^#+ ", "", text, flags=re.MULTILINE).split())


@dataclass
class Run:
    """Token rows (new tokens only, through EOS), seconds, forward passes of the main model (a greedy
    batch takes one per token of its longest row; FastMTP one per verification step, both plus the
    prefill) and the FastMTP stats of each ``generate`` call (``model.fastmtp_stats``)."""

    rows: list[list[int]]
    seconds: float
    forwards: int
    calls: list[dict]

    @property
    def tokens(self) -> int:
        return sum(map(len, self.rows))

    @property
    def seconds_per_forward(self) -> float:
        return self.seconds / self.forwards

    @property
    def stats(self) -> dict | None:
        """FastMTP acceptance per depth and committed tokens per verification step over all calls."""
        if not self.calls:
            return None
        depths = range(len(self.calls[0]["drafted_per_depth"]))
        drafted = [sum(call["drafted_per_depth"][d] for call in self.calls) for d in depths]
        accepted = [sum(call["accepted_per_depth"][d] for call in self.calls) for d in depths]
        steps = sum(call["verification_steps"] for call in self.calls)
        committed = sum(call["committed_tokens"] for call in self.calls)
        return {
            "acceptance_per_depth": [
                round(a / d, 4) if d else 0.0 for a, d in zip(accepted, drafted, strict=True)
            ],
            "committed_per_step": round(committed / steps, 3) if steps else 0.0,
            "verification_steps": steps,
        }

    @staticmethod
    def combine(runs: list[Run]) -> Run:
        """One run made of ``runs`` in order."""
        return Run(
            [row for run in runs for row in run.rows],
            sum(run.seconds for run in runs),
            sum(run.forwards for run in runs),
            [call for run in runs for call in run.calls],
        )


def generate_all(model, processor, images, batch_size: int, use_mtp: bool, max_new_tokens: int) -> Run:
    rows, seconds, calls, forwards = [], 0.0, [], 0
    eos = processor.tokenizer.eos_token_id
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        inputs = processor.prepare_ocr_inputs(chunk, device=model.device, dtype=model.dtype)
        began = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, use_mtp=use_mtp)
        seconds += time.perf_counter() - began
        new = [
            row[: row.index(eos) + 1] if eos in row else row
            for row in out[:, inputs["input_ids"].shape[1] :].tolist()
        ]
        rows += new
        if use_mtp and model.fastmtp_stats:
            calls.append(dict(model.fastmtp_stats))
            forwards += 1 + model.fastmtp_stats["verification_forwards"]
        else:
            forwards += max(map(len, new))
    return Run(rows, seconds, forwards, calls)


def transcribe(model, processor, images, args) -> tuple[list[str], Run]:
    run = generate_all(model, processor, images, 8, False, args.max_new_tokens)
    return [processor.decode_ocr([row], None) for row in run.rows], run


def target_format(out: Path, args, model, processor) -> dict:
    """Section 1, and section 5 on the same pages."""
    pages = PageRecipe().held_out_pages(len(STAGES) - 1, args.seed, args.pages)
    folder = out / "target_format"
    folder.mkdir(parents=True, exist_ok=True)
    for i, page in enumerate(pages):
        page.image.save(folder / f"page_{i:03d}.png")
        (folder / f"page_{i:03d}.md").write_text(page.markdown + "\n", encoding="utf-8")
    images = [p.image for p in pages]
    references = [p.markdown for p in pages]
    generate_all(model, processor, images[:1], 1, False, 8)  # one-time costs, untimed
    ours, greedy = transcribe(model, processor, images, args)
    for i, text in enumerate(ours):
        (folder / f"page_{i:03d}.ours.md").write_text(text + "\n", encoding="utf-8")
    result: dict = {
        "pages": len(pages),
        "cer": round(character_error_rate(ours, references), 4),
        "ours_words_cer": round(
            character_error_rate(list(map(words_only, ours)), list(map(words_only, references))), 4
        ),
        "ours_seconds_per_page": round(greedy.seconds / len(pages), 3),
    }
    groups: dict[str, list[int]] = defaultdict(list)
    for i, page in enumerate(pages):
        groups[f"font {page.font}"].append(i)
        groups[f"{page.lines} lines"].append(i)
    result["cer_by_group"] = {
        name: round(character_error_rate([ours[i] for i in idx], [references[i] for i in idx]), 4)
        for name, idx in sorted(groups.items())
    }
    if unavailable("tesseract") is None:
        began = time.perf_counter()
        theirs = [tesseract_text(image) for image in images]
        result["tesseract_seconds_per_page"] = round((time.perf_counter() - began) / len(pages), 3)
        result["tesseract_words_cer"] = round(
            character_error_rate(list(map(words_only, theirs)), list(map(words_only, references))), 4
        )
    else:
        result["tesseract"] = unavailable("tesseract")
    if hasattr(model, "mtp_module"):
        result["fastmtp"] = fastmtp(model, processor, images, greedy, args)
    return result


def fastmtp(model, processor, images, greedy: Run, args) -> dict:
    """FastMTP against greedy at batch 8 (all pages) and batch 1 (the first ``--batch1-pages``)."""
    generate_all(model, processor, images[:1], 1, True, 8)  # one-time costs, untimed
    few = images[: args.batch1_pages]
    runs = {
        "batch8": (greedy, generate_all(model, processor, images, 8, True, args.max_new_tokens)),
        "batch1": (
            generate_all(model, processor, few, 1, False, args.max_new_tokens),
            generate_all(model, processor, few, 1, True, args.max_new_tokens),
        ),
    }
    return {
        batch: {
            **(drafted.stats or {}),
            "tokens_per_s": round(drafted.tokens / drafted.seconds, 1),
            "greedy_tokens_per_s": round(plain.tokens / plain.seconds, 1),
            "step_cost_vs_greedy": round(drafted.seconds_per_forward / plain.seconds_per_forward, 2),
            "identical_pages": f"{sum(a == b for a, b in zip(drafted.rows, plain.rows, strict=True))}/{len(plain.rows)}",
        }
        for batch, (plain, drafted) in runs.items()
    }


REPEAT_SHARE = 0.2


def repeats_kept(text: str, reference: str) -> tuple[int, int]:
    """Adjacent repeated words of ``reference`` (case and punctuation aside) that ``text`` also has, and
    how many the reference has."""

    def pairs(words: str) -> Counter:
        bare = [w.strip(",.;:").lower() for w in words_only(words).split()]
        return Counter(a for a, b in pairwise(bare) if a == b)

    wanted, found = pairs(reference), pairs(text)
    return sum(min(n, found[w]) for w, n in wanted.items()), sum(wanted.values())


def repeated_words(args, model, processor) -> dict:
    """Section 6: held-out target-format pages where words repeat the word before them."""
    pages = PageRecipe().held_out_pages(len(STAGES) - 1, args.seed, args.repeat_pages, repeats=REPEAT_SHARE)
    references = [p.markdown for p in pages]
    texts, _ = transcribe(model, processor, [p.image for p in pages], args)
    kept = [repeats_kept(text, ref) for text, ref in zip(texts, references, strict=True)]
    return {
        "pages": len(pages),
        "cer": round(character_error_rate(texts, references), 4),
        "repeats_kept": f"{sum(k for k, _ in kept)}/{sum(n for _, n in kept)}",
    }


def resolutions(args, model, processor) -> dict:
    """Section 7: the same held-out target-format pages rendered at each of ``--dpis``."""
    result = {}
    for dpi in args.dpis:
        pages = PageRecipe(dpi=dpi).held_out_pages(len(STAGES) - 1, args.seed, args.dpi_pages)
        texts, _ = transcribe(model, processor, [p.image for p in pages], args)
        result[str(dpi)] = {
            "pages": len(pages),
            "pixels": list(pages[0].image.size),
            "cer": round(character_error_rate(texts, [p.markdown for p in pages]), 4),
        }
    return result


def degradations(args, model, processor) -> dict:
    """Section 8: held-out target-format pages through each degradation group, ours and Tesseract's."""
    result = {}
    for name in EVALUATION_GROUPS:
        pages = PageRecipe().held_out_pages(len(STAGES) - 1, args.seed, args.degraded_pages, degradation=name)
        references = [words_only(p.markdown) for p in pages]
        texts, _ = transcribe(model, processor, [p.image for p in pages], args)
        row = {
            "pages": len(pages),
            "cer": round(character_error_rate(texts, [p.markdown for p in pages]), 4),
            "ours_words_cer": round(character_error_rate(list(map(words_only, texts)), references), 4),
        }
        if unavailable("tesseract") is None:
            theirs = [words_only(tesseract_text(p.image)) for p in pages]
            row["tesseract_words_cer"] = round(character_error_rate(theirs, references), 4)
        result[name] = row
    return result


GOOD_CER, BAD_CER = 0.05, 0.30
THRESHOLDS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def a4_paragraph(seed: int) -> tuple[Image.Image, str]:
    """An A4 page of one 11 pt Times paragraph of held-out words (a format the model never saw)."""
    import random

    import pymupdf

    from jina_ocr.train.held_out_words import HELD_OUT_WORDS

    rng = random.Random(f"a4-paragraph/{seed}")
    text = " ".join(rng.choice(HELD_OUT_WORDS) for _ in range(rng.randint(60, 140)))
    with pymupdf.open() as doc:
        page = doc.new_page(width=595, height=842)
        page.insert_textbox(pymupdf.Rect(72, 72, 523, 770), text, fontname="tiro", fontsize=11)
        pdf = doc.tobytes()
    return render(pdf, DEFAULT_DPI), text


def fixture_pages() -> list[tuple[Image.Image, str]]:
    """The Tesseract fixtures with their text and the first page of each olmOCR fixture PDF with its
    text layer as the reference."""
    import pymupdf

    pages = [
        (
            Image.open(FIXTURES / "tesseract" / name).convert("RGB"),
            (FIXTURES / "tesseract" / "phototest.txt").read_text(),
        )
        for name in ("phototest.tif", "phototest-rotated-L.png")
    ]
    for pdf in sorted((FIXTURES / "olmocr").glob("*.pdf")):
        with pymupdf.open(pdf) as doc:
            reference = doc[0].get_text()
        if reference.strip():
            pages.append((render(pdf.read_bytes(), DEFAULT_DPI), reference))
    return pages


def roc_auc(good: list[float], bad: list[float]) -> float:
    """The chance that a good page's score is above a bad page's (ties count half)."""
    pairs = [(g > b) + 0.5 * (g == b) for g in good for b in bad]
    return sum(pairs) / len(pairs) if pairs else float("nan")


def confidences(args, model, processor) -> dict:
    """Section 9: does the page confidence tell pages read well from pages read badly?"""
    recipe, last = PageRecipe(), len(STAGES) - 1
    n = args.confidence_pages
    sets: list[tuple[str, Image.Image, str]] = [
        ("clean", p.image, p.markdown) for p in recipe.held_out_pages(last, args.seed, n)
    ]
    for i in range(n):
        group = EVALUATION_GROUPS[i % len(EVALUATION_GROUPS)]
        page = recipe.held_out_pages(last, args.seed + 1000 + i, 1, degradation=group)[0]
        sets.append((f"degraded {group}", page.image, page.markdown))
    sets += [("A4 paragraph", *a4_paragraph(i)) for i in range(max(1, n // 4))]
    sets += [("fixture", image, text) for image, text in fixture_pages()]
    synth = write_pages(
        args.out / "confidence_synth", max(1, n // 4), seed=args.seed, page_size="a5", dpi=DEFAULT_DPI
    )
    sets += [("synth", Image.open(p).convert("RGB"), p.with_suffix(".md").read_text()) for p in synth]
    driver = BatchDriver(model, processor, max_new_tokens=args.max_new_tokens)
    rows = []
    for (kind, _, reference), outcome in zip(
        sets, driver.run([Page(image) for _, image, _ in sets], 8), strict=True
    ):
        if isinstance(outcome, Exception):
            raise outcome
        summary = summarize(outcome.logprobs, outcome.finish_reason)
        cer = character_error_rate([words_only(outcome.markdown)], [words_only(reference)])
        rows.append(
            {"kind": kind, "cer": round(cer, 4), "finish_reason": outcome.finish_reason, **vars(summary)}
        )
    good = [r for r in rows if r["cer"] < GOOD_CER]
    bad = [r for r in rows if r["cer"] > BAD_CER]
    result = {"pages": len(rows), "good": len(good), "bad": len(bad), "rows": rows}
    for score in ("confidence", "mean_logprob", "min_logprob"):
        result[f"auc_{score}"] = round(roc_auc([r[score] for r in good], [r[score] for r in bad]), 4)
    result["thresholds"] = {
        str(t): {
            "bad_flagged": round(sum(r["confidence"] < t for r in bad) / max(1, len(bad)), 3),
            "good_flagged": round(sum(r["confidence"] < t for r in good) / max(1, len(good)), 3),
        }
        for t in THRESHOLDS
    }
    return result


def print_confidences(result: dict) -> None:
    print(
        f"\nPage confidence on {result['pages']} mixed pages ({result['good']} read at CER < {GOOD_CER}, "
        f"{result['bad']} at CER > {BAD_CER}): ROC AUC of confidence {result['auc_confidence']}, "
        f"mean log-prob {result['auc_mean_logprob']}, lowest log-prob {result['auc_min_logprob']}"
    )
    print(f"{'threshold':<11}{'bad flagged':>13}{'good flagged':>14}")
    for threshold, row in result["thresholds"].items():
        print(f"{threshold:<11}{row['bad_flagged']:>13.3f}{row['good_flagged']:>14.3f}")


def stages(args, model, processor) -> dict:
    """Section 2: held-out pages of each curriculum stage."""
    recipe, result = PageRecipe(), {}
    for stage, name in enumerate(STAGES):
        pages = recipe.held_out_pages(stage, args.seed, args.stage_pages)
        texts, _ = transcribe(model, processor, [p.image for p in pages], args)
        result[name] = {
            "pages": len(pages),
            "cer": round(character_error_rate(texts, [p.markdown for p in pages]), 4),
            "sample": {"reference": pages[0].markdown[:160], "output": texts[0][:160]},
        }
    return result


def synth_pages(out: Path, profile: str, args, model, processor) -> dict:
    """Section 3: held-out synth pages of ``profile``."""
    folder = out / profile
    paths = write_pages(
        folder, args.synth_pages, seed=args.seed, profile=profile, page_size="a5", dpi=DEFAULT_DPI
    )
    images = [Image.open(p).convert("RGB") for p in paths]
    references = [p.with_suffix(".md").read_text(encoding="utf-8") for p in paths]
    predictions, run = transcribe(model, processor, images, args)
    outputs = folder / "outputs"
    outputs.mkdir(exist_ok=True)
    for path, text in zip(paths, predictions, strict=True):
        (outputs / f"{path.stem}_pg1_repeat1.md").write_text(text + "\n", encoding="utf-8")
    report = folder / "bench.json"
    with contextlib.redirect_stdout(io.StringIO()):
        cli(["bench", "--tests", str(folder / "tests.jsonl"), "--outputs", str(outputs), "--no-render",
             "--bootstrap", "0", "--report", str(report)])  # fmt: skip
    scored = json.loads(report.read_text(encoding="utf-8"))
    return {
        "pages": len(paths),
        "cer": round(character_error_rate(predictions, references), 4),
        "seconds_per_page": round(run.seconds / len(paths), 3),
        "bench_pass_rate": round(scored["overall"], 4),
    }


def convert_printed_page(out: Path, model_files: Path) -> dict:
    """Section 4: the printed test page through ``jina-ocr convert``."""
    page = printed_page()
    pdf = out / "printed_page.pdf"
    pdf.write_bytes(page.pdf_bytes)
    command = ["convert", str(pdf)]
    if model_files.resolve() != BUNDLED:
        command += ["--model", str(model_files)]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        cli(command)
    text = re.sub(r"^<!-- page \d+ -->\n+", "", buffer.getvalue().strip())
    return {
        "reference": page.markdown,
        "output": text,
        "cer": round(character_error_rate([text], [page.markdown]), 4),
    }


def print_degradations(rows: dict) -> None:
    print("\nDegraded target-format pages (words CER; ours' Markdown CER in brackets):")
    print(f"{'group':<12}{'pages':>6}{'ours':>9}{'tesseract':>11}")
    for name, row in rows.items():
        theirs = f"{row['tesseract_words_cer']:.4f}" if "tesseract_words_cer" in row else "-"
        print(f"{name:<12}{row['pages']:>6}{row['ours_words_cer']:>9.4f}{theirs:>11}  ({row['cer']:.4f})")


def print_table(summary: dict) -> None:
    target = summary["target_format"]
    print(f"\nTarget-format held-out pages ({target['pages']}):")
    print(f"{'system':<14}{'words CER':>10}{'s/page':>9}")
    print(f"{'ours':<14}{target['ours_words_cer']:>10.4f}{target['ours_seconds_per_page']:>9.3f}")
    if "tesseract_words_cer" in target:
        print(
            f"{'tesseract':<14}{target['tesseract_words_cer']:>10.4f}{target['tesseract_seconds_per_page']:>9.3f}"
        )
    print(f"ours, Markdown CER {target['cer']:.4f}; by group:")
    for name, cer in target["cer_by_group"].items():
        print(f"  {name:<12}{cer:>8.4f}")
    print(
        "\nHeld-out pages per stage: "
        + ", ".join(f"{k} {v['cer']:.4f}" for k, v in summary["stages"].items())
    )
    for profile in ("plain", "dense"):
        if profile in summary:
            s = summary[profile]
            print(f"synth {profile}: CER {s['cer']:.4f}, bench pass rate {s['bench_pass_rate']:.4f}")
    repeats = summary["repeated_words"]
    print(
        f"{repeats['pages']} pages with repeated words: CER {repeats['cer']:.4f}, "
        f"adjacent repeats kept {repeats['repeats_kept']}"
    )
    print(f"printed page through jina-ocr convert: CER {summary['printed_page']['cer']:.4f}")
    print(
        "the first target-format pages by render resolution: "
        + ", ".join(f"{dpi} dpi {row['cer']:.4f}" for dpi, row in summary["resolutions"].items())
    )
    if summary.get("degradations"):
        print_degradations(summary["degradations"])
    if summary.get("confidence"):
        print_confidences(summary["confidence"])
    if "fastmtp" in target:
        for batch, row in target["fastmtp"].items():
            print(
                f"FastMTP {batch}: {row['tokens_per_s']} tok/s vs greedy {row['greedy_tokens_per_s']}; "
                f"acceptance {row.get('acceptance_per_depth')}, committed/step {row.get('committed_per_step')}, "
                f"step cost {row['step_cost_vs_greedy']}x greedy, "
                f"identical {row['identical_pages']}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--model", type=Path, default=BUNDLED, help="model files (default: the bundled jina-ocr-tiny)"
    )
    parser.add_argument("--pages", type=int, default=100, help="held-out target-format pages (100)")
    parser.add_argument("--seed", type=int, default=7, help="seed of every held-out page (7)")
    parser.add_argument("--stage-pages", type=int, default=16, help="held-out pages per curriculum stage")
    parser.add_argument("--synth-pages", type=int, default=20, help="held-out synth pages per profile")
    parser.add_argument("--profiles", nargs="*", default=["plain", "dense"], help="synth profiles to read")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--batch1-pages", type=int, default=10)
    parser.add_argument(
        "--repeat-pages", type=int, default=32, help="held-out pages with repeated words (32)"
    )
    parser.add_argument(
        "--dpi-pages", type=int, default=16, help="target-format pages read at each of --dpis (16)"
    )
    parser.add_argument(
        "--dpis",
        type=int,
        nargs="+",
        default=[96, 120, DEFAULT_DPI, 192],
        help=f"render resolutions of section 7 (96 120 {DEFAULT_DPI} 192)",
    )
    parser.add_argument(
        "--degraded-pages", type=int, default=100, help="target-format pages through each degradation (100)"
    )
    parser.add_argument(
        "--confidence-pages", type=int, default=48, help="clean and degraded pages of section 9 (48 each)"
    )
    parser.add_argument(
        "--only", choices=("degraded", "confidence"), help="run section 8 (degraded) or 9 (confidence) alone"
    )
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    model, processor = load_model_files(args.model)
    if args.only is not None:
        section = degradations if args.only == "degraded" else confidences
        summary = {args.only: section(args, model, processor)}
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (print_degradations if args.only == "degraded" else print_confidences)(summary[args.only])
        return
    summary = {"target_format": target_format(args.out, args, model, processor)}
    summary["stages"] = stages(args, model, processor)
    for profile in args.profiles:
        summary[profile] = synth_pages(args.out, profile, args, model, processor)
    summary["repeated_words"] = repeated_words(args, model, processor)
    summary["printed_page"] = convert_printed_page(args.out, args.model)
    summary["resolutions"] = resolutions(args, model, processor)
    summary["degradations"] = degradations(args, model, processor)
    summary["confidence"] = confidences(args, model, processor)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print_table(summary)


if __name__ == "__main__":
    main()
