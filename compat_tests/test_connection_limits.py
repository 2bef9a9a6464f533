"""Connections and requests cannot exhaust the broker (docs/robustness.md): memory follows the bytes
that arrived and a shared budget, connection counts are capped, quiet and stalled connections are
closed, and a bystander keeps getting answers throughout, while the others' requests are still
arriving."""
from __future__ import annotations

import socket
import struct
import time
from typing import Callable
from contextlib import ExitStack

import pytest

from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import RawConnection, produce_and_consume

MiB = 1024 * 1024
# What a bystander's read waits before the test fails: a safety net for an event loop stalled for
# good (it never answers), far above any answer's time, not a speed bound. That bad input stalls
# nobody is proven by order: the bystander is answered while the bad input is still in progress;
# how fast is for the benchmarks (docs/benchmarks.md).
BYSTANDER_DEADLINE_S = 30.0
WORK_DEADLINE_S = 120.0  # the work round_trips_during watches must end by then


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def bystander(bootstrap: str) -> RawConnection:
    return RawConnection(bootstrap, timeout=BYSTANDER_DEADLINE_S)


def answer(conn: RawConnection, meanwhile: str = "") -> None:
    """One ApiVersions round trip on the bystander `conn`; no answer in BYSTANDER_DEADLINE_S fails."""
    try:
        assert conn.api_versions(3).error_code == 0
    except TimeoutError:
        raise AssertionError(f"a bystander's ApiVersions got no answer in {BYSTANDER_DEADLINE_S:.0f} s"
                             f"{' ' + meanwhile if meanwhile else ''}: the event loop is stalled") from None


def answered(bootstrap: str, rounds: int = 1, meanwhile: str = "") -> bool:
    """`rounds` ApiVersions round trips on a new connection, each answered (else AssertionError)."""
    with bystander(bootstrap) as conn:
        for _ in range(rounds):
            answer(conn, meanwhile)
    return True


def round_trips_during(bootstrap: str, in_progress: Callable[[], bool], done: Callable[[], bool]) -> int:
    """A bystander's ApiVersions round trips, one at a time, until `done()`: how many began and
    ended while `in_progress()` held (checked before and after each). While work blocks the event
    loop, a round trip begun during it ends after it: none counts, however long the work takes."""
    counted = 0
    deadline = time.monotonic() + WORK_DEADLINE_S
    with bystander(bootstrap) as conn:
        while not done():
            assert time.monotonic() < deadline, f"the work did not end in {WORK_DEADLINE_S:.0f} s"
            if not in_progress():
                time.sleep(0.005)  # polling for the work to begin (or end)
                continue
            answer(conn, "while the work was in progress")
            if in_progress():
                counted += 1
    return counted


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
        # answered while 100 connections are halfway through a request, which they never finish
        # here: a broker that read a frame to its end before serving others would never answer
        answered(broker.bootstrap, 20, "while 100 connections were halfway through their requests")
        # the broker has read what its budget allows; the claims alone would be 3.2 GB
        grown = rss(broker.pid) - baseline
        assert grown < 200 * MiB, f"RSS grew by {grown / MiB:.0f} MiB for 100 partial frames"
    answered(broker.bootstrap, 3, "after the partial frames' connections closed")
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
                return answered(broker.bootstrap)
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
    answered(broker.bootstrap)
    baseline = rss(broker.pid)
    with ExitStack() as stack:
        for _ in range(500):
            conn = stack.enter_context(RawConnection(broker.bootstrap))
            assert conn.api_versions(3).error_code == 0
        per_connection = (rss(broker.pid) - baseline) / 500
        assert per_connection < 64 * 1024, f"{per_connection / 1024:.0f} KiB per idle connection"
