"""PDF pages drawn in worker processes that a time and a memory limit can stop.

MuPDF holds the GIL while it draws, and a page built to exhaust it (form XObjects nested 30 deep, each
drawing the next twice; millions of path operations) draws for hours while its memory grows. Drawn in
the process that answers ``/health`` or reads Ctrl-C, one such upload freezes a whole server and one
such file a whole ``convert``. So a page of a user's document is drawn in a child process, and the
caller only waits on a pipe (without the GIL, a twentieth of a second at a time, so Ctrl-C is seen at
once):

- a page that takes longer than ``seconds`` to draw has its worker killed and fails with that reason;
- where the system tells a process its size (``/proc``: Linux), a worker's address space is capped
  for each page (``memory`` bytes more than it holds at rest), so MuPDF's allocations fail there and
  the page fails with MuPDF's words; a worker that dies of it fails its page the same way (elsewhere,
  macOS for one, only the time limit applies);
- workers are separate Python programs (``python -m jina_ocr.runtime.render_worker``, importing only
  PyMuPDF), never forks of a process that runs threads and a model; they are kept between pages, each
  keeps its last documents open, one is started as soon as a PDF is opened and a spare whenever one
  starts drawing, so that a page costs one message each way and a copy of its pixels, and a page that
  draws for long holds up no other.

:func:`draw` is the drawing itself, shared with :func:`jina_ocr.runtime.pdf.render_pdf_page` (which
draws trusted pages, those of training and of the benchmarks, in the calling process).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, Pipe

RENDER_SECONDS = 60.0
"""Longest a page may take to draw; an ordinary page takes well under a second."""
RENDER_MEMORY = 2 * 2**30
"""Memory a worker may take for one page beyond what it holds at rest and the page's own bitmap."""
STARTUP_SECONDS = 120.0
"""Longest a new worker may take to import PyMuPDF and take its page (not counted as drawing)."""
OPEN_DOCUMENTS = 4
"""Documents each worker keeps open, so the pages of one document do not reopen it."""
_POLL_SECONDS = 0.05
_CRASHED = "cannot be drawn: the renderer ran out of memory or crashed"


class DrawingError(Exception):
    """A page that cannot be drawn; ``reason`` completes a sentence whose subject is the page."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def draw(page, dpi: int) -> tuple[tuple[int, int], bytes]:
    """A PyMuPDF page drawn once at ``dpi``, RGB without alpha: its (width, height) and its pixels.

    MuPDF draws what it can of a damaged page (garbage in a content stream, a broken embedded image)
    and only warns, which would hand the model a blank or partial page; a warning during this drawing
    is therefore a :class:`DrawingError` carrying MuPDF's words. The warning buffer is emptied first,
    so an earlier page's warnings never fail this one.
    """
    import pymupdf

    pymupdf.TOOLS.reset_mupdf_warnings()
    try:
        pixmap = page.get_pixmap(
            matrix=pymupdf.Matrix(dpi / 72, dpi / 72), alpha=False, colorspace=pymupdf.csRGB
        )
    except Exception as error:  # PyMuPDF raises its own error types for broken pages
        raise DrawingError(f"cannot be rendered: {error}") from error
    finally:
        warnings = pymupdf.TOOLS.mupdf_warnings(reset=True)
    if warnings:
        lines = list(dict.fromkeys(line.strip() for line in warnings.splitlines() if line.strip()))
        raise DrawingError(f"is damaged: MuPDF reports {'; '.join(lines[:3])}")
    return (pixmap.width, pixmap.height), pixmap.samples


@dataclass(frozen=True)
class RenderJob:
    """Page ``number`` (1-based) at ``dpi`` of the document ``token`` names: ``source`` is its absolute
    path or its bytes, sent to a worker only the first time it draws a page of that document."""

    token: str
    source: str | bytes | None
    password: str | None
    number: int
    dpi: int


def _serve(connection: Connection) -> None:
    """A worker's loop: draw the pages asked for, answer with pixels or a reason, until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle; it kills us
    # PyMuPDF imports its layout analysis (onnxruntime) when it is installed: a worker that only draws
    # would take twice as long to start.
    sys.modules.setdefault("pymupdf.layout", None)
    import pymupdf

    documents: OrderedDict[str, pymupdf.Document] = OrderedDict()
    connection.send(("ready",))  # a page's clock starts once this is read, not while PyMuPDF imported
    while True:
        try:
            job, memory = connection.recv()
        except (EOFError, OSError):
            return
        try:
            at_rest = _address_space()
            if at_rest is not None:
                resource.setrlimit(resource.RLIMIT_AS, (at_rest + memory, resource.RLIM_INFINITY))
            if job.token not in documents:
                if isinstance(job.source, bytes):
                    documents[job.token] = pymupdf.open(stream=job.source, filetype="pdf")
                else:
                    documents[job.token] = pymupdf.open(job.source, filetype="pdf")
                if documents[job.token].needs_pass:
                    documents[job.token].authenticate(job.password or "")
                while len(documents) > OPEN_DOCUMENTS:
                    documents.popitem(last=False)[1].close()
            documents.move_to_end(job.token)
            answer = ("ok", *draw(documents[job.token].load_page(job.number - 1), job.dpi))
        except DrawingError as error:
            answer = ("failed", error.reason)
        except MemoryError:
            answer = ("failed", "cannot be drawn: drawing it needs more memory than allowed")
        except Exception as error:  # PyMuPDF's own error types for a document or page it cannot load
            answer = ("failed", f"cannot be drawn: {error}")
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        connection.send(answer)


def _address_space() -> int | None:
    """The worker's present virtual memory size in bytes (what its cap is counted from), or None where
    the system does not say (no ``/proc``): there a cap counted from a guess would fail ordinary pages."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


class _Worker:
    """One worker program and the parent's end of its pipe, with the documents it has open."""

    def __init__(self):
        self.connection, child = Pipe()
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(child.fileno())],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            env=environment,
        )
        child.close()
        self.documents: set[str] = set()
        self.ready = False
        self._starting = threading.Lock()

    def wait_ready(self) -> None:
        """Wait until the worker has imported PyMuPDF and can draw (at most ``STARTUP_SECONDS``); from
        any thread, the one message it sends when ready read once."""
        with self._starting:
            if not self.ready:
                self._answer(STARTUP_SECONDS, "cannot be drawn: the renderer did not start")
                self.ready = True

    @property
    def alive(self) -> bool:
        return not self.connection.closed and self.process.poll() is None

    def draw(self, job: RenderJob, seconds: float, memory: int) -> tuple[tuple[int, int], bytes]:
        """The page's size and pixels; a :class:`DrawingError` when it fails, times out or kills the worker
        (killed then, so that it is never reused)."""
        self.wait_ready()
        if job.token in self.documents:
            job = replace(job, source=None)
        self.connection.send((job, memory))
        self.documents.add(job.token)
        answer = self._answer(
            seconds, f"takes longer than {seconds:g} s to draw (a page built to exhaust the renderer?)"
        )
        if answer[0] == "failed":
            raise DrawingError(answer[1])
        return answer[1], answer[2]

    def _answer(self, seconds: float, late: str) -> tuple:
        """The worker's next message, waited for up to ``seconds``; the worker is killed if it dies or is late."""
        deadline = time.monotonic() + seconds
        while not self.connection.poll(_POLL_SECONDS):
            if self.process.poll() is not None:
                self.kill()
                raise DrawingError(_CRASHED)
            if time.monotonic() > deadline:
                self.kill()
                raise DrawingError(late)
        try:
            return self.connection.recv()
        except (EOFError, OSError):
            self.kill()
            raise DrawingError(_CRASHED) from None

    def kill(self) -> None:
        if not self.connection.closed:
            self.process.kill()
            self.process.wait()
            self.connection.close()


class RenderPool:
    """Idle workers shared by every document of the process; a worker draws one page at a time."""

    def __init__(self):
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._lock = threading.Lock()

    def warm(self, count: int = 1, wait: bool = False) -> None:
        """Start workers now until ``count`` are idle, so that they have imported PyMuPDF when pages come;
        with ``wait``, return once they can draw. A caller that draws from several threads warms one per
        thread and waits: a thread that starts its own worker draws its pages seconds late, out of order
        with the others'."""
        with self._lock:
            while len(self._idle) < count:
                self._idle.append(_Worker())
            idle = list(self._idle)
        if wait:
            for worker in idle:
                with contextlib.suppress(DrawingError):  # a worker that did not start is replaced later
                    worker.wait_ready()

    def draw(
        self, job: RenderJob, seconds: float = RENDER_SECONDS, memory: int = RENDER_MEMORY
    ) -> tuple[tuple[int, int], bytes]:
        """Page ``job``'s (width, height) and RGB pixels, or a :class:`DrawingError` saying why not."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        worker = worker if worker is not None and worker.alive else _Worker()
        self.warm()  # a spare, so that the next page need not wait for a worker to start
        with self._lock:
            self._busy.add(worker)
        try:
            drawn = worker.draw(job, seconds, memory)
        except DrawingError:
            self._keep(worker)
            self.warm()  # a killed worker's replacement imports while the caller goes on
            raise
        except BaseException:  # Ctrl-C or a broken pipe while it drew: its state is unknown
            worker.kill()
            with self._lock:
                self._busy.discard(worker)
            raise
        self._keep(worker)
        return drawn

    def _keep(self, worker: _Worker) -> None:
        """Put a worker that answered among the idle ones (a killed one is dropped)."""
        with self._lock:
            self._busy.discard(worker)
            if worker.alive:
                self._idle.append(worker)

    def close(self) -> None:
        """Stop every worker: the idle ones, and those drawing, whose callers then fail their pages at
        once. An interrupted ``convert`` calls it, so that no rendering thread keeps its exit waiting."""
        with self._lock:
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for worker in idle:
            worker.kill()
        for worker in busy:
            worker.process.kill()  # its caller sees it die and closes the pipe it waits on


POOL = RenderPool()
"""The process's workers: pages of every document, conversion and request share them."""

if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
