"""A broker's restart (docs/storage.md, "Durability and recovery"): a clean stop leaves one
clean-shutdown marker per log dir naming the logs it closed cleanly, and the next start opens
those without recovery; after a crash (no marker) each log checks its active segment only and
cuts a torn last batch; older segments are trusted as they are."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.log.log_dirs import CLEAN_MARKER, take_clean_marker, write_clean_marker
from kshim.log.offset_checkpoint import REPLICATION_OFFSET_CHECKPOINT, format_offsets, read_offsets
from kshim.standalone import open_standalone
from wire.records import encode_batch

PARTITIONS = 40


@pytest.fixture
def anyio_backend():
    return "asyncio"


def batch(value: bytes) -> bytes:
    return encode_batch([(b"k", value, None, 1)])


async def filled(data_dir: Path, partitions: int = PARTITIONS, configs: dict | None = None) -> Broker:
    broker = open_standalone(BrokerConfig(data_dir=data_dir))
    await broker.create_topic("t", partitions, configs)
    rm = broker.replica_manager
    for i in range(partitions):
        out = rm.append(1, 5, [("t", i, batch(b"one")), ("t", i, batch(b"two"))])
        assert isinstance(out, list) and all(r.appended for r in out)
    return broker


def crash(broker: Broker) -> None:
    """Like kill -9: descriptors go, nothing is flushed, snapshotted or marked."""
    for replica in broker.replica_manager.replicas():
        for seg in replica.log._segments:
            seg.close()
        replica.log._closed = True


def ends(broker: Broker) -> list[int]:
    return [broker.partition("t", i).log_end_offset for i in range(PARTITIONS)]


@pytest.mark.anyio
async def test_a_clean_restart_skips_recovery_and_keeps_every_record(tmp_path):
    broker = await filled(tmp_path)
    broker.close()
    size = len(batch(b"one")) + len(batch(b"two"))
    summaries = take_clean_marker(tmp_path)
    assert sorted(summaries) == sorted(f"t-{i}" for i in range(PARTITIONS))
    s = summaries["t-3"]
    assert (s.active, s.log_start_offset, s.log_end_offset, s.size_bytes, s.leader_epoch) == ((0, size), 0, 2, size, 0)
    write_clean_marker(tmp_path, summaries)
    assert not any((tmp_path / f"t-{i}" / ".kshim-clean-shutdown").exists() for i in range(PARTITIONS))
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert not (tmp_path / CLEAN_MARKER).exists()  # removed at start: a crash from here on is seen
        assert ends(broker) == [2] * PARTITIONS
        replicas = broker.replica_manager.replicas()
        assert all(r.dormant is not None and r.is_leader for r in replicas)  # nothing opened yet
        assert [r for r in replicas if r.log.recovered] == []  # opened on first use, without recovery
        assert bytes(broker.partition("t", 7).log.read(0, 1 << 20)).count(b"two") == 1
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_crash_recovers_the_tail_and_cuts_a_torn_last_batch(tmp_path):
    broker = await filled(tmp_path)
    crash(broker)
    seg = tmp_path / "t-3" / "00000000000000000000.log"
    with open(seg, "r+b") as f:  # the second batch was half written when the process died
        f.truncate(seg.stat().st_size - 5)
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert all(r.log.recovered for r in broker.replica_manager.replicas())
        assert ends(broker) == [1 if i == 3 else 2 for i in range(PARTITIONS)]
        assert seg.stat().st_size == len(batch(b"one"))
        out = broker.replica_manager.append(1, 5, [("t", 3, batch(b"again"))])
        assert out[0].base_offset == 1
    finally:
        broker.close()


@pytest.mark.anyio
async def test_after_a_crash_only_the_active_segment_is_checked(tmp_path):
    # tiny segments: every batch but the last sits in an older segment, which recovery trusts as
    # it is (as Kafka trusts the segments below its recovery point); only the active one is scanned
    broker = await filled(tmp_path, 2, {"segment.bytes": "100"})
    rm = broker.replica_manager
    for _ in range(3):
        rm.append(1, 5, [("t", 0, batch(b"more"))])
    crash(broker)
    d = tmp_path / "t-0"
    logs = sorted(p for p in d.iterdir() if p.suffix == ".log")
    assert len(logs) >= 3
    older = logs[0]
    before = older.read_bytes()
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        log = broker.partition("t", 0).log
        assert log.recovered and broker.partition("t", 0).log_end_offset == 5
        assert older.read_bytes() == before
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_log_the_marker_does_not_name_is_recovered(tmp_path):
    broker = await filled(tmp_path)
    broker.close()
    logs = take_clean_marker(tmp_path)
    del logs["t-5"]  # say its close had failed
    write_clean_marker(tmp_path, logs)
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert [r.index for r in broker.replica_manager.replicas() if r.log.recovered] == [5]
        assert ends(broker) == [2] * PARTITIONS
    finally:
        broker.close()


def test_an_unreadable_marker_vouches_for_nothing(tmp_path):
    (tmp_path / CLEAN_MARKER).write_bytes(b"\xff garbage")
    assert take_clean_marker(tmp_path) == {}
    assert not (tmp_path / CLEAN_MARKER).exists()
    (tmp_path / CLEAN_MARKER).write_text("kshim clean shutdown v1\nt-0\n")  # a list without segment ends
    assert take_clean_marker(tmp_path) == {}


@pytest.mark.anyio
async def test_a_log_written_after_the_marker_is_recovered(tmp_path):
    # something appended to t-2 after the clean stop (a torn write of another process, a
    # restored copy): the marker's recorded segment size no longer matches, so it is checked
    broker = await filled(tmp_path)
    broker.close()
    seg = tmp_path / "t-2" / "00000000000000000000.log"
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(batch(b"three")[:-3])
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert [r.index for r in broker.replica_manager.replicas() if r.log.recovered] == [2]
        assert ends(broker) == [2] * PARTITIONS and seg.stat().st_size == size
    finally:
        broker.close()


@pytest.mark.anyio
async def test_kill_9_after_a_clean_start_recovers(tmp_path):
    broker = await filled(tmp_path)
    broker.close()
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))  # clean: the marker is taken
    out = broker.replica_manager.append(1, 5, [("t", i, batch(b"three")) for i in range(PARTITIONS)])
    assert all(r.appended for r in out)
    crash(broker)
    assert not (tmp_path / CLEAN_MARKER).exists()
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert all(r.log.recovered for r in broker.replica_manager.replicas())
        assert ends(broker) == [3] * PARTITIONS
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_clean_stop_twice_in_a_row_rewrites_nothing_unchanged(tmp_path):
    broker = await filled(tmp_path, 4)
    broker.close()
    checkpoint = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    stamp = os.stat(checkpoint).st_mtime_ns
    # no idempotent producer wrote here: no producer-state snapshot, no high-watermark file each
    assert {p.name for p in (tmp_path / "t-0").iterdir()} == {
        "00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex",
        "leader-epoch-checkpoint", "partition.metadata"}
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    broker.close()
    assert os.stat(checkpoint).st_mtime_ns == stamp


@pytest.mark.anyio
async def test_high_watermarks_are_one_file_per_log_dir_and_come_back_after_a_restart(tmp_path):
    broker = await filled(tmp_path, 4)
    broker.close()
    lines = (tmp_path / REPLICATION_OFFSET_CHECKPOINT).read_text().splitlines()
    assert lines[:2] == ["0", "4"] and sorted(lines[2:]) == [f"t {i} 2" for i in range(4)]  # Kafka's format
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert [broker.partition("t", i).high_watermark for i in range(4)] == [2] * 4
    finally:
        broker.close()


@pytest.mark.anyio
async def test_an_older_data_dir_with_a_high_watermark_file_per_partition_still_loads(tmp_path):
    """Before the per-log-dir file, each partition kept `high-watermark`: read when the log dir's
    file does not name the partition (a high watermark read back unchanged is not rewritten: the
    log dir's file is then written only once one moves)."""
    broker = await filled(tmp_path, 4)
    broker.close()
    (tmp_path / REPLICATION_OFFSET_CHECKPOINT).unlink()
    for i in range(4):
        (tmp_path / f"t-{i}" / "high-watermark").write_text("2\n")
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert [broker.partition("t", i).high_watermark for i in range(4)] == [2] * 4
        assert [r for r in broker.replica_manager.replicas() if r.log.recovered] == []
        assert not any(r.hw_moved for r in broker.replica_manager.replicas())  # 2 was read from the files
        out = broker.replica_manager.append(1, 5, [("t", 3, batch(b"three"))])
        assert isinstance(out, list) and out[0].appended
    finally:
        broker.close()
    lines = (tmp_path / REPLICATION_OFFSET_CHECKPOINT).read_text().splitlines()
    assert sorted(lines[2:]) == ["t 0 2", "t 1 2", "t 2 2", "t 3 3"]


def test_an_unreadable_replication_offset_checkpoint_is_ignored(tmp_path):
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    path.write_text("0\n3\nt 0 5\n")  # says 3 entries, has 1: torn
    assert read_offsets(path) == {}
    path.write_text(format_offsets([("a-b", 0, 5), ("a", 12, 7)]))
    assert read_offsets(path) == {"a-b-0": 5, "a-12": 7}
    assert read_offsets(tmp_path / "missing") == {}


@pytest.mark.anyio
async def test_recovery_leaves_index_files_that_already_match_the_log(tmp_path):
    """After a kill -9 every active segment is scanned and its indexes rebuilt. A file already
    holding the rebuilt entries is not written (thousands of small logs: reads only), the final
    time-index entry an earlier clean stop wrote included; a stale one is overwritten in place."""
    broker = await filled(tmp_path, 2)
    broker.close()  # each active segment's time index gets its final entry
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    crash(broker)
    stems = [tmp_path / f"t-{i}" / "00000000000000000000" for i in range(2)]

    def held() -> list[tuple[bytes, int]]:
        return [(Path(f"{s}.timeindex").read_bytes(), os.stat(f"{s}.timeindex").st_mtime_ns) for s in stems]
    before = held()
    assert [len(data) for data, _ in before] == [12, 12]  # the final entry: timestamp, offset
    with open(f"{stems[1]}.index", "wb") as f:
        f.write(b"\0" * 8)  # an entry the log does not have
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert all(r.log.recovered for r in broker.replica_manager.replicas())
        assert held() == before  # read, not written
        assert os.path.getsize(f"{stems[1]}.index") == 0
        assert [broker.partition("t", i).log_end_offset for i in range(2)] == [2, 2]
    finally:
        broker.close()
    assert held() == before  # the next clean stop adds no second final entry either
