"""Halo Weave: an endless conversation inside a fixed context window, kept by attention."""

__version__ = "0.1.0"
