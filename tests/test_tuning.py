"""Process tuning of a server start (kshim.tuning): the garbage collector's frozen start-up objects."""
from __future__ import annotations

import gc
import weakref

from kshim import tuning


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_freezing_the_loaded_objects_keeps_later_garbage_collected():
    loaded = _Node()  # alive at the freeze: out of every later collection's walk
    try:
        # the test process's modules at least (the count moves after: a frozen object whose last
        # reference goes is freed as ever, by a thread of another test too)
        assert tuning.freeze_loaded_objects() > 1000
        assert gc.isenabled()  # automatic collections go on, over what came later
        a, b = _Node(), _Node()  # a cycle made after the freeze: only the collector frees it
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
        assert loaded.other is None  # (the frozen one is still there, untouched)
    finally:
        gc.unfreeze()  # the other tests of this worker get the collector as it was
