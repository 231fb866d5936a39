"""What converting a page gives back, whoever converted it: a local model
(:class:`jina_ocr.services.conversion.Converter`) or an OpenAI-compatible endpoint
(:class:`jina_ocr.services.endpoints.EndpointConverter`), so that one writer serves both.
"""

from __future__ import annotations

from dataclasses import dataclass

from jina_ocr.runtime.batching import Generation
from jina_ocr.runtime.confidence import ERROR, summarize


@dataclass
class PageResult:
    """One page's outcome. ``error`` is None on success, else the reason and ``markdown`` is None.

    ``seconds`` is the page's share of the wall time of its batch (render, preprocessing, generation,
    decoding), so the seconds of a document add up to its conversion time. ``tokens`` counts generated
    tokens without the end-of-sequence and padding tokens. ``fastmtp`` holds the FastMTP statistics of
    the ``generate`` call the page was part of (its batch) up to the step that finished the page, or
    None without FastMTP. ``finish_reason`` says how the page ended (``error`` when it failed; None when
    an endpoint did not say), ``confidence``, ``mean_logprob`` and ``min_logprob`` how sure the model
    was of it (None when unknown); see :mod:`jina_ocr.runtime.confidence`. ``temperature`` is 0 for
    the greedy text, else the sampling temperature of the retry whose text this is (see
    :func:`retry_temperature`).
    """

    source: str
    page: int
    markdown: str | None = None
    tokens: int = 0
    seconds: float = 0.0
    fastmtp: dict | None = None
    error: str | None = None
    finish_reason: str | None = None
    confidence: float | None = None
    mean_logprob: float | None = None
    min_logprob: float | None = None
    temperature: float = 0.0

    def __post_init__(self):
        if self.error is not None:
            self.finish_reason = ERROR

    @property
    def ok(self) -> bool:
        return self.error is None

    def doubtful(self, min_confidence: float | None) -> bool:
        """Whether a converted page's confidence is known and below ``min_confidence`` (None: no
        threshold): the pages ``convert --min-confidence`` marks."""
        return min_confidence is not None and self.confidence is not None and self.confidence < min_confidence

    @classmethod
    def converted(
        cls, source: str, page: int, generation: Generation, render_seconds: float, temperature: float = 0.0
    ) -> PageResult:
        """A successful page: what ``generate`` made of it (at ``temperature``), timed from rendering to
        decoding."""
        summary = summarize(generation.logprobs, generation.finish_reason)
        return cls(
            source,
            page,
            markdown=generation.markdown,
            tokens=generation.tokens,
            seconds=render_seconds + generation.seconds,
            fastmtp=generation.fastmtp,
            finish_reason=generation.finish_reason,
            confidence=summary.confidence,
            mean_logprob=summary.mean_logprob,
            min_logprob=summary.min_logprob,
            temperature=temperature,
        )

    def to_dict(self) -> dict:
        """The per-page JSON object of ``jina-ocr convert --format json`` and ``POST /v1/documents``."""
        return {
            "page": self.page,
            "markdown": self.markdown,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 4),
            "finish_reason": self.finish_reason,
            "confidence": _rounded(self.confidence),
            "mean_logprob": _rounded(self.mean_logprob),
            "min_logprob": _rounded(self.min_logprob),
            "temperature": self.temperature,
            "fastmtp": self.fastmtp,
            "error": self.error,
        }


def retry_temperature(attempt: int) -> float:
    """Sampling temperature of the ``attempt``-th (from 1) retry of a page that reached its token limit
    (``convert --retry-truncated``): 0.2, 0.4 ... up to 1.0. It rises because a page that loops under
    greedy decoding mostly loops at a low temperature too; it stops at 1, where sampling still follows
    the model's own distribution."""
    return round(min(0.2 * attempt, 1.0), 1)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def blank_generation() -> Generation:
    """What a page without ink (:func:`~jina_ocr.runtime.documents.is_blank`) converts to: empty Markdown,
    no tokens, no time, the model not run (so nothing it was unsure of: confidence 1)."""
    return Generation(markdown="", tokens=0, prompt_tokens=0, seconds=0.0, fastmtp=None, logprobs=[])
