"""Start and stop kshim as a real OS process on a free 127.0.0.1 port, for tests and benchmarks."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

READY_TIMEOUT_S = 30.0
# Kafka's group.initial.rebalance.delay.ms (serve's default, 3 s) holds every classic group's first
# rebalance; tests form groups at once, unless they pass the option themselves (a test of the delay)
TEST_GROUP_DELAY = ("--group-initial-rebalance-delay-ms", "0")


class KshimProcess:
    """`python -m kshim serve` with its own data dir, or `--ephemeral` when `data_dir` is None (and
    no initial rebalance delay unless `extra` sets one: TEST_GROUP_DELAY). Only ever signals the
    PID it started."""

    def __init__(self, data_dir: Path | None, *extra: str, port: int = 0) -> None:
        self.data_dir = data_dir
        self.extra = list(extra)
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.bootstrap = ""
        self.ready_line = ""
        self.output: list[str] = []
        self.preexec_fn = None  # e.g. a resource limit for the broker process

    def start(self) -> "KshimProcess":
        assert self.proc is None or self.proc.poll() is not None, "stop the running broker before starting it again"
        self.bootstrap = self.ready_line = ""  # set by this start's ready line: a failed start must not look ready
        where = ["--ephemeral"] if self.data_dir is None else ["--data-dir", str(self.data_dir)]
        cmd = [sys.executable, "-m", "kshim", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               *where, *self.extra]
        if TEST_GROUP_DELAY[0] not in self.extra:
            cmd += TEST_GROUP_DELAY
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     preexec_fn=self.preexec_fn)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc and self.proc.stdout
            for line in self.proc.stdout:
                self.output.append(line.rstrip("\n"))
                if line.startswith("kshim ready:") and not ready.is_set():
                    self.ready_line = line.strip()
                    self.bootstrap = line.split("bootstrap", 1)[1].split()[0]
                    ready.set()
            ready.set()  # process ended

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not ready.wait(READY_TIMEOUT_S) or not self.bootstrap:
            self.kill()
            raise RuntimeError("kshim did not become ready:\n" + "\n".join(self.output[-50:]))
        # restarts reuse the same port: a cluster's first (its brokers listen on PORT..PORT+N-1)
        self.port = int(self.bootstrap.split(",")[0].rsplit(":", 1)[1])
        return self

    @property
    def pid(self) -> int:
        assert self.proc
        return self.proc.pid

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        assert self.proc
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._close_pipe()
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, as far as the data on disk is concerned."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._close_pipe()

    def _close_pipe(self) -> None:
        # the pump thread ends at EOF once the process is gone; then the pipe can be closed
        if self.proc and self.proc.stdout and not self.proc.stdout.closed:
            self._pump.join(5)
            self.proc.stdout.close()

    def restart(self) -> "KshimProcess":
        return self.start()

    def logs(self) -> str:
        return "\n".join(self.output)


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.05, message: str = "condition"):
    """Poll `predicate` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
