"""Pixel parity: the processor's views equal a computation written here from SPEC section 4.

The reference uses PIL's ``ImageOps.pad`` for the global view (the SPEC names it as the exact rule),
``resize`` + ``crop`` for the tiles and torchvision's ``ToTensor`` + ``Normalize`` arithmetic in torch
(divide by 255, subtract 0.5, divide by 0.5, float32). Equality is exact, dtype included.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pdf_render import render
from PIL import Image, ImageDraw, ImageOps
from test_tiling import reference_grid

from jina_ocr.remote_code.processing_jina_ocr import JinaOCRImageProcessor

GREY = (127, 127, 127)


def to_tensor_normalised(image: Image.Image) -> torch.Tensor:
    pixels = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1).float().div(255)
    return (pixels - 0.5) / 0.5


def reference_views(image: Image.Image):
    """(global view, tiles, grid) of an already upright RGB page, Gundam mode."""
    width, height = image.size
    global_view = ImageOps.pad(image, (1024, 1024), method=Image.Resampling.BICUBIC, color=GREY)
    grid = reference_grid(width, height)
    tiles = []
    if grid is not None:
        i, j = grid
        stretched = image.resize((640 * i, 640 * j), Image.Resampling.BICUBIC)
        for row in range(j):
            for col in range(i):
                tiles.append(stretched.crop((col * 640, row * 640, (col + 1) * 640, (row + 1) * 640)))
    local = torch.stack([to_tensor_normalised(t) for t in tiles]) if tiles else torch.empty(0, 3, 640, 640)
    return to_tensor_normalised(global_view)[None], local, grid


@pytest.fixture(scope="module")
def image_processor():
    return JinaOCRImageProcessor()


def assert_matches_reference(features, page: Image.Image):
    global_view, local, grid = reference_views(page)
    assert features["pixel_values"].dtype == global_view.dtype == torch.float32
    assert torch.equal(features["pixel_values"], global_view)
    assert features["pixel_values_local"].dtype == local.dtype
    assert torch.equal(features["pixel_values_local"], local)
    assert features["image_grids"].tolist() == [list(grid or (0, 0))]


@pytest.mark.floor
@pytest.mark.parametrize(
    ("zoom", "rotate", "crop", "expected_grid"),
    [
        (2.0, 0, None, (2, 3)),
        (2.0, 90, None, (3, 2)),
        (0.5, 0, None, None),
        # 1300x1002 scales to 1024x789: 235 rows of grey, offset round(117.5) = 118 where // 2 gives 117
        (2.0, 90, (100, 100, 1400, 1102), (3, 2)),
    ],
    ids=["portrait-144dpi", "landscape-144dpi", "under-640px", "odd-letterbox"],
)
def test_views_equal_the_reference(image_processor, fixtures_dir, zoom, rotate, crop, expected_grid):
    page = render(fixtures_dir / "olmocr" / "earnings.pdf", zoom=zoom, rotate=rotate)
    if crop is not None:
        page = page.crop(crop)
    assert reference_grid(*page.size) == expected_grid
    assert_matches_reference(image_processor(page), page)


def test_exif_rotated_jpeg_is_read_upright(image_processor, fixtures_dir, tmp_path):
    stored = render(fixtures_dir / "olmocr" / "mathfuncs.pdf", zoom=1.5)
    ImageDraw.Draw(stored).rectangle((0, 0, 120, 120), fill=(255, 0, 0))  # marks the stored top-left
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    path = tmp_path / "rotated.jpg"
    stored.save(path, quality=95, exif=exif)

    upright = image_processor.load_image(path)
    assert upright.size == (stored.height, stored.width)
    red, green, _ = upright.getpixel((upright.width - 30, 30))  # the mark is now at the top-right
    assert red > 200 and green < 60

    with Image.open(path) as decoded:
        reference_page = ImageOps.exif_transpose(decoded).convert("RGB")
    assert_matches_reference(image_processor(str(path)), reference_page)


def test_files_arrays_and_tensors_equal_the_pil_input(image_processor, fixtures_dir, tmp_path):
    page = render(fixtures_dir / "olmocr" / "olmo2-pg4.pdf", zoom=1.0)
    from_pil = image_processor(page)
    hwc = np.array(page)
    path = tmp_path / "page.png"
    page.save(path)
    others = (path, str(path), path.read_bytes(), hwc, torch.from_numpy(hwc).permute(2, 0, 1), hwc / 255.0)
    for other in others:
        features = image_processor(other)
        for key in ("pixel_values", "pixel_values_local", "image_grids"):
            assert torch.equal(features[key], from_pil[key])


def test_stretched_and_letterboxed_modes(image_processor, fixtures_dir):
    page = render(fixtures_dir / "olmocr" / "multi_column_miss.pdf", zoom=1.0)
    tiny = image_processor(page, mode="tiny")["pixel_values"]
    assert torch.equal(tiny, to_tensor_normalised(page.resize((512, 512), Image.Resampling.BICUBIC))[None])
    large = image_processor(page, mode="large")["pixel_values"]
    padded = ImageOps.pad(page, (1280, 1280), method=Image.Resampling.BICUBIC, color=GREY)
    assert torch.equal(large, to_tensor_normalised(padded)[None])


def test_a_batch_concatenates_tiles_image_after_image(image_processor, fixtures_dir):
    pages = [
        render(fixtures_dir / "olmocr" / "earnings.pdf", zoom=2.0),
        render(fixtures_dir / "olmocr" / "earnings.pdf", zoom=0.5),
        render(fixtures_dir / "olmocr" / "earnings.pdf", zoom=2.0, rotate=90),
    ]
    batch = image_processor(pages)
    singles = [image_processor(page) for page in pages]
    for key in ("pixel_values", "pixel_values_local", "image_grids"):
        assert torch.equal(batch[key], torch.cat([single[key] for single in singles]))
    assert batch["pixel_values_local"].shape[0] == 6 + 0 + 6
