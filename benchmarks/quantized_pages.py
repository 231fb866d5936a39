"""The bundled model quantised: what int8 and int4 cost in accuracy, and FastMTP on the quantised model.

    python benchmarks/quantized_pages.py [--pages 200] [--mtp-pages 32] [--threads 2]

1. Character error rate on the bundle gate's held-out pages (target format, seed ``GATE_SEED``, clean),
   greedy, for the bundled model in bfloat16, int8 and int4 (``jina_ocr.load(quantize=...)``).
2. On the first ``--mtp-pages`` of them, each quantised model's FastMTP output against its own greedy
   output (pages whose tokens are identical) and the tokens per second of both, at batch 1.

Prints a table; nothing is asserted.
"""

from __future__ import annotations

import argparse
import time

import torch

from jina_ocr.loading import load
from jina_ocr.models import BUNDLED
from jina_ocr.train.bundle import GATE_SEED
from jina_ocr.train.drills import STAGES
from jina_ocr.train.evaluate import character_error_rate
from jina_ocr.train.recipe import PageRecipe


def read(model, processor, images, batch_size: int, use_mtp: bool) -> tuple[list[list[int]], float]:
    """Each page's new token ids (through EOS) and the seconds ``generate`` took over all pages."""
    rows, seconds, eos = [], 0.0, processor.tokenizer.eos_token_id
    for start in range(0, len(images), batch_size):
        inputs = processor.prepare_ocr_inputs(
            images[start : start + batch_size], device=model.device, dtype=model.dtype
        )
        began = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=512, do_sample=False, use_mtp=use_mtp)
        seconds += time.perf_counter() - began
        for row in out[:, inputs["input_ids"].shape[1] :].tolist():
            rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--mtp-pages", type=int, default=32)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pages = PageRecipe().held_out_pages(len(STAGES) - 1, GATE_SEED, args.pages)
    images, references = [p.image for p in pages], [p.markdown for p in pages]
    print(f"{'weights':<10}{'CER':>8}{'FastMTP = greedy':>18}{'greedy tok/s':>14}{'FastMTP tok/s':>15}")
    for scheme in (None, "int8", "int4"):
        model, processor = load(BUNDLED, device="cpu", dtype="bfloat16", quantize=scheme)
        rows, _ = read(model, processor, images, 8, False)
        cer = character_error_rate([processor.decode_ocr([row], None) for row in rows], references)
        few = images[: args.mtp_pages]
        greedy, greedy_seconds = read(model, processor, few, 1, False)
        drafted, drafted_seconds = read(model, processor, few, 1, True)
        same = sum(a == b for a, b in zip(greedy, drafted, strict=True))
        print(
            f"{scheme or 'bfloat16':<10}{cer:>8.4f}{f'{same}/{len(few)}':>18}"
            f"{sum(map(len, greedy)) / greedy_seconds:>14.1f}{sum(map(len, drafted)) / drafted_seconds:>15.1f}"
        )


if __name__ == "__main__":
    main()
