"""Ship a trained model as the package's bundled jina-ocr-tiny, only when it reads better than the one there.

The bundled folder holds the model files (:mod:`jina_ocr.model_files`) with the weights in
bfloat16, its model card (``README.md``) and, in its settings, the held-out character error rate that
earned it its place. A candidate replaces the bundled model only when its CER on the same held-out pages
(those of the later of the two models' curriculum stages, seed ``GATE_SEED``) is at least one point
lower: the bundle is what ``jina-ocr convert`` uses with no ``--model``, and what an interrupted run
resumes from (``train sft --resume-from``), so it must never get worse.

The gate reads each page twice: as printed, and as a user's copy of it looks (degraded as training
draws it, :mod:`jina_ocr.train.degrade`). A candidate must read all of them at least one point better,
and the clean ones no more than ``MAX_CLEAN_LOSS`` worse: robustness bought with clean pages is no gain.

The gate reads pages that no training evaluation reads. Runs are watched, stopped and cooled down on
their evaluations' pages (seed 1, ``SFTOptions.eval_seed``), so a model picked there reads those pages
better than others: the step-40,334 bundle read 32 of them at CER 0.010 and this gate's 200 pages at
0.035. A gate on them would keep such a model against one that reads better everywhere else.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from jina_ocr.errors import UserError
from jina_ocr.model_files import SETTINGS, WEIGHTS, load_model_files, load_settings, save_model_files
from jina_ocr.train.drills import STAGES
from jina_ocr.train.evaluate import character_error_rate, transcribe
from jina_ocr.train.recipe import PageRecipe

MAX_BUNDLE_BYTES = 40 * 1024 * 1024
GATE_SEED = 3
GATE_PAGES = 200
MIN_GAIN = 0.01
MAX_CLEAN_LOSS = 0.002
CARD_TITLE = "jina-ocr-tiny"
CARD_NOTICE = (
    "**A small demo model, not jina-ocr-v1**: the jina-ocr-v1 architecture at a few million parameters, "
    "trained from scratch on synthetic printed pages by the jina-ocr package (`jina-ocr train`). Its "
    "weights are Apache-2.0, like the code. What it reads, and the commands that made it, are in the "
    "model card beside its files in the package (`jina_ocr/models/jina-ocr-tiny/README.md`)."
)


class NotBetterError(Exception):
    """The candidate does not read at least one point better than the bundled model: nothing changed."""


def _stage(settings: dict) -> int:
    return STAGES.index(settings.get("progress", {}).get("stage", STAGES[-1]))


def held_out_cer(folder: Path, stage: int, pages: int = GATE_PAGES) -> dict[str, float]:
    """The model files' CER on ``pages`` held-out pages of ``stage`` (seed ``GATE_SEED``): on the clean
    pages, on the same pages degraded, and on both together.

    Transcriptions stop at twice the longest reference, where a page already counts at least as many
    edits as its reference has characters: the cut saves time only on pages that are wrong anyway,
    for both models alike.
    """
    model, processor = load_model_files(folder)
    recipe = PageRecipe()
    clean = recipe.held_out_pages(stage, GATE_SEED, pages)
    degraded = recipe.held_out_pages(stage, GATE_SEED, pages, degradation="mixed")
    longest = max(len(processor.tokenizer.encode(p.markdown, add_special_tokens=False)) for p in clean)
    predictions = transcribe(
        model, processor, [p.image for p in clean + degraded], max_new_tokens=2 * longest + 1
    )
    references = [p.markdown for p in clean + degraded]
    return {
        "cer": round(character_error_rate(predictions, references), 4),
        "clean_cer": round(character_error_rate(predictions[:pages], references[:pages]), 4),
        "degraded_cer": round(character_error_rate(predictions[pages:], references[pages:]), 4),
    }


def bundle(candidate: Path, into: Path, card: Path, pages: int = GATE_PAGES) -> dict:
    """Copy ``candidate``'s model files into ``into`` (weights in bf16) with ``card`` as the model card,
    if it beats the model already there; returns the comparison. Raises :class:`NotBetterError` otherwise."""
    candidate, into = Path(candidate), Path(into)
    if not card.is_file():
        raise UserError(f"--card {card}: no such file")
    settings = load_settings(candidate)
    stage = _stage(settings)
    result = {"stage": STAGES[stage], "pages": pages, "seed": GATE_SEED}
    if (into / SETTINGS).is_file():
        stage = max(stage, _stage(load_settings(into)))
        result["stage"] = STAGES[stage]
        result["bundled"] = held_out_cer(into, stage, pages)
    result["candidate"] = ours = held_out_cer(candidate, stage, pages)
    if "bundled" in result:
        theirs = result["bundled"]
        if ours["cer"] > theirs["cer"] - MIN_GAIN:
            raise NotBetterError(
                f"{candidate} reads {STAGES[stage]} pages, clean and degraded, with CER {ours['cer']}, not one "
                f"point better than the bundled model's {theirs['cer']}: the bundle stays as it is"
            )
        if ours["clean_cer"] > theirs["clean_cer"] + MAX_CLEAN_LOSS:
            raise NotBetterError(
                f"{candidate} reads clean {STAGES[stage]} pages with CER {ours['clean_cer']}, worse than the "
                f"bundled model's {theirs['clean_cer']} by more than {MAX_CLEAN_LOSS}: the bundle stays as it is"
            )
    model, processor = load_model_files(candidate)
    settings["bundle"] = result
    settings["card_title"], settings["card_notice"] = CARD_TITLE, CARD_NOTICE
    staging = into.with_name(into.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    save_model_files(staging, model.to(torch.bfloat16), processor.tokenizer, settings)
    weights = staging / WEIGHTS
    if weights.stat().st_size > MAX_BUNDLE_BYTES:
        shutil.rmtree(staging)
        raise UserError(
            f"{candidate}: {weights.stat().st_size / 2**20:.1f} MB of weights is over the 40 MB bundle limit"
        )
    shutil.copyfile(card, staging / "README.md")
    shutil.rmtree(into, ignore_errors=True)
    staging.rename(into)
    return result
