"""The byte-level tokenizer of a small model, with or without BPE merges learnt from its ground truth.

jina-ocr-tiny uses no merges (:data:`BYTE_VOCAB_SIZE`): one token per byte, so one output token per
printed ASCII character, which makes unseen words as easy to spell as seen ones and gives every target
token one glyph box. With a larger ``vocab_size`` the merges cover what the model will write (the
synthetic Markdown, HTML tables and LaTeX) and little else. The special tokens are those of the real tokenizer (:mod:`jina_ocr.tokenizer`): begin/end/pad at ids 0, 1
and 2, and the added specials after the learnt merges in the real relative order, so the processor and
``decode_ocr`` treat the small model exactly as they treat jina-ocr-v1.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from jina_ocr.tokenizer import ADDED_SPECIAL_TOKENS, BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, wrap_tokenizer

SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)
BYTE_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS) + len(ADDED_SPECIAL_TOKENS)
"""The size of a vocabulary of bytes and special tokens only (no merges)."""


def train_tokenizer(texts: Iterable[str], vocab_size: int = BYTE_VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """A byte-level BPE of ``vocab_size`` entries (special tokens included) learnt from ``texts``.

    Every byte is in the alphabet, so text the corpus never showed still encodes. Table cell tags are
    added specials (as in the real tokenizer), so they are single tokens and never split by merges.
    """
    specials = list(SPECIAL_TOKENS)
    if vocab_size < BYTE_VOCAB_SIZE:
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
