"""Model servers behind one interface, chosen by probing the URL (:func:`connect`).

Kinds: ours and the patched KoboldCPP fork (attention, token ids), stock KoboldCPP
(text mode), llama.cpp's ``llama-server`` (token ids), any OpenAI-compatible
completions server (text mode), any OpenAI-compatible chat-completions server (text mode,
the context sent as messages).  :class:`Backend` (:mod:`.interface`) declares what each
implements; :data:`PROBES` is the detection, walked in order.
"""

from .base import BackendAuthError, BackendUnusable, Capabilities
from .interface import Backend
from .probe import APIS, KIND_NAMES, PROBES, Probe, ProbeResult, connect, probe, status_line

__all__ = ["APIS", "Backend", "BackendAuthError", "BackendUnusable", "Capabilities", "KIND_NAMES", "PROBES", "Probe",
           "ProbeResult", "connect", "probe", "status_line"]
