"""Bad input to ``jina-ocr export``, ``push`` and ``train sft`` (found by a hostile-user review): each is
answered in one line naming the file or option and the problem, never with a traceback, and nothing
already on disk is lost: an export never deletes its source nor files it did not write, a run folder's
last good model files survive a failed run, and a crafted checkpoint runs no code."""

from __future__ import annotations

import builtins
import json
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants
from training_helpers import write_recipe

from jina_ocr.cli import main


def one_line_error(capsys, command: str) -> str:
    """The one line a refused command printed on stderr (no traceback), without its prefix."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "%|" not in line]  # progress bars
    assert "Traceback" not in err and len(lines) == 1, err
    prefix = f"jina-ocr {command}: error: "
    assert lines[0].startswith(prefix), err
    return lines[0][len(prefix) :]


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- export ---------------------------------------------------------------------------------------


@pytest.fixture
def parent_with_source(tiny_export, tmp_path):
    """``parent/src``, a copy of the tiny export, beside a file of the user's in ``parent``."""
    parent = tmp_path / "parent"
    shutil.copytree(tiny_export, parent / "src")
    (parent / "notes.txt").write_text("the user's own file\n")
    return parent, files_under(parent)


@pytest.mark.parametrize("out", ["parent", "parent/src", "parent/src/inner"])
def test_export_refuses_an_output_folder_that_is_the_source_or_holds_it(parent_with_source, capsys, out):
    parent, before = parent_with_source
    target = parent.parent / out
    status = main(["export", "--from", str(parent / "src"), "--overwrite", str(target)])
    message = one_line_error(capsys, "export")
    assert status == 2
    assert str(target) in message and "--from" in message
    assert files_under(parent) == before


def test_overwrite_refuses_a_folder_that_no_export_wrote(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work\n")
    status = main(["export", "--random", "--no-weights", "--overwrite", str(out)])
    message = one_line_error(capsys, "export")
    assert status == 2 and str(out) in message and "config.json" in message
    assert (out / "thesis.tex").read_text() == "years of work\n"


def test_overwrite_replaces_an_export_and_only_what_an_export_writes(tmp_path, capsys):
    out = tmp_path / "export"
    assert main(["export", "--random", "--no-weights", str(out)]) == 0
    (out / "NOTES.txt").write_text("added by hand\n")
    (out / "extra").mkdir()
    (out / "extra" / "data.bin").write_bytes(b"\x00\x01")
    assert main(["export", "--random", "--no-weights", "--seed", "1", "--overwrite", str(out)]) == 0
    assert (out / "NOTES.txt").read_text() == "added by hand\n"
    assert (out / "extra" / "data.bin").read_bytes() == b"\x00\x01"
    assert (out / "config.json").is_file()


def test_export_from_a_folder_whose_config_is_not_json(tiny_export, tmp_path, capsys):
    source = tmp_path / "broken"
    shutil.copytree(tiny_export, source)
    (source / "config.json").write_text("{not json")
    status = main(["export", "--from", str(source), "--no-weights", str(tmp_path / "out")])
    message = one_line_error(capsys, "export")
    assert status == 2 and str(source / "config.json") in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("under", [False, True])
def test_export_into_a_path_that_is_a_file(tmp_path, capsys, under):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me\n")
    out = blocker / "out" if under else blocker
    status = main(["export", "--random", "--no-weights", "--overwrite", str(out)])
    message = one_line_error(capsys, "export")
    assert status == 2 and str(blocker) in message and "not a folder" in message
    assert blocker.read_text() == "keep me\n"


def test_export_from_an_export_asks_nothing_and_reads_no_stdin(tiny_export, tmp_path, capsys, monkeypatch):
    """Transformers asks "run the custom code? [y/N]" on stdin when a config's ``auto_map`` makes it look
    for remote code; the loader runs this installation's classes and must never ask."""

    class NoStdin:
        def __getattr__(self, name):
            raise AssertionError(f"stdin was used ({name})")

    def no_input(prompt=""):
        raise AssertionError(f"asked on stdin: {prompt}")

    monkeypatch.setattr(builtins, "input", no_input)
    monkeypatch.setattr("sys.stdin", NoStdin())
    assert main(["export", "--from", str(tiny_export), str(tmp_path / "again")]) == 0
    captured = capsys.readouterr()
    assert "custom code" not in captured.out + captured.err
    assert (tmp_path / "again" / "model.safetensors").is_file()


# -- push -----------------------------------------------------------------------------------------


@pytest.fixture
def silent_endpoint(monkeypatch):
    """A loopback address that accepts connections and never answers, as this process's Hub."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:  # closed at the end of the test
                return

    threading.Thread(target=accept, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    yield endpoint
    server.close()
    for connection in held:
        connection.close()


def test_push_to_a_hub_that_never_answers_times_out_in_one_line(tiny_export, silent_endpoint, capsys):
    started = time.monotonic()
    status = main(["push", str(tiny_export), "user/silent", "--token", "hf_x", "--timeout", "1"])
    elapsed = time.monotonic() - started
    message = one_line_error(capsys, "push")
    assert status == 2 and silent_endpoint in message and "--timeout" in message
    assert elapsed < 30


def test_push_timeout_must_be_a_positive_number(tiny_export, capsys):
    assert main(["push", str(tiny_export), "user/x", "--timeout", "nan"]) == 2
    assert "--timeout nan" in one_line_error(capsys, "push")


# -- train sft ------------------------------------------------------------------------------------

SMOKE = dict(eval_pages=1, log_every=1, max_target_tokens=24, warmup=1, workers=0)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A run folder after one step of ``train sft`` (model/, checkpoint.pt, log.jsonl), and its recipe."""
    root = tmp_path_factory.mktemp("hardening-run")
    recipe = write_recipe(root / "smoke.toml", **SMOKE)
    out = root / "run"
    assert main(["train", "sft", str(out), "--recipe", recipe, "--steps", "1", "--batch-size", "1"]) == 0
    return out, recipe


@pytest.fixture
def run_copy(trained_run, tmp_path):
    out, recipe = trained_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    return copy, ["train", "sft", str(copy), "--recipe", recipe, "--batch-size", "1", "--steps", "2"]


def _foreign(path: Path) -> None:
    torch.save({"weights": torch.zeros(3)}, path)


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is no checkpoint at all\n" * 10)


def _wrong_model(path: Path) -> None:
    state = torch.load(path, weights_only=True)
    state["model"] = {"lm_head.weight": torch.zeros(2, 2)}
    torch.save(state, path)


@pytest.mark.parametrize("damage", [_garbage, _truncated, _foreign, _wrong_model])
def test_a_damaged_or_foreign_checkpoint_is_refused_in_one_line(run_copy, capsys, damage):
    out, args = run_copy
    damage(out / "checkpoint.pt")
    before = files_under(out)
    status = main(args)
    message = one_line_error(capsys, "train")
    assert status == 2 and str(out / "checkpoint.pt") in message
    assert files_under(out) == before


def test_an_optimizer_state_of_the_older_format_keeps_its_own_refusal(run_copy, capsys):
    out, args = run_copy
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    for group in state["optimizer"]["param_groups"]:
        del group["names"]
    torch.save(state, out / "checkpoint.pt")
    assert main(args) == 2
    assert "its optimizer state names no parameters" in one_line_error(capsys, "train")


def test_a_run_folder_without_its_model_files_is_refused_in_one_line(run_copy, capsys):
    out, args = run_copy
    shutil.rmtree(out / "model")
    status = main(args)
    message = one_line_error(capsys, "train")
    assert status == 2 and str(out / "model") in message


def test_an_unknown_device_is_refused_in_one_line(tmp_path, capsys):
    assert main(["train", "sft", str(tmp_path / "run"), "--device", "banana"]) == 2
    assert one_line_error(capsys, "train").startswith("--device banana: ")
    recipe = write_recipe(tmp_path / "r.toml", device="banana")
    assert main(["train", "sft", str(tmp_path / "run"), "--recipe", recipe]) == 2
    assert one_line_error(capsys, "train").startswith(f'{recipe}: device = "banana": ')
    assert not (tmp_path / "run").exists()


class _Trap:
    """Unpickled, it creates the file ``marker``: what a crafted checkpoint could do with any code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_crafted_checkpoint_runs_no_code(run_copy, tmp_path, capsys):
    out, args = run_copy
    marker = tmp_path / "pwned"
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    state["progress"] = _Trap(marker)
    torch.save(state, out / "checkpoint.pt")
    status = main(args)
    message = one_line_error(capsys, "train")
    assert status == 2 and str(out / "checkpoint.pt") in message
    assert not marker.exists()


@pytest.mark.parametrize(
    ("flags", "settings", "shown"),
    [
        (["--lr", "nan"], {}, "--lr nan: give a finite number"),
        (["--lr", "inf"], {}, "--lr inf: give a finite number"),
        ([], {"lr": float("nan")}, "lr = NaN: give a finite number"),
        ([], {"glyph_weight": float("inf")}, "glyph_weight = Infinity: give a finite number"),
    ],
)
def test_non_finite_numbers_are_refused_in_one_line(tmp_path, capsys, flags, settings, shown):
    args = ["train", "sft", str(tmp_path / "run"), *flags]
    if settings:
        recipe = tmp_path / "r.toml"
        recipe.write_text("".join(f"{k} = {'nan' if v != v else 'inf'}\n" for k, v in settings.items()))
        args += ["--recipe", str(recipe)]
    assert main(args) == 2
    assert shown in one_line_error(capsys, "train")
    assert not (tmp_path / "run").exists()


def test_mtp_refuses_a_non_finite_rate(tmp_path, capsys):
    assert main(["train", "mtp", str(tmp_path / "model"), str(tmp_path / "out"), "--lr", "nan"]) == 2
    assert "--lr nan: give a finite number" in one_line_error(capsys, "train")


def _strict_json(line: str) -> dict:
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def test_a_run_whose_loss_is_not_finite_stops_and_keeps_the_last_good_model(run_copy, capsys):
    """A rate of 1e30 throws the weights out of range at the first step, so the next loss is not
    finite: the run stops in one line, and the model files and checkpoint stay those of the good step."""
    out, args = run_copy
    before = files_under(out)
    args[args.index("--steps") + 1] = "4"
    status = main([*args, "--lr", "1e30", "--eval-every", "0"])
    message = one_line_error(capsys, "train")
    assert status == 2 and "not finite" in message and str(out / "model") in message
    for name in ("model/model.safetensors", "checkpoint.pt"):
        assert (out / name).read_bytes() == before[name]
    for line in (out / "log.jsonl").read_text().splitlines():
        _strict_json(line)
