"""Fetch's zero-copy path: Log.read(regions=True) hands out FileRecords (file regions) that the
server sends with os.sendfile on plaintext connections and preads on TLS ones. Property: both
paths give exactly the bytes of the copy path (Log.read), whole responses included, over random
logs, fetch offsets and sizes, segment rolls, and a segment deleted between the read and the send."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kshim.log.log import Log, LogConfig
from kshim.net.server import send_all
from wire import codec
from wire.primitives import FileRecords, GatherStream
from wire.errors import ErrorCode
from wire.records import encode_batch

FETCH = 1


def sent_through_socket(chunks: list) -> bytes:
    """What send_all puts on a non-blocking socket (sendfile for file regions), read back whole."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    got = bytearray()

    async def main() -> None:
        async def reader() -> None:
            while True:  # bounded: ends at the sender's close
                await anyio.wait_readable(b)
                try:
                    data = b.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    return
                got.extend(data)

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            try:
                await send_all(a, chunks)
            finally:
                a.close()

    try:
        anyio.run(main)
    finally:
        b.close()
    return bytes(got)


def response(records) -> list:
    """A Fetch v16 response's chunks holding `records` for one partition (as the connection core encodes)."""
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic_id": uuid.UUID(int=1), "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5,
            "log_start_offset": 0, "records": records, "aborted_transactions": None}]}]}
    stream = GatherStream(b"head")
    codec.encode_into(FETCH, 16, "response", body, stream)
    return stream.finish()


@pytest.mark.unit
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.sampled_from([10, 300, 5_000, 40_000, 120_000]), min_size=1, max_size=30),
       segment_bytes=st.sampled_from([20_000, 100_000, 400_000, 10**7]),
       reads=st.lists(st.tuples(st.floats(0, 1), st.sampled_from([1, 500, 30_000, 65_536, 70_000, 300_000, 10**7]),
                                st.booleans()), min_size=1, max_size=6),
       delete_first=st.booleans())
def test_sendfile_and_copy_paths_give_identical_bytes(sizes, segment_bytes, reads, delete_first):
    with tempfile.TemporaryDirectory() as tmp:
        log = Log(Path(tmp) / "p0", LogConfig(segment_bytes=segment_bytes, index_interval_bytes=4096))
        for i, size in enumerate(sizes):
            log.append(bytearray(encode_batch([(b"k", bytes([i % 256]) * size, None, 1000 + i)])))
        leo = log.log_end_offset
        taken = []
        for fraction, max_bytes, bounded in reads:
            offset = min(int(fraction * leo), leo)
            bound = max(offset, leo - 1) if bounded else None
            copy = log.read(offset, max_bytes, bound)
            regions = log.read(offset, max_bytes, bound, regions=True)
            assert len(regions) == len(copy)
            taken.append((copy, regions))
        if delete_first:  # retention deleted every segment between the read and the send
            log.close()
            shutil.rmtree(tmp + "/p0")
        for copy, regions in taken:
            if isinstance(regions, FileRecords):
                assert regions.read() == copy  # the TLS (copy) path
            assert sent_through_socket(response(regions)) == b"".join(bytes(c) for c in response(copy))
            if isinstance(regions, FileRecords):
                regions.close()
                assert regions.parts == []
        if not delete_first:
            log.close()


@pytest.mark.unit
def test_a_segment_truncated_under_a_send_ends_the_connection(tmp_path):
    log = Log(tmp_path / "p0", LogConfig())
    for i in range(4):
        log.append(bytearray(encode_batch([(b"k", b"v" * 50_000, None, 1000 + i)])))
    regions = log.read(0, 10**7, regions=True)
    assert isinstance(regions, FileRecords)
    segment = next((tmp_path / "p0").glob("*.log"))
    os.truncate(segment, 60_000)
    with pytest.raises(ValueError):
        regions.read()
    with pytest.raises((ConnectionAbortedError, ExceptionGroup)):  # via the test's task group
        sent_through_socket(response(regions))
    regions.close()
    log.close()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fetch_body(offsets: dict[int, int], max_bytes: int, partition_max: int, min_bytes: int = 0,
               max_wait_ms: int = 0) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_epoch": -1, "topics": [{"topic": "t", "partitions": [
                {"partition": p, "fetch_offset": o, "partition_max_bytes": partition_max}
                for p, o in offsets.items()]}]}


@pytest.mark.unit
@pytest.mark.anyio
async def test_no_descriptor_outlives_its_fetch(tmp_path, monkeypatch):
    """A flood of fetches (sent, long-polled and read again, out of range) on several connections,
    then a connection that asks for megabytes, reads nothing and resets: the process holds as many
    descriptors as before, and the regions were sent with sendfile."""
    import random

    from kshim.net import server as server_module
    from tests.test_replication import cluster
    from tests.waiting import wait_until
    from wire.headers import encode_request_header, frame
    from wire.records import decode_all

    sendfiles = 0
    real_send_region = server_module.send_region

    async def counting_send_region(*args) -> None:
        nonlocal sendfiles
        sendfiles += 1
        await real_send_region(*args)

    monkeypatch.setattr(server_module, "send_region", counting_send_region)
    async with cluster(tmp_path, n=1) as c:
        c.controller.create_topic("t", 2, 1)
        conn = await c.connect(0)
        for partition in (0, 1):
            for i in range(8):
                resp = await conn.request(0, 9, {"acks": 1, "timeout_ms": 5000, "topic_data": [
                    {"name": "t", "partition_data": [{"index": partition, "records": encode_batch(
                        [(None, bytes([i]) * 60_000)])}]}]})
                assert resp.responses[0].partition_responses[0].error_code == 0
        await conn.request(1, 12, fetch_body({0: 0, 1: 0}, 10**7, 10**7))  # every segment opened once
        baseline = open_fds()
        rng = random.Random(18)

        async def flood(conn) -> None:
            for _ in range(60):
                offsets = {0: rng.randrange(0, 9), 1: rng.randrange(0, 9)}
                kind = rng.randrange(3)
                if kind == 0:  # plain reads, limits at random
                    resp = await conn.request(1, 12, fetch_body(offsets, rng.choice([1, 100_000, 10**7]),
                                                                rng.choice([1, 70_000, 10**7])))
                    for p in resp.responses[0].partitions:
                        assert p.error_code == 0
                        values = [r.value for r in decode_all(bytes(p.records or b""))]
                        assert all(len(v) == 60_000 for v in values)
                elif kind == 1:  # too little for min_bytes: read, released, read again after the wait
                    await conn.request(1, 12, fetch_body(offsets, 10**7, 10**7, min_bytes=10**8, max_wait_ms=5))
                else:  # one partition out of range
                    resp = await conn.request(1, 12, fetch_body({0: 99, 1: offsets[1]}, 10**7, 10**7))
                    assert resp.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE

        conns = [conn] + [await c.connect(0) for _ in range(2)]
        async with anyio.create_task_group() as tg:
            for each in conns:
                tg.start_soon(flood, each)
        for each in conns:
            await each.aclose()
        assert sendfiles > 0

        # a consumer that asks for ~1 MB 20 times, reads nothing and resets the connection
        raw = socket.create_connection(("127.0.0.1", c.brokers[0].config.port))
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for correlation in range(20):
            raw.sendall(frame(encode_request_header(1, 12, correlation, "dropper")
                              + codec.encode(1, 12, "request", fetch_body({0: 0, 1: 0}, 10**7, 10**7))))
        await wait_until(lambda: FileRecords.open_fds > 0, message="regions held for the stalled reader")
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        raw.close()  # RST: the server's send fails mid-region
        await wait_until(lambda: FileRecords.open_fds == 0 and open_fds() <= baseline, timeout_s=20,
                         message=f"descriptors back to {baseline} (now {open_fds()}, regions {FileRecords.open_fds})")


@pytest.mark.unit
def test_reads_copy_past_the_region_descriptor_bound_and_for_small_pieces(tmp_path, monkeypatch):
    from kshim.log import log as log_module

    log = Log(tmp_path / "p0", LogConfig(segment_bytes=100_000))
    for i in range(6):
        log.append(bytearray(encode_batch([(b"k", bytes([i]) * 40_000, None, 1000 + i)])))
    small = log.read(0, 1, regions=True, max_offset=None, min_one=True)  # one 40 KB batch: a region
    assert isinstance(small, FileRecords)
    monkeypatch.setattr(log_module, "REGION_MIN_BYTES", 10**6)
    assert isinstance(log.read(0, 10**7, None, True, True), bytes)  # every piece under the minimum
    monkeypatch.setattr(log_module, "REGION_MIN_BYTES", 1)
    monkeypatch.setattr(log_module, "MAX_REGION_FDS", FileRecords.open_fds + 1)
    capped = log.read(0, 10**7, None, True, True)  # one region left: the other segments are copied
    assert isinstance(capped, FileRecords) and sum(not isinstance(p, bytes) for p in capped.parts) == 1
    assert capped.read() == log.read(0, 10**7)
    assert isinstance(log.read(0, 10**7, None, True, True), bytes)  # the bound is reached: all copied
    before = FileRecords.open_fds
    small.close()
    capped.close()
    assert FileRecords.open_fds == before - 2
    log.close()
