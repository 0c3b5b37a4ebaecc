"""The embedder's vectors are sentence-transformers' own for the bundled MiniLM folder.

Indexes saved by earlier versions hold vectors sentence-transformers computed; the app now
applies the folder's modules itself (it loads seconds sooner), and a search must still
find what it found before.
"""

from __future__ import annotations

import numpy as np
import pytest

from halo_weave.memory.embedder import Embedder, bundled_model_path

pytestmark = pytest.mark.slow

TEXTS = ["  The lighthouse keeper wrote letters on calm nights.  ", "", "a",
         "My sister Ana opened a bakery near the river in Lisbon. " * 40,  # past the 256 word-pieces
         "By the way, what did you say about the support group you went to?", "\nÜnïcödé — dashes…\t"]


def test_vectors_equal_sentence_transformers_reading_the_same_folder():
    st = pytest.importorskip("sentence_transformers")
    if bundled_model_path() is None:
        pytest.skip("the bundled MiniLM is not installed")
    embedder = Embedder(device="cpu")
    mine = embedder.encode(TEXTS, batch_size=4)
    reference = st.SentenceTransformer(str(bundled_model_path()), device="cpu", local_files_only=True)
    want = reference.encode(TEXTS, batch_size=4, normalize_embeddings=True, convert_to_numpy=True,
                            show_progress_bar=False)
    assert mine.shape == want.shape == (len(TEXTS), embedder.dim)
    np.testing.assert_allclose(mine, want, atol=1e-5)
    assert embedder.max_tokens == reference.max_seq_length


def test_the_bundled_model_loads_without_importing_transformers():
    """The first message after a start waits for the memory: the bundled MiniLM runs on the
    app's own BERT encoder, so loading it imports torch and the tokenizer, not transformers'
    model machinery (seconds on a slow CPU)."""
    import subprocess
    import sys

    if bundled_model_path() is None:
        pytest.skip("the bundled MiniLM is not installed")
    code = ("import sys\n"
            "from halo_weave.memory.embedder import Embedder\n"
            "e = Embedder(device='cpu'); e.load(); e.encode(['hello there']); e.count(['hello'])\n"
            "e.truncate('hello ' * 400, 10); e.pieces('hello there')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('transformers', 'sentence_transformers')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_word_pieces_join_back_to_the_text():
    embedder = Embedder(device="cpu")
    text = "  Ünïcödé café — the bakery's 3rd oven!\n\nNew line"
    ids, pieces = embedder.pieces(text)
    assert "".join(pieces) == text and len(ids) == len(pieces) == embedder.count([text])[0]
