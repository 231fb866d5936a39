"""Evaluation harness: score any OCR system's Markdown the way the public benchmarks do.

- :mod:`jina_ocr.bench.olmocr`: olmOCR-Bench unit tests (load them, run one on one page);
- :mod:`jina_ocr.bench.scoring`: a folder of outputs against a test set (repeats, categories,
  bootstrap interval, JSON report), behind ``jina-ocr bench``;
- :mod:`jina_ocr.bench.katex`: rendered math comparison (KaTeX in headless Chromium);
- :mod:`jina_ocr.bench.omnidoc`: OmniDocBench-style page metrics (edit distance, TEDS, TEDS-S);
- :mod:`jina_ocr.bench.peers`: Tesseract and RapidOCR as reference systems;
- :mod:`jina_ocr.bench.tables` and :mod:`jina_ocr.bench.latex`: the table and LaTeX parsing they share.
"""
