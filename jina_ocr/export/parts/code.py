"""The remote code, flattened: root modules and ``generation/`` become sibling files of the Hub folder.

The Hub's dynamic-module loader only follows ``from .name import x`` imports of sibling files, so
``from .generation.fastmtp import x`` is rewritten to ``from .fastmtp import x`` and the generation
modules' ``from ..configuration_jina_ocr import x`` to ``from .configuration_jina_ocr import x``.
"""

from __future__ import annotations

import re
from importlib import resources

from jina_ocr.export.registry import ExportContext, contribution

AUTO_CLASSES = {
    "AutoConfig": "configuration_jina_ocr.JinaOCRConfig",
    "AutoModel": "modeling_jina_ocr.JinaOCRForConditionalGeneration",
    "AutoModelForCausalLM": "modeling_jina_ocr.JinaOCRForConditionalGeneration",
    "AutoModelForImageTextToText": "modeling_jina_ocr.JinaOCRForConditionalGeneration",
}

_SUBPACKAGE_IMPORT = re.compile(r"^(\s*from )\.generation\.(\w+)( import )", re.MULTILINE)
_PARENT_IMPORT = re.compile(r"^(\s*from )\.\.(\w+)( import )", re.MULTILINE)


def remote_code_sources() -> dict[str, str]:
    """File name -> flattened source of every module that ships to the Hub."""
    root = resources.files("jina_ocr.remote_code")
    sources: dict[str, str] = {}
    for folder, rewrite in ((root, _SUBPACKAGE_IMPORT), (root / "generation", _PARENT_IMPORT)):
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".py") or entry.name == "__init__.py":
                continue
            if entry.name in sources:
                raise RuntimeError(f"two remote-code modules would both ship as {entry.name}")
            sources[entry.name] = rewrite.sub(r"\1.\2\3", entry.read_text(encoding="utf-8"))
    return sources


@contribution("code", order=20)
def write_code(ctx: ExportContext) -> None:
    for name, source in remote_code_sources().items():
        ctx.path(name).write_text(source, encoding="utf-8")
    ctx.config.auto_map = {**(getattr(ctx.config, "auto_map", None) or {}), **AUTO_CLASSES}
    ctx.config.architectures = ["JinaOCRForConditionalGeneration"]
