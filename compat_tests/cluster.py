"""A `kshim serve --brokers N` cluster as real processes, for compat tests: start, ctl, stop."""
from __future__ import annotations

import os
from contextlib import contextmanager
import subprocess
import sys
from pathlib import Path

from compat_tests.kshim_process import KshimProcess
from kshim.ctl import status as ctl_status
from kshim.ctl.common import CtlError
from kshim.testing import free_port_block  # one port search for the tests and the pytest plugin

SESSION_TIMEOUT_MS = 2000


def run_ctl(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, timeout=60)


def pid_exists(pid: int) -> bool:
    """The process runs (a zombie, dead but not yet reaped by whoever adopted it, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return os.path.exists(f"/proc/{pid}") or not os.path.isdir("/proc")


class Cluster:
    def __init__(self, data_dir: Path, brokers: int, *extra: str,
                 session_timeout_ms: int = SESSION_TIMEOUT_MS, base_port: int | None = None) -> None:
        self.data_dir = data_dir
        self.base_port = base_port if base_port is not None else free_port_block(brokers)
        self.process = KshimProcess(data_dir, "--brokers", str(brokers), "--broker-session-timeout-ms",
                                    str(session_timeout_ms), *extra, port=self.base_port)

    def start(self) -> "Cluster":
        self.process.start()
        return self

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    def status(self) -> dict:
        return ctl_status.status(self.data_dir)

    def broker(self, node_id: int) -> dict:
        return next(b for b in self.status()["brokers"] if b["id"] == node_id)

    def partition(self, topic: str, index: int = 0) -> dict:
        return next(p for p in self.status()["partitions"] if p["topic"] == topic and p["partition"] == index)

    def children(self) -> list[int]:
        """The PIDs of the brokers and the controller the supervisor runs."""
        s = self.status()
        return [b["pid"] for b in s["brokers"] if b["pid"]] + ([s["controller"]["pid"]] if s["controller"]["pid"] else [])

    def stop(self) -> None:
        """SIGTERM the serve process: it exits 0 and every process it started is gone."""
        pids = self.children()
        code = self.process.terminate()
        assert code == 0, "kshim serve did not stop cleanly:\n" + self.process.logs()
        assert not [pid for pid in pids if pid_exists(pid)], "brokers or the controller outlived kshim serve"
        assert not (self.data_dir / "controller.sock").exists()
        assert not (self.data_dir / "supervisor.sock").exists()

    def kill_everything(self) -> None:
        """After a failed test: no process left behind (only the ones this cluster started)."""
        if self.process.proc and self.process.proc.poll() is None:
            try:
                pids = self.children()
            except CtlError:
                pids = []
            self.process.kill()
            for pid in pids:
                if pid_exists(pid):
                    os.kill(pid, 9)


@contextmanager
def running(cluster: "Cluster"):
    """Start the cluster; on the way out stop it cleanly (asserting a clean stop), and whatever
    happened, leave none of its processes behind."""
    try:
        cluster.start()
        yield cluster
        cluster.stop()
    finally:
        cluster.kill_everything()
