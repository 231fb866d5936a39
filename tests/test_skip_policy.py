"""The CI skip policy (skip_policy.py): under CI=true a skip fails unless the allow-list names it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SKIPPING = {
    "tests/test_tools.py": """
        import pytest

        def test_runs():
            assert True

        @pytest.mark.skipif(True, reason="tesseract is not installed")
        def test_marked():
            pass

        def test_skips_itself():
            pytest.skip("chromium is not installed")

        @pytest.mark.xfail(reason="a known bug", strict=True)
        def test_known_bug():
            assert False
    """,
    "tests/test_gone.py": """
        import pytest

        pytest.skip("accelerate is not installed", allow_module_level=True)
    """,
    # Named in the allow-list: vLLM's tests skip in an environment without vLLM.
    "tests/test_vllm.py": """
        import pytest

        pytest.skip("vLLM is not installed here", allow_module_level=True)
    """,
}


def run_suite(tmp_path: Path, ci: str | None) -> tuple[dict[str, str], int, str]:
    """Run the small suite above with the policy plugin; returns (outcome per test id, exit status,
    output). A collection error would stop the run; here it goes on, to show every outcome."""
    for name, code in SKIPPING.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(HERE)
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "skip_policy", "-p", "no:cacheprovider", "-rA"]
        + ["--continue-on-collection-errors", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcomes = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL"):
            nodeid = rest.split(" - ")[0].strip()
            if word == "SKIPPED":  # "SKIPPED [1] tests/test_x.py:3: reason"
                nodeid = rest.split("] ", 1)[1].split(":")[0]
            outcomes[nodeid] = word
    return outcomes, done.returncode, done.stdout


def test_without_ci_skips_stay_skips(tmp_path):
    outcomes, status, output = run_suite(tmp_path, ci=None)
    assert status == 0 and outcomes == {
        "tests/test_tools.py::test_runs": "PASSED",
        "tests/test_tools.py": "SKIPPED",  # both skips of the file, reported by location
        "tests/test_gone.py": "SKIPPED",
        "tests/test_vllm.py": "SKIPPED",
        "tests/test_tools.py::test_known_bug": "XFAIL",
    }, output


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_every_skip_fails_except_the_allowed_ones(tmp_path, ci):
    outcomes, status, output = run_suite(tmp_path, ci=ci)
    assert status == 1 and outcomes == {
        "tests/test_tools.py::test_runs": "PASSED",
        "tests/test_tools.py::test_marked": "ERROR",  # skipped in setup: the setup fails
        "tests/test_tools.py::test_skips_itself": "FAILED",
        "tests/test_tools.py::test_known_bug": "XFAIL",  # an expected failure is not a skip
        "tests/test_gone.py": "ERROR",  # a module that skips at collection fails to collect
        "tests/test_vllm.py": "SKIPPED",  # allowed: vLLM is not installed here
    }, output
    assert "skipped under CI=true, where every test must run: Skipped: tesseract is not installed" in output
    assert "chromium is not installed" in output and "accelerate is not installed" in output


def test_ci_false_is_not_ci(tmp_path):
    outcomes, status, output = run_suite(tmp_path, ci="false")
    assert outcomes["tests/test_gone.py"] == "SKIPPED", output
