"""kshim for tests: start a broker or a cluster as real processes on free ports in a directory of
their own, and reach their fault rules and request logs.

    from kshim.testing import KshimBroker
    with KshimBroker(tmp_path) as broker:
        broker.bootstrap                       # "127.0.0.1:PORT"
        broker.faults.add("error", api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=2)
        broker.requests.new(api="Produce")     # what clients sent since the last look

The pytest plugin (kshim.testing.plugin, registered as the `pytest11` entry point `kshim`) gives
these as fixtures: `kshim_broker`, `kshim_cluster`, `kshim_faults`, `kshim_requests`.
"""
from __future__ import annotations

import functools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kshim.ctl.faults import FaultClient, RequestLogClient

__all__ = ["KshimBroker", "KshimCluster", "KshimStartError", "FaultClient", "RequestLogClient"]

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


class KshimStartError(RuntimeError):
    """The broker or cluster did not become ready; the message holds its last output."""


class _Process:
    """`python -m kshim serve ...`, its output kept, ready once it prints its ready line."""

    def __init__(self, data_dir: Path, args: list[str]) -> None:
        self.data_dir = Path(data_dir)
        self.args = args
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.bootstrap = ""
        self.ready_s = 0.0  # seconds from start to ready

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "kshim", "serve", "--data-dir", str(self.data_dir),
                                      *self.args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     bufsize=1)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line.rstrip("\n"))
                del self.output[:-2000]  # bounded: the last lines are what a failure needs
                if line.startswith("kshim ready:") and not ready.is_set():
                    self.bootstrap = line.split("bootstrap", 1)[1].split()[0]
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True, name=f"kshim output {self.data_dir}").start()
        # the fault and request-log clients load while the broker starts (on another core), not
        # before or after it: a fifth to half a second of imports
        try:
            import kshim.ctl.faults  # noqa: F401
        except BaseException:
            self.kill()
            raise
        if not ready.wait(READY_TIMEOUT_S) or not self.bootstrap:
            self.kill()
            raise KshimStartError("kshim did not become ready:\n" + "\n".join(self.output[-50:]))
        self.ready_s = time.monotonic() - started

    def stop(self) -> int:
        """SIGTERM and wait for a clean exit (SIGKILL past the timeout); its exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return -signal.SIGKILL

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


class _Kshim:
    def __init__(self, process: _Process) -> None:
        self._process = process
        self.data_dir = process.data_dir

    # on first use, not at the top: the pytest plugin imports this module in every pytest run, and
    # the clients load the control-plane messages, wanted only with a broker (_Process.start loads
    # them while the broker starts)
    @functools.cached_property
    def faults(self) -> FaultClient:
        from kshim.ctl.faults import FaultClient
        return FaultClient(self.data_dir)

    @functools.cached_property
    def requests(self) -> RequestLogClient:
        from kshim.ctl.faults import RequestLogClient
        return RequestLogClient(self.data_dir)

    @property
    def bootstrap(self) -> str:
        return self._process.bootstrap

    @property
    def ready_s(self) -> float:
        return self._process.ready_s

    @property
    def pid(self) -> int:
        assert self._process.proc is not None
        return self._process.proc.pid

    def logs(self) -> str:
        return "\n".join(self._process.output)

    def start(self) -> Any:
        self._process.start()
        return self

    def stop(self) -> int:
        return self._process.stop()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class KshimBroker(_Kshim):
    """One `kshim serve` on a free port (`--port 0`) with its data in `data_dir`; `args` are more
    serve options (e.g. "--partitions", "3")."""

    def __init__(self, data_dir: str | Path, *args: str) -> None:
        super().__init__(_Process(Path(data_dir), ["--port", "0", *args]))


class KshimCluster(_Kshim):
    """`kshim serve --brokers N` on N consecutive free ports, its data in `data_dir`."""

    def __init__(self, data_dir: str | Path, brokers: int = 3, *args: str) -> None:
        self.brokers = brokers
        self._args = [str(brokers), *args]
        super().__init__(_Process(Path(data_dir), []))

    def start(self) -> Any:
        for _ in range(5):  # a port of the block may be taken between the check and the bind: try another
            base = free_port_block(self.brokers)
            self._process.args = ["--port", str(base), "--brokers", *self._args]
            try:
                return super().start()
            except KshimStartError as e:
                if "cannot serve" not in str(e) and "in use" not in str(e):
                    raise
        raise KshimStartError(f"no block of {self.brokers} free ports could be bound")


def free_port_block(count: int) -> int:
    """A base port with `count` consecutive free ports on 127.0.0.1, below the usual ephemeral range.
    Under pytest-xdist each worker draws from its own slice of the range, so that two workers cannot
    pick the same free block before either binds it."""
    low, high = _port_range()
    for _ in range(200):
        base = random.randrange(low, high - count)
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports")


def _port_range(low: int = 20000, high: int = 32000) -> tuple[int, int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or not worker[2:].isdigit() or count <= 1:
        return low, high
    size = (high - low) // count
    start = low + int(worker[2:]) % count * size
    return start, start + size


def __getattr__(name: str) -> Any:
    """FaultClient and RequestLogClient, loaded on first use (see _Kshim)."""
    if name in ("FaultClient", "RequestLogClient"):
        from kshim.ctl import faults
        return getattr(faults, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
