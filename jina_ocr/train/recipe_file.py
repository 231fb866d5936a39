"""Recipe files: the settings of a ``jina-ocr train sft`` run, in one TOML file.

A run has some forty settings (schedule, losses, curriculum, training pages, machine). Spelt out as
flags, every segment of a long run repeated a command of twenty of them, and a segment that left one
out went on at its default without a word. A recipe file holds them as ``key = value`` lines whose keys
are the fields of :class:`~jina_ocr.train.sft.SFTOptions` and of the page distribution
:class:`~jina_ocr.train.recipe.PageRecipe` that a run may set (:data:`PAGE_KEYS`); a key the file leaves
out keeps its default, and the few flags of the command line override the file. ``out``, ``init`` and
``resume_from`` are not keys: they name folders of the machine a run is on, not how it trains.

Every key is checked as the file is read, because a misspelt key would otherwise leave its setting at
the default for hours of training: a key that is no setting, or a value of the wrong type or out of its
range, is refused with one line naming the file and the key.

The recipe of the bundled jina-ocr-tiny ships in ``recipes/`` (:data:`RECIPES`); ``--recipe`` takes
its name as well as a path.
"""

from __future__ import annotations

import difflib
import json
import math
import sys
import types
import typing
from pathlib import Path
from typing import Any

import torch

from jina_ocr.errors import UserError
from jina_ocr.remote_code.processing_jina_ocr import MODES
from jina_ocr.train.drills import BODY_FONTS, STAGES
from jina_ocr.train.recipe import PageRecipe
from jina_ocr.train.sft import SFTOptions

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

RECIPES = Path(__file__).parent / "recipes"
FOLDERS = ("out", "init", "resume_from")
PAGE_KEYS = (
    "dense_fraction",
    "drill_fonts",
    "advance_cer",
    "letter_words",
    "repeat_words",
    "near_copies",
    "degraded",
)
"""The fields of :class:`PageRecipe` a recipe sets; its font sizes, dpi and mode are those of every run."""

_OPTION_TYPES = typing.get_type_hints(SFTOptions)
_PAGE_TYPES = typing.get_type_hints(PageRecipe)
KEYS: dict[str, Any] = {
    **{key: kind for key, kind in _OPTION_TYPES.items() if key not in (*FOLDERS, "recipe")},
    **{key: _PAGE_TYPES[key] for key in PAGE_KEYS},
}
"""Every recipe key and its type."""

SHARES = ("dense_fraction", "letter_words", "repeat_words", "near_copies", "degraded")
AT_LEAST_ONE = ("steps", "batch_size", "decay_steps")


class _NotOfType(Exception):
    """A value that is not of its key's type."""


def _optional(kind: Any) -> Any:
    """``kind`` without ``None``: TOML has no null, so an optional setting is either given or left out."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        (kind,) = [each for each in typing.get_args(kind) if each is not type(None)]
    return kind


def _typed(value: Any, kind: Any) -> Any:
    """``value`` as ``kind`` (a TOML list as a tuple, an integer as a float where a number is asked for)."""
    kind = _optional(kind)
    if typing.get_origin(kind) is tuple:
        if not isinstance(value, list):
            raise _NotOfType
        return tuple(_typed(each, typing.get_args(kind)[0]) for each in value)
    if kind is float and type(value) is int:
        return float(value)
    if type(value) is not kind:  # so that true is no integer
        raise _NotOfType
    return value


_NAMES = {
    bool: ("true or false", "booleans"),
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
}
"""How an error asking for a value of each type says it: one, and a list of them."""


def _described(kind: Any) -> str:
    """What a value of ``kind`` is, as the error asking for one says it."""
    kind = _optional(kind)
    if typing.get_origin(kind) is tuple:
        return f"a list of {_NAMES[typing.get_args(kind)[0]][1]}"
    return _NAMES[kind][0]


def _refusal(key: str, value: Any) -> str | None:
    """Why ``value`` (of the right type) is no valid ``key``, or None when it is.

    No number may be NaN or infinite (TOML and Python's float() both read ``nan`` and ``inf``): a NaN
    rate trains every weight to NaN and the run still ends as if it went well."""
    numbers = value if isinstance(value, tuple) else (value,)
    if any(isinstance(each, float) and not math.isfinite(each) for each in numbers):
        return "give a finite number"
    if key == "device" and not _is_device(value):
        return "give a torch device, such as cpu, cuda, cuda:1 or mps"
    if key in SHARES and not 0 <= value <= 1:
        return "give a share from 0 to 1"
    if key in AT_LEAST_ONE and value < 1:
        return "give at least 1"
    if key == "stage" and value not in STAGES:
        return f"choose from {', '.join(STAGES)}"
    if key == "mode" and value not in MODES:
        return f"choose from {', '.join(MODES)}"
    if key == "drill_fonts" and (not value or set(value) - set(BODY_FONTS)):
        return f"choose one or more of {', '.join(BODY_FONTS)}"
    if key == "advance_cer" and len(value) != len(STAGES) - 1:
        return f"give {len(STAGES) - 1} values, one per stage before the last ({', '.join(STAGES[:-1])})"
    return None


def _is_device(name: str) -> bool:
    """Whether torch reads ``name`` as a device (not whether this machine has it)."""
    try:
        torch.device(name)
    except RuntimeError:
        return False
    return True


def checked(key: str, value: Any, recipe: Path | None = None) -> Any:
    """``value`` of setting ``key`` in its type, from the recipe file ``recipe`` or else from the
    command line's flag; a :class:`UserError` naming the file or flag and the key when it is no valid
    ``key``."""
    shown = json.dumps(value, default=str)
    where = f"{recipe}: {key} = {shown}" if recipe is not None else f"--{key.replace('_', '-')} {value}"
    try:
        typed = _typed(value, KEYS[key])
    except _NotOfType:
        raise UserError(f"{where}: give {_described(KEYS[key])}") from None
    reason = _refusal(key, typed)
    if reason is not None:
        raise UserError(f"{where}: {reason}")
    return typed


def bundled_recipes() -> list[str]:
    """The names of the recipes that ship with the package."""
    return sorted(path.stem for path in RECIPES.glob("*.toml"))


def find_recipe(name: str) -> Path:
    """The recipe file ``name`` names: a path, or else the name of a bundled recipe."""
    path = Path(name)
    if path.is_file():
        return path
    bundled = RECIPES / f"{name}.toml"
    if path.name == name and bundled.is_file():
        return bundled
    raise UserError(
        f"--recipe {name}: no such file, nor a bundled recipe (bundled: {', '.join(bundled_recipes())})"
    )


def read_recipe(path: Path) -> dict[str, Any]:
    """The settings of recipe file ``path``, each checked and in its type."""
    try:
        entries = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(f"{path}: cannot be read ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path}: not a TOML file ({error})") from None
    settings = {}
    for key, value in entries.items():
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "; docs/training.md lists the keys"
            raise UserError(f"{path}: unknown key {key!r}{hint}")
        settings[key] = checked(key, value, path)
    return settings


def sft_options(
    out: Path, settings: dict[str, Any], init: Path | None = None, resume_from: Path | None = None
) -> SFTOptions:
    """The options of the run in ``out`` whose checked ``settings`` (recipe keys) are given; the others
    keep their defaults."""
    pages = {key: value for key, value in settings.items() if key in PAGE_KEYS}
    rest = {key: value for key, value in settings.items() if key not in PAGE_KEYS}
    return SFTOptions(out=out, init=init, resume_from=resume_from, recipe=PageRecipe(**pages), **rest)
