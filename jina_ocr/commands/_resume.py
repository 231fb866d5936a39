"""``jina-ocr convert --resume``: which documents an earlier run into the same folder already finished.

Every endpoint run with ``-o`` records the options that shape the text (prompt, token limit, served
model, page selection, resolution) in the output folder. A resume with other options would mix texts
of two kinds in one folder, so it is refused, naming the options. A document counts as done when its
output file exists (files are written atomically, so an existing one is complete) and lists every
selected page as converted; a document with a failed page is done again.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from jina_ocr.commands._output import write_atomic
from jina_ocr.errors import UserError
from jina_ocr.runtime.documents import PageSelection
from jina_ocr.services.conversion import PAGE_MARKER

RECORD = ".jina-ocr-convert.json"

FLAGS = {
    "prompt": "--prompt",
    "max_new_tokens": "--max-new-tokens",
    "served_model": "--served-model",
    "pages": "--pages",
    "dpi": "--dpi",
}

_CONVERTED = re.compile("^" + re.escape(PAGE_MARKER).replace(r"\{page\}", r"(\d+)") + "$", re.MULTILINE)


def text_options(args: argparse.Namespace, served_model: str) -> dict:
    pages = [list(r) for r in PageSelection.parse(args.pages).ranges] if args.pages else None
    return {
        "prompt": args.prompt,
        "max_new_tokens": args.max_new_tokens,
        "served_model": served_model,
        "pages": pages,
        "dpi": args.dpi,
    }


def write_record(folder: Path, options: dict) -> None:
    """Record the options of this run in ``folder``, for a later ``--resume``; a folder that cannot take
    it (a full disk, no permission) stops the run before any page is converted, in one line."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / RECORD, json.dumps(options, indent=2) + "\n")
    except OSError as error:
        raise UserError(f"{folder / RECORD}: cannot be written ({error.strerror or error})") from None


def remaining(folder: Path, options: dict, jobs: list) -> list:
    """The jobs (:class:`jina_ocr.commands.convert.Job`) whose documents are not done in ``folder``;
    refuses a record with other options. The caller reports how many were done (and closes their
    documents)."""
    outputs = [folder / job.output for job in jobs]
    record_path = folder / RECORD
    if not record_path.is_file():
        if any(output.exists() for output in outputs):
            raise UserError(f"--resume: {folder} has no {RECORD} saying which options wrote its files")
        return jobs
    try:
        recorded = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"--resume: {record_path} is unreadable: {error}") from None
    changed = [
        f"{flag} (was {recorded.get(key)!r}, now {options[key]!r})"
        for key, flag in FLAGS.items()
        if recorded.get(key) != options[key]
    ]
    if changed:
        raise UserError(f"--resume: {folder} was converted with other options: {'; '.join(changed)}")
    return [job for job, output in zip(jobs, outputs, strict=True) if not _done(output, job.numbers)]


def _done(output: Path, numbers: list[int]) -> bool:
    """Whether ``output`` lists exactly ``numbers``, all converted."""
    try:
        text = output.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if output.suffix == ".json":
        try:
            pages = json.loads(text)["pages"]
            return [p["page"] for p in pages] == numbers and all(p["error"] is None for p in pages)
        except (ValueError, KeyError, TypeError):
            return False
    # a failed page is written as "<!-- page N: not converted: ... -->", which this does not match
    return [int(n) for n in _CONVERTED.findall(text)] == numbers
