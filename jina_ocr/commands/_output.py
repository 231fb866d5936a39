"""How ``jina-ocr convert`` writes files (its outputs and the ``--resume`` record): atomically.

A file is written to a temporary file in the same folder and renamed, so an interrupted run leaves
finished files and no half-written ones, and ``--resume`` (:mod:`jina_ocr.commands._resume`) can take
any file that exists as complete.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and an atomic rename.

    The temporary name is short and does not contain ``path``'s name, so that any name the file
    system takes (up to 255 bytes) can be written; an OSError leaves ``path`` as it was."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".jina-ocr-", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes the file private; the output is an ordinary file
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
