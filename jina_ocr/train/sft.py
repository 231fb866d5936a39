"""Supervised training of the whole model on JinaOCRSynth pages (teacher forcing on ground-truth Markdown).

A run lives in one output folder:

- ``model/``: the latest weights, config, tokenizer and settings (:mod:`jina_ocr.train.model_files`),
  rewritten at every checkpoint, so an interrupted run still leaves a usable model;
- ``checkpoint.pt``: weights, optimizer and schedule state and the index of the next training page,
  from which ``resume`` continues exactly where the run stopped;
- ``log.jsonl``: one line per logging interval (mean loss, learning rate, pages per second) and one
  per evaluation (character error rate of greedy transcriptions of held-out pages);
- ``options.json``: the options of the run, for the record.

Training pages and held-out pages come from different run seeds, so no held-out page is ever trained
on; the tokenizer is learnt from a third set of pages of the training seed (negative indices) and from
full-page drills. A fresh model starts as :mod:`jina_ocr.train.vision` explains: standardising
projector, vision towers frozen for ``vision_warmup_steps``, then trained at ``vision_lr_scale``.
Every evaluation also logs the "image gap": the held-out loss with each page's image replaced by
another page's, minus the loss with the right images; it stays at zero until the model reads. The
same three numbers for held-out drills of the recipe (``drill_cer``, ``drill_loss``, ``drill_gap``)
show reading start on the drills long before it shows on full synth pages.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from jina_ocr.errors import UserError
from jina_ocr.train.data import Collator, TrainingPageStream, prompt_ids
from jina_ocr.train.drills import drill_page
from jina_ocr.train.evaluate import character_error_rate, transcribe
from jina_ocr.train.model_files import (
    build_processor,
    load_model_files,
    load_settings,
    save_model_files,
)
from jina_ocr.train.recipe import PROCESSOR_MODE, PageRecipe, model_config
from jina_ocr.train.tokenizer import train_tokenizer
from jina_ocr.train.vision import set_vision_trainable, standardize_projector, vision_parameters

CHECKPOINT = "checkpoint.pt"


@dataclass
class SFTOptions:
    """Options of :func:`train_sft`; the command line mirrors them one to one."""

    out: Path
    steps: int = 1500
    batch_size: int = 8
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    seed: int = 0
    eval_seed: int = 1
    eval_every: int = 250
    eval_pages: int = 16
    log_every: int = 10
    checkpoint_minutes: float = 5.0
    max_minutes: float | None = None
    stop_at: int | None = None
    init: Path | None = None
    tokenizer_pages: int = 300
    vocab_size: int = 2048
    max_target_tokens: int = 256
    vision_warmup_steps: int = 500
    vision_lr_scale: float = 0.1
    freeze_vision: bool = False
    gradient_checkpointing: bool = False
    bf16: bool = False
    device: str | None = None
    workers: int = 1
    threads: int | None = None
    recipe: PageRecipe = field(default_factory=PageRecipe)


def recipe_pages(recipe: PageRecipe, seed: int, indices):
    """The synth pages ``indices`` of run ``seed`` under ``recipe`` (pages too small to lay out skipped)."""
    pages = (recipe.synth_page(seed, index) for index in indices)
    return [page for page in pages if page is not None]


def learning_rate_factor(step: int, options: SFTOptions) -> float:
    """Linear warm-up to the peak, then a cosine down to ``min_lr_ratio`` of it at ``options.steps``."""
    if step < options.warmup:
        return (step + 1) / options.warmup
    progress = min(1.0, (step - options.warmup) / max(1, options.steps - options.warmup))
    return options.min_lr_ratio + (1 - options.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def _device(options: SFTOptions) -> torch.device:
    if options.device:
        return torch.device(options.device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _bf16_supported(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu"


def starting_model(options: SFTOptions):
    """The starting model and processor: ``options.init``'s files, or fresh weights and a learnt tokenizer."""
    if options.init is not None:
        model, processor = load_model_files(options.init)
        settings = load_settings(options.init)
        settings["init"] = str(options.init)
        return model, processor, settings
    from jina_ocr.remote_code.processing_jina_ocr import JINA_DEFAULT_PROMPT

    pages = recipe_pages(options.recipe, options.seed, range(-1, -options.tokenizer_pages - 1, -1))
    drills = [drill_page(f"tokenizer/{options.seed}/{i}", 1.0) for i in range(options.tokenizer_pages)]
    # The prompt is written on every request: weighted like many pages, its words become single tokens,
    # which shortens every training row.
    corpus = [page.markdown for page in pages + drills] + [JINA_DEFAULT_PROMPT] * 50
    processor = build_processor(train_tokenizer(corpus, options.vocab_size), PROCESSOR_MODE)
    torch.manual_seed(options.seed)
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    model = JinaOCRForConditionalGeneration(model_config(processor.tokenizer))
    # The projector's statistics come from the first tokenizer pages plus drills of every level.
    views = [page.image for page in pages[:8]]
    views += [drill_page(f"init/{options.seed}/{i}", i / 7).image for i in range(8)]
    standardize_projector(model, processor.image_processor(views)["pixel_values"])
    settings = {"processor_mode": PROCESSOR_MODE}
    return model, processor, settings


def _parameter_groups(model, options: SFTOptions):
    """Decay matrices; leave norms, biases, position tables and the special vectors alone.

    The vision towers get their own groups at ``vision_lr_scale`` of the learning rate (with
    ``--freeze-vision`` they are left out).
    """
    vision = {id(p) for p in vision_parameters(model)}
    groups = {}
    for name, parameter in model.named_parameters():
        if options.freeze_vision and id(parameter) in vision:
            continue
        decays = parameter.ndim >= 2 and "pos_embed" not in name and "position_embedding" not in name
        key = (id(parameter) in vision, decays)
        groups.setdefault(key, []).append(parameter)
    return [
        {
            "params": params,
            "weight_decay": options.weight_decay if decays else 0.0,
            "lr": options.lr * (options.vision_lr_scale if is_vision else 1.0),
        }
        for (is_vision, decays), params in groups.items()
    ]


def optimizer_and_schedule(model, options: SFTOptions):
    """AdamW over :func:`_parameter_groups`, with the warm-up and cosine of :func:`learning_rate_factor`."""
    optimizer = torch.optim.AdamW(_parameter_groups(model, options), betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: learning_rate_factor(s, options))
    return optimizer, scheduler


def train_step(model, batch: dict, optimizer, scheduler, grad_clip: float, autocast) -> float:
    """One teacher-forced update on ``batch``; returns its loss before the update."""
    with autocast:
        loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def _log(out: Path, record: dict) -> None:
    with open(out / "log.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def train_sft(options: SFTOptions) -> Path:
    """Train (or resume) the run in ``options.out``; returns the folder of the trained model files."""
    if options.threads:
        torch.set_num_threads(options.threads)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = out / "model"
    checkpoint_path = out / CHECKPOINT
    device = _device(options)
    if options.bf16 and not _bf16_supported(device):
        raise UserError(f"bf16 is not supported on {device}; leave out --bf16")

    if checkpoint_path.exists():
        model, processor = load_model_files(model_dir, weights=False)
        settings = load_settings(model_dir)
        state = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
    else:
        model, processor, settings = starting_model(options)
        state = None
    settings["sft"] = {
        key: str(value) if isinstance(value, Path) else value
        for key, value in dataclasses.asdict(options).items()
        if key not in ("out", "device", "workers", "threads")
    }
    (out / "options.json").write_text(json.dumps(settings["sft"], indent=2) + "\n", encoding="utf-8")

    model.to(device).train()
    if options.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    optimizer, scheduler = optimizer_and_schedule(model, options)
    step, next_index = 0, 1
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, next_index = state["step"], state["next_index"]

    def save_checkpoint() -> None:
        settings["steps_trained"] = step
        save_model_files(model_dir, model, processor.tokenizer, settings)
        tmp = checkpoint_path.with_suffix(".tmp")
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "step": step,
                "next_index": next_index,
            },
            tmp,
        )
        tmp.replace(checkpoint_path)

    stream = TrainingPageStream(
        processor, options.seed, options.recipe, next_index, options.max_target_tokens
    )
    collator = Collator(prompt_ids(processor), processor.tokenizer.pad_token_id)
    held_out_sets = {
        "eval": recipe_pages(options.recipe, options.eval_seed, range(1, options.eval_pages + 1)),
        "drill": options.recipe.held_out_drills(options.eval_seed, options.eval_pages),
    }
    # Each set's teacher-forcing batch is built once; every evaluation reuses it.
    held_out_batches = {}
    for name, pages in held_out_sets.items():
        batch = collator([stream.example(i, page) for i, page in enumerate(pages)])
        batch.pop("indices")
        held_out_batches[name] = batch

    @torch.no_grad()
    def measure(name: str) -> dict:
        """CER of greedy transcriptions, teacher-forced loss, and how much that loss rises with every
        image moved one page on (the image gap)."""
        pages = held_out_sets[name]
        model.eval()
        batch = {key: value.to(device) for key, value in held_out_batches[name].items()}
        loss = model(**batch).loss.item()
        batch["pixel_values"] = batch["pixel_values"].roll(1, 0)
        gap = model(**batch).loss.item() - loss
        model.train()
        predictions = transcribe(
            model, processor, [p.image for p in pages], max_new_tokens=options.max_target_tokens
        )
        cer = character_error_rate(predictions, [p.markdown for p in pages])
        return {"cer": round(cer, 4), "loss": round(loss, 4), "gap": round(gap, 4), "sample": predictions[0]}

    def evaluate() -> None:
        started = time.perf_counter()
        synth, drills = measure("eval"), measure("drill")
        _log(
            out,
            {
                "step": step,
                "eval_cer": synth["cer"],
                "eval_loss": synth["loss"],
                "image_gap": synth["gap"],
                "drill_cer": drills["cer"],
                "drill_loss": drills["loss"],
                "drill_gap": drills["gap"],
                "eval_pages": len(held_out_sets["eval"]),
                "eval_seconds": round(time.perf_counter() - started, 1),
                "sample": synth["sample"][:200],
                "drill_sample": drills["sample"][:200],
            },
        )

    if state is None:
        save_checkpoint()
    # A fine-tune (--init) starts from towers that already read, so only a fresh model waits.
    vision_warmup = 0 if options.init is not None else options.vision_warmup_steps
    set_vision_trainable(model, not options.freeze_vision and step >= vision_warmup)
    loader = DataLoader(
        stream,
        batch_size=options.batch_size,
        collate_fn=collator,
        num_workers=options.workers,
        prefetch_factor=4 if options.workers else None,
        persistent_workers=False,
    )
    started = last_checkpoint = last_log = time.perf_counter()
    losses: list[float] = []
    pages_since_log = 0
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=options.bf16)
    for batch in loader:
        if step >= options.steps:
            break
        indices = batch.pop("indices")
        batch = {key: value.to(device) for key, value in batch.items()}
        loss = train_step(model, batch, optimizer, scheduler, options.grad_clip, autocast)
        step += 1
        if step == vision_warmup and not options.freeze_vision:
            set_vision_trainable(model, True)
        next_index = int(indices.max()) + 1
        losses.append(loss)
        pages_since_log += len(indices)
        now = time.perf_counter()
        if step % options.log_every == 0 or step == options.steps:
            _log(
                out,
                {
                    "step": step,
                    "pages": next_index - 1,
                    "loss": round(sum(losses) / len(losses), 4),
                    "lr": scheduler.get_last_lr()[0],
                    "pages_per_s": round(pages_since_log / (now - last_log), 2),
                    "minutes": round((now - started) / 60, 2),
                },
            )
            losses, pages_since_log, last_log = [], 0, now
        if options.eval_every and step % options.eval_every == 0:
            evaluate()
        out_of_time = options.max_minutes is not None and now - started > options.max_minutes * 60
        stop = out_of_time or step == options.stop_at
        if now - last_checkpoint > options.checkpoint_minutes * 60 or stop:
            save_checkpoint()
            last_checkpoint = time.perf_counter()
        if stop:
            reason = "max_minutes reached" if out_of_time else f"stopped at step {step}"
            _log(out, {"step": step, "stopped": f"{reason}; run again to resume"})
            return model_dir
    if not options.eval_every or step % options.eval_every:
        evaluate()
    save_checkpoint()
    return model_dir
