"""Supervised training of the whole model on drill and JinaOCRSynth pages, with dense glyph supervision.

A run lives in one output folder (keep it outside the repository while it goes on):

- ``model/``: the latest weights, config, tokenizer and settings (:mod:`jina_ocr.model_files`),
  rewritten at every checkpoint, so an interrupted run still leaves a usable model. Its settings record
  the run's progress (step, next page index, curriculum stage) and options, so a run can go on from
  these files alone (``resume_from``) when the checkpoint is lost: with a fresh optimizer, whose first
  ``REWARM_STEPS`` steps ramp the learning rate up again, and a fresh glyph head, which first learns to
  read the towers as they are (see ``Progress.glyph_head_ready``);
- ``checkpoint.pt``: weights, optimizer state, the training-only glyph head and the progress, from which
  a rerun continues exactly where the run stopped;
- ``log.jsonl``: one line per logging interval (losses, glyph accuracy, attention mass on the right
  cell, learning rate, pages per second, stage) and one per evaluation;
- ``options.json``: the options of the run, for the record.

The loss is the next-token loss plus the two training-only terms of :mod:`jina_ocr.train.supervision`
(``glyph_weight`` and ``align_weight``). With ``towers_first`` a run starts with the vision towers alone
on the glyph loss, until their held-out glyph accuracy reaches it: inside the whole model from the first
step they learnt glyphs several times more slowly. With ``towers_from_glyphs`` the glyph loss is all the
towers ever learn from: the decoder's losses stop at the visual tokens, so the towers can train at a
rate of their own without the decoder's gradient undoing what they learn. The curriculum
(:mod:`jina_ocr.train.recipe`) advances when the held-out character error rate of the current stage
drops below its threshold. Every evaluation logs, for the held-out pages of the current stage and of
the last stage: the character error rate of greedy transcriptions, the loss, the "image gap" (how much
the loss rises when every page gets another page's image; zero until the model reads), the glyph
accuracy of the visual tokens and the attention mass on the right cell. Held-out pages print words no
training page uses (:mod:`jina_ocr.train.held_out_words`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from jina_ocr.errors import UserError
from jina_ocr.model_files import build_processor, load_model_files, load_settings, save_model_files
from jina_ocr.train.bundle import GATE_SEED
from jina_ocr.train.data import Collator, TrainingPageStream, batch_grid, prompt_ids
from jina_ocr.train.drills import STAGES
from jina_ocr.train.evaluate import character_error_rate, transcribe
from jina_ocr.train.glyphs import ViewGrid
from jina_ocr.train.parallel import SOLO, Group, run_processes
from jina_ocr.train.recipe import PROCESSOR_MODE, PageRecipe, model_config
from jina_ocr.train.run_log import append_record
from jina_ocr.train.supervision import AttentionProbes, GlyphHead, alignment_loss, glyph_loss
from jina_ocr.train.tokenizer import BYTE_VOCAB_SIZE, train_tokenizer
from jina_ocr.train.vision import (
    compile_towers,
    set_vision_trainable,
    standardize_projector,
    vision_parameters,
)

CHECKPOINT = "checkpoint.pt"
REWARM_STEPS = 50
GLYPH_HEAD_READY = 0.5
"""Training glyph accuracy (a running mean over steps) at which a fresh glyph head on trained towers is
taken to read them, and its gradient may reach the towers again."""
GLYPH_ACC_SMOOTHING = 0.1
PROBED_HEAD = 0


@dataclass
class SFTOptions:
    """Options of :func:`train_sft`.

    ``jina-ocr train sft`` fills them from a recipe file (:mod:`jina_ocr.train.recipe_file`), whose
    keys are these names (and those of ``recipe``, the page distribution), and a few command-line
    flags; ``out``, ``init`` and ``resume_from`` name folders and come from the command line alone."""

    out: Path
    steps: int = 8000
    batch_size: int = 8
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    decay_steps: int | None = None
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
    resume_from: Path | None = None
    stage: str = STAGES[0]
    tokenizer_pages: int = 300
    vocab_size: int = BYTE_VOCAB_SIZE
    max_target_tokens: int = 512
    glyph_weight: float = 1.0
    align_weight: float = 1.0
    align_layers: tuple[int, ...] = (1, 2)
    towers_first: float = 0.0
    towers_from_glyphs: bool = False
    vision_warmup_steps: int = 0
    vision_lr_scale: float = 1.0
    freeze_vision: bool = False
    gradient_checkpointing: bool = False
    compile_towers: bool = False
    bf16: bool = False
    device: str | None = None
    workers: int = 1
    threads: int | None = None
    processes: int = 1
    mode: str | None = None
    recipe: PageRecipe = field(default_factory=PageRecipe)


@dataclass
class Progress:
    """Where a run stands: optimizer steps taken, the next training page index, the curriculum stage,
    whether the towers-first phase (``towers_first``) is over, and the step from which a run resumed from
    model files alone ramps its learning rate up again (kept here so that a checkpoint taken during the
    ramp goes on with it). Files that predate the phase record no ``towers_ready``: a run resumed from
    them goes through it when ``towers_first`` asks for it.

    ``glyph_head_ready`` is False while a glyph head that started fresh on trained towers (a run resumed
    from model files, which never hold the training-only head) catches up: until its training glyph
    accuracy reaches ``GLYPH_HEAD_READY`` it learns from the towers' output with no gradient back into
    them. Its random gradient otherwise rewrote the towers: resumed at 6e-5, the image gap fell from 4.05
    to 0.49 nat/char and the held-out CER rose from 0.25 to 0.93 within 100 steps."""

    step: int = 0
    next_index: int = 1
    stage: int = 0
    towers_ready: bool = False
    rewarm_from: int | None = None
    glyph_head_ready: bool = True

    def record(self) -> dict:
        return {
            "step": self.step,
            "next_index": self.next_index,
            "stage": STAGES[self.stage],
            "towers_ready": self.towers_ready,
            "rewarm_from": self.rewarm_from,
            "glyph_head_ready": self.glyph_head_ready,
        }

    @classmethod
    def from_record(cls, record: dict) -> Progress:
        return cls(
            record["step"],
            record["next_index"],
            STAGES.index(record["stage"]),
            record.get("towers_ready", False),
            record.get("rewarm_from"),
            record.get("glyph_head_ready", True),
        )


def learning_rate_factor(step: int, options: SFTOptions) -> float:
    """Linear warm-up to the peak, then down to ``min_lr_ratio`` of it at ``options.steps``: a cosine
    over the whole run, or with ``decay_steps`` the peak held until the last ``decay_steps`` steps and a
    linear fall over them (warm-up, stable, decay), so a run at a constant rate can be cooled down from
    any of its checkpoints by resuming a copy of it with a later end."""
    if step < options.warmup:
        return (step + 1) / options.warmup
    if options.decay_steps is not None:
        start = options.steps - options.decay_steps
        progress = min(1.0, max(0.0, (step - start) / options.decay_steps))
        return 1 - (1 - options.min_lr_ratio) * progress
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


def _fresh_tokenizer(options: SFTOptions):
    """Bytes only by default; with merges, learnt from synth ground truth, drills and the prompt."""
    if options.vocab_size == BYTE_VOCAB_SIZE:
        return train_tokenizer([], options.vocab_size)
    from jina_ocr.remote_code.processing_jina_ocr import JINA_DEFAULT_PROMPT

    recipe = options.recipe
    pages = [recipe.synth_page(options.seed, -i) for i in range(1, options.tokenizer_pages + 1)]
    drills = [recipe.drill("page", f"tokenizer/{options.seed}/{i}") for i in range(options.tokenizer_pages)]
    # The prompt is written on every request: weighted like many pages, its words become single tokens.
    corpus = [p.markdown for p in pages + drills if p is not None] + [JINA_DEFAULT_PROMPT] * 50
    return train_tokenizer(corpus, options.vocab_size)


def starting_model(options: SFTOptions):
    """(model, processor, settings, progress): the files of ``resume_from`` or ``init``, or a fresh model."""
    source = options.resume_from or options.init
    if source is not None:
        model, processor = load_model_files(source)
        settings = load_settings(source)
        if options.resume_from is not None:
            if "progress" not in settings:
                raise UserError(f"--resume-from {source}: its settings record no training progress")
            return model, processor, settings, Progress.from_record(settings["progress"])
        return model, processor, settings, Progress(stage=STAGES.index(options.stage))
    mode = options.mode or PROCESSOR_MODE
    options = dataclasses.replace(options, recipe=dataclasses.replace(options.recipe, mode=mode))
    processor = build_processor(_fresh_tokenizer(options), mode)
    torch.manual_seed(options.seed)
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    model = JinaOCRForConditionalGeneration(model_config(processor.tokenizer))
    # The projector's statistics come from drills of every stage.
    views = [
        options.recipe.drill(stage, f"init/{options.seed}/{i}").image for stage in STAGES for i in range(4)
    ]
    standardize_projector(model, processor.image_processor(views)["pixel_values"])
    return model, processor, {"processor_mode": mode}, Progress(stage=STAGES.index(options.stage))


def _parameter_groups(model, glyph_head, options: SFTOptions):
    """Decay matrices; leave norms, biases, position tables and the special vectors alone.

    The vision towers get their own groups at ``vision_lr_scale`` of the learning rate (with
    ``freeze_vision`` they are left out), and with ``towers_from_glyphs`` so does the glyph head:
    the towers then learn from it alone, and a head that lagged behind them would hold them back. Each
    group keeps its peak rate as ``peak_lr`` and its parameters' ``names``, which a checkpoint then
    records.
    """
    vision = {id(p) for p in vision_parameters(model)}
    towers_rate = vision | ({id(p) for p in glyph_head.parameters()} if options.towers_from_glyphs else set())
    groups = {}
    named = [*model.named_parameters(), *glyph_head.named_parameters(prefix="glyph_head")]
    for name, parameter in named:
        if options.freeze_vision and id(parameter) in vision:
            continue
        decays = parameter.ndim >= 2 and "pos_embed" not in name and "position_embedding" not in name
        key = (id(parameter) in towers_rate, decays)
        groups.setdefault(key, []).append((name, parameter))
    return [
        {
            "params": [parameter for _, parameter in named],
            "names": [name for name, _ in named],
            "weight_decay": options.weight_decay if decays else 0.0,
            "peak_lr": options.lr * (options.vision_lr_scale if at_towers_rate else 1.0),
        }
        for (at_towers_rate, decays), named in groups.items()
    ]


def make_optimizer(model, glyph_head, options: SFTOptions) -> torch.optim.AdamW:
    """AdamW over :func:`_parameter_groups`; :func:`train_step` sets each group's rate from its peak."""
    return torch.optim.AdamW(_parameter_groups(model, glyph_head, options), betas=(0.9, 0.95))


CHECKPOINT_KEYS = frozenset({"model", "glyph_head", "optimizer", "progress"})


def read_checkpoint(out: Path) -> dict:
    """The checkpoint of run folder ``out``: weights, glyph head, optimizer state and progress.

    It is read with ``weights_only``: a checkpoint is a pickle, and a full unpickler would run whatever
    code a crafted file names. Tensors and plain values are all a checkpoint holds. A file that is no
    checkpoint of a run (damaged, cut short, another program's) is refused in one line naming it."""
    try:
        state = torch.load(Path(out) / CHECKPOINT, map_location="cpu", weights_only=True)
    except Exception as error:  # a damaged archive or pickle fails anywhere: EOFError, IndexError, ...
        text = str(error).strip()
        if isinstance(error, pickle.UnpicklingError) and text.startswith("Weights only load failed"):
            reason = "it holds objects other than tensors and plain values, and loading them would run code"
        else:
            first = text.splitlines()[0].split(". ")[0] if text else ""  # torch's advice follows it
            reason = f"it cannot be read: {type(error).__name__}" + (f": {first}" if first else "")
        raise unusable_checkpoint(out, reason) from None
    if not isinstance(state, dict) or not CHECKPOINT_KEYS <= set(state):
        raise unusable_checkpoint(out, f"it holds no {', '.join(sorted(CHECKPOINT_KEYS))}")
    return state


def unusable_checkpoint(out: Path, reason: str) -> UserError:
    """The refusal of the checkpoint of run folder ``out``, and the way on: its model files."""
    return UserError(
        f"{Path(out) / CHECKPOINT}: not a checkpoint this run can go on from ({reason}); move it aside "
        f"and go on from the model files with --resume-from {Path(out) / 'model'}"
    )


def write_checkpoint(out: Path, state: dict) -> None:
    """Write ``state`` as the checkpoint of run folder ``out``, whole or not at all: a run stopped while
    writing keeps its previous checkpoint."""
    path = Path(out) / CHECKPOINT
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def moments_by_name(optimizer: dict) -> dict[str, dict]:
    """Each parameter's AdamW state in an optimizer state dict whose groups record their names."""
    return {
        name: optimizer["state"][index]
        for group in optimizer["param_groups"]
        for name, index in zip(group["names"], group["params"], strict=True)
        if index in optimizer["state"]
    }


def restored_optimizer_state(saved: dict, fresh: dict, out: Path) -> dict:
    """A checkpoint's AdamW state ``saved`` for the optimizer whose fresh state is ``fresh``.

    Each parameter's moments follow its name, so a rerun may group the parameters otherwise (with or
    without ``freeze_vision`` or ``towers_from_glyphs``), and the groups' settings (``lr``,
    ``vision_lr_scale``, ``weight_decay``) are the rerun's own. A checkpoint whose groups record no
    names cannot be matched to the parameters: its run goes on from its model files instead.
    """
    if not all("names" in group for group in saved["param_groups"]):
        raise UserError(
            f"{out / CHECKPOINT}: its optimizer state names no parameters (an older format); move it "
            f"aside and go on from the model files with --resume-from {out / 'model'}"
        )
    by_name = moments_by_name(saved)
    state = {
        index: by_name[name]
        for group in fresh["param_groups"]
        for name, index in zip(group["names"], group["params"], strict=True)
        if name in by_name
    }
    return {"state": state, "param_groups": fresh["param_groups"]}


def supervised_losses(
    model,
    glyph_head,
    probes,
    batch: dict,
    options: SFTOptions,
    autocast,
    towers_only: bool = False,
    glyph_head_alone: bool = False,
):
    """The weighted loss of a batch on the model's device, and its parts: the next-token loss plus the
    glyph and alignment losses of :mod:`jina_ocr.train.supervision`, read through ``probes``.

    ``towers_only`` (the towers-first phase) runs the vision towers alone and returns the glyph loss.
    ``glyph_head_alone`` stops the glyph loss at the visual tokens (a fresh head catching up).
    """
    token_cells = batch.pop("token_cells")
    cell_glyphs = batch.pop("cell_glyphs")
    grid = batch_grid(batch)

    def glyphs(views: torch.Tensor) -> tuple[torch.Tensor, dict]:
        cell_tokens = grid.cell_tokens(views)
        if glyph_head_alone:
            cell_tokens = cell_tokens.detach()
        return glyph_loss(glyph_head(cell_tokens), cell_glyphs, glyph_head.empty)

    if towers_only:
        with autocast:
            views = model.model.encode_views(batch["pixel_values_local" if grid.tiles else "pixel_values"])
        glyph, glyph_stats = glyphs(views)
        return glyph, {"glyph": glyph.item(), **glyph_stats}
    probes.clear()
    with autocast:
        lm = model(**batch).loss
    glyph, glyph_stats = glyphs(probes.projected[grid.side**2])
    align, align_stats = alignment_loss(probes.log_attention, token_cells)
    total = lm + options.glyph_weight * glyph + options.align_weight * align
    parts = {"lm": lm.item(), "glyph": glyph.item(), "align": align.item(), **glyph_stats, **align_stats}
    return total, parts


def train_step(
    model,
    glyph_head,
    probes,
    batch: dict,
    optimizer,
    lr_factor: float,
    options,
    autocast,
    towers_only: bool = False,
    processes: Group = SOLO,
    glyph_head_alone: bool = False,
) -> dict:
    """One update at ``lr_factor`` of each group's peak rate; returns the batch's loss parts before it.

    With ``towers_only`` only the towers and the glyph head get gradients; AdamW leaves the decoder as it
    is (a parameter without a gradient is skipped, weight decay included). With ``glyph_head_alone`` the
    glyph loss trains the glyph head only. With several ``processes`` ``batch`` is this process's share,
    and the gradients are averaged over the processes before the clipping and the update.
    """
    for group in optimizer.param_groups:
        group["lr"] = group["peak_lr"] * lr_factor
    loss, parts = supervised_losses(
        model, glyph_head, probes, batch, options, autocast, towers_only, glyph_head_alone
    )
    loss.backward()
    parameters = [*model.parameters(), *glyph_head.parameters()]
    processes.average_gradients(parameters)
    torch.nn.utils.clip_grad_norm_(parameters, options.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return parts


def held_out_batch(
    processor, options: SFTOptions, stage: int, degradation: str | None = None
) -> tuple[list, dict]:
    """``options.eval_pages`` held-out pages of ``stage`` (seed ``options.eval_seed``), clean or through
    ``degradation`` (see :meth:`PageRecipe.held_out_pages`), and their teacher-forcing batch: what every
    evaluation of a run reads."""
    pages = options.recipe.held_out_pages(
        stage, options.eval_seed, options.eval_pages, degradation=degradation
    )
    return pages, page_batch(processor, options, pages)


def run_collator(processor, recipe: PageRecipe) -> Collator:
    """The collator of a run's pages: their one prompt and grid (every drill page is A5 at one dpi)."""
    image_size = recipe.image_size()
    grid = ViewGrid.of_page(processor.image_processor, image_size)
    return Collator(prompt_ids(processor, image_size), processor.tokenizer.pad_token_id, grid)


def page_batch(processor, options: SFTOptions, pages: list) -> dict:
    """The teacher-forcing batch of ``pages`` on the CPU, with their glyph targets."""
    stream = TrainingPageStream(processor, options.seed, options.recipe, 1, options.max_target_tokens)
    collate = run_collator(processor, options.recipe)
    batch = collate([stream.example(i, page) for i, page in enumerate(pages)])
    batch.pop("indices")
    return batch


class _Trainer:
    """One run: the model, its training-only parts, the optimizer and the held-out sets.

    With several ``processes`` (:mod:`jina_ocr.train.parallel`) each one has its own trainer on its share
    of every batch; process 0's alone evaluates, logs and writes the run's files.
    """

    def __init__(self, options: SFTOptions, processes: Group = SOLO):
        self.options = options
        self.processes = processes
        self.out = Path(options.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.device = _device(options)
        if options.bf16 and not _bf16_supported(self.device):
            raise UserError(f"bf16 is not supported on {self.device}; run with --no-bf16")
        checkpoint_path = self.out / CHECKPOINT
        state = None
        if checkpoint_path.exists():
            if not (self.out / "model" / "config.json").is_file():
                raise UserError(
                    f"{self.out / 'model'}: no model files beside {checkpoint_path} (they hold the run's "
                    "tokenizer and settings); restore them, or start the run in a new folder"
                )
            model, processor = load_model_files(self.out / "model", weights=False)
            settings = load_settings(self.out / "model")
            state = read_checkpoint(self.out)
            try:
                model.load_state_dict(state["model"])
                progress = Progress.from_record(state["progress"])
            except (RuntimeError, KeyError, TypeError, ValueError):
                raise unusable_checkpoint(
                    self.out, f"its weights or progress do not fit the model files in {self.out / 'model'}"
                ) from None
        else:
            model, processor, settings, progress = starting_model(options)
        mode = options.mode or settings["processor_mode"]
        new_mode = mode != settings["processor_mode"]
        if new_mode:
            if state is not None:
                raise UserError(
                    f"mode {mode!r}: the run in {self.out} trains in {settings['processor_mode']!r} mode; "
                    "a run changes mode only when it starts from model files (--resume-from, --init)"
                )
            processor = build_processor(processor.tokenizer, mode)
            settings["processor_mode"] = mode
            # Glyphs at another scale (on tiles, about twice as large): the towers learn them again on
            # the glyph loss (in a towers-first phase if the run has one), with the head, as a fresh
            # run's do.
            progress.towers_ready = False
        self.options = options = dataclasses.replace(
            options, recipe=dataclasses.replace(options.recipe, mode=mode)
        )
        self.model, self.processor, self.settings, self.progress = model, processor, settings, progress
        record = {
            key: str(value) if isinstance(value, Path) else value
            for key, value in dataclasses.asdict(options).items()
            if key not in ("out", "device", "workers", "threads", "processes", "compile_towers")
        }
        if processes.lead:
            (self.out / "options.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        # The model files travel (a bundle, a push): they name the folder a run started from by its
        # last part only, never a path of the machine that trained it.
        settings["sft"] = record | {
            key: Path(record[key]).name for key in ("init", "resume_from") if record[key] is not None
        }

        model.to(self.device).train()
        if options.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        if options.compile_towers:
            compile_towers(model)
        self.glyph_head = GlyphHead(model.config.hidden_size, model.config.vocab_size).to(self.device)
        self.optimizer = make_optimizer(model, self.glyph_head, options)
        if state is None and options.resume_from is not None:
            progress.rewarm_from = progress.step  # a fresh optimizer: the rate ramps up again
            # and a fresh glyph head on trained towers first catches up with them (not when they learn
            # a new mode's scale)
            progress.glyph_head_ready = new_mode
        self.glyph_acc = 0.0  # running mean of the training glyph accuracy while the head catches up
        if state is not None:
            try:
                self.glyph_head.load_state_dict(state["glyph_head"])
                self.optimizer.load_state_dict(
                    restored_optimizer_state(state["optimizer"], self.optimizer.state_dict(), self.out)
                )
            except UserError:  # an optimizer state of the older format: its own refusal says the way on
                raise
            except (RuntimeError, KeyError, TypeError, ValueError):
                raise unusable_checkpoint(
                    self.out, "its glyph head or optimizer state do not fit the model"
                ) from None

        layers = model.config.num_hidden_layers
        if not all(0 <= layer < layers for layer in options.align_layers):
            raise UserError(
                f"align_layers {list(options.align_layers)}: the decoder has layers 0 to {layers - 1}"
            )
        self.collator = run_collator(processor, options.recipe)
        self.prompt = self.collator.prompt
        image_token = model.config.image_token_id
        first_visual = self.prompt.index(image_token)
        visual_count = self.prompt.count(image_token)
        self.probes = AttentionProbes(
            model,
            list(options.align_layers),
            PROBED_HEAD,
            text_start=len(self.prompt) - 1,
            visual=slice(first_visual, first_visual + visual_count),
            detach_visual=options.towers_from_glyphs,
        )
        self.held_out: dict[tuple[int, str | None], tuple[list, dict]] = {}
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=options.bf16)
        if state is None:
            self.save_checkpoint()

    # -- the pieces of a step -----------------------------------------------------------------------

    @property
    def towers_phase(self) -> bool:
        """Whether the run is in its towers-first phase: the towers learn glyphs alone until their
        held-out glyph accuracy reaches ``towers_first``."""
        return self.options.towers_first > 0 and not self.progress.towers_ready

    def losses(self, batch: dict, towers_only: bool = False) -> tuple[torch.Tensor, dict]:
        """The weighted loss of a batch (already on the device) and its parts."""
        return supervised_losses(
            self.model, self.glyph_head, self.probes, batch, self.options, self.autocast, towers_only
        )

    def learning_rate_factor(self) -> float:
        """The schedule's factor at this step; a run resumed from model files ramps up again."""
        factor = learning_rate_factor(self.progress.step, self.options)
        if self.progress.rewarm_from is not None:
            factor *= min(1.0, (self.progress.step - self.progress.rewarm_from + 1) / REWARM_STEPS)
        return factor

    def log(self, record: dict) -> None:
        """Append ``record`` to the run's log and print it (process 0 only). A value that is not finite
        (which JSON cannot hold) means the model broke down: the run stops before it saves it."""
        if not self.processes.lead:
            return
        broken = [
            key for key, value in record.items() if isinstance(value, float) and not math.isfinite(value)
        ]
        if broken:
            raise self.not_finite(", ".join(f"{key} {record[key]}" for key in broken))
        append_record(self.out, record)

    def not_finite(self, what: str) -> UserError:
        """The end of a run whose loss, metrics or weights are no longer finite numbers (``what``)."""
        return UserError(
            f"step {self.progress.step}: not finite ({what}); the run stops, and {self.out / 'model'} "
            "keeps the model files of its last checkpoint (a lower lr may help)"
        )

    def save_checkpoint(self) -> None:
        """Write the model files and the checkpoint (process 0 only: the others hold the same state),
        never weights that are not finite, which would replace the last good ones."""
        if not self.processes.lead:
            return
        if not all(bool(parameter.isfinite().all()) for parameter in self.model.parameters()):
            raise self.not_finite("the weights")
        self.settings["progress"] = self.progress.record()
        save_model_files(self.out / "model", self.model, self.processor.tokenizer, self.settings)
        write_checkpoint(
            self.out,
            {
                "model": self.model.state_dict(),
                "glyph_head": self.glyph_head.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "progress": self.progress.record(),
            },
        )

    # -- evaluation ---------------------------------------------------------------------------------

    def held_out_set(self, stage: int, degradation: str | None = None) -> tuple[list, dict]:
        """The held-out pages of ``stage`` (through ``degradation``) and their teacher-forcing batch
        (built once per run)."""
        if (stage, degradation) not in self.held_out:
            self.held_out[stage, degradation] = held_out_batch(
                self.processor, self.options, stage, degradation
            )
        return self.held_out[stage, degradation]

    @torch.no_grad()
    def measure(self, stage: int, degradation: str | None = None) -> dict:
        """CER of greedy transcriptions, loss, image gap, glyph accuracy and attention mass on ``stage``
        (its pages through ``degradation``)."""
        pages, cpu_batch = self.held_out_set(stage, degradation)
        self.model.eval()
        batch = {key: value.to(self.device) for key, value in cpu_batch.items()}
        _, parts = self.losses(dict(batch))
        batch.pop("token_cells"), batch.pop("cell_glyphs")
        # Every page gets the previous page's views (its global view and its tiles).
        tiles_per_page = batch["pixel_values_local"].shape[0] // batch["pixel_values"].shape[0]
        batch["pixel_values"] = batch["pixel_values"].roll(1, 0)
        batch["pixel_values_local"] = batch["pixel_values_local"].roll(tiles_per_page, 0)
        with self.autocast:
            gap = self.model(**batch).loss.item() - parts["lm"]
        self.model.train()
        with self.probes.paused():
            predictions = transcribe(
                self.model,
                self.processor,
                [p.image for p in pages],
                max_new_tokens=self.options.max_target_tokens,
            )
        return {
            "cer": round(character_error_rate(predictions, [p.markdown for p in pages]), 4),
            "loss": round(parts["lm"], 4),
            "gap": round(gap, 4),
            "glyph_acc": round(parts["glyph_correct"] / max(1, parts["glyph_slots"]), 4),
            "align_mass": round(parts["align_mass"], 4),
            "sample": predictions[0][:160],
        }

    @torch.no_grad()
    def measure_glyphs(self, stage: int) -> dict:
        """The towers' glyph accuracy and loss on the held-out pages of ``stage``."""
        _, cpu_batch = self.held_out_set(stage)
        self.model.eval()
        batch = {key: value.to(self.device) for key, value in cpu_batch.items()}
        loss, parts = self.losses(batch, towers_only=True)
        self.model.train()
        return {
            "glyph_acc": round(parts["glyph_correct"] / max(1, parts["glyph_slots"]), 4),
            "glyph_loss": round(loss.item(), 4),
        }

    def evaluate_towers(self) -> None:
        """Log the towers' held-out glyph accuracy; end the towers-first phase when it is reached."""
        stage = STAGES[self.progress.stage]
        record = {"step": self.progress.step, "stage": stage, "phase": "towers"}
        record.update({f"{stage}_{k}": v for k, v in self.measure_glyphs(self.progress.stage).items()})
        self.log(record)
        if record[f"{stage}_glyph_acc"] >= self.options.towers_first:
            self.progress.towers_ready = True
            self.log({"step": self.progress.step, "towers_ready": True})
            self.save_checkpoint()

    def evaluate(self) -> bool:
        """Process 0 evaluates, with every process's threads, while the others wait; all then take its
        decisions (the stage, the end of the towers-first phase). True when the curriculum advanced."""
        advanced = False
        if self.processes.lead:
            threads = torch.get_num_threads()
            torch.set_num_threads(threads * self.processes.size)
            try:
                advanced = self._evaluate()
            finally:
                torch.set_num_threads(threads)
        progress = self.progress
        stage, ready, advanced = self.processes.broadcast([progress.stage, progress.towers_ready, advanced])
        progress.stage, progress.towers_ready = stage, bool(ready)
        return bool(advanced)

    def _evaluate(self) -> bool:
        """Log the held-out metrics; advance the curriculum (and return True) when the stage is passed."""
        if self.towers_phase:
            self.evaluate_towers()
            return False
        started = time.perf_counter()
        stage = self.progress.stage
        record = {"step": self.progress.step, "stage": STAGES[stage]}
        for measured in sorted({stage, len(STAGES) - 1}):
            record.update({f"{STAGES[measured]}_{k}": v for k, v in self.measure(measured).items()})
        if self.options.recipe.degraded:
            last = len(STAGES) - 1
            record.update({f"degraded_{k}": v for k, v in self.measure(last, "mixed").items()})
        record["eval_seconds"] = round(time.perf_counter() - started, 1)
        self.log(record)
        thresholds = self.options.recipe.advance_cer
        if stage < len(STAGES) - 1 and record[f"{STAGES[stage]}_cer"] < thresholds[stage]:
            self.progress.stage += 1
            self.log({"step": self.progress.step, "advanced_to": STAGES[self.progress.stage]})
            self.save_checkpoint()
            return True
        return False

    # -- the loop -----------------------------------------------------------------------------------

    def loader(self) -> DataLoader:
        """This process's share of the batches: with ``n`` processes, process ``r`` takes the pages
        ``next_index + r``, ``next_index + r + n``, ... and ``batch_size / n`` of them per step.

        A page the generator skips (see :class:`TrainingPageStream`) puts that process one page further
        on; a new loader (on resuming, or in a new stage) starts after the highest page any process drew,
        so no page is drawn twice, though a few that an uninterrupted run would have used are passed over."""
        options, processes = self.options, self.processes
        stream = TrainingPageStream(
            self.processor,
            options.seed,
            options.recipe,
            self.progress.next_index + processes.rank,
            options.max_target_tokens,
            stage=self.progress.stage,
            stride=processes.size,
        )
        return DataLoader(
            stream,
            batch_size=options.batch_size // processes.size,
            collate_fn=self.collator,
            num_workers=options.workers,
            prefetch_factor=4 if options.workers else None,
            persistent_workers=False,
        )

    def run(self) -> Path:
        with _StopSignal() as stop_signal:
            return self._run(stop_signal)

    def _run(self, stop_signal: _StopSignal) -> Path:
        options, progress = self.options, self.progress
        vision_warmup = 0 if options.init is not None else options.vision_warmup_steps
        set_vision_trainable(self.model, not options.freeze_vision and progress.step >= vision_warmup)
        started = last_checkpoint = last_log = time.perf_counter()
        interval: list[dict] = []
        pages_since_log = 0
        while progress.step < options.steps:
            for batch in self.loader():
                indices = batch.pop("indices")
                factor = self.learning_rate_factor()
                batch = {key: value.to(self.device) for key, value in batch.items()}
                parts = train_step(
                    self.model,
                    self.glyph_head,
                    self.probes,
                    batch,
                    self.optimizer,
                    factor,
                    options,
                    self.autocast,
                    towers_only=self.towers_phase,
                    processes=self.processes,
                    glyph_head_alone=not progress.glyph_head_ready,
                )
                lr = options.lr * factor
                progress.step += 1
                if progress.step == vision_warmup and not options.freeze_vision:
                    set_vision_trainable(self.model, True)
                now = time.perf_counter()
                reason = self._stop_reason(now - started, stop_signal)
                reason, parts = self._exchange(reason, indices, parts)
                broken = [f"{key} {value}" for key, value in parts.items() if not math.isfinite(value)]
                if broken:  # the same on every process: the parts are their means
                    raise self.not_finite(", ".join(broken))
                interval.append(parts)
                self._follow_glyph_head(parts)
                pages_since_log += len(indices) * self.processes.size
                if progress.step % options.log_every == 0 or progress.step == options.steps:
                    self.log(
                        self._interval_record(interval, lr, pages_since_log / (now - last_log), started),
                    )
                    interval, pages_since_log, last_log = [], 0, now
                advanced = (
                    bool(options.eval_every) and progress.step % options.eval_every == 0 and self.evaluate()
                )
                if now - last_checkpoint > options.checkpoint_minutes * 60 or reason:
                    self.save_checkpoint()
                    last_checkpoint = time.perf_counter()
                if reason:
                    self.log({"step": progress.step, "stopped": f"{reason}; run again to resume"})
                    return self.out / "model"
                if advanced or progress.step >= options.steps:
                    break  # a new stage draws its pages from a new loader
        if not options.eval_every or progress.step % options.eval_every:
            self.evaluate()
        self.save_checkpoint()
        return self.out / "model"

    def _exchange(self, reason: str | None, indices: torch.Tensor, parts: dict) -> tuple[str | None, dict]:
        """The processes' one exchange per step: whether any of them stops, the last page any of them
        drew (which sets the run's next page index), and the mean of their loss parts. Their stages
        come along as a check: processes that drew pages of different stages would train a mixture."""
        progress = self.progress
        shares = self.processes.gather(
            [reason is not None, int(indices.max()), progress.stage, *parts.values()]
        )
        if len({share[2] for share in shares}) > 1:
            raise RuntimeError(f"the training processes are in different stages at step {progress.step}")
        if reason is None and any(share[0] for share in shares):
            reason = "another training process stopped"
        progress.next_index = int(max(share[1] for share in shares)) + 1
        means = [sum(column) / len(shares) for column in zip(*(share[3:] for share in shares), strict=True)]
        return reason, dict(zip(parts, means, strict=True))

    def _follow_glyph_head(self, parts: dict) -> None:
        """While a fresh glyph head catches up, end that once its running training glyph accuracy (the
        same on every process: ``parts`` are the processes' means) reaches ``GLYPH_HEAD_READY``."""
        if self.progress.glyph_head_ready:
            return
        accuracy = parts["glyph_correct"] / max(1, parts["glyph_slots"])
        self.glyph_acc += GLYPH_ACC_SMOOTHING * (accuracy - self.glyph_acc)
        if self.glyph_acc >= GLYPH_HEAD_READY:
            self.progress.glyph_head_ready = True
            self.log({"step": self.progress.step, "glyph_head_ready": True})

    def _stop_reason(self, seconds: float, stop_signal: _StopSignal) -> str | None:
        """Why the run stops after this step, or None to go on."""
        if self.options.max_minutes is not None and seconds > self.options.max_minutes * 60:
            return "max_minutes reached"
        if self.progress.step == self.options.stop_at:
            return f"stopped at step {self.progress.step}"
        return stop_signal.received

    def _interval_record(self, interval: list[dict], lr: float, pages_per_s: float, started: float) -> dict:
        """The interval's mean losses; steps of the towers-first phase have only the glyph loss."""

        def mean(values: list[float]) -> float:
            return round(sum(values) / len(values), 4)

        slots = sum(p["glyph_slots"] for p in interval)
        names = {"lm": "loss", "glyph": "glyph_loss", "align": "align_loss", "align_mass": "align_mass"}
        values = {name: [p[key] for p in interval if key in p] for key, name in names.items()}
        return {
            "step": self.progress.step,
            "pages": self.progress.next_index - 1,
            "stage": STAGES[self.progress.stage],
            **{name: mean(kept) for name, kept in values.items() if kept},
            "glyph_acc": round(sum(p["glyph_correct"] for p in interval) / max(1, slots), 4),
            "lr": lr,
            "pages_per_s": round(pages_per_s, 2),
            "minutes": round((time.perf_counter() - started) / 60, 2),
        }


class _StopSignal:
    """SIGTERM or SIGINT ends the run after the step in progress, with a checkpoint, instead of at once:
    a machine being handed back, or Ctrl-C, then loses nothing."""

    def __init__(self):
        self.received: str | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        self.received = f"{signal.Signals(signum).name} received"

    def __enter__(self) -> _StopSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def train_sft(options: SFTOptions) -> Path:
    """Train (or resume) the run in ``options.out``; returns the folder of the trained model files.

    With ``processes`` above one the run is data-parallel over that many CPU processes
    (:mod:`jina_ocr.train.parallel`), each with ``threads`` threads and its share of every batch.
    A run never evaluates on the bundle gate's pages: it is stopped and picked by its evaluations.
    """
    if options.eval_seed == GATE_SEED:
        raise UserError(
            f"eval_seed {GATE_SEED} draws the pages of the bundle gate, which a run must not be picked on; "
            "choose another seed"
        )
    if options.resume_from is not None and (Path(options.out) / CHECKPOINT).exists():
        raise UserError(f"{options.out} has a checkpoint: rerun without --resume-from to continue from it")
    options.recipe.check_synth_tools()
    if options.processes == 1:
        return _train_process(SOLO, options)
    if options.processes < 1 or options.batch_size % options.processes:
        raise UserError(
            f"processes {options.processes}: give a number of processes that divides the batch size "
            f"{options.batch_size}"
        )
    if _device(options).type != "cpu":
        raise UserError(
            f"processes splits batches over CPU processes; on {_device(options)} give --processes 1"
        )
    run_processes(options.processes, _train_process, options)
    return Path(options.out) / "model"


def _train_process(processes: Group, options: SFTOptions) -> Path:
    """The run in one process. Process 0 builds (or loads) the run first, so that the others start
    from the checkpoint it wrote, with the same weights."""
    if options.threads:
        torch.set_num_threads(options.threads)
    if not processes.lead:
        processes.barrier()
    trainer = _Trainer(options, processes)
    if processes.lead:
        processes.barrier()
    return trainer.run()
