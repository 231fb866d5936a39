"""The supported Transformers range is enforced where users meet it: at import of the remote code."""

from __future__ import annotations

import warnings

import pytest
import transformers

from jina_ocr.remote_code.compat_jina_ocr import SUPPORTED_RANGE, check_transformers_version, resolve_cache


def test_too_old_a_release_is_refused_with_the_range_in_the_message():
    with pytest.raises(ImportError, match=r"transformers >=5\.17,<5\.26.*5\.16\.1 is installed"):
        check_transformers_version("5.16.1")


def test_a_newer_release_warns_and_the_supported_ones_are_silent():
    with pytest.warns(UserWarning, match="tested with transformers >=5.17,<5.26; 5.30.0 is newer"):
        check_transformers_version("5.30.0")
    with pytest.warns(UserWarning, match="5.26.0.dev0 is newer"):
        check_transformers_version("5.26.0.dev0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for version in ("5.17.0", "5.19.0", "5.24.0", "5.25.0", transformers.__version__):
            check_transformers_version(version)


def test_range_is_declared_the_same_in_pyproject():
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"transformers{SUPPORTED_RANGE}"' in pyproject


def test_the_cache_is_accepted_under_either_name_but_not_twice():
    marker = object()
    assert resolve_cache(marker, None) is marker and resolve_cache(None, marker) is marker
    with pytest.raises(ValueError, match="not both"):
        resolve_cache(object(), object())
