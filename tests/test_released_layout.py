"""jina-ocr-v1 as released, by its Hub id, a folder or its export, through every door.

A tiny checkpoint in the released layout (``released_layout.py``) is published on the loopback Hub.
``jina_ocr.convert``, ``jina-ocr convert`` and ``jina-ocr serve`` load it by id (in processes that get
the Hub from ``HF_ENDPOINT`` and an empty cache from ``HF_HOME``), from its folder, and from the folder
``jina-ocr export --from`` makes of it: every source gives the same text token for token, FastMTP on
and off. Bad ``--model`` values are answered in one line.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import subprocess
import sys

import httpx
import pytest
import torch
from hub_server import LoopbackHub
from huggingface_hub import HfApi, constants
from loopback import wait_until_healthy
from PIL import Image, ImageDraw
from released_layout import FIXTURE, write_released

import jina_ocr
from jina_ocr.cli import main
from jina_ocr.model_files import checkpoint_layout
from jina_ocr.models import BUNDLED
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

MAX_NEW_TOKENS = 12

CONVERT_EACH = """
import json, sys
import jina_ocr
page, max_new_tokens, *models = sys.argv[1:]
report = {}
for model in models:
    for use_mtp in (True, False):
        [result] = jina_ocr.convert(page, model=model, use_mtp=use_mtp, max_new_tokens=int(max_new_tokens))
        assert result.ok, result.error
        report[f"{model} mtp={use_mtp}"] = [result.markdown, result.tokens, result.fastmtp is not None]
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    folder = tmp_path_factory.mktemp("released") / "jina-ocr-v1"
    write_released(folder)
    return folder


@pytest.fixture(scope="module")
def hub(released, tmp_path_factory):
    """The loopback Hub with the released folder published as ``<user>/jina-ocr-v1``."""
    with LoopbackHub(tmp_path_factory.mktemp("hub")) as server:
        api = HfApi(endpoint=server.endpoint, token=server.token)
        repo = api.create_repo("jina-ocr-v1").repo_id
        api.upload_folder(folder_path=released, repo_id=repo)
        server.repo = repo
        yield server


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    image = Image.new("RGB", (480, 320), "white")
    ImageDraw.Draw(image).text((40, 60), "Released layout\nby Hub id", fill="black")
    path = tmp_path_factory.mktemp("page") / "page.png"
    image.save(path)
    return path


def hub_user_env(hub: LoopbackHub, home) -> dict[str, str]:
    """A user of this Hub with an empty cache, online (the suite may run offline)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN", "JINA_OCR_MODEL")}
    return {**env, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home), "TOKENIZERS_PARALLELISM": "false"}


def run(args: list[str], env: dict, cwd) -> subprocess.CompletedProcess:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_released_config_builds_the_released_checkpoint_key_for_key():
    """2,722 tensors and 3,372,238,080 parameters: DeepSeek-OCR's 2,710 (the names of its published
    index) plus the FastMTP head's twelve, and the released spelling image_token_index is read."""
    raw = json.loads(FIXTURE.read_text(encoding="utf-8"))
    config = JinaOCRConfig.from_dict(copy.deepcopy(raw))
    assert config.image_token_id == raw["image_token_index"] == 128815
    assert config.rope_theta == 1_000_000 and config.max_position_embeddings == 32768
    with torch.device("meta"):
        state = checkpoint_layout(JinaOCRForConditionalGeneration(config).state_dict())
    assert len(state) == 2722
    assert sum(tensor.numel() for tensor in state.values()) == 3_372_238_080
    index = json.loads((FIXTURE.parents[1] / "deepseek_ocr" / "model.safetensors.index.json").read_text())
    head = {name for name in state if name.startswith("mtp_module.heads.0.")}
    assert set(state) - head == set(index["weight_map"]) and len(head) == 12


@pytest.mark.parametrize("shared_copies", [False, True])
def test_a_tiny_released_folder_loads_exactly(tmp_path, shared_copies):
    written = write_released(tmp_path / "released", shared_copies=shared_copies)
    model, processor = jina_ocr.load(tmp_path / "released", device="cpu")
    assert type(model).__module__ == "jina_ocr.remote_code.modeling_jina_ocr"
    ours, theirs = model.state_dict(), written.state_dict()
    assert set(ours) == set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert model.config.image_token_id == processor.image_token_id != 128815  # the tiny vocabulary's id
    assert model.generation_config.use_mtp and processor.image_processor.mode == "gundam"


def test_by_hub_id_by_folder_and_exported_every_door_gives_the_same_text(hub, released, page, tmp_path):
    exported = tmp_path / "exported"
    assert main(["export", "--from", str(released), str(exported)]) == 0
    env = hub_user_env(hub, tmp_path / "hf_home")
    sources = [hub.repo, str(released), str(exported)]
    report = json.loads(
        run(
            [sys.executable, "-c", CONVERT_EACH, str(page), str(MAX_NEW_TOKENS), *sources], env, tmp_path
        ).stdout
    )
    for use_mtp in (True, False):
        texts = {source: report[f"{source} mtp={use_mtp}"] for source in sources}
        assert len({json.dumps(text) for text in texts.values()}) == 1, texts
        assert texts[hub.repo][2] == use_mtp  # FastMTP statistics exactly when it drafted
    reference, tokens, _ = report[f"{hub.repo} mtp=True"]
    assert tokens == MAX_NEW_TOKENS and reference.strip()  # a real text to compare, not an empty page
    snapshots = list((tmp_path / "hf_home" / "hub").glob("models--*/snapshots/*"))
    assert snapshots and not list(snapshots[0].glob("*.py"))  # the repository's own code is not fetched

    # The command line, by id, from the cache the run above filled, with the Hub offline.
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    cli = [sys.executable, "-m", "jina_ocr.cli"]
    out = tmp_path / "out"
    run([*cli, "convert", str(page), "--model", hub.repo, "--format", "json", "-o", str(out),
         "--max-new-tokens", str(MAX_NEW_TOKENS)], offline, tmp_path)  # fmt: skip
    assert json.loads((out / "page.json").read_text())["pages"][0]["markdown"] == reference

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        server = subprocess.Popen(
            [*cli, "serve", "--model", hub.repo, "--port", str(port), "--max-new-tokens", str(MAX_NEW_TOKENS)],
            env=offline, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_healthy(server, base, log, seconds=120, pause=0.2)
        reply = httpx.post(
            f"{base}/v1/documents", files={"file": ("page.png", page.read_bytes())}, timeout=120
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["pages"][0]["markdown"] == reference
        assert httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]["id"] == hub.repo
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_bundled_model_by_its_folder_reads_as_the_default(page, monkeypatch):
    monkeypatch.delenv("JINA_OCR_MODEL", raising=False)
    by_default = [r.markdown for r in jina_ocr.convert(page, max_new_tokens=MAX_NEW_TOKENS)]
    by_folder = [r.markdown for r in jina_ocr.convert(page, model=BUNDLED, max_new_tokens=MAX_NEW_TOKENS)]
    assert by_default == by_folder


@pytest.fixture()
def hub_here(hub, tmp_path, monkeypatch):
    """This process's huggingface_hub pointed at the loopback Hub with an empty cache (what HF_ENDPOINT
    and HF_HOME do at import)."""
    monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("JINA_OCR_MODEL", raising=False)
    return hub


def refusal(capsys, page, model: str, *extra: str) -> str:
    """The one line ``jina-ocr convert`` answers a bad ``--model`` with (exit 2)."""
    status = main(["convert", str(page), "--model", model, *extra])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_every_bad_model_is_answered_in_one_line(hub_here, released, page, tmp_path, capsys, monkeypatch):
    prefix = "jina-ocr convert: error: --model"
    missing = tmp_path / "missing"
    assert (
        refusal(capsys, page, str(missing))
        == f"{prefix} {missing}: no such folder (nor a Hub id, which reads ORG/NAME)"
    )

    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text('{"model_type": "bert"}')
    line = refusal(capsys, page, str(bert))
    assert line.startswith(
        f"{prefix} {bert}: config.json is for model type 'bert'; accepted: a jina-ocr export"
    )

    line = refusal(capsys, page, "nobody/nothing")
    assert line.startswith(f"{prefix} nobody/nothing: no such folder, and no model repository of that name")

    line = refusal(capsys, page, hub_here.repo, "--revision", "v9")
    assert line == f"{prefix} {hub_here.repo}: the Hub repository has no revision 'v9'"

    weightless = tmp_path / "weightless"
    shutil.copytree(released, weightless, ignore=shutil.ignore_patterns("*.safetensors"))
    assert (
        refusal(capsys, page, str(weightless))
        == f"{prefix} {weightless}: no .safetensors weights beside its config.json"
    )

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    line = refusal(capsys, page, hub_here.repo)
    assert line.startswith(
        f"{prefix} {hub_here.repo}: not in the local Hub cache, and the Hub cannot be reached"
    )
