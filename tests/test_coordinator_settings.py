"""The broker's group-coordinator, offsets-topic, transaction and producer-id settings
(BrokerConfig fields named after Kafka's configs) take effect: each test fails if its setting is
ignored. A standalone broker, handlers called through the codec, or a fake host for topic creation."""
from __future__ import annotations

import importlib
from dataclasses import replace

import anyio
import pytest

from kshim.broker import BrokerConfig
from kshim.cluster.image import BrokerInfo, MetadataImage
from kshim.coordinator import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TRANSACTION_TOPIC
from kshim.coordinator.groups.coordinator import GroupCoordinator
from kshim.coordinator.runtime import CoordinatorRuntime, internal_replication_factor
from kshim.coordinator.share_partitions.coordinator import ShareCoordinator
from kshim.coordinator.transactions import TxnState, log_format
from kshim.coordinator.transactions.coordinator import TransactionCoordinator
from kshim.errors import BrokerError
from kshim.standalone import open_standalone
from tests.nodes import served
from tests.test_groups import call_awaiting, find, join
from tests.test_transactions import add, coordinated, data, init
from tests.waiting import wait_until
from wire import records
from wire.errors import ErrorCode

offset_commit = importlib.import_module("kshim.net.handlers.08_offset_commit")


def commit_body(group: str, metadata: str, offset: int = 5) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                    "committed_leader_epoch": -1, "committed_metadata": metadata}]}]}


# ---------------------------------------------------------------- the classic group coordinator
@pytest.mark.anyio
async def test_session_timeout_bounds_and_max_size_are_the_brokers(tmp_path):
    # kafka-python's test broker: group.min.session.timeout.ms=1000, its consumers join with 3000
    broker = open_standalone(BrokerConfig(data_dir=tmp_path, group_min_session_timeout_ms=1000,
                                          group_max_session_timeout_ms=5000, group_max_size=1))
    try:
        group = served(broker).groups.get_group("g", create=True)
        assert join(group, 0, session=999).value.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert join(group, 0, session=5001).value.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert join(group, 0, session=3000).value.error_code == ErrorCode.MEMBER_ID_REQUIRED
        # the member id handed out counts: a second member is one too many
        assert join(group, 0, session=3000).value.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    finally:
        broker.close()


# ---------------------------------------------------------------- committed offsets
@pytest.mark.anyio
async def test_offset_metadata_size_commit_timeout_and_compression(tmp_path, monkeypatch):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path, offset_metadata_max_bytes=10,
                                          offsets_commit_timeout_ms=1234, offsets_topic_compression_codec=records.GZIP,
                                          offsets_topic_segment_bytes=2 * 1024 * 1024))
    try:
        assert (await find(broker, "g")).coordinators[0].error_code == ErrorCode.NONE
        groups = served(broker).groups
        groups.load_pending()
        timeouts = []
        write = groups.runtime.write_started

        def spy(index, batch, timeout_s):
            timeouts.append(timeout_s)
            return write(index, batch, timeout_s)
        monkeypatch.setattr(groups.runtime, "write_started", spy)
        resp = await call_awaiting(broker, offset_commit, 8, commit_body("g", "x" * 11))
        assert resp.topics[0].partitions[0].error_code == ErrorCode.OFFSET_METADATA_TOO_LARGE
        resp = await call_awaiting(broker, offset_commit, 8, commit_body("g", "x" * 10))
        assert resp.topics[0].partitions[0].error_code == ErrorCode.NONE
        assert timeouts == [1.234]
        replica = broker.partition(OFFSETS_TOPIC, groups.partition_of("g"))
        headers = [h for h, _ in CoordinatorRuntime.stored_batches(replica)]
        assert [h.compression for h in headers] == [records.GZIP]
        assert broker.topics[OFFSETS_TOPIC].configs["segment.bytes"] == str(2 * 1024 * 1024)
    finally:
        broker.close()


@pytest.mark.anyio
async def test_offsets_expire_after_the_retention_looked_for_at_the_check_interval(tmp_path):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path, offsets_retention_ms=100,
                                          offsets_retention_check_interval_ms=200))
    try:
        await find(broker, "g")
        async with anyio.create_task_group() as tg:
            tg.start_soon(served(broker).groups.run)
            await wait_until(lambda: not served(broker).groups.check("g"), message="the offsets partition loaded")
            resp = await call_awaiting(broker, offset_commit, 8, commit_body("g", ""))
            assert resp.topics[0].partitions[0].error_code == ErrorCode.NONE
            assert served(broker).groups.offsets.get("g")
            await wait_until(lambda: not served(broker).groups.offsets.get("g"), timeout_s=5,
                             message="the offsets expired")
            tg.cancel_scope.cancel()
    finally:
        broker.close()


# ---------------------------------------------------------------- the internal topics' creation
def test_internal_replication_factor():
    assert internal_replication_factor(3, alive=1, registered=1) == 1  # a single broker, Kafka's default
    assert internal_replication_factor(3, alive=2, registered=2) == 2  # a cluster smaller than the factor
    assert internal_replication_factor(3, alive=2, registered=3) is None  # one down: wait, as Kafka
    assert internal_replication_factor(3, alive=5, registered=5) == 3
    assert internal_replication_factor(2, alive=3, registered=3) == 2
    assert internal_replication_factor(1, alive=3, registered=3) == 1


class FakeHost:
    """A broker of a cluster of `alive` live brokers out of `registered`, recording topic creations."""

    def __init__(self, config: BrokerConfig, alive: int, registered: int) -> None:
        self.config, self.node_id, self.topics, self.topics_by_id = config, 0, {}, {}
        self.image = replace(MetadataImage(1, "c", 0), brokers={
            i: BrokerInfo(i, "h", 9092 + i, alive=i < alive) for i in range(registered)})
        self.created: list[tuple[str, int | None, dict, int]] = []

    @property
    def cluster_size(self) -> int:
        return len(self.image.alive_brokers())

    async def create_topic(self, name, partitions=None, configs=None, *, replication_factor=-1, validate_only=False):
        self.created.append((name, partitions, dict(configs or {}), replication_factor))


@pytest.mark.anyio
async def test_internal_topics_are_created_with_the_configured_settings():
    config = BrokerConfig(offsets_topic_partitions=7, offsets_topic_replication_factor=2,
                          offsets_topic_segment_bytes=1 << 20, transaction_state_partitions=5,
                          transaction_state_replication_factor=2, transaction_state_min_isr=2,
                          transaction_state_segment_bytes=1 << 21, share_state_partitions=3,
                          share_state_replication_factor=2, share_state_min_isr=1, share_state_segment_bytes=1 << 22)
    host = FakeHost(config, alive=3, registered=4)
    await GroupCoordinator(host).runtime.ensure()  # type: ignore[arg-type]
    await TransactionCoordinator(host).runtime.ensure()  # type: ignore[arg-type]
    await ShareCoordinator(host).runtime.ensure()  # type: ignore[arg-type]
    (offsets, txns, shares) = host.created
    assert offsets == (OFFSETS_TOPIC, 7, {"cleanup.policy": "compact", "segment.bytes": str(1 << 20)}, 2)
    assert txns == (TRANSACTION_TOPIC, 5, {"cleanup.policy": "compact", "segment.bytes": str(1 << 21),
                                           "min.insync.replicas": "2"}, 2)
    assert shares == (SHARE_STATE_TOPIC, 3, {"cleanup.policy": "compact", "segment.bytes": str(1 << 22),
                                             "min.insync.replicas": "1"}, 2)

    # a cluster of 3 with two down waits for a second (FindCoordinator: COORDINATOR_NOT_AVAILABLE)
    host = FakeHost(config, alive=1, registered=3)
    with pytest.raises(BrokerError) as e:
        await TransactionCoordinator(host).runtime.find("tx")  # type: ignore[arg-type]
    assert e.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE and not host.created

    # a single broker with Kafka's defaults: one replica, min.insync.replicas at most that
    host = FakeHost(BrokerConfig(), alive=1, registered=1)
    await TransactionCoordinator(host).runtime.ensure()  # type: ignore[arg-type]
    assert host.created == [(TRANSACTION_TOPIC, 10, {"cleanup.policy": "compact", "segment.bytes": str(100 << 20),
                                                     "min.insync.replicas": "1"}, 1)]


# ---------------------------------------------------------------- transactional ids and producer ids
@pytest.mark.anyio
async def test_idle_transactional_ids_expire_with_a_tombstone(tmp_path):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path, transactional_id_expiration_ms=300,
                                          transaction_remove_expired_interval_ms=100))
    await broker.create_topic("t", 1)
    txns = served(broker).transactions
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(txns.run)
            await coordinated(broker, "idle")
            await coordinated(broker, "open")
            idle = await init(broker, "idle")
            opened = await init(broker, "open")
            assert idle.error_code == opened.error_code == ErrorCode.NONE
            assert await add(broker, "open", opened.producer_id, 0) == ErrorCode.NONE
            await wait_until(lambda: "idle" not in txns.txns, timeout_s=5, message="the idle id removed")
            await anyio.sleep(0.3)  # more checks: an open transaction keeps its id
            assert txns.txns["open"].state == TxnState.ONGOING
            replica = broker.partition(TRANSACTION_TOPIC, txns.runtime.partition_of("idle"))
            stored = [log_format.decode(bytes(r.key), None if r.value is None else bytes(r.value))
                      for _, batch in CoordinatorRuntime.stored_batches(replica) for r in records.decode_records(batch)]
            assert ("idle", None) in stored  # its tombstone
            again = await init(broker, "idle")  # starts afresh: a new producer id
            assert again.error_code == ErrorCode.NONE and again.producer_id != idle.producer_id
            assert again.producer_epoch == 0
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_idle_producers_are_forgotten(tmp_path):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path, producer_id_expiration_ms=300,
                                          producer_id_expiration_check_interval_ms=100))
    await broker.create_topic("t", 1)
    p = broker.partition("t", 0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(served(broker).run)
            assert not p.append(data(1000, 0, b"a", transactional=False)).error
            assert not p.append(data(1001, 0, b"open")).error  # a transaction left open: kept
            assert 1000 in p.producers.producers
            await wait_until(lambda: 1000 not in p.producers.producers, timeout_s=5, message="the producer forgotten")
            assert 1001 in p.producers.producers
            tg.cancel_scope.cancel()
    finally:
        broker.close()
