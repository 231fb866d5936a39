"""The one reward function TRL calls: each sampled transcription scored by :mod:`jina_ocr.rewards`.

The reward is the product of the floored terms of :func:`jina_ocr.rewards.reward` against the page's
reference Markdown and unit tests; nothing here weighs or changes them. Two things are this module's:

- the text scored is what a user gets for those tokens: ``processor.decode_ocr`` (cut at EOS, table
  tags kept, grounding spans as Markdown). TRL's own decoding skips special tokens, which would
  drop the table tags of the real tokenizer and score every table as missing;
- the mean of every floored term over the batch goes to TRL's log (``reward/<term>``), with the
  seconds the scoring took (``seconds/reward``), so the log says which term moved.
"""

from __future__ import annotations

import json
import time

from jina_ocr.rewards import TERMS, prepare_reference, reward


class PageReward:
    """``PageReward(processor)`` is a TRL reward function (its name in TRL's log is the class name).

    TRL passes every dataset column but the prompt as a keyword list with one entry per sample
    (``reference`` and ``tests`` here, see :mod:`jina_ocr.train.grpo_data`), and ``log_metric``.
    """

    def __init__(self, processor):
        self.processor = processor

    def __call__(self, prompts, completions, completion_ids, reference, tests, log_metric=None, **_) -> list:
        started = time.perf_counter()
        prepared = {}  # the samples of one page share its parsed reference
        scored = []
        for ids, markdown, page_tests in zip(completion_ids, reference, tests, strict=True):
            key = (markdown, json.dumps(page_tests, sort_keys=True))
            if key not in prepared:
                prepared[key] = prepare_reference(markdown, page_tests)
            scored.append(reward(self.processor.decode_ocr([ids]), prepared[key]))
        if log_metric is not None:
            for term in TERMS:
                log_metric(f"reward/{term}", sum(r.terms[term] for r in scored) / len(scored))
            log_metric("seconds/reward", time.perf_counter() - started)
        return [r.total for r in scored]
