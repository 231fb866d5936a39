"""A dynamic KV cache whose appends copy only the new columns, for decoding.

``DynamicLayer`` appends with ``torch.cat``, copying a layer's whole cache every step (a fifth of decode
time on the small model at batch 1). ``GrowingLayer`` keeps keys and values in buffers that double when
full and exposes ``keys`` / ``values`` as views of their filled part. ``crop`` keeps them views (the next
append overwrites the dropped columns); a tensor put in their place (``batch_select_indices``,
``fastmtp.compact``) is copied into fresh buffers at the next append. Only decoding uses it, always under
``torch.no_grad``: an append writes into memory that earlier views share, which autograd would refuse.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

MIN_ROOM = 64  # columns of a fresh buffer at least


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` appending into buffers that double when full."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.buffers = None
        length, new = self.get_seq_length(), key_states.shape[-2]
        if not self._views_of_buffers() or length + new > self.buffers[0].shape[-2]:
            self._reallocate(length, max(2 * (length + new), MIN_ROOM), key_states, value_states)
        keys, values = self.buffers
        keys[..., length : length + new, :] = key_states
        values[..., length : length + new, :] = value_states
        self.keys, self.values = keys[..., : length + new, :], values[..., : length + new, :]
        return self.keys, self.values

    def _views_of_buffers(self) -> bool:
        """Whether ``keys`` / ``values`` still start the buffers (appends and crops keep them so)."""
        if self.buffers is None:
            return False
        keys, values = self.buffers
        return (
            self.keys.data_ptr() == keys.data_ptr()
            and self.values.data_ptr() == values.data_ptr()
            and self.keys.shape[0] == keys.shape[0]
        )

    def _reallocate(self, length: int, room: int, key_states: torch.Tensor, value_states: torch.Tensor):
        buffers = []
        for old, new in ((self.keys, key_states), (self.values, value_states)):
            buffer = new.new_empty((*new.shape[:-2], room, new.shape[-1]))
            if length:
                buffer[..., :length, :] = old
            buffers.append(buffer)
        self.buffers = tuple(buffers)


def growing_cache() -> Cache:
    """An empty cache of ``GrowingLayer``s (one per decoder layer, made as the layers first append)."""
    return Cache(layer_class_to_replicate=GrowingLayer)
