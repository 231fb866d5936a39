"""``jina-ocr convert --endpoint``: throughput by concurrency, and memory by page count.

    python benchmarks/endpoints.py                     # tiny random model, CPU
    python benchmarks/endpoints.py --model DIR --pages 64 --serve-option=--device=cuda

Throughput: one ``jina-ocr serve`` process on 127.0.0.1 (``--batch-size 16``) and one PDF converted
through it at concurrency 1, 4 and 16; the server batches concurrent requests, so pages per second
should grow with concurrency until its batches are full or its hardware is busy.

Memory: a loopback endpoint that answers every page at once with canned text, and ``convert`` of a
300-page PDF against a 3-page one, each in a fresh process whose peak resident set size is read at
the end (as in ``benchmarks/memory.py``, whose PDFs and measure are reused). Rendering, PNG encoding
and requests are bounded by the concurrency, so the long PDF must not cost more than ``--budget-mb``
(150 MB) over the short one; the script exits 1 when it does.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import make_pdf, peak_rss_mb, report  # noqa: E402

CONCURRENCIES = (1, 4, 16)


class InstantEndpoint(BaseHTTPRequestHandler):
    """Lists one model and answers every chat completion at once, reading (and dropping) the page."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._json({"object": "list", "data": [{"id": "instant", "owned_by": "benchmark"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        message = {"role": "assistant", "content": "Canned text of one page."}
        self._json({"choices": [{"index": 0, "message": message}], "usage": {"completion_tokens": 6}})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child(args) -> None:
    """Convert one PDF through ``--endpoint`` with the CLI's own code; print pages, seconds, peak RSS."""
    import jina_ocr.commands.convert  # noqa: F401  (imported before "ready", as a run imports it first)
    from jina_ocr.cli import main

    ready = peak_rss_mb()
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        concurrency = str(args.memory_concurrency)
        status = main(
            ["convert", args.child, "-o", out, "--endpoint", args.endpoint, "--concurrency", concurrency]
        )
        seconds = time.perf_counter() - start
    if status:
        raise SystemExit(f"convert failed with status {status}")
    print(json.dumps({"seconds": seconds, "ready_mb": ready, "peak_mb": peak_rss_mb()}))


def measure_memory(pdf: Path, url: str, concurrency: int) -> dict:
    command = [sys.executable, __file__, "--child", str(pdf), "--endpoint", url]
    command += ["--memory-concurrency", str(concurrency)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"measuring {pdf.name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def start_server(model: Path, max_new_tokens: int, options: list[str], log: Path, env: dict | None = None):
    """``jina-ocr serve`` of ``model`` on a free loopback port (batches of 16 unless ``options`` say
    otherwise), once it answers ``/health``: (process, base URL)."""
    port = free_port()
    command = [sys.executable, "-m", "jina_ocr.cli", "serve", "--model", str(model), "--port", str(port)]
    command += ["--batch-size", "16", "--max-new-tokens", str(max_new_tokens), *options]
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"jina-ocr serve did not start:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            time.sleep(0.5)


def throughput(base: str, pdf: Path, concurrency: int, max_new_tokens: int) -> dict:
    from jina_ocr.services.endpoints import EndpointConverter

    before = httpx.get(f"{base}/health").json()
    start = time.perf_counter()
    with EndpointConverter(f"{base}/v1", concurrency=concurrency, max_new_tokens=max_new_tokens) as converter:
        results = list(converter.convert(pdf))
    seconds = time.perf_counter() - start
    after = httpx.get(f"{base}/health").json()
    failed = [r for r in results if not r.ok]
    if failed:
        raise SystemExit(f"page {failed[0].page} failed: {failed[0].error}")
    batches = after["batches"] - before["batches"]
    return {"pages": len(results), "seconds": seconds, "pages_per_batch": len(results) / max(1, batches)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="exported model folder (default: a tiny random export)")
    parser.add_argument(
        "--pages", type=int, default=32, help="pages of the throughput PDF (default: %(default)s)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument(
        "--serve-option",
        action="append",
        default=[],
        help="extra jina-ocr serve option, e.g. --serve-option=--mode=tiny (default: --mode tiny without --model)",
    )
    parser.add_argument("--long", type=int, default=300)
    parser.add_argument("--short", type=int, default=3)
    parser.add_argument("--memory-concurrency", type=int, default=8)
    parser.add_argument("--budget-mb", type=float, default=150.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        options = args.serve_option
        if args.model is None:
            from jina_ocr.export.presets import export_random

            args.model = export_random(folder / "jina-ocr-tiny", preset="tiny", seed=0)
            options = options or ["--mode", "tiny"]
        pdf = folder / "throughput.pdf"
        make_pdf(args.pages, pdf)
        process, base = start_server(args.model, args.max_new_tokens, options, folder / "serve.log")
        try:
            rates = {c: throughput(base, pdf, c, args.max_new_tokens) for c in CONCURRENCIES}
        finally:
            process.kill()
            process.wait()

        server = ThreadingHTTPServer(("127.0.0.1", 0), InstantEndpoint)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        memory = {}
        for pages in (args.short, args.long):
            long_pdf = folder / f"{pages}-pages.pdf"
            make_pdf(pages, long_pdf)
            memory[pages] = measure_memory(long_pdf, url, args.memory_concurrency)
        server.shutdown()

    print(
        f"throughput: {args.pages}-page PDF, jina-ocr serve --batch-size 16 {' '.join(options)}, model {args.model.name}"
    )
    print(f"{'concurrency':>11} {'pages/s':>8} {'seconds':>8} {'pages/batch':>12}")
    for concurrency, row in rates.items():
        rate = row["pages"] / row["seconds"]
        print(f"{concurrency:>11} {rate:8.2f} {row['seconds']:8.1f} {row['pages_per_batch']:12.1f}")
    print(f"memory: instant endpoint, concurrency {args.memory_concurrency}")
    return report(
        [(f"{pages}-pages.pdf", {**row, "pages": pages}) for pages, row in memory.items()], args.budget_mb
    )


if __name__ == "__main__":
    sys.exit(main())
