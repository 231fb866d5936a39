#!/usr/bin/env bash
# System and npm packages for the evaluation harness (jina_ocr.bench) and its tests:
#   tesseract-ocr  the Tesseract peer of `jina-ocr bench --peers`
#   chromium       headless browser that renders math with KaTeX for olmOCR-Bench math tests
#   katex (npm)    installed under ${XDG_CACHE_HOME:-~/.cache}/jina-ocr/katex, where
#                  jina_ocr.bench.katex looks for it (or set JINA_OCR_KATEX to its dist/ folder)
# Idempotent: each step is skipped when its result is already present.
set -euo pipefail

KATEX_VERSION="0.16"
KATEX_PREFIX="${XDG_CACHE_HOME:-$HOME/.cache}/jina-ocr/katex"

missing=()
command -v tesseract >/dev/null 2>&1 || missing+=(tesseract-ocr tesseract-ocr-eng)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
    SUDO=""
    if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -f "$KATEX_PREFIX/node_modules/katex/dist/katex.min.js" ]; then
    mkdir -p "$KATEX_PREFIX"
    npm install --prefix "$KATEX_PREFIX" --no-audit --no-fund --silent "katex@$KATEX_VERSION"
fi
echo "bench deps: $(tesseract --version 2>&1 | head -n1); $(chromium --version 2>/dev/null || echo chromium missing); katex in $KATEX_PREFIX"
