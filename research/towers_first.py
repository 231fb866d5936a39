"""Diagnostic: do the vision towers learn glyphs faster alone than inside the whole model?

    python research/towers_first.py [--steps 600] [--stage line] [--from MODEL_FILES] [--bf16]

Two variants of one jina-ocr-tiny model train side by side on the same pages of a curriculum stage (the
pages a ``jina-ocr train sft`` run of that stage sees), with the same optimizer and rate:

- **towers alone**: SAM, CLIP and the projector with the training-only glyph head, on the glyph loss
  only (the towers-first phase of a ``train sft`` run whose recipe sets ``towers_first``);
- **whole model**: everything, on the next-token loss plus the glyph and alignment losses (a run
  without that phase).

At every evaluation it prints both variants' glyph slot accuracy on held-out pages of the stage. If the
towers learn much faster alone, the decoder's gradient is what slows them down inside the whole model.
``--from`` starts both variants from model files (the bundled model, say) instead of a fresh model.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from jina_ocr.model_files import load_model_files
from jina_ocr.train.data import TrainingPageStream
from jina_ocr.train.drills import STAGES
from jina_ocr.train.sft import (
    PROBED_HEAD,
    SFTOptions,
    held_out_batch,
    make_optimizer,
    run_collator,
    starting_model,
    supervised_losses,
    train_step,
)
from jina_ocr.train.supervision import AttentionProbes, GlyphHead


class Variant:
    """One model with its glyph head, probes and optimizer, trained towers-only or whole."""

    def __init__(self, model, prompt: list[int], options: SFTOptions, towers_only: bool):
        self.model, self.towers_only, self.options = model, towers_only, options
        self.head = GlyphHead(model.config.hidden_size, model.config.vocab_size)
        self.optimizer = make_optimizer(model, self.head, options)
        image = model.config.image_token_id
        first = prompt.index(image)
        self.probes = AttentionProbes(
            model,
            list(options.align_layers),
            PROBED_HEAD,
            len(prompt) - 1,
            slice(first, first + prompt.count(image)),
        )

    def step(self, batch: dict, factor: float, autocast) -> None:
        train_step(
            self.model,
            self.head,
            self.probes,
            dict(batch),
            self.optimizer,
            factor,
            self.options,
            autocast,
            self.towers_only,
        )

    @torch.no_grad()
    def glyph_accuracy(self, batch: dict, autocast) -> float:
        self.model.eval()
        _, parts = supervised_losses(
            self.model, self.head, self.probes, dict(batch), self.options, autocast, towers_only=True
        )
        self.model.train()
        return parts["glyph_correct"] / max(1, parts["glyph_slots"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--stage", choices=STAGES, default="line")
    parser.add_argument("--from", dest="source", help="model files both variants start from")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--eval-pages", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", action="store_true", help="autocast to bfloat16, as train sft --bf16")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    options = SFTOptions(out="", seed=args.seed, stage=args.stage, lr=args.lr, eval_pages=args.eval_pages)
    if args.source:
        model, processor = load_model_files(args.source)
    else:
        model, processor, _, _ = starting_model(options)
    collate = run_collator(processor, options.recipe)
    prompt = collate.prompt
    torch.manual_seed(args.seed)
    variants = {
        "towers alone": Variant(model, prompt, options, towers_only=True),
        "whole model": Variant(copy.deepcopy(model), prompt, options, towers_only=False),
    }
    variants["whole model"].head.load_state_dict(variants["towers alone"].head.state_dict())
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16)

    stage = STAGES.index(args.stage)
    stream = TrainingPageStream(processor, args.seed, options.recipe, 1, options.max_target_tokens, stage)
    _, held_out = held_out_batch(processor, options, stage)

    print(f"stage {args.stage}, seed {args.seed}, bf16 {args.bf16}, from {args.source or 'a fresh model'}")
    print("held-out glyph slot accuracy:")
    print("| step | " + " | ".join(variants) + " | minutes |")
    print("|---|" + "---|" * len(variants) + "---|")
    started = time.perf_counter()

    def report(step: int) -> None:
        accuracies = " | ".join(f"{v.glyph_accuracy(held_out, autocast):.3f}" for v in variants.values())
        print(f"| {step} | {accuracies} | {(time.perf_counter() - started) / 60:.1f} |", flush=True)

    report(0)
    pages = iter(stream)
    for step in range(1, args.steps + 1):
        batch = collate([next(pages) for _ in range(args.batch_size)])
        batch.pop("indices")
        factor = min(1.0, step / args.warmup)
        for each in variants.values():
            each.step(batch, factor, autocast)
        if step % args.eval_every == 0 or step == args.steps:
            report(step)


if __name__ == "__main__":
    main()
