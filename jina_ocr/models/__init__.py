"""Models that ship with the package, stored as model files: weights, config and tokenizer only.

The repository keeps no copy of the remote code next to bundled weights (a stored copy would go stale
as soon as the code changed): :mod:`jina_ocr.loading` builds the model from these files with the
installed classes, and ``jina-ocr export`` writes a Hub folder from them.
"""

from __future__ import annotations

from pathlib import Path

BUNDLED = Path(__file__).resolve().parent / "jina-ocr-tiny"
"""jina-ocr-tiny: a small demo model trained on JinaOCRSynth pages (see its README.md)."""
