"""Data-parallel ``train sft`` (``--processes``): the processes average their gradients, share the pages
of every batch, follow process 0's decisions, and leave a run that one process can go on with."""

from __future__ import annotations

import json
import re

import pytest
import torch
from training_helpers import page_batch, small_trainee, write_recipe

from jina_ocr.cli import main
from jina_ocr.errors import UserError
from jina_ocr.train.data import TrainingPageStream
from jina_ocr.train.parallel import run_processes
from jina_ocr.train.sft import SFTOptions, _Trainer, supervised_losses, train_sft, train_step


def _sgd(model, head):
    """Plain SGD at rate 1: the update is minus the gradient, so the weights show the gradient itself."""
    return torch.optim.SGD([{"params": [*model.parameters(), *head.parameters()], "peak_lr": 1.0}], lr=1.0)


OPTIONS = dict(grad_clip=1e9)  # no clipping: the averaging is under test


def _one_step_on_own_page(group, folder):
    """Each process: one SGD step of ``train_step`` on its own page, then its weights and an average of
    gradients of which process 0 lacks one."""
    torch.set_num_threads(1)
    model, head, probes = small_trainee()
    options = SFTOptions(out=folder, **OPTIONS)
    autocast = torch.autocast("cpu", enabled=False)
    train_step(
        model,
        head,
        probes,
        page_batch(group.rank),
        _sgd(model, head),
        1.0,
        options,
        autocast,
        processes=group,
    )
    present, absent = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))
    present.grad = torch.full((2,), 1.0 + 2 * group.rank)
    if group.rank == 1:
        absent.grad = torch.full((3,), 4.0)
    group.average_gradients([present, absent])
    torch.save(
        {
            "weights": {**model.state_dict(), **head.state_dict(prefix="head.")},
            "grads": [present.grad, absent.grad],
        },
        folder / f"rank{group.rank}.pt",
    )


def test_two_processes_take_the_step_of_their_mean_gradient(tmp_path):
    run_processes(2, _one_step_on_own_page, tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    # Independently: each page's gradient in one process, their mean, one SGD step by hand.
    model, head, probes = small_trainee()
    start = {**model.state_dict(), **head.state_dict(prefix="head.")}
    start = {key: value.clone() for key, value in start.items()}
    named = {**dict(model.named_parameters()), **dict(head.named_parameters(prefix="head"))}
    mean = {name: torch.zeros_like(p) for name, p in named.items()}
    for page in range(2):
        loss, _ = supervised_losses(
            model,
            head,
            probes,
            page_batch(page),
            SFTOptions(out=tmp_path, **OPTIONS),
            torch.autocast("cpu", enabled=False),
        )
        model.zero_grad(), head.zero_grad()
        loss.backward()
        for name, parameter in named.items():
            if parameter.grad is not None:  # the FastMTP head, say, has no part in this loss
                mean[name] += parameter.grad / 2
    for name in named:
        for rank in ranks:
            torch.testing.assert_close(rank["weights"][name], start[name] - mean[name], rtol=1e-5, atol=1e-6)
    for key, value in ranks[0]["weights"].items():
        assert torch.equal(value, ranks[1]["weights"][key]), key  # the processes stay identical
    # A gradient one process lacks counts as zero there: (1 + 3) / 2 and (0 + 4) / 2, in both.
    for rank in ranks:
        assert rank["grads"][0].tolist() == [2.0, 2.0] and rank["grads"][1].tolist() == [2.0, 2.0, 2.0]


def _log(folder):
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


SMALL_RUN = dict(eval_pages=1, log_every=1, max_target_tokens=16, warmup=1, workers=0, advance_cer=[100, 100])


def _common(folder, **settings) -> list[str]:
    """The flags of a small run whose recipe, written into ``folder``, holds ``settings`` too."""
    recipe = write_recipe(folder / "recipe.toml", **SMALL_RUN, **settings)
    return ["--recipe", recipe, "--batch-size", "4", "--threads", "1"]


def test_a_two_process_run_shares_each_batch_follows_process_0_and_resumes_in_one(tmp_path):
    out = tmp_path / "run"
    common = _common(tmp_path)
    args = ["train", "sft", str(out), *common, "--processes", "2", "--eval-every", "1", "--steps", "2"]
    assert main(args) == 0
    log = _log(out)
    losses = [r for r in log if "loss" in r]
    # One record per step (process 0 logs alone), the batch's four pages counted once each.
    assert [(r["step"], r["pages"], r["stage"]) for r in losses] == [(1, 4, "line"), (2, 8, "rows")]
    # Process 0's evaluation at step 1 passed the stage: both processes drew step 2 from the next one.
    assert [(r["step"], r["advanced_to"]) for r in log if "advanced_to" in r] == [(1, "rows"), (2, "page")]
    progress = torch.load(out / "checkpoint.pt", weights_only=False)["progress"]
    assert (progress["step"], progress["next_index"], progress["stage"]) == (2, 9, "page")

    # The logged loss of step 1 is the mean of the losses of pages 1 and 3 (process 0's share) and of
    # pages 2 and 4 (process 1's) under the starting weights, from which a one-process trainer of the
    # same options also starts.
    options = SFTOptions(out=tmp_path / "solo", eval_pages=1, max_target_tokens=16, workers=0)
    solo = _Trainer(options)
    stream = TrainingPageStream(solo.processor, 0, options.recipe, 1, 16)
    shares = []
    for pages in ((1, 3), (2, 4)):
        batch = solo.collator([stream.example(index, stream.page(index)) for index in pages])
        batch.pop("indices")
        shares.append(solo.losses(batch)[1]["lm"])
    assert losses[0]["loss"] == pytest.approx(sum(shares) / 2, abs=2e-4)
    assert abs(shares[0] - shares[1]) > 1e-3  # so one share alone would not pass

    # One process goes on from the two processes' checkpoint.
    assert main(["train", "sft", str(out), *common, "--eval-every", "0", "--steps", "3"]) == 0
    last = [r for r in _log(out) if "loss" in r][-1]
    assert (last["step"], last["pages"], last["stage"]) == (3, 12, "page")


def test_a_failing_process_ends_the_others_with_a_clear_error(tmp_path, capsys):
    # Process 0 rejects the option while building the run; process 1, waiting for it, is ended.
    args = ["train", "sft", str(tmp_path / "run"), *_common(tmp_path, align_layers=[9]), "--processes", "2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert re.search(r"training process \d of 2 failed", err)


def test_processes_must_divide_the_batch(tmp_path):
    options = SFTOptions(out=tmp_path, batch_size=3, processes=2)
    with pytest.raises(UserError, match="divides the batch size 3"):
        train_sft(options)
