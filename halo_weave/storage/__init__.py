"""Conversation files behind :mod:`halo_weave.store`: schema and migrations, export/import, attention captures. Qt-free."""
