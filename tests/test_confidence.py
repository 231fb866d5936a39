"""Page confidence and ``finish_reason`` (jina_ocr/runtime/confidence.py): every committed token's
log-probability against a plain forward pass over prompt and output, in every decoding loop (greedy,
our batched FastMTP loop, the library's assisted loop) and with rows of different lengths; how pages
end (end token, token limit, loop guard); and what ``convert``, the server and the endpoint client
report.

The small float64 model with an oracle draft head (tests/fastmtp_helpers.py) makes FastMTP commit
several tokens per step, so the alignment of drafts and logits is exercised, not only one token a step.
"""

from __future__ import annotations

import base64
import io
import json
import math

import httpx
import pytest
import torch
from fastmtp_helpers import generate, loop_options, page_batch, small_model
from loopback import serve_in_thread
from PIL import Image
from stub_endpoint import Step, StubEndpoint, running
from test_fastmtp import install_oracle
from transformers.generation import StoppingCriteriaList

from jina_ocr.runtime.batching import BatchDriver, Page, RowStops
from jina_ocr.runtime.confidence import LogitsTap, summarize
from jina_ocr.runtime.results import PageResult, blank_generation
from jina_ocr.services.conversion import Converter
from jina_ocr.services.endpoints import EndpointConverter
from jina_ocr.services.server import create_app

GUARD = {"loop_guard_ngram_size": 2, "loop_guard_window": 12}  # fires within a few random tokens


@pytest.fixture(scope="module")
def wide_model():
    """hidden_size >= vocab_size, as the oracle head needs."""
    return small_model(seed=3, hidden_size=48)


def never_generated(model, inputs: dict, new: int, **options) -> int:
    """A token that greedy decoding does not produce here when it is the end token: every row then
    runs to its limit."""
    width = inputs["input_ids"].shape[1]
    for eos in range(3, model.config.vocab_size):
        out = generate(model, inputs, use_mtp=False, max_new_tokens=new, eos_token_id=eos, **options)
        if eos not in out[:, width:]:
            return eos
    raise AssertionError("every token is generated")


def plain_logprobs(model, inputs: dict, row: int, new_tokens: list[int]) -> tuple[list[float], list[int]]:
    """Log-probabilities of ``new_tokens`` after row ``row``'s prompt (its padding removed), and the
    model's first choice at each of their positions, from one forward pass over prompt and output."""
    prompt = inputs["input_ids"][row][inputs["attention_mask"][row].bool()]
    ids = torch.cat([prompt, torch.tensor(new_tokens[:-1], dtype=torch.long)])[None]
    with torch.no_grad():
        logits = model(input_ids=ids, pixel_values=inputs["pixel_values"][row : row + 1]).logits[0]
    logprobs = logits[len(prompt) - 1 :].log_softmax(-1)
    chosen = logprobs.gather(-1, torch.tensor(new_tokens)[:, None])[:, 0]
    return chosen.tolist(), logprobs.argmax(-1).tolist()


@pytest.mark.parametrize("guard", [False, True])
@pytest.mark.parametrize(
    ("loop", "limits", "oracle"),
    [
        ("greedy", [5, 9, 7], False),
        ("ours", [9, 9, 9], True),  # the oracle head drafts for rows that all stay in the batch
        ("ours", [5, 9, 7], False),  # rows leave the batch as they reach their limits
        ("library", [9], True),
        ("library", [9], False),  # drafts rejected: a step commits fewer tokens than it verified
    ],
)
def test_each_token_is_scored_from_the_main_models_logits_at_its_position(
    wide_model, monkeypatch, loop, limits, oracle, guard
):
    inputs = page_batch(70 + len(limits), [128] * len(limits), wide_model.config.vocab_size)
    options = dict(GUARD) if guard else {}
    options["eos_token_id"] = never_generated(wide_model, inputs, max(limits), **options)
    if oracle:  # drafts that are the greedy continuation: several tokens committed a step
        install_oracle(wide_model, monkeypatch, inputs, max(limits), **options)
    options |= loop_options(loop) if loop != "greedy" else {}
    tap = LogitsTap(wide_model)
    stops = RowStops(inputs["input_ids"].shape[1], limits, [options["eos_token_id"]], tap=tap)
    with tap:
        generate(
            wide_model, inputs, use_mtp=loop != "greedy", max_new_tokens=max(limits),
            stopping_criteria=StoppingCriteriaList([stops]), **options,
        )  # fmt: skip
    stops.close()
    if oracle:
        assert wide_model.fastmtp_stats["committed_per_step"] > 2
    if len(limits) > 1:
        assert len(set(inputs["attention_mask"].sum(1).tolist())) > 1  # rows of different lengths
    overruled = 0
    for row, limit in enumerate(limits):
        tokens, scores = stops.tokens[row], stops.scores[row]
        assert len(tokens) == limit == len(scores.logprobs)
        expected, first_choices = plain_logprobs(wide_model, inputs, row, tokens)
        assert scores.logprobs == pytest.approx(expected, abs=1e-9)
        assert scores.overruled == sum(a != b for a, b in zip(tokens, first_choices, strict=True))
        overruled += scores.overruled
    assert (overruled > 0) == guard  # the guard's bans are seen; without it every token is the argmax


def test_scores_are_off_without_a_tap():
    stops = RowStops(0, [2], stop_ids=[1])
    stops.commit_rows(torch.tensor([0]), torch.tensor([[5, 6]]), torch.tensor([2]))
    assert stops.scores[0].logprobs is None and stops.scores[0].overruled == 0


def test_confidence_is_the_geometric_mean_probability_of_a_page_that_ended():
    logprobs = [-0.1, -0.5, -0.0]
    stopped = summarize(logprobs, "stop")
    assert stopped.confidence == pytest.approx(math.exp(-0.2))
    assert stopped.mean_logprob == pytest.approx(-0.2) and stopped.min_logprob == -0.5
    for cut_short in ("length", "loop"):
        assert summarize(logprobs, cut_short).confidence == 0.0
        assert summarize(logprobs, cut_short).min_logprob == -0.5
    assert summarize(logprobs, None).confidence == pytest.approx(math.exp(-0.2))  # ending not known
    assert summarize(None, "stop").confidence is None  # probabilities not known
    assert summarize(logprobs, "error").confidence is None
    blank = PageResult.converted("doc", 1, blank_generation(), 0.0)
    assert (blank.confidence, blank.mean_logprob, blank.finish_reason) == (1.0, None, "stop")
    failed = PageResult("doc", 2, error="broken")
    assert failed.finish_reason == "error" and failed.to_dict()["finish_reason"] == "error"
    assert not failed.doubtful(0.5) and blank.doubtful(1.01) and not blank.doubtful(None)


@pytest.fixture(scope="module")
def tiny(tiny_export):
    converter = Converter.from_pretrained(tiny_export, device="cpu")
    return converter.model, converter.processor


@pytest.fixture(scope="module")
def scan(fixtures_dir) -> Image.Image:
    return Image.open(fixtures_dir / "tesseract" / "phototest.tif").convert("RGB")


def test_pages_end_by_their_end_token_their_limit_or_the_loop_guard(tiny, scan):
    def read(limit: int, **options):
        [outcome] = BatchDriver(*tiny, mode="tiny", **options).run_batch([Page(scan, limit)])
        return outcome

    whole = read(30, loop_guard_ngram_size=0)
    assert whole.finish_reason == "length" and len(whole.logprobs) == len(whole.token_ids) == 30
    # The end token is a token the page reaches: the page stops there, scored as before.
    end = next(i for i, token in enumerate(whole.token_ids) if i and token not in whole.token_ids[:i])
    stopped = read(30, loop_guard_ngram_size=0, eos_token_id=whole.token_ids[end])
    assert stopped.finish_reason == "stop" and stopped.token_ids == whole.token_ids[: end + 1]
    assert stopped.logprobs == pytest.approx(whole.logprobs[: end + 1], abs=1e-5)
    assert PageResult.converted("doc", 1, stopped, 0.0).confidence == pytest.approx(
        math.exp(sum(stopped.logprobs) / len(stopped.logprobs))
    )
    guarded = read(30, loop_guard_ngram_size=2, loop_guard_window=64)
    assert guarded.token_ids != whole.token_ids  # the random model repeats itself; the guard stepped in
    assert guarded.finish_reason == "loop"
    assert PageResult.converted("doc", 1, guarded, 0.0).confidence == 0.0


def test_convert_reports_confidence_and_marks_pages_below_the_threshold(run, fixtures_dir, tmp_path):
    image = fixtures_dir / "tesseract" / "phototest.tif"
    status, out, err = run(image, "--format", "json")
    assert status == 0, err
    [page] = json.loads(out)["pages"]
    assert page["finish_reason"] == "length" and page["confidence"] == 0.0  # 2 tokens: cut short
    assert page["min_logprob"] <= page["mean_logprob"] < 0
    mark = "<!-- low confidence: 0.00, finish_reason: length -->"
    status, out, err = run(image, "--min-confidence", "0.5")
    assert status == 0
    assert out.startswith(f"<!-- page 1 -->\n{mark}\n")
    assert f"{image}, page 1: low confidence: 0.00, finish_reason: length" in err
    status, out, err = run(image, "--min-confidence", "0.5", "-o", tmp_path)
    assert status == 0 and mark in (tmp_path / "phototest.md").read_text()
    status, out, err = run(image, "--min-confidence", "0")  # 0 is not below 0
    assert status == 0 and "low confidence" not in out + err
    status, _, err = run(image, "--min-confidence", "1.5")
    assert status == 2 and "--min-confidence must be from 0 to 1, got 1.5" in err


@pytest.fixture(scope="module")
def served(tiny_mtp_export):
    """A running server (FastMTP on) and its converter."""
    converter = Converter.from_pretrained(tiny_mtp_export, device="cpu", max_new_tokens=8, mode="tiny")
    with serve_in_thread(create_app(converter, "jina-ocr-tiny")) as base:
        yield base, converter


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_server_answers_carry_confidence_and_logprobs(served, scan):
    base, converter = served
    [expected] = converter.generate([scan], max_new_tokens=3)
    summary = summarize(expected.logprobs, expected.finish_reason)
    reply = httpx.post(
        f"{base}/v1/documents", files={"file": ("scan.png", png(scan))}, data={"max_tokens": "3"}, timeout=120
    )
    [page] = reply.json()["pages"]
    assert page["finish_reason"] == expected.finish_reason == "length" and page["confidence"] == 0.0
    assert page["mean_logprob"] == pytest.approx(summary.mean_logprob, abs=1e-4)
    url = "data:image/png;base64," + base64.b64encode(png(scan)).decode()
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    for stream in (False, True):
        body = {"messages": messages, "max_tokens": 3, "logprobs": True, "stream": stream}
        reply = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
        if stream:
            events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
            content = [
                e
                for event in events
                for c in event["choices"]
                for e in (c.get("logprobs") or {}).get("content", [])
            ]
            reason = events[-1]["choices"][0]["finish_reason"]
        else:
            choice = reply.json()["choices"][0]
            content, reason = choice["logprobs"]["content"], choice["finish_reason"]
        assert [entry["logprob"] for entry in content] == pytest.approx(expected.logprobs, abs=1e-4)
        assert [entry["token"] for entry in content] == [
            converter.processor.tokenizer.decode([token]) for token in expected.token_ids
        ]
        assert reason == "length"
    plain = httpx.post(
        f"{base}/v1/chat/completions", json={"messages": messages, "max_tokens": 3}, timeout=120
    )
    assert plain.json()["choices"][0]["logprobs"] is None
    wrong = httpx.post(
        f"{base}/v1/chat/completions", json={"messages": messages, "logprobs": "yes"}, timeout=120
    )
    assert wrong.status_code == 400 and "logprobs must be true or false" in wrong.text
    # The endpoint client, pointed at this server, reads the same confidence as a local run.
    with EndpointConverter(f"{base}/v1", max_new_tokens=3) as remote:
        [result] = list(remote.convert(png(scan)))
    assert result.mean_logprob == pytest.approx(summary.mean_logprob, abs=1e-4)
    assert (result.finish_reason, result.confidence) == ("length", 0.0)


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (Step(logprobs=[(-0.1, -0.1), (-0.5, -0.2), (-0.3, -0.3)]), ("stop", math.exp(-0.3), -0.3, -0.5)),
        (Step(logprobs=[(-0.1, -0.1), (-0.5, -0.2)], finish_reason="length"), ("loop", 0.0, -0.3, -0.5)),
        (Step(logprobs=[(-0.1, -0.1), (-0.5, -0.5)], finish_reason="length"), ("length", 0.0, -0.3, -0.5)),
        (Step(), ("stop", None, None, None)),  # no log-probabilities: confidence unknown, not made up
        (Step(finish_reason="content_filter"), (None, None, None, None)),
    ],
)
def test_endpoint_answers_give_confidence_only_from_their_logprobs(step, expected, tmp_path):
    image = tmp_path / "page.png"
    Image.effect_noise((60, 40), 60).convert("RGB").save(image)
    stub = StubEndpoint([step])
    with running(stub) as url, EndpointConverter(url) as converter:
        [result] = list(converter.convert(image))
    got = (result.finish_reason, result.confidence, result.mean_logprob, result.min_logprob)
    assert got == pytest.approx(expected)
    body = stub.chats[0].body
    assert body["logprobs"] is True and body["top_logprobs"] == 1
