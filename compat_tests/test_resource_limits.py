"""A broker that runs out of file descriptors refuses connections for a while and then serves
again: it never exits (Kafka's acceptor does the same)."""
from __future__ import annotations

import resource
import socket
import subprocess
import sys

from compat_tests.kshim_process import wait_until
from compat_tests.raw_kafka import RawConnection


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def test_out_of_file_descriptors_refuses_then_serves_again(tmp_path):
    log = open(tmp_path / "broker.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "kshim", "serve", "--port", "0", "--data-dir", str(tmp_path / "data")],
                            stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=_low_fd_limit)
    try:
        line = proc.stdout.readline()
        assert "kshim ready" in line, line
        bootstrap = line.split("bootstrap", 1)[1].split()[0]
        host, port = bootstrap.rsplit(":", 1)
        held = []
        for _ in range(100):  # more than the broker's 64 descriptors
            s = socket.socket()
            try:
                s.connect((host, int(port)))
            except OSError:
                s.close()
                break
            held.append(s)
        # hold them until the broker has tried to accept more than it can
        wait_until(lambda: "cannot accept a connection" in (tmp_path / "broker.log").read_text(), 20,
                   message="the broker running out of file descriptors")
        for s in held:
            s.close()
        assert proc.poll() is None, "the broker exited when it ran out of file descriptors"

        def serves() -> bool:
            try:
                with RawConnection(bootstrap, timeout=2) as conn:
                    return conn.api_versions(3).error_code == 0
            except OSError:
                return False

        wait_until(serves, 20, message="the broker serving again once descriptors are free")
    finally:
        proc.terminate()
        proc.wait(20)
        proc.stdout.close()
        log.close()
