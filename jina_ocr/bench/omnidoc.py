"""OmniDocBench-style page metrics: text edit distance, table TEDS / TEDS-S, formula edit distance.

OmniDocBench scores a page by splitting it into text, tables and formulas and comparing each part
with its own metric:

- text: Levenshtein distance normalised by the longer string (0 is perfect);
- tables: TEDS, ``1 - tree edit distance / max(node count)`` over the HTML table trees, where
  renaming a cell costs the normalised edit distance of its contents (TEDS-S ignores contents);
- formulas: OmniDocBench uses CDM, which needs a LaTeX toolchain that draws character bounding
  boxes; we do not ship one, so the formula term here is the normalised edit distance of the
  canonical LaTeX (:mod:`jina_ocr.bench.latex`) and is always labelled as such.

The overall score is ``((1 - text ED) * 100 + TEDS * 100 + (1 - formula ED) * 100) / 3``, with the
formula term edit-distance based (``formula_term: "edit-distance"``), averaged over the terms the
page has (a page without tables has no TEDS term).
"""

from __future__ import annotations

from dataclasses import dataclass

from apted import APTED, Config
from rapidfuzz.distance import Levenshtein

from jina_ocr.bench import latex
from jina_ocr.bench.olmocr import normalize_text
from jina_ocr.bench.tables import Node, parse_html, span_value, split_tables

FORMULA_TERM = "edit-distance"


def text_edit_distance(prediction: str, reference: str) -> float:
    """Levenshtein distance / length of the longer string; 0.0 when both are empty."""
    if not prediction and not reference:
        return 0.0
    return Levenshtein.normalized_distance(prediction, reference)


@dataclass
class TedsNode:
    """A table tree node as TEDS sees it: tag, spans, and (for cells) the content characters."""

    tag: str
    colspan: int = 1
    rowspan: int = 1
    content: str = ""
    children: list[TedsNode] | None = None

    def size(self) -> int:
        return 1 + sum(child.size() for child in self.children or ())


class _TedsConfig(Config):
    def __init__(self, structure_only: bool):
        self.structure_only = structure_only

    def rename(self, a: TedsNode, b: TedsNode) -> float:
        if a.tag != b.tag or a.colspan != b.colspan or a.rowspan != b.rowspan:
            return 1.0
        if a.tag == "td" and not self.structure_only:
            return Levenshtein.normalized_distance(a.content, b.content)
        return 0.0

    def children(self, node: TedsNode):
        return node.children or []


def teds_tree(table_html: str) -> TedsNode | None:
    """The TEDS tree of the first table in the HTML: ``table -> tr -> td`` with spans and text.

    ``<th>`` counts as ``<td>`` and ``thead``/``tbody`` wrappers are dropped, so a table written as
    Markdown (converted to HTML) and the same table in HTML compare as equal.
    """
    table = next(parse_html(table_html).iter("table"), None)
    if table is None:
        return None
    rows: list[TedsNode] = []

    def visit(node: Node) -> None:
        for child in node.children:
            if child.tag == "tr":
                cells = [
                    TedsNode(
                        "td",
                        colspan=span_value(cell.attrs.get("colspan")),
                        rowspan=span_value(cell.attrs.get("rowspan")),
                        content=normalize_text(cell.text()).strip(),
                    )
                    for cell in child.children
                    if cell.tag in ("td", "th")
                ]
                rows.append(TedsNode("tr", children=cells))
            elif child.tag != "table":
                visit(child)

    visit(table)
    return TedsNode("table", children=rows)


def teds(
    prediction: TedsNode | str | None, reference: TedsNode | str | None, structure_only: bool = False
) -> float:
    """TEDS (or TEDS-S with ``structure_only``) in [0, 1]; 1.0 for identical tables.

    Accepts HTML strings or trees from :func:`teds_tree` (prebuild a reference tree once when it is
    compared many times). A missing table on either side scores 0.
    """
    if isinstance(prediction, str) or prediction is None:
        prediction = teds_tree(prediction) if prediction else None
    if isinstance(reference, str) or reference is None:
        reference = teds_tree(reference) if reference else None
    if prediction is None or reference is None:
        return 0.0
    config = _TedsConfig(structure_only)
    distance = _same_shape_cost(prediction, reference, config)
    # With identical shapes every mapping other than node-for-node deletes and inserts at least
    # one node each (cost >= 2), so a node-for-node cost of at most 2 is the exact distance and the
    # cubic APTED run is only needed beyond it. This is the common case when scoring good output.
    if distance is None or distance > 2.0:
        distance = APTED(prediction, reference, config).compute_edit_distance()
    return 1.0 - distance / max(prediction.size(), reference.size())


def _same_shape_cost(a: TedsNode, b: TedsNode, config: _TedsConfig) -> float | None:
    """Cost of renaming ``a`` into ``b`` node for node, or None when their shapes differ."""
    a_children, b_children = a.children or [], b.children or []
    if len(a_children) != len(b_children):
        return None
    cost = config.rename(a, b)
    for x, y in zip(a_children, b_children, strict=True):
        sub = _same_shape_cost(x, y, config)
        if sub is None:
            return None
        cost += sub
    return cost


def formula_edit_distance(prediction: str, reference: str) -> float:
    """Normalised edit distance between canonical LaTeX spellings (delimiters, spacing and redundant braces ignored)."""
    return text_edit_distance(latex.canonical(prediction), latex.canonical(reference))


def greedy_match(similarity: list[list[float]]) -> list[tuple[int, int, float]]:
    """Pairs (prediction, reference, similarity), most similar first, each item used at most once."""
    pairs = sorted(
        ((s, i, j) for i, row in enumerate(similarity) for j, s in enumerate(row)),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    used_pred: set[int] = set()
    used_ref: set[int] = set()
    matched = []
    for s, i, j in pairs:
        if i in used_pred or j in used_ref:
            continue
        used_pred.add(i)
        used_ref.add(j)
        matched.append((i, j, s))
    return matched


@dataclass
class PageMetrics:
    text_edit: float
    table_teds: float | None
    table_teds_s: float | None
    formula_edit: float | None
    overall: float
    n_tables: int = 0
    n_formulas: int = 0
    formula_term: str = FORMULA_TERM


def split_page(markdown: str) -> tuple[str, list[str], list[str]]:
    """A page as (text, tables as HTML, equations): the parts OmniDocBench scores separately."""
    tables, rest = split_tables(markdown)
    equations = latex.extract_equations(rest)
    text = normalize_text(latex.remove_equations(rest)).strip()
    return text, tables, equations


def page_metrics(prediction: str, reference: str) -> PageMetrics:
    """Every OmniDocBench-style metric for one page, and the overall score (0-100).

    Reference tables and formulas are matched to the most similar predicted ones; a reference
    table or formula without a match scores TEDS 0 / edit distance 1. Terms average over the
    reference's tables and formulas, as OmniDocBench averages over ground-truth elements.
    """
    pred_text, pred_tables, pred_formulas = split_page(prediction)
    ref_text, ref_tables, ref_formulas = split_page(reference)
    text_ed = text_edit_distance(pred_text, ref_text)

    table_teds = table_teds_s = None
    if ref_tables:
        pred_trees = [teds_tree(t) for t in pred_tables]
        ref_trees = [teds_tree(t) for t in ref_tables]
        full = [[teds(p, r) for r in ref_trees] for p in pred_trees]
        matched = greedy_match(full)
        table_teds = sum(s for _, _, s in matched) / len(ref_trees)
        table_teds_s = sum(
            teds(pred_trees[i], ref_trees[j], structure_only=True) for i, j, _ in matched
        ) / len(ref_trees)

    formula_ed = None
    if ref_formulas:
        sims = [[1.0 - formula_edit_distance(p, r) for r in ref_formulas] for p in pred_formulas]
        matched = greedy_match(sims)
        formula_ed = 1.0 - sum(s for _, _, s in matched) / len(ref_formulas)

    return PageMetrics(
        text_ed,
        table_teds,
        table_teds_s,
        formula_ed,
        overall_score(text_ed, table_teds, formula_ed),
        len(ref_tables),
        len(ref_formulas),
    )


def overall_score(
    text_edit: float | None, table_teds: float | None = None, formula_edit: float | None = None
) -> float | None:
    """OmniDocBench's overall formula, with the formula term edit-distance based (not CDM).

    A term is left out when there is nothing to score it on (no reference table or formula), so the
    overall is the mean of the terms present; None when there is none.
    """
    terms = [(1.0 - text_edit) * 100] if text_edit is not None else []
    terms += [table_teds * 100] if table_teds is not None else []
    terms += [(1.0 - formula_edit) * 100] if formula_edit is not None else []
    return sum(terms) / len(terms) if terms else None


def score_pages(references, outputs) -> dict:
    """Page metrics for every ``*.md`` reference under folder ``references`` against the same path under ``outputs``.

    A missing prediction counts as an empty page. Text edit distance averages over pages, TEDS and
    TEDS-S over reference tables and formula edit distance over reference formulas, as
    OmniDocBench averages over ground-truth elements; ``overall`` applies its formula to those
    means (with the edit-distance formula term, labelled in ``formula_term``).
    """
    from pathlib import Path

    references, outputs = Path(references), Path(outputs)
    pages = {}
    missing = []
    for ref_path in sorted(references.rglob("*.md")):
        rel = ref_path.relative_to(references)
        out_path = outputs / rel
        if not out_path.is_file():
            missing.append(str(rel))
        prediction = out_path.read_text(encoding="utf-8") if out_path.is_file() else ""
        pages[str(rel)] = page_metrics(prediction, ref_path.read_text(encoding="utf-8"))

    def weighted(attr: str, weight: str) -> float | None:
        total = sum(getattr(m, weight) for m in pages.values())
        if not total:
            return None
        return (
            sum(getattr(m, attr) * getattr(m, weight) for m in pages.values() if getattr(m, weight)) / total
        )

    text_ed = sum(m.text_edit for m in pages.values()) / len(pages) if pages else None
    table_teds = weighted("table_teds", "n_tables")
    formula_ed = weighted("formula_edit", "n_formulas")
    return {
        "pages": {name: vars(m) for name, m in pages.items()},
        "text_edit": text_ed,
        "table_teds": table_teds,
        "table_teds_s": weighted("table_teds_s", "n_tables"),
        "formula_edit": formula_ed,
        "overall": overall_score(text_ed, table_teds, formula_ed),
        "formula_term": FORMULA_TERM,
        "missing_outputs": missing,
    }
