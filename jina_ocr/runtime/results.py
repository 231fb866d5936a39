"""What converting a page gives back, whoever converted it: a local model
(:class:`jina_ocr.services.conversion.Converter`) or an OpenAI-compatible endpoint
(:class:`jina_ocr.services.endpoints.EndpointConverter`), so that one writer serves both.
"""

from __future__ import annotations

from dataclasses import dataclass

from jina_ocr.runtime.batching import Generation


@dataclass
class PageResult:
    """One page's outcome. ``error`` is None on success, else the reason and ``markdown`` is None.

    ``seconds`` is the page's share of the wall time of its batch (render, preprocessing, generation,
    decoding), so the seconds of a document add up to its conversion time. ``tokens`` counts generated
    tokens without the end-of-sequence and padding tokens. ``fastmtp`` holds the FastMTP statistics of
    the ``generate`` call the page was part of (its batch) up to the step that finished the page, or
    None without FastMTP.
    """

    source: str
    page: int
    markdown: str | None = None
    tokens: int = 0
    seconds: float = 0.0
    fastmtp: dict | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def converted(cls, source: str, page: int, generation: Generation, render_seconds: float) -> PageResult:
        """A successful page: what ``generate`` made of it, timed from rendering to decoding."""
        return cls(
            source,
            page,
            markdown=generation.markdown,
            tokens=generation.tokens,
            seconds=render_seconds + generation.seconds,
            fastmtp=generation.fastmtp,
        )

    def to_dict(self) -> dict:
        """The per-page JSON object of ``jina-ocr convert --format json`` and ``POST /v1/documents``."""
        return {
            "page": self.page,
            "markdown": self.markdown,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 4),
            "fastmtp": self.fastmtp,
            "error": self.error,
        }


def blank_generation() -> Generation:
    """What a page without ink (:func:`~jina_ocr.runtime.documents.is_blank`) converts to: empty Markdown,
    no tokens, no time, the model not run."""
    return Generation(markdown="", tokens=0, prompt_tokens=0, seconds=0.0, fastmtp=None)
