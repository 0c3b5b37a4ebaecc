"""The parts of llama.cpp and ggml the engine calls, through llama-cpp-python's ctypes.

llama-cpp-python binds llama.cpp's C API (``llama_cpp.llama_cpp``) but not the ggml
calls needed to read a tensor inside the evaluation callback; those are bound here
from the ggml base library it ships.  A ggml tensor's fields (name, op, shape, sources)
are read through :class:`GgmlTensor`, a mirror of ``struct ggml_tensor`` that
:func:`load` checks against ``ggml_get_name`` before trusting it.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from ..omp import configure as configure_openmp

#: ggml limits the struct layout depends on (ggml.h).
GGML_MAX_DIMS = 4
GGML_MAX_OP_PARAMS = 64
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64


class LlamaUnavailable(RuntimeError):
    """llama-cpp-python is not installed (or its library does not load) on this machine."""


class GgmlTensor(ctypes.Structure):
    """``struct ggml_tensor`` (ggml.h of the llama.cpp that llama-cpp-python 0.3.x ships)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


NAME_OFFSET = GgmlTensor.name.offset
OP_OFFSET = GgmlTensor.op.offset
NE_OFFSET = GgmlTensor.ne.offset
SRC_OFFSET = GgmlTensor.src.offset
NB_OFFSET = GgmlTensor.nb.offset
DATA_OFFSET = GgmlTensor.data.offset
BUFFER_OFFSET = GgmlTensor.buffer.offset
VIEW_SRC_OFFSET = GgmlTensor.view_src.offset


class Bindings:
    """``llama`` (the llama_cpp.llama_cpp module) plus the ggml calls bound here."""

    def __init__(self, llama, ggml) -> None:
        self.llama = llama
        self.ggml = ggml
        self.op_set_rows = self._op_number(b"SET_ROWS")
        self.op_soft_max = self._op_number(b"SOFT_MAX")

    def _op_number(self, name: bytes) -> int:
        for op in range(128):  # stops at the match, before GGML_OP_COUNT
            found = self.ggml.ggml_op_name(op)
            if found == name:
                return op
        raise LlamaUnavailable(f"this ggml has no {name.decode()} operation")

    def tensor_name(self, tensor: int) -> bytes:
        return ctypes.string_at(tensor + NAME_OFFSET)

    def tensor_op(self, tensor: int) -> int:
        return ctypes.c_int.from_address(tensor + OP_OFFSET).value

    def tensor_shape(self, tensor: int) -> tuple[int, int, int, int]:
        return tuple((ctypes.c_int64 * GGML_MAX_DIMS).from_address(tensor + NE_OFFSET))

    def tensor_src(self, tensor: int, index: int) -> int | None:
        return ctypes.c_void_p.from_address(tensor + SRC_OFFSET + index * ctypes.sizeof(ctypes.c_void_p)).value

    def tensor_view_src(self, tensor: int) -> int | None:
        """The tensor a view looks into (a SET_ROWS node's destination)."""
        return ctypes.c_void_p.from_address(tensor + VIEW_SRC_OFFSET).value

    def tensor_host_rows(self, tensor: int) -> tuple[int | None, int, int]:
        """``(data address, bytes per row, rows)`` of a tensor; the address is None when
        its buffer is not host memory (a GPU's: read it with :meth:`read`, write it with
        :meth:`write_part`), and ``(None, 0, 0)`` when it has no buffer."""
        buffer = ctypes.c_void_p.from_address(tensor + BUFFER_OFFSET).value
        if not buffer:
            return None, 0, 0
        ne = self.tensor_shape(tensor)
        row_bytes = ctypes.c_size_t.from_address(tensor + NB_OFFSET + ctypes.sizeof(ctypes.c_size_t)).value
        on_host = self.ggml.ggml_backend_buffer_is_host(buffer)
        data = ctypes.c_void_p.from_address(tensor + DATA_OFFSET).value if on_host else None
        return data, row_bytes, ne[1] * ne[2] * ne[3]

    def read(self, tensor: int, into) -> None:
        """Copy the tensor's bytes into the NumPy array ``into`` (sized to fit)."""
        n = self.ggml.ggml_nbytes(tensor)
        if into.nbytes < n:
            raise ValueError(f"tensor of {n} bytes does not fit {into.nbytes}")
        self.ggml.ggml_backend_tensor_get(tensor, into.ctypes.data, 0, n)

    def read_part(self, tensor: int, into, offset: int) -> None:
        """Copy ``into.nbytes`` bytes of the tensor from byte ``offset`` into the
        contiguous NumPy array ``into``."""
        n = into.nbytes
        if offset < 0 or offset + n > self.ggml.ggml_nbytes(tensor) or not into.flags.c_contiguous:
            raise ValueError(f"bytes {offset}..{offset + n} are not in the tensor")
        self.ggml.ggml_backend_tensor_get(tensor, into.ctypes.data, offset, n)

    def write_part(self, tensor: int, data, offset: int) -> None:
        """Copy the contiguous NumPy array ``data`` into the tensor from byte ``offset``
        (through its backend: host or device memory alike)."""
        n = data.nbytes
        if offset < 0 or offset + n > self.ggml.ggml_nbytes(tensor) or not data.flags.c_contiguous:
            raise ValueError(f"bytes {offset}..{offset + n} are not in the tensor")
        self.ggml.ggml_backend_tensor_set(tensor, data.ctypes.data, offset, n)

    def check_layout(self, tensor: int) -> None:
        """Refuse to read tensors if our struct mirror disagrees with ggml."""
        if self.tensor_name(tensor) != (self.ggml.ggml_get_name(tensor) or b""):
            raise LlamaUnavailable("ggml's tensor layout is not the one this engine knows")


@functools.lru_cache(maxsize=1)
def load() -> Bindings:
    """Import llama-cpp-python and bind ggml (once); :class:`LlamaUnavailable` if absent."""
    # ggml's CPU threads meet at a barrier after every graph node; how they wait there is
    # read once, when libgomp loads: set it before the library does (see ..omp).
    configure_openmp()
    try:
        import llama_cpp.llama_cpp as llama
    except Exception as exc:  # noqa: BLE001 - ImportError, or OSError from the shared library
        raise LlamaUnavailable(f"llama-cpp-python is not usable here: {exc}") from exc
    folder = Path(llama.__file__).parent / "lib"
    candidates = sorted(folder.glob("libggml-base.*")) + sorted(folder.glob("ggml-base.*"))
    if not candidates:
        raise LlamaUnavailable(f"no ggml base library in {folder}")
    ggml = ctypes.CDLL(str(candidates[0]))
    ggml.ggml_get_name.restype = ctypes.c_char_p
    ggml.ggml_get_name.argtypes = [ctypes.c_void_p]
    ggml.ggml_op_name.restype = ctypes.c_char_p
    ggml.ggml_op_name.argtypes = [ctypes.c_int]
    ggml.ggml_nbytes.restype = ctypes.c_size_t
    ggml.ggml_nbytes.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_tensor_get.restype = None
    ggml.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    ggml.ggml_backend_tensor_set.restype = None
    ggml.ggml_backend_tensor_set.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    ggml.ggml_backend_buffer_is_host.restype = ctypes.c_bool
    ggml.ggml_backend_buffer_is_host.argtypes = [ctypes.c_void_p]
    llama.llama_backend_init()
    return Bindings(llama, ggml)
