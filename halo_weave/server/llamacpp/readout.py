"""The attention readout of :class:`~.cache.LlamaCache`: ggml's evaluation callback.

With flash attention off, each layer's graph has a softmax node named
``kq_soft_max-<layer>`` of shape ``[n_kv, n_tokens, n_head]``: the attention
probabilities of every query head over the KV *cells* (padded to 256).  The evaluation
callback asks for those nodes only while a token whose attention a client wants is
decoded (prefill runs uncut), copies them into a preallocated array, and the row is
then mapped from cells to positions.  Cells are not positions: after a prune the next
tokens reuse the freed cells.  So the callback also reads, on every decode, which cells
the batch's tokens were written to (the index source ``attn_inp_k_idxs`` of layer 0's
``SET_ROWS`` node), and ``cells[p]`` keeps the cell of position ``p``.  A Python
exception inside the callback would make ctypes answer "stop" and llama.cpp would then
return zero logits as if nothing happened, so every exception is caught, kept, and
raised after the decode.  ggml asks the callback about every node of the graph; where
it compiles, the C filter of :mod:`.filter` answers those asks, copies a captured decode's
rows into ``_rows`` itself, and passes on only the other calls this callback acts on.
"""

from __future__ import annotations

import numpy as np

SOFTMAX_PREFIX = b"kq_soft_max-"
K_CACHE_LAYER0 = b"cache_k_l0 (view)"


class AttentionReadout:
    """The readout half of :class:`~.cache.LlamaCache` (which sets up the state read here:
    ``_rows``, ``_capture``, ``_hook``, ``_new_cells`` and the rest)."""

    def callback(self, tensor, ask, _user_data) -> bool:
        """ggml's evaluation callback (see the module docstring); never raises."""
        try:
            if not self._layout_checked:
                self.lib.check_layout(tensor)
                self._layout_checked = True
            lib = self.lib
            name = lib.tensor_name(tensor)
            if ask:
                if name.startswith(SOFTMAX_PREFIX):
                    return self._capture or self._hook is not None
                if name == K_CACHE_LAYER0 and lib.tensor_op(tensor) == lib.op_set_rows:
                    self._idx_tensor = lib.tensor_src(tensor, 1)
                    self.spill.see_key_tensor(lib.tensor_view_src(tensor))
                    return True
                return False
            if name.startswith(SOFTMAX_PREFIX):
                n_kv, n_tok, n_head, _ = lib.tensor_shape(tensor)
                layer = int(name[len(SOFTMAX_PREFIX):])
                size = n_kv * n_tok * n_head
                if self._hook is not None:  # every query of the batch (teacher forcing)
                    if self._block_scratch.size < size:
                        self._block_scratch = np.zeros(size, dtype=np.float32)
                    lib.read(tensor, self._block_scratch[:size])
                    self._hook(layer, self._block_scratch[:size].reshape(n_head, n_tok, n_kv))
                    self._layers_seen += 1
                    return True
                for h in range(n_head):  # the last query's row of each head
                    lib.read_part(tensor, self._rows[layer, h, :n_kv], 4 * (h * n_tok + n_tok - 1) * n_kv)
                self._row_width = n_kv
                self._layers_seen += 1
            elif self._idx_tensor:
                n = lib.tensor_shape(self._idx_tensor)[0]
                found = np.zeros(n, dtype=np.int64)
                lib.read(self._idx_tensor, found)
                self._new_cells.append(found)
                self._idx_tensor = None
        except BaseException as exc:  # noqa: BLE001 - see the module docstring
            self._error = self._error or exc
        return True

    def attention_row(self, per_layer: bool = False) -> np.ndarray:
        """The last captured query's attention over the positions: the layer-and-head mean
        (float32 ``[positions]``), or ``[layers, heads, positions]`` with ``per_layer``."""
        if per_layer:
            return np.take(self._rows, self.cells, axis=2)
        # Sum the cell rows, then pick positions: the same sums as the gathered mean, ~10x faster.
        width = self._row_width
        flat = self._rows[:, :, :width].reshape(self.n_layer * self.n_head, width)
        mean = flat.sum(axis=0, dtype=np.float64) / (self.n_layer * self.n_head)
        return mean[self.cells].astype(np.float32)
