"""Connections and requests cannot exhaust the broker (docs/robustness.md): memory follows the bytes
that arrived and a shared budget, connection counts are capped, quiet and stalled connections are
closed, and a bystander keeps getting quick answers throughout."""
from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Callable
from contextlib import ExitStack

import pytest

from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import RawConnection, produce_and_consume

MiB = 1024 * 1024
# A stalled event loop shows as a bystander waiting for the whole attack (seconds); scheduling noise
# on a loaded 2-core machine (the suite runs on two workers) reaches ~0.1-0.2 s
BYSTANDER_WORST_S = 0.5


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def worst_api_versions_latency(bootstrap: str, rounds: int = 20) -> float:
    """The slowest of `rounds` ApiVersions round trips on one fresh connection, in seconds."""
    worst = 0.0
    with RawConnection(bootstrap) as conn:
        for _ in range(rounds):
            start = time.perf_counter()
            assert conn.api_versions(3).error_code == 0
            worst = max(worst, time.perf_counter() - start)
    return worst


def worst_latency_while(work: Callable[[], None], bootstrap: str) -> float:
    """Run `work` in a thread; the slowest of a bystander's ApiVersions round trips meanwhile."""
    done = threading.Event()

    def run() -> None:
        try:
            work()
        finally:
            done.set()

    worker = threading.Thread(target=run)
    worker.start()
    worst = 0.0
    while not done.is_set():
        worst = max(worst, worst_api_versions_latency(bootstrap, 5))
    worker.join(60)
    return worst


@pytest.fixture
def broker_factory(tmp_path):
    started: list[KshimProcess] = []

    def start(*options: str) -> KshimProcess:
        broker = KshimProcess(tmp_path / f"data-{len(started)}", *options).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.kill()


def test_size_prefixes_and_partial_frames_cost_what_arrived_within_the_shared_budget(broker_factory, topic_name):
    broker = broker_factory("--max-request-bytes", str(32 * MiB), "--queued-max-request-bytes", str(64 * MiB))
    produce_and_consume(broker.bootstrap, topic_name)
    baseline = rss(broker.pid)
    with ExitStack() as stack:
        conns = [stack.enter_context(connect(broker.bootstrap)) for _ in range(100)]
        for conn in conns:  # each claims a 32 MiB request and sends 1 MiB of it
            conn.sendall(struct.pack(">i", 32 * MiB - 1))
        chunk = bytes(64 * 1024)
        for _ in range(16):
            for conn in conns:
                conn.setblocking(False)
                try:
                    conn.send(chunk)  # what the broker does not read stays in the kernel's buffers
                except BlockingIOError:
                    pass
        # the broker has read what its budget allows; the claims alone would be 3.2 GB
        worst = worst_api_versions_latency(broker.bootstrap)
        grown = rss(broker.pid) - baseline
        assert grown < 200 * MiB, f"RSS grew by {grown / MiB:.0f} MiB for 100 partial frames"
        assert worst < BYSTANDER_WORST_S, f"a bystander's ApiVersions took {worst * 1000:.0f} ms"
    wait_until(lambda: worst_api_versions_latency(broker.bootstrap, 3) < BYSTANDER_WORST_S, 20, message="quick answers after")
    produce_and_consume(broker.bootstrap, topic_name, b"after")


def test_connection_limits_close_extra_connections_at_once(broker_factory, topic_name):
    """max.connections.per.ip refuses a fifth connection from 127.0.0.1; max.connections refuses a
    seventh from anywhere: a third from 127.0.0.2, which its own address's limit would admit."""
    broker = broker_factory("--max-connections", "6", "--max-connections-per-ip", "4")
    with ExitStack() as stack:
        held = []
        for _ in range(4):
            conn = stack.enter_context(RawConnection(broker.bootstrap))
            assert conn.api_versions(3).error_code == 0
            held.append(conn)
        for _ in range(10):
            extra = stack.enter_context(RawConnection(broker.bootstrap))
            assert extra.wait_closed(10), "a fifth connection from 127.0.0.1 was kept"
        wait_until(lambda: "max.connections.per.ip=4" in broker.logs(), 10, message="the refusal logged")
        for _ in range(2):  # another address (loopback is 127/8): 6 connections in all
            conn = stack.enter_context(RawConnection(broker.bootstrap, source="127.0.0.2"))
            assert conn.api_versions(3).error_code == 0
        for _ in range(3):
            extra = stack.enter_context(RawConnection(broker.bootstrap, source="127.0.0.2"))
            assert extra.wait_closed(10), "a seventh connection was kept (max.connections=6)"
        held.pop().close()  # room again, once the broker has seen the close

        def served() -> bool:
            try:
                return worst_api_versions_latency(broker.bootstrap, 1) < 10
            except OSError:  # refused: the broker has not counted the close yet
                return False

        wait_until(served, 10, message="a new connection served")
    assert broker.logs().count("refusing connections") <= 2  # once per burst (10 s), not per connection


def test_idle_and_stalled_connections_are_closed(broker_factory):
    broker = broker_factory("--connections-max-idle-ms", "1500", "--request-stall-timeout-ms", "1000")
    with RawConnection(broker.bootstrap) as idle, RawConnection(broker.bootstrap) as stalled:
        assert idle.api_versions(3).error_code == 0
        stalled.sock.sendall(struct.pack(">i", 100) + b"\x00\x12")  # 2 of 100 promised bytes
        started = time.monotonic()
        assert stalled.wait_closed(10), "a connection stopped halfway through a request was kept"
        assert idle.wait_closed(10), "an idle connection was kept"
        assert time.monotonic() - started >= 0.9
    assert "stopped sending halfway through a request" in broker.logs()


def test_an_idle_connection_costs_little(broker_factory):
    broker = broker_factory()
    worst_api_versions_latency(broker.bootstrap, 1)
    baseline = rss(broker.pid)
    with ExitStack() as stack:
        for _ in range(500):
            conn = stack.enter_context(RawConnection(broker.bootstrap))
            assert conn.api_versions(3).error_code == 0
        per_connection = (rss(broker.pid) - baseline) / 500
        assert per_connection < 64 * 1024, f"{per_connection / 1024:.0f} KiB per idle connection"
