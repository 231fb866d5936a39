"""FastMTP against greedy decoding at batch 1, page by page in turn, on held-out target-format pages.

    python benchmarks/fastmtp_pages.py [--model FILES] [--pages 32] [--passes 2] [--threads 2]

At batch 1 on a CPU the two differ by a few percent, less than a machine drifts between two runs one
after the other, so each page is decoded by both in turn, the order alternating from page to page and
from pass to pass, and the whole ``generate`` call is timed (prefill included, as a user waits for it).
The output of the two must be identical on every page: FastMTP is lossless.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from jina_ocr.models import BUNDLED
from jina_ocr.train.drills import STAGES
from jina_ocr.train.model_files import load_model_files
from jina_ocr.train.recipe import PageRecipe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_eval import generate_all  # noqa: E402


def interleaved(files: Path, pages: int, passes: int, seed: int, max_new_tokens: int) -> dict:
    """Tokens and seconds of greedy and of FastMTP over ``passes`` passes of ``pages`` held-out pages."""
    model, processor = load_model_files(files)
    if not model.config.num_nextn_predict_layers:
        raise SystemExit(f"{files}: the model has no FastMTP head")
    images = [page.image for page in PageRecipe().held_out_pages(len(STAGES) - 1, seed, pages)]
    totals = {use_mtp: {"tokens": 0, "seconds": 0.0} for use_mtp in (False, True)}
    identical = 0
    generate_all(model, processor, images[:1], 1, True, 8)  # warm-up, not counted
    for number in range(passes):
        for index, image in enumerate(images):
            order = (True, False) if (index + number) % 2 == 0 else (False, True)
            runs = {
                use_mtp: generate_all(model, processor, [image], 1, use_mtp, max_new_tokens)
                for use_mtp in order
            }
            identical += runs[True].rows == runs[False].rows
            for use_mtp, run in runs.items():
                totals[use_mtp]["tokens"] += run.tokens
                totals[use_mtp]["seconds"] += run.seconds
    return {"totals": totals, "identical": identical, "calls": passes * len(images)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=BUNDLED, help="model files (the bundled jina-ocr-tiny)")
    parser.add_argument("--pages", type=int, default=32)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument(
        "--seed", type=int, default=7, help="seed of the held-out pages (7, as train_eval.py)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no model files there (config.json)")
    if args.threads:
        torch.set_num_threads(args.threads)
    result = interleaved(args.model, args.pages, args.passes, args.seed, args.max_new_tokens)
    rates = {k: v["tokens"] / v["seconds"] for k, v in result["totals"].items()}
    print(f"\nBatch 1, {args.pages} held-out target-format pages x {args.passes} passes, in turn:")
    print(f"{'decoding':10s} {'tokens':>8s} {'seconds':>9s} {'tok/s':>8s} {'vs greedy':>10s}")
    for use_mtp, name in ((False, "greedy"), (True, "FastMTP")):
        total = result["totals"][use_mtp]
        print(
            f"{name:10s} {total['tokens']:8d} {total['seconds']:9.2f} {rates[use_mtp]:8.1f} "
            f"{rates[use_mtp] / rates[False]:9.3f}x"
        )
    print(f"identical output: {result['identical']}/{result['calls']} calls")


if __name__ == "__main__":
    main()
