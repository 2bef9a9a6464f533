"""Kafka 4's topic configs and dynamic broker configs, through real admin clients and raw bytes:
compression.type recompresses what consumers and the disk see, timestamp bounds refuse batches,
validate_only changes nothing, and broker-level defaults set at runtime survive a restart."""
from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, ResourceType)

from compat_tests.raw_kafka import FETCH, RawConnection, consume_all
from wire.errors import ErrorCode
from wire.records import GZIP, NONE, ZSTD, decode_records, encode_batch, read_header

pytestmark = pytest.mark.process
TIMEOUT = 20


def _admin(kshim) -> AdminClient:
    return AdminClient({"bootstrap.servers": kshim.bootstrap, "log_level": 3})


def _create(admin: AdminClient, topic: str, validate_only: bool = False, **config: str) -> None:
    fut = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=config)],
                              validate_only=validate_only)
    fut[topic].result(timeout=TIMEOUT)
    if not validate_only:
        deadline = time.monotonic() + TIMEOUT
        while topic not in admin.list_topics(timeout=TIMEOUT).topics:
            assert time.monotonic() < deadline, f"topic {topic} never appeared"
            time.sleep(0.05)


def _describe(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(kind, name)
    return admin.describe_configs([res])[res].result(timeout=TIMEOUT)


def _incremental(admin: AdminClient, kind: ResourceType, name: str, validate_only: bool = False,
                 **values: str | None) -> None:
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET if v is not None
                           else AlterConfigOpType.DELETE) for k, v in values.items()]
    res = ConfigResource(kind, name, incremental_configs=entries)
    admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(timeout=TIMEOUT)


def _fetch_raw(bootstrap: str, topic: str) -> bytes:
    with RawConnection(bootstrap) as conn:
        resp = conn.request(FETCH, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                        "isolation_level": 0, "session_epoch": -1, "rack_id": "",
                                        "topics": [{"topic": topic, "partitions": [
                                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    return bytes(resp.responses[0].partitions[0].records or b"")


VALUES = [(None, b"kshim recompresses this record " * 40 + str(i).encode()) for i in range(50)]


@pytest.mark.parametrize("codec_name, sent, stored", [("zstd", NONE, ZSTD), ("uncompressed", GZIP, NONE),
                                                      ("producer", GZIP, GZIP)])
def test_compression_type_decides_the_stored_codec(kshim, topic_name, codec_name, sent, stored):
    admin = _admin(kshim)
    _create(admin, topic_name, **{"compression.type": codec_name})
    batch = encode_batch(VALUES, compression=sent)
    with RawConnection(kshim.bootstrap) as conn:
        [result] = conn.produce({(topic_name, 0): batch}).values()
    assert result.error_code == 0
    raw = _fetch_raw(kshim.bootstrap, topic_name)
    header = read_header(raw)
    assert header.compression == stored  # what a consumer receives
    assert [r.value for r in decode_records(raw)] == [v for _, v in VALUES]
    segment = kshim.data_dir / f"{topic_name}-0" / "00000000000000000000.log"
    on_disk = segment.stat().st_size
    if stored == ZSTD:
        assert on_disk < len(batch) // 5  # the uncompressed batch went to disk compressed
    elif stored == NONE:
        assert on_disk > len(batch) * 5  # the gzip batch went to disk decompressed
    else:
        assert on_disk == len(batch)  # stored as sent
    assert [m.value for m in consume_all(kshim.bootstrap, topic_name)] == [v for _, v in VALUES]


def test_compression_level_applies_when_recompressing(kshim, topic_name):
    """The same records recompressed to gzip on two topics, at level 1 and at level 9: the level 9
    batch is the smaller (text that gzip's default level, 6, compresses as well as 9 and better
    than 1: a level ignored gives both topics the same bytes)."""
    admin = _admin(kshim)
    rng = random.Random(7)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(300)]
    values = [b" ".join(rng.choice(words) for _ in range(100)) for _ in range(200)]
    batch = encode_batch([(None, v) for v in values])
    sizes = {}
    for level in ("1", "9"):
        name = f"{topic_name}-{level}"
        _create(admin, name, **{"compression.type": "gzip", "compression.gzip.level": level})
        with RawConnection(kshim.bootstrap) as conn:
            assert all(r.error_code == 0 for r in conn.produce({(name, 0): batch}).values())
        raw = _fetch_raw(kshim.bootstrap, name)
        assert read_header(raw).compression == GZIP
        assert [r.value for r in decode_records(raw)] == values
        sizes[level] = len(raw)
    assert sizes["9"] < sizes["1"], sizes  # each topic's level reached the codec


def test_timestamp_bounds_refuse_batches_with_invalid_timestamp(kshim, topic_name):
    admin = _admin(kshim)
    _create(admin, topic_name, **{"message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    cases = [(now - 3_600_000, ErrorCode.INVALID_TIMESTAMP),  # an hour old: before.max.ms is one minute
             (now + 2 * 3_600_000, ErrorCode.INVALID_TIMESTAMP),  # two hours ahead: after.max.ms defaults to 1 h
             (now, ErrorCode.NONE)]
    for ts, code in cases:
        with RawConnection(kshim.bootstrap) as conn:
            [result] = conn.produce({(topic_name, 0): encode_batch([(None, b"v", [], ts)])}).values()
        assert result.error_code == code, ts
    # LogAppendTime: the broker's clock replaces the producer's, so no bound applies
    _incremental(admin, ResourceType.TOPIC, topic_name, message_timestamp_type="LogAppendTime")
    with RawConnection(kshim.bootstrap) as conn:
        [result] = conn.produce({(topic_name, 0): encode_batch([(None, b"old", [], now - 3_600_000)])}).values()
    assert result.error_code == 0 and result.log_append_time_ms >= now


def test_validate_only_and_invalid_configs(kshim, topic_name):
    admin = _admin(kshim)
    _create(admin, topic_name, validate_only=True, **{"compression.type": "lz4"})
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics
    for config in ({"compression.type": "brotli"}, {"no.such.config": "1"}, {"remote.storage.enable": "true"}):
        with pytest.raises(KafkaException) as e:
            _create(admin, topic_name, **config)
        assert e.value.args[0].code() == ErrorCode.INVALID_CONFIG
    _create(admin, topic_name, **{"compression.type": "lz4"})
    _incremental(admin, ResourceType.TOPIC, topic_name, validate_only=True, compression_type="zstd")
    assert _describe(admin, ResourceType.TOPIC, topic_name)["compression.type"].value == "lz4"
    res = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"segment.jitter.ms": "5"})
    admin.alter_configs([res], validate_only=True)[res].result(timeout=TIMEOUT)
    configs = _describe(admin, ResourceType.TOPIC, topic_name)
    assert configs["compression.type"].value == "lz4" and configs["segment.jitter.ms"].value == "0"


def test_subtract_of_the_last_cleanup_policy_leaves_it_empty(kshim, topic_name):
    """confluent-kafka's own integration test (test_incremental_alter_configs) against Kafka 4: SUBTRACT
    `delete` from `delete` leaves cleanup.policy="" (Kafka 4.2+: neither retention nor compaction),
    APPEND `compact` to it gives "delete,compact"; DescribeConfigs shows both as the topics' own."""
    admin = _admin(kshim)
    emptied, appended = f"{topic_name}-emptied", f"{topic_name}-appended"
    for topic in (emptied, appended):
        _create(admin, topic, **{"compression.type": "gzip"})
    op = AlterConfigOpType
    resources = [ConfigResource(ResourceType.TOPIC, emptied, incremental_configs=[
                     ConfigEntry("cleanup.policy", "delete", incremental_operation=op.SUBTRACT),
                     ConfigEntry("retention.ms", "5000", incremental_operation=op.SET)]),
                 ConfigResource(ResourceType.TOPIC, appended, incremental_configs=[
                     ConfigEntry("cleanup.policy", "compact", incremental_operation=op.APPEND),
                     ConfigEntry("retention.ms", "10000", incremental_operation=op.SET)])]
    for future in admin.incremental_alter_configs(resources).values():
        assert future.result(timeout=TIMEOUT) is None
    own = {topic: {name: entry.value for name, entry in _describe(admin, ResourceType.TOPIC, topic).items()
                   if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value} for topic in (emptied, appended)}
    assert own == {emptied: {"cleanup.policy": "", "compression.type": "gzip", "retention.ms": "5000"},
                   appended: {"cleanup.policy": "delete,compact", "compression.type": "gzip", "retention.ms": "10000"}}
    _incremental(admin, ResourceType.TOPIC, appended, cleanup_policy="")  # SET "" is taken too
    assert _describe(admin, ResourceType.TOPIC, appended)["cleanup.policy"].value == ""


def test_broker_configs_alter_and_survive_a_restart(fresh_kshim, topic_name):
    admin = _admin(fresh_kshim)
    _create(admin, topic_name)
    broker = _describe(admin, ResourceType.BROKER, "0")
    for name in ("num.partitions", "auto.create.topics.enable", "default.replication.factor", "log.retention.ms",
                 "log.segment.bytes", "compression.type", "message.max.bytes", "log.roll.jitter.ms"):
        assert name in broker, name
    assert broker["num.partitions"].is_read_only and not broker["log.retention.ms"].is_read_only
    # this broker's own dynamic settings (confluent-kafka names no cluster-wide resource "")
    _incremental(admin, ResourceType.BROKER, "0", log_retention_ms="120000", compression_type="zstd")
    topic = _describe(admin, ResourceType.TOPIC, topic_name)
    assert topic["retention.ms"].value == "120000"
    assert topic["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert topic["compression.type"].value == "zstd"
    assert fresh_kshim.terminate() == 0
    fresh_kshim.restart()
    admin = _admin(fresh_kshim)
    broker = _describe(admin, ResourceType.BROKER, "0")
    assert broker["log.retention.ms"].value == "120000"
    assert broker["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    with RawConnection(fresh_kshim.bootstrap) as conn:
        [result] = conn.produce({(topic_name, 0): encode_batch(VALUES)}).values()
    assert result.error_code == 0
    assert read_header(_fetch_raw(fresh_kshim.bootstrap, topic_name)).compression == ZSTD
    _incremental(admin, ResourceType.BROKER, "0", compression_type=None)
    assert _describe(admin, ResourceType.TOPIC, topic_name)["compression.type"].value == "producer"


def test_kafka_python_admin_describes_and_alters(kshim, topic_name):
    from kafka.admin import ConfigResource as KpResource, ConfigResourceType, KafkaAdminClient, NewTopic as KpTopic
    client = KafkaAdminClient(bootstrap_servers=kshim.bootstrap)
    try:
        client.create_topics([KpTopic(topic_name, 1, 1, topic_configs={"compression.type": "snappy",
                                                                         "index.interval.bytes": "1024"})])
        client.alter_configs([KpResource(ConfigResourceType.TOPIC, topic_name,
                                         configs={"compression.type": "gzip", "preallocate": "true"})])
        described = client.describe_configs([KpResource(ConfigResourceType.TOPIC, topic_name)])
        response = described[0] if isinstance(described, list) else described
        if hasattr(response, "resources"):
            entries = {e[0]: e[1] for e in response.resources[0][4]}
        else:  # kafka-python 2.1+: {resource: {name: entry}} style answers
            [configs] = response.values()
            if topic_name in configs:
                configs = configs[topic_name]
            entries = {name: (e["value"] if isinstance(e, dict) else e) for name, e in configs.items()}
        assert (entries["compression.type"], entries["preallocate"]) == ("gzip", "true")
    finally:
        client.close()
