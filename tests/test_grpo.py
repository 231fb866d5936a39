"""GRPO post-training (``jina-ocr train grpo``): steps through TRL that change the weights with every view
of the page in the loss, the reward TRL calls against hand-computed values, plain model files out, and
resumption from model files alone and from the run's checkpoint."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("trl")

from trl.data_utils import prepare_multimodal_messages  # noqa: E402
from trl.trainer.utils import add_fused_lm_head  # noqa: E402

import jina_ocr  # noqa: E402
from jina_ocr.cli import main  # noqa: E402
from jina_ocr.export.presets import preset_config  # noqa: E402
from jina_ocr.model_files import build_processor, load_model_files, load_settings, save_model_files  # noqa: E402
from jina_ocr.remote_code.modeling_jina_ocr import (  # noqa: E402
    JinaOCRForConditionalGeneration,
    JinaOCRModel,
)
from jina_ocr.rewards import TERMS  # noqa: E402
from jina_ocr.train import grpo_data  # noqa: E402
from jina_ocr.train.grpo_data import LAST_STAGE, PROMPT  # noqa: E402
from jina_ocr.train.grpo_reward import PageReward  # noqa: E402
from jina_ocr.train.grpo_trainer import PageGRPOTrainer  # noqa: E402
from jina_ocr.train.recipe import PageRecipe  # noqa: E402
from jina_ocr.train.tokenizer import train_tokenizer  # noqa: E402

TINY_RUN = ["--pages", "1", "--generations", "2", "--max-new-tokens", "6", "--eval-pages", "1"]
TINY_RUN += ["--checkpoint-every", "1", "--threads", "1"]
"""One page of two samples per step, six tokens each, one-page evaluations, a checkpoint every step."""


def _log(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def _steps(folder: Path) -> list[dict]:
    return [r for r in _log(folder) if "reward" in r]


@pytest.fixture(scope="module")
def start_files(tmp_path_factory) -> Path:
    """Random model files of the tiny preset in gundam mode (a global view and 2 x 3 tiles per page) with
    windowed SAM attention only, as jina-ocr-tiny has: a step takes about two seconds."""
    tokenizer = train_tokenizer([])
    ids = {name: getattr(tokenizer, name) for name in ("bos_token_id", "eos_token_id", "pad_token_id")}
    config = preset_config(
        "tiny",
        sam_global_attn_indexes=[],
        vocab_size=len(tokenizer),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        **ids,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("grpo-start") / "model"
    return save_model_files(
        folder, JinaOCRForConditionalGeneration(config), tokenizer, {"processor_mode": "gundam"}
    )


class ImageSpy:
    """Records what every call of the model's image encoder got: with gradients (the loss) or not."""

    def __init__(self):
        self.calls = []
        self.original = JinaOCRModel.get_image_features

    def __call__(self, model, pixel_values, pixel_values_local=None, image_grids=None):
        self.calls.append(
            {
                "grad": torch.is_grad_enabled(),
                "views": pixel_values.shape[0],
                "tiles": 0 if pixel_values_local is None else pixel_values_local.shape[0],
                "grids": None if image_grids is None else image_grids.tolist(),
            }
        )
        return self.original(model, pixel_values, pixel_values_local, image_grids)


class PageSpy:
    """Records the indices of the training pages a run makes."""

    def __init__(self):
        self.indices = []
        self.original = grpo_data.training_page

    def __call__(self, recipe, seed, index):
        self.indices.append(index)
        return self.original(recipe, seed, index)


@pytest.fixture(scope="module")
def grpo_run(start_files, tmp_path_factory):
    """Two steps from the random files, evaluated at the start and at step 2."""
    out = tmp_path_factory.mktemp("grpo") / "run"
    images, pages = ImageSpy(), PageSpy()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(JinaOCRModel, "get_image_features", lambda *a, **k: images(*a, **k))
        patch.setattr(grpo_data, "training_page", pages)
        args = ["train", "grpo", str(start_files), str(out), "--steps", "2", "--eval-every", "2", *TINY_RUN]
        assert main(args) == 0
    return out, images.calls, pages.indices


@pytest.fixture(scope="module")
def resumed(grpo_run, start_files, tmp_path_factory):
    """A new run folder going on from the first run's model files alone (step 3), then rerun with a later
    end, which goes on from its checkpoint (step 4), both with a KL term to the starting files. A learning
    rate of 1e-12 leaves the weights where they started, so where they came from shows."""
    again = tmp_path_factory.mktemp("grpo-again") / "run"
    pages = PageSpy()
    common = [
        "train",
        "grpo",
        str(start_files),
        str(again),
        "--eval-every",
        "0",
        "--lr",
        "1e-12",
        "--beta",
        "0.01",
    ]
    common += TINY_RUN
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grpo_data, "training_page", pages)
        assert main([*common, "--steps", "3", "--resume-from", str(grpo_run[0] / "model")]) == 0
        first = list(pages.indices)
        after_files = load_file(str(again / "model" / "model.safetensors"))
        assert main([*common, "--steps", "4"]) == 0
    return again, first, pages.indices[len(first) :], after_files


def test_grpo_steps_run_through_trl_and_change_the_whole_model(grpo_run, start_files):
    out, image_calls, page_indices = grpo_run
    steps = _steps(out)
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        assert 0 <= record["reward"] <= 1
        assert {f"reward/{term}" for term in TERMS} <= set(record)
        assert 1 <= record["completion_length"] <= 6
        assert set(record["seconds"]) == {"rollout", "reward", "loss", "other", "step"}
        assert "kl" not in record  # beta 0: no reference model, nothing to compare with
    evaluations = [r for r in _log(out) if "held_out_cer" in r]
    assert [r["step"] for r in evaluations] == [0, 2]
    assert all(0 <= r["held_out_reward"] <= 1 and "repeats_cer" in r for r in evaluations)
    # Every page of a step is made once however many samples it has.
    assert page_indices == [1, 2]
    # The loss forward reads every view of the page: its global view and its 2 x 3 tiles.
    loss_calls = [c for c in image_calls if c["grad"]]
    assert len(loss_calls) == 2
    assert all(c["tiles"] == 6 * c["views"] and c["grids"] == [[2, 3]] * c["views"] for c in loss_calls)
    rollout_calls = [c for c in image_calls if not c["grad"]]
    assert all(c["tiles"] == 6 * c["views"] for c in rollout_calls)
    before = load_file(str(start_files / "model.safetensors"))
    after = load_file(str(out / "model" / "model.safetensors"))
    changed = {key for key in before if not torch.equal(before[key], after[key])}
    assert any(key.startswith("model.sam_model.") for key in changed)  # the gradient reaches the towers
    assert any(key.startswith("model.layers.") for key in changed)


def test_the_saved_model_loads_as_the_plain_architecture(grpo_run, start_files):
    out = grpo_run[0] / "model"
    assert {p.name for p in out.iterdir()} == {p.name for p in start_files.iterdir()}
    assert set(load_file(str(out / "model.safetensors"))) == set(
        load_file(str(start_files / "model.safetensors"))
    )
    assert json.loads((out / "config.json").read_text()) == json.loads(
        (start_files / "config.json").read_text()
    )
    settings = load_settings(out)
    assert set(settings) == {"processor_mode", "grpo"}
    assert settings["grpo"]["progress"] == {"step": 2, "run_start": 0}
    assert not {"model", "out", "resume_from", "device", "threads"} & set(settings["grpo"])
    for model, processor in (jina_ocr.load(out), load_model_files(out)):
        assert type(model) is JinaOCRForConditionalGeneration and "forward" not in vars(model)
        assert processor.image_processor.mode == "gundam"
        assert model.generation_config.do_sample is False


def test_a_run_resumes_from_model_files_alone_then_from_its_checkpoint(resumed, grpo_run, start_files):
    again, first_pages, second_pages, after_files = resumed
    steps = _steps(again)
    # From the files: step 3 on page 3 (the first run drew pages 1 and 2), from the files' weights.
    assert [r["step"] for r in steps] == [3, 4]
    assert first_pages == [3] and second_pages == [4]
    resumed_from = load_file(str(grpo_run[0] / "model" / "model.safetensors"))
    start = load_file(str(start_files / "model.safetensors"))
    for key, value in after_files.items():
        torch.testing.assert_close(value, resumed_from[key], rtol=0, atol=1e-8)
    moved = [k for k in start if not torch.allclose(resumed_from[k], start[k], rtol=0, atol=1e-8)]
    assert any(".mlp.experts." in key for key in moved)
    # From the checkpoint: the run folder's start stays step 2, and every weight, the experts' too, comes
    # back as the checkpoint has it (not as the starting files have it).
    assert load_settings(again / "model")["grpo"]["progress"] == {"step": 4, "run_start": 2}
    assert [p.name for p in (again / "checkpoints").glob("checkpoint-*")] == ["checkpoint-2"]
    final = load_file(str(again / "model" / "model.safetensors"))
    for key, value in final.items():
        torch.testing.assert_close(value, resumed_from[key], rtol=0, atol=1e-8)
    # The KL term to the starting files is logged: the policy is the trained one, so it is above 0.
    assert all(r["kl"] > 0 for r in steps)


def test_runs_that_cannot_go_on_are_refused_in_one_line(grpo_run, start_files, tmp_path, capsys):
    base = ["train", "grpo", str(start_files)]
    cases = [
        ([str(grpo_run[0]), "--resume-from", str(grpo_run[0] / "model")], "has a checkpoint: rerun without"),
        ([str(tmp_path / "a"), "--resume-from", str(start_files)], "record no GRPO progress"),
        ([str(tmp_path / "b"), "--resume-from", str(grpo_run[0] / "model"), "--steps", "2"], "above it"),
        ([str(tmp_path / "c"), "--generations", "1"], "at least 2 samples"),
        ([str(tmp_path / "d"), "--eval-seed", "3"], "bundle gate"),
    ]
    for args, message in cases:
        assert main([*base, *args]) != 0
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_the_rollout_prompt_is_the_inference_prompt(start_files):
    _, processor = load_model_files(start_files)
    page = PageRecipe(mode="gundam").drill("page", "prompt")
    messages = prepare_multimodal_messages(PROMPT, images=[page.image])
    rendered = processor.apply_chat_template(
        conversation=[messages], add_generation_prompt=True, tokenize=True, return_dict=True
    )
    expected = processor.prepare_ocr_inputs(page.image)
    assert rendered["input_ids"].tolist() == expected["input_ids"].tolist()
    for key in ("pixel_values", "pixel_values_local", "image_grids"):
        assert torch.equal(rendered[key], expected[key])


def test_each_row_is_scored_with_its_own_page_s_tiles(start_files):
    """Pages of 2 and 6 tiles in one batch: the log-probabilities of the trainer's forward, scored a row
    at a time and all at once, from the processor's tensors (reference pass) or from the batch's rows
    (loss pass), are those of a plain forward of each page alone."""
    model, processor = load_model_files(start_files)
    page = PageRecipe(mode="gundam").training_page(5, 1, LAST_STAGE).image
    images = [page.crop((0, 0, page.width, page.height // 3)), page]
    inputs = processor.prepare_ocr_inputs(images)
    assert inputs["image_grids"].tolist() == [[2, 1], [2, 3]]
    completion = torch.tensor([[40, 50, 60], [70, 80, 90]])
    ids = torch.cat([inputs["input_ids"], completion], dim=1)
    mask = torch.cat([inputs["attention_mask"], torch.ones_like(completion)], dim=1)
    expected = []
    first_tile = 0
    with torch.no_grad():
        for row, (cols, rows) in enumerate(inputs["image_grids"].tolist()):
            kept = mask[row].bool()
            logits = model(
                input_ids=ids[row][kept][None],
                pixel_values=inputs["pixel_values"][row : row + 1],
                pixel_values_local=inputs["pixel_values_local"][first_tile : first_tile + cols * rows],
                image_grids=inputs["image_grids"][row : row + 1],
            ).logits[0]
            first_tile += cols * rows
            expected.append(logits[-4:-1].log_softmax(-1).gather(-1, completion[row][:, None])[:, 0])
        add_fused_lm_head(model)
        tiles = list(inputs["pixel_values_local"].split([2, 6]))
        trainer = SimpleNamespace(
            accelerator=SimpleNamespace(autocast=contextlib.nullcontext),
            _loss_batch={"tiles": tiles, "image_grids": inputs["image_grids"]},
        )
        logps = PageGRPOTrainer._get_per_token_logps_and_entropies
        common = (trainer, model, ids, mask, 3)
        views = {key: inputs[key] for key in ("pixel_values_local", "image_grids")}
        for batch_size in (1, 2):
            for kwargs in (views, {}):
                got, _, _ = logps(*common, batch_size, pixel_values=inputs["pixel_values"], **kwargs)
                torch.testing.assert_close(got, torch.stack(expected), rtol=1e-4, atol=1e-4)


WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split()
WORDS += "oscar papa quebec romeo sierra tango".split()
PAGE = "# Field notes\n\n" + " ".join(WORDS)  # 3 + 20 = 23 words
TABLE = "<table><tr><td>1</td><td>2</td></tr></table>"
PRESENT, MISSING = (
    {"pdf": "p.pdf", "page": 1, "id": name, "type": "present", "text": text}
    for name, text in (("heading", "Field notes"), ("absent", "zulu yankee"))
)


@pytest.fixture(scope="module")
def score():
    """``score(text, reference, tests)``: the total TRL gets for a sample of ``text`` (tokens and EOS, as
    sampled) and the floored terms the reward logged for it."""
    processor = build_processor(train_tokenizer([]), "base")
    page_reward = PageReward(processor)

    def run(text: str, reference: str, tests=()):
        logged = {}
        ids = processor.tokenizer.encode(text, add_special_tokens=False) + [processor.tokenizer.eos_token_id]
        totals = page_reward(
            [PROMPT], [text], [ids], reference=[reference], tests=[list(tests)], log_metric=logged.__setitem__
        )
        assert logged["seconds/reward"] >= 0
        return totals[0], {
            key.split("/")[1]: value for key, value in logged.items() if key.startswith("reward/")
        }

    return run


# (sample, reference, tests, the one term it lowers, that term by hand, the total by hand)
HAND_MADE = [
    ("exact", PAGE, PAGE, (), None, None, 1.0),
    # The table tags are kept: TRL's own decoding (special tokens skipped) would lose every <td>.
    ("table kept", f"{PAGE}\n\n{TABLE}", f"{PAGE}\n\n{TABLE}", (), None, None, 1.0),
    # Tables: nothing matched -> the floor 0.1.
    ("table missing", PAGE, f"{PAGE}\n\n{TABLE}", (), "tables", 0.1, 0.1),
    # Structure: one stray closing tag in one unit checked -> raw 0 -> the floor 0.2.
    ("stray tag", PAGE + "</b>", PAGE, (), "structure", 0.2, 0.2),
    # Unit tests: none of one passes -> 0.2; one of two -> 0.2 + 0.8 * 0.5.
    ("no test passes", PAGE, PAGE, [MISSING], "unit_tests", 0.2, 0.2),
    ("half the tests", PAGE, PAGE, [PRESENT, MISSING], "unit_tests", 0.6, 0.6),
    # Format: a code fence is one of five checks -> 0.2 + 0.8 * 0.8.
    ("fenced", f"```markdown\n{PAGE}\n```", PAGE, (), "format", 0.84, 0.84),
    # Repetition has no floor: "sierra tango" three times over is 4 looped words of 27:
    # 1 - (4 / 27) / 0.25 = 11 / 27; four more copies (12 of 35 words) zero the reward.
    ("a short loop", PAGE + " sierra tango sierra tango", PAGE, (), "repetition", 11 / 27, 11 / 27),
    ("a loop", PAGE + " sierra tango" * 6, PAGE, (), "repetition", 0.0, 0.0),
]


@pytest.mark.parametrize(
    ("sample", "reference", "tests", "term", "value", "total"),
    [c[1:] for c in HAND_MADE],
    ids=[c[0] for c in HAND_MADE],
)
def test_the_reward_trl_calls_gives_the_hand_computed_values(
    score, sample, reference, tests, term, value, total
):
    got, terms = score(sample, reference, tests)
    assert got == pytest.approx(total, abs=1e-9)
    assert terms == pytest.approx({name: value if name == term else 1.0 for name in TERMS}, abs=1e-9)


def test_terms_multiply(score):
    """A fenced sample without the page's table: 0.84 (format) x 0.1 (tables)."""
    got, _ = score(f"```\n{PAGE}\n```", f"{PAGE}\n\n{TABLE}")
    assert got == pytest.approx(0.084, abs=1e-9)
