"""Recipe files of ``jina-ocr train sft``: the bundled one reproduces the bundled model's run, the flags
override a recipe, and a key that is no setting, or a value of the wrong type or range, is refused in
one line that names the file and the key. No test here trains: ``train_sft`` is replaced by a spy."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from training_helpers import write_recipe

import jina_ocr.train.sft as sft
from jina_ocr.cli import main
from jina_ocr.errors import UserError
from jina_ocr.model_files import load_settings
from jina_ocr.models import BUNDLED
from jina_ocr.train.recipe import PageRecipe
from jina_ocr.train.recipe_file import (
    KEYS,
    PAGE_KEYS,
    RECIPES,
    find_recipe,
    read_recipe,
    sft_options,
    tomllib,
)
from jina_ocr.train.sft import SFTOptions

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def options_of(monkeypatch, tmp_path):
    """Runs ``jina-ocr train sft`` with the given arguments and returns the options it would train with."""
    given = []

    def spy(options):
        given.append(options)
        return options.out / "model"

    monkeypatch.setattr(sft, "train_sft", spy)

    def run(*args: str) -> SFTOptions:
        assert main(["train", "sft", str(tmp_path / "run"), *args]) == 0
        return given.pop()

    return run


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # the one line, no traceback
    return err


def test_every_recipe_key_is_an_option_of_a_run():
    """A key that maps to no field would be accepted from a file and then fail, or be dropped, later."""
    options = {field.name for field in dataclasses.fields(SFTOptions)}
    pages = {field.name for field in dataclasses.fields(PageRecipe)}
    assert set(KEYS) == (options - {"out", "init", "resume_from", "recipe"}) | set(PAGE_KEYS)
    assert set(PAGE_KEYS) <= pages


def test_the_bundled_recipe_reproduces_the_settings_of_the_bundled_model_s_run():
    """Every setting the bundled model's files record of its run (their "sft" block) is the recipe's,
    and nothing else the recipe sets differs from it."""
    recipe = find_recipe("jina-ocr-tiny")
    assert recipe == RECIPES / "jina-ocr-tiny.toml"
    options = sft_options(Path("run"), read_recipe(recipe))
    record = load_settings(BUNDLED)["sft"]
    compared = 0
    for key in KEYS:
        source = record["recipe"] if key in PAGE_KEYS else record
        if key not in source:
            continue  # machine settings (threads, processes, ...), which the record leaves out
        expected = source[key]
        if key == "mode":  # the record keeps the run's files' mode in its page recipe
            expected = expected or record["recipe"]["mode"]
        actual = getattr(options.recipe if key in PAGE_KEYS else options, key)
        assert (list(actual) if isinstance(actual, tuple) else actual) == expected, key
        compared += 1
    assert compared >= 30


def test_the_bundled_recipe_ships_with_the_package():
    with (ROOT / "pyproject.toml").open("rb") as handle:
        package_data = tomllib.load(handle)["tool"]["setuptools"]["package-data"]["jina_ocr.train"]
    train = ROOT / "jina_ocr" / "train"
    shipped = {path for pattern in package_data for path in train.glob(pattern)}
    assert set(RECIPES.glob("*.toml")) <= shipped and shipped


def test_flags_override_the_recipe_and_unset_keys_keep_their_defaults(options_of, tmp_path):
    recipe = write_recipe(
        tmp_path / "recipe.toml", steps=100, lr=5e-4, seed=3, bf16=True, letter_words=0.25, warmup=7
    )
    options = options_of("--recipe", recipe, "--steps", "7", "--no-bf16", "--batch-size", "4")
    assert (options.steps, options.bf16, options.batch_size) == (7, False, 4)
    assert (options.lr, options.seed, options.warmup, options.recipe.letter_words) == (5e-4, 3, 7, 0.25)
    assert options.eval_every == SFTOptions.eval_every and options.recipe.advance_cer == (0.25, 0.15)
    assert options_of("--recipe", recipe).bf16 is True
    defaults = options_of()
    assert defaults.steps == SFTOptions.steps and defaults.recipe == PageRecipe()


def test_a_recipe_is_found_by_path_or_bundled_name(options_of, tmp_path, capsys):
    assert options_of("--recipe", "jina-ocr-tiny").lr == 3e-4
    assert options_of("--recipe", str(RECIPES / "jina-ocr-tiny.toml")).decay_steps == 1000
    assert main(["train", "sft", str(tmp_path / "run"), "--recipe", "jina-ocr-huge"]) == 2
    assert (
        "--recipe jina-ocr-huge: no such file, nor a bundled recipe (bundled: jina-ocr-tiny, jina-ocr-tiny-robust)"
    ) in _one_line_error(capsys)
    robust = options_of("--recipe", "jina-ocr-tiny-robust")
    assert (robust.recipe.degraded, robust.seed, robust.steps) == (0.5, 16, 48534)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("stepz = 5", "unknown key 'stepz'; did you mean 'steps'?"),
        ("row_phase = 1.0", "unknown key 'row_phase'"),
        ('steps = "many"', 'steps = "many": give an integer'),
        ("steps = 8000.0", "steps = 8000.0: give an integer"),
        ("bf16 = 1", "bf16 = 1: give true or false"),
        ("lr = true", "lr = true: give a number"),
        ('align_layers = [1, "2"]', 'align_layers = [1, "2"]: give a list of integers'),
        ("drill_fonts = 'helv'", 'drill_fonts = "helv": give a list of strings'),
        ("[schedule]\nsteps = 5", "unknown key 'schedule'"),
    ],
)
def test_an_unknown_or_wrongly_typed_key_is_refused_in_one_line(tmp_path, capsys, line, message):
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(line + "\n")
    assert main(["train", "sft", str(tmp_path / "run"), "--recipe", str(recipe)]) == 2
    assert f"jina-ocr train: error: {recipe}: {message}" in _one_line_error(capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('drill_fonts = ["helv", "comic"]', "choose one or more of helv, tiro, cour"),
        ('stage = "chapter"', "choose from line, rows, page"),
        ('mode = "huge"', "choose from"),
        ("advance_cer = [0.2]", "give 2 values, one per stage before the last (line, rows)"),
        ("letter_words = 1.5", "give a share from 0 to 1"),
        ("repeat_words = -0.5", "give a share from 0 to 1"),
        ("near_copies = 2", "give a share from 0 to 1"),
        ("degraded = 1.5", "give a share from 0 to 1"),
        ("decay_steps = 0", "give at least 1"),
    ],
)
def test_a_value_out_of_its_range_is_refused_by_key(tmp_path, line, message):
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(line + "\n")
    with pytest.raises(UserError) as refused:
        read_recipe(recipe)
    key, shown = line.split(" = ")
    assert str(refused.value).startswith(f"{recipe}: {key} = {json.dumps(json.loads(shown))}: {message}")


def test_flag_values_are_checked_by_flag(tmp_path, capsys):
    assert main(["train", "sft", str(tmp_path / "run"), "--steps", "0"]) == 2
    assert "--steps 0: give at least 1" in _one_line_error(capsys)
    broken = tmp_path / "broken.toml"
    broken.write_text("steps = \n")
    assert main(["train", "sft", str(tmp_path / "run"), "--recipe", str(broken)]) == 2
    assert f"{broken}: not a TOML file" in _one_line_error(capsys)
    assert not (tmp_path / "run").exists()
