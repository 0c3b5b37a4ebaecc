"""The reference attention server: KoboldCPP's wire protocol over transformers + torch.

* :mod:`.engine` - the model, usable in-process (``Engine.load()``, ``generate``,
  ``teacher_force``), no HTTP involved;
* :mod:`.app` - Starlette routes and SSE streaming over an engine;
* :mod:`.launcher` - start the server as a child process and wait for its ready line;
* ``python -m halo_weave.server`` / ``halo-weave-server`` - the command line.

Importing this package loads neither torch nor transformers.
"""
