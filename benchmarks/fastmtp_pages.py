"""FastMTP against greedy decoding on held-out target-format pages, in float32 and bfloat16, in turn.

    python benchmarks/fastmtp_pages.py [--model FILES] [--pages 32] [--passes 2] [--batch-size 1]
                                       [--dtypes float32 bfloat16] [--threads 2] [--confidence]

At batch 1 on a CPU the settings differ by less than a machine drifts between two runs one after the
other, so each batch of pages is decoded by every setting (greedy and FastMTP in each dtype) in turn,
the order rotating from batch to batch and from pass to pass, and the whole ``generate`` call is timed
(prefill included, as a user waits for it). The dtypes matter on a CPU because small matrix products
cost different things there: float32 products grow with the number of rows even at 2-4 rows, so a
verification of k + 1 tokens costs nearly k + 1 greedy steps, while bfloat16 products (AVX512-BF16)
cost about the same for 1 to 8 rows, which is what speculative decoding needs.

The output of FastMTP must equal greedy's in the same dtype on every page: FastMTP is lossless. The
two dtypes may read a page differently; how many pages they read alike is printed too.

``--confidence`` times instead what page confidence (jina_ocr/runtime/confidence.py) costs: each batch
through ``generate`` with the batch driver's row stops, once scoring every committed token (as the
driver does) and once not, in turn, for every setting; and one scoring of a step of the real
vocabulary's logits (129,280 per position), the part that grows with the vocabulary.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers.generation import StoppingCriteriaList

from jina_ocr.generation_defaults import REAL_VOCAB_SIZE
from jina_ocr.model_files import load_model_files
from jina_ocr.models import BUNDLED
from jina_ocr.runtime.batching import RowStops
from jina_ocr.runtime.confidence import LogitsTap
from jina_ocr.train.drills import STAGES
from jina_ocr.train.recipe import PageRecipe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_eval import Run, generate_all  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def interleaved(args) -> tuple[dict[tuple, Run], list[str]]:
    """The runs of every (dtype, use_mtp) setting over ``--passes`` passes of ``--pages`` pages, and
    where FastMTP's output differs from greedy's in the same dtype (see ``first_difference``)."""
    model, processor = load_model_files(args.model)
    if not model.config.num_nextn_predict_layers:
        raise SystemExit(f"{args.model}: the model has no FastMTP head")
    models = {name: copy.deepcopy(model).to(DTYPES[name]) for name in args.dtypes}
    settings = [(name, use_mtp) for name in args.dtypes for use_mtp in (False, True)]
    images = [page.image for page in PageRecipe().held_out_pages(len(STAGES) - 1, args.seed, args.pages)]
    size = args.batch_size
    batches = [images[i : i + size] for i in range(0, len(images), size)]
    for name, use_mtp in settings:  # one-time costs, not counted
        generate_all(models[name], processor, images[:1], 1, use_mtp, 8)
    runs: dict[tuple, list[Run]] = {setting: [] for setting in settings}
    for number in range(args.passes):
        for index, batch in enumerate(batches):
            turn = (index + number) % len(settings)
            for name, use_mtp in settings[turn:] + settings[:turn]:
                run = generate_all(models[name], processor, batch, size, use_mtp, args.max_new_tokens)
                runs[name, use_mtp].append(run)
    differences = []
    for name in args.dtypes:
        for index, (greedy, fast) in enumerate(zip(runs[name, False], runs[name, True], strict=True)):
            number, batch = divmod(index, len(batches))
            for row, (a, b) in enumerate(zip(greedy.rows, fast.rows, strict=True)):
                if a != b:
                    where = first_difference(models[name], processor, batches[batch], row, a, b)
                    differences.append(f"{name}, pass {number + 1}, page {batch * size + row}: {where}")
    return {setting: Run.combine(parts) for setting, parts in runs.items()}, differences


def first_difference(model, processor, batch, row: int, greedy: list[int], fast: list[int]) -> str:
    """Where FastMTP's tokens first leave greedy's, and how close greedy's two best logits were there.

    Verification scores k + 1 tokens in one forward, greedy one at a time, so the two round differently;
    where greedy's best two logits are within that rounding, either may win. Adaptive drafting picks
    the widths by timing, so this can happen on one pass and not the next. In bfloat16 the rounding is
    about 2^-8 of a value, so margins of a step or two of it are expected; a large one would be a bug."""
    step = next(i for i, (a, b) in enumerate(zip(greedy, fast, strict=False)) if a != b)
    inputs = processor.prepare_ocr_inputs(batch, device=model.device, dtype=model.dtype)
    with torch.inference_mode():
        out = model.generate(
            **inputs, max_new_tokens=step + 1, do_sample=False, use_mtp=False,
            output_scores=True, return_dict_in_generate=True,
        )  # fmt: skip
    logits = out.scores[step][row].float()
    top = logits.topk(2)
    margin = float(top.values[0] - top.values[1])
    return f"differs at token {step}: greedy's two best logits {margin:.4f} apart (of {float(top.values[0]):.2f})"


def same_rows(a: Run, b: Run) -> str:
    return f"{sum(x == y for x, y in zip(a.rows, b.rows, strict=True))}/{len(a.rows)}"


def print_table(runs: dict[tuple, Run], differences: list[str], args) -> None:
    dtypes = args.dtypes
    base = runs[dtypes[0], False]
    print(
        f"\nBatch {args.batch_size}, {args.pages} held-out target-format pages x {args.passes} passes, "
        f"each batch by every setting in turn ({torch.get_num_threads()} threads):"
    )
    header = (
        f"{'dtype':9s} {'decoding':8s} {'tokens':>7s} {'seconds':>8s} {'tok/s':>7s} {'vs greedy':>10s} "
        f"{'vs ' + dtypes[0] + ' greedy':>18s} {'step cost':>10s} {'committed/step':>15s}  acceptance per depth"
    )
    print(header)
    for name in dtypes:
        greedy = runs[name, False]
        for use_mtp in (False, True):
            run = runs[name, use_mtp]
            rate = run.tokens / run.seconds
            stats = run.stats or {}
            print(
                f"{name:9s} {'FastMTP' if use_mtp else 'greedy':8s} {run.tokens:7d} {run.seconds:8.2f} "
                f"{rate:7.1f} {rate / (greedy.tokens / greedy.seconds):9.3f}x "
                f"{rate / (base.tokens / base.seconds):17.3f}x "
                f"{run.seconds_per_forward / greedy.seconds_per_forward:9.2f}x "
                f"{stats.get('committed_per_step', 1.0):15.2f}  {stats.get('acceptance_per_depth', '')}"
            )
    for name in dtypes:
        print(
            f"{name}: FastMTP output identical to greedy on {same_rows(runs[name, True], runs[name, False])} pages"
        )
    for line in differences:
        print(f"  {line}")
    for name in dtypes[1:]:
        print(f"{name} greedy reads like {dtypes[0]} greedy on {same_rows(runs[name, False], base)} pages")


def stopped_generate(model, processor, batch, use_mtp: bool, limit: int, scored: bool) -> tuple[float, list]:
    """Seconds of one ``generate`` call with the driver's row stops, scoring tokens or not, and the
    rows' tokens."""
    inputs = processor.prepare_ocr_inputs(batch, device=model.device, dtype=model.dtype)
    tap = LogitsTap(model) if scored else None
    eos = processor.tokenizer.eos_token_id
    stops = RowStops(inputs["input_ids"].shape[1], [limit] * len(batch), [eos], tap=tap)
    began = time.perf_counter()
    with torch.inference_mode(), tap or contextlib.nullcontext():
        model.generate(
            **inputs, max_new_tokens=limit, do_sample=False, use_mtp=use_mtp,
            stopping_criteria=StoppingCriteriaList([stops]),
        )  # fmt: skip
    stops.close()
    return time.perf_counter() - began, stops.tokens


def confidence_cost(args) -> None:
    """Print, per dtype and decoding, the seconds with and without scoring over the same batches."""
    model, processor = load_model_files(args.model)
    models = {name: copy.deepcopy(model).to(DTYPES[name]) for name in args.dtypes}
    settings = [
        (name, use_mtp, scored)
        for name in args.dtypes
        for use_mtp in (False, True)
        for scored in (False, True)
    ]
    images = [page.image for page in PageRecipe().held_out_pages(len(STAGES) - 1, args.seed, args.pages)]
    size = args.batch_size
    batches = [images[i : i + size] for i in range(0, len(images), size)]
    for name, use_mtp, scored in settings:  # one-time costs, not counted
        stopped_generate(models[name], processor, images[:1], use_mtp, 8, scored)
    seconds = {setting: 0.0 for setting in settings}
    tokens = {setting: [] for setting in settings}
    for number in range(args.passes):
        for index, batch in enumerate(batches):
            turn = (index + number) % len(settings)
            for name, use_mtp, scored in settings[turn:] + settings[:turn]:
                took, rows = stopped_generate(
                    models[name], processor, batch, use_mtp, args.max_new_tokens, scored
                )
                seconds[name, use_mtp, scored] += took
                tokens[name, use_mtp, scored] += rows
    print(
        f"\nPage confidence: batch {size}, {args.pages} held-out target-format pages x {args.passes} passes, "
        f"each batch by every setting in turn ({torch.get_num_threads()} threads):"
    )
    print(
        f"{'dtype':9s} {'decoding':8s} {'tokens':>7s} {'s without':>10s} {'s with':>8s} {'with/without':>13s}  same tokens"
    )
    for name in args.dtypes:
        for use_mtp in (False, True):
            plain, scored = seconds[name, use_mtp, False], seconds[name, use_mtp, True]
            same = tokens[name, use_mtp, False] == tokens[name, use_mtp, True]
            count = sum(map(len, tokens[name, use_mtp, True]))
            print(
                f"{name:9s} {'FastMTP' if use_mtp else 'greedy':8s} {count:7d} {plain:10.2f} {scored:8.2f} "
                f"{scored / plain:12.3f}x  {same}"
            )
    tap = LogitsTap(model)
    times = []
    for _ in range(20):  # a FastMTP step of the batch with K = 3: 4 positions a row
        tap.logits = torch.randn(size, 4, REAL_VOCAB_SIZE)
        began = time.perf_counter()
        tap.score(torch.zeros(size, 4, dtype=torch.long)).tolist()
        times.append(time.perf_counter() - began)
    print(
        f"scoring one step of {size} x 4 float32 logits of the real vocabulary: {statistics.median(times) * 1e3:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=BUNDLED, help="model files (the bundled jina-ocr-tiny)")
    parser.add_argument("--pages", type=int, default=32)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["float32", "bfloat16"])
    parser.add_argument(
        "--seed", type=int, default=7, help="seed of the held-out pages (7, as train_eval.py)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--confidence", action="store_true", help="time page confidence instead (see above)")
    args = parser.parse_args()
    if not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: no model files there (config.json)")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.confidence:
        confidence_cost(args)
        return
    runs, differences = interleaved(args)
    print_table(runs, differences, args)


if __name__ == "__main__":
    main()
