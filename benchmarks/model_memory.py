"""Resident memory of the whole full-size model (vision included), quantised, loaded in a fresh process.

    python benchmarks/model_memory.py [--schemes int8 int4] [--threads N]

For each scheme a child process builds jina-ocr-v1's architecture (``JinaOCRConfig()``: SAM, CLIP,
projector, the 12-layer decoder and the FastMTP head) with random bfloat16 weights, quantises it
(:mod:`jina_ocr.quantization`) and saves it as model files in a temporary folder; that costs the
bfloat16 model's memory (about 7 GB) once. A second, fresh process then loads the folder with
``jina_ocr.load`` as ``jina-ocr convert --model FOLDER`` does (without a float copy of the quantised
weights) and reports its resident set size once loaded (``VmRSS``), after a short text-only decode
(64 prompt tokens, 8 new ones), and its peak (``VmHWM``), beside the bytes of the tensors it holds.
The tokenizer is the bundled model's: only its files are needed, its vocabulary is never used.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def status_mb(field: str) -> float:
    """A memory line of /proc/self/status (``VmRSS``, ``VmHWM``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"/proc/self/status has no {field} (this script measures on Linux)")


def build(scheme: str, folder: Path) -> None:
    """Random full-size model in bfloat16, quantised, saved as model files in ``folder``."""
    import torch

    from jina_ocr.model_files import load_tokenizer, save_model_files
    from jina_ocr.models import BUNDLED
    from jina_ocr.quantization import Quantization, quantize_model
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration

    with torch.device("meta"):
        model = JinaOCRForConditionalGeneration(JinaOCRConfig())
    model = model.to(torch.bfloat16).to_empty(device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.uniform_(-0.02, 0.02, generator=generator)
    quantize_model(model, Quantization(scheme))
    save_model_files(folder, model, load_tokenizer(BUNDLED), {"processor_mode": "gundam"})


def measure(folder: Path) -> dict:
    """Load ``folder`` in this (fresh) process; its memory when loaded, after a short decode, and at peak."""
    import torch

    import jina_ocr

    start = time.perf_counter()
    model, _ = jina_ocr.load(folder, device="cpu")
    seconds = time.perf_counter() - start
    loaded = status_mb("VmRSS")
    tensors = sum(t.nbytes for t in [*model.parameters(), *model.buffers()]) / 2**20
    ids = torch.randint(3, 1000, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.generate(input_ids=ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    return {
        "load_s": seconds,
        "tensors_mb": tensors,
        "loaded_mb": loaded,
        "decoded_mb": status_mb("VmRSS"),
        "peak_mb": status_mb("VmHWM"),
    }


def child(args: list[str], threads: int) -> str:
    command = [sys.executable, __file__, "--threads", str(threads), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemes", nargs="+", choices=("int8", "int4"), default=["int8", "int4"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--build", help=argparse.SUPPRESS)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build or args.measure:
        import torch

        torch.set_num_threads(args.threads)
        if args.build:
            build(args.build, args.folder)
        else:
            print(json.dumps(measure(args.folder)))
        return 0
    print(
        f"{'scheme':>7} {'tensors MB':>11} {'RSS loaded MB':>14} {'RSS decoded MB':>15} {'peak MB':>8} {'load s':>7}"
    )
    for scheme in args.schemes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / f"jina-ocr-v1-random-{scheme}"
            child(["--build", scheme, "--folder", str(folder)], args.threads)
            row = json.loads(
                child(["--measure", scheme, "--folder", str(folder)], args.threads).splitlines()[-1]
            )
        print(
            f"{scheme:>7} {row['tensors_mb']:11.0f} {row['loaded_mb']:14.0f} {row['decoded_mb']:15.0f}"
            f" {row['peak_mb']:8.0f} {row['load_s']:7.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
