"""Decoding speed on a CUDA machine, our counterpart of the figures in SPEC sections 6 and 8, in one run.

    python benchmarks/gpu.py [--config full|tiny] [--new-tokens 256] [--page-tokens 1085] [--device cuda]

The full-size model with random bfloat16 weights decodes one page prompt (a 1024-px global view: 273
image placeholders plus text). It prints tokens/s of plain greedy, FastMTP with a random head
(adaptive drafting, the default) and FastMTP with an always-right head (the real draft block runs, then
the recorded main-model state of the drafted position is returned, so every draft is accepted), for:

- batch 1 with the dynamic cache (eager);
- batch 1 with ``cache_implementation="static"``; on CUDA Transformers then compiles the decode step
  (``torch.compile``, CUDA graphs); elsewhere it runs uncompiled;
- batch 32 with the dynamic cache (our batched FastMTP loop);

and pages/s at concurrency 32 (32 pages decoded as one batch, ``--page-tokens`` output tokens each,
SPEC's average of about 1,085). ``--config tiny`` (the tiny preset, float32, scaled-down token counts)
runs on a CPU in under two minutes, to check the script itself.
"""

from __future__ import annotations

import argparse
import time

import torch
from fastmtp import ReplayHead, head_replaced

from jina_ocr.export.presets import PRESETS
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

IMAGE, EOS, PAD = 7, 1, 2
GUARD = {"loop_guard_ngram_size": 35, "loop_guard_window": 1024}


def build(config_name: str, device: torch.device, dtype: torch.dtype) -> JinaOCRForConditionalGeneration:
    """Random weights, drawn on the device (the full model takes about 7 GB in bfloat16)."""
    config = JinaOCRConfig(
        **PRESETS[config_name], eos_token_id=EOS, pad_token_id=PAD, bos_token_id=0, image_token_id=IMAGE
    )
    with torch.device("meta"):
        model = JinaOCRForConditionalGeneration(config)
    model = model.to_empty(device=device).to(dtype).eval()
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.uniform_(-0.02, 0.02, generator=generator)
    return model


def page_inputs(model, batch: int, side: int, device, dtype) -> dict:
    """``batch`` copies of a page prompt: text, one ``side``-px view's placeholders, text."""
    grid = side // model.config.pixels_per_visual_token
    placeholders = grid * (grid + 1) + 1
    gen = torch.Generator().manual_seed(batch)
    text = torch.randint(10, model.config.vocab_size, (batch, 12), generator=gen)
    ids = torch.cat([text[:, :4], torch.full((batch, placeholders), IMAGE), text[:, 4:]], dim=1)
    return {
        "input_ids": ids.to(device),
        "attention_mask": torch.ones_like(ids).to(device),
        "pixel_values": torch.randn(batch, 3, side, side, generator=gen).to(device, dtype),
    }


def timed_generate(model, inputs, new_tokens: int, sync, **options) -> tuple[float, torch.Tensor]:
    sync()
    began = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=new_tokens,
            do_sample=False,
            eos_token_id=model.config.vocab_size - 1,
            **options,
        )
    sync()
    return time.perf_counter() - began, out


def decoding_rows(model, inputs, new_tokens: int, sync, **options) -> list[tuple[str, float, dict | None]]:
    """(label, seconds, FastMTP statistics) of greedy, the random head and the always-right head; each
    runs once to warm up (and, for a static cache on CUDA, to compile) and once timed."""
    rows = []
    for use_mtp in (False, True):
        timed_generate(model, inputs, new_tokens, sync, use_mtp=use_mtp, **options)
    seconds, greedy = timed_generate(model, inputs, new_tokens, sync, use_mtp=False, **options)
    rows.append(("greedy", seconds, None))
    seconds, _ = timed_generate(model, inputs, new_tokens, sync, use_mtp=True, **options)
    rows.append(("FastMTP, random head", seconds, model.fastmtp_stats))
    with torch.no_grad():
        states = model(input_ids=greedy, pixel_values=inputs["pixel_values"], use_cache=False)
    pads = torch.zeros(greedy.shape[0], dtype=torch.long, device=greedy.device)
    with head_replaced(model, ReplayHead(model.mtp_module.heads[0], states.pre_norm_hidden_state, pads)):
        timed_generate(model, inputs, new_tokens, sync, use_mtp=True, **options)
        seconds, _ = timed_generate(model, inputs, new_tokens, sync, use_mtp=True, **options)
    rows.append(("FastMTP, always-right head", seconds, model.fastmtp_stats))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", choices=("full", "tiny"), default="full")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--new-tokens", type=int, help="tokens per row for the tokens/s rows (256; tiny 32)")
    parser.add_argument("--page-tokens", type=int, help="output tokens per page for pages/s (1085; tiny 64)")
    parser.add_argument("--threads", type=int, help="CPU threads for torch")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tiny = args.config == "tiny"
    new_tokens = args.new_tokens or (32 if tiny else 256)
    page_tokens = args.page_tokens or (64 if tiny else 1085)
    device = torch.device(args.device)
    if device.type != "cuda" and not tiny:
        raise SystemExit("the full-size run needs a CUDA device; --config tiny runs on a CPU")
    dtype = torch.float32 if tiny and device.type == "cpu" else torch.bfloat16
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    model = build(args.config, device, dtype)
    side = 128 if tiny else 1024
    compiled = "static cache, compiled" if device.type == "cuda" else "static cache (not compiled off CUDA)"

    table = []
    for batch, cache, options in (
        (1, "dynamic cache (eager)", {}),
        (1, compiled, {"cache_implementation": "static"}),
        (32, "dynamic cache (eager)", {}),
    ):
        inputs = page_inputs(model, batch, side, device, dtype)
        for label, seconds, stats in decoding_rows(model, inputs, new_tokens, sync, **GUARD, **options):
            table.append((batch, cache, label, batch * new_tokens / seconds, stats))

    pages = page_inputs(model, 32, side, device, dtype)
    page_rows = [
        (label, 32 / seconds, stats)
        for label, seconds, stats in decoding_rows(model, pages, page_tokens, sync, **GUARD)
    ]

    name = "full-size" if not tiny else "tiny preset"
    print(
        f"{name} model, random {str(dtype).removeprefix('torch.')} weights, {args.device}, K = 3, loop guard on"
    )
    print(f"prompt {pages['input_ids'].shape[1]} tokens ({side}-px view), {new_tokens} new tokens per row")
    header = f"{'batch':>5}  {'cache':36} {'decoding':28} {'tok/s':>9} {'vs greedy':>9} {'per step':>8}"
    print(header)
    print("-" * len(header))
    greedy = {}
    for batch, cache, label, rate, stats in table:
        greedy.setdefault((batch, cache), rate)
        per_step = f"{stats['committed_per_step']:.2f}" if stats else "1.00"
        print(
            f"{batch:>5}  {cache:36} {label:28} {rate:>9.1f} {rate / greedy[(batch, cache)]:>8.2f}x {per_step:>8}"
        )
    print(f"\npages/s at concurrency 32 ({page_tokens} output tokens per page, dynamic cache)")
    for label, rate, _ in page_rows:
        print(f"  {label:28} {rate:>8.3f} pages/s")


if __name__ == "__main__":
    main()
