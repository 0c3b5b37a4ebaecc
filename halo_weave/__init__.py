"""Halo Weave: an endless conversation inside a fixed context window, kept by attention."""

from importlib import metadata

try:
    #: The installed version (pyproject.toml's, through the package metadata).
    __version__ = metadata.version("halo-weave")
except metadata.PackageNotFoundError:  # the source tree run through PYTHONPATH, not installed
    __version__ = "0+unknown"
