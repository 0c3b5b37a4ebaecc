"""Regression guard: PySide6 on Python 3.11 leaks a reference to None on every void Qt
call and aborts after ~10^5-10^6 calls (``Fatal Python error: none_dealloc``).  We run
on >= 3.12, where it is clean; this test makes a million void calls and checks None's
reference count did not drift by that much."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject


def test_void_qt_calls_do_not_leak_none(qapp):
    obj = QObject()
    before = sys.getrefcount(None)
    for _ in range(1_000_000):
        obj.setObjectName("halo")  # a void C++ call returning None
    after = sys.getrefcount(None)
    # A leak would add one reference per call (10^6); allow noise from other threads.
    assert after - before < 10_000, f"None refcount grew by {after - before}"
