"""Loading the embedder and counting a long text print nothing on stderr (no progress
bar, no sequence-length warning): the app's terminal and log stay readable."""

from __future__ import annotations

import os
import subprocess
import sys


def test_loading_the_embedder_and_counting_a_long_text_prints_nothing():
    code = ("from halo_weave.memory.embedder import Embedder\n"
            "e = Embedder(); e.load()\n"
            "assert e.count(['hello ' * 400])[0] > 256\n"
            "e.truncate('hello ' * 400, 100); e.encode(['hello'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert "Loading weights" not in done.stderr
    assert "Token indices sequence length" not in done.stderr
    assert done.stderr.strip() == ""
