"""Models that ship with the package, stored as weights, config and tokenizer only.

The repository keeps no copy of the remote code next to bundled weights: a stored copy would go stale
as soon as the code changed. :func:`hub_folder` builds the Hub folder the rest of the package loads
(``from_pretrained(folder, trust_remote_code=True)``) from the stored files and the *current* export,
once per combination of code and weights, in a cache folder named by their hash.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from importlib import resources
from pathlib import Path

BUNDLED = Path(__file__).resolve().parent / "jina-ocr-tiny"
"""jina-ocr-tiny: a small demo model trained on JinaOCRSynth pages (see its README.md)."""

CACHE_ENV = "JINA_OCR_CACHE"

CARD_LICENSE = "apache-2.0"


def cache_root() -> Path:
    """``$JINA_OCR_CACHE``, else ``$XDG_CACHE_HOME/jina-ocr``, else ``~/.cache/jina-ocr``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jina-ocr"


def _fingerprint(files: Path) -> str:
    """Hash of everything the Hub folder is made of: the stored model files, the remote code, the
    export code and the Hub assets. Any change to one of them gives a new folder."""
    from jina_ocr.export.parts.code import remote_code_sources

    digest = hashlib.sha256()

    def add(name: str, data: bytes) -> None:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())

    for path in sorted(p for p in files.iterdir() if p.is_file()):
        add(f"model/{path.name}", path.read_bytes())
    for name, source in remote_code_sources().items():
        add(f"code/{name}", source.encode())
    for package in ("jina_ocr.export", "jina_ocr.export.parts", "jina_ocr.hub_assets"):
        for entry in sorted(resources.files(package).iterdir(), key=lambda e: e.name):
            if entry.is_file() and not entry.name.endswith(".pyc"):
                add(f"{package}/{entry.name}", entry.read_bytes())
    return digest.hexdigest()[:16]


def hub_folder(files: str | os.PathLike = BUNDLED) -> Path:
    """The Hub folder of the model files in ``files``, exported with the current code (cached).

    The export is written next to its final place and renamed into it, so concurrent first uses never
    see a half-written folder.
    """
    from jina_ocr.export.folder import export_folder
    from jina_ocr.train.model_files import load_model_files, load_settings

    files = Path(files)
    if not (files / "config.json").is_file():
        raise FileNotFoundError(f"{files} holds no model files (no config.json)")
    target = cache_root() / "models" / f"{files.name}-{_fingerprint(files)}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    model, processor = load_model_files(files)
    settings = load_settings(files)
    staging = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    export_folder(
        staging,
        config=model.config,
        model=model,
        tokenizer=processor.tokenizer,
        overwrite=True,
        processor_mode=settings["processor_mode"],
        card_license=settings.get("card_license", CARD_LICENSE),
        card_title=settings.get("card_title", files.name),
        card_notice=settings.get("card_notice", ""),
    )
    try:
        staging.rename(target)
    except OSError:  # another process finished first; its folder is the same
        shutil.rmtree(staging, ignore_errors=True)
    return target
