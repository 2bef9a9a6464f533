"""A child of `kshim serve --brokers N` (a broker or the controller) dies with its supervisor.

Two independent ways, so that a supervisor killed with SIGKILL never leaves orphans holding the
cluster's ports and data:

- the kernel's parent-death signal (Linux prctl(PR_SET_PDEATHSIG), set through ctypes at the
  child's start-up): SIGKILL when the supervisor's thread that spawned it ends. SIGKILL, not
  SIGTERM, because a paused (SIGSTOPped) broker would never act on SIGTERM; a child's on-disk
  state survives SIGKILL as it survives `kshim ctl kill`. If the supervisor died before prctl
  ran, the child's parent is already another process: it exits at once.
- a watchdog pipe: the supervisor keeps the write end, each child inherits only the read end
  (`--supervisor-fd`). The read end turns readable (EOF) once no process holds the write end, that
  is once the supervisor is gone, whatever killed it; `watch` then returns and the child shuts
  down cleanly. This also covers a platform without prctl.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

import anyio

log = logging.getLogger("kshim.lifeline")

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Lifeline:
    """The supervisor's side: one pipe shared by every child it spawns."""

    def __init__(self) -> None:
        # os.pipe() fds are not inheritable: a child gets the read end only through pass_fds, and
        # never the write end, so the write end closes exactly when this process goes away
        self.read_fd, self.write_fd = os.pipe()

    def child_args(self) -> list[str]:
        return ["--supervisor-pid", str(os.getpid()), "--supervisor-fd", str(self.read_fd)]

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def die_with_parent(supervisor_pid: int) -> bool:
    """In the child, first thing: SIGKILL when the supervisor dies. Exits at once if it has died
    already. False where prctl is unavailable (not Linux): the watchdog pipe alone then."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)  # own symbols: find_library runs ldconfig (~50 ms)
            if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
                armed = True
            else:
                log.warning("prctl(PR_SET_PDEATHSIG) failed: %s", os.strerror(ctypes.get_errno()))
        except OSError as e:
            log.warning("cannot load libc for prctl: %s", e)
    if os.getppid() != supervisor_pid:  # it died before prctl took effect: the signal will never come
        log.error("the supervisor (pid %d) is gone: exiting", supervisor_pid)
        os._exit(1)
    return armed


async def watch(fd: int) -> None:
    """Returns once the supervisor is gone (the watchdog pipe reads EOF)."""
    os.set_blocking(fd, False)
    while True:
        await anyio.wait_readable(fd)
        try:
            data = os.read(fd, 64)
        except BlockingIOError:
            continue
        if not data:  # EOF: every write end is closed
            return
