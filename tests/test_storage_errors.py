"""A full disk (ENOSPC injected on the log's own descriptors): the append fails with
KAFKA_STORAGE_ERROR and leaves nothing behind, appends resume when space returns, and a failed
index write never fails or tears an append (the indexes are rebuilt from the log)."""
from __future__ import annotations

import errno
import os

import pytest

from kshim.broker import BrokerConfig
from kshim.log import segment as segment_module
from kshim.log.log import Log, LogConfig
from kshim.standalone import open_standalone
from wire.errors import ErrorCode
from wire.records import decode_all, encode_batch

REAL_WRITE = os.write


def full_disk_on(monkeypatch, paths: set[str]) -> None:
    """Writes to these files fail (by path: segment descriptors are a cache, opened again on use)."""
    def write(fd: int, data) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") in paths:
            raise OSError(errno.ENOSPC, "No space left on device")
        return REAL_WRITE(fd, data)
    monkeypatch.setattr(segment_module.os, "write", write)


def values(log: Log) -> list[bytes]:
    return [r.value for r in decode_all(log.read(0, 1 << 20))]


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_a_full_disk_fails_the_append_whole_and_appends_resume(tmp_path, monkeypatch, caplog):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        await broker.create_topic("t", 1)
        rm = broker.replica_manager
        assert rm.append(1, 5, [("t", 0, encode_batch([(None, b"a")]))])[0].error == ErrorCode.NONE
        partition = rm.partition("t", 0)
        seg = partition.log._segments[-1]
        size, end = os.stat(seg.stem + ".log").st_size, partition.log.log_end_offset
        full_disk_on(monkeypatch, {seg.stem + ".log"})
        for value in (b"lost-1", b"lost-2"):
            (result,) = rm.append(1, 5, [("t", 0, encode_batch([(None, value)]))])
            assert result.error == ErrorCode.KAFKA_STORAGE_ERROR and not result.appended
        assert os.stat(seg.stem + ".log").st_size == size and partition.log.log_end_offset == end  # nothing torn
        assert caplog.text.count("appends fail with KAFKA_STORAGE_ERROR") == 1  # once per occurrence
        monkeypatch.setattr(segment_module.os, "write", REAL_WRITE)  # space again
        (result,) = rm.append(1, 5, [("t", 0, encode_batch([(None, b"c")]))])
        assert (result.error, result.base_offset) == (ErrorCode.NONE, 1)
        assert "appends work again" in caplog.text
        assert values(partition.log) == [b"a", b"c"]
    finally:
        broker.close()


def test_a_failed_index_write_keeps_the_append_and_the_index_is_rebuilt(tmp_path, monkeypatch):
    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=1))
    for i in range(3):
        log.append(bytearray(encode_batch([(None, b"v%d" % i)])))
    seg = log._segments[-1]
    full_disk_on(monkeypatch, {seg.stem + ".index", seg.stem + ".timeindex"})
    for i in range(3, 6):
        log.append(bytearray(encode_batch([(None, b"v%d" % i)])))  # no exception: the records are written
    assert not os.path.exists(seg.stem + segment_module.INDEX_SUFFIX)
    monkeypatch.setattr(segment_module.os, "write", REAL_WRITE)
    assert [r.value for r in decode_all(log.read(4, 1 << 20))] == [b"v4", b"v5"]  # lookups use memory
    log.close()
    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=1))
    try:
        assert log.log_end_offset == 6 and values(log) == [b"v%d" % i for i in range(6)]
        assert [r.value for r in decode_all(log.read(4, 1 << 20))] == [b"v4", b"v5"]
        assert os.path.exists(log._segments[-1].stem + segment_module.INDEX_SUFFIX)  # rebuilt
    finally:
        log.close()


@pytest.mark.anyio
async def test_a_full_disk_fails_a_transaction_marker_with_a_retriable_error(tmp_path, monkeypatch, caplog):
    from kshim.replica import TxnMarker

    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        await broker.create_topic("t", 1)
        rm = broker.replica_manager
        partition = rm.partition("t", 0)
        txn = encode_batch([(None, b"in-txn")], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
        assert rm.append(1, 5, [("t", 0, txn)])[0].error == ErrorCode.NONE
        end = partition.log.log_end_offset
        full_disk_on(monkeypatch, {partition.log._segments[-1].stem + ".log"})
        marker = TxnMarker(7, 0, True, 0)
        result = await rm.append_and_wait("t", 0, marker, 5)
        assert result.error == ErrorCode.KAFKA_STORAGE_ERROR and not result.appended
        assert partition.log.log_end_offset == end and partition.last_stable_offset == 0  # still open
        assert caplog.text.count("appends fail with KAFKA_STORAGE_ERROR") == 1
        monkeypatch.setattr(segment_module.os, "write", REAL_WRITE)
        result = await rm.append_and_wait("t", 0, marker, 5)  # the coordinator's retry
        assert result.error == ErrorCode.NONE and partition.last_stable_offset == end + 1
    finally:
        broker.close()


def test_a_full_disk_on_a_follower_leaves_its_log_as_it_was(tmp_path, monkeypatch, caplog):
    from kshim.configs import resolve
    from kshim.replica.partition import Partition

    follower = Partition("t", 0, tmp_path / "t-0", resolve({}).log_config(), node_id=1, leader_id=0)
    follower.append_as_follower(encode_batch([(None, b"a")]), 1)
    second = bytearray(encode_batch([(None, b"b"), (None, b"c")]))
    second[0:8] = (1).to_bytes(8, "big")  # the leader's offsets: base offset 1 (outside the CRC)
    full_disk_on(monkeypatch, {follower.log._segments[-1].stem + ".log"})
    for _ in range(2):
        with pytest.raises(OSError):
            follower.append_as_follower(bytes(second), 3)
    assert follower.log_end_offset == 1 and values(follower.log) == [b"a"]
    assert caplog.text.count("appends fail with KAFKA_STORAGE_ERROR") == 1
    monkeypatch.setattr(segment_module.os, "write", REAL_WRITE)
    follower.append_as_follower(bytes(second), 3)  # the fetcher's next try
    assert follower.log_end_offset == 3 and values(follower.log) == [b"a", b"b", b"c"]
    assert "appends work again" in caplog.text
    follower.close()
