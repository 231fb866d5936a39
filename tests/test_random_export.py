"""Random-weight exports: FastMTP off by default (``--mtp on`` turns it on), the same choice read by the
vLLM helpers, and a tiny preset whose position limit holds its longest prompt and the default budget."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from jina_ocr.cli import main
from jina_ocr.generation_defaults import DEFAULT_MAX_NEW_TOKENS
from jina_ocr.remote_code.processing_jina_ocr import JinaOCRProcessor
from jina_ocr.vllm import vllm_llm_kwargs


def generation_config(folder) -> dict:
    return json.loads((folder / "generation_config.json").read_text())


@pytest.mark.parametrize(
    ("flags", "use_mtp"), [([], False), (["--mtp", "off"], False), (["--mtp", "on"], True)]
)
def test_random_export_writes_fastmtp_off_unless_asked(tmp_path, capsys, flags, use_mtp):
    out = tmp_path / "tiny"
    assert main(["export", "--random", "--preset", "tiny", "--no-weights", *flags, str(out)]) == 0, (
        capsys.readouterr().err
    )
    assert generation_config(out)["use_mtp"] is use_mtp
    kwargs = vllm_llm_kwargs(out)
    if use_mtp:
        assert kwargs["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    else:  # vLLM does not draft either, and can run the loop guard instead
        assert "speculative_config" not in kwargs and kwargs["logits_processors"]
    assert vllm_llm_kwargs(out, num_speculative_tokens=2)["speculative_config"]["num_speculative_tokens"] == 2


def test_mtp_on_without_a_head_is_a_usage_error(tmp_path, capsys, fixtures_dir):
    source = fixtures_dir / "deepseek_ocr"  # DeepSeek-OCR has no FastMTP head
    status = main(["export", "--from", str(source), "--no-weights", "--mtp", "on", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.strip().splitlines()[-1] == (
        "jina-ocr export: error: FastMTP cannot be turned on: the checkpoint has no FastMTP head"
    )
    assert "Traceback" not in err


def test_export_from_follows_the_head_by_default(tmp_path, fixtures_dir):
    out = tmp_path / "out"
    assert main(["export", "--from", str(fixtures_dir / "deepseek_ocr"), "--no-weights", str(out)]) == 0
    assert generation_config(out)["use_mtp"] is False


def test_tiny_positions_hold_the_longest_prompt_and_the_default_budget(tiny_export):
    """A 1 x 9 Gundam grid gives the most placeholders (1263); with the default request text and DEFAULT_MAX_NEW_TOKENS new
    tokens the sequence must stay inside max_position_embeddings."""
    processor = JinaOCRProcessor.from_pretrained(tiny_export, trust_remote_code=True)
    inputs = processor.prepare_ocr_inputs(Image.new("RGB", (300, 2700), "white"))
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    assert int((inputs["input_ids"] == image_id).sum()) == 1263
    config = json.loads((tiny_export / "config.json").read_text())
    assert inputs["input_ids"].shape[1] + DEFAULT_MAX_NEW_TOKENS <= config["max_position_embeddings"]
    assert generation_config(tiny_export)["max_new_tokens"] == DEFAULT_MAX_NEW_TOKENS


def test_a_short_position_limit_caps_the_output_budget(tmp_path):
    """A model with 1024 positions read in base mode (273 placeholders, no tiles) gets a generation config
    whose default output fills exactly what the processor's prompt leaves of the 1024."""
    from jina_ocr.export.folder import export_folder
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
    from jina_ocr.train.recipe import model_config
    from jina_ocr.train.tokenizer import train_tokenizer

    tokenizer = train_tokenizer([])
    model = JinaOCRForConditionalGeneration(model_config(tokenizer, max_position_embeddings=1024))
    out = export_folder(
        tmp_path / "short", config=model.config, model=model, tokenizer=tokenizer, processor_mode="base"
    )
    processor = JinaOCRProcessor.from_pretrained(out, trust_remote_code=True)
    prompt = processor.prepare_ocr_inputs(Image.new("RGB", (839, 1191), "white"))["input_ids"].shape[1]
    assert generation_config(out)["max_new_tokens"] == 1024 - prompt < DEFAULT_MAX_NEW_TOKENS
