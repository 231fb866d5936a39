"""JinaOCRProcessor: tokenizer, prompts, placeholder expansion, batching, decoding and bad input."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from tokenizers import decoders, pre_tokenizers
from transformers import AutoProcessor, PreTrainedTokenizerFast

from jina_ocr.export.registry import ExportContext
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.pages_jina_ocr import DEFAULT_MAX_PIXELS
from jina_ocr.remote_code.processing_jina_ocr import (
    GroundedRegion,
    JinaOCRImageProcessor,
    JinaOCRProcessor,
    count_image_tokens,
)
from jina_ocr.tokenizer import ADDED_SPECIAL_TOKENS, build_tiny_tokenizer

JINA_PROMPT = "Transcribe the provided document image into a clean Markdown format, preserving the natural reading order."
REAL_IDS = {
    "<image>": 128815,
    "<|ref|>": 128816,
    "<|/ref|>": 128817,
    "<|det|>": 128818,
    "<|/det|>": 128819,
    "<|grounding|>": 128820,
    "<td>": 128821,
    "</td>": 128822,
    "<tr>": 128823,
    "</tr>": 128824,
}


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def processor(tiny_tokenizer):
    return JinaOCRProcessor(JinaOCRImageProcessor(), tiny_tokenizer)


@pytest.fixture(scope="module")
def real_shape_folder(fixtures_dir, tiny_tokenizer, tmp_path_factory):
    """Tokenizer files shaped like the real checkpoint's: the real tokenizer_config.json (LlamaTokenizerFast,
    the 830 added tokens at their real ids, 128815 and up) over the tiny byte-level vocabulary."""
    source = fixtures_dir / "deepseek_ocr"
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    added = {int(i): token for i, token in config["added_tokens_decoder"].items()}
    backend = json.loads(tiny_tokenizer.backend_tokenizer.to_str())
    vocab = {token: i for token, i in backend["model"]["vocab"].items() if i > 2}
    vocab.update({token["content"]: i for i, token in added.items()})
    backend["model"]["vocab"] = vocab
    backend["added_tokens"] = [
        {
            "id": i,
            **{k: token[k] for k in ("content", "single_word", "lstrip", "rstrip", "normalized", "special")},
        }
        for i, token in sorted(added.items())
    ]
    folder = tmp_path_factory.mktemp("real-shape-tokenizer")
    (folder / "tokenizer.json").write_text(json.dumps(backend, ensure_ascii=False), encoding="utf-8")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def real_shape_tokenizer(real_shape_folder):
    return PreTrainedTokenizerFast.from_pretrained(real_shape_folder)


def page(width=900, height=700, colour="white"):
    return Image.new("RGB", (width, height), colour)


# ---------------------------------------------------------------------------------------------------
# the small tokenizer
# ---------------------------------------------------------------------------------------------------


def test_tiny_tokenizer_has_the_real_special_tokens(tiny_tokenizer):
    assert len(tiny_tokenizer) < 1000
    assert (tiny_tokenizer.bos_token_id, tiny_tokenizer.eos_token_id, tiny_tokenizer.pad_token_id) == (
        0,
        1,
        2,
    )
    assert tiny_tokenizer.convert_ids_to_tokens([0, 1, 2]) == [
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        "<｜▁pad▁｜>",
    ]
    specials = {str(t): i for i, t in tiny_tokenizer.added_tokens_decoder.items() if t.special}
    ids = [specials[token] for token in ADDED_SPECIAL_TOKENS]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # the real relative order
    # each special token is one id, even glued to text
    assert tiny_tokenizer.encode("x<td>y</td>", add_special_tokens=False)[1] == specials["<td>"]


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=60))
def test_tiny_tokenizer_is_byte_level(tiny_tokenizer, text):
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert tiny_tokenizer.decode(ids) == text


def test_tiny_tokenizer_is_deterministic_across_processes(tiny_tokenizer):
    script = "from jina_ocr.tokenizer import build_tiny_tokenizer; print(build_tiny_tokenizer().backend_tokenizer.to_str())"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(result.stdout) == json.loads(tiny_tokenizer.backend_tokenizer.to_str())


# ---------------------------------------------------------------------------------------------------
# prompts and the chat template
# ---------------------------------------------------------------------------------------------------


def test_default_prompts(processor, tiny_tokenizer):
    assert processor.build_prompt() == f"<|User|>:\n<image>\n{JINA_PROMPT}\n<|Assistant|>:\n"
    assert processor.build_prompt("OCR this.") == "<|User|>:\n<image>\nOCR this.\n<|Assistant|>:\n"
    deepseek = JinaOCRProcessor(JinaOCRImageProcessor(), tiny_tokenizer, prompt_style="deepseek")
    assert (
        deepseek.build_prompt()
        == "<｜begin▁of▁sentence｜><image>\n<|grounding|>Convert the document to markdown."
    )
    assert deepseek.build_prompt("<image>\nFree OCR.") == "<｜begin▁of▁sentence｜><image>\nFree OCR."
    inputs = deepseek.prepare_ocr_inputs(page())
    assert inputs["input_ids"][0, 0].item() == tiny_tokenizer.bos_token_id
    assert processor.prepare_ocr_inputs(page())["input_ids"][0, 0].item() != tiny_tokenizer.bos_token_id
    with pytest.raises(ValueError, match="prompt_style"):
        JinaOCRProcessor(JinaOCRImageProcessor(), tiny_tokenizer, prompt_style="chatml")


def test_chat_template_writes_the_same_prompt(processor):
    with_text = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "OCR this."}]}]
    bare = [{"role": "user", "content": [{"type": "image"}]}]
    assert processor.apply_chat_template(with_text, add_generation_prompt=True) == processor.build_prompt(
        "OCR this."
    )
    assert processor.apply_chat_template(bare, add_generation_prompt=True) == processor.build_prompt()
    turn = [*with_text, {"role": "assistant", "content": "# Title"}]
    assert processor.apply_chat_template(turn).endswith("<|Assistant|>:\n# Title<｜end▁of▁sentence｜>")


def test_chat_messages_give_the_same_inputs_as_prepare_ocr_inputs(processor):
    image = page(1700, 2200)
    messages = [
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "Go."}]}
    ]
    from_chat = processor.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    direct = processor.prepare_ocr_inputs(image, prompt="Go.")
    assert set(from_chat.keys()) == set(direct.keys())
    for key in direct:
        assert torch.equal(from_chat[key], direct[key]), key


# ---------------------------------------------------------------------------------------------------
# placeholder expansion and batching
# ---------------------------------------------------------------------------------------------------


def placeholder_runs(row: list[int], image_id: int) -> list[int]:
    runs, current = [], 0
    for token in row + [-1]:
        if token == image_id:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


@pytest.mark.floor
def test_each_image_marker_becomes_its_exact_count(processor, tiny_tokenizer):
    text = "<|User|>:\n<image>\nCompare with <image> please.\n<|Assistant|>:\n"
    images = [page(1700, 2200), page(500, 400)]
    inputs = processor(images=images, text=text)
    row = inputs["input_ids"][0].tolist()
    assert placeholder_runs(row, processor.image_token_id) == [903, 273]
    without = [t for t in row if t != processor.image_token_id]
    pieces = text.split("<image>")
    expected = [t for piece in pieces for t in tiny_tokenizer.encode(piece, add_special_tokens=False)]
    assert without == expected
    assert inputs["image_grids"].tolist() == [[2, 3], [0, 0]]


def test_a_batch_is_left_padded_and_each_row_equals_the_page_alone(processor):
    pages = [page(1700, 2200), page(500, 400), page(3000, 1000)]
    batch = processor.prepare_ocr_inputs(pages)
    lengths = batch["attention_mask"].sum(1).tolist()
    assert batch["input_ids"].shape == (3, max(lengths))
    for k, single_page in enumerate(pages):
        alone = processor.prepare_ocr_inputs(single_page)
        n = alone["input_ids"].shape[1]
        assert lengths[k] == n
        assert batch["input_ids"][k, -n:].tolist() == alone["input_ids"][0].tolist()
        assert batch["attention_mask"][k].tolist() == [0] * (max(lengths) - n) + [1] * n
        assert set(batch["input_ids"][k, : max(lengths) - n].tolist()) <= {processor.tokenizer.pad_token_id}
    counts = [placeholder_runs(row, processor.image_token_id) for row in batch["input_ids"].tolist()]
    assert counts == [[903], [273], [583]]
    assert batch["pixel_values_local"].shape[0] == 6 + 0 + 3
    right = processor(images=pages, text=[processor.build_prompt()] * 3, padding_side="right")
    assert (
        right["attention_mask"][1, : lengths[1]].all() and not right["attention_mask"][1, lengths[1] :].any()
    )


def test_nested_images_per_text_and_text_free_calls(processor):
    prompt = processor.build_prompt()
    nested = processor(images=[[page(1700, 2200)], [page(500, 400)]], text=[prompt, prompt])
    flat = processor(images=[page(1700, 2200), page(500, 400)], text=[prompt, prompt])
    without_text = processor(images=[page(1700, 2200), page(500, 400)])
    for key in flat:
        assert torch.equal(nested[key], flat[key]) and torch.equal(without_text[key], flat[key])
    text_only = processor(text="<|User|>:\nhello\n<|Assistant|>:\n")
    assert set(text_only.keys()) == {"input_ids", "attention_mask"}


def test_prepare_ocr_inputs_moves_and_casts(processor):
    inputs = processor.prepare_ocr_inputs(page(1700, 2200), device="cpu", dtype=torch.bfloat16)
    assert inputs["pixel_values"].dtype == inputs["pixel_values_local"].dtype == torch.bfloat16
    assert inputs["input_ids"].dtype == inputs["image_grids"].dtype == torch.long
    assert inputs["input_ids"].shape[0] == 1


def test_real_checkpoint_tokenizer_shape(real_shape_tokenizer):
    tokenizer = real_shape_tokenizer
    assert {token: tokenizer.convert_tokens_to_ids(token) for token in REAL_IDS} == REAL_IDS
    processor = JinaOCRProcessor(JinaOCRImageProcessor(), tokenizer)
    assert processor.image_token_id == 128815
    inputs = processor.prepare_ocr_inputs([page(1700, 2200), page(500, 400)])
    rows = inputs["input_ids"].tolist()
    assert [placeholder_runs(row, 128815) for row in rows] == [[903], [273]]
    assert rows[1][0] == tokenizer.pad_token_id == 2
    out = "<|ref|>image<|/ref|><|det|>[[1, 2, 3, 4]]<|/det|>\n<table><tr><td>1</td></tr></table>"
    new = tokenizer.encode(out, add_special_tokens=False)
    assert {128816, 128819, 128821, 128823} <= set(new)
    generated = torch.tensor([rows[0] + new + [tokenizer.eos_token_id]])
    text = processor.decode_ocr(generated, inputs["input_ids"][:1])
    assert text == "![](images/0.jpg)\n\n<table><tr><td>1</td></tr></table>"


@pytest.mark.floor
def test_real_checkpoint_folder_loads_with_a_working_tokenizer(
    real_shape_folder, real_shape_tokenizer, tmp_path
):
    """A Hub folder whose tokenizer_config.json names LlamaTokenizerFast, as DeepSeek-OCR's does, loads
    through AutoProcessor with a byte-level tokenizer on every supported Transformers release."""
    from jina_ocr.export.parts.processor import write_processor

    write_processor(ExportContext(out_dir=tmp_path, config=JinaOCRConfig(), tokenizer=real_shape_tokenizer))
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(real_shape_folder / name, tmp_path / name)
    loaded = AutoProcessor.from_pretrained(tmp_path, trust_remote_code=True)
    text = "Revenue:\n  12.5 million"
    assert loaded.tokenizer.decode(loaded.tokenizer.encode(text, add_special_tokens=False)) == text
    assert loaded.image_token_id == 128815


def test_a_tokenizer_that_loses_spaces_is_refused(tiny_tokenizer):
    broken = build_tiny_tokenizer()
    broken.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    broken.backend_tokenizer.decoder = decoders.Metaspace()
    with pytest.raises(ValueError, match="does not give text back"):
        JinaOCRProcessor(JinaOCRImageProcessor(), broken)


# ---------------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------------


def generated_for(processor, outputs: list[str], eos=True, pads=3):
    """What generate returns for hand-written outputs: left-padded prompts, the outputs, EOS, padding."""
    tokenizer = processor.tokenizer
    prompt = processor.prepare_ocr_inputs([page(500, 400)] * len(outputs))["input_ids"]
    ending = [tokenizer.eos_token_id] if eos else []
    rows = [tokenizer.encode(text, add_special_tokens=False) + ending for text in outputs]
    width = max(len(r) for r in rows) + pads
    tail = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    return torch.cat([prompt, tail], dim=1), prompt


GROUNDED = (
    "<|ref|>title<|/ref|><|det|>[[100, 50, 900, 90]]<|/det|>\n# Quarterly Report\n\n"
    "<|ref|>image<|/ref|><|det|>[[120, 200, 480, 560], [500, 200, 880, 560]]<|/det|>\n\n\n"
    "<|ref|>text<|/ref|><|det|>[[100, 600, 900, 700]]<|/det|>\nRevenue grew by 8%.\n"
    "<|ref|>image<|/ref|><|det|>[[0, 700, 999, 999]]<|/det|>\n"
)


def test_decode_grounding_spans(processor):
    generated, prompt = generated_for(processor, [GROUNDED])
    text, regions = processor.decode_ocr(generated, prompt, return_regions=True)
    assert text == "# Quarterly Report\n\n![](images/0.jpg)\n\nRevenue grew by 8%.\n![](images/1.jpg)"
    assert regions == [
        GroundedRegion("title", ((100, 50, 900, 90),)),
        GroundedRegion("image", ((120, 200, 480, 560), (500, 200, 880, 560)), "images/0.jpg"),
        GroundedRegion("text", ((100, 600, 900, 700),)),
        GroundedRegion("image", ((0, 700, 999, 999),), "images/1.jpg"),
    ]
    assert regions[3].pixel_boxes(1224, 1584) == [(0, 1109, 1224, 1584)]
    linked = processor.decode_ocr(generated, prompt, image_link="figures/p{page}-{index}.png")
    assert "![](figures/p0-1.png)" in linked


def test_decode_tables_latex_eos_and_specials(processor):
    outputs = [
        "<table><tr><td>Revenue</td><td>12.5</td></tr><tr><td>Net</td><td>0.42</td></tr></table>",
        "$$f(x) \\coloneqq x^2$$ and $a \\eqqcolon b$",
        "Hello<|User|> world<image><|grounding|>",
    ]
    generated, prompt = generated_for(processor, outputs)
    assert processor.decode_ocr(generated, prompt) == [
        outputs[0],
        "$$f(x) := x^2$$ and $a =: b$",
        "Hello world",
    ]
    # text after the first EOS is not part of the page
    eos = processor.tokenizer.eos_token_id
    after = processor.tokenizer.encode("garbage", add_special_tokens=False)
    ids = torch.cat([generated[2:3, :-3], torch.tensor([[eos, *after]])], dim=1)
    assert processor.decode_ocr(ids, prompt[2:3]) == "Hello world"


def test_decode_truncated_output_and_new_tokens_only(processor):
    generated, prompt = generated_for(
        processor, ["Text before.\n<|ref|>image<|/ref|><|det|>[[12, 40"], eos=False
    )
    assert processor.decode_ocr(generated, prompt) == "Text before."
    assert processor.decode_ocr(generated[:, prompt.shape[1] :]) == "Text before."
    assert processor.post_process_image_text_to_text(generated[:, prompt.shape[1] :]) == ["Text before.\n"]


def test_decode_refuses_ids_that_do_not_start_with_the_prompt(processor):
    generated, prompt = generated_for(processor, ["a", "b"])
    altered = generated.clone()
    altered[1, prompt.shape[1] - 1] += 1
    with pytest.raises(ValueError, match="do not start with input_ids"):
        processor.decode_ocr(altered, prompt)
    with pytest.raises(ValueError, match="do not start with input_ids"):
        processor.decode_ocr(generated[:1], prompt)


# ---------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------


def png_header_only(path: Path, width: int, height: int) -> None:
    """A PNG whose header claims ``width`` x ``height`` pixels: a decompression-bomb stand-in."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" + b"\x00" * 3)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


@pytest.mark.floor
def test_empty_and_unreadable_images_are_refused(processor, tmp_path, fixtures_dir):
    with pytest.raises(ValueError, match=r"^the image has zero size \(0x0 px\)"):
        processor.prepare_ocr_inputs(Image.new("RGB", (0, 0)))
    with pytest.raises(ValueError, match=r"has zero size \(100x0 px\)"):
        processor.prepare_ocr_inputs(np.zeros((0, 100, 3), dtype=np.uint8))
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    with pytest.raises(ValueError, match="notes.txt is not an image: not a PNG, JPEG"):
        processor.prepare_ocr_inputs(str(notes))
    with pytest.raises(ValueError, match="is a PDF, not an image: render its pages first"):
        processor.prepare_ocr_inputs(fixtures_dir / "olmocr" / "earnings.pdf")
    with pytest.raises(ValueError, match="no such file"):
        processor.prepare_ocr_inputs(tmp_path / "missing.png")
    with pytest.raises(TypeError, match="cannot read a int as an image"):
        processor.prepare_ocr_inputs(3)
    with pytest.raises(ValueError, match="no images"):
        processor.prepare_ocr_inputs([])


@pytest.mark.floor
def test_urls_are_refused_and_never_fetched(processor):
    for url in ("https://example.org/page.png", "http://127.0.0.1:9/page.png", "ftp://host/page.tif"):
        with pytest.raises(
            ValueError, match=r"is a URL; the page loader .* never fetches.*jina_ocr\.convert\(url\)"
        ):
            processor.prepare_ocr_inputs(url)


@pytest.mark.floor
def test_arrays_of_the_wrong_dtype_shape_or_range_are_refused(processor):
    with pytest.raises(ValueError, match=r"has dtype int64; image arrays are uint8 \(0-255\), uint16"):
        processor.prepare_ocr_inputs(np.full((20, 30, 3), 200))
    with pytest.raises(
        ValueError, match=r"floating-point samples from 0\.0 to 255\.0; they must lie in \[0, 1\]"
    ):
        processor.prepare_ocr_inputs(np.linspace(0, 255, 600).reshape(20, 30))
    with pytest.raises(ValueError, match=r"holds NaN or infinite samples"):
        processor.prepare_ocr_inputs(torch.full((3, 20, 30), float("nan")))
    with pytest.raises(ValueError, match=r"the \(1, 20, 30, 3\) image array has the wrong shape"):
        processor.prepare_ocr_inputs(np.zeros((1, 20, 30, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="has the wrong shape"):
        processor.prepare_ocr_inputs(np.zeros((20, 30, 2), dtype=np.uint8))


@pytest.mark.floor
def test_marker_count_must_match_the_images(processor):
    image = page()
    with pytest.raises(ValueError, match=r"1 image\(s\) given but the text holds 0 <image> marker"):
        processor(images=image, text="<|User|>:\nno marker\n<|Assistant|>:\n")
    with pytest.raises(ValueError, match=r"1 image\(s\) given but the text holds 2 <image> marker"):
        processor(images=image, text="<|User|>:\n<image><image>\n<|Assistant|>:\n")
    with pytest.raises(ValueError, match=r"text 0 holds 1 <image> marker\(s\) but 2 image"):
        processor(images=[[image, image], []], text=["<image>", "<image>"])
    with pytest.raises(ValueError, match="but no image was given"):
        processor(text="<image>")
    with pytest.raises(ValueError, match="holds 2 <image> markers"):
        processor.prepare_ocr_inputs(image, prompt="<image> and <image>")
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        processor(images=image, text="<image>", truncation=True)


def test_pixel_limit_guards_against_decompression_bombs(tiny_tokenizer, tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.png"
    png_header_only(bomb, 12_000, 12_000)  # 144 M pixels claimed, a few bytes stored
    default = JinaOCRProcessor(JinaOCRImageProcessor(), tiny_tokenizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # our message, not Pillow's DecompressionBombWarning first
        with pytest.raises(
            ValueError,
            match=rf"bomb\.png would be 12000x12000 = 144,000,000 pixels, over the limit of {DEFAULT_MAX_PIXELS:,}",
        ):
            default.prepare_ocr_inputs(bomb)

    strict = JinaOCRProcessor(JinaOCRImageProcessor(max_image_pixels=250_000), tiny_tokenizer)
    with pytest.raises(ValueError, match=r"600x500 = 300,000 pixels, over the limit of 250,000"):
        strict.prepare_ocr_inputs(page(600, 500))
    assert strict.prepare_ocr_inputs(page(500, 500))["input_ids"].shape[0] == 1
    assert strict(images=page(600, 500), max_image_pixels=None)["image_grids"].tolist() == [[0, 0]]

    # Our limit replaces Pillow's rather than adding to it: raised past Pillow's, a file still opens.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100_000)  # Pillow alone would refuse 300,000 pixels
    scan = tmp_path / "scan.png"
    page(600, 500).save(scan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert default.prepare_ocr_inputs(scan)["image_grids"].tolist() == [[0, 0]]


# ---------------------------------------------------------------------------------------------------
# saving and the export part
# ---------------------------------------------------------------------------------------------------


def test_export_part_writes_a_loadable_processor(tiny_tokenizer, tmp_path):
    from jina_ocr.export.parts.processor import write_processor

    config = JinaOCRConfig()
    write_processor(ExportContext(out_dir=tmp_path, config=config, tokenizer=None))
    assert list(tmp_path.iterdir()) == []

    ctx = ExportContext(
        out_dir=tmp_path,
        config=config,
        tokenizer=tiny_tokenizer,
        options={"processor_mode": "large", "prompt_style": "deepseek"},
    )
    write_processor(ctx)
    assert config.auto_map["AutoProcessor"] == "processing_jina_ocr.JinaOCRProcessor"
    saved = json.loads((tmp_path / "processor_config.json").read_text())
    assert saved["auto_map"]["AutoProcessor"] == "processing_jina_ocr.JinaOCRProcessor"
    assert (
        saved["image_processor"]["auto_map"]["AutoImageProcessor"]
        == "processing_jina_ocr.JinaOCRImageProcessor"
    )
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "processing_jina_ocr.py"} <= {
        p.name for p in tmp_path.iterdir()
    }
    loaded = AutoProcessor.from_pretrained(tmp_path, trust_remote_code=True)
    assert type(loaded).__name__ == "JinaOCRProcessor"
    assert (loaded.prompt_style, loaded.image_processor.mode) == ("deepseek", "large")
    assert loaded.image_processor.num_image_tokens(1700, 2200) == count_image_tokens(1280, None) == 421
    ours = JinaOCRProcessor(JinaOCRImageProcessor(mode="large"), tiny_tokenizer, prompt_style="deepseek")
    a, b = loaded.prepare_ocr_inputs(page(1700, 2200)), ours.prepare_ocr_inputs(page(1700, 2200))
    assert all(torch.equal(a[key], b[key]) for key in b)


def test_placeholder_counts_follow_the_models_pixels_per_visual_token(tiny_tokenizer, tmp_path):
    from jina_ocr.export.parts.processor import write_processor

    config = JinaOCRConfig(sam_patch_size=8)  # 8 px patches: one visual token per 32 x 32 view pixels
    write_processor(ExportContext(out_dir=tmp_path, config=config, tokenizer=tiny_tokenizer))
    loaded = AutoProcessor.from_pretrained(tmp_path, trust_remote_code=True)
    assert loaded.image_processor.pixels_per_token == config.pixels_per_visual_token == 32
    side = 1024 // 32  # Gundam's global view, no tiles for a page within one tile
    assert loaded.image_processor.num_image_tokens(600, 400) == side * (side + 1) + 1
    row = loaded(images=page(600, 400), text="<image>")["input_ids"][0].tolist()
    assert row.count(loaded.image_token_id) == side * (side + 1) + 1
    with pytest.raises(ValueError, match="pixels_per_token=48 does not divide the view sizes"):
        JinaOCRImageProcessor(pixels_per_token=48)
