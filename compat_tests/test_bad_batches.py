"""Produced batches are checked before they are stored (docs/robustness.md): bombs, unknown codecs,
garbage payloads and wrong record counts fail their partition with Kafka's error, nothing of them
is stored, the broker stays small, others are answered while a batch is checked, and the partition
keeps working for everyone."""
from __future__ import annotations

import select
import socket

import cramjam
import pytest
from confluent_kafka import Producer
from kafka import TopicPartition

from compat_tests.kshim_process import KshimProcess
from compat_tests.raw_kafka import (PRODUCE, RawConnection, consume_all, consumer, list_offsets_latest, produce_body,
                                    rebuild_batch)
from compat_tests.test_connection_limits import round_trips_during, rss
from wire.records import ZSTD, encode_batch, read_header

MiB = 1024 * 1024
CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD = 2, 76, 87
THREE = [(b"k%d" % i, b"v%d" % i) for i in range(3)]
SLOW_RECORDS = 100_000
# a bystander's round trips answered while the slow batch is checked: dozens when the check runs
# beside the event loop (the loop gets the GIL back every few ms); with the check on the loop none,
# or one that slipped in before the broker read the batch
ANSWERED_DURING_CHECK = 3


@pytest.fixture
def broker(tmp_path):
    b = KshimProcess(tmp_path / "data", "--max-request-bytes", str(8 * MiB)).start()
    yield b
    b.kill()


def produce_raw(bootstrap: str, topic: str, batch: bytes) -> int:
    with RawConnection(bootstrap) as conn:
        return conn.produce({(topic, 0): batch})[(topic, 0)].error_code


def bomb() -> bytes:
    """A few KB of zstd that claim 9 M records and inflate to 64 MiB of zeros."""
    return rebuild_batch(encode_batch(THREE, compression=ZSTD), records_section=bytes(cramjam.zstd.compress(bytes(64 * MiB))),
                         records_count=9_000_000, last_offset_delta=8_999_999)


def slow_to_check() -> bytes:
    """A zstd batch of SLOW_RECORDS empty records (about 80 KB) whose header counts one more: its
    check walks every record before it finds the last missing (CORRUPT_MESSAGE), a fraction of a
    second of the broker's CPU."""
    batch = encode_batch([(None, b"")] * SLOW_RECORDS, compression=ZSTD)
    return rebuild_batch(batch, records_count=SLOW_RECORDS + 1, last_offset_delta=SLOW_RECORDS)


def readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def test_bombs_are_refused_without_memory_or_stalls(broker, topic_name):
    assert produce_raw(broker.bootstrap, topic_name, encode_batch([(b"before", b"1")])) == 0
    baseline = rss(broker.pid)
    payload, slow = bomb(), slow_to_check()
    with RawConnection(broker.bootstrap) as attacker:
        codes = [attacker.produce({(topic_name, 0): payload})[(topic_name, 0)].error_code for _ in range(20)]
        # the check runs beside the event loop: while a batch is checked, others are answered (the
        # attacker's answer still to come), however long either takes
        cid = attacker.send_request(PRODUCE, 9, produce_body({(topic_name, 0): slow}))
        answered = round_trips_during(broker.bootstrap, lambda: not readable(attacker.sock),
                                      lambda: readable(attacker.sock))
        got, response = attacker.read_response(PRODUCE, 9)
        assert got == cid
        codes.append(response.responses[0].partition_responses[0].error_code)
    assert codes == [CORRUPT_MESSAGE] * 21
    assert answered >= ANSWERED_DURING_CHECK, \
        f"a bystander was answered {answered} times while a batch was checked: the check holds the event loop"
    assert rss(broker.pid) - baseline < 100 * MiB
    assert [r.value for r in consume_all(broker.bootstrap, topic_name)] == [b"1"]  # nothing of them stored


def test_bad_batches_fail_their_partition_and_store_nothing(broker, topic_name):
    good = encode_batch(THREE, compression=ZSTD)
    codec_bits = read_header(good).attributes & ~7
    assert produce_raw(broker.bootstrap, topic_name, rebuild_batch(good, attributes=codec_bits | 6)) == UNSUPPORTED_COMPRESSION_TYPE
    assert produce_raw(broker.bootstrap, topic_name, rebuild_batch(good, records_section=b"\x28\xb5\x2f\xfd garbage")) == CORRUPT_MESSAGE
    assert produce_raw(broker.bootstrap, topic_name, rebuild_batch(good, records_count=2, last_offset_delta=1)) == CORRUPT_MESSAGE
    plain = encode_batch(THREE)
    assert produce_raw(broker.bootstrap, topic_name, rebuild_batch(plain, records_count=10**6, last_offset_delta=10**6 - 1)) == INVALID_RECORD
    # a good batch before a bad one in the same partition is kept; the partition answers the error
    assert produce_raw(broker.bootstrap, topic_name, good + rebuild_batch(good, records_section=b"junk")) == CORRUPT_MESSAGE
    assert list_offsets_latest(broker.bootstrap, topic_name, 0) == 3
    assert [r.value for r in consume_all(broker.bootstrap, topic_name)] == [b"v0", b"v1", b"v2"]
    # lookups by time walk the stored batches: they keep working
    c = consumer(broker.bootstrap)
    try:
        tp = TopicPartition(topic_name, 0)
        assert c.offsets_for_times({tp: 0})[tp].offset == 0
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_clients_compressed_batches_are_accepted(broker, topic_name, codec):
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 50})
    errors: list = []
    for i in range(500):
        p.produce(topic_name, key=b"k%d" % i, value=b"value-%d " % i * 20, partition=0,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(20) == 0 and errors == []
    values = [r.value for r in consume_all(broker.bootstrap, topic_name)]
    assert values == [b"value-%d " % i * 20 for i in range(500)]
