"""The log writer: appends leave the event loop (one thread per data directory).

Why: an append is a page-cache write, and a page-cache write blocks whenever the kernel throttles
writeback (profiled: two thirds of a producing broker's time inside ``os.write`` on the event
loop, while no socket was read and no response sent). ``os.write`` / ``os.writev`` release
the GIL, so a thread beside the loop lets it go on.

- A partition hands a job (its batch bytes, owned by the job) to its data directory's writer and
  is answered on the event loop once the write returned: ``on_done`` runs there, then the job's
  future completes. Nothing changes for a client: acks=1 is answered after the write, as before.
- The thread takes everything queued, groups it by log in queue order, and lets each log write
  its jobs (:meth:`kshim.log.log.Log.write_jobs`): what is queued for one segment goes out in one
  vectored write. Jobs of one log are written in the order they were queued: per-partition order
  is the queue's.
- What is on disk when an answer is sent is what it was before (docs/storage.md): the bytes are in
  the page cache (fsync only per flush.messages / flush.ms, which the writer applies).
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

log = logging.getLogger("kshim.log")
# slow inline appends (kshim.replica.partition_appends) within a window that send a data directory's appends here
INLINE_SLOW_COUNT = 3

CLOSE_WAIT_S = 10.0  # close() waits this long for queued jobs to be written


class WritableLog(Protocol):
    """What the writer needs of a log (kshim.log.log.Log)."""
    def write_jobs(self, jobs: Sequence[WriteJob]) -> None: ...


@dataclass(slots=True, eq=False)
class WriteJob:
    """One append for the writer: whole batches (a leader's, base offsets patched by the log; or a
    follower's, offsets as the leader assigned them)."""
    log: WritableLog
    data: bytearray | bytes | memoryview  # a writable view of a request frame: patched in place
    leader: bool
    on_done: Callable[[WriteJob], Any]  # run on the event loop once written (or failed): the future's value
    future: asyncio.Future
    base: int = -1        # offsets, once written
    last: int = -1
    error: BaseException | None = None
    metas: list = field(default_factory=list)  # set by the log while planning
    records: int = 0
    context: Any = None   # the submitter's (the partition keeps what it needs to finish here)
    # checked (in the writer thread, under the log's write lock) before writing: False when the
    # partition's leadership changed since the job was made, so a stale leader never writes
    # after the truncation that follows a leader change
    still_valid: Callable[[], bool] | None = None


class Fenced(Exception):
    """The replica's leadership changed between the job's making and its write."""


class LogWriter:
    """One data directory's writer thread, started on the first job."""

    def __init__(self, name: str = "log-writer") -> None:
        self.name = name
        self._queue: deque[WriteJob] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._busy = False
        self.writes = 0   # vectored writes issued (rounds x logs), for the benchmarks
        self.jobs = 0
        # until then (monotonic s) even small appends come here: several written on the event loop
        # were slow (kshim.replica.partition_appends.INLINE_SLOW_S), at the times in inline_slow
        self.inline_paused_until = 0.0
        self.inline_slow: deque[float] = deque(maxlen=INLINE_SLOW_COUNT)

    def submit(self, job: WriteJob) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("log writer is closed")
            self._queue.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:  # ends when closed and drained
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                jobs = list(self._queue)
                self._queue.clear()
                self._busy = True
            by_log: dict[int, list[WriteJob]] = {}
            for job in jobs:
                by_log.setdefault(id(job.log), []).append(job)
            for group in by_log.values():
                try:
                    group[0].log.write_jobs(group)
                except BaseException as e:  # a bug, not a disk error (those are per job): fail them all
                    log.exception("log writer failed on %s", group[0].log)
                    for job in group:
                        if job.error is None and job.last < 0:
                            job.error = e
                self.writes += 1
            self.jobs += len(jobs)
            self._settle(jobs)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    @staticmethod
    def _settle(jobs: list[WriteJob]) -> None:
        """Hand the finished jobs back to their event loops, one wake-up per loop."""
        by_loop: dict[int, tuple[asyncio.AbstractEventLoop, list[WriteJob]]] = {}
        for job in jobs:
            loop = job.future.get_loop()
            by_loop.setdefault(id(loop), (loop, []))[1].append(job)
        for loop, done in by_loop.values():
            try:
                loop.call_soon_threadsafe(_finish, done)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    def drain(self, timeout_s: float = CLOSE_WAIT_S) -> bool:
        """Wait (bounded) until everything queued so far is written. True if it was."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> None:
        """Write what is queued, then stop the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                log.warning("log writer %s still writing after %.0f s", self.name, timeout_s)


def _finish(jobs: list[WriteJob]) -> None:
    """On the event loop: each job's ``on_done``, whose value completes its future."""
    for job in jobs:
        try:
            value = job.on_done(job)
        except Exception as e:
            log.exception("finishing a log write failed")
            if not job.future.done():
                job.future.set_exception(e)
            continue
        if not job.future.done():
            job.future.set_result(value)
