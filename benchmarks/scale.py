"""Scale-out conversion: pages per second and peak memory of a local run, an endpoint run and a Ray run.

    python benchmarks/scale.py                          # 200 pages, the bundled jina-ocr-tiny, CPU
    python benchmarks/scale.py --pages 8 --threads 1 --workers 1

The same ``--pages`` generated text pages (A5, a heading and four lines, as jina-ocr-tiny reads them;
ten to a PDF) are converted three ways, each in a fresh process so that no run's memory or warm
caches count for another:

- ``local``: one ``Converter`` in the process (``--threads`` torch threads), the documents' pages
  sharing batches as in ``jina-ocr convert``;
- ``endpoint``: ``EndpointConverter`` (``--concurrency`` requests in flight) against one
  ``jina-ocr serve`` process on 127.0.0.1 serving the same model (``--threads`` torch threads);
- ``ray``: ``RayConverter`` on a local Ray with one CPU per core: ``--workers`` model actors of
  ``--threads`` CPUs each (Ray gives an actor as many torch threads as CPUs), render tasks beside them.

Pages per second count from the first page asked for to the last page received, model loading
included for ``local`` and ``ray`` (actors load their model once the pipeline starts, and Ray Data
plans and starts its workers) and excluded for ``endpoint`` (the server is up before the clock
starts), as is starting Ray itself. Peak RSS is each process's high-water
mark (``VmHWM``): the driver, the server, and the largest model actor and render worker. Every run
must give every page without an error, and the three runs the same Markdown, or the script says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pymupdf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from endpoints import start_server  # noqa: E402
from memory import peak_rss_mb  # noqa: E402

from jina_ocr.models import BUNDLED  # noqa: E402

PAGES_PER_PDF = 10
ACTOR_TITLE = "ray::MapWorker(MapBatches(_PageModel))"
RENDER_TITLES = ("ray::MapBatches(_render)", "ray::IDLE")
WORDS = "form line river paper garden table window letter number answer moment circle".split()


def make_documents(pages: int, folder: Path) -> list[Path]:
    paths = []
    for first in range(0, pages, PAGES_PER_PDF):
        document = pymupdf.open()
        for number in range(first, min(pages, first + PAGES_PER_PDF)):
            page = document.new_page(width=420, height=595)
            page.insert_text((40, 70), f"Report {number + 1}", fontsize=28, fontname="helv")
            for line in range(4):
                words = " ".join(WORDS[(number * 7 + line * 3 + k) % len(WORDS)] for k in range(4))
                page.insert_text((40, 130 + 40 * line), words, fontsize=20)
        path = folder / f"doc-{first // PAGES_PER_PDF:04d}.pdf"
        document.save(path)
        paths.append(path)
    return paths


def process_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ray_peaks() -> dict:
    """Peak RSS of the largest model actor and render worker now alive (before Ray shuts them down)."""
    import psutil

    peaks = {"actor_mb": 0.0, "render_mb": 0.0}
    for process in psutil.process_iter(["cmdline"]):
        title = " ".join(process.info["cmdline"] or ())
        key = (
            "actor_mb"
            if title.startswith(ACTOR_TITLE)
            else "render_mb"
            if title.startswith(RENDER_TITLES)
            else None
        )
        if key is not None:
            try:
                peaks[key] = max(peaks[key], process_peak_mb(process.pid))
            except OSError:
                continue
    return peaks


def child(args) -> None:
    """One run in this process; prints its measurements as one JSON line."""
    from jina_ocr.loading import BUNDLED_MODEL
    from jina_ocr.runtime.documents import open_selection

    documents = sorted(Path(args.child_docs).glob("*.pdf"))
    options = dict(mode=args.mode, max_new_tokens=args.max_new_tokens)
    extra: dict = {}
    start = time.perf_counter()
    if args.child == "local":
        import torch

        from jina_ocr.services.conversion import Converter

        torch.set_num_threads(args.threads)
        converter = Converter.from_pretrained(BUNDLED_MODEL).with_options(
            batch_size=args.batch_size, **options
        )
        work = [open_selection(path) for path in documents]
        results = [result for _, result in converter.convert_documents(work)]
    elif args.child == "endpoint":
        from jina_ocr.services.endpoints import EndpointConverter

        with EndpointConverter(
            args.endpoint, concurrency=args.concurrency, max_new_tokens=args.max_new_tokens
        ) as converter:
            work = [open_selection(path) for path in documents]
            converter.schedule(work)
            results = [
                result for document, numbers in work for result in converter.convert(document, numbers)
            ]
    else:
        import ray

        from jina_ocr.services.ray_pages import RayConverter

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        start = time.perf_counter()  # a cluster is up before a run; its actors start within it
        converter = RayConverter(
            model=BUNDLED_MODEL,
            batch_size=args.batch_size,
            workers=args.workers,
            cpus_per_worker=args.threads,
            **options,
        )
        work = [(str(path), list(range(1, pymupdf.open(path).page_count + 1))) for path in documents]
        converter.schedule(work)
        results = [result for source, numbers in work for result in converter.convert(source, numbers)]
        extra = ray_peaks()
        converter.close()
        ray.shutdown()
    seconds = time.perf_counter() - start
    failed = [result for result in results if not result.ok]
    if failed:
        raise SystemExit(
            f"{args.child}: page {failed[0].page} of {failed[0].source} failed: {failed[0].error}"
        )
    texts = [result.markdown for result in results]
    print(
        json.dumps(
            {"pages": len(results), "seconds": seconds, "driver_mb": peak_rss_mb(), "texts": texts, **extra}
        )
    )


def run_child(kind: str, folder: Path, args, endpoint: str | None = None, env=None) -> dict:
    command = [sys.executable, __file__, "--child", kind, "--child-docs", str(folder)]
    for name in ("threads", "workers", "batch_size", "max_new_tokens", "mode", "concurrency"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if endpoint:
        command += ["--endpoint", endpoint]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the {kind} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=200, help="pages to convert (default: %(default)s)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of each model process (default: %(default)s)"
    )
    parser.add_argument("--workers", type=int, default=1, help="Ray model actors (default: %(default)s)")
    parser.add_argument(
        "--batch-size", type=int, default=4, help="pages per generate call (default: %(default)s)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=32, help="(default: %(default)s)")
    parser.add_argument("--mode", default="tiny", help="processor mode (default: %(default)s)")
    parser.add_argument(
        "--concurrency", type=int, default=8, help="endpoint requests in flight (default: %(default)s)"
    )
    parser.add_argument("--child", choices=("local", "endpoint", "ray"), help=argparse.SUPPRESS)
    parser.add_argument("--child-docs", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    rows = {}
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        make_documents(args.pages, folder)
        rows["local"] = run_child("local", folder, args)
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        options = ["--mode", args.mode, "--batch-size", str(args.batch_size)]
        server, base = start_server(BUNDLED, args.max_new_tokens, options, folder / "serve.log", env)
        try:
            rows["endpoint"] = run_child("endpoint", folder, args, f"{base}/v1")
            rows["endpoint"]["server_mb"] = process_peak_mb(server.pid)
        finally:
            server.terminate()
            server.wait(30)
        rows["ray"] = run_child("ray", folder, args)
    print(
        f"{args.pages} pages, {os.cpu_count()} cores, --threads {args.threads} --workers {args.workers} "
        f"--batch-size {args.batch_size} --max-new-tokens {args.max_new_tokens} --mode {args.mode}"
    )
    columns = ("driver_mb", "server_mb", "actor_mb", "render_mb")
    print(
        f"{'run':>9} {'pages/s':>8} {'seconds':>8} "
        + " ".join(f"{c.replace('_mb', ' MB'):>10}" for c in columns)
    )
    for name, row in rows.items():
        cells = " ".join(f"{row[c]:10.0f}" if c in row else f"{'-':>10}" for c in columns)
        print(f"{name:>9} {row['pages'] / row['seconds']:8.2f} {row['seconds']:8.1f} {cells}")
    differing = [name for name, row in rows.items() if row["texts"] != rows["local"]["texts"]]
    print(
        "Markdown: "
        + (f"DIFFERS from local in {', '.join(differing)}" if differing else "identical in all runs")
    )
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
