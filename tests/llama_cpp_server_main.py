"""``python tests/llama_cpp_server_main.py ARGS``: ``python -m llama_cpp.server ARGS``, its
models loaded with the settings this CPU survives.

llama-cpp-python's server has no option for llama.cpp's extra buffer types, whose weight
repacking crashes on CPUs with AMX (see halo_weave/server/llamacpp/safety.py); its
``Llama`` class starts from ``llama_model_default_params()``, so that function is given
the verdict's settings before the server module runs.
"""

import runpy

import llama_cpp.llama_cpp as llama

from halo_weave.server.llamacpp import safety

_defaults = llama.llama_model_default_params
llama.llama_model_default_params = lambda: safety.apply(_defaults(), safety.verdict().mode)

runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
