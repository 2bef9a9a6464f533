"""A `kshim serve --brokers N` cluster as real processes, for compat tests: start, ctl, stop."""
from __future__ import annotations

import os
from contextlib import contextmanager
import subprocess
import sys
import time
from pathlib import Path

from compat_tests.kshim_process import KshimProcess
from kshim.ctl import brokers_admin, status as ctl_status
from kshim.ctl.faults import RequestLogClient
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

    def diagnose(self, client_id: str | None = None, needles: tuple[str, ...] = (), topics: tuple[str, ...] = (),
                 entries: int = 30, log_lines: int = 40) -> str:
        """What a failed test prints of the cluster: `kshim ctl status` (the partitions of `topics`,
        default all), each broker's last `entries` requests from `client_id` and its requests that
        got an error, and the broker log lines that mention one of `needles`. Never raises: a broker
        that does not answer is said so."""
        out: list[str] = []
        try:
            st = self.status()
            if topics:
                st = {**st, "partitions": [p for p in st["partitions"] if p["topic"] in topics]}
            out.append(ctl_status.format_table(st))
        except Exception as e:  # a diagnosis must not hide the failure it explains
            out.append(f"status: {e!r}")
        for node, path in sorted(brokers_admin.broker_sockets(self.data_dir).items()):
            try:
                log = RequestLogClient(self.data_dir, timeout_s=5).read(broker=node, client_id=client_id)
            except Exception as e:
                out.append(f"broker {node} request log: {e!r}")
                continue
            now = time.time()
            shown = [r for r in log if any(x != "NONE" for x in r["errors"])][-entries:]
            shown += [r for r in log[-entries:] if r not in shown]
            out.append(f"broker {node}: {len(log)} requests from {client_id or 'any client'}; the last {entries} and "
                       f"the last {entries} with errors (age s, api v, correlation, latency ms, errors, partitions):")
            for r in sorted(shown, key=lambda r: r["seq"]):
                out.append(f"  {now - r['time']:7.1f} {r['api']} v{r['version']} #{r['correlation_id']} "
                           f"{r['latency_ms']:.0f}ms {','.join(r['errors'])} {' '.join(r['partitions'][:6])} "
                           f"{r['outcome'] if r['outcome'] != 'answered' else ''}")
        for log_path in sorted(self.data_dir.glob("broker-*/broker.log")):
            try:
                lines = log_path.read_text(errors="replace").splitlines()
            except OSError as e:
                out.append(f"{log_path}: {e}")
                continue
            hits = [ln for ln in lines if ln.startswith("---") or any(n in ln for n in needles)
                    or " WARNING " in ln or " ERROR " in ln]
            out.append(f"{log_path.parent.name}/broker.log ({len(hits)} lines of note, the last {log_lines}):")
            out.extend("  " + ln[:300] for ln in hits[-log_lines:])
        return "\n".join(out)

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
