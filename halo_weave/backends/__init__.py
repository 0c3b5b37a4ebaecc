"""Model servers behind one interface, chosen by probing the URL (:func:`connect`).

Kinds: ours and the patched KoboldCPP fork (attention, token ids), stock KoboldCPP
(text mode), llama.cpp's ``llama-server`` (token ids), any OpenAI-compatible
completions server (text mode).  See :mod:`halo_weave.backends.base` for the interface.
"""

from .base import BackendAuthError, BackendUnusable, Capabilities
from .probe import KIND_NAMES, ProbeResult, connect, probe, status_line

__all__ = ["BackendAuthError", "BackendUnusable", "Capabilities", "KIND_NAMES", "ProbeResult", "connect",
           "probe", "status_line"]
