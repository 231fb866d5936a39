"""Training: the smoke run of ``jina-ocr train sft`` / ``train mtp`` and the pieces whose rules matter
(label masking, the FastMTP pairing and loss weights, resumption, the special tokens of the tokenizer)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from training_helpers import write_recipe

from jina_ocr.cli import main
from jina_ocr.errors import UserError
from jina_ocr.model_files import (
    checkpoint_layout,
    load_model_files,
    load_settings,
    load_tokenizer,
    save_model_files,
)
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
from jina_ocr.tokenizer import ADDED_SPECIAL_TOKENS, BOS_TOKEN, EOS_TOKEN, PAD_TOKEN
from jina_ocr.train.data import IGNORE_INDEX, Collator, Example
from jina_ocr.train.drills import STAGES
from jina_ocr.train.evaluate import character_error_rate
from jina_ocr.train.glyphs import ViewGrid
from jina_ocr.train.mtp import collate, depth_weights, distill, mtp_losses
from jina_ocr.train.recipe import PageRecipe
from jina_ocr.train.sft import SFTOptions, _Trainer, starting_model, supervised_losses
from jina_ocr.train.tokenizer import BYTE_VOCAB_SIZE, train_tokenizer
from jina_ocr.train.vision import VISION_MODULES

CORPUS = ["# A heading\n\nSome body text of a page.", "<table><tr><td>1</td></tr></table> and $x^2$"] * 5


def _log(folder):
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


SMOKE = dict(eval_pages=1, log_every=1, max_target_tokens=24, warmup=1, workers=0)
"""Recipe settings of the smoke runs: one-page evaluations, a log line per step, short targets."""


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """Two steps of sft on two-page batches, one more resumed from the checkpoint, then one more in
    another folder resumed from the model files alone. ``advance_cer = [100, 100]`` passes every stage
    at its first evaluation, so the curriculum moves at steps 2 and 3."""
    root = tmp_path_factory.mktemp("train")
    out = root / "sft"
    settings = SMOKE | dict(
        vision_warmup_steps=2, advance_cer=[100, 100], dense_fraction=0.5, letter_words=0.5
    )
    recipe = write_recipe(root / "smoke.toml", **settings)
    common = ["train", "sft", str(out), "--recipe", recipe, "--batch-size", "2", "--eval-every", "2"]
    common += ["--threads", "2"]
    assert main([*common, "--steps", "2"]) == 0
    first = _log(out)
    first_weights = load_file(str(out / "model" / "model.safetensors"))
    stopping = write_recipe(root / "stop.toml", **settings, stop_at=3)
    assert main([*common, "--recipe", stopping, "--steps", "4"]) == 0
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=False)
    again = root / "again"
    common[2] = str(again)
    assert main([*common, "--steps", "4", "--resume-from", str(out / "model")]) == 0
    return out, first, _log(out), first_weights, checkpoint, again


def test_sft_smoke_run_logs_losses_and_held_out_metrics_and_resumes(sft_run):
    out, first, log, _, checkpoint, _ = sft_run
    losses = [r for r in log if "loss" in r]
    assert [r["step"] for r in losses] == [1, 2, 3]
    assert all(r["loss"] > 0 and r["glyph_loss"] > 0 and r["align_loss"] > 0 for r in losses)
    assert all(0 <= r["glyph_acc"] <= 1 and 0 < r["align_mass"] < 1 for r in losses)
    # The resumed step trains on the pages after those of the first two steps.
    assert losses[1]["pages"] == 4 and losses[2]["pages"] == 6
    evals = [r for r in log if "eval_seconds" in r]
    assert [(r["step"], r["stage"]) for r in evals] == [(2, "line")]
    for key in ("cer", "loss", "gap", "glyph_acc", "align_mass"):
        assert isinstance(evals[0][f"line_{key}"], float) and isinstance(evals[0][f"page_{key}"], float)
    assert len(first) < len(log)
    files = {p.name for p in (out / "model").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "jina_ocr_model.json"} <= files
    settings = json.loads((out / "model" / "jina_ocr_model.json").read_text())
    assert (
        settings["progress"]
        == checkpoint["progress"]
        == {
            "step": 3,
            "next_index": 7,
            "stage": "rows",
            "towers_ready": False,
            "rewarm_from": None,
            "glyph_head_ready": True,
        }
    )
    options = json.loads((out / "options.json").read_text())
    assert options["recipe"]["dense_fraction"] == options["recipe"]["letter_words"] == 0.5
    assert options["stop_at"] == 3 and options["vision_warmup_steps"] == 2


def test_the_curriculum_advances_on_the_held_out_metric(sft_run):
    log = sft_run[2]
    assert [(r["step"], r["advanced_to"]) for r in log if "advanced_to" in r] == [(2, "rows")]
    stages = [(r["step"], r["stage"]) for r in log if "loss" in r]
    assert stages == [(1, "line"), (2, "line"), (3, "rows")]


def test_a_run_resumes_from_the_model_files_alone(sft_run):
    out, *_, again = sft_run
    log = _log(again)
    losses = [r for r in log if "loss" in r]
    # Step, page index and stage come from the files; the stage advances again at the last evaluation.
    assert [(r["step"], r["pages"], r["stage"]) for r in losses] == [(4, 8, "rows")]
    assert [r["advanced_to"] for r in log if "advanced_to" in r] == ["page"]
    assert load_tokenizer(again / "model").get_vocab() == load_tokenizer(out / "model").get_vocab()
    # The model files name the folder they came from without the training machine's path to it; the
    # run's own record keeps the path.
    assert load_settings(again / "model")["sft"]["resume_from"] == "model"
    assert json.loads((again / "options.json").read_text())["resume_from"] == str(out / "model")
    # A fresh optimizer ramps its rate up again instead of starting at the schedule's value.
    assert losses[0]["lr"] < 1e-3 / 10
    # Its checkpoint keeps the ramp's start, so a rerun from the checkpoint goes on ramping, and records
    # that its fresh glyph head is still catching up (one step does not bring it to GLYPH_HEAD_READY).
    progress = torch.load(again / "checkpoint.pt", weights_only=False)["progress"]
    assert progress["rewarm_from"] == 3 and progress["glyph_head_ready"] is False
    assert not [r for r in log if "glyph_head_ready" in r]


def test_a_run_from_files_of_another_mode_reads_tiles_and_keeps_its_mode(sft_run, tmp_path, capsys):
    """mode = "gundam" from base files: the step reads the page through its tiles (glyph targets on their
    30 x 20 cells, 903 placeholders), the towers start over on the new scale, and the run stays tiled."""
    tiled = tmp_path / "tiled"
    common = ["train", "sft", str(tiled), "--batch-size", "2", "--eval-every", "4", "--threads", "2"]
    gundam = write_recipe(tmp_path / "gundam.toml", **SMOKE, mode="gundam")
    resume = ["--resume-from", str(sft_run[0] / "model"), "--recipe", gundam]
    assert main([*common, *resume, "--steps", "4"]) == 0
    losses = [r for r in _log(tiled) if "loss" in r]
    assert [r["step"] for r in losses] == [4]
    assert losses[0]["glyph_loss"] > 0 and 0 < losses[0]["align_mass"] < 1
    evals = [r for r in _log(tiled) if "eval_seconds" in r]
    assert evals and isinstance(evals[0]["rows_gap"], float)
    settings = load_settings(tiled / "model")
    assert settings["processor_mode"] == "gundam"
    assert settings["progress"]["towers_ready"] is False and settings["progress"]["glyph_head_ready"] is True
    _, processor = load_model_files(tiled / "model")
    assert processor.image_processor.mode == "gundam"
    base = write_recipe(tmp_path / "base.toml", **SMOKE, mode="base")
    assert main([*common, "--steps", "5", "--recipe", base]) != 0
    assert "mode 'base': the run in" in capsys.readouterr().err


def test_training_only_parts_never_ship_with_the_model(sft_run):
    out = sft_run[0]
    model, _ = load_model_files(out / "model")
    saved = load_file(str(out / "model" / "model.safetensors"))
    fresh = checkpoint_layout(JinaOCRForConditionalGeneration(model.config).state_dict())
    assert set(saved) == set(fresh)
    config = json.loads((out / "model" / "config.json").read_text())
    assert not [key for key in config if "glyph" in key or "align" in key]


def test_mtp_smoke_run_trains_only_the_head(sft_run, tmp_path, monkeypatch, capsys):
    sft_out = sft_run[0]
    out = tmp_path / "mtp"
    args = ["train", "mtp", str(sft_out / "model"), str(out), "--pages", "3", "--held-out", "1"]
    assert main([*args, "--letter-words", "2"]) != 0
    assert "--letter-words 2.0: give a share from 0 to 1" in capsys.readouterr().err
    distilled_pages = []

    def distill_spy(model, processor, pages, *rest):
        distilled_pages.extend(pages)
        return distill(model, processor, pages, *rest)

    monkeypatch.setattr("jina_ocr.train.mtp.distill", distill_spy)
    args += ["--letter-words", "1", "--epochs", "1", "--batch-size", "2", "--max-new-tokens", "6"]
    assert main([*args, "--threads", "2"]) == 0
    # The head learns from pages whose drill words are random letters when asked to.
    last = len(STAGES) - 1
    lettered = [PageRecipe(letter_words=1.0).training_page(2, i, last).markdown for i in range(1, 4)]
    assert [page.markdown for page in distilled_pages] == lettered
    assert lettered != [PageRecipe().training_page(2, i, last).markdown for i in range(1, 4)]
    log = _log(out)
    assert [len(r["loss_per_depth"]) for r in log if "loss" in r] == [3]
    assert len([r for r in log if "held_out_accuracy_per_depth" in r]) == 2
    before = load_file(str(sft_out / "model" / "model.safetensors"))
    after = load_file(str(out / "model" / "model.safetensors"))
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("mtp_module.") for k in changed)
    # The files may be bundled: they record the head's options, not the training machine's folders.
    settings = (out / "model" / "jina_ocr_model.json").read_text(encoding="utf-8")
    assert '"epochs": 1' in settings and '"letter_words": 1.0' in settings and str(sft_out) not in settings
    # The distilled sequences are reused only for the same model and pages.
    distilled_pages.clear()
    assert main([*args, "--threads", "2"]) == 0
    assert distilled_pages == []
    assert main([*args, "--letter-words", "0", "--threads", "2"]) == 0
    plain = [PageRecipe().training_page(2, i, last).markdown for i in range(1, 4)]
    assert [page.markdown for page in distilled_pages] == plain
    again = [r["distilling_again"] for r in _log(out) if "distilling_again" in r]
    assert again == ["distill.pt was made with other letter_words"]


def test_mtp_head_from_starts_from_the_head_of_other_model_files(sft_run, tmp_path, capsys):
    """``--head-from`` gives the model the donor's head before training (with no epochs the written
    head is the donor's and everything else the model's own) and records the donor's step; donor files
    without a head, or with one of another shape, are refused by name."""
    model_files = sft_run[0] / "model"
    weights = load_file(str(model_files / "model.safetensors"))
    donor = tmp_path / "donor"
    shutil.copytree(model_files, donor)
    generator = torch.Generator().manual_seed(0)
    donor_weights = {
        k: v + torch.randn(v.shape, generator=generator).to(v.dtype) if k.startswith("mtp_module.") else v
        for k, v in weights.items()
    }
    save_file(donor_weights, str(donor / "model.safetensors"))
    out = tmp_path / "mtp"
    args = ["train", "mtp", str(model_files), str(out), "--pages", "3", "--held-out", "1", "--epochs", "0"]
    args += ["--max-new-tokens", "4", "--threads", "2"]
    assert main([*args, "--head-from", str(donor)]) == 0
    written = load_file(str(out / "model" / "model.safetensors"))
    assert any(k.startswith("mtp_module.") for k in written)
    for key, value in written.items():
        assert torch.equal(value, (donor_weights if key.startswith("mtp_module.") else weights)[key]), key
    assert load_settings(out / "model")["mtp"]["head_from_step"] == load_settings(donor)["progress"]["step"]

    model, processor = load_model_files(model_files)
    settings = load_settings(model_files)
    for name, change in (("headless", {"num_nextn_predict_layers": 0}), ("wider", {"intermediate_size": 40})):
        config = model.config.to_dict() | change
        other = JinaOCRForConditionalGeneration(type(model.config).from_dict(config))
        save_model_files(tmp_path / name, other, processor.tokenizer, settings)
    assert main([*args, "--head-from", str(tmp_path / "headless")]) != 0
    assert "headless: those model files have no FastMTP head" in capsys.readouterr().err
    assert main([*args, "--head-from", str(tmp_path / "wider")]) != 0
    assert re.search(
        "wider: its FastMTP head does not fit this model.*size mismatch", capsys.readouterr().err
    )


def test_distilled_states_are_each_pages_own_in_a_tiled_mode(sft_run, tmp_path):
    """In gundam mode a batch holds its tiles image after image, as many per page as its grid has: the
    states the head learns from must come from the page's own tiles. Checked against a forward on the
    page's share of the batch's tiles, cut here by hand, for pages of 2 and 6 tiles."""
    files = tmp_path / "tiled"
    shutil.copytree(sft_run[0] / "model", files)
    settings = load_settings(files)
    settings["processor_mode"] = "gundam"
    (files / "jina_ocr_model.json").write_text(json.dumps(settings), encoding="utf-8")
    model, processor = load_model_files(files)
    assert model.config.mtp_first_hidden == "post_norm"
    page = PageRecipe().training_page(2, 1, len(STAGES) - 1).image
    images = [page.crop((0, 0, page.width, page.height // 3)), page]
    sequences = distill(model, processor, [SimpleNamespace(image=image) for image in images], 2, 4)
    batch = processor.prepare_ocr_inputs(images)
    grids = batch["image_grids"].tolist()
    assert grids == [[2, 1], [2, 3]]
    first_tile = 0
    for row, ((cols, rows), sequence) in enumerate(zip(grids, sequences, strict=True)):
        tiles = batch["pixel_values_local"][first_tile : first_tile + cols * rows]
        first_tile += cols * rows
        prompt = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        assert sequence["ids"][: sequence["prompt_length"]].tolist() == prompt
        with torch.no_grad():
            state = model(
                input_ids=sequence["ids"][None],
                pixel_values=batch["pixel_values"][row : row + 1],
                pixel_values_local=tiles,
                image_grids=batch["image_grids"][row : row + 1],
            ).last_hidden_state[0]
        torch.testing.assert_close(sequence["hidden"], state)


def test_depth_weights_are_fastmtp_s():
    assert [round(w, 2) for w in depth_weights(3)] == [0.51, 0.31, 0.18]
    assert sum(depth_weights(5)) == pytest.approx(1.0)


def test_labels_cover_the_target_only():
    from training_helpers import GRID, NO_TILES

    collator = Collator(prompt=[5, 6, 7], pad_token_id=2, grid=GRID)
    glyphs = torch.full((4, 2, 6), -1)
    examples = [
        Example(1, torch.zeros(3, 4, 4), NO_TILES, GRID, [10, 11, 1], "ab", [0, 1, -1], glyphs),
        Example(2, torch.zeros(3, 4, 4), NO_TILES, GRID, [12, 1], "c", [3, -1], glyphs),
    ]
    batch = collator(examples)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 10, 11, 1], [5, 6, 7, 12, 1, 2]]
    assert batch["labels"].tolist() == [[-100, -100, -100, 10, 11, 1], [-100, -100, -100, 12, 1, -100]]
    assert batch["attention_mask"].tolist() == [[1] * 6, [1] * 5 + [0]]
    assert batch["token_cells"].tolist() == [[0, 1, -1], [3, -1, -1]]
    tiled = Example(3, torch.zeros(3, 4, 4), NO_TILES, ViewGrid(640, (2, 3)), [12, 1], "c", [3, -1], glyphs)
    with pytest.raises(ValueError, match="page 3 has the cells of .* every training page of a run must"):
        collator([examples[0], tiled])


def test_the_default_tokenizer_writes_one_token_per_character():
    tokenizer = train_tokenizer(CORPUS)
    text = "Hello, page 42: body text."
    assert len(tokenizer.encode(text, add_special_tokens=False)) == len(text)
    assert len(tokenizer) == BYTE_VOCAB_SIZE


def test_tokenizer_keeps_the_real_special_tokens_in_order():
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    assert [tokenizer.convert_tokens_to_ids(t) for t in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)] == [0, 1, 2]
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ADDED_SPECIAL_TOKENS]
    assert ids == sorted(ids) and ids[-1] == len(tokenizer) - 1
    text = "<table><tr><td>1</td></tr></table> ünïcödé"
    encoded = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.convert_tokens_to_ids("<td>") in encoded
    assert tokenizer.decode(encoded) == text


def test_character_error_rate():
    assert character_error_rate(["abc", "xyz"], ["abc", "xyz"]) == 0.0
    assert character_error_rate(["abd", ""], ["abc", "x"]) == pytest.approx(2 / 4)


def test_mtp_pairing_matches_the_drafter_convention():
    """Depth 1 entry j reads (x_{j+1}, h_j) at position j and is scored against x_{j+2}; depth 2 entry j
    reads (x_{j+2}, head state of depth 1 at j) at position j+1. Recomputed here entry by entry."""
    from small_config import SMALL

    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    torch.manual_seed(0)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL)).eval()
    ids = torch.tensor([[3, 9, 11, 12, 13, 14]])
    hidden = torch.randn(1, 6, SMALL["hidden_size"])
    targets = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 11, 12, 13, 14]])
    batch = collate([{"ids": ids[0], "prompt_length": 2, "hidden": hidden[0]}], pad_token_id=0)
    with torch.no_grad():
        losses, _, counted = mtp_losses(model, batch["ids"], batch["hidden"], batch["targets"], depths=2)
        head, embed, norm = model.mtp_module.heads[0], model.get_input_embeddings(), model.model.norm
        positions = torch.arange(5)[None]
        out1 = head(embed(ids[:, 1:6]), hidden[:, :5], positions)
        logits1 = model.logits(norm(out1))
        expected1 = torch.nn.functional.cross_entropy(logits1[0, :4], targets[0, 2:6])
        feedback = norm(out1) if model.config.mtp_feedback_hidden == "post_norm" else out1
        out2 = head(embed(ids[:, 2:6]), feedback[:, :4], positions[:, :4] + 1)
        expected2 = torch.nn.functional.cross_entropy(model.logits(norm(out2))[0, :3], targets[0, 3:6])
    assert counted == [4, 3]
    torch.testing.assert_close(losses[0], expected1)
    torch.testing.assert_close(losses[1], expected2)


def test_towers_stay_at_init_during_the_vision_warm_up_then_train(sft_run, tmp_path):
    """The run's first two steps (vision_warmup_steps = 2) leave SAM, CLIP and the projector exactly at
    their (rebuilt) initial values while the decoder moves; the resumed third step trains them."""
    out, _, _, after_warm_up, *_ = sft_run
    # The run's recipe: its drills set the projector.
    recipe = PageRecipe(dense_fraction=0.5, letter_words=0.5)
    init = checkpoint_layout(starting_model(SFTOptions(out=tmp_path, recipe=recipe))[0].state_dict())
    vision = [k for k in after_warm_up if k.split(".")[1] in VISION_MODULES]
    decoder = [k for k in after_warm_up if k.startswith("model.layers.")]
    assert vision and decoder
    assert all(torch.equal(after_warm_up[k], init[k]) for k in vision)
    assert not all(torch.equal(after_warm_up[k], init[k]) for k in decoder)
    trained = load_file(str(out / "model" / "model.safetensors"))
    assert not all(torch.equal(trained[k], after_warm_up[k]) for k in vision)


def test_the_towers_first_phase_trains_the_towers_alone_until_their_glyph_accuracy(tmp_path, monkeypatch):
    """With towers_first the decoder stays exactly at init while the towers move, the log holds only
    the glyph loss, and evaluations measure the towers; reaching the accuracy ends the phase, which the
    checkpoint records, and the next steps train the whole model."""
    out = tmp_path / "towers"
    towers = SMOKE | dict(dense_fraction=0.0, towers_first=1.01)
    recipe = write_recipe(tmp_path / "towers.toml", **towers)
    args = ["train", "sft", str(out), "--batch-size", "2", "--eval-every", "2", "--threads", "2"]
    assert main([*args, "--recipe", recipe, "--steps", "2"]) == 0
    recipe = PageRecipe(dense_fraction=0.5, letter_words=0.5)  # the run's: its drills set the projector
    init = checkpoint_layout(starting_model(SFTOptions(out=tmp_path, recipe=recipe))[0].state_dict())
    trained = load_file(str(out / "model" / "model.safetensors"))
    vision = [k for k in trained if k.split(".")[1] in VISION_MODULES]
    rest = [k for k in trained if k.split(".")[1] not in VISION_MODULES]
    assert vision and rest
    assert all(torch.equal(trained[k], init[k]) for k in rest)
    assert not all(torch.equal(trained[k], init[k]) for k in vision)
    log = _log(out)
    steps = [r for r in log if "glyph_loss" in r and "phase" not in r]
    assert [r["step"] for r in steps] == [1, 2] and not any("loss" in r for r in steps)
    assert [(r["step"], r["phase"]) for r in log if "phase" in r] == [(2, "towers")]
    assert 0 <= log[-1]["line_glyph_acc"] <= 1 and "line_cer" not in log[-1]

    # An accuracy at the threshold ends the phase at the next evaluation; the decoder trains after it.
    monkeypatch.setattr(_Trainer, "measure_glyphs", lambda self, stage: {"glyph_acc": 1.01})
    slower = write_recipe(tmp_path / "slower.toml", **towers, vision_lr_scale=0.5)
    assert main([*args, "--recipe", slower, "--steps", "6"]) == 0
    log = _log(out)
    assert [r["step"] for r in log if r.get("towers_ready")] == [4]
    assert [r["step"] for r in log if "loss" in r] == [5, 6]
    progress = torch.load(out / "checkpoint.pt", weights_only=False)["progress"]
    assert progress["towers_ready"] and progress["step"] == 6
    # The rerun's vision_lr_scale applies to the optimizer restored from the checkpoint.
    groups = torch.load(out / "checkpoint.pt", weights_only=False)["optimizer"]["param_groups"]
    assert sorted({g["peak_lr"] for g in groups}) == [5e-4, 1e-3]
    again = load_file(str(out / "model" / "model.safetensors"))
    assert not all(torch.equal(again[k], trained[k]) for k in rest)


def test_sigterm_stops_a_run_after_its_step_with_a_checkpoint(tmp_path):
    """A run whose process group gets SIGTERM (a machine going away) finishes the step in progress,
    checkpoints and exits 0: its DataLoader worker leaves the signal to the main process."""
    out = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "recipe.toml", log_every=1, max_target_tokens=16, workers=1, checkpoint_minutes=100
    )
    command = [sys.executable, "-m", "jina_ocr.cli", "train", "sft", str(out), "--recipe", recipe]
    command += ["--steps", "200", "--batch-size", "1", "--eval-every", "0", "--threads", "1"]
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL, "text": True, "start_new_session": True}
    with subprocess.Popen(command, **popen) as run:
        for line in run.stdout:
            if '"loss"' in line:
                break
        os.killpg(run.pid, signal.SIGTERM)  # the whole group, page-rendering worker included
        rest = run.stdout.read()
        assert run.wait(timeout=120) == 0
    stopped = [r for r in _log(out) if "stopped" in r]
    assert len(stopped) == 1 and stopped[0]["stopped"].startswith("SIGTERM received")
    progress = torch.load(out / "checkpoint.pt", weights_only=False)["progress"]
    assert progress["step"] == stopped[0]["step"] < 200
    assert "model files" in rest


FAILING_PAGES = """
from types import SimpleNamespace
from torch.utils.data import DataLoader
from jina_ocr.train.data import TrainingPageStream

class Failing(TrainingPageStream):
    def page(self, index):
        raise RuntimeError(f"page {index} cannot be made")

stream = Failing(SimpleNamespace(image_processor=None, tokenizer=None), 0, None, 0, 16)
for batch in DataLoader(stream, batch_size=1, num_workers=1):
    pass
"""


def test_a_run_whose_page_worker_fails_exits_with_the_error(tmp_path):
    """The worker ignores SIGTERM while pages come (the test above); once a page fails, the run's exit
    must still be able to end it, or the process prints the error and then waits forever."""
    script = tmp_path / "failing_pages.py"
    script.write_text(FAILING_PAGES)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "RuntimeError: page 0 cannot be made" in result.stderr


def test_a_run_stops_before_it_starts_when_the_synth_pages_cannot_be_made(tmp_path, monkeypatch, capsys):
    """The last stage draws synth pages hours into a run: a missing font or pdflatex is named at once."""
    from jina_ocr.synth import fonts, tex

    empty = tmp_path / "fonts.conf"
    empty.write_text('<?xml version="1.0"?>\n<fontconfig></fontconfig>\n')  # fontconfig with no fonts
    monkeypatch.setenv("FONTCONFIG_FILE", str(empty))
    fonts.face.cache_clear()  # faces found before would hide the empty configuration
    out = tmp_path / "run"
    assert main(["train", "sft", str(out), "--steps", "1", "--processes", "2"]) == 2
    assert re.search(
        r"training pages cannot be made here: font \w[\w ]+ \(\w+\) is not installed", capsys.readouterr().err
    )
    assert not out.exists()

    monkeypatch.undo()
    found = shutil.which
    monkeypatch.setattr(tex.shutil, "which", lambda name: None if name == "pdflatex" else found(name))
    PageRecipe(dense_fraction=0.0).check_synth_tools()  # plain synth pages need no TeX
    with pytest.raises(UserError, match="pdflatex was not found"):
        PageRecipe(dense_fraction=0.15).check_synth_tools()


def test_bundle_ships_bf16_files_with_a_card_and_only_replaces_a_worse_model(sft_run, tmp_path, capsys):
    out = sft_run[0]
    card = tmp_path / "card.md"
    card.write_text("# jina-ocr-tiny\n")
    into = tmp_path / "bundled"
    args = ["train", "bundle", str(out / "model"), "--card", str(card), "--into", str(into), "--pages", "1"]
    assert main(args) == 0
    weights = load_file(str(into / "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    assert (into / "README.md").read_text() == "# jina-ocr-tiny\n"
    settings = json.loads((into / "jina_ocr_model.json").read_text())
    assert settings["bundle"]["stage"] == "rows"
    assert set(settings["bundle"]["candidate"]) == {"cer", "clean_cer", "degraded_cer"}
    load_model_files(into)  # the bundled files load as model files
    # The same files again are not one point better than themselves: refused, the bundle left as it
    # was. (The bundled bf16 files, not the run's fp32 ones: on a model that reads nothing, rounding to
    # bf16 can move a page's CER by more than the point.)
    again = tmp_path / "again"
    shutil.copytree(into, again)
    capsys.readouterr()
    assert main(["train", "bundle", str(again), *args[3:]]) == 1
    assert "not one point better than the bundled model's" in capsys.readouterr().err
    assert (into / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()


def test_the_bundle_gate_reads_pages_that_no_training_evaluation_reads(tmp_path, capsys):
    """Runs are stopped and cooled down on their evaluation pages: a gate on them would favour the model
    picked there over one that reads better elsewhere."""
    from jina_ocr.train.bundle import GATE_SEED

    out = tmp_path / "run"
    recipe = write_recipe(tmp_path / "gate.toml", eval_seed=GATE_SEED)
    assert main(["train", "sft", str(out), "--recipe", recipe, "--steps", "1"]) == 2
    assert f"eval_seed {GATE_SEED} draws the pages of the bundle gate" in capsys.readouterr().err
    assert not out.exists()

    recipe, last = PageRecipe(), len(STAGES) - 1
    evaluated = {
        p.markdown for p in recipe.held_out_pages(last, SFTOptions.eval_seed, 4 * SFTOptions.eval_pages)
    }
    gate = [p.markdown for p in recipe.held_out_pages(last, GATE_SEED, 64)]
    assert len(set(gate)) == len(gate) and not evaluated.intersection(gate)


def test_a_checkpoint_whose_optimizer_names_no_parameters_is_refused_with_the_way_on(tmp_path):
    """Moments matched by position to another model's parameters would silently train with the wrong
    moments: such a checkpoint is refused, and the message says how to go on from the model files."""
    from jina_ocr.train.sft import restored_optimizer_state

    saved = {"state": {0: {"step": torch.tensor(1.0)}}, "param_groups": [{"params": [0], "lr": 1e-3}]}
    fresh = {"state": {}, "param_groups": [{"params": [0], "names": ["lm_head.weight"], "lr": 1e-3}]}
    message = f"{tmp_path / 'checkpoint.pt'}: its optimizer state names no parameters"
    with pytest.raises(UserError, match=re.escape(message) + f".*--resume-from {re.escape(str(tmp_path))}"):
        restored_optimizer_state(saved, fresh, tmp_path)


def test_the_decay_schedule_holds_the_peak_then_falls_linearly_to_the_final_rate(tmp_path):
    """``decay_steps``: warm-up, the peak until the last N steps, a straight line to ``min_lr_ratio``
    at ``--steps``, and the final rate after it; without it the cosine runs over the whole run."""
    from jina_ocr.train.sft import SFTOptions, learning_rate_factor

    options = SFTOptions(out=tmp_path, steps=1000, warmup=10, min_lr_ratio=0.1, decay_steps=200)
    factors = {
        step: learning_rate_factor(step, options) for step in (0, 9, 10, 500, 800, 850, 900, 1000, 1300)
    }
    assert factors[0] == pytest.approx(0.1) and factors[9] == 1.0
    assert factors[10] == factors[500] == factors[800] == 1.0
    assert factors[850] == pytest.approx(0.775) and factors[900] == pytest.approx(0.55)
    assert factors[1000] == pytest.approx(0.1) and factors[1300] == pytest.approx(0.1)
    cosine = SFTOptions(out=tmp_path, steps=1000, warmup=10, min_lr_ratio=0.1)
    assert learning_rate_factor(505, cosine) == pytest.approx(0.55)
    assert learning_rate_factor(800, cosine) < 0.3


def test_twenty_steps_on_one_batch_halve_its_loss(tmp_path):
    """The optimiser, its schedule and the training step of ``train sft`` must fit one fixed batch: a
    learning rate of zero, a dead schedule or a step that does not update the weights leaves the loss
    where it started."""
    from training_helpers import GRID, NO_TILES, PROMPT, small_trainee

    from jina_ocr.train.sft import learning_rate_factor, make_optimizer, train_step

    model, head, probes = small_trainee()
    generator = torch.Generator().manual_seed(1)
    glyphs = torch.full((4, 2, 6), -1)
    glyphs[0, 0, :3] = torch.tensor([10, 11, 12])
    examples = [
        Example(
            i,
            torch.randn(3, 128, 128, generator=generator),
            NO_TILES,
            GRID,
            torch.randint(8, 40, (12,), generator=generator).tolist() + [1],
            "",
            [0, 0, 1, 3] * 3 + [-1],
            glyphs,
        )
        for i in range(2)
    ]
    batch = Collator(PROMPT, 2, GRID)(examples)
    batch.pop("indices")
    options = SFTOptions(out=tmp_path, steps=20, warmup=2, lr=1e-2)
    optimizer = make_optimizer(model, head, options)
    autocast = torch.autocast("cpu", enabled=False)
    parts = [
        train_step(
            model,
            head,
            probes,
            dict(batch),
            optimizer,
            learning_rate_factor(step, options),
            options,
            autocast,
        )
        for step in range(20)
    ]
    with torch.no_grad():
        final = model(
            **{k: v for k, v in batch.items() if k not in ("token_cells", "cell_glyphs")}
        ).loss.item()
    assert final <= parts[0]["lm"] / 2, [p["lm"] for p in parts]
    assert parts[-1]["align"] < parts[0]["align"] and parts[-1]["glyph"] < parts[0]["glyph"]


def test_towers_from_glyphs_learn_from_the_glyph_loss_alone(tmp_path):
    """With towers_from_glyphs the towers' gradient is exactly that of the weighted glyph loss computed
    on its own, while the decoder still learns; without it the decoder's losses reach the towers too."""
    from training_helpers import page_batch, small_trainee

    from jina_ocr.train.supervision import glyph_loss
    from jina_ocr.train.vision import vision_parameters

    options = SFTOptions(out=tmp_path, glyph_weight=4.0)
    autocast = torch.autocast("cpu", enabled=False)

    def gradients(detach_visual: bool) -> tuple[list, list]:
        model, head, probes = small_trainee(detach_visual)
        loss, _ = supervised_losses(model, head, probes, page_batch(1), options, autocast)
        loss.backward()
        decoder = [p.grad for p in model.model.layers.parameters() if p.grad is not None]
        return [p.grad for p in vision_parameters(model)], decoder

    model, head, _ = small_trainee()
    batch = page_batch(1)
    loss, _ = glyph_loss(
        head(model.model.encode_views(batch["pixel_values"])), batch["cell_glyphs"], head.empty
    )
    (options.glyph_weight * loss).backward()
    expected = [p.grad for p in vision_parameters(model)]

    towers, decoder = gradients(detach_visual=True)
    assert decoder and any(g.abs().sum() > 0 for g in decoder)
    assert len(towers) == len(expected)
    for got, want in zip(towers, expected, strict=True):
        torch.testing.assert_close(got, want)
    towers, _ = gradients(detach_visual=False)
    assert not all(torch.allclose(got, want) for got, want in zip(towers, expected, strict=True))


def test_a_fresh_glyph_head_catching_up_leaves_the_towers_alone(tmp_path):
    """While a fresh glyph head catches up (``glyph_head_alone``) the glyph loss trains that head and
    reaches nothing else: with towers_from_glyphs the towers then get no gradient at all, in the
    towers-first phase too, while the decoder still learns from its own losses."""
    from training_helpers import page_batch, small_trainee

    from jina_ocr.train.vision import vision_parameters

    options = SFTOptions(out=tmp_path, glyph_weight=4.0)
    autocast = torch.autocast("cpu", enabled=False)
    for towers_only in (False, True):
        model, head, probes = small_trainee(detach_visual=True)
        loss, _ = supervised_losses(
            model, head, probes, page_batch(1), options, autocast, towers_only, glyph_head_alone=True
        )
        loss.backward()
        assert all(p.grad is None or not p.grad.any() for p in vision_parameters(model))
        assert all(p.grad is not None and p.grad.any() for p in head.parameters())
        decoder = [p.grad for p in model.model.layers.parameters() if p.grad is not None]
        assert not decoder if towers_only else any(g.any() for g in decoder)


def test_the_glyph_head_is_ready_once_its_running_accuracy_reaches_the_threshold():
    """The catch-up ends at the step where the running mean of the training glyph accuracy (smoothing
    0.1, from 0) first reaches GLYPH_HEAD_READY (0.5): after eight steps at 0.9, not after seven, and the
    log says so once."""
    from types import SimpleNamespace

    from jina_ocr.train.sft import Progress

    logged = []
    trainer = SimpleNamespace(progress=Progress(step=10, glyph_head_ready=False), glyph_acc=0.0)
    trainer.log = logged.append
    for step in range(1, 10):
        trainer.progress.step = 10 + step
        _Trainer._follow_glyph_head(trainer, {"glyph_correct": 9.0, "glyph_slots": 10.0})
        assert trainer.progress.glyph_head_ready is (step >= 8)
    assert logged == [{"step": 18, "glyph_head_ready": True}]


def test_compiled_towers_train_as_the_eager_ones_under_the_same_names(tmp_path):
    """compile_towers runs SAM and CLIP through the compiler and changes neither the loss, nor the
    towers' gradients, nor the parameter names that model files and checkpoints are written under."""
    from training_helpers import page_batch, small_trainee

    from jina_ocr.train.vision import compile_towers, vision_parameters

    options = SFTOptions(out=tmp_path, glyph_weight=4.0)
    autocast = torch.autocast("cpu", enabled=False)
    graphs = []

    def recording_backend(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    def step(compiled: bool):
        model, head, probes = small_trainee()
        if compiled:
            torch._dynamo.reset()
            compile_towers(model, backend=recording_backend)
        loss, _ = supervised_losses(model, head, probes, page_batch(1), options, autocast)
        loss.backward()
        return loss.detach(), [p.grad for p in vision_parameters(model)], list(model.state_dict())

    eager_loss, eager_grads, eager_names = step(compiled=False)
    loss, grads, names = step(compiled=True)
    torch._dynamo.reset()
    assert len(graphs) >= 2  # at least one graph per tower
    assert names == eager_names
    torch.testing.assert_close(loss, eager_loss)
    for got, want in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(got, want)
