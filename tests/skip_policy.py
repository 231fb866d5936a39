"""Under ``CI=true`` a skipped test is a failed test, except for a short allow-list.

Tests skip themselves when a tool they need is missing (Tesseract, Chromium, KaTeX, pdfTeX, RapidOCR,
accelerate, the oldest-Transformers interpreter). On a developer's machine that is a convenience; in CI
it would let a broken set-up pass unnoticed, so ``.ci/run`` sets ``CI=true`` and this plugin turns
every such skip, at collection or at run time, into a failure that names the reason.
"""

from __future__ import annotations

import importlib.util
import os

import pytest


def _vllm_missing() -> bool:
    return importlib.util.find_spec("vllm") is None


ALLOWED_IN_CI = {
    "tests/test_vllm.py": (
        _vllm_missing,
        "the vLLM tests run in their own CI step (.ci/vllm.sh), in an environment with vLLM; "
        "there they must not skip",
    ),
}
"""Test files that may skip under CI, each with the condition under which it may and why."""


def strict() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _allowed(nodeid: str) -> bool:
    path = nodeid.split("::", 1)[0]
    entry = ALLOWED_IN_CI.get(path)
    return entry is not None and entry[0]()


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_forbidden_skip(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and strict() and not _allowed(report.nodeid):
        reason = _reason(report)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _fail_forbidden_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    _fail_forbidden_skip(report)
    return report
