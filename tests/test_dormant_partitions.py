"""Dormant partitions (kshim.replica.partition, kshim.log.summary): after a clean stop a partition starts
without opening any file of it, serves its offsets from the summary its stop recorded, and opens
its log, leader epochs and producer state on first use, so that a broker with 10,000 partitions
is ready in seconds. What a dormant partition answers must be what the opened log would answer."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import anyio
import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.configs import resolve
from kshim.log.log import OffsetOutOfRange
from kshim.log.log_dirs import CLEAN_MARKER, take_clean_marker, write_clean_marker
from kshim.log.summary import LogSummary
from kshim.standalone import open_standalone
from wire.errors import ErrorCode
from wire.records import encode_batch

PARTITIONS = 4


@pytest.fixture
def anyio_backend():
    return "asyncio"


def batch(value: bytes, ts: int | None = None, **kw) -> bytes:
    return encode_batch([(b"k", value, None, ts)], **kw)


async def stopped(data_dir: Path, configs: dict | None = None, records: int = 2, **kw) -> None:
    """A broker that made topic t, appended `records` batches to every partition and stopped cleanly."""
    broker = open_standalone(BrokerConfig(data_dir=data_dir))
    await broker.create_topic("t", PARTITIONS, configs)
    for n in range(records):
        out = broker.replica_manager.append(1, 5, [("t", i, batch(b"v%d" % n, **kw)) for i in range(PARTITIONS)])
        assert isinstance(out, list) and all(r.appended for r in out), out
    broker.close()


def started(data_dir: Path) -> Broker:
    return open_standalone(BrokerConfig(data_dir=data_dir))


def is_dormant(broker: Broker, index: int) -> bool:
    p = broker.partition("t", index)
    return p.dormant is not None and "log" not in vars(p)


@pytest.mark.anyio
async def test_a_dormant_partition_answers_offsets_and_idle_reads_without_opening(tmp_path):
    await stopped(tmp_path)
    broker = started(tmp_path)
    try:
        p = broker.partition("t", 1)
        assert all(is_dormant(broker, i) for i in range(PARTITIONS))
        assert "t" in repr(p) and is_dormant(broker, 1)  # a log line naming it does not open it
        assert (p.log_start_offset, p.log_end_offset, p.high_watermark, p.last_stable_offset) == (0, 2, 2, 2)
        assert p.size_bytes == len(batch(b"v0")) + len(batch(b"v1"))
        assert p.read(2, 1 << 20, 0) == b"" and p.read(2, 1 << 20, 1) == b"" and p.read_for_follower(2, 1 << 20) == b""
        with pytest.raises(OffsetOutOfRange):
            p.read(3, 1 << 20, 0)
        assert is_dormant(broker, 1)
        data = bytes(p.read(0, 1 << 20, 0))  # records to read: opened now
        assert data.count(b"v0") == 1 and data.count(b"v1") == 1
        assert p.dormant is None and not p.log.recovered
        assert is_dormant(broker, 2)  # the others still are
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_produce_wakes_it_with_its_producer_state(tmp_path):
    # an idempotent producer's batch before the stop, retried after it: still recognised as a duplicate
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    await broker.create_topic("t", 1)
    first = batch(b"once", producer_id=7, producer_epoch=0, base_sequence=0)
    assert broker.replica_manager.append(1, 5, [("t", 0, first)])[0].base_offset == 0
    broker.close()
    broker = started(tmp_path)
    try:
        assert is_dormant(broker, 0)
        retried = broker.replica_manager.append(1, 5, [("t", 0, first)])[0]
        assert retried.error == ErrorCode.NONE and retried.base_offset == 0
        following = broker.replica_manager.append(1, 5, [("t", 0, batch(b"next", producer_id=7, producer_epoch=0,
                                                                          base_sequence=1))])[0]
        assert following.base_offset == 1 and broker.partition("t", 0).log_end_offset == 2
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_stop_rewrites_the_summaries_of_partitions_never_opened(tmp_path):
    await stopped(tmp_path)
    before = take_clean_marker(tmp_path)
    write_clean_marker(tmp_path, before)
    broker = started(tmp_path)
    broker.replica_manager.append(1, 5, [("t", 0, batch(b"v2"))])
    broker.close()
    after = take_clean_marker(tmp_path)
    assert {n: after[n] for n in ("t-1", "t-2", "t-3")} == {n: before[n] for n in ("t-1", "t-2", "t-3")}
    assert isinstance(after["t-0"], LogSummary) and after["t-0"].log_end_offset == 3
    assert after["t-0"].size_bytes == before["t-0"].size_bytes + len(batch(b"v2"))


@pytest.mark.anyio
async def test_retention_reaches_a_dormant_partition(tmp_path):
    # tiny segments: a segment per batch. Old timestamps on partition 0, recent ones elsewhere
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    await broker.create_topic("t", 2, {"segment.bytes": "100", "retention.ms": "-1"})
    now = int(time.time() * 1000)
    for n in range(3):
        out = broker.replica_manager.append(1, 5, [("t", 0, batch(b"old%d" % n, ts=1)), ("t", 1, batch(b"new", ts=now))])
        assert all(r.appended for r in out)
    broker.close()
    broker = started(tmp_path)
    try:
        for i in range(2):  # a retention of a minute from now on (as an AlterConfigs would)
            p = broker.partition("t", i)
            p.configure(resolve({"segment.bytes": "100", "retention.ms": "60000"}))
        assert is_dormant(broker, 0) and is_dormant(broker, 1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(broker.replica_manager.housekeeping)
            with anyio.fail_after(30):
                while broker.partition("t", 0).log_start_offset < 3:
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        assert broker.partition("t", 0).log_end_offset == 3
        assert is_dormant(broker, 1)  # nothing of it was due: never opened
    finally:
        broker.close()


def test_retention_due_matches_the_oldest_segment():
    s = LogSummary(200, 50, 0, 0, 30, 250, 10, 100, 1_000, leader_epoch=0, leader_epoch_start=0)
    assert s.retention_due(now_ms=62_000, retention_ms=60_000, retention_bytes=-1, upper=30)
    assert not s.retention_due(now_ms=61_000, retention_ms=60_000, retention_bytes=-1, upper=30)
    assert not s.retention_due(now_ms=62_000, retention_ms=60_000, retention_bytes=-1, upper=9)  # not below the HW
    assert s.retention_due(now_ms=0, retention_ms=-1, retention_bytes=150, upper=30)  # 250 - 100 >= 150
    assert not s.retention_due(now_ms=0, retention_ms=-1, retention_bytes=151, upper=30)
    assert not s._replace(first_size=0).retention_due(now_ms=10**9, retention_ms=0, retention_bytes=0, upper=30)


@pytest.mark.anyio
async def test_an_open_transaction_and_a_compacted_topic_are_opened_at_start(tmp_path):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    await broker.create_topic("t", 2)
    await broker.create_topic("c", 1, {"cleanup.policy": "compact"})
    txn = batch(b"in a transaction", producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
    out = broker.replica_manager.append(1, 5, [("t", 0, batch(b"before")), ("t", 0, txn), ("t", 1, batch(b"x")),
                                               ("c", 0, batch(b"kept"))])
    assert all(r.appended for r in out)
    broker.close()
    marker = take_clean_marker(tmp_path)
    assert marker["t-0"] == (0, len(batch(b"before")) + len(txn))  # its active segment alone
    write_clean_marker(tmp_path, marker)
    broker = started(tmp_path)
    try:
        assert not is_dormant(broker, 0) and is_dormant(broker, 1)
        assert broker.partition("c", 0).dormant is None
        p = broker.partition("t", 0)
        assert not p.log.recovered and (p.last_stable_offset, p.high_watermark) == (1, 2)
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_new_leader_epoch_wakes_it_and_is_recorded(tmp_path):
    await stopped(tmp_path)
    broker = started(tmp_path)
    try:
        p = broker.partition("t", 2)
        info = dataclasses.replace(next(i for i in broker.image.topics["t"].partitions if i.index == 2),
                                   leader_epoch=p.leader_epoch + 3)
        p.apply_partition_state(info, broker.image)
        assert p.dormant is None and p.epochs.latest_entry == (info.leader_epoch, 2)
        assert (tmp_path / "t-2" / "leader-epoch-checkpoint").read_text().splitlines()[-1] == f"{info.leader_epoch} 2"
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_marker_of_an_older_kshim_opens_every_log_without_recovery(tmp_path):
    await stopped(tmp_path)
    summaries = take_clean_marker(tmp_path)
    lines = [f"{name} {s.active_base} {s.active_size}" for name, s in sorted(summaries.items())]
    (tmp_path / CLEAN_MARKER).write_text("\n".join(["kshim clean shutdown v2", *lines, ""]))
    broker = started(tmp_path)
    try:
        replicas = broker.replica_manager.replicas()
        assert all(r.dormant is None and not r.log.recovered for r in replicas)
        assert [r.log_end_offset for r in replicas] == [2] * PARTITIONS
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_log_changed_while_stopped_is_opened_at_the_start(tmp_path):
    # the active segment's size and mtime are checked against the summary at the start: a batch
    # appended by hand (or a byte flipped in place) is seen then, as when every log was opened
    await stopped(tmp_path)
    with open(tmp_path / "t-0" / "00000000000000000000.log", "ab") as f:
        f.write(batch(b"appended by hand", base_offset=2))
    with open(tmp_path / "t-1" / "00000000000000000000.log", "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))  # the last batch's CRC no longer matches
    broker = started(tmp_path)
    try:
        p0, p1 = broker.partition("t", 0), broker.partition("t", 1)
        assert p0.dormant is None and p0.log.recovered and p0.log_end_offset == 3
        assert p1.dormant is None and p1.log_end_offset == 1  # cut at the corrupt batch
        assert is_dormant(broker, 2) and is_dormant(broker, 3)
    finally:
        broker.close()
