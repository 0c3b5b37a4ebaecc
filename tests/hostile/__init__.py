"""Hostile and clumsy use: what users and other programs really do to the app."""
