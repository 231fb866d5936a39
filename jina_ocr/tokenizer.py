"""A small byte-level BPE tokenizer with the real jina-ocr-v1 special tokens, for tests and tiny exports.

The real tokenizer (129,280 entries, 8 MB) is not redistributed with this package, yet the processor,
the tiny model exports and the tests need a tokenizer of the same *shape*: byte-level, so that any
text encodes; the begin/end/pad tokens at ids 0, 1 and 2 as in the real one; and the same added
special tokens (``<image>``, the grounding and table tokens, the role tags) in the same relative
order, so that code which reads ids from the tokenizer instead of hard-coding them is exercised.

The merges are learnt here, in Python, from a fixed built-in text with an explicit tie-break, so the
result is the same on every machine and in every process (no download, no hash-seeded ordering).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

BOS_TOKEN = "<｜begin▁of▁sentence｜>"
EOS_TOKEN = "<｜end▁of▁sentence｜>"
PAD_TOKEN = "<｜▁pad▁｜>"

# The added special tokens of the real tokenizer, in the order of their ids there (128815 and up for
# `<image>` ... `</tr>`, then the role tags at 128825 and 128826).
ADDED_SPECIAL_TOKENS = (
    "<image>",
    "<|ref|>",
    "<|/ref|>",
    "<|det|>",
    "<|/det|>",
    "<|grounding|>",
    "<td>",
    "</td>",
    "<tr>",
    "</tr>",
    "<|User|>",
    "<|Assistant|>",
)

# What the merges are learnt from: the prompts and the kind of Markdown, HTML and LaTeX the model
# writes, so that the tiny tokenizer splits such text into plausible multi-byte pieces.
_CORPUS = """\
Transcribe the provided document image into a clean Markdown format, preserving the natural reading order.
Convert the document to markdown. OCR this image. Free OCR. Parse the figure. Describe this image in detail.
Locate the text in the image. Output LaTeX for formulas in $ and tables as HTML; omit page headers and footers.
# Introduction
## Results and discussion
### Related work
The model reads a page image and writes the text of the page in reading order, with tables as HTML and
formulas as LaTeX. The table below reports the accuracy of each method on the benchmark, together with the
number of parameters and the speed in pages per second. Figure 1 shows an overview of the architecture.
In this section we describe the data, the training procedure and the evaluation protocol of our experiments.
- first item of the list
- second item of the list
1. Numbered item one
2. Numbered item two
**Bold text** and *italic text* and `inline code`, a [link](https://example.com) and ![figure](images/0.jpg)
<table><tr><td>Method</td><td>Accuracy</td><td>Speed</td></tr><tr><td>Ours</td><td>91.2</td><td>4.5</td></tr>
<tr><td>Baseline</td><td>85.7</td><td>2.1</td></tr></table>
$$\\frac{a}{b} + \\sum_{i=1}^{n} x_i^2 = \\int_0^1 f(x)\\,dx \\quad \\text{where} \\quad \\alpha \\leq \\beta$$
The revenue for the quarter was $12.5 million, an increase of 8% compared with the same period last year.
Net income per share, diluted: 0.42; operating expenses: 3,104; total assets: 1,250,000 (in thousands).
Das Dokument wurde gescannt. Le document est numérisé. El documento fue escaneado. 文档已扫描。
"""

_VOCAB_SIZE = 640  # before the added special tokens; the whole tokenizer stays under 700 entries


@lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters (the byte-level alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def _learn_merges(words: Counter[tuple[str, ...]], n_merges: int) -> list[tuple[str, str]]:
    """Greedy BPE: merge the most frequent adjacent pair, ties broken by the pair itself (deterministic)."""
    words = Counter(words)
    merges: list[tuple[str, str]] = []
    for _ in range(n_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        if pairs[best] < 2:
            break
        merges.append(best)
        merged: Counter[tuple[str, ...]] = Counter()
        for word, count in words.items():
            out, k = [], 0
            while k < len(word):
                if k + 1 < len(word) and (word[k], word[k + 1]) == best:
                    out.append(word[k] + word[k + 1])
                    k += 2
                else:
                    out.append(word[k])
                    k += 1
            merged[tuple(out)] += count
        words = merged
    return merges


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The small tokenizer: byte-level BPE, real special tokens, BOS added on encode like the real one.

    Ids: 0 BOS, 1 EOS, 2 PAD, then the 256 byte symbols, the learnt merges, and last the added special
    tokens of :data:`ADDED_SPECIAL_TOKENS` in order. The real tokenizer also adds BOS when asked for
    special tokens (``add_bos_token``), so the processor is tested against that behaviour too.
    """
    pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    words: Counter[tuple[str, ...]] = Counter()
    for line in _CORPUS.splitlines():
        for piece, _ in pre_tokenizer.pre_tokenize_str(line + "\n"):
            words[tuple(piece)] += 1

    vocab: dict[str, int] = {BOS_TOKEN: 0, EOS_TOKEN: 1, PAD_TOKEN: 2}
    for char in _bytes_to_unicode().values():
        vocab[char] = len(vocab)
    merges = _learn_merges(words, _VOCAB_SIZE - len(vocab))
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))

    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.ByteLevel()
    specials = [BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, *ADDED_SPECIAL_TOKENS]
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in specials])
    return wrap_tokenizer(backend)


def wrap_tokenizer(backend: Tokenizer) -> PreTrainedTokenizerFast:
    """A byte-level ``backend`` holding the special tokens, as the Transformers tokenizer of the real
    checkpoint's shape: BOS prepended on encode, BOS/EOS/PAD and the role tags declared."""
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B", special_tokens=[(BOS_TOKEN, 0)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=["<|User|>", "<|Assistant|>"],
        clean_up_tokenization_spaces=False,
        model_max_length=8192,
    )
