"""What a ``jina-ocr convert`` run did, counted as it goes: documents, pages, failures, speed.

At the end the summary is one line on stderr and, with ``-o``, a JSON file in the output folder
(``.jina-ocr-summary.json``, or ``.jina-ocr-summary-I-of-N.json`` for ``--shard I/N``, so that the
jobs of an array writing into one folder keep one each). A document fails when it cannot be opened,
when its output cannot be written, or when its share of failed pages is above
``--max-page-error-rate`` (0 by default: any failed page); a failed document makes the exit status 1.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field

from jina_ocr.commands._output import Outputs


def file_name(shard: tuple[int, int] | None) -> str:
    return ".jina-ocr-summary.json" if shard is None else f".jina-ocr-summary-{shard[0]}-of-{shard[1]}.json"


@dataclass
class RunSummary:
    """The counts of one run (one shard of an array), with the failure threshold it judges documents by."""

    max_page_error_rate: float = 0.0
    shard: tuple[int, int] | None = None
    documents: int = 0
    """Documents converted in this run (written, or shown on stdout), failed ones included."""
    skipped: int = 0
    """Documents ``--resume`` found converted already."""
    failed: dict[str, str] = field(default_factory=dict)
    """Why each failed document failed (the first reason), by label."""
    pages: int = 0
    failed_pages: int = 0
    tokens: int = 0
    finish_reasons: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)

    def fail(self, label: str, reason: str) -> None:
        """A document counted already failed after all (its output could not be written)."""
        self.failed.setdefault(label, reason)

    def unreadable(self, label: str, reason: str) -> None:
        """A document that could not be opened or fetched: counted, and failed."""
        self.documents += 1
        self.fail(label, reason)

    def add(self, label: str, results: list) -> str | None:
        """Count one document's page results; the reason it failed (its share of failed pages above
        the limit), or None."""
        self.documents += 1
        bad = sum(not result.ok for result in results)
        self.pages += len(results)
        self.failed_pages += bad
        self.tokens += sum(result.tokens for result in results)
        self.finish_reasons.update(result.finish_reason for result in results)
        if results and bad / len(results) > self.max_page_error_rate:
            reason = f"{bad} of {len(results)} pages not converted"
            if self.max_page_error_rate:
                reason += f" (more than --max-page-error-rate {self.max_page_error_rate:g})"
            self.fail(label, reason)
            return reason
        return None

    def record(self) -> dict:
        seconds = time.monotonic() - self.started
        return {
            "shard": None if self.shard is None else f"{self.shard[0]}/{self.shard[1]}",
            "documents": self.documents,
            "skipped_as_converted": self.skipped,
            "failed_documents": len(self.failed),
            "pages": self.pages,
            "failed_pages": self.failed_pages,
            "tokens": self.tokens,
            "finish_reasons": dict(sorted(self.finish_reasons.items(), key=lambda item: str(item[0]))),
            "seconds": round(seconds, 3),
            "pages_per_second": round(self.pages / seconds, 4) if seconds > 0 else None,
            "failed": [f"{label}: {reason}" for label, reason in self.failed.items()],
        }

    def line(self) -> str:
        record = self.record()
        text = (
            f"{record['documents']} documents ({record['failed_documents']} failed), {record['pages']} pages "
            f"({record['failed_pages']} failed) in {record['seconds']:.1f} s, "
            f"{record['pages_per_second'] or 0:.2f} pages/s"
        )
        return text + (f"; {self.skipped} already converted" if self.skipped else "")

    def write(self, outputs: Outputs) -> None:
        """Write the record among ``outputs`` (atomically, like them)."""
        outputs.write(file_name(self.shard), json.dumps(self.record(), indent=2) + "\n")
