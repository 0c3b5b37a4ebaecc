"""Failures of the machine (disk, memory, text) in plain words, with what to do.

Disk full, a read-only folder, a disk I/O error, an unopenable file, MemoryError,
RecursionError and UnicodeEncodeError all used to reach the user as "Unexpected error"
and a class name.  :func:`explain` recognises them, whichever layer raised
them (SQLite's ``OperationalError`` text, an ``OSError``'s errno, the store's own
errors), and says what happened and what the user can do.  The window
(:func:`~halo_weave.ui.messages.describe`) asks here before giving up.
"""

from __future__ import annotations

import errno
import sqlite3
from dataclasses import dataclass

from ...errors import StoreDamaged, StoreJournalLost

#: Said whenever a message could not be sent or saved (the window keeps it in the input).
KEPT = "Your message is still in the input box; send it again once this is fixed."


@dataclass(frozen=True)
class Explanation:
    """A title and the words for the user."""

    title: str
    text: str


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and the ones it was raised from (the root cause is often below)."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen and len(seen) < 10:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def explain(exc: BaseException, *, message_kept: bool = False) -> Explanation | None:
    """Plain words for a machine-level failure, or None when this is not one.

    ``message_kept``: the failure stopped a message from being sent, and the window put
    it back in the input box (the words then say so).
    """
    for item in _chain(exc):
        found = _explain_one(item, KEPT if message_kept else "")
        if found is not None:
            return Explanation(found.title, found.text.rstrip())
    return None


def _explain_one(exc: BaseException, KEPT: str) -> Explanation | None:  # noqa: N803
    text = str(exc).lower()
    if isinstance(exc, StoreDamaged):
        return Explanation("Conversation file damaged", f"{exc}")
    if isinstance(exc, StoreJournalLost):
        return Explanation("Saving stopped", f"{exc} {KEPT}")
    code = exc.errno if isinstance(exc, OSError) else None
    if code == errno.ENOSPC or "database or disk is full" in text or "no space left" in text:
        return Explanation(
            "Disk full",
            "The disk holding your conversations is full, so nothing more could be saved "
            f"(what was saved before is safe). Free some space on it, then try again. {KEPT}",
        )
    if code in (errno.EROFS, errno.EACCES, errno.EPERM) or "readonly database" in text \
            or "read-only file system" in text:
        return Explanation(
            "Cannot write there",
            "The folder or file is read-only (or you lack permission to write it), so nothing "
            "could be saved. Choose another folder for your conversations (start with "
            f"--data-dir DIR), or make this one writable. {KEPT}",
        )
    if "disk i/o error" in text or code == errno.EIO:
        return Explanation(
            "Disk error",
            "The disk reported an error while reading or writing the conversation. Check the "
            "disk (or reconnect the drive), then run `halo-weave --check FILE` on the "
            f"conversation file: it says whether anything is damaged. {KEPT}",
        )
    if "unable to open database file" in text:
        return Explanation(
            "Cannot open the conversation file",
            "The conversation file or its folder cannot be opened: it may have been moved or "
            "deleted, or its folder is not writable. Check the folder, or choose another with "
            f"--data-dir DIR. {KEPT}",
        )
    if "database is locked" in text:
        return Explanation(
            "Conversation file busy",
            "Another program (or another Halo Weave window) is writing the same conversation "
            f"file. Close it, then try again. {KEPT}",
        )
    if isinstance(exc, MemoryError):
        return Explanation(
            "Out of memory",
            "The computer ran out of memory for this. Close other programs, or send a shorter "
            f"message. Your conversation is safe. {KEPT}",
        )
    if isinstance(exc, RecursionError):
        return Explanation(
            "Too deeply nested",
            "Something in this message or result is nested too deeply to handle (hundreds of "
            f"brackets inside brackets). Simplify it and try again. {KEPT}",
        )
    if isinstance(exc, UnicodeError):
        return Explanation(
            "Text that cannot be stored",
            "The text holds characters that are not valid Unicode (for example half of an emoji, "
            "which some programs leave when copying). Delete those characters or paste the text "
            f"again from its source. {KEPT}",
        )
    if isinstance(exc, sqlite3.DatabaseError) and "malformed" in text:
        return Explanation(
            "Conversation file damaged",
            f"The conversation file is damaged ({exc}). Run `halo-weave --check FILE` to see what "
            "is wrong, and restore the file from a backup.",
        )
    return None
