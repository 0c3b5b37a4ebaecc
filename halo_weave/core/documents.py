"""An attached document as paragraphs: where each comes from, and the label it carries.

A document joins the conversation as one turn of the role ``document`` (framed as a user
turn: chat templates have no document role), placed where it was attached.  Each of its
chunks is one paragraph, or a few short ones, of one page (a PDF) or of consecutive lines
(a text file), never more than :data:`PARAGRAPH_CHARS` characters, so that a paragraph fits
the embedder's 256 word pieces with its label.  The label opens the chunk's own text::

    [report.pdf, page 200]
    The harbour master's logbook for March lists …
    (a blank line)

so the model reads a recalled paragraph as an excerpt of a named file and page, the
index finds it by its file's name too, and the label travels wherever the text does (the
file, an export, a branch) with nothing stored beside it.  :func:`source_of` reads it back
for the window.  Qt-free, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator

#: The most characters of text in one paragraph chunk (its label not counted).
PARAGRAPH_CHARS = 700

_LABEL = re.compile(r"\A\[(?P<name>[^\n]+), (?P<unit>page|line) (?P<number>\d+)\]\n")
_BLANK_LINE = re.compile(r"\n[ \t\f\v]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


@dataclass(frozen=True)
class Source:
    """Where a paragraph of a document comes from: its file's name and page (a PDF) or
    first line (a text file)."""

    name: str
    unit: str  # "page" or "line"
    number: int

    def label(self) -> str:
        """The first line of the paragraph's text: ``[report.pdf, page 200]``."""
        return f"[{self.name}, {self.unit} {self.number}]\n"

    def short(self) -> str:
        """``report.pdf · p. 200`` / ``notes.md · line 40`` (the window's captions)."""
        where = f"p. {self.number}" if self.unit == "page" else f"line {self.number}"
        return f"{self.name} · {where}"


@dataclass(frozen=True)
class Paragraph:
    """One chunk-to-be of a document: its source and its text (without the label)."""

    source: Source
    text: str

    @property
    def labelled(self) -> str:
        """The chunk's whole text: the label, the paragraph and the blank line that parts
        it from the next (as a message's paragraphs are parted)."""
        return self.source.label() + self.text + "\n\n"


def source_of(text: str) -> Source | None:
    """The source named by the label a document chunk's text starts with (None: none)."""
    found = _LABEL.match(text)
    if found is None:
        return None
    return Source(found["name"], found["unit"], int(found["number"]))


def safe_name(name: str) -> str:
    """A file's name as a label may show it: one line, no brackets, at most 80 characters."""
    name = " ".join(name.replace("[", "(").replace("]", ")").split())
    return name if len(name) <= 80 else name[:79] + "…"


def page_paragraphs(name: str, pages: Iterable[str]) -> list[Paragraph]:
    """The paragraphs of a paged document (a PDF's pages' text, page 1 first)."""
    name = safe_name(name)
    out: list[Paragraph] = []
    for number, text in enumerate(pages, start=1):
        text = "\n".join(" ".join(line.split()) for line in text.splitlines())
        out += [Paragraph(Source(name, "page", number), piece) for _, piece in _pieces(text)]
    return out


def text_paragraphs(name: str, text: str) -> list[Paragraph]:
    """The paragraphs of a text file (prose, Markdown, code), each labelled with the line
    it starts on."""
    name = safe_name(name)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [Paragraph(Source(name, "line", line), piece) for line, piece in _pieces(text)]


def _pieces(text: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each paragraph chunk of ``text``: blank-line paragraphs,
    a long one cut at sentence ends (else at spaces, else anywhere), short neighbours
    merged up to :data:`PARAGRAPH_CHARS`."""
    held: list[str] = []
    held_line = 0
    for line, paragraph in _paragraphs(text):
        for part in _cut(paragraph):
            if held and sum(map(len, held)) + 2 + len(part) > PARAGRAPH_CHARS:
                yield held_line, "\n\n".join(held)
                held = []
            if not held:
                held_line = line
            held.append(part)
    if held:
        yield held_line, "\n\n".join(held)


def _paragraphs(text: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each non-blank paragraph, lines numbered from 1."""
    at = 0
    for found in [*_BLANK_LINE.finditer(text), None]:
        end = found.start() if found else len(text)
        block = text[at:end]
        if block.strip():
            lead = len(block) - len(block.lstrip("\n"))
            yield text.count("\n", 0, at) + lead + 1, block.strip("\n").rstrip()
        if found:
            at = found.end()


def _cut(paragraph: str) -> list[str]:
    """``paragraph`` in parts of at most :data:`PARAGRAPH_CHARS` characters."""
    if len(paragraph) <= PARAGRAPH_CHARS:
        return [paragraph]
    parts, current = [], ""
    for sentence in _SENTENCE_END.split(paragraph):
        while len(sentence) > PARAGRAPH_CHARS:  # no sentence end in reach: a space, else anywhere
            cut = sentence.rfind(" ", 0, PARAGRAPH_CHARS)
            cut = cut if cut > PARAGRAPH_CHARS // 2 else PARAGRAPH_CHARS
            if current:
                parts.append(current)
                current = ""
            parts.append(sentence[:cut].rstrip())
            sentence = sentence[cut:].lstrip()
        if current and len(current) + 1 + len(sentence) > PARAGRAPH_CHARS:
            parts.append(current)
            current = ""
        current = f"{current} {sentence}" if current else sentence
    if current:
        parts.append(current)
    return [p for p in parts if p.strip()]
