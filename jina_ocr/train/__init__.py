"""Training of small jina-ocr models on JinaOCRSynth pages: tokenizer, supervised fine-tuning, FastMTP head.

The pieces follow the order of a run: :mod:`~jina_ocr.train.tokenizer` learns a byte-level BPE from
synthetic ground truth, :mod:`~jina_ocr.train.sft` trains the whole model with teacher forcing, and
:mod:`~jina_ocr.train.mtp` trains the FastMTP head on the frozen model's own greedy outputs.
:mod:`~jina_ocr.train.recipe` holds the one place where the page distribution and model size are set.
"""
