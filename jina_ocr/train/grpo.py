"""GRPO post-training of a jina-ocr model on TRL with the deterministic page reward (``jina-ocr train grpo``).

Every step samples ``generations`` transcriptions of each of ``pages`` pages (:mod:`jina_ocr.train.grpo_data`)
with plain sampling at ``temperature``, scores each against its page's reference with the multiplied,
floored terms of :mod:`jina_ocr.rewards` (:mod:`jina_ocr.train.grpo_reward`), and takes one GRPO step on
the whole model (vision towers included) through TRL's ``GRPOTrainer``
(:mod:`jina_ocr.train.grpo_trainer` says what it had to be told about this model). ``beta`` weighs a KL
term to the starting model ``MODEL``; 0 (the default) keeps no reference model, as olmOCR 2's runs did
with beta at or near 0.

Rollouts decode without FastMTP, which is greedy only, and without the loop guard: the guard would make
the samples come from another distribution than the one the loss scores, and it would hide the loops
that the reward's repetition term (no floor) exists to punish. Held-out evaluations read greedily, as
inference does (FastMTP and loop guard as the model's defaults say).

A run lives in one folder ``OUT`` (keep it outside the repository):

- ``checkpoints/checkpoint-N/``: the latest checkpoint (TRL's optimizer, scheduler, random state and
  trainer state beside model files), every ``checkpoint_every`` steps and at the end; rerunning the same
  command goes on from it exactly;
- ``model/``: the model files (:mod:`jina_ocr.model_files`) of the latest checkpoint, then of the end:
  plain weights, config, tokenizer and settings, whose ``grpo`` entry records the run's options and
  progress, so ``--resume-from OUT/model`` starts a new run folder from them alone (fresh optimizer);
- ``log.jsonl``: one line per step (reward mean, standard deviation and every floored term, KL when
  ``beta`` is above 0, completion length, entropy, loss, and the seconds of rollout, reward and loss),
  one per held-out evaluation (CER on target-format pages, on pages where a fifth of the words repeat,
  and the mean reward of both);
- ``options.json``: the options of the last invocation, for the record.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from jina_ocr.errors import UserError
from jina_ocr.model_files import SETTINGS, load_model_files, load_settings, save_model_files
from jina_ocr.remote_code.generation.settings import LOOP_GUARD_NGRAM_KEY
from jina_ocr.rewards import reward
from jina_ocr.train.bundle import GATE_SEED
from jina_ocr.train.evaluate import character_error_rate, transcribe
from jina_ocr.train.grpo_data import held_out_sets, page_rows
from jina_ocr.train.recipe import PageRecipe
from jina_ocr.train.run_log import append_record

CHECKPOINTS = "checkpoints"
TRL_HINT = 'pip install "jina-ocr[grpo]"'
"""TRL pinned (the trainer subclass uses its internal steps), with this package."""
RUN_ONLY = ("model", "out", "resume_from", "device", "threads")
"""Options that name folders or the machine: the run's record keeps them, the model files do not."""


@dataclass
class GRPOOptions:
    """Options of :func:`train_grpo`; the command line mirrors them one to one."""

    model: Path
    out: Path
    steps: int = 200
    pages: int = 4
    generations: int = 8
    lr: float = 1e-5
    beta: float = 0.0
    temperature: float = 1.0
    seed: int = 4
    eval_seed: int = 1
    eval_every: int = 25
    eval_pages: int = 16
    max_new_tokens: int = 384
    repeat_words: float = 0.2
    checkpoint_every: int = 25
    resume_from: Path | None = None
    device: str | None = None
    threads: int | None = None


def check_options(options: GRPOOptions) -> None:
    """Refuse, in one line each, options no run can use."""
    for name in ("steps", "pages", "eval_pages", "max_new_tokens", "checkpoint_every"):
        if getattr(options, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(options, name)}")
    if options.generations < 2:
        raise UserError(f"--generations {options.generations}: GRPO compares at least 2 samples of a page")
    if options.eval_every < 0:
        raise UserError(f"--eval-every {options.eval_every}: give 0 (at the end only) or more")
    if not (math.isfinite(options.lr) and options.lr > 0):
        raise UserError(f"--lr {options.lr}: give a positive number")
    if not (math.isfinite(options.beta) and options.beta >= 0):
        raise UserError(f"--beta {options.beta}: give 0 or a positive number")
    if not (math.isfinite(options.temperature) and options.temperature > 0):
        raise UserError(f"--temperature {options.temperature}: give a positive number")
    if not 0 <= options.repeat_words <= 1:
        raise UserError(f"--repeat-words {options.repeat_words}: give a share from 0 to 1")
    if options.eval_seed == GATE_SEED:
        raise UserError(
            f"--eval-seed {GATE_SEED} draws the pages of the bundle gate, which a run must not be picked on; "
            "choose another seed"
        )
    for flag, folder in (("MODEL", options.model), ("--resume-from", options.resume_from)):
        if folder is not None and not (Path(folder) / SETTINGS).is_file():
            raise UserError(
                f"{flag} {folder}: no {SETTINGS} there; give a folder of model files (the model/ folder of "
                "a run, or jina_ocr/models/jina-ocr-tiny)"
            )


def latest_checkpoint(out: Path) -> Path | None:
    """The run folder's newest checkpoint, if any."""
    found = sorted((Path(out) / CHECKPOINTS).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return found[-1] if found else None


def _progress(settings: dict, source: Path) -> dict:
    progress = settings.get("grpo", {}).get("progress")
    if progress is None:
        raise UserError(
            f"{source}: its settings record no GRPO progress; give the model/ folder of a grpo run"
        )
    return progress


def run_settings(base: dict, options: GRPOOptions, step: int, run_start: int) -> dict:
    """The settings the model files of ``step`` carry: the starting files' own, and the run's options and
    progress (``run_start``: the step this run folder started at) without folders or machine."""
    grpo = {key: value for key, value in dataclasses.asdict(options).items() if key not in RUN_ONLY}
    grpo["progress"] = {"step": step, "run_start": run_start}
    return {**base, "grpo": grpo}


class HeldOutEvaluation:
    """Greedy transcriptions of the held-out pages (:func:`~jina_ocr.train.grpo_data.held_out_sets`,
    made once): each set's CER and the mean reward over all of them."""

    def __init__(self, model, processor, recipe: PageRecipe, options: GRPOOptions):
        self.model, self.processor, self.options = model, processor, options
        self.sets = held_out_sets(recipe, options.eval_seed, options.eval_pages)

    def __call__(self, step: int) -> dict:
        started = time.perf_counter()
        record: dict = {"step": step}
        rewards = []
        for name, pages in self.sets.items():
            references = [page.markdown for page in pages]
            predictions = transcribe(
                self.model,
                self.processor,
                [page.image for page in pages],
                max_new_tokens=self.options.max_new_tokens,
            )
            record[f"{name}_cer"] = round(character_error_rate(predictions, references), 4)
            rewards += [reward(p, r).total for p, r in zip(predictions, references, strict=True)]
        record["held_out_reward"] = round(sum(rewards) / len(rewards), 4)
        record["eval_seconds"] = round(time.perf_counter() - started, 1)
        return record


def step_record(step: int, logs: dict, step_seconds: float) -> dict:
    """A log line of one step from TRL's logs: the reward and its terms, KL (with ``beta`` above 0),
    completion length, and where the step's time went. ``rollout`` is sampling (prompt rendering
    included), ``reward`` scoring, ``loss`` the forward, backward and update, ``other`` the rest of the
    scoring step (the views of the loss batch, the reference's log-probabilities)."""
    scoring, rollout, scored = (
        logs["seconds/generate_and_score"],
        logs["seconds/rollout"],
        logs["seconds/reward"],
    )
    record = {"step": step, "reward": logs["reward"], "reward_std": logs["reward_std"]}
    record.update({key: value for key, value in logs.items() if key.startswith("reward/")})
    if "kl" in logs:
        record["kl"] = logs["kl"]
    record.update(
        completion_length=logs["completions/mean_length"],
        clipped=logs["completions/clipped_ratio"],
        entropy=logs["entropy"],
        loss=logs["loss"],
        grad_norm=logs["grad_norm"],
        lr=logs["learning_rate"],
    )
    record = {key: round(value, 5) if isinstance(value, float) else value for key, value in record.items()}
    record["seconds"] = {
        "rollout": round(rollout, 2),
        "reward": round(scored, 3),
        "loss": round(step_seconds - scoring, 2),
        "other": round(scoring - rollout - scored, 2),
        "step": round(step_seconds, 2),
    }
    return record


def _callback(out: Path, run_start: int, evaluate: HeldOutEvaluation, eval_every: int):
    """The TRL callback that writes the log: every step's line, and an evaluation at the start of a new
    run, every ``eval_every`` steps and at the end."""
    from transformers import TrainerCallback

    class RunLog(TrainerCallback):
        began = step_seconds = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            if run_start == 0 and state.global_step == 0 and eval_every:
                append_record(out, evaluate(0))

        def on_step_begin(self, args, state, control, **kwargs):
            self.began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.step_seconds = time.perf_counter() - self.began

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is None or "reward" not in logs:
                return  # the summary at the end of training
            step = run_start + state.global_step
            append_record(out, step_record(step, logs, self.step_seconds))
            if eval_every and step % eval_every == 0:
                append_record(out, evaluate(step))

        def on_train_end(self, args, state, control, **kwargs):
            step = run_start + state.global_step
            if not eval_every or step % eval_every:
                append_record(out, evaluate(step))

    return RunLog()


def train_grpo(options: GRPOOptions) -> Path:
    """Train (or go on with) the run in ``options.out``; returns the folder of its final model files."""
    check_options(options)
    try:
        from trl import GRPOConfig

        from jina_ocr.train.grpo_trainer import PageGRPOTrainer
    except ImportError:
        raise UserError(f"train grpo needs TRL: {TRL_HINT}") from None
    out = Path(options.out)
    checkpoint = latest_checkpoint(out)
    if checkpoint is not None and options.resume_from is not None:
        raise UserError(f"{out} has a checkpoint: rerun without --resume-from to continue from it")
    start = checkpoint or options.resume_from or options.model
    settings = load_settings(start)
    run_start = 0
    if checkpoint is not None:
        run_start = _progress(settings, start)["run_start"]
    elif options.resume_from is not None:
        run_start = _progress(settings, start)["step"]
    if run_start >= options.steps:
        raise UserError(f"{start} records step {run_start}: give --steps above it")
    base = {key: value for key, value in settings.items() if key != "grpo"}
    recipe = PageRecipe(repeat_words=options.repeat_words, mode=settings["processor_mode"])
    recipe.check_synth_tools()
    if options.threads:
        torch.set_num_threads(options.threads)
    device = torch.device(options.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "options.json").write_text(json.dumps(dataclasses.asdict(options), indent=2, default=str) + "\n")

    model, processor = load_model_files(start)
    model.to(device)
    reference = None
    if options.beta:
        reference, _ = load_model_files(options.model)
        reference.to(device)

    def save_files(folders: tuple[Path, ...], global_step: int) -> None:
        files = run_settings(base, options, run_start + global_step, run_start)
        for folder in folders:
            save_model_files(folder, model, processor.tokenizer, files)

    config = GRPOConfig(
        output_dir=str(out / CHECKPOINTS),
        max_steps=options.steps - run_start,
        per_device_train_batch_size=options.pages * options.generations,
        num_generations=options.generations,
        max_completion_length=options.max_new_tokens,
        temperature=options.temperature,
        learning_rate=options.lr,
        lr_scheduler_type="constant",
        beta=options.beta,
        seed=options.seed,
        logging_steps=1,
        save_steps=options.checkpoint_every,
        save_total_limit=1,
        shuffle_dataset=False,
        activation_checkpointing=False,
        # Trainer writes this into the model's config, which the model files save: keep the model's own.
        use_cache=model.config.use_cache,
        use_cpu=device.type == "cpu",
        bf16=False,
        report_to="none",
        disable_tqdm=True,
        generation_kwargs={"use_mtp": False, LOOP_GUARD_NGRAM_KEY: 0},
    )
    from transformers import PrinterCallback

    from jina_ocr.train.grpo_reward import PageReward

    evaluate = HeldOutEvaluation(model, processor, recipe, options)
    trainer = PageGRPOTrainer(
        model=model,
        reward_funcs=PageReward(processor),
        args=config,
        train_dataset=page_rows(
            recipe, options.seed, 1 + run_start * options.pages, (options.steps - run_start) * options.pages
        ),
        processing_class=processor,
        callbacks=[_callback(out, run_start, evaluate, options.eval_every)],
        reference=reference,
        save_files=lambda folder: save_files((folder, out / "model"), trainer.state.global_step),
    )
    trainer.remove_callback(PrinterCallback)  # TRL's whole log, every step: log.jsonl has what matters
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
    model.eval()
    save_files((out / "model",), trainer.state.global_step)
    return out / "model"
