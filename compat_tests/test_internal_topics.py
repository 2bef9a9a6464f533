"""Internal topics are the broker's own (docs/robustness.md): clients cannot write, delete or grow
them, but may change their configs as Kafka allows, and a batch in one that cannot be decoded is
skipped, not fatal, at load."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import InvalidTopicError
from kafka.structs import OffsetAndMetadata

from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import RawConnection
from kshim.log.log import Log, LogConfig
from wire.compression import ZSTD
from wire.records import ATTRIBUTES_OFFSET, CRC_OFFSET, encode_batch

INVALID_TOPIC_EXCEPTION = 17
OFFSETS, TXNS = "__consumer_offsets", "__transaction_state"


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, request_timeout_ms=10000)
    try:
        c.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str) -> int | None:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, request_timeout_ms=10000)
    try:
        return c.committed(TopicPartition(topic, 0))
    finally:
        c.close()


def garbage_zstd_batch() -> bytearray:
    """A batch with a valid CRC whose attributes say zstd over a payload that is not zstd."""
    batch = bytearray(encode_batch([(b"forged-key", b"forged-value")]))
    attributes = struct.unpack_from(">h", batch, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", batch, ATTRIBUTES_OFFSET, attributes | ZSTD)
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    return batch


def test_clients_cannot_write_delete_or_grow_internal_topics(kshim, topic_name):
    commit(kshim.bootstrap, "sealed", topic_name, 5)  # the coordinator creates __consumer_offsets
    with RawConnection(kshim.bootstrap) as conn:
        answer = conn.produce({(OFFSETS, 0): bytes(encode_batch([(b"k", b"v")]))})
    assert answer[(OFFSETS, 0)].error_code == INVALID_TOPIC_EXCEPTION
    admin = KafkaAdminClient(bootstrap_servers=kshim.bootstrap, request_timeout_ms=10000)
    try:
        with pytest.raises(InvalidTopicError):
            admin.delete_topics([OFFSETS])
        with pytest.raises(InvalidTopicError):
            admin.create_partitions({OFFSETS: NewPartitions(20)})
        with pytest.raises(InvalidTopicError):
            admin.create_topics([NewTopic("__transaction_state", 1, 1)])
        with pytest.raises(InvalidTopicError):
            admin.delete_records({TopicPartition(OFFSETS, 0): 1})
        assert OFFSETS in admin.list_topics()
    finally:
        admin.close()
    assert committed(kshim.bootstrap, "sealed", topic_name) == 5


def offsets_segments(data_dir: Path) -> dict[str, int]:
    """The number of segment files of each __consumer_offsets partition on disk."""
    return {d.name: len(list(d.glob("*.log"))) for d in Path(data_dir).glob(f"{OFFSETS}-*")}


def test_internal_topics_take_config_changes_which_reach_their_logs(tmp_path, topic_name):
    """As Kafka's KRaft brokers: AlterConfigs and IncrementalAlterConfigs on __consumer_offsets and
    __transaction_state succeed; a lower segment.bytes of the offsets topic rolls its segments at
    the next commits. Writing to them stays the coordinators' own (the test above)."""
    broker = KshimProcess(tmp_path / "data").start()
    try:
        commit(broker.bootstrap, "rolling", topic_name, 0)  # the coordinator creates __consumer_offsets
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-txn",
                             "log_level": 3})
        producer.init_transactions(20)  # the transaction coordinator creates __transaction_state
        assert set(offsets_segments(broker.data_dir).values()) == {1}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
        offsets = ConfigResource(ResourceType.TOPIC, OFFSETS, incremental_configs=[
            ConfigEntry("segment.bytes", "1024", incremental_operation=AlterConfigOpType.SET)])
        txns = ConfigResource(ResourceType.TOPIC, TXNS, set_config={"cleanup.policy": "compact",
                                                                    "segment.bytes": "2048"})
        assert admin.incremental_alter_configs([offsets])[offsets].result(timeout=20) is None
        assert admin.alter_configs([txns])[txns].result(timeout=20) is None
        described = {r.name: {n: e.value for n, e in f.result(timeout=20).items()}
                     for r, f in admin.describe_configs([ConfigResource(ResourceType.TOPIC, OFFSETS),
                                                         ConfigResource(ResourceType.TOPIC, TXNS)]).items()}
        assert (described[OFFSETS]["segment.bytes"], described[OFFSETS]["cleanup.policy"]) == ("1024", "compact")
        assert (described[TXNS]["segment.bytes"], described[TXNS]["cleanup.policy"]) == ("2048", "compact")
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="rolling", enable_auto_commit=False,
                                 request_timeout_ms=10000)
        try:
            for offset in range(1, 31):  # ~150 bytes a commit: 1024-byte segments roll every few
                consumer.commit({TopicPartition(topic_name, 0): OffsetAndMetadata(offset, "m" * 64, -1)})
        finally:
            consumer.close()
        assert max(offsets_segments(broker.data_dir).values()) > 1
        assert committed(broker.bootstrap, "rolling", topic_name) == 30
    finally:
        broker.kill()


def test_undecodable_batch_in_an_internal_topic_is_skipped_at_load(tmp_path, topic_name):
    broker = KshimProcess(tmp_path / "data").start()
    try:
        commit(broker.bootstrap, "survivor", topic_name, 42)
        assert broker.terminate() == 0
        # plant the batch a client could once produce, in every offsets partition, behind the broker's back
        partitions = sorted(Path(tmp_path / "data").glob(f"{OFFSETS}-*"))
        assert partitions
        for directory in partitions:
            log = Log(directory, LogConfig())
            try:
                log.append(garbage_zstd_batch())
            finally:
                log.close()
        broker.start()
        assert committed(broker.bootstrap, "survivor", topic_name) == 42
        wait_until(lambda: "skipping the batch at offsets" in broker.logs(), 20, message="the skipped batch logged")
        commit(broker.bootstrap, "survivor", topic_name, 43)  # the partition still takes commits
        assert committed(broker.bootstrap, "survivor", topic_name) == 43
    finally:
        broker.kill()
