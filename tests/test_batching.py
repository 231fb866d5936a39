"""The batch driver (batching_jina_ocr.py) with the tiny exported models: grouping, pages cut to their
own limits and handed out as they finish, progress per step, cancellation and the retry policy.

Pages go through the processor's ``tiny`` mode (512 px, no tiles). The random models never emit EOS
within these limits, so every page runs to its own limit and the expected tokens are known. Each
page is checked against ``model.generate`` on that page alone, without the driver.
"""

from __future__ import annotations

import weakref

import pytest
import torch
from PIL import Image
from transformers.generation import StoppingCriteria

from jina_ocr.runtime.batching import BatchDriver, Cancelled, Generation, Page, RowStops, batches
from jina_ocr.services.conversion import Converter


@pytest.fixture(scope="module")
def scans(fixtures_dir) -> list[Image.Image]:
    return [
        Image.open(fixtures_dir / "tesseract" / "phototest.tif").convert("RGB"),
        Image.open(fixtures_dir / "tesseract" / "eurotext.tif").convert("RGB"),
        Image.open(fixtures_dir / "tesseract" / "phototest-rotated-L.png").convert("RGB"),
    ]


@pytest.fixture(scope="module")
def greedy(tiny_export):
    converter = Converter.from_pretrained(tiny_export, device="cpu")
    return converter.model, converter.processor


@pytest.fixture(scope="module")
def fastmtp(tiny_mtp_export):
    converter = Converter.from_pretrained(tiny_mtp_export, device="cpu")
    return converter.model, converter.processor


def alone(loaded, image, limit: int) -> list[int]:
    """The page's tokens from one plain greedy ``generate`` call on it alone."""
    model, processor = loaded
    inputs = processor.prepare_ocr_inputs([image], mode="tiny")
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=limit, do_sample=False, use_mtp=False)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def count_generate_calls(model, monkeypatch) -> list[int]:
    calls = []
    generate = model.generate

    def counting(**inputs):
        calls.append(len(inputs["input_ids"]))
        return generate(**inputs)

    monkeypatch.setattr(model, "generate", counting)
    return calls


def test_batches_are_consecutive_and_each_is_released_when_the_next_is_asked_for():
    class Item:
        pass

    alive = []

    def made():  # items made one at a time, as pages are rendered
        for _ in range(5):
            item = Item()
            alive.append(weakref.ref(item))
            yield item

    groups = batches(made(), 2)
    first = next(groups)  # held, as a for loop holds its variable
    assert first == [alive[0](), alive[1]()]
    assert next(groups) == [alive[2](), alive[3]()]
    assert alive[0]() is None and alive[1]() is None  # the first group no longer holds its items
    assert [len(group) for group in groups] == [1]
    assert [list(group) for group in batches(range(3), None)] == [[0, 1, 2]]
    with pytest.raises(ValueError, match="batch_size must be a positive whole number, not 0"):
        list(batches(range(3), 0))


def test_row_stops_cut_multi_token_steps_at_each_rows_limit_and_stop_token():
    finished, steps = [], []
    stops = RowStops(
        0,
        [3, None, 10],
        stop_ids=[1],
        on_finish=lambda row, tokens, cancelled, fastmtp, scores: finished.append(
            (row, list(tokens), cancelled)
        ),
        on_tokens=steps.append,
    )
    tokens = torch.tensor([[5, 6, 7, 8], [5, 1, 9, 9], [4, 4, 4, 4]])
    done = stops.commit_rows(torch.tensor([0, 1, 2]), tokens, torch.tensor([4, 4, 2]))
    assert done.tolist() == [True, True, False] and steps == [3 + 2 + 2]
    assert finished == []  # handed out at the next step, once its FastMTP counts are recorded
    stops.commit_rows(torch.tensor([2]), torch.tensor([[7, 1]]), torch.tensor([1]))
    assert finished == [(0, [5, 6, 7], False), (1, [5, 1], False)]
    stops.close()  # the row generate itself ended
    assert finished[-1] == (2, [4, 4, 7], False) and steps == [7, 1]


def test_row_stops_read_the_librarys_layout_and_finish_cancelled_rows():
    finished = []
    gone = [False]
    stops = RowStops(
        2,
        [None, None],
        stop_ids=[1],
        cancelled=[lambda: gone[0], None],
        on_finish=lambda row, tokens, cancelled, fastmtp, scores: finished.append(
            (row, list(tokens), cancelled)
        ),
    )
    prompt = [[0, 9], [9, 9]]
    assert stops(torch.tensor([p + [5] for p in prompt]), None).tolist() == [False, False]
    gone[0] = True
    assert stops(torch.tensor([p + [5, 6] for p in prompt]), None).tolist() == [True, False]
    assert stops(torch.tensor([p + [5, 6, 2] for p in prompt]), None).tolist() == [True, False]
    stops.close()
    assert finished == [(0, [5, 6], True), (1, [5, 6, 2], False)]


def test_run_groups_pages_and_gives_each_page_what_it_gives_alone(greedy, scans, monkeypatch):
    calls = count_generate_calls(greedy[0], monkeypatch)
    driver = BatchDriver(*greedy, mode="tiny", max_new_tokens=3)
    outcomes = list(driver.run([Page(image) for image in scans], batch_size=2))
    assert calls == [2, 1]
    for outcome, image in zip(outcomes, scans, strict=True):
        expected = alone(greedy, image, 3)
        assert outcome.token_ids == expected and outcome.tokens == 3
        assert outcome.markdown == greedy[1].decode_ocr([expected], None)
        assert outcome.prompt_tokens > 0 and outcome.fastmtp is None


def test_pages_stop_at_their_own_limits_and_are_handed_out_as_they_finish(greedy, scans, monkeypatch):
    calls = count_generate_calls(greedy[0], monkeypatch)
    steps: list[int] = []
    done_at: dict[int, int] = {}

    def page(index: int, limit: int) -> Page:
        return Page(scans[index], limit, done=lambda outcome: done_at.setdefault(index, sum(steps)))

    driver = BatchDriver(*greedy, mode="tiny", progress=steps.append)
    limits = [2, 7, 4]
    outcomes = driver.run_batch([page(i, n) for i, n in enumerate(limits)])
    assert calls == [3]  # one generate call for the three pages
    assert [o.token_ids for o in outcomes] == [alone(greedy, scans[i], n) for i, n in enumerate(limits)]
    # One token per running row and step, each row counted up to its own limit.
    assert steps == [3, 3, 2, 2, 1, 1, 1]
    # Page 1 finishes at step 2 and is handed out at step 3, before that step's tokens; page 3 at
    # step 5; page 2 when generate returns.
    assert done_at == {0: 6, 2: 10, 1: 13}
    assert outcomes[0].seconds < outcomes[2].seconds < outcomes[1].seconds


def test_fastmtp_batches_cut_pages_to_their_limits_and_report_counts_so_far(fastmtp, scans):
    steps: list[int] = []
    driver = BatchDriver(*fastmtp, mode="tiny", progress=steps.append)
    early, late = driver.run_batch([Page(scans[0], 3), Page(scans[1], 9)])
    assert late.fastmtp == fastmtp[0].fastmtp_stats  # the last page reports the whole call
    assert early.token_ids == alone(fastmtp, scans[0], 3) and late.token_ids == alone(fastmtp, scans[1], 9)
    assert sum(steps) == 12
    assert early.fastmtp["batch_size"] == 2
    assert early.fastmtp["verification_forwards"] < late.fastmtp["verification_forwards"]


@pytest.mark.parametrize("loaded", ["greedy", "fastmtp"])
def test_a_cancelled_page_stops_and_the_others_go_on(request, loaded, scans):
    loaded = request.getfixturevalue(loaded)
    steps: list[int] = []
    driver = BatchDriver(*loaded, mode="tiny", progress=steps.append)
    pages = [Page(scans[0], 60, cancelled=lambda: sum(steps) >= 10), Page(scans[1], 12)]
    given_up, kept = driver.run_batch(pages)
    assert isinstance(given_up, Cancelled)
    assert kept.token_ids == alone(loaded, scans[1], 12)
    assert sum(steps) < 12 + 12  # the cancelled page stopped after a few tokens, not at 60


def test_a_batch_whose_pages_are_all_cancelled_ends_at_once(greedy, scans, monkeypatch):
    steps: list[int] = []
    driver = BatchDriver(*greedy, mode="tiny", progress=steps.append)
    outcomes = driver.run_batch([Page(image, 4096, cancelled=lambda: sum(steps) >= 6) for image in scans[:2]])
    assert all(isinstance(o, Cancelled) for o in outcomes)
    assert sum(steps) <= 8
    calls = count_generate_calls(greedy[0], monkeypatch)
    assert isinstance(driver.run_batch([Page(scans[0], cancelled=lambda: True)])[0], Cancelled)
    assert calls == []  # a page given up before its batch starts costs nothing


def test_a_failed_batch_is_retried_page_by_page(greedy, scans, monkeypatch, tmp_path):
    calls = count_generate_calls(greedy[0], monkeypatch)
    driver = BatchDriver(*greedy, mode="tiny", max_new_tokens=2)
    missing = tmp_path / "missing.png"
    outcomes = driver.run_batch([Page(scans[0]), Page(str(missing)), Page(scans[1])])
    assert calls == [1, 1]  # the batch failed before generating; the good pages went alone
    assert isinstance(outcomes[1], Exception) and "missing.png" in str(outcomes[1])
    assert [outcomes[0].token_ids, outcomes[2].token_ids] == [alone(greedy, s, 2) for s in scans[:2]]


class FailsInBatches(StoppingCriteria):
    """A device error at the fourth decoding step of any batch of more than one page."""

    def __init__(self):
        self.steps = 0

    def __call__(self, input_ids, scores, **kwargs):
        if input_ids.shape[0] > 1:
            self.steps += 1
            if self.steps == 4:
                raise RuntimeError("device lost")
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def test_pages_finished_before_a_failure_keep_their_text_and_only_the_others_are_retried(
    greedy, scans, monkeypatch
):
    calls = count_generate_calls(greedy[0], monkeypatch)
    handed_out: list[int] = []
    driver = BatchDriver(*greedy, mode="tiny", stopping_criteria=[FailsInBatches()])
    pages = [Page(scans[i], n, done=lambda outcome, i=i: handed_out.append(i)) for i, n in ((0, 2), (1, 6))]
    outcomes = driver.run_batch(pages)
    assert calls == [2, 1]  # page 1 finished at step 2, before the failure at step 4: not run again
    assert handed_out == [0, 1]  # each page handed out once
    assert all(isinstance(o, Generation) for o in outcomes)
    assert [o.token_ids for o in outcomes] == [alone(greedy, scans[0], 2), alone(greedy, scans[1], 6)]
