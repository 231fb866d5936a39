"""Evaluate a trained small model (jina-ocr-tiny by default) on what it was trained for, and beyond.

    python benchmarks/train_eval.py OUT [--model jina_ocr/models/jina-ocr-tiny] [--pages 100] [--seed 7]

1. Held-out JinaOCRSynth pages (run seed ``--seed``, which training never used), A5 at the trained
   body size, once text only ("plain") and once with tables and formulas ("dense"): character error
   rate against the ground-truth Markdown, and the olmOCR-style pass rate of ``jina-ocr bench``.
2. A plain printed page that is not from the generator: A5, a 28 pt heading and 20 pt body text set
   with PyMuPDF's ``insert_text``, converted by ``jina-ocr convert`` at 144 dpi (the main-job command:
   no ``--model`` when ``--model`` is the bundled one), with its character error rate.
3. Held-out reading drills (``--drill-levels``: from a few lines of large type to full pages of body
   text, drill seeds no training run uses): character error rate per level.
4. FastMTP on the synth pages (``--mtp-profiles``): acceptance per depth, committed tokens per verification step, and
   tokens per second against plain greedy in the same run at batch 1 (``--batch1-pages`` pages) and at
   batch 8, and whether FastMTP's tokens equal greedy's on every page.

Everything is written under OUT (pages, outputs, ``summary.json``) and the summary is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from pathlib import Path

import pymupdf
import torch
from PIL import Image

from jina_ocr.cli import main as cli
from jina_ocr.models import BUNDLED, hub_folder
from jina_ocr.synth import write_pages
from jina_ocr.train.drills import drill_page
from jina_ocr.train.evaluate import character_error_rate, transcribe
from jina_ocr.train.model_files import load_model_files

HEADING = "Notes on the Harbour Survey"
BODY = [
    "The survey team measured the depth of the",
    "harbour at low tide on three mornings in",
    "June. The new data show that the channel",
    "near the north pier is shallower than the",
    "chart says, so large boats should keep to",
    "the middle of the channel until it is dug.",
]


def printed_page(path: Path) -> str:
    """Write the A5 test page with ``insert_text`` and return the Markdown a reader should produce."""
    doc = pymupdf.open()
    page = doc.new_page(width=419.53, height=595.28)
    page.insert_text((42, 80), HEADING, fontsize=28, fontname="hebo")
    y = 140
    for line in BODY:
        page.insert_text((42, y), line, fontsize=20, fontname="helv")
        y += 28
    doc.save(path)
    return f"# {HEADING}\n\n" + " ".join(BODY)


def generate_all(model, processor, images, batch_size: int, use_mtp: bool, max_new_tokens: int):
    """Token rows (new tokens only, through EOS), seconds, new tokens, and FastMTP stats summed over calls."""
    rows, seconds, stats = [], 0.0, []
    eos = processor.tokenizer.eos_token_id
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        inputs = processor.prepare_ocr_inputs(chunk, device=model.device, dtype=model.dtype)
        began = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, use_mtp=use_mtp)
        seconds += time.perf_counter() - began
        for row in out[:, inputs["input_ids"].shape[1] :].tolist():
            rows.append(row[: row.index(eos) + 1] if eos in row else row)
        if use_mtp and model.fastmtp_stats:
            stats.append(dict(model.fastmtp_stats))
    tokens = sum(len(r) for r in rows)
    return rows, seconds, tokens, _merge_stats(stats)


def _merge_stats(stats: list[dict]) -> dict | None:
    if not stats:
        return None
    drafted = [
        sum(s["drafted_per_depth"][d] for s in stats) for d in range(len(stats[0]["drafted_per_depth"]))
    ]
    accepted = [sum(s["accepted_per_depth"][d] for s in stats) for d in range(len(drafted))]
    steps = sum(s["verification_steps"] for s in stats)
    committed = sum(s["committed_tokens"] for s in stats)
    return {
        "acceptance_per_depth": [
            round(a / d, 4) if d else 0.0 for a, d in zip(accepted, drafted, strict=True)
        ],
        "committed_per_step": round(committed / steps, 3) if steps else 0.0,
        "verification_steps": steps,
    }


def held_out(out: Path, profile: str, args, model, processor) -> dict:
    folder = out / profile
    pages = args.dense_pages if profile == "dense" and args.dense_pages else args.pages
    paths = write_pages(
        folder, pages, seed=args.seed, profile=profile, page_size="a5", font_size=args.font_size, dpi=144
    )
    images = [Image.open(p).convert("RGB") for p in paths]
    references = [p.with_suffix(".md").read_text(encoding="utf-8") for p in paths]
    result: dict = {"pages": len(paths)}
    for use_mtp in (False, True) if hasattr(model, "mtp_module") else (False,):  # one-time costs, untimed
        generate_all(model, processor, images[:1], 1, use_mtp, 8)
    greedy, seconds, tokens, _ = generate_all(model, processor, images, 8, False, args.max_new_tokens)
    result["greedy_batch8_tokens_per_s"] = round(tokens / seconds, 1)
    predictions = [processor.decode_ocr([row], None) for row in greedy]
    result["cer"] = round(character_error_rate(predictions, references), 4)
    outputs = folder / "outputs"
    outputs.mkdir(exist_ok=True)
    for path, text in zip(paths, predictions, strict=True):
        (outputs / f"{path.stem}_pg1_repeat1.md").write_text(text + "\n", encoding="utf-8")
    report = folder / "bench.json"
    with contextlib.redirect_stdout(io.StringIO()):
        cli(["bench", "--tests", str(folder / "tests.jsonl"), "--outputs", str(outputs), "--no-render",
             "--bootstrap", "0", "--report", str(report)])  # fmt: skip
    scored = json.loads(report.read_text(encoding="utf-8"))
    result["bench_pass_rate"] = round(scored["overall"], 4)
    result["bench_by_type"] = {name: f"{t['passed']}/{t['total']}" for name, t in scored["types"].items()}

    if hasattr(model, "mtp_module") and profile in args.mtp_profiles:
        drafted, mtp_seconds, mtp_tokens, stats = generate_all(
            model, processor, images, 8, True, args.max_new_tokens
        )
        result["fastmtp_batch8"] = {
            **(stats or {}),
            "tokens_per_s": round(mtp_tokens / mtp_seconds, 1),
            "greedy_tokens_per_s": result["greedy_batch8_tokens_per_s"],
            "identical_pages": sum(a == b for a, b in zip(drafted, greedy, strict=True)),
        }
        few = images[: args.batch1_pages]
        g1, g1_seconds, g1_tokens, _ = generate_all(model, processor, few, 1, False, args.max_new_tokens)
        m1, m1_seconds, m1_tokens, stats1 = generate_all(model, processor, few, 1, True, args.max_new_tokens)
        result["fastmtp_batch1"] = {
            **(stats1 or {}),
            "pages": len(few),
            "tokens_per_s": round(m1_tokens / m1_seconds, 1),
            "greedy_tokens_per_s": round(g1_tokens / g1_seconds, 1),
            "identical_pages": sum(a == b for a, b in zip(m1, g1, strict=True)),
        }
    return result


def held_out_drills(args, model, processor) -> dict:
    """Character error rate on held-out drills per level, with the first page's output as a sample."""
    result = {}
    for level in args.drill_levels:
        pages = [drill_page(f"held-out/{level}/{i}", level) for i in range(args.drill_pages)]
        texts = transcribe(model, processor, [p.image for p in pages], max_new_tokens=args.max_new_tokens)
        result[str(level)] = {
            "pages": len(pages),
            "cer": round(character_error_rate(texts, [p.markdown for p in pages]), 4),
            "sample": {"reference": pages[0].markdown[:160], "output": texts[0][:160]},
        }
    return result


def convert_printed_page(out: Path, model_files: Path) -> dict:
    pdf = out / "a5_printed.pdf"
    reference = printed_page(pdf)
    command = ["convert", str(pdf)]
    if model_files.resolve() != BUNDLED:
        command += ["--model", str(hub_folder(model_files))]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        cli(command)
    text = buffer.getvalue().strip()
    return {
        "reference": reference,
        "output": text,
        "cer": round(character_error_rate([text], [reference]), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--model", type=Path, default=BUNDLED, help="model files (default: the bundled jina-ocr-tiny)"
    )
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7, help="held-out run seed (training used 0, 1 and 2)")
    parser.add_argument("--font-size", type=float, default=20.0)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch1-pages", type=int, default=20)
    parser.add_argument("--profiles", nargs="+", default=["plain", "dense"])
    parser.add_argument("--dense-pages", type=int, help="pages of the dense profile (default: --pages)")
    parser.add_argument(
        "--mtp-profiles", nargs="*", default=["plain"], help="profiles FastMTP is measured on"
    )
    parser.add_argument("--drill-levels", type=float, nargs="*", default=[0.3, 0.6, 1.0])
    parser.add_argument("--drill-pages", type=int, default=30, help="held-out drills per level")
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    model, processor = load_model_files(args.model)
    summary = {profile: held_out(args.out, profile, args, model, processor) for profile in args.profiles}
    summary["drills"] = held_out_drills(args, model, processor)
    summary["printed_a5_page"] = convert_printed_page(args.out, args.model)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
