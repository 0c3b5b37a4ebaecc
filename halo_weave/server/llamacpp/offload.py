"""How many of the model's layers llama.cpp puts on a GPU: ``--gpu-layers N``.

llama-cpp-python is built for the CPU unless it was compiled with a GPU backend
(``CMAKE_ARGS="-DGGML_CUDA=on"``, ``-DGGML_METAL=on``, ``-DGGML_VULKAN=on``; see the
README, "A GPU").  ``N`` layers, counted from the last one (llama.cpp's own rule), run on
the GPU with their KV cache; ``-1`` puts every layer there; ``0`` (the default) is the
CPU alone, exactly as without the option.

On a build without a GPU backend (``llama_supports_gpu_offload()`` false) a request for
layers is not an error: the model runs on the CPU and :attr:`Offload.note` says so and how
to rebuild, in the log and in the window (the app's setting must never keep its own
server from starting).  The attention read-out and the KV surgery read device memory
through ggml's backend API (:mod:`.readout`, :mod:`.states`), so they work either way.
"""

from __future__ import annotations

import dataclasses
import logging

log = logging.getLogger("halo_weave.server")

#: ``--gpu-layers`` value that offloads every layer.
ALL_LAYERS = -1
#: The command that rebuilds llama-cpp-python with CUDA (the README has Metal and Vulkan).
CUDA_BUILD = ('CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir '
              '--no-binary llama-cpp-python llama-cpp-python')


@dataclasses.dataclass(frozen=True)
class Offload:
    """The layers asked for, the layers given to llama.cpp, and what the window says."""

    asked: int
    layers: int
    note: str | None = None

    @property
    def on_gpu(self) -> bool:
        return self.layers != 0

    def device(self, n_layer: int) -> str:
        """The engine's device in words: ``cpu``, ``gpu (all 24 layers)``, ``gpu (8 of 24 layers)``."""
        if not self.on_gpu:
            return "cpu"
        if self.layers == ALL_LAYERS or self.layers >= n_layer:
            return f"gpu (all {n_layer} layers)"
        return f"gpu ({self.layers} of {n_layer} layers)"


def check_layers(value: int) -> int:
    """``value`` if it is a valid ``--gpu-layers`` (0 or more, or -1 for all), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < ALL_LAYERS:
        raise ValueError(f"GPU layers must be 0 or more (or {ALL_LAYERS} for all), not {value!r}")
    return value


def supports_gpu(llama) -> bool:
    """Whether this llama.cpp build has a GPU backend (False for an old binding without the call)."""
    try:
        return bool(llama.llama_supports_gpu_offload())
    except Exception:  # noqa: BLE001 - no such call: treat as a CPU build
        return False


def resolve(llama, asked: int) -> Offload:
    """What ``--gpu-layers asked`` becomes on this build (see the module docstring)."""
    asked = check_layers(asked)
    if asked == 0:
        return Offload(0, 0)
    if supports_gpu(llama):
        return Offload(asked, asked)
    note = (f"GPU layers were asked for ({'all' if asked == ALL_LAYERS else asked}), but this "
            "llama-cpp-python was built for the CPU only, so the model runs on the CPU. "
            f"Rebuild it with a GPU backend, e.g. `{CUDA_BUILD}` (README, \"A GPU\").")
    log.warning("%s", note)
    return Offload(asked, 0, note)
