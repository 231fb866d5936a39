"""The decoding loops' KV cache: the same keys and values as the library's dynamic cache through every
operation the loops apply (appends, crops, rows leaving, compaction), without copying the cache on an
append; and the library's own loop gets it when a call brings no cache."""

from __future__ import annotations

import pytest
import torch
from fastmtp_helpers import generate, page_batch, small_model
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from jina_ocr.remote_code.compat_jina_ocr import CACHE_FIELD
from jina_ocr.remote_code.generation.fastmtp import compact
from jina_ocr.remote_code.generation.growing_cache import MIN_ROOM, GrowingLayer, growing_cache


def test_growing_cache_matches_the_dynamic_cache_through_the_loops_operations():
    gen = torch.Generator().manual_seed(0)
    ours, reference = growing_cache(), DynamicCache()
    layers, batch = 2, 3

    def append(columns: int):
        for layer in range(layers):
            keys, values = (torch.randn(batch, 2, columns, 4, generator=gen) for _ in range(2))
            got = ours.update(keys, values, layer)
            want = reference.update(keys, values, layer)
            assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))

    def same():
        assert ours.get_seq_length() == reference.get_seq_length()
        for mine, theirs in zip(ours.layers, reference.layers, strict=True):
            assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)

    append(5)  # the prefill
    start = ours.layers[0].keys.data_ptr()
    for step in range(MIN_ROOM - 5):  # appends within the first buffer copy nothing
        append(1 + step % 2 if step < 10 else 1)
        if ours.get_seq_length() <= MIN_ROOM:
            assert ours.layers[0].keys.data_ptr() == start
        if step % 7 == 3:
            ours.crop(-1)
            reference.crop(-1)
        same()
    while ours.get_seq_length() <= MIN_ROOM:  # past the first buffer: a bigger one, with room left
        append(3)
    assert ours.layers[0].keys.data_ptr() != start
    same()
    rows = torch.tensor([2, 0])  # a row finished
    ours.batch_select_indices(rows)
    reference.batch_select_indices(rows)
    batch = 2
    append(2)
    same()
    mask = torch.ones(batch, ours.get_seq_length(), dtype=torch.long)
    mask[0, 3:9] = 0  # holes left by rejected drafts
    assert torch.equal(compact(ours, mask), compact(reference, mask))
    same()
    for _ in range(4):
        append(1)
        same()


@pytest.mark.floor
def test_the_librarys_loop_decodes_with_a_growing_cache_and_the_same_tokens():
    """A call that runs in the library's loop without bringing a cache gets the growing one; a call
    that brings a ``DynamicCache`` keeps it; both give the same tokens and the same cached keys."""
    model = small_model()
    inputs = page_batch(seed=3, sides=[64], vocab=model.config.vocab_size)
    options = {"use_mtp": False, "return_dict_in_generate": True}
    ours = generate(model, inputs, **options)
    theirs = generate(model, inputs, **options, **{CACHE_FIELD: DynamicCache()})
    assert torch.equal(ours.sequences, theirs.sequences)
    ours_cache, theirs_cache = getattr(ours, CACHE_FIELD), getattr(theirs, CACHE_FIELD)
    assert {type(layer) for layer in ours_cache.layers} == {GrowingLayer}
    assert {type(layer) for layer in theirs_cache.layers} == {DynamicLayer}
    for mine, reference in zip(ours_cache.layers, theirs_cache.layers, strict=True):
        assert torch.equal(mine.keys, reference.keys) and torch.equal(mine.values, reference.values)
