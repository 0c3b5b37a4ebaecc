"""Reading a file the user attaches: a PDF's pages or a text file's text, as paragraphs.

PDF through ``pypdf`` (pure Python; text layer only: a scanned PDF has none), anything
else as UTF-8 text (prose, Markdown, code).  Every file that cannot be used is refused
with a :class:`~halo_weave.errors.DocumentError` whose text names the file and the
reason: not a regular file, larger than :data:`MAX_DOCUMENT_BYTES`, binary or not UTF-8,
an encrypted or damaged PDF, no text at all, or more than :data:`MAX_DOCUMENT_CHARS`
characters.  Nothing is written here; the caller adds the paragraphs to the conversation.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core.documents import Paragraph, page_paragraphs, text_paragraphs
from ..errors import DocumentError
from .file_safety import UnsafePath, read_regular_file

#: The largest file read (bytes): a 300-page PDF with pictures is well below it.
MAX_DOCUMENT_BYTES = 128 << 20
#: The most text a document may hold (characters, about a million tokens).
MAX_DOCUMENT_CHARS = 4_000_000
#: Bytes looked at for a NUL, the sign of a binary file.
_SNIFF_BYTES = 8192

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class DocumentText:
    """What a file holds, ready to tokenize: its name, its pages (1 for a text file) and
    its paragraphs in order."""

    name: str
    kind: str  # "pdf" or "text"
    pages: int
    paragraphs: list[Paragraph]

    @property
    def characters(self) -> int:
        return sum(len(p.text) for p in self.paragraphs)


def read_document(path: str | Path, progress: Progress | None = None) -> DocumentText:
    """The paragraphs of the file at ``path``; ``progress(pages read, pages)`` for a PDF.

    Raises :class:`DocumentError` for a file that cannot be attached (see the module
    docstring)."""
    path = Path(path)
    try:
        raw = read_regular_file(path, MAX_DOCUMENT_BYTES)
    except UnsafePath as exc:
        raise DocumentError(str(exc)) from None
    if raw.startswith(b"%PDF-") or (path.suffix.lower() == ".pdf" and raw.lstrip()[:5] == b"%PDF-"):
        pages = _pdf_pages(path.name, raw, progress)
        document = DocumentText(path.name, "pdf", len(pages), page_paragraphs(path.name, pages))
    else:
        text = _utf8_text(path.name, raw)
        document = DocumentText(path.name, "text", 1, text_paragraphs(path.name, text))
    if not document.paragraphs:
        what = "no text layer (a scanned PDF has only pictures of text)" if document.kind == "pdf" else "no text"
        raise DocumentError(f"{path.name} has {what}; nothing was attached.")
    if document.characters > MAX_DOCUMENT_CHARS:
        raise DocumentError(
            f"{path.name} holds {document.characters:,} characters of text, more than the "
            f"{MAX_DOCUMENT_CHARS:,} a document may have; split it and attach the parts.")
    return document


def _utf8_text(name: str, raw: bytes) -> str:
    if not raw.strip():
        raise DocumentError(f"{name} is empty; nothing was attached.")
    if b"\x00" in raw[:_SNIFF_BYTES]:
        raise DocumentError(
            f"{name} is a binary file, not text; attach a text, Markdown, code or PDF file.")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"{name} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start:,}); "
            "save it as UTF-8, or attach a PDF.") from None


def _pdf_pages(name: str, raw: bytes, progress: Progress | None) -> list[str]:
    try:
        from pypdf import PdfReader
        from pypdf.errors import DependencyError, PyPdfError
    except ImportError:  # pragma: no cover - a dependency; said plainly if it is missing
        raise DocumentError(f"{name} is a PDF, and reading PDFs needs the pypdf package "
                            "(pip install pypdf).") from None
    # pypdf logs every oddity of a damaged file; what matters reaches the user as one error.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError(f"{name} is encrypted (it needs a password); "
                                "save a copy without a password and attach that.")
        count = len(reader.pages)
        pages = []
        for number, page in enumerate(reader.pages, start=1):
            pages.append(page.extract_text() or "")
            if progress is not None:
                progress(number, count)
    except DocumentError:
        raise
    except DependencyError as exc:  # AES encryption needs the cryptography package
        raise DocumentError(f"{name} is encrypted in a way this installation cannot read ({exc}); "
                            "save a copy without a password and attach that.") from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError,
            RecursionError, NotImplementedError, OSError) as exc:
        # pypdf raises many kinds for a damaged file; the reason is in its words.
        raise DocumentError(f"{name} cannot be read as a PDF ({exc.__class__.__name__}: {exc}).") from None
    return pages
