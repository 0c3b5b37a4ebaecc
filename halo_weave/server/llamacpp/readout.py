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
rows into the readout's rows itself, and passes on only the other calls this callback acts on.
"""

from __future__ import annotations

import numpy as np

SOFTMAX_PREFIX = b"kq_soft_max-"
K_CACHE_LAYER0 = b"cache_k_l0 (view)"


class DecodeError(RuntimeError):
    """llama_decode refused a batch or the evaluation callback failed."""


class DecodeStopped(DecodeError):
    """A decode was stopped part way (:class:`.filter.Stopper`); llama.cpp dropped its cells."""


class AttentionReadout:
    """ggml's evaluation callback and what it reads (see the module docstring).

    Owns: the softmax rows of the last captured query (``[layers, heads, cells]``) and
    their width, the cells each decode's tokens were written to, what the decode under
    way wants (the last query's rows, or every layer's block for a hook), how many
    layers it saw, the error it met, and the C filter where one compiled.  The state
    spill of the context in use (:meth:`bind`) is told where layer 0's key cache is.
    """

    def __init__(self, lib, n_layer: int, n_head: int) -> None:
        self.lib = lib
        self.n_layer, self.n_head = n_layer, n_head
        #: The C filter answering ggml's asks (None: this callback sees every node).
        self.c_filter = None
        self._spill = None
        self._rows = np.zeros((n_layer, n_head, 0), dtype=np.float32)
        self._row_width = 0
        #: Layers whose softmax the decode under way (or the last one) was read from.
        self.layers_seen = 0
        self._new_cells: list[np.ndarray] = []
        self._idx_tensor: int | None = None
        self._capture = False
        #: While a decode runs with a hook: called with every layer's softmax block.
        self._hook = None
        self._direct = False
        self._block_scratch = np.zeros(0, dtype=np.float32)
        self._error: BaseException | None = None
        self._layout_checked = False

    def use_filter(self, c_filter) -> None:
        """Let ``c_filter`` (a :class:`.filter.CFilter`) answer ggml's asks from now on."""
        self.c_filter = c_filter

    def bind(self, n_cells: int, spill) -> None:
        """Read a context of ``n_cells`` cells whose states ``spill`` saves and restores."""
        self._spill = spill
        self._rows = np.zeros((self.n_layer, self.n_head, n_cells), dtype=np.float32)

    @property
    def n_cells(self) -> int:
        """Cells of the context read."""
        return self._rows.shape[2]

    def start(self, capture: bool, hook) -> None:
        """A decode begins: read the last query's rows (``capture``), or every layer's
        block for ``hook`` (see :meth:`.LlamaCache.decode`), or only the cells."""
        self._new_cells, self._error, self._capture, self._hook = [], None, capture and hook is None, hook
        self.layers_seen = 0
        self._direct = self.c_filter is not None and self._capture and self._layout_checked
        if self.c_filter is not None:  # every decode is made here, so set for each
            self.c_filter.want_softmax = capture
            self.c_filter.read_rows_into(self._rows if self._direct else None)

    def stop(self) -> None:
        """The decode ended (or failed): read nothing more."""
        self._capture, self._hook = False, None

    def collect(self) -> None:
        """After a decode: count what the C filter copied; raise :class:`DecodeError`
        with the error the callback met, if any."""
        if self._direct:  # the filter copied the rows (or left a layer it could not to the callback)
            layers, width = self.c_filter.rows_read()
            self.layers_seen += layers
            self._row_width = width or self._row_width
        if self._error is not None:
            raise DecodeError(f"attention readout failed: {self._error!r}") from self._error

    def cells(self) -> np.ndarray:
        """The cells the last decode's tokens were written to, in batch order."""
        return np.concatenate(self._new_cells) if self._new_cells else np.zeros(0, np.int64)

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
                    self._spill.see_key_tensor(lib.tensor_view_src(tensor))
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
                    self.layers_seen += 1
                    return True
                for h in range(n_head):  # the last query's row of each head
                    lib.read_part(tensor, self._rows[layer, h, :n_kv], 4 * (h * n_tok + n_tok - 1) * n_kv)
                self._row_width = n_kv
                self.layers_seen += 1
            elif self._idx_tensor:
                n = lib.tensor_shape(self._idx_tensor)[0]
                found = np.zeros(n, dtype=np.int64)
                lib.read(self._idx_tensor, found)
                self._new_cells.append(found)
                self._idx_tensor = None
        except BaseException as exc:  # noqa: BLE001 - see the module docstring
            self._error = self._error or exc
        return True

    def attention_row(self, cells: np.ndarray, per_layer: bool = False) -> np.ndarray:
        """The last captured query's attention over the positions whose cells are
        ``cells``: the layer-and-head mean (float32 ``[positions]``), or ``[layers,
        heads, positions]`` with ``per_layer``."""
        if per_layer:
            return np.take(self._rows, cells, axis=2)
        # Sum the cell rows, then pick positions: the same sums as the gathered mean, ~10x faster.
        width = self._row_width
        flat = self._rows[:, :, :width].reshape(self.n_layer * self.n_head, width)
        mean = flat.sum(axis=0, dtype=np.float64) / (self.n_layer * self.n_head)
        return mean[cells].astype(np.float32)
