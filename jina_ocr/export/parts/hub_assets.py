"""The non-code files of the Hub repository: the model card and .gitattributes (LFS rules).

The card's front matter and text are filled per export: jina-ocr-v1's own weights are CC BY-NC 4.0,
while random-weight and self-trained exports carry the licence and the notice their maker passes
(``card_license``, ``card_title``, ``card_notice`` in the export options).
"""

from __future__ import annotations

from importlib import resources

from jina_ocr.export.registry import ExportContext, contribution

DEFAULT_CARD = {
    "__LICENSE__": "cc-by-nc-4.0",
    "__TITLE__": "jina-ocr-v1",
    "__NOTICE__": "",
    "__REPO__": "jinaai/jina-ocr-v1",
}


@contribution("hub_assets", order=70)
def write_hub_assets(ctx: ExportContext) -> None:
    assets = resources.files("jina_ocr.hub_assets")
    card = assets.joinpath("README.md").read_text(encoding="utf-8")
    values = {
        **DEFAULT_CARD,
        "__LICENSE__": ctx.options.get("card_license", DEFAULT_CARD["__LICENSE__"]),
        "__TITLE__": ctx.options.get("card_title", DEFAULT_CARD["__TITLE__"]),
        "__NOTICE__": ctx.options.get("card_notice", DEFAULT_CARD["__NOTICE__"]),
        "__REPO__": ctx.options.get("card_repo", DEFAULT_CARD["__REPO__"]),
    }
    for placeholder, value in values.items():
        card = card.replace(placeholder, value)
    ctx.path("README.md").write_text(card, encoding="utf-8")
    ctx.path(".gitattributes").write_text(
        assets.joinpath(".gitattributes").read_text(encoding="utf-8"), encoding="utf-8"
    )
