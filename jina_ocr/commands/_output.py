"""How ``jina-ocr convert`` writes files (its outputs, the ``--resume`` record, the run summary):
atomically, into a local folder or object storage (:class:`Outputs`).

A local file is written to a temporary file in the same folder and renamed, so an interrupted run
leaves finished files and no half-written ones, and ``--resume`` (:mod:`jina_ocr.commands._resume`)
can take any file that exists as complete.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from jina_ocr.services import storage


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


class Outputs:
    """Where a run's files go: a local folder, or a prefix in object storage (``s3://bucket/out/``).

    Files are named relative to it (``report.md``, the ``--resume`` record). A local file is written
    with :func:`write_atomic`, its folder made first; an object with one PUT, which S3 makes visible
    whole or not at all. Either way a write that fails raises OSError with the reason and leaves what
    was there before.
    """

    def __init__(self, where: str | os.PathLike):
        self.remote = storage.is_object_url(where)
        self.where: str | Path = (where.rstrip("/") + "/") if self.remote else Path(where)
        if self.remote:
            storage.split_url(self.where)  # a URL without a bucket is refused now

    def __str__(self) -> str:
        return str(self.where)

    def location(self, name: str) -> str:
        """How messages name the file ``name``: its path or URL."""
        return f"{self.where}{name}" if self.remote else str(self.where / name)

    def write(self, name: str, text: str) -> None:
        if not self.remote:
            self.where.mkdir(parents=True, exist_ok=True)
            write_atomic(self.where / name, text)
            return
        try:
            storage.write_text(self.location(name), text)
        except storage.StorageError as error:
            raise OSError(error.reason) from None

    def read(self, name: str) -> str | None:
        """The text of ``name``, or None when there is none (or it cannot be read as text)."""
        if self.remote:
            return storage.read_text(self.location(name))
        try:
            return (self.where / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def exists(self, name: str) -> bool:
        return self.modified(name) is not None

    def modified(self, name: str) -> float | None:
        """When ``name`` was last written (POSIX seconds), or None when it is not there."""
        if self.remote:
            return storage.modified(self.location(name))
        try:
            return (self.where / name).stat().st_mtime
        except OSError:
            return None
