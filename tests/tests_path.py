"""Where the shared test helpers live (for child processes that import them)."""

from pathlib import Path

FOLDER = str(Path(__file__).resolve().parent)
