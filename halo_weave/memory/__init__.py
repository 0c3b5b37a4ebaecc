"""Long-term memory behind :mod:`halo_weave.semantic_index`: embedder, vector matrix, turn-pair text, resurrection. Qt-free."""
