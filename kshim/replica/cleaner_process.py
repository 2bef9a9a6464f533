"""The log cleaner's own process (kshim.replica.cleaning): where the heavy part of a clean runs,
reading the segments and writing the cleaned ones (kshim.log.cleaner.write_cleaned), so that it
does not hold the broker's GIL. A module of its own so that a broker loads the cleaning code only
when it first cleans a log; the spawned process imports it to run `write_in_child`.
"""
from __future__ import annotations

import os
import threading
import time

from kshim.log.cleaner import CleanPlan, Throttler, Written, write_cleaned

_child_throttler: Throttler | None = None
_parent = -1


class _WatchedThrottler(Throttler):
    """The cleaner process's throttler, told of every batch read and every write: it also stops
    the process at once if the broker is gone, so no clean outlives it by more than a batch."""

    def throttle(self, nbytes: int) -> None:
        if os.getppid() != _parent:
            os._exit(0)
        super().throttle(nbytes)


def child_init(parent: int) -> None:
    """In the cleaner process: exit as soon as the broker is gone (its pipes to us would not tell:
    the pool's queue keeps a write end here too), checked every 0.2 s by a daemon thread, so a
    SIGKILLed broker leaves no process behind holding its files or its stdout."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(0)

    global _parent
    _parent = parent
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def write_in_child(plan: CleanPlan, bytes_per_second: int) -> Written:
    """The cleaner process's task: one throttler for all its cleans (one runs at a time)."""
    global _child_throttler
    if _child_throttler is None or _child_throttler.rate != bytes_per_second:
        _child_throttler = _WatchedThrottler(float(bytes_per_second))
    return write_cleaned(plan, _child_throttler)
