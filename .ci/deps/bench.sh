#!/usr/bin/env bash
# System and npm packages for the evaluation harness (jina_ocr.bench) and its tests:
#   tesseract-ocr  the Tesseract peer of `jina-ocr bench --peers`
#   chromium       headless browser that renders math with KaTeX for olmOCR-Bench math tests
#   fonts          fonts-dejavu-core and fonts-liberation: KaTeX renders without its own font files,
#                  as olmOCR-Bench does, so glyph positions (and so math verdicts) come from these
#   katex (npm)    KaTeX 0.16.21, the release olmOCR-Bench bundles, installed under
#                  ${XDG_CACHE_HOME:-~/.cache}/jina-ocr/katex, where jina_ocr.bench.katex looks for it
#                  (or set JINA_OCR_KATEX to its dist/ folder); another installed release is replaced
# Idempotent: each step is skipped when its result is already present.
set -euo pipefail

KATEX_VERSION="0.16.21"
KATEX_PREFIX="${XDG_CACHE_HOME:-$HOME/.cache}/jina-ocr/katex"
FONT_PACKAGES=(fonts-dejavu-core fonts-liberation)

missing=()
command -v tesseract >/dev/null 2>&1 || missing+=(tesseract-ocr tesseract-ocr-eng)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v npm >/dev/null 2>&1 || missing+=(npm)
for package in "${FONT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    SUDO=""
    if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

installed_katex() {
    node -p "require('$KATEX_PREFIX/node_modules/katex/package.json').version" 2>/dev/null || true
}
if [ "$(installed_katex)" != "$KATEX_VERSION" ] || [ ! -f "$KATEX_PREFIX/node_modules/katex/dist/katex.min.js" ]; then
    mkdir -p "$KATEX_PREFIX"
    npm install --prefix "$KATEX_PREFIX" --no-audit --no-fund --silent --save-exact "katex@$KATEX_VERSION"
fi
test "$(installed_katex)" = "$KATEX_VERSION"
echo "bench deps: $(tesseract --version 2>&1 | head -n1); $(chromium --version 2>/dev/null || echo chromium missing); katex $(installed_katex) in $KATEX_PREFIX; fonts ${FONT_PACKAGES[*]}"
