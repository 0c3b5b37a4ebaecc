"""Attaching a document: a file's paragraphs join the conversation, in the memory.

A document is one turn of the role ``document`` at the end of the conversation, where it
was attached (:mod:`halo_weave.core.documents` says why and how its paragraphs are cut
and labelled).  By default every paragraph goes straight to the graveyard, indexed like a
message's, and a later message brings back the paragraphs it needs at their place, where
the model reads each as a user turn opening with ``[file, page N]``.  Asked to keep it
live, a document that fits the context target stays live instead (the next message's
answer reads it whole); one that does not fit goes to the memory and :class:`Attached`
says so.

Two steps, both safe on a worker thread while nothing else runs on the conversation (the
app holds its input closed): :meth:`Documents.prepare` reads and tokenizes (the slow part,
with progress), :meth:`Documents.attach` adds the turn and saves it in one transaction
(DB-first: a failed save leaves the conversation as it was, then raises).  Indexing is
queued on the indexer's own thread by :meth:`Documents.index`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..conversation import Turn
from ..errors import DocumentError
from ..storage.document_files import DocumentText, read_document

#: ``progress(what, done, total)``: what is being done, in words, and how far.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class PreparedDocument:
    """A document read and tokenized, not yet part of the conversation."""

    document: DocumentText
    paragraphs: list[tuple[list[int], list[str]]]  # token ids and texts, label included

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids, _ in self.paragraphs)


@dataclass(frozen=True)
class Attached:
    """A document now in the conversation: its turn and where its paragraphs went."""

    turn: Turn
    name: str
    pages: int
    chunk_ids: list[int]
    tokens: int
    live: bool
    #: Live was asked for, but the document did not fit the context target.
    too_big_for_live: bool = False

    def summary(self) -> str:
        """One sentence for the window."""
        pages = f"{self.pages:,} pages, " if self.pages > 1 else ""
        where = "in the context" if self.live else "in the memory (the graveyard)"
        text = f"Attached {self.name}: {pages}{len(self.chunk_ids):,} paragraphs, {self.tokens:,} tokens, {where}."
        if self.too_big_for_live:
            text += " It is too long to keep live; a message brings back the paragraphs it needs."
        return text


class Documents:
    """The session's part that attaches files (see the module docstring).  Owns nothing:
    the turn it adds is the conversation's, its rows the file's."""

    def __init__(self, session) -> None:
        self._session = session

    def prepare(self, path: str | Path, progress: Progress | None = None) -> PreparedDocument:
        """Read ``path`` and tokenize its paragraphs with the server's tokenizer (blocking).

        Raises :class:`~halo_weave.errors.DocumentError` for a file that cannot be
        attached, and whatever the tokenizer raises (the server went away); the
        conversation is not touched either way."""
        session = self._session
        if session.conv is None or session.backend is None:
            raise DocumentError("Open a conversation and connect to a model server before attaching a document.")
        name = Path(path).name
        read = (lambda done, total: progress(f"Reading {name}", done, total)) if progress else None
        document = read_document(path, read)
        paragraphs = []
        total = len(document.paragraphs)
        for done, paragraph in enumerate(document.paragraphs, start=1):
            pieces = session.server.tokenize(paragraph.labelled)
            paragraphs.append(([int(i) for i, _ in pieces], [t for _, t in pieces]))
            if progress is not None and (done % 16 == 0 or done == total):
                progress(f"Reading {name}", done, total)
        return PreparedDocument(document, paragraphs)

    def fits_live(self, prepared: PreparedDocument) -> bool:
        """Whether the document fits beside the live context within the context target
        (and the model's window, where it is known)."""
        session = self._session
        limits = [session.settings.pruning.max_context_tokens, session.server.window_limit()]
        limit = min((x for x in limits if x > 0), default=0)
        return limit == 0 or session.conv.live_token_count() + prepared.tokens <= limit

    def attach(self, prepared: PreparedDocument, *, live: bool = False) -> Attached:
        """Add the document as a turn (live only when asked and it fits, else pruned at
        once) and save it; on a failed save the conversation goes back to what it was and
        this raises."""
        session = self._session
        conv, store = session.conv, session.store
        keep_live = live and self.fits_live(prepared)
        saved = conv.snapshot()
        try:
            turn = conv.add_document(prepared.paragraphs)
            if not keep_live:
                conv.prune_turn(turn.turn_id)
            if store is not None:
                store.save_turn(conv, turn)
        except BaseException:
            conv.restore(saved)
            raise
        document = prepared.document
        return Attached(turn, document.name, document.pages, [c.id for c in conv.content_chunks(turn.turn_id)],
                        prepared.tokens, keep_live, live and not keep_live)

    def index(self, attached: Attached) -> None:
        """Queue the document's paragraphs for the semantic index, with progress."""
        indexer = self._session.indexer
        if indexer is not None:
            indexer.queue(self._session.conv, attached.chunk_ids, label=f"Indexing {attached.name}")
