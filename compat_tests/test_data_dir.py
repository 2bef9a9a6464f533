"""A data directory belongs to one kshim process at a time (docs/robustness.md).

A second serve on a live directory says who holds it and exits without touching it; a serve whose
port is taken exits before opening any log; the lock dies with its holder, even on SIGKILL.
"""
from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
from pathlib import Path

from compat_tests.kshim_process import KshimProcess
from compat_tests.raw_kafka import consume_all, produce_and_consume

SERVE_TIMEOUT_S = 60


def serve_once(data_dir: Path, port: int) -> subprocess.CompletedProcess:
    """A `kshim serve` expected to exit by itself (refused)."""
    return subprocess.run([sys.executable, "-m", "kshim", "serve", "--port", str(port), "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=SERVE_TIMEOUT_S)


# checkpoints a live broker rewrites on its own, every second or so: the holder's, not the second serve's
HOLDER_CHECKPOINTS = {"replication-offset-checkpoint", "high-watermark", "log-start-offset"}


def snapshot(data_dir: Path, live: bool = False) -> dict[str, tuple[str, int]]:
    """Every file under the data dir but the lock file (and, while a broker holds it, the
    checkpoints that broker rewrites periodically): its digest and mtime."""
    out = {}
    for path in sorted(data_dir.rglob("*")):
        if path.is_file() and path.name != ".lock" and not (live and path.name in HOLDER_CHECKPOINTS):
            out[str(path.relative_to(data_dir))] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return out


def test_second_serve_on_a_live_data_dir_names_the_holder_and_leaves_it_alone(tmp_path, topic_name):
    first = KshimProcess(tmp_path / "data").start()
    try:
        produce_and_consume(first.bootstrap, topic_name, b"before")
        before = snapshot(tmp_path / "data", live=True)
        with socket.socket() as s:  # a free port for the second one: it must fail on the lock, not the port
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        second = serve_once(tmp_path / "data", port)
        assert second.returncode == 1
        assert f"is in use by kshim serve on {first.bootstrap} (pid {first.pid}" in second.stderr, second.stderr
        assert "kshim ready" not in second.stdout
        assert snapshot(tmp_path / "data", live=True) == before  # no leader epoch, marker or log touched
        produce_and_consume(first.bootstrap, topic_name, b"after")
        assert first.terminate() == 0
        first.start()  # the lock was released at exit
        assert [r.value for r in consume_all(first.bootstrap, topic_name)] == [b"before", b"after"]
    finally:
        first.kill()


def test_serve_whose_port_is_taken_opens_no_log(tmp_path, topic_name):
    broker = KshimProcess(tmp_path / "data").start()
    try:
        produce_and_consume(broker.bootstrap, topic_name, b"kept")
        assert broker.terminate() == 0
        before = snapshot(tmp_path / "data")
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            refused = serve_once(tmp_path / "data", taken.getsockname()[1])
        assert refused.returncode == 1 and "cannot serve on" in refused.stderr, refused.stderr
        assert snapshot(tmp_path / "data") == before  # no epoch bumped, no clean-shutdown marker written
        broker.start()
        assert [r.value for r in consume_all(broker.bootstrap, topic_name)] == [b"kept"]
    finally:
        broker.kill()


def test_lock_of_a_killed_holder_does_not_block_a_restart(tmp_path, topic_name):
    broker = KshimProcess(tmp_path / "data").start()
    try:
        produce_and_consume(broker.bootstrap, topic_name, b"acked")
        broker.kill()
        assert (tmp_path / "data" / ".lock").exists()  # the file stays; the flock died with the process
        broker.start()
        assert [r.value for r in consume_all(broker.bootstrap, topic_name)] == [b"acked"]
    finally:
        broker.kill()
