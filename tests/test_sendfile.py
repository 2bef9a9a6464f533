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

from kshim.log import Log, LogConfig
from kshim.net.server import send_all
from wire import codec
from wire.primitives import FileRecords, GatherStream
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
