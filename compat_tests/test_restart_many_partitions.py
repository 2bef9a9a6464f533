"""Restarts of a broker with many partitions (docs/storage.md, "Durability and recovery"): after
SIGTERM the data dir holds one clean-shutdown marker naming every log, and the next start opens
them all without recovery and with every record; after kill -9 in the middle of a heavy produce
the next start serves at once and recovers every log's tail in the background, keeping every
acknowledged record.

One broker for the module, 300 partitions (the benchmark, bench/restart.py, measures 10,000)."""
from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.kshim_process import KshimProcess, wait_until

PARTITIONS = 300
TOPIC = "many"
OPENED = re.compile(r"opened (\d+) replicas in [\d.]+ s: (\d+) recovered")
DEFERRED = re.compile(r"(\d+) replicas a crash left unclean are recovered in the background")
BACKGROUND = re.compile(r"recovered (\d+) replicas in the background in")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = KshimProcess(tmp_path_factory.mktemp("restart") / "data", "--log-level", "info").start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept alive until the answer
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], request_timeout=60)[TOPIC].result(timeout=90)
        yield b
    finally:
        b.kill()


def produce(bootstrap: str, partitions: range, value: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    failed: list = []
    for i in partitions:
        p.produce(TOPIC, value, partition=i, on_delivery=lambda err, _m: err and failed.append(err))
        p.poll(0)
    assert p.flush(60) == 0 and not failed, failed[:3]


def end_offsets(bootstrap: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-check"})
    try:
        return [c.get_watermark_offsets(TopicPartition(TOPIC, i), timeout=20)[1] for i in range(PARTITIONS)]
    finally:
        c.close()


def opened_line(broker: KshimProcess, since: int) -> tuple[int, int]:
    """(replicas opened at the last start, how many of them were recovered)."""
    found = [m for line in broker.output[since:] if (m := OPENED.search(line))]
    assert found, "\n".join(broker.output[since:][-30:])
    return int(found[-1].group(1)), int(found[-1].group(2))


def test_a_clean_restart_skips_recovery_and_keeps_every_record(broker):
    produce(broker.bootstrap, range(PARTITIONS), b"before")
    started = time.monotonic()
    assert broker.terminate() == 0
    stop_s = time.monotonic() - started
    marker = (broker.data_dir / ".kshim-clean-shutdown").read_text().splitlines()
    assert {f"{TOPIC}-{i}" for i in range(PARTITIONS)} <= {line.split()[0] for line in marker[1:]}
    since = len(broker.output)
    started = time.monotonic()
    broker.start()
    print(f"SIGTERM {stop_s:.1f} s, clean start to ready {time.monotonic() - started:.1f} s")
    assert not (broker.data_dir / ".kshim-clean-shutdown").exists()
    opened, recovered = opened_line(broker, since)
    assert opened >= PARTITIONS and recovered == 0
    assert end_offsets(broker.bootstrap) == [1] * PARTITIONS


def test_kill_9_in_a_heavy_produce_recovers_every_tail_and_loses_nothing_acknowledged(broker):
    before = end_offsets(broker.bootstrap)
    acked: dict[int, int] = {}  # partition -> highest acknowledged offset
    count = [0]

    def report(err, msg) -> None:
        if err is None:
            count[0] += 1
            acked[msg.partition()] = max(acked.get(msg.partition(), -1), msg.offset())

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "message.timeout.ms": 30000})
    deadline = time.monotonic() + 30
    i = 0
    while count[0] < 3000:  # kill it in the middle of a stream over every partition
        assert time.monotonic() < deadline, f"only {count[0]} records acknowledged"
        try:
            p.produce(TOPIC, b"x" * 512, partition=i % PARTITIONS, on_delivery=report)
            i += 1
        except BufferError:
            pass
        p.poll(0)
    broker.kill()
    p.purge()
    p.flush(5)
    acked = dict(acked)
    del p
    since = len(broker.output)
    broker.start()
    # no marker: every log checks its tail, after the broker serves (a request waits for its own)
    deferred = [int(m.group(1)) for line in broker.output[since:] if (m := DEFERRED.search(line))]
    assert deferred and deferred[0] >= PARTITIONS, "\n".join(broker.output[since:][-30:])
    after = end_offsets(broker.bootstrap)
    done = wait_until(lambda: [int(m.group(1)) for line in broker.output[since:] if (m := BACKGROUND.search(line))],
                      timeout=60, message="the background recovery's last line")
    assert done == deferred
    lost = {q: (off, after[q]) for q, off in acked.items() if after[q] <= off}
    assert not lost, f"acknowledged records lost: {list(lost.items())[:5]}"
    assert all(a >= b for a, b in zip(after, before))
    produce(broker.bootstrap, range(0, PARTITIONS, 97), b"after")  # every log takes appends again
