"""PySide6 widgets, the main window and the threads (the only package that imports Qt widgets)."""
