"""Learn a byte-level BPE tokenizer for a small model from JinaOCRSynth ground truth.

A small model spends much of its capacity on the embedding and LM-head matrices, so its vocabulary
should cover what it will write (the synthetic Markdown, HTML tables and LaTeX) and little else. The
special tokens are those of the real tokenizer (:mod:`jina_ocr.tokenizer`): begin/end/pad at ids 0, 1
and 2, and the added specials after the learnt merges in the real relative order, so the processor and
``decode_ocr`` treat the small model exactly as they treat jina-ocr-v1.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from jina_ocr.tokenizer import ADDED_SPECIAL_TOKENS, BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, wrap_tokenizer


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """A byte-level BPE of ``vocab_size`` entries (special tokens included) learnt from ``texts``.

    Every byte is in the alphabet, so text the corpus never showed still encodes. Table cell tags are
    added specials (as in the real tokenizer), so they are single tokens and never split by merges.
    """
    specials = [BOS_TOKEN, EOS_TOKEN, PAD_TOKEN]
    if vocab_size < 256 + len(specials) + len(ADDED_SPECIAL_TOKENS):
        raise ValueError(f"vocab_size {vocab_size} cannot hold the 256 bytes and the special tokens")
    backend = Tokenizer(models.BPE(fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(ADDED_SPECIAL_TOKENS),
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_without_added_specials(texts), trainer=trainer)
    backend.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in ADDED_SPECIAL_TOKENS]
    )
    return wrap_tokenizer(backend)


def _without_added_specials(texts: Iterable[str]) -> Iterable[str]:
    """The corpus with the added special tokens cut out, so merges are not spent on their pieces."""
    for text in texts:
        for token in ADDED_SPECIAL_TOKENS:
            text = text.replace(token, " ")
        yield text
