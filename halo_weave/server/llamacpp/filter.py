"""The evaluation callback's filter: ggml's per-node asks answered in C, not Python.

ggml's scheduler calls the evaluation callback with ``ask=true`` for every node of the
graph (about 1,100 per decoded token of the bundled model) and with ``ask=false`` only
for the nodes it was told yes about.  The cache wants about 31 of them, so a Python
callback spends most of its time saying no.  ``filter.c`` says no in C: it answers the
softmax nodes' asks from :attr:`CFilter.want_softmax` (set before each decode), forwards
the asks about one named node and every ``ask=false`` call to the Python callback, and
answers no to the rest.  While :meth:`CFilter.read_rows_into` has armed it, it also
copies each softmax's last-query rows into the cache's array itself (the Python
callback took ~70 us per layer for that); the teacher-forcing hook stays in Python.

The C source ships in this package and is compiled on first use with the system C
compiler (``$CC``, else ``cc``) into the user cache directory, under a name holding a
hash of the source (a changed source compiles anew); it is written to a temporary file
and renamed, so two servers starting at once never load half a library.  Where no
compiler exists or anything fails, :func:`build` logs one line and returns ``None``,
and the engine uses the Python callback for every node (slower, same attention).
``HALO_WEAVE_C_FILTER=0`` asks for that path.
"""

from __future__ import annotations

import ctypes
import logging
import os
from importlib import resources
from pathlib import Path

from ... import native, settings

log = logging.getLogger("halo_weave.server")

#: Set to 0 to use the pure-Python callback.
ENV_SWITCH = "HALO_WEAVE_C_FILTER"
SOURCE = "filter.c"
SYMBOL = "halo_weave_filter"
STOP_SYMBOL = "halo_weave_stop"


class FilterState(ctypes.Structure):
    """``struct filter_state`` of filter.c (same fields, same order)."""

    _fields_ = [
        ("get_name", ctypes.c_void_p),
        ("forward", ctypes.c_void_p),
        ("softmax_prefix", ctypes.c_char_p),
        ("softmax_prefix_len", ctypes.c_size_t),
        ("forward_name", ctypes.c_char_p),
        ("want_softmax", ctypes.c_int),
        ("forwarded", ctypes.c_longlong),
        ("tensor_get", ctypes.c_void_p),
        ("ne_offset", ctypes.c_size_t),
        ("rows", ctypes.c_void_p),
        ("row_stride", ctypes.c_longlong),
        ("n_layer", ctypes.c_longlong),
        ("n_head", ctypes.c_longlong),
        ("layers_seen", ctypes.c_longlong),
        ("row_width", ctypes.c_longlong),
    ]


class StopState(ctypes.Structure):
    """``struct stop_state`` of filter.c (same fields, same order)."""

    _fields_ = [("armed", ctypes.c_int), ("asked", ctypes.c_int)]


class Stopper:
    """llama.cpp's abort callback in C (``halo_weave_stop``): a decode stops between two
    nodes of its graph once :meth:`arm` was called and :meth:`ask` since; llama.cpp then
    drops the batch's cells and ``llama_decode`` returns 2.  ``callback`` and ``data`` go
    to ``llama_set_abort_callback``."""

    def __init__(self, library: ctypes.CDLL, callback_type) -> None:
        self._library = library  # alive as long as the contexts that call into it
        self.state = StopState()
        self.callback = ctypes.cast(getattr(library, STOP_SYMBOL), callback_type)
        self.data = ctypes.cast(ctypes.pointer(self.state), ctypes.c_void_p)

    def arm(self) -> None:
        """The decodes from now on may be stopped (an earlier :meth:`ask` is forgotten)."""
        self.state.asked = 0
        self.state.armed = 1

    def disarm(self) -> None:
        self.state.armed = 0

    def ask(self) -> None:
        """Stop the decode under way if armed (any thread)."""
        self.state.asked = 1


class CFilter:
    """The compiled filter wired to one Python callback: ``callback`` and ``user_data``
    go into ``llama_context_params`` (``cb_eval``, ``cb_eval_user_data``)."""

    def __init__(self, library: ctypes.CDLL, callback_type, forward, get_name, tensor_get, ne_offset: int,
                 softmax_prefix: bytes, forward_name: bytes) -> None:
        # Every object C points into is kept here, alive as long as the context.
        self._library = library
        self._forward = callback_type(forward)
        self._names = (softmax_prefix, forward_name)
        self.state = FilterState(
            get_name=ctypes.cast(get_name, ctypes.c_void_p).value,
            forward=ctypes.cast(self._forward, ctypes.c_void_p).value,
            softmax_prefix=softmax_prefix, softmax_prefix_len=len(softmax_prefix),
            forward_name=forward_name, tensor_get=ctypes.cast(tensor_get, ctypes.c_void_p).value,
            ne_offset=ne_offset)
        self.callback = ctypes.cast(getattr(library, SYMBOL), callback_type)
        self.user_data = ctypes.cast(ctypes.pointer(self.state), ctypes.c_void_p)

    def stopper(self, callback_type) -> Stopper:
        """llama.cpp's abort callback from the same library (``callback_type``:
        ``ggml_abort_callback``)."""
        return Stopper(self._library, callback_type)

    @property
    def want_softmax(self) -> bool:
        return bool(self.state.want_softmax)

    @want_softmax.setter
    def want_softmax(self, value: bool) -> None:
        self.state.want_softmax = 1 if value else 0

    def read_rows_into(self, rows) -> None:
        """Copy softmax rows into ``rows`` (float32 ``[layers, heads, cells]``, C-contiguous,
        kept alive by the caller) from the next decode on; ``None``: leave them to Python."""
        state = self.state
        if rows is None:
            state.rows = None
            return
        state.n_layer, state.n_head, state.row_stride = rows.shape
        state.rows = rows.ctypes.data
        state.layers_seen = state.row_width = 0

    def rows_read(self) -> tuple[int, int]:
        """``(layers, row width)`` copied since :meth:`read_rows_into`."""
        return self.state.layers_seen, self.state.row_width

    @property
    def forwarded(self) -> int:
        """Calls that entered the Python callback so far."""
        return self.state.forwarded


def build(callback_type, forward, get_name, tensor_get, ne_offset: int, softmax_prefix: bytes,
          forward_name: bytes) -> CFilter | None:
    """The C filter around ``forward`` (a Python callback ``(tensor, ask, user_data)``),
    or ``None`` (logged) where it cannot be compiled or loaded here."""
    if os.environ.get(ENV_SWITCH, "1").strip() == "0":
        log.info("attention readout: Python callback for every graph node (%s=0)", ENV_SWITCH)
        return None
    try:
        library = ctypes.CDLL(str(compiled()))
        return CFilter(library, callback_type, forward, get_name, tensor_get, ne_offset, softmax_prefix, forward_name)
    except Exception as exc:  # noqa: BLE001 - any failure means the Python path, never no server
        log.warning("attention readout: no C filter (%s); every graph node goes through Python, "
                    "decoding with attention is slower", _one_line(exc))
        return None


def compiled() -> Path:
    """The filter's shared library, compiled now if the cache does not hold this source's."""
    source = resources.files(__package__).joinpath(SOURCE).read_bytes()
    return native.compiled(source, SOURCE, settings.cache_dir() / "llamacpp", "filter", "-O2")


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:300]
