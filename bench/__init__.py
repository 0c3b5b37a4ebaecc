"""Halo Weave's benchmarks: what the app measures about itself, and how.

Each benchmark is a module (or, for the memory benchmark, the subpackage :mod:`bench.memory`)
with a ``main(argv)``; its command line is ``scripts/bench_<name>.py`` with the same options.
They drive the app through its public interface (a conversation, a session, a store, the
server), as a user's script would; the app never imports them (an import-linter contract).

- :mod:`bench.memory`: does it remember?  Evidence recall and continuation fidelity on
  LoCoMo, replayed through the app's core with teacher-forced attention.
- :mod:`bench.answers`: does the model answer from what it remembers?  Answer F1 on LoCoMo
  (scored by :mod:`bench.answer_scoring`).
- :mod:`bench.chat`: a scripted chat through the real server, timed as a user feels it.
- :mod:`bench.chat_facts`: facts said early, pruned, then asked about.
- :mod:`bench.kv_surgery`: what KV surgery costs in accuracy and saves in time.
- :mod:`bench.recall`, :mod:`bench.recall_order`, :mod:`bench.recall_fit`,
  :mod:`bench.recall_embedder`, :mod:`bench.recall_judge`: what the recall settings add,
  and how well the recalled paragraphs are ranked and kept.
- :mod:`bench.server`, :mod:`bench.models`, :mod:`bench.proxy`, :mod:`bench.readout`,
  :mod:`bench.kv_cells`, :mod:`bench.wait_policy`, :mod:`bench.llamacpp_settings`,
  :mod:`bench.capture`: what the server and the models cost (both engines' speed, attention
  read-out, the K-shift, OpenMP, recording).
- :mod:`bench.resume`: reopening a conversation, its saved KV cache read back (the app part
  in :mod:`bench.resume_app`, its timeline drawn by :mod:`bench.resume_timeline`).
- :mod:`bench.engine`, :mod:`bench.index`: what the Qt-free engine (brightness, the store,
  crash safety) and the semantic index (search, loading, embedding) cost.
- :mod:`bench.ui`, :mod:`bench.startup`, :mod:`bench.quit`, :mod:`bench.paste`,
  :mod:`bench.branches`: what the window and the files cost as a user meets them.
- :mod:`bench.locomo`: the LoCoMo data set, loaded for all of them.
"""
