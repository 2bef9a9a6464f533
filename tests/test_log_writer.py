"""Appends through the log writer (kshim/log/writer.py): the speed costs no correctness. Many
producers on one partition keep their order and get contiguous offsets (across segment rolls),
a retried batch still in flight is recognised as a duplicate, a failed write is
KAFKA_STORAGE_ERROR for that append only, and followers append through it too."""
from __future__ import annotations

import dataclasses
import errno
import os
import random

import anyio
import pytest

from kshim.log.log import LogConfig
from kshim.log.writer import LogWriter
from kshim.replica.partition import Partition
from wire.errors import ErrorCode
from wire.records import decode_all, encode_batch


@pytest.fixture
def anyio_backend():
    return "asyncio"


def leader(tmp_path, writer: LogWriter | None, segment_bytes: int = 4096, name: str = "t") -> Partition:
    p = Partition(name, 0, tmp_path / f"{name}-0", LogConfig(segment_bytes=segment_bytes, index_interval_bytes=256))
    p.leader_id, p.replicas, p.isr = 0, (0,), (0,)
    p.writer = writer
    p.inline_append_max = 0  # every append through the writer (the inline path has its own test)
    return p


@pytest.mark.anyio
async def test_many_producers_keep_order_and_contiguous_offsets(tmp_path):
    writer = LogWriter()
    p = leader(tmp_path, writer)
    producers, batches_each = 8, 40
    answers: list[tuple[int, int, int, int]] = []  # producer, batch, base, last

    async def produce(n: int) -> None:
        pid = 1000 + n if n % 2 else -1  # idempotent and plain producers mixed
        rng = random.Random(n)
        seq = 0
        for b in range(batches_each):
            count = rng.randint(1, 5)
            values = [b"%d:%d:%d" % (n, b, i) for i in range(count)]
            data = encode_batch([(None, v) for v in values], producer_id=pid,
                                producer_epoch=0 if pid >= 0 else -1, base_sequence=seq if pid >= 0 else -1)
            seq += count
            outcome = p.submit_append(data)
            if rng.random() < 0.5:  # keep several requests of one producer in flight, as pipelining does
                await anyio.sleep(0)
            result = outcome if not hasattr(outcome, "__await__") else await outcome
            assert result.error == ErrorCode.NONE, result
            answers.append((n, b, result.base_offset, result.last_offset))

    async with anyio.create_task_group() as tg:
        for n in range(producers):
            tg.start_soon(produce, n)
    writer.close()

    assert p.log.log_end_offset == sum(last - base + 1 for _, _, base, last in answers)
    assert len(p.log.segment_base_offsets) > 3  # the appends rolled segments
    stored = decode_all(p.log.read(0, 1 << 30))
    assert [r.offset for r in stored] == list(range(p.log.log_end_offset))  # contiguous
    for n in range(producers):
        mine = [r.value for r in stored if r.value.split(b":")[0] == b"%d" % n]
        keys = [tuple(int(x) for x in v.split(b":")[1:]) for v in mine]
        assert keys == sorted(keys) and len({k[0] for k in keys}) == batches_each  # each producer's order
    for n, b, base, last in answers:  # each answer names where its batch is
        got = [r.value for r in stored[base:last + 1]]
        assert all(v.startswith(b"%d:%d:" % (n, b)) for v in got)
    assert writer.jobs == producers * batches_each
    p.close()


@pytest.mark.anyio
async def test_retry_of_a_batch_in_flight_is_a_duplicate(tmp_path):
    writer = LogWriter()
    p = leader(tmp_path, writer)
    data = encode_batch([(None, b"a"), (None, b"b")], producer_id=7, producer_epoch=0, base_sequence=0)
    first = p.submit_append(data)
    retry = p.submit_append(data)  # sent again before the first answer
    a, b = await first, await retry
    assert (a.error, b.error) == (ErrorCode.NONE, ErrorCode.NONE)
    assert (a.base_offset, a.last_offset) == (b.base_offset, b.last_offset) == (0, 1)
    assert p.log.log_end_offset == 2
    writer.close()
    p.close()


@pytest.mark.anyio
async def test_failed_write_is_a_storage_error_for_that_append_only(tmp_path, monkeypatch):
    writer = LogWriter()
    p = leader(tmp_path, writer)
    assert (await p.submit_append(encode_batch([(None, b"ok")]))).error == ErrorCode.NONE
    real_write = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    result = await p.submit_append(encode_batch([(None, b"lost")]))
    assert result.error == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.setattr(os, "write", real_write)
    result = await p.submit_append(encode_batch([(None, b"again")]))
    assert (result.error, result.base_offset) == (ErrorCode.NONE, 1)
    assert [r.value for r in decode_all(p.log.read(0, 1 << 20))] == [b"ok", b"again"]
    writer.close()
    p.close()


@pytest.mark.anyio
async def test_a_fenced_leader_write_is_not_written(tmp_path):
    writer = LogWriter()
    p = leader(tmp_path, writer)
    with p.log._write_lock:  # the writer waits for it: the leadership moves before it writes
        pending = p.submit_append(encode_batch([(None, b"x")]))
        p.leader_epoch += 1
    result = await pending
    assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.log.log_end_offset == 0
    writer.close()
    p.close()


@pytest.mark.anyio
async def test_a_bad_batch_keeps_the_batches_written_before_it_and_drops_the_rest(tmp_path):
    """No atomicity across a request through the writer either (docs/consistency.md): a request of
    several batches is written batch by batch; a corrupt one stops the rest and leaves those
    written before it in place, and the next request goes right after them."""
    writer = LogWriter()
    p = leader(tmp_path, writer)
    first = encode_batch([(b"k", b"first-0"), (b"k", b"first-1")])
    second = bytearray(encode_batch([(b"k", b"second")]))
    second[-1] ^= 0xFF  # its CRC no longer matches
    third = encode_batch([(b"k", b"third")])
    pending = p.submit_append(first + bytes(second) + third)
    assert hasattr(pending, "__await__")  # through the writer, a batch at a time
    result = await pending
    assert (result.error, result.base_offset, result.appended_batches) == (ErrorCode.CORRUPT_MESSAGE, 0, 1)
    assert p.log_end_offset == 2
    after = await p.submit_append(encode_batch([(b"k", b"next")]))
    assert (after.error, after.base_offset) == (ErrorCode.NONE, 2)
    assert [(r.offset, r.value) for r in decode_all(p.log.read(0, 1 << 20))] == [
        (0, b"first-0"), (1, b"first-1"), (2, b"next")]
    writer.close()
    p.close()


@pytest.mark.anyio
async def test_a_small_append_is_written_at_once_when_the_writer_holds_none_of_the_partition(tmp_path):
    """The hand-off to the writer thread costs more than a small page-cache write: a small append
    to a partition with nothing at the writer is written on the loop and answered at once; one
    arriving while another is at the writer waits its turn there, and a large one always goes."""
    writer = LogWriter()
    p = leader(tmp_path, writer, segment_bytes=1 << 20)
    p.inline_append_max = 1024
    small = encode_batch([(None, b"s")], producer_id=7, producer_epoch=0, base_sequence=0)
    result = p.submit_append(small)
    assert not hasattr(result, "__await__") and (result.error, result.base_offset) == (ErrorCode.NONE, 0)
    assert writer.jobs == 0 and p.high_watermark == 1
    assert p.submit_append(small).base_offset == 0  # a retry: the duplicate is recognised
    with p.log._write_lock:  # the writer waits for it: the large append stays out meanwhile
        large = p.submit_append(encode_batch([(None, b"x" * 2000)], producer_id=8, producer_epoch=0, base_sequence=0))
        behind = p.submit_append(encode_batch([(None, b"t")], producer_id=7, producer_epoch=0, base_sequence=1))
        assert hasattr(large, "__await__") and hasattr(behind, "__await__")  # in turn, after the large one
    assert ((await large).base_offset, (await behind).base_offset) == (1, 2)
    assert writer.jobs == 2
    assert [r.value for r in decode_all(p.log.read(0, 1 << 20))] == [b"s", b"x" * 2000, b"t"]
    p.log.config = dataclasses.replace(p.log.config, flush_messages=1)
    assert hasattr(p.submit_append(encode_batch([(None, b"f")])), "__await__")  # an fsync stays off the loop
    writer.close()
    p.close()


@pytest.mark.anyio
async def test_a_slow_inline_append_sends_the_data_dir_back_to_the_writer(tmp_path, monkeypatch):
    """Appends on the loop that took long, several within a second (the kernel throttling
    writeback), send every append of that data directory through the writer thread for a while."""
    import time
    from kshim.replica import partition_appends
    writer = LogWriter()
    p = leader(tmp_path, writer, segment_bytes=1 << 20)
    p.inline_append_max = 1024
    real_append = p.log.append

    def slow(*args, **kwargs):
        time.sleep(partition_appends.INLINE_SLOW_S * 2)
        return real_append(*args, **kwargs)
    monkeypatch.setattr(p.log, "append", slow)
    # one slow append is the scheduler, not the disk: the next one is still written on the loop
    first = p.submit_append(encode_batch([(None, b"slow")]))
    assert not hasattr(first, "__await__") and first.error == ErrorCode.NONE  # written, but slowly
    assert writer.inline_paused_until == 0.0
    for i in range(1, partition_appends.INLINE_SLOW_COUNT):  # several within the window: the disk
        assert not hasattr(p.submit_append(encode_batch([(None, b"slow %d" % i)])), "__await__")
    assert writer.inline_paused_until > time.monotonic() + partition_appends.INLINE_PAUSE_S / 2
    monkeypatch.setattr(p.log, "append", real_append)
    second = p.submit_append(encode_batch([(None, b"next")]))
    count = partition_appends.INLINE_SLOW_COUNT
    assert hasattr(second, "__await__") and (await second).base_offset == count  # through the writer
    writer.inline_paused_until = 0.0  # the pause is over
    assert not hasattr(p.submit_append(encode_batch([(None, b"again")])), "__await__")
    writer.close()
    p.close()


@pytest.mark.anyio
async def test_follower_appends_through_the_writer(tmp_path):
    source = leader(tmp_path, None, name="src")
    for i in range(20):
        source.append(encode_batch([(None, b"v%d" % i)] * 3))
    writer = LogWriter()
    follower = Partition("t", 0, tmp_path / "f-0", LogConfig(segment_bytes=1024))
    follower.leader_id, follower.node_id, follower.writer = 0, 1, writer
    follower.inline_append_max = 0  # every append through the writer (the inline path: the next test)
    offset = 0
    while offset < source.log.log_end_offset:  # bounded: each round appends at least one batch
        data = source.read_for_follower(offset, 700)
        assert await follower.submit_follower_append(data) is None
        follower.update_follower_hw(source.high_watermark)
        offset = follower.log.log_end_offset
    assert follower.log.read(0, 1 << 20) == source.log.read(0, 1 << 20)
    assert follower.high_watermark == 60
    bad = bytearray(source.read_for_follower(0, 100))  # does not follow on
    assert isinstance(await follower.submit_follower_append(bad), ValueError)
    writer.close()
    source.close()
    follower.close()


@pytest.mark.anyio
async def test_a_small_follower_append_is_made_by_the_caller_on_the_event_loop(tmp_path):
    """As a leader's: no hand-off to the writer thread for a few KiB (submit_follower_append
    answers None, the fetcher appends at once), unless a flush policy or slow writes say otherwise."""
    source = leader(tmp_path, None, name="src")
    for i in range(3):
        source.append(encode_batch([(None, b"v%d" % i)] * 3))
    writer = LogWriter()
    follower = Partition("t", 0, tmp_path / "f-0", LogConfig())
    follower.leader_id, follower.node_id, follower.writer = 0, 1, writer
    data = source.read_for_follower(0, 1 << 20)
    assert follower.submit_follower_append(data) is None
    follower.append_as_follower(data, source.high_watermark)
    assert follower.log.read(0, 1 << 20) == source.log.read(0, 1 << 20) and follower.high_watermark == 9
    assert writer.jobs == 0
    writer.inline_paused_until = float("inf")  # slow inline writes seen: the writer takes them
    future = follower.submit_follower_append(data)
    assert future is not None and isinstance(await future, ValueError)  # the writer's check: it does not follow on
    writer.close()
    source.close()
    follower.close()
