"""Training of small jina-ocr models on printed drill and JinaOCRSynth pages.

The pieces follow the order of a run: :mod:`~jina_ocr.train.tokenizer` makes the byte-level tokenizer,
:mod:`~jina_ocr.train.sft` trains the whole model with teacher forcing plus the training-only glyph and
alignment losses of :mod:`~jina_ocr.train.supervision` (targets from :mod:`~jina_ocr.train.glyphs`),
:mod:`~jina_ocr.train.mtp` trains the FastMTP head on the frozen model's own greedy outputs,
:mod:`~jina_ocr.train.grpo` post-trains the model on TRL with the page reward (its pages in
:mod:`~jina_ocr.train.grpo_data`, its reward in :mod:`~jina_ocr.train.grpo_reward`, TRL adapted in
:mod:`~jina_ocr.train.grpo_trainer`), and :mod:`~jina_ocr.train.bundle` ships a result as the package's
jina-ocr-tiny.
:mod:`~jina_ocr.train.recipe` holds the one place where the curriculum, page mix and model size are set;
:mod:`~jina_ocr.train.run_log` writes every run's ``log.jsonl``;
:mod:`~jina_ocr.train.recipe_file` reads the TOML recipe files that hold a run's settings (``recipes/``
has the bundled model's).
"""
