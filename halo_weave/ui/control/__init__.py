"""The turn controller's collaborators: the window's state and intents, without widgets.

Each module holds one collaborator that owns its state (its docstring lists exactly
what) and reaches the others through the references it is given; they are built and
wired in :class:`halo_weave.app.TurnController`, the composition root.  The threads
(:mod:`.workers`), the server connection (:mod:`.connection`), the indexing queue
(:mod:`.indexing`) and the sentences that explain failures (:mod:`.failures`) live here
too.  QtCore only: an import-linter contract keeps ``PySide6.QtWidgets`` and
``PySide6.QtGui`` out, so tests drive the controller without a window.
"""
