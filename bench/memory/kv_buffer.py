"""A transformers cache layer that grows in place instead of by concatenation.

transformers' ``DynamicLayer`` appends a call's keys and values with ``torch.cat``, which
copies the whole layer's cache into a new tensor on every forward pass: at the fidelity
reference's 8k window that is 12 MB per layer, 30 layers, twice per exchange (5 % of a
conversation's time in a profile).  :class:`GrowingLayer` keeps each layer in a
buffer with room to spare and writes a call's keys and values after what it holds; the
model reads a view of the filled part (the same numbers; the attention kernels take the
view's strides as they are).

A buffer is only written where nothing else can see: when the layer's keys were replaced
from outside (a crop, a shared prefix adopted, :mod:`.prefix`, a KV shift that built new
buffers), the next call first copies them into a buffer of its own, so a tensor another
cache holds is never written into; a KV shift writes into the buffer itself only where
:meth:`GrowingLayer.owns_buffer` and no shared prefix views it.
"""

from __future__ import annotations

from transformers.cache_utils import DynamicLayer

#: Spare rows a new buffer gets beyond what it must hold (besides doubling).
SPARE = 1024


class GrowingLayer(DynamicLayer):
    """``DynamicLayer`` with a buffer (see the module docstring)."""

    _layer_type = None  # never registered as transformers' layer for any layer type

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._buffers = None  # (keys, values) [b, heads, capacity, d]
        self._view = None  # the keys view handed out last (ours while self.keys is it)

    def hold(self, keys_buffer, values_buffer, n: int) -> None:
        """Take two buffers whose first ``n`` rows are this layer's cache (a KV shift
        builds them with room to spare, :meth:`new_buffer`)."""
        self._buffers = (keys_buffer, values_buffer)
        self.keys, self.values = keys_buffer[..., :n, :], values_buffer[..., :n, :]
        self._view = self.keys
        self.is_initialized = True

    def owns_buffer(self, n: int) -> bool:
        """Whether the layer's keys are the view of its own buffer (no one else's tensor)
        and that buffer has room for ``n`` rows."""
        return self._view is not None and self.keys is self._view and self._buffers[0].shape[-2] >= n

    @property
    def buffers(self):
        """``(keys, values)`` buffers; write only where :meth:`owns_buffer` says so."""
        return self._buffers

    @staticmethod
    def new_buffer(like, n: int):
        """An empty buffer shaped like ``like`` ``[..., rows, d]`` for ``n`` rows and spare."""
        return like.new_empty(like.shape[:-2] + (n + max(SPARE, n // 2), like.shape[-1]))

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        old = self.keys.shape[-2] if self.keys is not None and self.keys.dim() == 4 else 0
        n = old + key_states.shape[-2]
        if self._view is None or self.keys is not self._view or n > self._buffers[0].shape[-2]:
            k, v = self.new_buffer(key_states, 2 * n), self.new_buffer(value_states, 2 * n)
            if old:
                k[..., :old, :] = self.keys
                v[..., :old, :] = self.values
            self._buffers = (k, v)
        k, v = self._buffers
        k[..., old:n, :] = key_states
        v[..., old:n, :] = value_states
        self.keys, self.values = k[..., :n, :], v[..., :n, :]
        self._view = self.keys
        return self.keys, self.values


def growing_cache(config):
    """A ``DynamicCache`` for ``config`` whose layers are :class:`GrowingLayer`."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache
