"""Held-out evaluation during and after training: greedy transcription and character error rate."""

from __future__ import annotations

from rapidfuzz.distance import Levenshtein

from jina_ocr.runtime.batching import BatchDriver, Page


def character_error_rate(predictions: list[str], references: list[str]) -> float:
    """Character edits (insertions, deletions, substitutions) over reference characters, summed over pages.

    Both sides are stripped of surrounding whitespace; the Markdown markup counts like any character,
    so a missed heading marker costs as much as a wrong letter.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    edits = sum(
        Levenshtein.distance(p.strip(), r.strip()) for p, r in zip(predictions, references, strict=True)
    )
    return edits / max(1, sum(len(r.strip()) for r in references))


def transcribe(
    model, processor, images, *, batch_size: int = 8, max_new_tokens: int = 512, **generate_kwargs
):
    """Greedy Markdown of each image, ``batch_size`` pages per ``generate`` call, through the batch
    driver that conversion uses; the first page that fails alone raises."""
    was_training = model.training
    model.eval()
    try:
        driver = BatchDriver(model, processor, max_new_tokens=max_new_tokens, **generate_kwargs)
        texts = []
        for outcome in driver.run([Page(image) for image in images], batch_size):
            if isinstance(outcome, Exception):
                raise outcome
            texts.append(outcome.markdown)
        return texts
    finally:
        model.train(was_training)
