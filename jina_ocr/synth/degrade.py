"""Scan-like degradations of a rendered page image, for robustness training.

Only the image changes: the ground truth is the same text, which is the point (the model must read
through paper tint, sensor noise, a slightly skewed scan, blur and JPEG blocking). Each effect is
drawn from a seeded generator, so degraded pages are as reproducible as clean ones.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter


@dataclass(frozen=True)
class Degradation:
    """Which effects to apply and how strong they may get; each is drawn per page up to its maximum."""

    noise: float = 0.04  # std of Gaussian noise, as a fraction of full scale
    blur: float = 1.0  # max Gaussian blur radius in pixels
    rotation: float = 2.5  # max skew in degrees, either direction
    jpeg: tuple[int, int] = (35, 85)  # JPEG quality range; (0, 0) for no JPEG round trip


def degrade(image: Image.Image, seed: int, options: Degradation = Degradation()) -> Image.Image:
    """Return a degraded RGB copy of ``image``: tint and contrast, skew, blur, noise, JPEG, in scan order."""
    rng = np.random.default_rng(seed)
    pixels = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    # Paper tint and a weaker black: scanners rarely give pure white and pure black.
    tint = 1.0 - rng.uniform(0.0, 0.08, size=3)
    floor = rng.uniform(0.0, 0.15)
    pixels = floor + (1.0 - floor) * pixels * tint
    out = Image.fromarray(np.clip(pixels * 255.0 + 0.5, 0, 255).astype(np.uint8))
    if options.rotation > 0:
        angle = float(rng.uniform(-options.rotation, options.rotation))
        fill = tuple(int(255 * (floor + (1.0 - floor) * t)) for t in tint)
        out = out.rotate(angle, resample=Image.Resampling.BICUBIC, expand=False, fillcolor=fill)
    if options.blur > 0:
        out = out.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.0, options.blur))))
    if options.noise > 0:
        pixels = np.asarray(out, dtype=np.float32)
        pixels += rng.normal(0.0, rng.uniform(0.0, options.noise) * 255.0, size=pixels.shape[:2])[..., None]
        specks = rng.random(pixels.shape[:2]) < rng.uniform(0.0, 0.0015)
        pixels[specks] = rng.uniform(0, 90)
        out = Image.fromarray(np.clip(pixels + 0.5, 0, 255).astype(np.uint8))
    low, high = options.jpeg
    if high > 0:
        buffer = io.BytesIO()
        out.save(buffer, "JPEG", quality=int(rng.integers(low, high + 1)))
        out = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    return out
