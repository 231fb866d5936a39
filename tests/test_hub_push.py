"""Pushing to the Hub and loading by repo id, end to end over HTTP with no network.

A loopback Hub (tests/hub_server.py) stands in for huggingface.co, so the real ``huggingface_hub``
client code runs: ``push_to_hub`` and ``jina-ocr push`` upload the tiny export, and a clean process
with an empty cache loads it back by repo id with ``trust_remote_code=True``. Weights and greedy
tokens must equal those of the exported folder itself.
"""

from __future__ import annotations

import json
import shutil

import pytest
from hub_server import LoopbackHub
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import RepositoryNotFoundError
from isolation import run_as_hub_user

from jina_ocr.cli import main

# Loads a source (a folder or a repo id) as remote code, and reports a hash of the weights and the
# greedy tokens for one page image: equal reports mean the same model, code and processor.
REPORT = """
import hashlib, json, sys, torch
from PIL import Image, ImageDraw
from transformers import AutoModelForImageTextToText, AutoProcessor

def load(source):
    model = AutoModelForImageTextToText.from_pretrained(source, trust_remote_code=True).eval()
    return model, AutoProcessor.from_pretrained(source, trust_remote_code=True)

def report(model, processor):
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + str(tensor.dtype).encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    page = Image.new("RGB", (160, 96), "white")
    ImageDraw.Draw(page).rectangle((20, 30, 140, 60), fill="black")
    inputs = processor.prepare_ocr_inputs(page)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False, use_mtp=False)
    return {
        "weights": digest.hexdigest(),
        "input_ids": inputs["input_ids"].tolist(),
        "generated": out[0, inputs["input_ids"].shape[1]:].tolist(),
        "modules": [type(model).__module__, type(processor).__module__],
    }
"""

# The user's path: load the exported folder as remote code, then push the objects themselves.
PUSH_MODEL_AND_PROCESSOR = (
    REPORT
    + """
folder, name = sys.argv[1:]
model, processor = load(folder)
local = report(model, processor)
model_repo = model.push_to_hub(name).repo_url.repo_id
processor_repo = processor.push_to_hub(name).repo_url.repo_id
print(json.dumps({"local": local, "repos": [model_repo, processor_repo]}))
"""
)

LOAD_BY_REPO_ID = (
    REPORT
    + """
print(json.dumps({source: report(*load(source)) for source in sys.argv[1:]}))
"""
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with LoopbackHub(tmp_path_factory.mktemp("hub")) as server:
        yield server


def client_env(hub: LoopbackHub, home, token: str | None) -> dict[str, str | None]:
    """A Hub user's environment: this Hub, an empty cache in ``home``, online, and ``token`` or none."""
    return {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home), "HF_HUB_OFFLINE": None, "HF_TOKEN": token}


@pytest.fixture(scope="module")
def push_to_hub_run(hub, tiny_export, tmp_path_factory) -> dict:
    """model.push_to_hub and processor.push_to_hub of objects loaded from the folder as remote code;
    the same process reports on those objects, as the reference the downloads must match."""
    cwd = tmp_path_factory.mktemp("pusher")
    env = client_env(hub, cwd / "hf_home", hub.token)
    result = run_as_hub_user(PUSH_MODEL_AND_PROCESSOR, cwd, str(tiny_export), "tiny-push-to-hub", env=env)
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["repos"] == [f"{hub.user}/tiny-push-to-hub"] * 2  # the name lands in the token's account
    return {"repo": run["repos"][0], "local": run["local"]}


@pytest.fixture(scope="module")
def hub_api(hub):
    """Points this process's huggingface_hub at the loopback Hub (what HF_ENDPOINT does at import)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "ENDPOINT", hub.endpoint)
        yield


@pytest.fixture(scope="module")
def pushed_with_cli(hub, hub_api, tiny_export) -> str:
    assert main(["push", str(tiny_export), "tiny-cli", "--token", hub.token]) == 0
    return f"{hub.user}/tiny-cli"


@pytest.fixture(scope="module")
def loaded(hub, push_to_hub_run, pushed_with_cli, tmp_path_factory) -> dict:
    """A clean process with an empty cache and no token loads both repos by id."""
    cwd = tmp_path_factory.mktemp("loader")
    repos = [push_to_hub_run["repo"], pushed_with_cli]
    result = run_as_hub_user(LOAD_BY_REPO_ID, cwd, *repos, env=client_env(hub, cwd / "hf_home", None))
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_loads_like_the_folder(local: dict, remote: dict, hub: LoopbackHub, repo_id: str) -> None:
    assert remote["weights"] == local["weights"]
    assert remote["input_ids"] == local["input_ids"]
    assert remote["generated"] == local["generated"] and len(remote["generated"]) == 4
    # The code ran from the repo's own download, not from the folder's copy of it.
    module_prefix = "transformers_modules." + repo_id.replace("-", "_hyphen_").replace("/", ".")
    assert all(module.startswith(module_prefix) for module in remote["modules"]), remote["modules"]
    downloaded = {r.rpartition("/")[2] for r in hub.requests if r.startswith(f"GET /{repo_id}/resolve/")}
    needed = {"config.json", "model.safetensors", "modeling_jina_ocr.py", "processing_jina_ocr.py"}
    assert needed <= downloaded


@pytest.mark.floor
def test_push_to_hub_of_remote_code_objects_then_load_by_repo_id(loaded, hub, tiny_export, push_to_hub_run):
    repo_id = push_to_hub_run["repo"]
    pushed = set(hub.list_files(repo_id))
    # Loaded with trust_remote_code, the classes are registered for their auto class, so
    # save_pretrained copies each class's file and every file it imports relatively.
    code = {path.name for path in tiny_export.glob("*.py")}
    assert code <= pushed
    assert {"config.json", "model.safetensors", "generation_config.json", "processor_config.json"} <= pushed
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= pushed
    config = json.loads(hub.read_file(repo_id, "config.json"))
    assert config["auto_map"] == json.loads((tiny_export / "config.json").read_text())["auto_map"]
    assert_loads_like_the_folder(push_to_hub_run["local"], loaded[repo_id], hub, repo_id)


def test_push_to_hub_ships_the_custom_pipeline(hub, push_to_hub_run):
    assert "pipeline_jina_ocr.py" in hub.list_files(push_to_hub_run["repo"])


def test_cli_push_uploads_the_folder_as_it_is_then_it_loads_by_repo_id(
    loaded, hub, tiny_export, push_to_hub_run, pushed_with_cli
):
    exported = sorted(path.name for path in tiny_export.iterdir())
    assert hub.list_files(pushed_with_cli) == exported
    for name in exported:
        assert hub.read_file(pushed_with_cli, name) == (tiny_export / name).read_bytes(), name
    assert_loads_like_the_folder(push_to_hub_run["local"], loaded[pushed_with_cli], hub, pushed_with_cli)


def test_cli_push_to_a_private_branch(hub, hub_api, tiny_export, capsys):
    args = ["--private", "--revision", "dev", "--token", hub.token]
    assert main(["push", str(tiny_export), "tiny-private", *args]) == 0
    repo_id = f"{hub.user}/tiny-private"
    assert f"{hub.endpoint}/{repo_id}/tree/dev" in capsys.readouterr().out
    owner = HfApi(endpoint=hub.endpoint, token=hub.token)
    exported = sorted(path.name for path in tiny_export.iterdir())
    assert sorted(owner.list_repo_files(repo_id, revision="dev")) == exported
    assert owner.list_repo_files(repo_id) == []  # main keeps the empty initial commit
    assert owner.model_info(repo_id).private
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.endpoint, token=False).model_info(repo_id)


def test_cli_push_refuses_a_folder_that_would_not_load(hub, hub_api, tiny_export, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_export, broken)
    (broken / "modeling_jina_ocr.py").unlink()
    assert main(["push", str(broken), "tiny-broken", "--token", hub.token]) == 2
    error = capsys.readouterr().err
    assert error.startswith("jina-ocr push: error: ") and "modeling_jina_ocr" in error
    assert not any("tiny-broken" in request for request in hub.requests)  # refused before any upload
    assert main(["push", str(tmp_path / "missing"), "tiny-broken", "--token", hub.token]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_cli_push_reports_what_the_hub_refused(hub, hub_api, tiny_export, capsys):
    assert main(["push", str(tiny_export), "tiny-refused", "--token", "hf_not_the_token"]) == 2
    error = capsys.readouterr().err
    assert f"{hub.endpoint} refused the upload to tiny-refused (HTTP 401)" in error
    assert "Invalid credentials" in error
    assert f"{hub.user}/tiny-refused" not in hub.repos


def test_cli_push_replaces_the_code_configs_and_weights_of_an_earlier_push(
    hub, hub_api, tiny_export, tmp_path
):
    earlier = tmp_path / "earlier"
    shutil.copytree(tiny_export, earlier)
    (earlier / "stale_jina_ocr.py").write_text('"""A module a later export no longer writes."""\n')
    (earlier / "NOTES.md").write_text("Added by hand; not a kind of file the export writes.\n")
    assert main(["push", str(earlier), "tiny-repush", "--token", hub.token]) == 0
    assert main(["push", str(tiny_export), "tiny-repush", "--token", hub.token]) == 0
    files = hub.list_files(f"{hub.user}/tiny-repush")
    assert files == sorted([*(path.name for path in tiny_export.iterdir()), "NOTES.md"])
