"""The one batch driver: page images in, one Markdown text per page out, through ``model.generate``.

``jina-ocr convert`` (``jina_ocr.services.conversion.Converter``) and ``jina-ocr serve`` (its batching
queue) run pages through :class:`BatchDriver`, so they share one way of

- grouping pages into batches (:func:`batches`: at most ``size`` pages alive at a time);
- running a batch: ``processor.prepare_ocr_inputs``, one greedy ``generate`` (FastMTP when the
  model's generation config says so), every page cut to its own token limit and decoded with
  ``processor.decode_ocr``;
- finishing pages one by one (:class:`RowStops`): a page that reaches EOS or its own limit, or whose
  request was cancelled, is handed to its ``done`` callback while the batch goes on with the others;
- reporting progress: ``progress(count)`` after every decoding step, with the tokens it added;
- scoring every committed token from the main model's logits and saying how each page ended
  (:mod:`jina_ocr.runtime.confidence`);
- retrying a failed batch page by page (:meth:`BatchDriver.run_batch`), so one bad page costs only
  itself.

Under greedy decoding a page's tokens do not depend on the other pages of its batch, so a page
cut to its own limit reads exactly as it would generated alone with that limit.

:class:`RowStops` is a Transformers ``StoppingCriteria``: the library's loops (greedy, sampling, and
FastMTP at batch size 1) call it after every step with the whole ``input_ids`` and finish the rows
it returns True for (padding them from then on). Our batched FastMTP loop (generation/batched.py),
where rows commit different numbers of tokens per step and leave the batch when finished, calls its
``commit_rows`` instead (the row-stop protocol of generation/dispatch.py). A row that finished in a
step is handed out at the next step (or when ``generate`` returns): by then the step's FastMTP counts are recorded, so the counts a page reports
include its own last step.

This is installed code: it drives the model package's classes (never a copy loaded through
``trust_remote_code``) and does not ship to the Hub.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.generation import StoppingCriteria, StoppingCriteriaList

from jina_ocr.remote_code.generation.settings import token_ids
from jina_ocr.runtime.checks import positive_int
from jina_ocr.runtime.confidence import LogitsTap, PageScores, finish_reason


class Cancelled(Exception):
    """The outcome of a page whose request was cancelled before its text was done."""


@dataclass
class Page:
    """One page for the driver: its image (what ``processor.prepare_ocr_inputs`` takes), its own token
    limit (None: the driver's), a test that says its request was given up, and a callback that
    receives its outcome (a :class:`Generation` or an exception) as soon as it is known."""

    image: Any
    max_new_tokens: int | None = None
    cancelled: Callable[[], bool] | None = None
    done: Callable[[Generation | Exception], None] | None = None


@dataclass
class Generation:
    """One page's text. ``tokens`` counts the generated tokens without trailing end-of-sequence and
    padding tokens; ``token_ids`` are the tokens themselves, cut to the page's limit. ``seconds`` is
    the page's share of its batch's wall time: every moment is split among the pages still being
    worked on, so the seconds of a batch's pages add up to the batch's time. ``fastmtp`` holds the
    FastMTP counts of the batch's ``generate`` call up to the step that finished the page, or None
    without FastMTP. ``regions`` are the grounding spans (``decode_ocr(return_regions=True)``).
    ``logprobs`` holds each of ``token_ids``' log-probability under the main model (None: not
    known), ``finish_reason`` how the page ended (:mod:`jina_ocr.runtime.confidence`; None: not
    known)."""

    markdown: str
    tokens: int
    prompt_tokens: int
    seconds: float
    fastmtp: dict | None
    regions: list = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    finish_reason: str | None = "stop"


def batches(items: Iterable, size: int | None) -> Iterator[list]:
    """Consecutive groups of up to ``size`` items (one group of all of them when None).

    Like :func:`itertools.groupby`, each list is emptied when the next one is requested, so when
    ``items`` produces pages lazily at most ``size`` of them are alive at a time, even in a plain
    ``for`` loop.
    """
    if size is not None:
        positive_int("batch_size", size)
    group: list = []
    for item in items:
        group.append(item)
        if len(group) == size:
            yield group
            group.clear()
    if group:
        yield group
        group.clear()


class _SharedClock:
    """Splits a batch's wall time among its pages: each interval goes in equal shares to the pages
    still being worked on."""

    def __init__(self, pages: int):
        self.last = time.perf_counter()
        self.share = 0.0
        self.active = pages

    def leave(self) -> float:
        """A page is done: its seconds."""
        now = time.perf_counter()
        self.share += (now - self.last) / self.active
        self.last, self.active = now, self.active - 1
        return self.share


class BatchDriver:
    """Runs pages through ``model`` with ``processor``.

    ``prompt`` is the instruction (None: the processor's default), ``mode`` the processor's resolution
    mode (None: its own), ``max_new_tokens`` the limit of pages that bring none (None: the model's
    generation config), ``progress`` a callback told the tokens each decoding step adds, and
    ``generate_kwargs`` go to every ``generate`` call (``do_sample`` defaults to False).
    """

    def __init__(
        self,
        model,
        processor,
        *,
        prompt: str | None = None,
        mode: str | None = None,
        max_new_tokens: int | None = None,
        progress: Callable[[int], None] | None = None,
        **generate_kwargs,
    ):
        self.model = model
        self.processor = processor
        self.prompt = prompt
        self.mode = mode
        self.max_new_tokens = max_new_tokens
        self.progress = progress
        self.generate_kwargs = {"do_sample": False, **generate_kwargs}

    def run(
        self, pages: Iterable[Page], batch_size: int | None = None, prompt: str | None = None
    ) -> Iterator[Generation | Exception]:
        """Outcomes of ``pages`` in order, ``batch_size`` pages per ``generate`` call (all at once
        when None), each batch retried page by page if it fails (see :meth:`run_batch`)."""
        for group in batches(pages, batch_size):
            yield from self.run_batch(group, prompt)

    def run_batch(self, pages: Sequence[Page], prompt: str | None = None) -> list[Generation | Exception]:
        """Outcomes of one batch, in order: the retry policy of every caller.

        When ``generate`` fails, the pages it had already finished keep their text and the others are
        run again one at a time, so that one bad page (an image the model cannot take, a page that
        runs out of memory) costs only itself; a page that fails alone gets its exception.
        """
        outcomes: list[Generation | Exception | None] = [None] * len(pages)
        try:
            self._generate(pages, prompt, outcomes)
        except Exception as error:
            if len(pages) == 1:
                if outcomes[0] is None:
                    self._deliver(pages, outcomes, 0, error)
            else:
                for index, page in enumerate(pages):
                    if outcomes[index] is None:
                        outcomes[index] = self.run_batch([page], prompt)[0]
        return outcomes

    def generate(self, pages: Sequence[Page], prompt: str | None = None) -> list[Generation | Exception]:
        """One ``generate`` call for ``pages``, raising if it fails; cancelled pages come back as
        :class:`Cancelled`."""
        outcomes: list[Generation | Exception | None] = [None] * len(pages)
        self._generate(pages, prompt, outcomes)
        return outcomes

    def _deliver(self, pages: Sequence[Page], outcomes: list, index: int, outcome) -> None:
        outcomes[index] = outcome
        if pages[index].done is not None:
            pages[index].done(outcome)

    def _limits(self, pages: list[Page], kwargs: dict) -> list[int | None]:
        """Each page's own limit, or the driver's; when neither gives one to any page, ``generate``
        decides alone (``max_new_tokens`` or ``max_length`` of the call or the generation config)."""
        limits = [
            self.max_new_tokens if page.max_new_tokens is None else page.max_new_tokens for page in pages
        ]
        if any(limit is not None for limit in limits):
            fallback = kwargs.get("max_new_tokens", self.model.generation_config.max_new_tokens)
            limits = [fallback if limit is None else limit for limit in limits]
        return limits

    def _generate(self, pages: Sequence[Page], prompt: str | None, outcomes: list) -> None:
        """Fill ``outcomes`` (and call each page's ``done``) as pages finish; raise if ``generate``
        fails, leaving the pages not finished by then at None."""
        live = []
        for index, page in enumerate(pages):
            if page.cancelled is not None and page.cancelled():
                self._deliver(pages, outcomes, index, Cancelled("the request was cancelled"))
            else:
                live.append(index)
        if not live:
            return
        clock = _SharedClock(len(live))
        inputs = self.processor.prepare_ocr_inputs(
            [pages[i].image for i in live],
            prompt=prompt if prompt is not None else self.prompt,
            device=self.model.device,
            dtype=self.model.dtype,
            mode=self.mode,
        )
        kwargs = dict(self.generate_kwargs)
        config = self.model.generation_config
        eos = token_ids(kwargs.get("eos_token_id", config.eos_token_id))
        eos = eos or token_ids(self.model.config.eos_token_id)
        trailing = set(eos) | set(token_ids(kwargs.get("pad_token_id", config.pad_token_id)))
        limits = self._limits([pages[i] for i in live], kwargs)
        if all(limit is not None for limit in limits):
            kwargs["max_new_tokens"] = max(limits)

        def finish(
            row: int, token_ids: list[int], cancelled: bool, fastmtp: dict | None, scores: PageScores
        ) -> None:
            seconds = clock.leave()
            if cancelled:
                self._deliver(pages, outcomes, live[row], Cancelled("the request was cancelled"))
                return
            count = len(token_ids)
            while count and token_ids[count - 1] in trailing:
                count -= 1
            markdown, regions = self.processor.decode_ocr([token_ids], None, return_regions=True)
            prompt_tokens = int(inputs["attention_mask"][row].sum())
            # Sampled tokens are often not the first choice: only under greedy decoding does that mark a
            # token the loop guard overruled.
            overruled = scores.overruled > 0 and not kwargs.get("do_sample")
            ended = finish_reason(bool(token_ids) and token_ids[-1] in eos, overruled)
            generation = Generation(
                markdown,
                count,
                prompt_tokens,
                seconds,
                fastmtp,
                regions,
                list(token_ids),
                scores.logprobs,
                ended,
            )
            self._deliver(pages, outcomes, live[row], generation)

        tap = LogitsTap(self.model)
        stops = RowStops(
            inputs["input_ids"].shape[1],
            limits,
            eos,
            cancelled=[pages[i].cancelled for i in live],
            on_finish=finish,
            on_tokens=self.progress,
            tap=tap,
        )
        criteria = StoppingCriteriaList([*(kwargs.pop("stopping_criteria", None) or []), stops])
        try:
            with torch.inference_mode(), tap:
                self.model.generate(**inputs, stopping_criteria=criteria, **kwargs)
        finally:
            stops.announce()  # rows finished before a failure are complete
        stops.close()


class RowStops(StoppingCriteria):
    """Stops the rows of a left-padded batch one by one, as their pages are done.

    ``limits`` holds each row's own token limit (None: only ``generate``'s), ``stop_ids`` the tokens
    that end a row (EOS), ``cancelled`` a test per row (None: never cancelled). ``on_finish(row,
    tokens, cancelled, fastmtp, scores)`` receives a finished row's tokens, cut to its limit and ending
    with the stop token when it met one, the call's FastMTP counts so far (None without FastMTP) and
    the row's :class:`PageScores`;
    ``on_tokens(count)`` the number of tokens a step added over all rows, each row counted up to its
    own limit. ``fastmtp`` is set by ``generate`` (generation/dispatch.py) to the running call's
    ``FastMTPStats`` when FastMTP decodes it. With ``tap`` (a :class:`LogitsTap` on the model, open
    while ``generate`` runs) every committed token is scored from the forward that chose it, into
    ``scores[row]`` (whose ``logprobs`` are None without a tap).
    """

    def __init__(
        self,
        prompt_length: int,
        limits: Sequence[int | None],
        stop_ids: Iterable[int],
        *,
        cancelled: Sequence[Callable[[], bool] | None] | None = None,
        on_finish: Callable[[int, list[int], bool, dict | None, PageScores], None] | None = None,
        on_tokens: Callable[[int], None] | None = None,
        tap: LogitsTap | None = None,
    ):
        self.prompt_length = prompt_length
        self.limits = list(limits)
        self.stop_ids = frozenset(stop_ids)
        self.cancelled = list(cancelled) if cancelled is not None else [None] * len(self.limits)
        if len(self.cancelled) != len(self.limits):
            raise ValueError(f"{len(self.limits)} limits but {len(self.cancelled)} cancellation tests")
        self.on_finish = on_finish
        self.on_tokens = on_tokens
        self.fastmtp = None
        self.tokens: list[list[int]] = [[] for _ in self.limits]
        self.tap = tap
        self.scores = [PageScores() if tap is not None else PageScores(None) for _ in self.limits]
        self.finished = [False] * len(self.limits)
        self._seen = 0  # generated columns of input_ids already read by __call__
        self._unannounced: list[tuple[int, bool]] = []

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        """The library's loops: the columns added since the last call are this step's tokens, the
        same number for every row (rows already finished only get padding, which is ignored)."""
        fresh = input_ids[:, self.prompt_length + self._seen :]
        self._seen += fresh.shape[1]
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        self.commit_rows(rows, fresh, torch.full_like(rows, fresh.shape[1]))
        return torch.tensor(self.finished, dtype=torch.bool, device=input_ids.device)

    def commit_rows(self, rows: torch.Tensor, tokens: torch.Tensor, counts: torch.Tensor) -> torch.BoolTensor:
        """Record one step: row ``rows[i]`` of the batch committed the first ``counts[i]`` of
        ``tokens[i]``. Returns, for each of ``rows``, whether it is finished now."""
        self.announce()
        # The step's reads to the host: its scores, then its tokens (which then wait for nothing).
        scored = self.tap.score(tokens).tolist() if self.tap is not None else None
        table = torch.cat([rows[:, None], counts[:, None], tokens], dim=1).tolist()
        added = 0
        for index, (row, count, *step) in enumerate(table):
            if self.finished[row]:
                continue
            mine, limit = self.tokens[row], self.limits[row]
            stopped = False
            for column, token in enumerate(step[:count]):
                if limit is not None and len(mine) >= limit:
                    break
                mine.append(token)
                if scored is not None:
                    self.scores[row].add(*scored[index][column])
                added += 1
                if token in self.stop_ids:
                    stopped = True
                    break
            test = self.cancelled[row]
            if stopped or (limit is not None and len(mine) >= limit):
                self._finish(row, cancelled=False)
            elif test is not None and test():
                self._finish(row, cancelled=True)
        if added and self.on_tokens is not None:
            self.on_tokens(added)
        return torch.tensor([self.finished[row] for row, *_ in table], dtype=torch.bool, device=tokens.device)

    def _finish(self, row: int, cancelled: bool) -> None:
        self.finished[row] = True
        self._unannounced.append((row, cancelled))

    def announce(self) -> None:
        """Hand out the rows that finished since the last call; also after a failed ``generate``,
        whose finished rows are complete."""
        waiting, self._unannounced = self._unannounced, []
        if self.on_finish is not None:
            for row, cancelled in waiting:
                counts = self.fastmtp.as_dict() if self.fastmtp is not None else None
                self.on_finish(row, self.tokens[row], cancelled, counts, self.scores[row])

    def close(self) -> None:
        """After ``generate`` returned: every row is finished (those ``generate`` itself ended, at
        its own limit, included) and handed out."""
        for row, finished in enumerate(self.finished):
            if not finished:
                self._finish(row, cancelled=False)
        self.announce()
