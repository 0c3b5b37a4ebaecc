"""A tiny PDF writer: pages of plain text in Helvetica, nothing else.

Enough for the document benchmark and the tests to make a real PDF file (one ``pypdf``
and any viewer read) without a PDF library: one catalog, one page tree, one font (a
standard Type 1 font, so nothing is embedded), and per page one content stream that
draws its lines top-down.  Text is Latin-1; a blank line separates paragraphs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

#: Points between lines, the font size, and where the first line is drawn.
LEADING, FONT_SIZE, LEFT, TOP = 14, 11, 56, 786


def _escape(line: str) -> bytes:
    text = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return text.encode("latin-1", "replace")


def _content(lines: Sequence[str]) -> bytes:
    ops = [b"BT", f"/F1 {FONT_SIZE} Tf {LEADING} TL {LEFT} {TOP} Td".encode()]
    for line in lines:
        ops.append(b"(" + _escape(line) + b") Tj T*")
    ops.append(b"ET")
    return b"\n".join(ops)


def pdf_bytes(pages: Sequence[Sequence[str]]) -> bytes:
    """A PDF whose page *i* draws the lines ``pages[i]``."""
    objects: list[bytes] = []  # object n is objects[n - 1]
    n_pages = len(pages)
    page_ids = [4 + 2 * i for i in range(n_pages)]
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    kids = " ".join(f"{i} 0 R" for i in page_ids)
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n_pages} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    for page_id, lines in zip(page_ids, pages):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {page_id + 1} 0 R >>".encode())
        stream = _content(lines)
        objects.append(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def write_pdf(path: str | Path, pages: Sequence[Sequence[str]]) -> Path:
    """Write :func:`pdf_bytes` of ``pages`` to ``path``; returns the path."""
    path = Path(path)
    path.write_bytes(pdf_bytes(pages))
    return path
