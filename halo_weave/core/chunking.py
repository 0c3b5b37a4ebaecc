"""Where a chunk may end.

A boundary may fall after a paragraph break (``\\n\\n``), after a line that starts with a
closing brace (the end of a code block) or after a fenced code line (```` ``` ````), but
only once the current chunk holds at least ``min_chunk_tokens`` tokens.  Short
paragraphs therefore merge forward: a grocery list stays one chunk with the sentence that
explains it.

The detector is fed one token text at a time, so the same code chunks a user message
(tokenized at once) and a streamed answer.
"""

from __future__ import annotations


class BoundaryDetector:
    """Tracks the current line and says whether a token ended at a boundary."""

    def __init__(self) -> None:
        self._line = ""

    def feed(self, text: str) -> bool:
        """Consume one token's text; true when a boundary may fall right after it."""
        if "\n" not in text:
            self._line += text
            return False
        boundary = False
        *finished, self_rest = text.split("\n")
        for part in finished:
            line = (self._line + part).strip()
            self._line = ""
            # A blank line ending means "\n\n"; a brace or fence line ends code.
            if line == "" or line.startswith("}") or line.startswith("```"):
                boundary = True
        self._line = self_rest
        return boundary
