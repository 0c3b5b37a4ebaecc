"""Hostile and clumsy use (issue 17): what users and other programs really do to the app."""
