"""How a from-scratch run starts: reading drills, their mix with synth pages, the standardising projector."""

from __future__ import annotations

import pymupdf
import pytest
import torch

from jina_ocr.synth.text import ADJECTIVES, NOUNS, VERBS
from jina_ocr.train.drills import drill_page
from jina_ocr.train.recipe import PageRecipe
from jina_ocr.train.vision import standardize_projector

VOCABULARY = set(NOUNS + ADJECTIVES + VERBS)


def _printed_words(page) -> list[str]:
    """The words PyMuPDF reads back from the drill's PDF, in reading order."""
    with pymupdf.open(stream=page.pdf_bytes, filetype="pdf") as doc:
        return doc[0].get_text().split()


@pytest.mark.parametrize("level", [0.0, 0.2, 0.5, 1.0])
def test_drill_ground_truth_is_the_printed_text(level):
    for seed in range(5):
        page = drill_page(f"test/{seed}", level)
        words = [w for w in page.markdown.split() if w != "#"]
        assert words == _printed_words(page)


def test_drills_grow_from_a_few_known_words_to_a_page_of_new_ones():
    first = [drill_page(f"test/{i}", 0.0) for i in range(20)]
    assert all(1 <= len(p.markdown.split()) <= 3 for p in first)
    assert all(set(p.markdown.split()) <= VOCABULARY for p in first)
    full = [drill_page(f"test/{i}", 1.0) for i in range(20)]
    assert min(len(p.markdown.split()) for p in full) > 20
    words = [w.strip(",.;:").lower() for p in full for w in p.markdown.split() if w != "#"]
    unknown = [w for w in words if w not in VOCABULARY and not w.isdigit()]
    assert 0.3 < len(unknown) / len(words) < 0.6
    assert drill_page("same", 0.7).markdown == drill_page("same", 0.7).markdown
    assert drill_page("same", 0.7).image.tobytes() == drill_page("same", 0.7).image.tobytes()


def _fonts_used(page) -> set[str]:
    with pymupdf.open(stream=page.pdf_bytes, filetype="pdf") as doc:
        return {font[3] for font in doc[0].get_fonts()}


def test_drill_fonts_limit_the_faces_a_recipe_prints():
    recipe = PageRecipe(drill_ramp_pages=0, drill_fraction=1.0, drill_fonts=("cour",))
    pages = [recipe.training_page(0, i) for i in range(1, 9)]
    assert set().union(*map(_fonts_used, pages)) <= {"Courier", "Courier-Bold"}
    mixed = [drill_page(f"test/{i}", 1.0) for i in range(12)]
    assert {"Helvetica", "Times-Roman", "Courier"} <= set().union(*map(_fonts_used, mixed))


def test_held_out_drills_span_the_levels_and_are_never_training_pages():
    recipe = PageRecipe(drill_ramp_pages=0, drill_fraction=1.0)
    held_out = recipe.held_out_drills(seed=0, count=4)
    words = [len(p.markdown.split()) for p in held_out]
    assert words == sorted(words) and words[0] < 10 < words[-1]
    training = {recipe.training_page(0, i).markdown for i in range(1, 40)}
    assert not training & {p.markdown for p in held_out}


def test_unknown_drill_font_is_refused_by_name(tmp_path, capsys):
    from jina_ocr.cli import main

    assert main(["train", "sft", str(tmp_path / "run"), "--drill-fonts", "helv", "comic"]) != 0
    assert "--drill-fonts: unknown comic" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_recipe_starts_on_drills_and_mixes_in_synth_pages():
    recipe = PageRecipe(drill_ramp_pages=100, drill_fraction=0.5)
    early = [type(recipe.training_page(0, i)).__name__ for i in range(1, 6)]
    assert early == ["DrillPage"] * 5
    late = [type(recipe.training_page(0, i)).__name__ for i in range(200, 240)]
    assert 8 < late.count("SynthPage") < 32


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
