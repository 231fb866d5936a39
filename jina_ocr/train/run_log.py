"""The log of a training run: ``log.jsonl`` in its folder, one JSON object a line, each also printed, so
that a run followed on a terminal and one read back later say the same (sft, mtp and grpo write it)."""

from __future__ import annotations

import json
from pathlib import Path

LOG = "log.jsonl"


def append_record(out: Path, record: dict) -> None:
    """Add ``record`` to the log of the run in ``out`` and print it."""
    with open(Path(out) / LOG, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)
