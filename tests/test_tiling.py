"""The dynamic-resolution tiling rule and placeholder counts (SPEC section 4).

The reference below is written from the SPEC's wording and DeepSeek-OCR's published procedure (a set
of candidate ratios sorted by tile count, the closest ratio winning, ties going to a larger grid only
for big enough pages), independently of processing_jina_ocr's implementation.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from jina_ocr.remote_code.processing_jina_ocr import (
    JinaOCRImageProcessor,
    JinaOCRProcessor,
    count_image_tokens,
    select_tile_grid,
)
from jina_ocr.tokenizer import build_tiny_tokenizer

SPEC_EXAMPLES = [
    # (width, height) -> grid (i, j) or None -> placeholders, Gundam mode
    ((1700, 2200), (2, 3), 903),
    ((800, 600), (3, 2), 893),
    ((3000, 1000), (3, 1), 583),
    ((500, 400), None, 273),
    ((641, 300), (2, 1), 483),
    ((1000, 3000), (1, 3), 603),
    ((1280, 1280), (2, 2), 693),
    ((2480, 3508), (2, 3), 903),
]
MODE_COUNTS = {"tiny": 73, "small": 111, "base": 273, "large": 421}


def reference_grid(width: int, height: int, image_size: int = 640, min_num: int = 2, max_num: int = 9):
    if width <= image_size and height <= image_size:
        return None
    aspect_ratio = width / height
    target_ratios = {
        (i, j)
        for n in range(min_num, max_num + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if min_num <= i * j <= max_num
    }
    best_diff, best = float("inf"), (1, 1)
    for ratio in sorted(target_ratios, key=lambda r: r[0] * r[1]):
        diff = abs(aspect_ratio - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff, best = diff, ratio
        elif diff == best_diff and width * height > 0.5 * image_size * image_size * ratio[0] * ratio[1]:
            best = ratio
    return best


def reference_count(grid) -> int:
    count = 16 * 16 + 16 + 1  # 16 rows of 16 global features, a newline per row, one view separator
    if grid is not None:
        i, j = grid
        count += (10 * j) * (10 * i) + 10 * j  # the tiles' big grid, a newline per big-grid row
    return count


@pytest.fixture(scope="module")
def processor():
    return JinaOCRProcessor(JinaOCRImageProcessor(), build_tiny_tokenizer())


@pytest.mark.floor
@pytest.mark.parametrize(("size", "grid", "count"), SPEC_EXAMPLES)
def test_spec_worked_examples(processor, size, grid, count):
    assert select_tile_grid(*size) == grid
    assert count_image_tokens(1024, grid) == count
    inputs = processor(images=Image.new("RGB", size, "white"))
    assert int((inputs["input_ids"] == processor.image_token_id).sum()) == count
    assert inputs["image_grids"].tolist() == [list(grid or (0, 0))]
    n_tiles = grid[0] * grid[1] if grid else 0
    assert tuple(inputs["pixel_values_local"].shape) == (n_tiles, 3, 640, 640)


@pytest.mark.parametrize("mode", sorted(MODE_COUNTS))
@pytest.mark.parametrize("size", [(1700, 2200), (3000, 1000), (500, 400)])
def test_untiled_modes_have_a_fixed_count(processor, mode, size):
    view = {"tiny": 512, "small": 640, "base": 1024, "large": 1280}[mode]
    inputs = processor(images=Image.new("RGB", size, "white"), mode=mode)
    assert int((inputs["input_ids"] == processor.image_token_id).sum()) == MODE_COUNTS[mode]
    assert tuple(inputs["pixel_values"].shape) == (1, 3, view, view)
    assert inputs["pixel_values_local"].shape[0] == 0
    assert inputs["image_grids"].tolist() == [[0, 0]]


def test_gundam_is_the_default_and_an_unknown_mode_is_refused(processor):
    assert processor.image_processor.mode == "gundam"
    with pytest.raises(ValueError, match="unknown mode 'huge'"):
        processor(images=Image.new("RGB", (100, 100)), mode="huge")
    with pytest.raises(ValueError, match="unknown mode"):
        JinaOCRImageProcessor(mode="huge")


def test_tie_rule_gives_big_pages_the_larger_grid():
    # 1280x640 is exactly 2:1, like (2, 1), (4, 2) and no others; only a page with more than half of
    # 4x2 tiles' pixels gets the larger grid.
    assert select_tile_grid(1280, 640) == (2, 1)
    assert reference_grid(1280, 640) == (2, 1)
    assert select_tile_grid(2600, 1300) == (4, 2)
    assert reference_grid(2600, 1300) == (4, 2)
    # 1280x1280: (2, 2) ties with (3, 3); 1280^2 is below half of nine tiles, so (2, 2) stays.
    assert select_tile_grid(1280, 1280) == (2, 2)
    assert select_tile_grid(2000, 2000) == (3, 3)


@settings(max_examples=1500, deadline=None)
@given(st.integers(1, 20000), st.integers(1, 20000))
@example(640, 640)
@example(641, 640)
@example(640, 641)
@example(1, 20000)
@example(20000, 1)
def test_grid_matches_the_reference_everywhere(width, height):
    grid = select_tile_grid(width, height)
    assert grid == reference_grid(width, height)
    assert count_image_tokens(1024, grid) == reference_count(grid) <= 1263


@pytest.fixture(scope="module")
def tiny_model_and_processor(tiny_export):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(tiny_export, trust_remote_code=True).eval()
    return model, AutoProcessor.from_pretrained(tiny_export, trust_remote_code=True)


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
@given(
    width=st.integers(1, 16000),
    height=st.integers(1, 16000),
    mode=st.sampled_from(["gundam", "gundam", "gundam", "tiny", "small", "base", "large"]),
)
@example(width=1, height=1, mode="gundam")
@example(width=10000, height=300, mode="gundam")
@example(width=300, height=10000, mode="gundam")
@example(width=1, height=5000, mode="gundam")
@example(width=2600, height=1300, mode="gundam")
def test_placeholders_equal_the_visual_vectors_of_the_model(tiny_model_and_processor, width, height, mode):
    """What the processor reserves is exactly what the model's vision path produces, for any page."""
    assume(width * height <= 30_000_000)
    model, processor = tiny_model_and_processor
    inputs = processor(images=Image.new("RGB", (width, height), (200, 30, 90)), mode=mode)
    placeholders = int((inputs["input_ids"] == processor.image_token_id).sum())
    with torch.no_grad():
        (vectors,) = model.model.get_image_features(
            inputs["pixel_values"], inputs["pixel_values_local"], inputs["image_grids"]
        )
    assert placeholders == vectors.shape[0] <= 1263
    if mode == "gundam":
        assert placeholders == reference_count(reference_grid(width, height))
