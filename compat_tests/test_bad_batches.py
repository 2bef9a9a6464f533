"""Produced batches are checked before they are stored (docs/robustness.md): bombs, unknown codecs,
garbage payloads and wrong record counts fail their partition with Kafka's error, nothing of them
is stored, the broker stays small and quick, and the partition keeps working for everyone."""
from __future__ import annotations

import cramjam
import pytest
from confluent_kafka import Producer
from kafka import TopicPartition

from compat_tests.kshim_process import KshimProcess
from compat_tests.raw_kafka import RawConnection, consume_all, consumer, list_offsets_latest, rebuild_batch
from compat_tests.test_connection_limits import rss, worst_latency_while
from wire.records import ZSTD, encode_batch, read_header

MiB = 1024 * 1024
CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD = 2, 76, 87
THREE = [(b"k%d" % i, b"v%d" % i) for i in range(3)]


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


def test_bombs_are_refused_without_memory_or_stalls(broker, topic_name):
    assert produce_raw(broker.bootstrap, topic_name, encode_batch([(b"before", b"1")])) == 0
    baseline = rss(broker.pid)
    payload = bomb()
    codes: list[int] = []

    def attack() -> None:
        with RawConnection(broker.bootstrap) as conn:
            for _ in range(20):
                codes.append(conn.produce({(topic_name, 0): payload})[(topic_name, 0)].error_code)

    worst = worst_latency_while(attack, broker.bootstrap)
    assert codes == [CORRUPT_MESSAGE] * 20
    assert worst < 0.1, f"a bystander's ApiVersions took {worst * 1000:.0f} ms during the bombs"
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
