"""The document benchmark: attaching a 300-page PDF, search at 100k document chunks, and
whether a question about one page brings that page back.

1. *Attach*: a generated PDF (:mod:`bench.pdf_writer`) of ``pages`` pages, each with a
   fact no other page has ("Ingrid from Bergen grows saffron crocus in a copper
   greenhouse"), is attached to a conversation on a real SQLite file through the session's
   own steps (``session.documents.prepare``, ``attach``), tokenized by the real model
   server, and indexed with the real MiniLM: each step's wall time.
2. *Recall*: the question about page ``page`` ("What does Ingrid from Bergen grow?") is
   searched and resurrected as the app does for a message; is page ``page`` back, live,
   and first?  The same for ``probes`` other pages (top-1 page of the search).
3. *Repaint while it indexes*: the heatmap (offscreen) streams synthetic answers over a
   10k-token chat, one token per frame as the app does (append, attention, one frame
   painted), first alone, then while another 300-page PDF is embedded on a thread with
   the app's share of the cores (:func:`~halo_weave.memory.embedder.share_cores`), its
   embedded batches stored on the painting thread between tokens (where the app's
   indexing queue stores them): each token's wall time on the painting thread, p50 and
   p95, both ways; with attention shaped like a real model's, and again with the
   pessimistic random attention of ``bench_ui``.  While that PDF is read, tokenized and
   saved (the window takes no message then), whole repaints of the view: p95 and the
   longest.
4. *Search at 100k*: the document's real entries plus entries spread like them (each a
   real vector plus noise from their covariance, as ``scripts/bench_index.py`` makes
   them) up to ``chunks`` document chunks, written through the index's upsert path; the
   median and p95 wall time of a search (query embedded beforehand: the search, not the
   model), with and without the BM25 half of the hybrid search, and whether page
   ``page``'s paragraph is still the first match among them.  The added entries' texts
   are made of common and made-up rare words (other documents: the question's names
   are in the almanac only).
"""

from __future__ import annotations

import gc
import queue
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from halo_weave.core.chat_template import build_framing, detect_template
from halo_weave.core.documents import source_of
from halo_weave.kobold_client import KoboldClient
from halo_weave.memory.embedder import Embedder
from halo_weave.semantic_index import EntryDraft, SemanticIndex
from halo_weave.session import ChatSession
from halo_weave.settings import Settings
from halo_weave.store import ConversationStore, new_conversation_path

from .index import realistic_vectors
from .pdf_writer import write_pdf

NAMES = ("Ingrid Anselm Beatrix Cosimo Dagny Emeric Fenna Gideon Halvard Imke Jorunn Kasimir "
         "Leocadia Matthias Nerys Oswin Philippa Quirin Rosalind Severin").split()
CITIES = ("Bergen Lisbon Tallinn Porto Kraków Ghent Aarhus Trieste Lyon Galway Uppsala Bruges "
          "Valletta Zadar Tromsø").split()
PLANTS = ("saffron crocus, black tomatoes, white asparagus, wasabi, vanilla orchids, quinces, "
          "blue potatoes, sea kale, chili peppers, hops, lavender, rhubarb").split(", ")
MATERIALS = "copper glass cedar bamboo stone brick".split()
FILLER = ("The almanac lists the tides of the week, the berths that are free and the ferries that "
          "run late. Readers are asked to report broken lamps on the quay to the harbour office.")


def fact(page: int) -> tuple[str, str]:
    """(the fact on ``page``, the question only it answers)."""
    name, city = NAMES[(page - 1) % len(NAMES)], CITIES[(page - 1) // len(NAMES) % len(CITIES)]
    plant = PLANTS[(page * 7) % len(PLANTS)]
    material = MATERIALS[page % len(MATERIALS)]
    return (f"{name} from {city} grows {plant} in a {material} greenhouse behind the harbour.",
            f"What does {name} from {city} grow?")


def almanac(pages: int) -> list[list[str]]:
    """The PDF's pages: a heading, filler and the page's fact, as lines."""
    out = []
    for page in range(1, pages + 1):
        words = FILLER.split()
        lines = [f"Harbour almanac, page {page}"] + [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
        out.append(lines + [fact(page)[0]])
    return out


class _Known:
    """An embedder that answers from vectors computed beforehand (the search is timed,
    not the model)."""

    def __init__(self, embedder: Embedder, texts: list[str]) -> None:
        self.name, self.dim, self.available = embedder.name, embedder.dim, True
        self.max_tokens = embedder.max_tokens
        self._vectors = dict(zip(texts, embedder.encode(texts)))

    def load(self) -> None:
        pass

    def encode(self, texts, batch_size: int = 32):
        return np.stack([self._vectors[t] for t in texts])


def _session(url: str, folder: Path, embedder: Embedder) -> ChatSession:
    client = KoboldClient(url)
    info = client.model_info()
    framing = build_framing(lambda t: client.tokenize(t, parse_special=True), detect_template(info.chat_template))
    settings = Settings.of(system_prompt="You are a helpful assistant.")
    session = ChatSession(settings)
    session.connect(client, info, framing)
    session.open(ConversationStore.open(new_conversation_path(folder)))
    session.prompt.apply(settings.chat.system_prompt, session.prompt.pieces(settings.chat.system_prompt))
    session.recall.use_index(SemanticIndex(session.store.conn, settings, embedder, lock=session.store.lock))
    return session


def _ask(session: ChatSession, question: str) -> list:
    """What a message asking ``question`` brings back and keeps (the app's steps)."""
    index = session.recall.index
    pieces = session.server.tokenize(question)
    recalled = session.recall.recall_for(index, index.search(question), len(pieces))
    kept = session.recall.keep_relevant(recalled, question)
    session.store.save_chunks(session.conv, recalled)
    return kept


def _page(conv, chunk_id: int) -> int | None:
    source = source_of(conv.chunk_text(chunk_id))
    return source.number if source else None


def attach_and_recall(url: str, folder: Path, embedder: Embedder, pages: int, page: int, probes: int) -> tuple[dict, dict]:
    """Steps 1 and 2; returns (figures, what step 3 needs)."""
    out: dict = {"pages": pages}
    pdf = write_pdf(folder / "almanac.pdf", almanac(pages))
    out["pdf_bytes"] = pdf.stat().st_size
    session = _session(url, folder, embedder)
    conv = session.conv
    reads: list[float] = []
    t0 = time.perf_counter()
    prepared = session.documents.prepare(pdf, lambda what, done, total: reads.append(time.perf_counter()))
    out["read_and_tokenize_s"] = round(time.perf_counter() - t0, 2)
    t = time.perf_counter()
    attached = session.documents.attach(prepared)
    out["attach_s"] = round(time.perf_counter() - t, 2)
    out["chunks"], out["tokens"] = len(attached.chunk_ids), attached.tokens
    index = session.recall.index
    t = time.perf_counter()
    drafts = []  # the app's three steps (prepare, embed, store), their vectors kept for step 3
    for start in range(0, len(attached.chunk_ids), 32):
        batch = index.embed(index.prepare(conv, attached.chunk_ids[start:start + 32]))
        index.store(batch)
        drafts += batch
    out["index_s"] = round(time.perf_counter() - t, 2)
    out["index_chunks_per_s"] = round(len(attached.chunk_ids) / max(out["index_s"], 1e-9), 1)

    kept = _ask(session, fact(page)[1])
    out[f"page_{page}_back"] = any(_page(conv, c.id) == page and c.live for c in kept)
    out[f"page_{page}_first"] = bool(kept) and _page(conv, kept[0].id) == page
    rng = np.random.default_rng(7)
    others = [int(p) for p in rng.choice(np.arange(1, pages + 1), probes, replace=False)]
    top = [session.recall.index.search(fact(p)[1]) for p in others]
    out[f"top1_page_of_{probes}_questions"] = round(
        float(np.mean([bool(m) and _page(conv, m[0].chunk_id) == p for m, p in zip(top, others)])), 3)

    ids = [d.chunk_id for d in drafts]
    target = next(c for c in ids if _page(conv, c) == page and fact(page)[0][:20] in conv.chunk_text(c))
    entries = {"ids": ids, "texts": [d.text for d in drafts], "target": target,
               "vectors": np.stack([d.vector for d in drafts])}
    session.close()
    return out, entries


def _chat(words: int = 10_000):
    """A chat of about ``words`` live tokens (one word each) for the heatmap to draw."""
    from halo_weave.conversation import Conversation

    rng = np.random.default_rng(3)
    conv = Conversation(Settings.of(max_context_tokens=0))
    vocab = FILLER.lower().replace(".", "").split()
    turn = 0
    while len(conv.table) < words:
        texts = [" " + w for w in rng.choice(vocab, int(rng.integers(60, 200)))]
        conv.add_turn("user" if turn % 2 == 0 else "assistant", list(range(len(texts))), texts)
        turn += 1
    return conv


def _stream(app, view, conv, rng, count: int, attention: str, between=None, stop=None) -> tuple[list[float], list[float]]:
    """Stream an answer of up to ``count`` tokens into ``view`` (a paragraph break every
    90), one frame per token as the app does; per token, the wall ms of its whole step on
    the painting thread (``between()`` first, the painting thread's other work, then
    append, attention, frame) and of the widget's share alone (the frame: text, colours,
    Qt's paint).  The answer is taken back out afterwards, so every call streams over
    the same context, as the app's pruning keeps it.  ``attention``: ``"model"`` (shaped
    like a real model's, ``bench.ui.realistic_attention``) or ``"random"`` (a quarter of
    all tokens above a fair share every step: the pessimistic case)."""
    from .ui import random_attention, realistic_attention

    step, widget = [], []
    saved = conv.snapshot()
    focus = rng.integers(0, conv.live_token_count(), 24)
    words = FILLER.split()
    conv.begin_turn("assistant")
    for i in range(count):
        if stop is not None and stop.is_set():
            break
        t = time.perf_counter()
        if between is not None:
            between()
        conv.append_token(int(i), "\n\n" if i % 90 == 89 else " " + words[i % len(words)])
        n = conv.live_token_count()
        if attention == "model":
            if i % 30 == 29:  # the answer moves on to another part of the context
                focus[:] = rng.integers(0, n, len(focus))
            conv.apply_attention(realistic_attention(rng, n, focus))
        else:
            conv.apply_attention(random_attention(rng, n))
        t1 = time.perf_counter()
        view.append_streamed()
        view.flush()
        app.processEvents()
        done = time.perf_counter()
        step.append((done - t) * 1000)
        widget.append((done - t1) * 1000)
    conv.end_turn()
    conv.restore(saved)
    view.rebuild()
    view.flush()
    app.processEvents()
    return step, widget


def _on_thread(work) -> tuple[threading.Thread, threading.Event]:
    """Start ``work()`` on a thread; the event is set when it ends, however it ends."""
    finished = threading.Event()

    def run() -> None:
        try:
            work()
        finally:
            finished.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, finished


def _while(app, view, conv, rng, work, attention: str, between=None) -> tuple[list[float], list[float], float]:
    """Stream 200-token answers while ``work()`` runs on a thread; (steps, widget
    shares, seconds the work took)."""
    t0 = time.perf_counter()
    thread, finished = _on_thread(work)
    steps: list[float] = []
    widget: list[float] = []
    while not finished.is_set():
        s, w = _stream(app, view, conv, rng, 200, attention, between, stop=finished)
        steps += s
        widget += w
    thread.join()
    return steps, widget, time.perf_counter() - t0


def _frames_while(app, view, work) -> tuple[list[float], float]:
    """Whole repaints of the view, one after another, while ``work()`` runs on a thread
    (what scrolling would cost then); each one's wall ms, and the seconds it took."""
    t0 = time.perf_counter()
    thread, finished = _on_thread(work)
    frames = []
    while not finished.is_set():
        t = time.perf_counter()
        view.viewport().repaint()
        app.processEvents()
        frames.append((time.perf_counter() - t) * 1000)
        time.sleep(0.004)
    thread.join()
    return frames, time.perf_counter() - t0


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2) if values else 0.0


def repaint_while_indexing(url: str, folder: Path, embedder: Embedder, pages: int, tokens: int = 300) -> dict:
    """Step 3 (see the module docstring)."""
    from PySide6.QtWidgets import QApplication

    from halo_weave.memory.embedder import share_cores
    from halo_weave.ui.heatmap import HeatmapView

    app = QApplication.instance() or QApplication([])
    conv = _chat()
    view = HeatmapView()
    view.resize(1100, 800)
    view.show()
    view.set_conversation(conv)
    view.flush()
    app.processEvents()
    rng = np.random.default_rng(5)
    out: dict = {}
    for attention, suffix in (("model", ""), ("random", "_random")):
        step, widget = _stream(app, view, conv, rng, tokens, attention)
        out[f"repaint_ms_p50_alone{suffix}"] = _pct(step, 50)
        out[f"repaint_ms_p95_alone{suffix}"] = _pct(step, 95)
        out[f"widget_ms_p95_alone{suffix}"] = _pct(widget, 95)

    for attention, suffix in (("model", ""), ("random", "_random")):
        sub = folder / f"second{suffix}"
        sub.mkdir()
        pdf = write_pdf(sub / "second.pdf", almanac(pages))
        session = _session(url, sub, embedder)
        index = session.recall.index
        attached = []
        # Reading, tokenizing and saving: the window takes no message meanwhile (the app
        # says it is busy attaching), so what matters is that it still repaints.
        frames, _ = _frames_while(app, view, lambda: attached.append(
            session.documents.attach(session.documents.prepare(pdf))))
        if not suffix:
            out["frame_ms_p95_while_reading"] = _pct(frames, 95)
            out["frame_ms_max_while_reading"] = _pct(frames, 100)
        ids = attached[0].chunk_ids
        ready: queue.Queue = queue.Queue()

        def work() -> None:
            share_cores(background=True)  # as the app's embedder thread does for indexing
            for start in range(0, len(ids), 8):  # the app's batch size
                ready.put(index.embed(index.prepare(session.conv, ids[start:start + 8])))

        def store_ready() -> None:
            while not ready.empty():
                index.store(ready.get())

        step, widget, seconds = _while(app, view, conv, rng, work, attention, store_ready)
        store_ready()
        out[f"repaint_ms_p50_while_indexing{suffix}"] = _pct(step, 50)
        out[f"repaint_ms_p95_while_indexing{suffix}"] = _pct(step, 95)
        out[f"repaint_ms_max_while_indexing{suffix}"] = _pct(step, 100)
        out[f"widget_ms_p95_while_indexing{suffix}"] = _pct(widget, 95)
        out[f"tokens_while_indexing{suffix}"] = len(step)
        out[f"index_in_background_s{suffix}"] = round(seconds, 1)
        session.close()
    view.close()
    return out


def _other_text(rng, vocabulary: np.ndarray) -> str:
    """A paragraph of another document: 40-90 words, most of them rare."""
    return " ".join(rng.choice(vocabulary, int(rng.integers(40, 90)))).capitalize() + "."


def _vocabulary(rng, size: int = 30_000) -> np.ndarray:
    """Common words and ``size`` made-up rare ones (100k paragraphs of many documents
    share few names: a question's distinctive words match few of them)."""
    syllables = "ka ri mo te lu sa ve no dri pa fen gor tul wes bri xan del um or ith".split()
    picks = rng.integers(0, len(syllables), (size, 4))
    lengths = rng.integers(2, 5, size)
    rare = {"".join(syllables[j] for j in row[:n]) for row, n in zip(picks.tolist(), lengths.tolist())}
    return np.array(sorted(rare) + FILLER.lower().replace(".", "").replace(",", "").split() * 40)


def search_at(n: int, entries: dict, embedder: Embedder, page: int, folder: Path, repeat: int = 40) -> dict:
    """Step 4: search latency among ``n`` document chunks, and page ``page`` still first."""
    rng = np.random.default_rng(11)
    ids, texts, vectors = entries["ids"], entries["texts"], entries["vectors"]
    question = fact(page)[1]
    known = _Known(embedder, [question])
    vocabulary = _vocabulary(rng)
    with ConversationStore.open(folder / "search.halo.db") as store:
        index = SemanticIndex(store.conn, Settings(), known, lock=store.lock)
        index.store([EntryDraft(c, 1, i, "document", t, 150, [], "0:0", v)
                     for i, (c, t, v) in enumerate(zip(ids, texts, vectors))])
        extra = realistic_vectors(vectors, n - len(ids), rng)
        first = max(ids) + 1
        for start in range(0, len(extra), 5000):
            block = extra[start:start + 5000]
            index.store([EntryDraft(first + start + i, 2 + (start + i) // 1000, (start + i) % 1000, "document",
                                    _other_text(rng, vocabulary), 150, [], "0:0", v)
                         for i, v in enumerate(block)])
    out: dict = {}
    for hybrid in (True, False):
        with ConversationStore.open(folder / "search.halo.db") as store:
            index = SemanticIndex(store.conn, Settings.of(hybrid_search=hybrid), known, lock=store.lock)
            index.load()
            index.search(question)
            wall = []
            for _ in range(repeat):
                t = time.perf_counter()
                found = index.search(question)
                wall.append(time.perf_counter() - t)
        name = "" if hybrid else "_vectors_only"
        out[f"search_ms_median_{n}{name}"] = round(float(np.median(wall)) * 1000, 2)
        out[f"search_ms_p95_{n}{name}"] = round(float(np.percentile(wall, 95)) * 1000, 2)
        out[f"page_{page}_first_among_{n}{name}"] = bool(found) and found[0].chunk_id == entries["target"]
        out[f"entries_{n}"] = index.entry_count
    return out


def run(url: str | None = None, pages: int = 300, chunks: int = 100_000, page: int = 200, probes: int = 20) -> dict:
    """Every step; starts the bundled server when no ``url`` is given."""
    embedder = Embedder()
    embedder.load()
    gc.collect()  # the app freezes once its memory has loaded (ui/control/memory.py), its young
    # generations kept tidy by the window-thread collector (ui/control/collector.py)
    gc.freeze()
    process = None
    if url is None:
        from halo_weave.server.launcher import start_server

        process = start_server(port=0)
        process.wait_ready(timeout=600)
        url = process.url
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            figures, entries = attach_and_recall(url, folder, embedder, pages, page, probes)
            figures.update(repaint_while_indexing(url, folder, embedder, pages))
            figures.update(search_at(chunks, entries, embedder, page, folder))
    finally:
        if process is not None:
            process.stop()
    return figures


def main(argv=None) -> int:
    """The command line (``scripts/bench_documents.py``): figures as a table, or with
    ``--json`` one JSON object last."""
    import argparse
    import json
    import os

    parser = argparse.ArgumentParser(description="Documents in the memory: a 300-page PDF attached, "
                                                 "search at 100k document chunks, a page asked about")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--server-url", default=None, help="a running model server (default: start the bundled one)")
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--chunks", type=int, default=100_000, help="document chunks in the search index")
    parser.add_argument("--page", type=int, default=200, help="the page asked about")
    parser.add_argument("--probes", type=int, default=20, help="other pages asked about (top-1 rate)")
    args = parser.parse_args(argv)
    figures = run(args.server_url, args.pages, args.chunks, args.page, args.probes)
    figures["machine"] = f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>36}: {value}")
    return 0
