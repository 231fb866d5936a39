#!/usr/bin/env bash
# System packages for jina_ocr.synth: pdfTeX with LaTeX and amsmath typesets the formulas (its
# Latin Modern fonts also set body text), DejaVu and Liberation add text faces, fontconfig finds
# them. Idempotent: returns at once when everything is already there.
set -euo pipefail

have_all() {
    command -v pdflatex >/dev/null 2>&1 && kpsewhich amsmath.sty lmroman10-regular.otf >/dev/null 2>&1 \
        && command -v fc-match >/dev/null 2>&1 \
        && [[ "$(fc-list : file)" == *DejaVuSerif-Italic* && "$(fc-list : file)" == *LiberationSans-Regular* ]]
}

if have_all; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends texlive-latex-base fonts-lmodern fontconfig \
    fonts-dejavu-core fonts-dejavu-extra fonts-liberation >/dev/null
have_all
