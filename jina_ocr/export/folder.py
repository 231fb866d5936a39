"""Assemble a Hub folder from the registered export parts and check it before handing it over.

This module is the only code that knows the Hub layout: flat remote-code files at the root (the
Hub's dynamic-module loader copies only ``from .name import x`` siblings), config, weights, and what
each registered part adds.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from jina_ocr.errors import UserError
from jina_ocr.export.registry import ExportContext, registered_parts


class ExportError(UserError):
    """The exported folder would not load on the Hub; the message says which file and why."""


EXPORT_OWNED = ("*.py", "*.json", "*.jinja", "*.safetensors")
"""The kinds of file an export owns, and so replaces whole: remote code, configs and tokenizer, weights.
A stale module, shard index or config left from an earlier export would be shipped with the new ones;
``jina-ocr push`` deletes those the folder lacks from the Hub repo in the same commit."""

EXPORT_FILES = (*EXPORT_OWNED, "README.md", ".gitattributes")
"""What an export writes at the top of its folder, and so all that ``overwrite`` removes: files added by
hand and subfolders stay."""


def check_output(out: str | Path, overwrite: bool = False, flag: str = "overwrite=True") -> None:
    """Refuse an output folder whose writing would fail or lose files: a path at or under a file, a
    non-empty folder without ``overwrite`` (``flag`` is how the messages name it), and with it one that
    no export wrote (no config.json of our model type), which may hold anyone's files."""
    out = Path(out)
    existing = next(path for path in (out, *out.parents) if path.exists())
    if not existing.is_dir():
        where = f"{out} is" if existing == out else f"{out}: {existing} is"
        raise ExportError(f"{where} a file, not a folder; choose another output folder")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ExportError(
                f"{out} exists and is not empty; choose a new folder, or pass {flag} to replace the "
                "export in it"
            )
        if not _holds_export(out):
            raise ExportError(
                f"{out} is not empty and holds no jina-ocr export (no config.json of one); {flag} "
                "replaces only an earlier export, so choose a new or empty folder"
            )


def _holds_export(folder: Path) -> bool:
    """Whether ``folder`` has the config.json of a jina-ocr export."""
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") == JinaOCRConfig.model_type


def export_folder(
    out_dir: str | Path,
    config: Any,
    model: Any | None = None,
    tokenizer: Any | None = None,
    overwrite: bool = False,
    **options: Any,
) -> Path:
    """Write the Hub folder for ``config`` (and ``model``'s weights when given) into ``out_dir``.

    With ``overwrite`` an earlier export there is replaced (:func:`check_output` says which folders may
    be): its files of the kinds an export writes go first, so that no stale module, shard or config of
    it is shipped with the new ones."""
    out = Path(out_dir)
    check_output(out, overwrite)
    if out.exists():
        for pattern in EXPORT_FILES:
            for path in out.glob(pattern):
                if path.is_file():
                    path.unlink()
    out.mkdir(parents=True, exist_ok=True)
    if model is not None:
        config = model.config
    ctx = ExportContext(out_dir=out, config=config, model=model, tokenizer=tokenizer, options=options)
    for _, part in registered_parts():
        part(ctx)
    validate_folder(out)
    return out


def validate_folder(folder: str | Path) -> None:
    """Refuse a folder the Hub could not load: every relative import of a shipped file must be a
    shipped sibling (no subpackages), every ``auto_map`` target must exist, weights must fit the config."""
    folder = Path(folder)
    shipped = {path.stem for path in folder.glob("*.py")}
    for path in sorted(folder.glob("*.py")):
        for module in _relative_imports(path):
            if "." in module or module == "":
                raise ExportError(
                    f"{path.name} imports the subpackage or package '.{module}'; remote code on the Hub "
                    "must import flat siblings only (from .name import x)"
                )
            if module not in shipped:
                raise ExportError(f"{path.name} imports .{module}, which is not shipped in {folder}")
    for config_name in (
        "config.json",
        "processor_config.json",
        "tokenizer_config.json",
        "preprocessor_config.json",
    ):
        config_path = folder / config_name
        if config_path.exists():
            _check_auto_map(folder, config_path, shipped)
    if not (folder / "config.json").exists():
        raise ExportError(f"{folder} has no config.json")
    _check_weights(folder)


def _relative_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level > 1:
                found.append("." * (node.level - 1) + (node.module or ""))
            else:
                found.append(node.module or "")
    return found


def _check_auto_map(folder: Path, config_path: Path, shipped: set[str]) -> None:
    data = json.loads(config_path.read_text(encoding="utf-8"))
    auto_map = dict(data.get("auto_map", {}))
    for task, spec in data.get("custom_pipelines", {}).items():
        auto_map[f"custom pipeline {task}"] = spec.get("impl")
    for auto_class, targets in auto_map.items():
        for target in targets if isinstance(targets, list) else [targets]:
            if target is None:
                continue
            module, _, class_name = target.rpartition(".")
            if module not in shipped:
                raise ExportError(
                    f"{config_path.name}: auto_map {auto_class} points to {module}.py, which is missing"
                )
            source = (folder / f"{module}.py").read_text(encoding="utf-8")
            classes = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)}
            if class_name not in classes:
                raise ExportError(
                    f"{config_path.name}: auto_map {auto_class} points to {target}, but {module}.py "
                    f"defines no class {class_name}"
                )


def _check_weights(folder: Path) -> None:
    """Every tensor of the safetensors files must be a parameter of the config's model, shape for shape."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return
    import torch
    from safetensors import safe_open

    from jina_ocr.model_files import checkpoint_layout
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    config = JinaOCRConfig.from_pretrained(folder)
    with torch.device("meta"):
        state = checkpoint_layout(JinaOCRForConditionalGeneration(config).state_dict())
        expected = {k: tuple(v.shape) for k, v in state.items()}
    found = {}
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                found[key] = tuple(handle.get_slice(key).get_shape())
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong = sorted(k for k in set(found) & set(expected) if found[k] != expected[k])
    if missing or unexpected or wrong:
        details = "; ".join(
            f"{label}: {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''}"
            for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong))
            if keys
        )
        raise ExportError(f"the weights in {folder} do not match its config.json ({details})")
