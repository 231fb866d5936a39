"""Held-out evaluation during and after training: greedy transcription and character error rate."""

from __future__ import annotations

import torch
from rapidfuzz.distance import Levenshtein


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
    """Greedy Markdown of each image, ``batch_size`` pages per ``generate`` call (left-padded batches)."""
    was_training = model.training
    model.eval()
    texts: list[str] = []
    try:
        for start in range(0, len(images), batch_size):
            chunk = list(images[start : start + batch_size])
            inputs = processor.prepare_ocr_inputs(chunk, device=model.device, dtype=model.dtype)
            with torch.inference_mode():
                out = model.generate(
                    **inputs, max_new_tokens=max_new_tokens, do_sample=False, **generate_kwargs
                )
            decoded = processor.decode_ocr(out, inputs["input_ids"])
            texts.extend([decoded] if len(chunk) == 1 else decoded)
    finally:
        model.train(was_training)
    return texts
