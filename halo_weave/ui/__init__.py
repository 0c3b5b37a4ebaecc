"""PySide6 widgets and the main window; the controller's collaborators, which use QtCore
only, are the subpackage :mod:`halo_weave.ui.control`."""
