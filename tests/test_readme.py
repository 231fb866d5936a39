"""Every fenced example of README.md runs here, or, where it cannot run, is checked for real.

```python blocks run with ``sys.executable -c`` and ```bash / ```console command lines run through
``bash -c``, one command at a time (a line joined by ``&&`` is split into its commands), in one
temporary working directory that holds:

- ``samples/``: a link to the repository's samples;
- ``tiny-random/``: written by the README's own ``jina-ocr export --random --preset tiny tiny-random``
  line, run first (the same as ``export_random(dir, preset="tiny", seed=0)``);
- ``page.png``: page 1 of ``samples/page.pdf`` as the tools render it, for the pipeline examples;
- ``jina-ocr-v1/``: written by the README's own ``jina-ocr export --from jinaai/jina-ocr-v1 jina-ocr-v1``
  line, run second.

``jinaai/jina-ocr-v1`` is a loopback Hub (tests/hub_server.py) holding a tiny checkpoint in the released
layout (tests/released_layout.py) under that id; every command and snippet runs with ``HF_ENDPOINT``
pointing at it and an empty Hugging Face cache of its own, so the README's Hub ids load for real.

Substitutions, so that the whole file runs in about a minute: ``--max-new-tokens N`` and
``max_new_tokens=N`` become 2, and a ``jina-ocr convert`` line that runs gets ``--max-new-tokens 2`` when
it has none. ``$JINA_OCR_MODEL`` is unset.

What cannot run here is checked instead, each check able to fail (``CHECKED_COMMANDS``,
``CHECKED_PYTHON``): installing (pip, a virtual environment, Debian packages), the whole test suite, ``vllm serve`` (a GPU),
fetching a URL, endpoints and the server (a network and a running server).
"""

from __future__ import annotations

import ast
import glob
import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import LoopbackHub
from huggingface_hub import HfApi
from released_layout import write_released

from jina_ocr.runtime.documents import open_document

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the package depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PLACEHOLDER_MODEL = "jina-ocr-v1"  # the folder the README's export --from line writes
RELEASE = "jinaai/jina-ocr-v1"
EXPORT_LINE = "jina-ocr export --random --preset tiny tiny-random"
EXPORT_RELEASE_LINE = f"jina-ocr export --from {RELEASE} {PLACEHOLDER_MODEL}"
PAGE_IMAGE = "page.png"  # the page image the pipeline examples read: samples/page.pdf's page 1
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """``(line, language, body)`` of every fenced block."""
    return [(text[: m.start()].count("\n") + 1, m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def shell_commands(body: str, language: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, ``$ `` prompts and comments dropped,
    ``&&`` chains split into their commands."""
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        line = line.strip()
        if language == "console":
            if not line.startswith("$ "):
                continue  # output shown in a console block
            line = line[2:]
        if line and not line.startswith("#"):
            commands.extend(part.strip() for part in line.split(" && "))
    return commands


BLOCKS = fenced_blocks(README.read_text(encoding="utf-8"))
COMMANDS = [
    (line, command)
    for line, language, body in BLOCKS
    if language in ("bash", "console")
    for command in shell_commands(body, language)
]
PYTHON = [(line, body) for line, language, body in BLOCKS if language == "python"]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def ci_script() -> str:
    return (ROOT / ".ci" / "run").read_text()


def cli_parse(command: str) -> None:
    """Parse a ``jina-ocr`` line with the real argument parser: an unknown option or a bad value fails."""
    from jina_ocr.cli import build_parser

    argv = shlex.split(command)
    assert argv[0] == "jina-ocr"
    try:
        build_parser().parse_args(argv[1:])
    except SystemExit as error:
        pytest.fail(f"{command!r}: jina-ocr rejects these arguments (exit {error.code})")


# --- Checks for the commands that cannot run here -------------------------------------------------


def check_venv(command: str) -> None:
    assert command in ci_script(), "the README's virtual environment differs from CI's (.ci/run)"


def check_torch_pin(command: str) -> None:
    from packaging.requirements import Requirement

    version = command.split("==")[1]
    assert f"pip install -q torch=={version}" in ci_script(), "CI installs another torch than the README"
    torch_req = next(Requirement(r) for r in pyproject()["project"]["dependencies"] if r.startswith("torch"))
    assert version in torch_req.specifier, f"torch {version} does not satisfy {torch_req}"


def check_pip_extras(command: str) -> None:
    extras = re.fullmatch(r'pip install (?:-e )?"\.\[([\w,]+)\]"', command)
    assert extras, f"{command!r}: not an install of this checkout with extras"
    known = pyproject()["project"]["optional-dependencies"]
    for extra in extras.group(1).split(","):
        assert extra in known, f"{command!r}: pyproject.toml has no extra {extra!r}"


def check_ci_deps(command: str) -> None:
    scripts = sorted(glob.glob(str(ROOT / ".ci" / "deps" / "*.sh")))
    assert scripts, ".ci/deps/*.sh matches nothing"
    for script in scripts:
        subprocess.run(["bash", "-n", script], check=True)


def check_test_suite(command: str) -> None:
    assert pyproject()["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]
    assert f"\n{command}\n" in ci_script(), "CI does not run the README's test command"


def check_vllm_serve(command: str, tmp_path: Path) -> None:
    """The flags are those ``vllm_llm_kwargs`` gives for an exported folder with a FastMTP head."""
    from jina_ocr.vllm.helpers import vllm_llm_kwargs

    argv = shlex.split(command)
    assert argv[:3] == ["vllm", "serve", PLACEHOLDER_MODEL]
    flags = dict(zip(argv[3::2], argv[4::2], strict=True))
    folder = tmp_path / "head"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"num_nextn_predict_layers": 1, "mtp_num_speculative_steps": 3})
    )
    expected = {f"--{k.replace('_', '-')}": v for k, v in vllm_llm_kwargs(folder).items() if k != "model"}
    for flag, value in expected.items():
        assert flag in flags, f"vllm serve lacks {flag} (jina_ocr.vllm.helpers gives it)"
        assert json.loads(flags[flag]) == value, (
            f"{flag}: the README says {flags[flag]}, helpers give {value}"
        )
    generic = {"--served-model-name", "--dtype"}
    assert set(flags) <= set(expected) | generic, f"flags not from the helpers: {set(flags) - set(expected)}"


CHECKED_COMMANDS = [
    # (pattern, check, why it cannot run here)
    (r"python3 -m venv \.venv", check_venv, "makes a virtual environment"),
    (r"\. \.venv/bin/activate", check_venv, "activates the environment the tests already run in"),
    (r"pip install torch==[\d.]+", check_torch_pin, "installs packages"),
    (r'pip install (-e )?"\.\[[\w,]+\]"', check_pip_extras, "installs packages"),
    (r'for deps in \.ci/deps/\*\.sh; do bash "\$deps"; done', check_ci_deps, "installs Debian packages"),
    (r"python -m pytest -q", check_test_suite, "the whole test suite"),
    (r"vllm serve .*", check_vllm_serve, "needs vLLM and a GPU"),
    (r"jina-ocr convert .*https?://.*", cli_parse, "fetches from the network"),
    (r"jina-ocr convert .*--endpoint .*", cli_parse, "needs running servers"),
    (r"jina-ocr convert s3://.*--ray.*", cli_parse, "needs a Ray cluster and object storage"),
    (r"jina-ocr serve .*", cli_parse, "runs until stopped"),
]


def checked(command: str):
    for pattern, check, _why in CHECKED_COMMANDS:
        if re.fullmatch(pattern, command):
            return check
    return None


def check_python_vllm(source: str) -> None:
    """The imported helper names exist (importing ``jina_ocr.vllm`` does not import vLLM)."""
    check_python_imports(source)


def check_python_openai(source: str) -> None:
    check_python_imports(source)


def check_python_imports(source: str) -> None:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jina_ocr"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
        if isinstance(node, ast.ImportFrom | ast.Import) and not (
            isinstance(node, ast.ImportFrom) and node.module == "vllm"
        ):
            names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for name in names:
                assert importlib.util.find_spec(name.split(".")[0]), f"{name} is not installed"


CHECKED_PYTHON = [
    # (a line of the block, check, why it cannot run here)
    ("from vllm import LLM", check_python_vllm, "needs vLLM and a GPU"),
    ("from openai import OpenAI", check_python_openai, "needs a running server"),
]


def checked_python(body: str):
    for marker, check, _why in CHECKED_PYTHON:
        if marker in body.splitlines():
            return check
    return None


# --- Running ---------------------------------------------------------------------------------------


def few_tokens(code: str) -> str:
    code = re.sub(r"(--max-new-tokens\s+)\d+", r"\g<1>2", code)
    return re.sub(r"(max_new_tokens=)\d+", r"\g<1>2", code)


def environment(cwd: Path) -> dict:
    """The environment of every example: the loopback Hub and a Hugging Face cache of the work folder."""
    drop = ("JINA_OCR_MODEL", "HF_HUB_OFFLINE", "HF_TOKEN")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    hub = json.loads((cwd / HUB_SETTINGS).read_text())
    env.update(HF_ENDPOINT=hub["endpoint"], HF_HOME=str(cwd / "hf_home"), TOKENIZERS_PARALLELISM="false")
    return env


HUB_SETTINGS = "hub.json"


def run(argv: list[str], cwd: Path, what: str) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=environment(cwd), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (
        f"{what}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The loopback Hub with a tiny checkpoint in the released layout published as jinaai/jina-ocr-v1."""
    with LoopbackHub(tmp_path_factory.mktemp("hub")) as server:
        release = tmp_path_factory.mktemp("release") / "jina-ocr-v1"
        write_released(release)
        api = HfApi(endpoint=server.endpoint, token=server.token)
        api.create_repo(RELEASE)
        api.upload_folder(folder_path=release, repo_id=RELEASE)
        yield server


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, hub) -> Path:
    for line in (EXPORT_LINE, EXPORT_RELEASE_LINE):
        assert any(c == line for _, c in COMMANDS), f"the README no longer shows {line!r}"
    directory = tmp_path_factory.mktemp("readme")
    (directory / HUB_SETTINGS).write_text(json.dumps({"endpoint": hub.endpoint}))
    (directory / "samples").symlink_to(ROOT / "samples")
    for line in (EXPORT_LINE, EXPORT_RELEASE_LINE):
        run(["bash", "-c", line], directory, line)
    assert (directory / "tiny-random" / "config.json").is_file()
    assert json.loads((directory / PLACEHOLDER_MODEL / "config.json").read_text())["model_type"] == "jina_ocr"
    with open_document(ROOT / "samples" / "page.pdf") as document:
        document.render(1).save(directory / PAGE_IMAGE)
    return directory


def test_every_block_is_known_and_the_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 400
    assert {language for _, language, _ in BLOCKS} <= {"python", "bash", "console"}
    assert COMMANDS and PYTHON


def test_every_check_matches_a_readme_example():
    """The lists of what only gets checked stay explicit and small: each entry is used."""
    for pattern, _check, why in CHECKED_COMMANDS:
        assert any(re.fullmatch(pattern, c) for _, c in COMMANDS), f"unused check ({why}): {pattern}"
    for marker, _check, why in CHECKED_PYTHON:
        assert any(marker in body.splitlines() for _, body in PYTHON), f"unused check ({why}): {marker}"


def test_links_to_files_exist():
    for target in re.findall(r"\[[^\]]+\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8")):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


@pytest.mark.parametrize(("line", "command"), COMMANDS, ids=[f"L{line}:{c[:40]}" for line, c in COMMANDS])
def test_command(line, command, workdir, tmp_path):
    check = checked(command)
    if check is check_vllm_serve:
        check(command, tmp_path)
    elif check is not None:
        check(command)
    elif command in (EXPORT_LINE, EXPORT_RELEASE_LINE):
        assert (workdir / "tiny-random" / "config.json").is_file()  # the fixture ran both
        assert (workdir / PLACEHOLDER_MODEL / "config.json").is_file()
    else:
        command = few_tokens(command)
        if command.startswith("jina-ocr convert") and "--max-new-tokens" not in command:
            command += " --max-new-tokens 2"
        run(["bash", "-c", command], workdir, f"README line {line}: {command}")


@pytest.mark.parametrize(("line", "body"), PYTHON, ids=[f"L{line}" for line, _ in PYTHON])
def test_python(line, body, workdir):
    compile(body, f"README.md:{line}", "exec")
    check = checked_python(body)
    if check is not None:
        check(body)
    else:
        run([sys.executable, "-c", few_tokens(body)], workdir, f"README line {line}")
