"""The one loader: a model folder in, our model and processor out, built from the installed classes.

Every door of the installed tools (``jina_ocr.convert``, ``jina-ocr convert`` and ``serve``, the
benchmarks) loads through :func:`load`, so a conversion runs one copy of the model code: the modules of
this installation, never a second copy imported through ``trust_remote_code`` from a folder that
another release may have written. ``trust_remote_code`` is for users of plain Transformers.

It takes either layout this package writes:

- model files (weights, config, tokenizer and ``jina_ocr_model.json``), as training writes them and
  as jina-ocr-tiny ships inside the package (:mod:`jina_ocr.model_files`);
- a Hub folder written by ``jina-ocr export`` (the weights in the checkpoint's per-expert layout, the
  processor and generation configs beside them).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

from jina_ocr.errors import UserError
from jina_ocr.model_files import SETTINGS, load_model_files, load_tokenizer
from jina_ocr.models import BUNDLED as BUNDLED_MODEL

MODEL_ENV = "JINA_OCR_MODEL"

BUNDLED_NOTICE = (
    "no model given: using the bundled jina-ocr-tiny, a small demo model trained on synthetic printed "
    "pages, not jina-ocr-v1 (pass --model or set $JINA_OCR_MODEL for a real checkpoint)"
)
_said: set[str] = set()


def _say_once(message: str) -> None:
    """Print ``message`` on stderr the first time this process asks for it."""
    if message not in _said:
        _said.add(message)
        print(message, file=sys.stderr)


def resolve_model(model: str | os.PathLike | None) -> Path:
    """The model folder to load: ``model`` if given, else ``$JINA_OCR_MODEL``, else the bundled model.

    An explicit choice wins over the environment, and the environment over the built-in default,
    as users of environment variables expect.
    """
    if model is not None:
        folder, origin = Path(model), "--model"
    elif os.environ.get(MODEL_ENV):
        folder, origin = Path(os.environ[MODEL_ENV]), f"${MODEL_ENV}"
    elif (BUNDLED_MODEL / "config.json").is_file():
        _say_once(BUNDLED_NOTICE)
        return BUNDLED_MODEL
    else:
        raise UserError(
            "no model given and none is bundled with this installation: pass --model DIR (or model=...) "
            f"naming an exported jina-ocr model folder, or set {MODEL_ENV}. To try the tools without "
            "real weights, `jina-ocr export --random --preset tiny DIR` writes a tiny random-weight "
            "model; its output is meaningless text."
        )
    if not folder.exists():
        raise UserError(f"{origin} {folder}: no such folder")
    if not (folder / "config.json").is_file():
        raise UserError(f"{origin} {folder}: not a model folder (no config.json in it)")
    _check_model_type(folder, origin)
    return folder


def _check_model_type(folder: Path, origin: str) -> None:
    """Refuse another model's folder here, not as a traceback from deep inside Transformers."""
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UserError(f"{origin} {folder}: config.json cannot be read ({error})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type != JinaOCRConfig.model_type:
        raise UserError(
            f"{origin} {folder}: config.json is for model type {model_type!r}, not a jina-ocr model "
            f"({JinaOCRConfig.model_type!r}); a DeepSeek-OCR or jina-ocr-v1 checkpoint is converted with "
            "`jina-ocr export --from`"
        )


def resolve_device(device: str | None):
    """A torch device: the given one, else CUDA when available, else Apple MPS when available, else CPU."""
    import torch

    if device:
        try:
            chosen = torch.device(device)
        except RuntimeError as error:
            raise UserError(f"unknown device {device!r}: {error}") from None
        _check_available(chosen, device)
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _check_available(device, name: str) -> None:
    """A device this machine has: moving a model to a missing one fails deep inside torch."""
    import torch

    if device.type == "mps":
        backend, available = torch.mps, torch.backends.mps.is_available
    else:
        backend = getattr(torch, device.type, None)  # torch.cuda, torch.xpu, ...
        available = getattr(backend, "is_available", None)
    if available is not None and not available():
        raise UserError(
            f"device {name!r}: this machine has no {device.type.upper()} device (try --device cpu)"
        )
    count = getattr(backend, "device_count", None)
    if device.index is not None and count is not None and device.index >= count():
        kind = device.type.upper()
        raise UserError(f"device {name!r}: this machine has {count()} {kind} device(s), numbered from 0")


_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}


def resolve_dtype(dtype, device):
    """A torch dtype: the given one, else bfloat16 on accelerators (as the weights ship) and float32 on CPU."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if dtype not in _DTYPES:
        raise UserError(f"unknown dtype {dtype!r}: choose one of auto, {', '.join(_DTYPES)}")
    return getattr(torch, _DTYPES[dtype])


def load(model: str | os.PathLike | None = None, *, device=None, dtype=None) -> tuple[Any, Any]:
    """``(model, processor)`` for ``model`` (a folder, see :func:`resolve_model`) on ``device`` in ``dtype``.

    ``device`` None picks CUDA, else Apple MPS, else the CPU; ``dtype`` None picks bfloat16 on
    accelerators and float32 on the CPU. The result is cached: converting file after file loads the
    weights once.
    """
    folder = resolve_model(model).resolve()
    device = resolve_device(device)
    return _load(folder, device, resolve_dtype(dtype, device))


@functools.lru_cache(maxsize=1)
def _load(folder: Path, device, dtype) -> tuple[Any, Any]:
    if (folder / SETTINGS).is_file():
        model, processor = load_model_files(folder, dtype)
    else:
        from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

        model = JinaOCRForConditionalGeneration.from_pretrained(str(folder), dtype=dtype)
        processor = _exported_processor(folder)
    return model.to(device).eval(), processor


def _exported_processor(folder: Path):
    """The processor of an exported folder, built from its settings with the installed classes (the
    library's ``from_pretrained`` would resolve the folder's ``auto_map`` and ask for remote code)."""
    from jina_ocr.remote_code.processing_jina_ocr import JinaOCRImageProcessor, JinaOCRProcessor

    path = folder / "processor_config.json"
    if not path.is_file():
        raise UserError(f"{folder}: no processor_config.json; export the model with its tokenizer")
    settings = json.loads(path.read_text(encoding="utf-8"))
    image = {
        key: value
        for key, value in settings.get("image_processor", {}).items()
        if key not in ("auto_map", "image_processor_type", "processor_class")
    }
    return JinaOCRProcessor(
        image_processor=JinaOCRImageProcessor(**image),
        tokenizer=load_tokenizer(folder),
        prompt_style=settings.get("prompt_style", "jina"),
    )
