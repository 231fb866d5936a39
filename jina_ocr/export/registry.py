"""The registry through which each part of the package contributes files to the Hub folder.

A part is a function ``part(ctx: ExportContext) -> None`` decorated with :func:`contribution`
in a module of :mod:`jina_ocr.export.parts`; the processor, the generation config, the pipeline
and the hub assets each own one module there, so none of them edits the exporter itself.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ExportContext:
    """What a part may read and where it writes.

    ``model`` is None when the export writes no weights (``--no-weights``); ``tokenizer`` is None
    when the source has none. ``config`` is always set and is the config that will be saved last,
    so parts may add keys to it (``auto_map`` entries, ``custom_pipelines``).
    """

    out_dir: Path
    config: Any
    model: Any | None = None
    tokenizer: Any | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        return self.out_dir / name


Part = Callable[[ExportContext], None]
_PARTS: dict[str, tuple[int, Part]] = {}


def contribution(name: str, order: int = 50) -> Callable[[Part], Part]:
    """Register ``part`` under ``name``; parts run in ascending ``order``.

    Weights are written at 10 (``save_pretrained`` also writes a default generation config), code at
    20, and the config is saved last at 90, so parts in between may overwrite files and add config keys.
    """

    def register(part: Part) -> Part:
        _PARTS[name] = (order, part)
        return part

    return register


def registered_parts() -> list[tuple[str, Part]]:
    """All parts, in the order they run; importing the parts package registers them."""
    from jina_ocr.export import parts

    for info in pkgutil.iter_modules(parts.__path__):
        importlib.import_module(f"{parts.__name__}.{info.name}")
    return [
        (name, part) for name, (_, part) in sorted(_PARTS.items(), key=lambda item: (item[1][0], item[0]))
    ]
