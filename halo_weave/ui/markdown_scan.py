"""Markdown in the heatmap, as styles over the text rather than a new text.

Qt-free.  The heatmap's document holds every token's characters at exact positions, so
Markdown is *rendered in place*: :func:`scan_line` reads one line of a message and says
which character ranges take which style (``bold``, ``h2``, ``code``, ``link`` …), which
characters the rendering hides (the ``**``, the backticks, the ``#``), and which rendered
span each hidden range marks, so the view can give that span the brightness of the
tokens it hides.  Nothing is inserted or removed, so token positions never move.

What is read: ATX headings, emphasis (``*``/``_``, single, double, triple; GFM ``~~``),
inline code, links (``[text](url)``, ``<url>`` and bare ``http(s)://`` addresses), block
quotes, bullet and numbered list items, thematic breaks, GFM tables (monospace, header
row bold, columns lined up by :mod:`.markdown_table`) and fenced code blocks (``` and ~~~, with the language's syntax colours from
Pygments, :func:`code_styles`).  Emphasis follows CommonMark's delimiter-run rules
(left/right flanking, ``_`` not inside words) without its rarer corner cases; setext
headings, reference links, HTML and nested block structures are shown as typed.

A line's *state* carries what the next line needs: inside a fence (and its language),
after a table row, or nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

#: Line states (the state *after* a line): prose, a closing fence, a table row; a line
#: inside a fenced code block has ``CODE_BASE + fence id`` (:func:`fence_of`).
NORMAL = 0
CLOSE = 2
TABLE = 3
CODE_BASE = 16

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$")
_HEADING = re.compile(r"^( {0,3})(#{1,6})(?:[ \t]+|$)")
_HEADING_CLOSE = re.compile(r"[ \t]+#+[ \t]*$")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_QUOTE = re.compile(r"^( {0,3})>[ \t]?")
_BULLET = re.compile(r"^([ \t]*)([-*+])([ \t]+)(?=\S)")
_ORDERED = re.compile(r"^([ \t]*)(\d{1,9}[.)])([ \t]+)(?=\S)")
_TABLE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)+\|?[ \t]*$|^[ \t]*\|[ \t]*:?-+:?[ \t]*\|[ \t]*$")
_LINK = re.compile(r"\[([^\[\]\n]*)\]\(([^()\s]*)(?:[ \t]+\"[^\"\n]*\")?\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto|ftp):[^<>\s]*)>")
_BARE_URL = re.compile(r"https?://[^\s<>()\[\]`]*[^\s<>()\[\]`.,;:!?'\"*_~]")
_DELIMS = re.compile(r"\*+|_+|~~+")
_BACKTICKS = re.compile(r"`+")
#: Characters without which a prose line has no Markdown (the view skips it fast).
MARKUP = re.compile(r"[*_`\[#>|~<]|https?:|^[ \t]*(?:[-+]|\d{1,9}[.)])[ \t]")


@dataclass
class LineMarkup:
    """What :func:`scan_line` read in one line (offsets into that line)."""

    kind: str = "text"  # text, heading, quote, item, rule, table, table_rule, fence_open, fence_close, code
    state: int = NORMAL
    #: (start, end, style) ranges; they may nest (a link inside a heading).
    styles: list[tuple[int, int, str]] = field(default_factory=list)
    #: Ranges the rendering hides.
    hidden: list[tuple[int, int]] = field(default_factory=list)
    #: (hidden ranges, span start, span end): the rendered span each group of hidden
    #: characters marks (its tokens' brightness goes there).
    marks: list[tuple[tuple[tuple[int, int], ...], int, int]] = field(default_factory=list)
    #: (start, end, address) of each link's visible text.
    links: list[tuple[int, int, str]] = field(default_factory=list)
    #: Offset of a bullet item's marker (drawn as a bullet), or -1.
    bullet: int = -1
    #: The language named on an opening fence ("" when none).
    language: str = ""

    def hide(self, spans: tuple[tuple[int, int], ...], start: int, end: int) -> None:
        spans = tuple((a, b) for a, b in spans if b > a)
        self.hidden.extend(spans)
        if spans and end > start:
            self.marks.append((spans, start, end))


#: Fences seen so far: (fence characters, language); a line's state indexes this list.
_fences: list[tuple[str, str]] = []
_fence_ids: dict[tuple[str, str], int] = {}


def fence_state(fence: str, language: str) -> int:
    """The state of the lines inside a fence opened by ``fence`` with ``language``."""
    key = (fence, language.lower())
    if key not in _fence_ids:
        _fence_ids[key] = len(_fences)
        _fences.append(key)
    return CODE_BASE + _fence_ids[key]


def fence_of(state: int) -> tuple[str, str] | None:
    """(fence characters, language) of a state inside a code block, else None."""
    if state < CODE_BASE or state - CODE_BASE >= len(_fences):
        return None
    return _fences[state - CODE_BASE]


def in_code(state: int) -> bool:
    return state >= CODE_BASE


def state_after(text: str, previous: int) -> int:
    """The state :func:`scan_line` would leave after ``text``, read quickly (fences and
    tables only).  Cut paragraphs are not joined here: a fence or table row is never cut."""
    fence = fence_of(previous)
    if fence is not None:
        stripped = text.strip()
        ticks = fence[0]
        if stripped.startswith(ticks) and set(stripped) == {ticks[0]} and len(text) - len(text.lstrip()) <= 3:
            return CLOSE
        return previous
    if "`" in text or "~" in text:
        opened = _FENCE.match(text)
        if opened:
            return fence_state(opened.group(2)[0] * 3, opened.group(3))
    if "|" in text and (previous == TABLE or text.lstrip().startswith("|")):
        return TABLE
    return NORMAL


@lru_cache(maxsize=8192)
def scan_line(text: str, previous: int, colours: bool = True) -> LineMarkup:
    """Read one line of a message, given the state the previous line left.
    ``colours``: False leaves a code line's syntax colours out (monospace only).
    The result is shared (lines are read again at every rebuild): do not change it."""
    fence = fence_of(previous)
    if fence is not None:
        return _code_line(text, previous, fence, colours)
    opened = _FENCE.match(text)
    if opened:
        indent, ticks, language = opened.group(1), opened.group(2), opened.group(3)
        out = LineMarkup("fence_open", fence_state(ticks[0] * 3, language), language=language)
        label = text.find(language, len(indent) + len(ticks)) if language else -1
        if label >= 0:
            out.hide(((0, label),), label, label + len(language))
            out.hidden.append((label + len(language), len(text)))
            out.styles.append((label, label + len(language), "label"))
        else:
            out.hidden.append((0, len(text)))
        return out
    if _RULE.match(text) and not (previous == TABLE and "|" in text):
        out = LineMarkup("rule")
        out.hidden.append((0, len(text)))
        return out
    if previous == TABLE or text.lstrip().startswith("|"):
        if "|" in text:
            return _table_line(text, previous)
    out = LineMarkup()
    start = 0
    heading = _HEADING.match(text)
    if heading:
        level = len(heading.group(2))
        out.kind = "heading"
        end = len(text)
        closing = _HEADING_CLOSE.search(text, heading.end())
        hidden = [(0, heading.end())]
        if closing:
            hidden.append((closing.start(), end))
            end = closing.start()
        out.hide(tuple(hidden), heading.end(), end)
        out.styles.append((heading.end(), end, f"h{level}"))
        _inline(text, heading.end(), end, out)
        return out
    quote = _QUOTE.match(text)
    if quote:
        out.kind = "quote"
        out.hide(((0, quote.end()),), quote.end(), len(text))
        out.styles.append((quote.end(), len(text), "quote"))
        start = quote.end()
    item = _BULLET.match(text, start) or _ORDERED.match(text, start)
    if item:
        out.kind = "item" if not quote else out.kind
        if item.re is _BULLET:
            out.bullet = item.start(2)
        else:
            out.styles.append((item.start(2), item.end(2), "number"))
        start = item.end()
    _inline(text, start, len(text), out)
    return out


def _code_line(text: str, state: int, fence: tuple[str, str], colours: bool = True) -> LineMarkup:
    ticks, language = fence
    stripped = text.strip()
    if stripped.startswith(ticks) and set(stripped) == {ticks[0]} and len(text) - len(text.lstrip()) <= 3:
        out = LineMarkup("fence_close", CLOSE)
        out.hidden.append((0, len(text)))
        return out
    out = LineMarkup("code", state, language=language)
    out.styles.append((0, len(text), "code"))
    if colours:
        out.styles += code_styles(language, text)
    return out


def _table_line(text: str, previous: int) -> LineMarkup:
    out = LineMarkup("table", TABLE)
    out.styles.append((0, len(text), "table"))
    if _TABLE_RULE.match(text):
        out.kind = "table_rule"
        out.styles.append((0, len(text), "dim"))
        return out
    if previous != TABLE:
        out.styles.append((0, len(text), "bold"))
    for match in re.finditer(r"\|", text):
        out.styles.append((match.start(), match.end(), "dim"))
    _inline(text, 0, len(text), out)
    return out


# ---------------------------------------------------------------------- inline
def _inline(text: str, start: int, end: int, out: LineMarkup) -> None:
    """Code spans, links and emphasis in ``text[start:end]``."""
    if start >= end:
        return
    taken: list[tuple[int, int]] = []  # code spans and link addresses: no emphasis inside
    position = start
    while True:
        run = _BACKTICKS.search(text, position, end)
        if run is None:
            break
        closing = _BACKTICKS.search(text, run.end(), end)
        while closing is not None and len(closing.group()) != len(run.group()):
            closing = _BACKTICKS.search(text, closing.end(), end)
        if closing is None:
            position = run.end()
            continue
        out.hide(((run.start(), run.end()), (closing.start(), closing.end())), run.end(), closing.start())
        out.styles.append((run.end(), closing.start(), "code"))
        taken.append((run.start(), closing.end()))
        position = closing.end()

    def free(a: int, b: int) -> bool:
        return all(b <= s or a >= e for s, e in taken)

    for match in _AUTOLINK.finditer(text, start, end):
        if free(match.start(), match.end()):
            out.hide(((match.start(), match.start() + 1), (match.end() - 1, match.end())),
                     match.start() + 1, match.end() - 1)
            out.styles.append((match.start() + 1, match.end() - 1, "link"))
            out.links.append((match.start() + 1, match.end() - 1, match.group(1)))
            taken.append((match.start(), match.end()))
    for match in _LINK.finditer(text, start, end):
        if free(match.start(), match.end()):
            label_start, label_end = match.start(1), match.end(1)
            out.hide(((match.start(), label_start), (label_end, match.end())), label_start, label_end)
            out.styles.append((label_start, label_end, "link"))
            out.links.append((label_start, label_end, match.group(2)))
            taken.append((label_end, match.end()))
    for match in _BARE_URL.finditer(text, start, end):
        if free(match.start(), match.end()):
            out.styles.append((match.start(), match.end(), "link"))
            out.links.append((match.start(), match.end(), match.group()))
            taken.append((match.start(), match.end()))
    _emphasis(text, start, end, taken, out)


@dataclass
class _Run:
    char: str
    start: int
    end: int
    can_open: bool
    can_close: bool

    def use_end(self, count: int) -> None:
        """``count`` delimiters at the run's end open an emphasis: they leave the run."""
        self.end -= count

    def use_start(self, count: int) -> None:
        """``count`` delimiters at the run's start close an emphasis: they leave the run."""
        self.start += count


def _flanking(text: str, start: int, end: int) -> tuple[bool, bool]:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    left = not after.isspace() and (after not in punct or before.isspace() or before in punct)
    right = not before.isspace() and (before not in punct or after.isspace() or after in punct)
    if text[start] == "_":
        return left and (not right or before in punct), right and (not left or after in punct)
    return left, right


def _emphasis(text: str, start: int, end: int, taken: list[tuple[int, int]], out: LineMarkup) -> None:
    runs: list[_Run] = []
    for match in _DELIMS.finditer(text, start, end):
        a, b = match.start(), match.end()
        if any(s < b and a < e for s, e in taken):
            continue
        if match.group()[0] == "~" and b - a != 2:
            continue
        opens, closes = _flanking(text, a, b)
        if opens or closes:
            runs.append(_Run(match.group()[0], a, b, opens, closes))
    stack: list[_Run] = []
    for run in runs:
        if run.can_close:
            while run.end > run.start:
                opener = next((o for o in reversed(stack) if o.char == run.char and o.end > o.start), None)
                if opener is None:
                    break
                if run.char == "~":
                    use = 2
                else:
                    use = 2 if (opener.end - opener.start >= 2 and run.end - run.start >= 2) else 1
                inner_start, inner_end = opener.end, run.start
                opener.use_end(use)
                run.use_start(use)
                style = "strike" if run.char == "~" else ("bold" if use == 2 else "italic")
                out.hide(((opener.end, opener.end + use), (run.start - use, run.start)), inner_start, inner_end)
                out.styles.append((inner_start, inner_end, style))
                # Openers between this one and the closer can no longer close anything.
                index = stack.index(opener)
                del stack[index + 1 :]
                if opener.end <= opener.start:
                    stack.pop(index)
        if run.can_open and run.end > run.start:
            stack.append(run)


# ---------------------------------------------------------------------- code
#: Pygments token types -> style names, most specific first.
_CODE_KINDS = (
    ("Comment", "c-comment"), ("Literal.String", "c-string"), ("Literal.Number", "c-number"),
    ("Keyword", "c-keyword"), ("Name.Builtin", "c-builtin"), ("Name.Function", "c-function"),
    ("Name.Class", "c-class"), ("Name.Decorator", "c-decorator"), ("Operator.Word", "c-keyword"),
    ("Name.Tag", "c-keyword"), ("Name.Attribute", "c-function"), ("Literal", "c-number"),
)


def lexer_ready(language: str) -> bool:
    """Whether ``language``'s lexer is loaded (the first costs tens of milliseconds:
    Pygments' import and the lexer's regular expressions)."""
    return language.lower() in _loaded


_loaded: set[str] = set()


@lru_cache(maxsize=64)
def _lexer(language: str):
    _loaded.add(language)
    if not language:
        return None
    try:
        from pygments.lexers import get_lexer_by_name
        from pygments.util import ClassNotFound
    except ImportError:  # pragma: no cover - pygments is a declared dependency
        return None
    try:
        return get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


def _kind(token_type) -> str | None:
    name = str(token_type)[len("Token."):]
    for prefix, style in _CODE_KINDS:
        if name == prefix or name.startswith(prefix + "."):
            return style
    return None


@lru_cache(maxsize=8192)
def _code_styles(language: str, line: str) -> tuple[tuple[int, int, str], ...]:
    lexer = _lexer(language)
    if lexer is None or not line.strip():
        return ()
    styles = []
    for index, token_type, value in lexer.get_tokens_unprocessed(line):
        style = _kind(token_type)
        if style is not None and value:
            styles.append((index, min(index + len(value), len(line)), style))
    return tuple(styles)


def code_styles(language: str, line: str) -> list[tuple[int, int, str]]:
    """Syntax colour styles (``c-keyword``, ``c-string`` …) of one line of code in
    ``language`` (a Pygments name or alias; none for an unknown one).  Each line is read
    on its own, so a string or comment spanning lines is coloured on its first only."""
    return list(_code_styles(language.lower(), line))
