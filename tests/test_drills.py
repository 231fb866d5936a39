"""Training pages: the curriculum's drill layouts, the held-out words, the page mix, the standardising projector."""

from __future__ import annotations

import ast
import inspect
import random
import re
from itertools import pairwise

import pymupdf
import pytest
import torch

import jina_ocr.synth as synth
import jina_ocr.train.drills as drills
from jina_ocr.train.drills import STAGES, drill_page, drill_word, repeat_word
from jina_ocr.train.glyphs import printed_glyphs
from jina_ocr.train.held_out_words import HELD_OUT_WORDS
from jina_ocr.train.recipe import PageRecipe
from jina_ocr.train.vision import standardize_projector

RECIPE = PageRecipe()


def _printed_lines(page) -> list[tuple[float, list[str], float]]:
    """(baseline y, words, font size) of each printed line, top to bottom, read back from the PDF."""
    with pymupdf.open(stream=page.pdf_bytes, filetype="pdf") as doc:
        lines = []
        for block in doc[0].get_text("dict")["blocks"]:
            for line in block["lines"]:
                span = line["spans"][0]
                words = " ".join(s["text"] for s in line["spans"]).split()
                lines.append((span["origin"][1], words, span["size"]))
        return sorted(lines)


@pytest.mark.parametrize("stage", STAGES)
def test_drill_ground_truth_is_the_printed_text(stage):
    for seed in range(6):
        page = RECIPE.drill(stage, f"test/{seed}")
        words = [w for w in page.markdown.split() if w != "#"]
        assert words == [w for _, line, _ in _printed_lines(page) for w in line]
        assert page.markdown.count("# ") <= 1 and (stage != "line" or "# " not in page.markdown)


def _glyph_rows(page, row: float) -> list[set[int]]:
    """For each printed line, the rows of visual tokens its glyphs' centres fall in."""
    glyphs, _ = printed_glyphs(page.pdf_bytes)
    rows: dict[int, set[int]] = {}
    for glyph in glyphs:
        rows.setdefault(glyph.line, set()).add(int((glyph.box[1] + glyph.box[3]) / 2 // row))
    return [rows[line] for line in sorted(rows)]


def test_early_stages_put_one_line_on_each_row_of_visual_tokens_at_any_height_in_it():
    row = RECIPE.row_height()
    phases = []
    for stage, counts in (("line", range(1, 4)), ("rows", range(2, 9))):
        for seed in range(12):
            page = RECIPE.drill(stage, f"test/{seed}")
            lines = _printed_lines(page)
            assert len([y for y, _, size in lines if size < 24.5]) in counts
            rows = _glyph_rows(page, row)
            assert all(len(line) == 1 for line in rows) and len(set.union(*rows)) == len(rows) == len(lines)
            phases += [y % row / row for y, _, _ in lines]
    # Baselines anywhere in their row: each quarter of the row holds some of them.
    assert {int(4 * phase) for phase in phases} == {0, 1, 2, 3}


def test_on_tiles_early_stages_give_each_line_two_rows_of_visual_tokens():
    """gundam's A5 page is 2 x 3 tiles of 10 x 10 tokens: rows of 595.28 / 30 pt, too low for 24 pt
    type, so the lines of the early stages are two rows apart and each line's glyphs sit in one row."""
    tiled = PageRecipe(mode="gundam")
    row = tiled.row_height()
    assert row == pytest.approx(595.28 / 30) and tiled.line_pitch() == pytest.approx(2 * row)
    for stage in ("line", "rows"):
        for seed in range(12):
            page = tiled.drill(stage, f"test/{seed}")
            body = [y for y, _, _ in _printed_lines(page)][page.markdown.startswith("# ") :]
            gaps = [round(b - a, 3) for a, b in zip(body, body[1:], strict=False)]
            assert gaps == [round(2 * row, 3)] * (len(body) - 1)
            assert all(len(line) == 1 for line in _glyph_rows(page, row))


def test_the_last_stage_is_the_target_format():
    for seed in range(12):
        lines = _printed_lines(RECIPE.drill("page", f"test/{seed}"))
        body = [(y, size) for y, _, size in lines if size <= 22]
        headings = [size for _, _, size in lines if size >= 24]
        assert 2 <= len(body) <= 8 and len(headings) <= 1
        assert all(24 <= size <= 32 for size in headings)
        gaps = {round(b[0] - a[0], 3) for a, b in zip(body, body[1:], strict=False)}
        assert len(gaps) == 1 and 1.15 * body[0][1] - 0.01 <= gaps.pop() <= 1.5 * body[0][1] + 0.01


def test_a_fixed_leading_moves_only_the_body_lines_of_the_same_page():
    for seed in range(4):
        natural = RECIPE.drill("page", f"test/{seed}", held_out=True, lines=5)
        spaced = RECIPE.drill("page", f"test/{seed}", held_out=True, lines=5, leading=37.2)
        assert spaced.markdown == natural.markdown and spaced.font == natural.font
        before, after = _printed_lines(natural), _printed_lines(spaced)
        assert [words for _, words, _ in after] == [words for _, words, _ in before]
        body = [y for y, _, size in after if size == natural.size]
        assert len(body) == 5 and {round(b - a, 3) for a, b in zip(body, body[1:], strict=False)} == {37.2}
        assert after[0][0] == before[0][0]  # the heading (or first line) stays where it was
    with pytest.raises(ValueError, match="only 'page' takes one"):
        RECIPE.drill("rows", "test/0", leading=37.2)


def _string_words(module) -> set[str]:
    """Every lowercase word of every string constant in a module's source, docstrings aside: the words
    a page generator can print."""
    tree = ast.parse(inspect.getsource(module))
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    words = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words |= set(re.findall(r"[a-z]+", node.value.lower()))
    return words


def test_no_held_out_word_is_in_the_training_vocabulary():
    generators = ("text", "tables", "blocks", "compose", "page", "formulas")
    modules = [drills, *(getattr(synth, name) for name in generators)]
    assert "algorithm" in _string_words(synth.text)  # the scan does see the vocabulary
    training_vocabulary = set().union(*map(_string_words, modules))
    assert not training_vocabulary & set(HELD_OUT_WORDS)
    assert len(HELD_OUT_WORDS) == len(set(HELD_OUT_WORDS)) >= 200


@pytest.mark.parametrize(
    ("kind", "options", "unheld"),
    [("nonsense_word", {}, "blorf"), ("letter_word", {"letters": 0.5}, "qzxv")],
    ids=["nonsense", "letters"],
)
def test_drill_words_that_spell_a_held_out_word_are_drawn_again(monkeypatch, kind, options, unheld):
    spelled = iter(["garden", "river", unheld])
    monkeypatch.setattr(drills, kind, lambda rng: next(spelled))

    class Rolls(random.Random):
        def random(self):  # the branch of that kind, no capital, no punctuation
            return 0.3

    assert drill_word(Rolls(), **options) == unheld


def test_letter_words_are_random_letters_and_leave_older_recipes_unchanged():
    recipe = PageRecipe(letter_words=1.0)
    words = [w.strip(",.;:") for i in range(8) for w in recipe.training_page(0, i + 1, 0).markdown.split()]
    assert len(words) >= 16 and all(re.fullmatch(r"[a-zA-Z][a-z]{1,8}", w) for w in words)
    assert len({c for w in words for c in w.lower()}) >= 20  # uniform letters: nearly the whole alphabet
    half = [PageRecipe(letter_words=0.5).drill("page", f"half/{i}").markdown for i in range(4)]
    half_words = {w.strip(",.;:").lower() for page in half for w in page.split()}
    assert half_words & set(drills.WORDS)  # the other kinds of word still appear
    # Pages drawn before the option existed (recorded then): a share of 0 draws exactly the same words.
    assert RECIPE.training_page(4, 100, 0).markdown == "Weighted Soping; compiler"
    assert RECIPE.drill("page", "pin/1").markdown == (
        "# Model kai Motvaidet\n\npam glacier jirbrer empirical ringtrendpe Clovar Stihirdrang fir Glacier "
        "wirkstour bratchi 4700 nonlinear"
    )


def _one_letter_apart(a: str, b: str) -> bool:
    return len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) == 1


def _adjacent_words(pages) -> list[tuple[str, str]]:
    """Each pair of neighbouring body words of ``pages`` (the heading left out), punctuation stripped."""
    return [
        (a.rstrip(",.;:"), b.rstrip(",.;:"))
        for page in pages
        for line in page.markdown.split("\n\n")[1:]
        for a, b in pairwise(line.split())
    ]


def test_repeat_words_print_repeats_and_near_copies_and_leave_held_out_pages_alone():
    recipe = PageRecipe(letter_words=0.5, repeat_words=0.3)
    pairs = _adjacent_words(recipe.drill("page", f"repeats/{i}", repeats=0.3) for i in range(1, 7))
    assert sum(a == b for a, b in pairs) >= 5
    assert sum(_one_letter_apart(a, b) for a, b in pairs) >= 5
    assert (
        recipe.training_page(3, 7, 2).markdown != PageRecipe(letter_words=0.5).training_page(3, 7, 2).markdown
    )
    # Evaluations and the bundle gate read the held-out pages: the training recipe must not move them.
    for stage in range(len(STAGES)):
        assert [p.markdown for p in recipe.held_out_pages(stage, 1, 3)] == [
            p.markdown for p in RECIPE.held_out_pages(stage, 1, 3)
        ]
    # Asked for, held-out pages repeat held-out words exactly (no near copy can leave the list).
    held = RECIPE.held_out_pages(2, 7, 6, repeats=0.3)
    words = [w.strip(",.;:").lower() for p in held for w in p.markdown.split() if w != "#"]
    assert set(words) <= set(HELD_OUT_WORDS)
    assert sum(a == b for a, b in pairwise(words)) >= 5


def test_near_copies_set_the_share_of_repeats_that_change_a_letter():
    def pairs(near_copies: float) -> list[tuple[str, str]]:
        recipe = PageRecipe(letter_words=0.5, repeat_words=0.3, near_copies=near_copies)
        return _adjacent_words(recipe.training_page(3, i, 2) for i in range(1, 7))

    exact_only, near_only = pairs(0.0), pairs(1.0)
    assert sum(a == b for a, b in exact_only) >= 5
    assert not any(_one_letter_apart(a, b) for a, b in exact_only)
    assert sum(_one_letter_apart(a, b) for a, b in near_only) >= 5
    # Only a word without letters (a number) can repeat exactly when every repeat is a near copy.
    assert not any(a == b and any(c.isalpha() for c in a) for a, b in near_only)
    # Pages drawn before the option existed (recorded then): the default share draws them again.
    assert PageRecipe(letter_words=0.5, repeat_words=0.3).training_page(3, 2, 2).markdown == (
        "pdgofota Wpu zach antenna antenna antenna mjt mjt slrknpvn ja flifairpland robust zwwq zvwq zvwq; "
        "meth zuvg nabt polymer"
    )


def test_a_near_copy_never_makes_a_held_out_word():
    held = HELD_OUT_WORDS[0]
    neighbour = ("b" if held[0] != "b" else "c") + held[1:]  # one letter from a held-out word
    copies = {repeat_word(neighbour, random.Random(seed)).rstrip(",.;:") for seed in range(3000)}
    assert neighbour in copies and any(_one_letter_apart(c, neighbour) for c in copies)
    assert held not in copies


def test_held_out_pages_print_only_held_out_words_and_never_a_training_page():
    held_out = set(HELD_OUT_WORDS)
    for stage in range(len(STAGES)):
        pages = RECIPE.held_out_pages(stage, seed=0, count=4)
        words = {w.strip(",.;:").lower() for p in pages for w in p.markdown.split() if w != "#"}
        assert words <= held_out
        training = {RECIPE.training_page(0, i, stage).markdown for i in range(1, 30)}
        assert not training & {p.markdown for p in pages}
    one_line = RECIPE.held_out_pages(0, seed=0, count=6)
    assert all(len(_printed_lines(p)) == 1 for p in one_line)


def _fonts_used(page) -> set[str]:
    with pymupdf.open(stream=page.pdf_bytes, filetype="pdf") as doc:
        return {font[3] for font in doc[0].get_fonts()}


def test_drill_fonts_limit_the_faces_a_recipe_prints():
    recipe = PageRecipe(drill_fonts=("cour",))
    pages = [recipe.training_page(0, i, 1) for i in range(1, 9)]
    assert set().union(*map(_fonts_used, pages)) <= {"Courier", "Courier-Bold"}
    mixed = [drill_page("page", f"test/{i}", RECIPE.row_height()) for i in range(12)]
    assert {"Helvetica", "Times-Roman", "Courier"} <= set().union(*map(_fonts_used, mixed))


def test_each_stage_mixes_in_the_earlier_ones_and_the_last_adds_synth_pages():
    def layouts(stage: int) -> list[str]:
        pages = [RECIPE.training_page(0, i, stage) for i in range(1, 121)]
        return [getattr(page, "stage", "synth") for page in pages]

    assert set(layouts(0)) == {"line"}
    rows = layouts(1)
    assert set(rows) == {"line", "rows"} and 15 <= rows.count("line") <= 45
    last = layouts(2)
    assert 8 <= last.count("synth") <= 30 and 15 <= last.count("line") + last.count("rows") <= 45


def test_standardized_projector_sees_centred_unit_features(tiny_model_and_views):
    model, views = tiny_model_and_views
    with torch.no_grad():
        features = model.model.view_features(views).flatten(0, 1)
        weight_before = model.model.projector.layers.weight.clone()
        standardize_projector(model, views)
        projected = model.model.encode_views(views).flatten(0, 1)
    expected = ((features - features.mean(0)) / (features.std(0) + 1e-3)) @ weight_before.T
    torch.testing.assert_close(projected, expected, atol=1e-4, rtol=1e-4)
    assert projected.mean(0).abs().max() < 1e-4


@pytest.fixture
def tiny_model_and_views():
    from small_config import SMALL

    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    torch.manual_seed(0)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL)).eval()
    size = model.config.sam_image_size
    views = torch.rand(3, 3, size, size) * 2 - 1
    return model, views
