"""Does a from-scratch jina-ocr-tiny learn to look at the page? Default start against ours, same run.

    python benchmarks/vision_start.py [--steps 120] [--words 50] [--threads 2]

The easiest reading task there is: every page is an A5 page with one word, printed at 56 pt in the
same place, drawn from ``--words`` words. Both arms train the jina-ocr-tiny architecture (the training
recipe's dimensions) on the same pages in the same order with the same optimizer:

- ``default``: the model as constructed, every parameter trained from the first step;
- ``standardised``: the start of ``jina-ocr train sft`` (:mod:`jina_ocr.train.vision`): the projector
  standardises its input features, and SAM, CLIP and the projector stay frozen.

Every ``--every`` steps both are scored on held-out pages: the loss, the *image gap* (how much the loss
rises when each page gets another page's image: zero for a model that ignores the image), the share of
pages whose word is predicted right (first token, greedy), and how much of the visual tokens' variance
tells pages apart. The table shows which start reads and which collapses to one output for every page.
"""

from __future__ import annotations

import argparse
import random
import time

import pymupdf
import torch
from PIL import Image

from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
from jina_ocr.remote_code.processing_jina_ocr import JINA_DEFAULT_PROMPT
from jina_ocr.synth.page import render
from jina_ocr.synth.text import NOUNS
from jina_ocr.train.data import Collator, Example, prompt_ids, target_ids
from jina_ocr.train.model_files import build_processor
from jina_ocr.train.recipe import PROCESSOR_MODE, model_config
from jina_ocr.train.tokenizer import train_tokenizer
from jina_ocr.train.vision import set_vision_trainable, standardize_projector


def word_page(word: str) -> Image.Image:
    doc = pymupdf.open()
    page = doc.new_page(width=419.53, height=595.28)
    page.insert_text((40, 120), word, fontsize=56, fontname="helv")
    return render(doc.tobytes(), dpi=144)


def batch_of(processor, collator, words: list[str]) -> dict:
    pixels = processor.image_processor([word_page(w) for w in words])["pixel_values"]
    examples = [Example(i, pixels[i], target_ids(processor.tokenizer, w, 8), w) for i, w in enumerate(words)]
    batch = collator(examples)
    batch.pop("indices")
    return batch


@torch.no_grad()
def score(model, batch: dict, prompt_length: int) -> dict:
    model.eval()
    out = model(**batch)
    swapped = model(**{**batch, "pixel_values": batch["pixel_values"].roll(1, 0)})
    first = out.logits[:, prompt_length - 1].argmax(-1) == batch["labels"][:, prompt_length]
    tokens = model.model.encode_views(batch["pixel_values"])
    centred = tokens - tokens.mean((0, 1), keepdim=True)
    between = (tokens - tokens.mean(0, keepdim=True)).pow(2).sum()
    model.train()
    return {
        "loss": out.loss.item(),
        "gap": swapped.loss.item() - out.loss.item(),
        "right": first.float().mean().item(),
        "spread": (between / centred.pow(2).sum()).item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--words", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    words = list(NOUNS[: args.words])
    tokenizer = train_tokenizer(words * 5 + [JINA_DEFAULT_PROMPT] * 50, vocab_size=600)
    processor = build_processor(tokenizer, PROCESSOR_MODE)
    prompt = prompt_ids(processor)
    collator = Collator(prompt, tokenizer.pad_token_id)
    rng = random.Random(0)
    held_out = batch_of(processor, collator, rng.choices(words, k=16))
    arms = {}
    for name in ("default", "standardised"):
        torch.manual_seed(0)
        model = JinaOCRForConditionalGeneration(model_config(tokenizer)).train()
        if name == "standardised":
            standardize_projector(model, batch_of(processor, collator, words[:16])["pixel_values"])
            set_vision_trainable(model, False)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
        arms[name] = (model, optimizer)

    header = "| step | " + " | ".join(f"{n} loss / gap / right / spread" for n in arms) + " |"
    print(header)
    print("|---" * (len(arms) + 1) + "|")
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        batch = batch_of(processor, collator, rng.choices(words, k=args.batch_size))
        for model, optimizer in arms.values():
            warm = min(1.0, step / 30)  # the same linear warm-up in both arms
            for group in optimizer.param_groups:
                group["lr"] = args.lr * warm
            model(**batch).loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if step % args.every == 0 or step == args.steps:
            cells = []
            for model, _ in arms.values():
                s = score(model, held_out, len(prompt))
                cells.append(f"{s['loss']:.2f} / {s['gap']:.3f} / {s['right']:.2f} / {s['spread']:.3f}")
            print(f"| {step} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n{args.steps} steps of batch {args.batch_size} per arm in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
