"""Training: the smoke run of ``jina-ocr train sft`` / ``train mtp`` and the pieces whose rules matter
(label masking, the FastMTP pairing and loss weights, resumption, the special tokens of the tokenizer)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from jina_ocr.cli import main
from jina_ocr.tokenizer import ADDED_SPECIAL_TOKENS, BOS_TOKEN, EOS_TOKEN, PAD_TOKEN
from jina_ocr.train.data import IGNORE_INDEX, Collator, Example
from jina_ocr.train.evaluate import character_error_rate
from jina_ocr.train.mtp import collate, depth_weights, mtp_losses
from jina_ocr.train.sft import SFTOptions, starting_model
from jina_ocr.train.tokenizer import train_tokenizer
from jina_ocr.train.vision import VISION_MODULES

CORPUS = ["# A heading\n\nSome body text of a page.", "<table><tr><td>1</td></tr></table> and $x^2$"] * 5


def _log(folder):
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """Two steps of sft on two-page batches, then one more step resumed from the checkpoint."""
    out = tmp_path_factory.mktemp("train") / "sft"
    common = ["train", "sft", str(out), "--batch-size", "2", "--tokenizer-pages", "3", "--vocab-size", "400"]
    common += ["--eval-pages", "1", "--eval-every", "0", "--log-every", "1", "--max-target-tokens", "24"]
    common += ["--warmup", "1", "--threads", "2", "--workers", "0", "--vision-warmup-steps", "2"]
    common += ["--drill-ramp-pages", "4", "--drill-fraction", "0.5", "--dense-fraction", "0.5"]
    assert main([*common, "--steps", "2"]) == 0
    first = _log(out)
    first_weights = load_file(str(out / "model" / "model.safetensors"))
    assert main([*common, "--steps", "3"]) == 0
    return out, first, _log(out), first_weights


def test_sft_smoke_run_logs_loss_and_held_out_cer_and_resumes(sft_run):
    out, first, log, _ = sft_run
    losses = [r for r in log if "loss" in r]
    assert [r["step"] for r in losses] == [1, 2, 3]
    assert all(r["loss"] > 0 for r in losses)
    # The resumed step trains on the pages after those of the first two steps.
    assert losses[1]["pages"] == 4 and losses[2]["pages"] == 6
    evals = [r for r in log if "eval_cer" in r]
    assert [r["step"] for r in evals] == [2, 3] and all(r["eval_cer"] >= 0 for r in evals)
    assert all(isinstance(r["image_gap"], float) and r["eval_loss"] > 0 for r in evals)
    assert all(
        isinstance(r["drill_gap"], float) and r["drill_loss"] > 0 and r["drill_cer"] >= 0 for r in evals
    )
    assert len(first) < len(log)
    files = {p.name for p in (out / "model").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "jina_ocr_model.json"} <= files
    assert json.loads((out / "model" / "jina_ocr_model.json").read_text())["steps_trained"] == 3
    recipe = json.loads((out / "options.json").read_text())["recipe"]
    assert (recipe["drill_ramp_pages"], recipe["drill_fraction"], recipe["dense_fraction"]) == (4, 0.5, 0.5)


def test_mtp_smoke_run_trains_only_the_head(sft_run, tmp_path):
    sft_out = sft_run[0]
    out = tmp_path / "mtp"
    args = ["train", "mtp", str(sft_out / "model"), str(out), "--pages", "3", "--held-out", "1"]
    assert main([*args, "--epochs", "1", "--batch-size", "2", "--max-new-tokens", "6", "--threads", "2"]) == 0
    log = _log(out)
    assert [len(r["loss_per_depth"]) for r in log if "loss" in r] == [3]
    assert len([r for r in log if "held_out_accuracy_per_depth" in r]) == 2
    before = load_file(str(sft_out / "model" / "model.safetensors"))
    after = load_file(str(out / "model" / "model.safetensors"))
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("mtp_module.") for k in changed)


def test_depth_weights_are_fastmtp_s():
    assert [round(w, 2) for w in depth_weights(3)] == [0.51, 0.31, 0.18]
    assert sum(depth_weights(5)) == pytest.approx(1.0)


def test_labels_cover_the_target_only():
    collator = Collator(prompt=[5, 6, 7], pad_token_id=2)
    examples = [
        Example(1, torch.zeros(3, 4, 4), [10, 11, 1], "ab"),
        Example(2, torch.zeros(3, 4, 4), [12, 1], "c"),
    ]
    batch = collator(examples)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 10, 11, 1], [5, 6, 7, 12, 1, 2]]
    assert batch["labels"].tolist() == [[-100, -100, -100, 10, 11, 1], [-100, -100, -100, 12, 1, -100]]
    assert batch["attention_mask"].tolist() == [[1] * 6, [1] * 5 + [0]]


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
    """The run's first two steps (--vision-warmup-steps 2) leave SAM, CLIP and the projector exactly at
    their (rebuilt) initial values while the decoder moves; the resumed third step trains them."""
    out, _, _, after_warm_up = sft_run
    options = SFTOptions(out=tmp_path, tokenizer_pages=3, vocab_size=400)
    init = starting_model(options)[0].state_dict()
    vision = [k for k in after_warm_up if k.split(".")[1] in VISION_MODULES]
    decoder = [k for k in after_warm_up if k.startswith("model.layers.")]
    assert vision and decoder
    assert all(torch.equal(after_warm_up[k], init[k]) for k in vision)
    assert not all(torch.equal(after_warm_up[k], init[k]) for k in decoder)
    trained = load_file(str(out / "model" / "model.safetensors"))
    assert not all(torch.equal(trained[k], after_warm_up[k]) for k in vision)


def test_twenty_steps_on_one_batch_halve_its_loss(tmp_path):
    """The optimiser, its schedule and the training step of ``train sft`` must fit one fixed batch: a
    learning rate of zero, a dead schedule or a step that does not update the weights leaves the loss
    where it started (here 3.7 falls to about 1.3)."""
    from small_config import IMAGE, SMALL

    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
    from jina_ocr.train.sft import optimizer_and_schedule, train_step

    torch.manual_seed(0)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL)).train()
    generator = torch.Generator().manual_seed(1)
    examples = [
        Example(
            i, torch.randn(3, 128, 128, generator=generator), torch.randint(8, 40, (12,)).tolist() + [1], ""
        )
        for i in range(2)
    ]
    batch = Collator([3, 4, *[IMAGE] * 7, 5], pad_token_id=2)(examples)
    batch.pop("indices")
    options = SFTOptions(out=tmp_path, steps=20, warmup=2, lr=1e-2)
    optimizer, scheduler = optimizer_and_schedule(model, options)
    autocast = torch.autocast("cpu", enabled=False)
    losses = [train_step(model, batch, optimizer, scheduler, options.grad_clip, autocast) for _ in range(20)]
    with torch.no_grad():
        final = model(**batch).loss.item()
    assert final <= losses[0] / 2, losses
