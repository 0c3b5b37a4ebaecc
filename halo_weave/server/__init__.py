"""The attention server: KoboldCPP's wire protocol over llama.cpp or transformers.

* :mod:`.engine_base` - what every engine offers, and the validation, locking and abort
  they share; :mod:`.engine_choice` - choose and load one (``--engine``);
* :mod:`.llamacpp` - the llama.cpp engine (GGUF; attention read from the graph);
* :mod:`.transformers_engine` - the transformers engine (any checkpoint; the reference),
  with :mod:`.transformers_cache` its cache and :mod:`.loader` finding and caching models;
* :mod:`.kv_surgery` - prunes and resurrections applied to the KV cache without
  re-running the context;
* :mod:`.app` - Starlette routes and SSE streaming over an engine;
* :mod:`.launcher` - start the server as a child process and wait for its ready line;
* ``python -m halo_weave.server`` / ``halo-weave-server`` - the command line.

Importing this package loads neither torch, transformers nor llama.cpp.
"""
