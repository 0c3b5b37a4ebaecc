"""Documents in the memory: a text, Markdown, code or PDF file attached to a conversation
becomes a ``document`` turn whose paragraphs are chunks labelled with the file's name and
page, in the graveyard from the start (or live when asked and it fits), indexed like
messages, recalled in place by a later message, kept by the file and by an export.  A file
that cannot be read is refused with its reason and the conversation stays as it was.

The real server with the bundled model tokenizes, the real MiniLM embeds and searches, in
a real SQLite file; PDFs are written by the benchmark's tiny PDF writer (real PDF files
that pypdf reads), an encrypted one by pypdf itself.
"""

from __future__ import annotations

import pytest

from bench.pdf_writer import pdf_bytes, write_pdf
from halo_weave.core.chat_template import build_framing, detect_template
from halo_weave.core.documents import PARAGRAPH_CHARS, source_of
from halo_weave.errors import DocumentError
from halo_weave.kobold_client import KoboldClient
from halo_weave.memory.embedder import Embedder
from halo_weave.semantic_index import SemanticIndex
from halo_weave.session import ChatSession
from halo_weave.settings import Settings
from halo_weave.storage.document_files import MAX_DOCUMENT_BYTES, read_document
from halo_weave.exchange.transfer import export_conversation, import_conversation
from halo_weave.store import ConversationStore, new_conversation_path

#: One fact per page of the test PDF, and a question only that page answers.
PAGES = {
    3: ("The lighthouse keeper on Skerra island is Ingrid Holm; she paints the lamp room blue every spring.",
        "Who keeps the lighthouse on Skerra island?"),
    7: ("The bakery on Mill Lane sells rye bread with caraway seeds, baked in a wood oven at dawn.",
        "What bread does the bakery on Mill Lane sell?"),
    11: ("Our rowing club meets on Thursdays at the north pier; the boats are stored in the red shed.",
         "When does the rowing club meet?"),
}
FILLER = ("This page of the harbour almanac lists tides, berth numbers and the weather of the week. "
          "Nothing here is out of the ordinary for the season.")


def almanac_pages(count: int = 12) -> list[list[str]]:
    pages = []
    for number in range(1, count + 1):
        fact = PAGES.get(number, (f"Page {number} notes that berth {number * 3} was repainted.", ""))[0]
        pages.append([f"Harbour almanac, page {number}.", FILLER, fact])
    return pages


# ---------------------------------------------------------------- reading files (no server)


def test_attach_reads_text_markdown_code_and_pdf_as_labelled_paragraphs(tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# Garden\n\nTomatoes need sun.\n\n\n## Shed\n\nThe key is under the pot.\n")
    code = tmp_path / "tool.py"
    code.write_text("def add(a, b):\n    return a + b\n\n" + "x = 1\n" * 200)
    pdf = write_pdf(tmp_path / "almanac.pdf", almanac_pages())

    md = read_document(notes)
    assert [p.labelled.splitlines()[0] for p in md.paragraphs] == ["[notes.md, line 1]"]
    assert "The key is under the pot." in md.paragraphs[0].text, "short paragraphs share a chunk"
    assert all(len(p.text) <= PARAGRAPH_CHARS for p in read_document(code).paragraphs)
    assert read_document(code).paragraphs[1].source.number > 3, "a later chunk names the line it starts on"

    almanac = read_document(pdf)
    assert almanac.kind == "pdf" and almanac.pages == 12
    page7 = [p for p in almanac.paragraphs if p.source.number == 7]
    assert page7 and PAGES[7][0].split(";")[0][:40] in page7[0].text.replace("\n", " ")
    assert source_of(page7[0].labelled).short() == "almanac.pdf · p. 7"
    assert page7[0].labelled.endswith("\n\n"), "a blank line parts it from the next paragraph"


@pytest.mark.parametrize("name, content, reason", [
    ("picture.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "binary"),
    ("letter.txt", "Grüße aus Köln".encode("latin-1"), "not UTF-8"),
    ("empty.md", b"\n  \n", "empty"),
    ("broken.pdf", pdf_bytes(almanac_pages(2))[:300], "cannot be read as a PDF"),
])
def test_an_unreadable_attachment_is_refused_with_its_reason(tmp_path, name, content, reason):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DocumentError, match=reason) as refused:
        read_document(path)
    assert name in str(refused.value)


def test_an_encrypted_or_oversized_attachment_is_refused(tmp_path):
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(write_pdf(tmp_path / "plain.pdf", almanac_pages(2))))
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    locked = tmp_path / "locked.pdf"
    with open(locked, "wb") as f:
        writer.write(f)
    with pytest.raises(DocumentError, match="encrypted"):
        read_document(locked)
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(DocumentError, match="limit"):
        read_document(huge)
    scanned = write_pdf(tmp_path / "scan.pdf", [[], []])
    with pytest.raises(DocumentError, match="no text layer"):
        read_document(scanned)


def test_a_document_turn_is_framed_as_a_user_turn_and_its_paragraphs_leave_and_return_alone():
    from halo_weave.conversation import Conversation, Framing

    framing = Framing(prefix={"user": ([1], ["<u>"]), "assistant": ([2], ["<a>"]), "system": ([], [])},
                      suffix={"user": ([3], ["</u>"]), "assistant": ([4], ["</a>"]), "system": ([], [])})
    conv = Conversation(framing=framing)
    conv.add_turn("user", [10, 11], ["Hi", "!"])
    conv.add_turn("assistant", [12], ["Hello"])
    paragraphs = [([20 + i, 30 + i], [f"[a.pdf, page {i + 1}]\n", f"text {i}"]) for i in range(3)]
    turn = conv.add_document(paragraphs)
    assert "".join(conv.held.texts(conv.turns[turn.turn_id].chunk_ids[0])) == "<u>", "framed as a user turn"
    assert [conv.chunk_text(c.id) for c in conv.content_chunks(turn.turn_id)] == \
        [f"[a.pdf, page {i + 1}]\ntext {i}" for i in range(3)], "one chunk per paragraph, however short"
    pruned = conv.prune_turn(turn.turn_id)
    assert len(pruned) == 5 and conv.live_token_count() == 7, "paragraphs and framing leave; the chat stays"
    middle = conv.content_chunks(turn.turn_id)[1]
    back = conv.resurrect([middle.id])
    assert {c.id for c in back if not c.framing} == {middle.id}, "no anchor comes with a document paragraph"
    assert conv.live_input_ids().tolist()[-4:] == [1, 21, 31, 3]


# ---------------------------------------------------------------- in a conversation


@pytest.fixture(scope="module")
def client(server):
    with KoboldClient(server.url) as c:
        yield c


@pytest.fixture(scope="module")
def embedder():
    emb = Embedder()
    emb.load()
    return emb


class _Indexer:
    """The session's indexer, run inline (the app's runs on its embedder thread)."""

    def __init__(self, index):
        self.index = index

    def queue_pending(self, conv):
        self.index.index_pending(conv)

    def queue(self, conv, chunk_ids, label=""):
        self.index.index_pending(conv)


@pytest.fixture
def chat(client, embedder, tmp_path):
    """A session on a real file with one exchange said; (session, path)."""
    settings = Settings.of(max_context_tokens=0, system_prompt="You are a helpful assistant.")
    info = client.model_info()
    framing = build_framing(lambda t: client.tokenize(t, parse_special=True), detect_template(info.chat_template))
    session = ChatSession(settings)
    session.connect(client, info, framing)
    path = new_conversation_path(tmp_path)
    session.open(ConversationStore.open(path))
    session.prompt.apply(settings.chat.system_prompt, session.prompt.pieces(settings.chat.system_prompt))
    index = SemanticIndex(session.store.conn, settings, embedder, lock=session.store.lock)
    session.indexer = _Indexer(index)
    session.recall.use_index(index)
    say(session, "I am reading the harbour almanac this week.", "Enjoy the almanac.")
    yield session, path
    if session.store is not None:
        session.store.close()


def say(session, question: str, answer: str) -> None:
    pieces = session.server.tokenize(question)
    session.add_user_message([i for i, _ in pieces], [t for _, t in pieces])
    session.begin_answer()
    for token_id, piece in session.server.tokenize(answer):
        session.conv.append_token(token_id, piece)
    session.finish_turn("stop", prune=False)


def attach(session, path, *, live=False):
    attached = session.documents.attach(session.documents.prepare(path), live=live)
    session.documents.index(attached)
    return attached


def ask(session, question: str) -> list:
    """What the search for ``question`` brings back, as the app does before saving it."""
    pieces = session.server.tokenize(question)
    matches = session.recall.index.search(question)
    recalled = session.recall.recall_for(session.recall.index, matches, len(pieces))
    kept = session.recall.keep_relevant(recalled, question)
    session.add_user_message([i for i, _ in pieces], [t for _, t in pieces], recalled=kept)
    return kept


@pytest.mark.slow
def test_an_attached_pdf_waits_in_the_graveyard_and_a_question_recalls_its_page_in_place(chat, tmp_path):
    session, path = chat
    conv = session.conv
    live_before = conv.live_token_count()
    attached = attach(session, write_pdf(tmp_path / "almanac.pdf", almanac_pages()))

    assert not attached.live and attached.pages == 12
    assert conv.live_token_count() == live_before, "the document is in the memory, not the context"
    graves = [c for c in conv.graveyard() if c.role == "document"]
    assert len(graves) == len(attached.chunk_ids)
    labels = {source_of(conv.chunk_text(c.id)).short() for c in graves}
    assert {"almanac.pdf · p. 1", "almanac.pdf · p. 7", "almanac.pdf · p. 12"} <= labels

    kept = ask(session, PAGES[7][1])
    assert kept and source_of(conv.chunk_text(kept[0].id)).short() == "almanac.pdf · p. 7"
    session.begin_answer()
    request = session.backend.detokenize(session.generation_request()["input_ids"])
    assert "[almanac.pdf, page 7]" in request and "rye bread with caraway" in request
    assert request.index("[almanac.pdf, page 7]") < request.index(PAGES[7][1]), \
        "the page comes back at its place: after the exchange before it, before the question"
    assert "[almanac.pdf, page 3]" not in request, "other pages stay in the graveyard"


@pytest.mark.slow
def test_a_document_survives_reopening_and_an_export_round_trip(chat, tmp_path):
    session, path = chat
    attached = attach(session, write_pdf(tmp_path / "almanac.pdf", almanac_pages()))
    texts = {c: session.conv.chunk_text(c) for c in attached.chunk_ids}
    out = tmp_path / "export.json"
    export_conversation(session.store, out)
    session.store.close()
    session.store = None

    with ConversationStore.open(path, create=False) as store:
        conv = store.load(session.settings, session.framing)
        assert conv.turns[attached.turn.turn_id].role == "document"
        assert {c: conv.chunk_text(c) for c in attached.chunk_ids} == texts
        assert not any(conv.chunks[c].live for c in attached.chunk_ids)

    assert "[almanac.pdf, page 11]" in out.read_text()
    imported = import_conversation(out, tmp_path / "imported")
    with ConversationStore.open(imported, create=False) as store:
        conv = store.load(session.settings, session.framing)
        documents = [t for t in conv.turns if conv.turns[t].role == "document"]
        assert len(documents) == 1
        again = [conv.chunk_text(c.id) for c in conv.content_chunks(documents[0])]
        assert sorted(again) == sorted(texts.values())
        assert all(not c.live for c in conv.content_chunks(documents[0]))


@pytest.mark.slow
def test_a_short_document_attached_live_is_read_with_the_next_message(chat, tmp_path):
    session, _ = chat
    notes = tmp_path / "shed.md"
    notes.write_text("# The shed\n\nThe spare key hangs behind the blue watering can.\n")
    attached = attach(session, notes, live=True)
    assert attached.live and all(session.conv.chunks[c].live for c in attached.chunk_ids)
    say(session, "Where is the spare key?", "Behind the watering can.")
    session.begin_answer()
    request = session.backend.detokenize(session.generation_request()["input_ids"])
    assert "[shed.md, line 1]" in request and "blue watering can" in request


@pytest.mark.slow
def test_a_document_too_long_for_the_context_goes_to_the_memory_and_says_so(chat, tmp_path):
    session, _ = chat
    session.use_settings(session.settings.replace(max_context_tokens=400))
    attached = attach(session, write_pdf(tmp_path / "almanac.pdf", almanac_pages()), live=True)
    assert not attached.live and attached.too_big_for_live
    assert "too long to keep live" in attached.summary()


@pytest.mark.slow
def test_an_unreadable_attachment_leaves_the_conversation_and_its_file_untouched(chat, tmp_path):
    session, path = chat
    before = [(t, session.conv.turns[t].role) for t in session.conv.turns]
    graveyard = len(session.conv.graveyard())
    rows = session.store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    binary = tmp_path / "photo.jpg"
    binary.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(256))
    with pytest.raises(DocumentError, match="photo.jpg is a binary file"):
        session.documents.prepare(binary)
    assert [(t, session.conv.turns[t].role) for t in session.conv.turns] == before
    assert len(session.conv.graveyard()) == graveyard
    assert session.store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == rows
    say(session, "Still there?", "Yes.")  # the conversation goes on

