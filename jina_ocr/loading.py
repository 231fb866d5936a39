"""The one loader: a model in, our model and processor out, built from the installed classes.

Every door of the installed tools (``jina_ocr.load`` and ``jina_ocr.convert``, ``jina-ocr convert`` and
``serve``, ``jina-ocr export --from``, the benchmarks) loads through this module, the only code that
knows checkpoint layouts. A conversion runs one copy of the model code, the modules of this
installation, never a second copy imported through ``trust_remote_code`` from a folder that another
release may have written (``trust_remote_code`` is for users of plain Transformers). It takes:

- a Hub model id (``jinaai/jina-ocr-v1``, with a ``revision``), downloaded by ``huggingface_hub`` into
  its cache (``HF_ENDPOINT``, ``HF_HUB_OFFLINE``, ``HF_TOKEN`` and a stored login apply); only weights,
  configs and tokenizer files are fetched, never a repository's code;
- a folder in the released layout: jinaai/jina-ocr-v1 or deepseek-ai/DeepSeek-OCR as published (their
  ``deepseek_vl_v2`` config, per-expert safetensors, with or without the head's shared copies);
- a folder written by ``jina-ocr export`` (a Hub folder of this package);
- model files (weights, config, tokenizer and ``jina_ocr_model.json``), as training writes them and as
  jina-ocr-tiny ships inside the package (:mod:`jina_ocr.model_files`).

Anything else is refused in one line naming what was found and what is accepted.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jina_ocr.errors import UserError
from jina_ocr.generation_defaults import build_generation_config
from jina_ocr.model_files import SETTINGS, build_processor, load_model_files, load_settings, load_tokenizer
from jina_ocr.models import BUNDLED as BUNDLED_MODEL
from jina_ocr.quantization import Quantization, quantization_of, quantize_model
from jina_ocr.quantization import parse as parse_quantization

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


def resolve_model(model: str | os.PathLike | None, revision: str | None = None) -> Path:
    """The local folder to load: ``model`` if given (a folder, else a Hub id, downloaded), else
    ``$JINA_OCR_MODEL``, else the bundled model.

    An explicit choice wins over the environment, and the environment over the built-in default, as
    users of environment variables expect. The folder's layout is checked here (:func:`layout`).
    """
    if model is not None:
        name, origin = os.fspath(model), "--model"
    elif os.environ.get(MODEL_ENV):
        name, origin = os.environ[MODEL_ENV], f"${MODEL_ENV}"
    elif (BUNDLED_MODEL / "config.json").is_file():
        _say_once(BUNDLED_NOTICE)
        return BUNDLED_MODEL
    else:
        raise UserError(
            "no model given and none is bundled with this installation: pass --model (a folder or a Hub "
            f"id such as jinaai/jina-ocr-v1) or model=..., or set {MODEL_ENV}. To try the tools without "
            "real weights, `jina-ocr export --random --preset tiny DIR` writes a tiny random-weight "
            "model; its output is meaningless text."
        )
    folder = local_folder(name, revision, origin)
    layout(folder, origin)
    return folder


def local_folder(name: str | os.PathLike, revision: str | None = None, origin: str = "--model") -> Path:
    """``name`` itself when it is a folder, else the local snapshot of the Hub repository it names
    (downloaded unless cached); ``origin`` is how error messages name the option."""
    folder = Path(name)
    if folder.exists():
        if revision is not None:
            raise UserError(f"{origin} {name}: a revision applies to a Hub id, and this is a local folder")
        return folder
    if not HUB_ID.fullmatch(os.fspath(name)):
        raise UserError(f"{origin} {name}: no such folder (nor a Hub id, which reads ORG/NAME)")
    return _download(os.fspath(name), revision, origin)


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
"""What a Hub model id looks like (``ORG/NAME``); a name that is neither this nor a folder is refused."""

HUB_FILES = ("*.json", "*.safetensors", "*.jinja", "tokenizer.model")
"""What is downloaded of a Hub repository: weights, configs and tokenizer, never its code."""


def _download(repo_id: str, revision: str | None, origin: str) -> Path:
    """The local snapshot of a Hub repository: from the cache when it is there, else downloaded."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{origin} {repo_id}"
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=list(HUB_FILES)))
    except GatedRepoError:
        raise UserError(
            f"{where}: the Hub repository is gated; accept its terms on the Hub and log in "
            "(`hf auth login` or $HF_TOKEN)"
        ) from None
    except RepositoryNotFoundError:
        raise UserError(
            f"{where}: no such folder, and no model repository of that name on the Hub "
            f"({constants.ENDPOINT}) that this machine may read (a private one needs `hf auth login` "
            "or $HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise UserError(f"{where}: the Hub repository has no revision {revision!r}") from None
    except LocalEntryNotFoundError:
        raise UserError(
            f"{where}: not in the local Hub cache, and the Hub cannot be reached (HF_HUB_OFFLINE is set, "
            "or no connection); download it once online"
        ) from None
    except (HfHubHTTPError, OSError) as error:
        raise UserError(f"{where}: the Hub at {constants.ENDPOINT} failed: {error}") from None


RELEASED_TYPE = "deepseek_vl_v2"
"""The ``model_type`` of jinaai/jina-ocr-v1 and deepseek-ai/DeepSeek-OCR as published."""

ACCEPTED = (
    "a jina-ocr export, model files written by jina-ocr train, or jina-ocr-v1 / DeepSeek-OCR as released "
    f"(model_type {RELEASED_TYPE!r})"
)


def layout(folder: Path, origin: str = "--model") -> str:
    """``"model files"``, ``"exported"`` or ``"released"``: how ``folder`` stores its model. Anything
    else (no config, another model's config, no weights) is refused in one line."""
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig

    where = f"{origin} {folder}"
    if not (folder / "config.json").is_file():
        raise UserError(f"{where}: not a model folder (no config.json in it); accepted: {ACCEPTED}")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UserError(f"{where}: config.json cannot be read ({error})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if (folder / SETTINGS).is_file():
        found = "model files"
    elif model_type == JinaOCRConfig.model_type:
        found = "exported"
    elif model_type == RELEASED_TYPE:
        found = "released"
    else:
        raise UserError(f"{where}: config.json is for model type {model_type!r}; accepted: {ACCEPTED}")
    if not any(folder.glob("*.safetensors")):
        raise UserError(f"{where}: no .safetensors weights beside its config.json")
    return found


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


def load(
    model: str | os.PathLike | None = None,
    *,
    revision: str | None = None,
    device=None,
    dtype=None,
    quantize=None,
) -> tuple[Any, Any]:
    """``(model, processor)`` for ``model`` (a folder or a Hub id, see :func:`resolve_model`) on ``device``
    in ``dtype``.

    ``revision`` picks a branch, tag or commit of a Hub id; ``device`` None picks CUDA, else Apple MPS,
    else the CPU; ``dtype`` None picks bfloat16 on accelerators and float32 on the CPU. ``quantize``
    ("int8", "int4" or a :class:`jina_ocr.quantization.Quantization`) stores the decoder's weights, its
    experts included, in 8 or 4 bits (:mod:`jina_ocr.quantization`); a quantised model computes in
    bfloat16 unless ``dtype`` says otherwise, and a folder saved quantised loads quantised without it.
    The result is cached: converting file after file loads the weights once.
    """
    quantization = parse_quantization(quantize)
    folder = resolve_model(model, revision).resolve()
    device = resolve_device(device)
    if dtype in (None, "auto") and (quantization is not None or stored_quantization(folder) is not None):
        dtype = "bfloat16"  # the CPU's int8 and int4 kernels are an order of magnitude slower in float32
    return _load(folder, device, resolve_dtype(dtype, device), quantization)


def stored_quantization(folder: Path) -> Quantization | None:
    """The quantisation a folder of model files was saved with, if any."""
    if not (folder / SETTINGS).is_file() or "quantization" not in (settings := load_settings(folder)):
        return None
    return Quantization.from_settings(settings["quantization"])


@functools.lru_cache(maxsize=1)
def _load(folder: Path, device, dtype, quantization: Quantization | None = None) -> tuple[Any, Any]:
    found = layout(folder)
    if found == "model files":
        model, processor = load_model_files(folder, dtype)
    elif found == "exported":
        from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

        model = JinaOCRForConditionalGeneration.from_pretrained(str(folder), dtype=dtype)
        processor = _exported_processor(folder)
    else:
        # Loaded in the dtype asked for: a bfloat16 checkpoint converted after loading would hold both
        # copies at once (20 GB for jina-ocr-v1 in float32 on a CPU).
        released = load_released(folder, dtype=dtype)
        if released.tokenizer is None:
            raise UserError(f"{folder}: no tokenizer.json beside the weights")
        model = released.model
        processor = build_processor(
            released.tokenizer, released.mode, released.config.pixels_per_visual_token
        )
        model.generation_config = build_generation_config(
            released.config, released.tokenizer, mode=released.mode
        )
    stored = quantization_of(model)
    if stored is not None and quantization is not None and quantization.scheme != stored.scheme:
        raise UserError(
            f"{folder} is saved quantised in {stored.scheme}: load it without --quantize or with {stored.scheme}"
        )
    if stored is None and quantization is not None:
        quantize_model(model, quantization)  # on the CPU, where the weights were loaded, before moving
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


@dataclass
class Released:
    """What a released-layout folder holds, read into our classes."""

    config: Any
    model: Any | None
    tokenizer: Any | None
    mode: str
    """The image processor's resolution mode, from the folder's ``processor_config.json``."""
    notes: list[str] = field(default_factory=list)


_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def stored_dtype(folder: Path):
    """The floating-point dtype the folder's safetensors store their weights in. Mixed files give the
    widest of their dtypes, into which every stored value converts exactly."""
    import torch
    from safetensors import safe_open

    found = set()
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                name = _SAFETENSORS_DTYPES.get(handle.get_slice(key).get_dtype())
                if name is not None:
                    found.add(getattr(torch, name))
    if not found:
        raise UserError(f"the weights in {folder} hold no floating-point tensors")
    if found == {torch.bfloat16, torch.float16}:  # neither holds the other's values exactly
        return torch.float32
    return max(found, key=lambda dtype: dtype.itemsize)


def load_released(folder: str | Path, weights: bool = True, dtype=None) -> Released:
    """A folder of the released layout (or one of ours): its config as shipped (nested DeepSeek-OCR
    blocks are read), its weights when asked for (in ``dtype``, else in the dtype they are stored in,
    as an export keeps them), and its tokenizer when it has one.

    The released tensor names are our module names (the head's shared copies, where a revision carries
    them, are loaded and dropped), so nothing is renamed; a weight that does not fit is refused.
    """
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    folder = Path(folder)
    path = folder / "config.json"
    if not path.is_file():
        raise UserError(f"{folder} has no config.json; point at a checkpoint folder")
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: cannot be read as JSON ({error})") from None
    if not isinstance(settings, dict):
        raise UserError(f"{path}: holds no JSON object of settings")
    # The auto_map names the folder's own remote code (an export's, or DeepSeek-OCR's), which the
    # installed classes replace: kept, it would make Transformers offer to run that code.
    settings.pop("auto_map", None)
    # from_dict rather than from_pretrained: the released model_type ("deepseek_vl_v2") is expected here.
    config = JinaOCRConfig.from_dict(settings)
    notes = []
    if not config.num_nextn_predict_layers:
        notes.append(f"{folder} has no FastMTP head: it decodes with plain greedy (FastMTP off)")
    model = None
    if weights:
        if not any(folder.glob("*.safetensors")):
            raise UserError(
                f"{folder} has no .safetensors weights; pass --no-weights to convert the config only"
            )
        # Not dtype="auto": that follows config.json's dtype, which may disagree with the stored tensors
        # (float32 weights under a config that says bfloat16 would be rounded silently).
        model, info = JinaOCRForConditionalGeneration.from_pretrained(
            folder,
            config=config,
            dtype=dtype or stored_dtype(folder),
            output_loading_info=True,
            trust_remote_code=False,
        )
        if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
            raise UserError(f"the weights in {folder} do not fit the model: {info}")
    # The tokenizer.json as it is: the released tokenizer_config.json names LlamaTokenizerFast, which some
    # Transformers releases rebuild with a SentencePiece pre-tokenizer that drops a byte-level
    # vocabulary's spaces.
    tokenizer = load_tokenizer(folder) if (folder / "tokenizer.json").is_file() else None
    return Released(config=config, model=model, tokenizer=tokenizer, mode=released_mode(folder), notes=notes)


def released_mode(folder: Path) -> str:
    """The resolution mode a released ``processor_config.json`` describes: ``crop_mode`` is Gundam (a
    1024 px view plus 640 px tiles); without it, the mode of the ``base_size`` view. Gundam when the
    folder has none (DeepSeek-OCR's default)."""
    from jina_ocr.remote_code.processing_jina_ocr import MODES

    path = folder / "processor_config.json"
    settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if settings.get("crop_mode", True):
        return "gundam"
    for name, (size, tiled) in MODES.items():
        if size == settings.get("base_size") and not tiled:
            return name
    raise UserError(f"{path}: no resolution mode has a {settings.get('base_size')} px view without tiles")
