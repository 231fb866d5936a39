"""``jina-ocr convert --resume``: which documents an earlier run into the same folder already finished.

Every run with ``-o`` (local or through endpoints) records the options that shape the text (model or
served model, prompt, token limit, page selection, resolution, precision, retries with sampling) in
the output folder. A resume with other options would mix texts
of two kinds in one folder, so it is refused, naming the options. A document counts as done when its
output file exists (files are written atomically, so an existing one is complete) and lists every
selected page as converted; a document with a failed page is done again.

A run without ``--resume`` into a folder converted with other options replaces the record, and the
outputs of the earlier run stay until this one rewrites them; if it is interrupted, a ``--resume``
with its options must not take those as its own. So the record also says ``since`` when its options
were first used there, and an output written before then is not done.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time

from jina_ocr.commands._output import Outputs
from jina_ocr.errors import UserError
from jina_ocr.loading import MODEL_ENV
from jina_ocr.runtime.documents import PageSelection
from jina_ocr.services.conversion import PAGE_MARKER

RECORD = ".jina-ocr-convert.json"

FLAGS = {
    "model": "--model",
    "revision": "--revision",
    "served_model": "--served-model",
    "prompt": "--prompt",
    "max_new_tokens": "--max-new-tokens",
    "pages": "--pages",
    "dpi": "--dpi",
    "mode": "--mode",
    "dtype": "--dtype",
    "quantize": "--quantize",
    "retry_truncated": "--retry-truncated",
}

_CONVERTED = re.compile("^" + re.escape(PAGE_MARKER).replace(r"\{page\}", r"(\d+)") + "$", re.MULTILINE)


def text_options(args: argparse.Namespace, served_model: str | None) -> dict:
    """The options of this run that shape its text. ``served_model`` is the endpoints' model, which
    chose how it runs; None for a local run, whose model is ``--model``, else ``$JINA_OCR_MODEL``, else
    the bundled one, run as ``--revision``, ``--mode``, ``--dtype`` and ``--quantize`` say."""
    pages = [list(r) for r in PageSelection.parse(args.pages).ranges] if args.pages else None
    local = {
        "model": args.model or os.environ.get(MODEL_ENV) or "bundled",
        "revision": args.revision,
        "mode": args.mode,
        "dtype": str(args.dtype),
        "quantize": args.quantize,
    }
    return {
        **{key: value if served_model is None else None for key, value in local.items()},
        "served_model": served_model,
        "prompt": args.prompt,
        "max_new_tokens": args.max_new_tokens,
        "pages": pages,
        "dpi": args.dpi,
        "retry_truncated": args.retry_truncated or None,  # None: records of runs before the option
    }


def write_record(outputs: Outputs, options: dict) -> None:
    """Record the options of this run in ``outputs``, for a later ``--resume``, with ``since``: kept
    from the record there when its options are these, else now. A place that cannot take it (a full
    disk, no permission) stops the run before any page is converted, in one line."""
    earlier = _recorded(outputs)
    since = earlier.get("since") if earlier and not _changed(earlier, options) else None
    record = {**options, "since": since if since is not None else time.time()}
    try:
        outputs.write(RECORD, json.dumps(record, indent=2) + "\n")
    except OSError as error:
        raise UserError(
            f"{outputs.location(RECORD)}: cannot be written ({error.strerror or error})"
        ) from None


def remaining(outputs: Outputs, options: dict, jobs: list) -> list:
    """The jobs (:class:`jina_ocr.commands.convert.Job`) whose documents are not done in ``outputs``;
    refuses a record with other options. The caller reports how many were done (and closes their
    documents)."""
    recorded = _recorded(outputs)
    if recorded is None:
        if any(outputs.exists(job.output) for job in jobs):
            raise UserError(f"--resume: {outputs} has no {RECORD} saying which options wrote its files")
        return jobs
    changed = _changed(recorded, options)
    if changed:
        raise UserError(f"--resume: {outputs} was converted with other options: {'; '.join(changed)}")
    since = math.floor(recorded.get("since", 0))  # file systems and S3 keep whole seconds, some
    return [job for job in jobs if not _done(outputs, job.output, job.numbers, since)]


def _recorded(outputs: Outputs) -> dict | None:
    """The record in ``outputs``, or None when there is none."""
    text = outputs.read(RECORD)
    if text is None:
        return None
    try:
        recorded = json.loads(text)
    except ValueError as error:
        raise UserError(f"--resume: {outputs.location(RECORD)} is unreadable: {error}") from None
    if not isinstance(recorded, dict):
        raise UserError(f"--resume: {outputs.location(RECORD)} is not a record of options")
    return recorded


def _changed(recorded: dict, options: dict) -> list[str]:
    """The options that differ from the record, as ``--flag (was X, now Y)``."""
    return [
        f"{flag} (was {recorded.get(key)!r}, now {options[key]!r})"
        for key, flag in FLAGS.items()
        if recorded.get(key) != options[key]
    ]


def _done(outputs: Outputs, name: str, numbers: list[int], since: float) -> bool:
    """Whether the output ``name`` was written since ``since`` and lists exactly ``numbers``, all
    converted."""
    written = outputs.modified(name)
    text = outputs.read(name) if written is not None and written >= since else None
    if text is None:
        return False
    if name.endswith(".json"):
        try:
            pages = json.loads(text)["pages"]
            return [p["page"] for p in pages] == numbers and all(p["error"] is None for p in pages)
        except (ValueError, KeyError, TypeError):
            return False
    # a failed page is written as "<!-- page N: not converted: ... -->", which this does not match
    return [int(n) for n in _CONVERTED.findall(text)] == numbers
