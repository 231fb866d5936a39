"""Run code the way a Hub user does: a fresh interpreter that cannot import this repository's tools.

An import hook makes ``jina_ocr`` and PyMuPDF unimportable and the repository is kept off
``sys.path``, so the exported folder must stand on its own with ``trust_remote_code=True``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_GUARD = """
import importlib.abc, sys
class _HubUserFinder(importlib.abc.MetaPathFinder):
    BLOCKED = ("jina_ocr", "fitz", "pymupdf")
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.BLOCKED:
            raise ModuleNotFoundError(f"{name} is not installed for a Hub user", name=name)
        return None
sys.meta_path.insert(0, _HubUserFinder())
import os
_repo = __REPO__
# Drop the checkout itself (and the current directory); a virtual environment inside it stays.
sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != _repo]
"""

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_as_hub_user(
    code: str,
    cwd: Path,
    *args: str,
    timeout: float = 300,
    python: str = sys.executable,
    env: dict[str, str | None] | None = None,
):
    """Run ``code`` (its ``sys.argv[1:]`` are ``args``) and return the completed process; raises with
    the child's output when it fails.

    The child is offline unless ``env`` says otherwise: its entries are set on top of the defaults, and
    an entry whose value is None removes that variable (``{"HF_HUB_OFFLINE": None}`` lets the child
    download from ``HF_ENDPOINT``)."""
    script = _GUARD.replace("__REPO__", repr(os.path.realpath(REPO_ROOT))) + textwrap.dedent(code)
    child_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    child_env.update(
        HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(cwd / "hf_modules"), TOKENIZERS_PARALLELISM="false"
    )
    for name, value in (env or {}).items():
        if value is None:
            child_env.pop(name, None)
        else:
            child_env[name] = value
    result = subprocess.run(
        [python, "-c", script, *args], cwd=cwd, env=child_env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise AssertionError(f"the clean process failed:\n{result.stdout}\n{result.stderr}")
    return result
