"""The ReplicaManager in process (no sockets): Produce's acks, the wait for COMMITTED, the
isolation bounds of reads, the partition lookup's error codes and the fetch long-poll.

Brokers share one in-process controller; nothing replicates on its own, so a follower "fetches"
only when a test records its progress through the leader's fetch."""
from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from typing import Iterator

import anyio
import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.local import LocalControllerClient
from kshim.controller.store import MetadataStore
from kshim.replica import FetchParams, FetchPartition, FetchPartitionData, ReplicaManager
from kshim.replica.partition import Partition
from kshim.standalone import open_standalone
from wire.errors import ErrorCode
from wire.records import decode_all, encode_batch

pytestmark = pytest.mark.anyio

ALL, LEADER, NONE = -1, 1, 0
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
BIG = 1 << 20
WAIT_S = 10  # a guard only: every wait below ends on a condition long before


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def standalone(tmp_path) -> Iterator[Broker]:
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    yield broker
    broker.close()


@contextmanager
def two_brokers(tmp_path) -> Iterator[tuple[Controller, list[Broker]]]:
    controller = Controller(MetadataStore(tmp_path / "metadata.sqlite"), ControllerConfig(default_replication_factor=2))
    brokers = []
    for node_id in range(2):
        client = LocalControllerClient(controller, node_id)
        broker = Broker(BrokerConfig(node_id=node_id, data_dir=tmp_path / f"broker-{node_id}"), client)
        controller.listeners.append(broker.apply_image)
        client.register("127.0.0.1", 9092 + node_id, os.getpid())
        brokers.append(broker)
    try:
        yield controller, brokers
    finally:
        for broker in brokers:
            broker.close()
        controller.close()


def roles(controller: Controller, brokers: list[Broker], topic: str = "t") -> tuple[Broker, Broker]:
    leader = controller.image.topics[topic].partitions[0].leader
    return brokers[leader], brokers[1 - leader]


def batch(*values: bytes, producer_id: int = -1, transactional: bool = False) -> bytes:
    return encode_batch([(None, v) for v in values], producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                        base_sequence=0 if producer_id >= 0 else -1, transactional=transactional)


def fetch_now(rm: ReplicaManager, offset: int = 0, isolation: int = READ_UNCOMMITTED, replica_id: int = -1,
              topic: str | uuid.UUID = "t", index: int = 0) -> FetchPartitionData:
    """One partition's answer to a fetch that does not wait."""
    (result,) = rm.fetch(FetchParams(replica_id, 0, 0, BIG, isolation), [FetchPartition(topic, index, offset, BIG)])
    return result


def values(data: FetchPartitionData) -> list[bytes]:
    return [r.value for r in decode_all(bytes(data.records))]


async def settle(pending) -> list:
    """The outcomes of an append: at once (a list), or once its wait ends (an awaitable)."""
    if isinstance(pending, list):
        return pending
    with anyio.fail_after(WAIT_S):
        return await pending


# ---------------------------------------------------------------------------------- Produce acks
async def test_acks_0_and_1_answer_once_appended_and_acks_all_once_committed(standalone):
    await standalone.create_topic("t", 2)
    rm = standalone.replica_manager
    for acks in (NONE, LEADER):
        out = rm.append(acks, 5, [("t", 0, batch(b"a")), ("t", 1, batch(b"b", b"c"))])
        assert isinstance(out, list)  # answered without waiting
        assert [(r.error, r.appended) for r in out] == [(ErrorCode.NONE, True)] * 2
    assert [r.base_offset for r in out] == [1, 2]
    out = rm.append(ALL, 5, [("t", 0, batch(b"d"))])  # no followers: appended is COMMITTED
    assert isinstance(out, list)  # so answered as acks=1 is, with no wait to set up
    assert (out[0].error, out[0].base_offset) == (ErrorCode.NONE, 2)
    assert rm.partition("t", 0).high_watermark == 3


async def test_invalid_acks_refuses_every_partition(standalone):
    await standalone.create_topic("t", 1)
    out = standalone.replica_manager.append(2, 5, [("t", 0, batch(b"a")), ("nope", 0, batch(b"b"))])
    assert [r.error for r in out] == [ErrorCode.INVALID_REQUIRED_ACKS] * 2
    assert standalone.replica_manager.partition("t", 0).log_end_offset == 0


async def test_acks_all_answers_only_once_the_in_sync_follower_has_the_records(tmp_path):
    with two_brokers(tmp_path) as (controller, brokers):
        controller.create_topic("t", 1, 2)
        leader, follower = roles(controller, brokers)
        rm = leader.replica_manager
        assert sorted(rm.partition("t", 0).isr) == [0, 1]
        # the follower never fetches: the wait ends at the timeout, the records stay
        (timed_out,) = await settle(rm.append(ALL, 0.05, [("t", 0, batch(b"a"))]))
        assert (timed_out.error, timed_out.appended) == (ErrorCode.REQUEST_TIMED_OUT, True)
        pending = rm.append(ALL, WAIT_S, [("t", 0, batch(b"b"))])
        answers: list = []

        async def answer() -> None:
            answers.extend(await pending)

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer)
            await anyio.wait_all_tasks_blocked()
            assert answers == []  # appended, not COMMITTED: no answer yet
            replicated = fetch_now(rm, 0, replica_id=follower.node_id)  # the follower reads both ...
            assert values(replicated) == [b"a", b"b"]
            assert answers == []
            fetch_now(rm, 2, replica_id=follower.node_id)  # ... and its next fetch says it has them
        assert [(r.error, r.base_offset) for r in answers] == [(ErrorCode.NONE, 1)]
        assert rm.partition("t", 0).high_watermark == 2


async def test_not_enough_replicas_when_the_isr_is_below_min_insync(standalone):
    await standalone.create_topic("t", 1, {"min.insync.replicas": "2"})
    rm = standalone.replica_manager
    (refused,) = rm.append(ALL, 5, [("t", 0, batch(b"a"))])
    assert (refused.error, refused.appended) == (ErrorCode.NOT_ENOUGH_REPLICAS, False)
    assert rm.partition("t", 0).log_end_offset == 0  # refused before appending
    (accepted,) = rm.append(LEADER, 5, [("t", 0, batch(b"a"))])  # acks=1 does not ask for the ISR
    assert accepted.error == ErrorCode.NONE


# ---------------------------------------------------------------------------------- read bounds
async def test_read_bounds_per_isolation_level(tmp_path):
    with two_brokers(tmp_path) as (controller, brokers):
        controller.create_topic("t", 1, 2)
        leader, follower = roles(controller, brokers)
        rm = leader.replica_manager
        for data in (batch(b"a"), batch(b"open", producer_id=7, transactional=True), batch(b"c")):
            assert rm.append(LEADER, 5, [("t", 0, data)])[0].error == ErrorCode.NONE
        fetch_now(rm, 3, replica_id=follower.node_id)  # the follower has offsets 0-2: high watermark 3
        rm.append(LEADER, 5, [("t", 0, batch(b"d"))])  # offset 3, not replicated yet

        committed = fetch_now(rm, 0, READ_COMMITTED)
        assert (committed.high_watermark, committed.last_stable_offset) == (3, 1)  # the open transaction
        assert values(committed) == [b"a"] and committed.aborted_transactions == []
        uncommitted = fetch_now(rm, 0, READ_UNCOMMITTED)
        assert values(uncommitted) == [b"a", b"open", b"c", b"d"]  # to the log end
        assert uncommitted.aborted_transactions is None

        controller.set_topic_configs("t", {"kshim.uncommitted.read.limit": "high-watermark"})
        assert values(fetch_now(rm, 0, READ_UNCOMMITTED)) == [b"a", b"open", b"c"]  # to the high watermark


# ---------------------------------------------------------------------------------- the lookup
async def test_partition_lookup_error_codes(tmp_path):
    with two_brokers(tmp_path) as (controller, brokers):
        topic = controller.create_topic("t", 1, 2)
        leader, follower = roles(controller, brokers)
        rm = leader.replica_manager
        led = rm.get_partition_or_error("t", 0)
        assert isinstance(led, Partition) and rm.get_partition_or_error(topic.topic_id, 0) is led
        assert rm.get_partition_or_error("nope", 0) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert rm.get_partition_or_error(uuid.uuid4(), 0) == ErrorCode.UNKNOWN_TOPIC_ID
        assert rm.get_partition_or_error("t", 1) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert rm.get_partition_or_error(topic.topic_id, -1) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert follower.replica_manager.get_partition_or_error("t", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        epoch = led.leader_epoch
        assert rm.get_partition_or_error("t", 0, epoch) is led
        assert rm.get_partition_or_error("t", 0, epoch + 1) == ErrorCode.UNKNOWN_LEADER_EPOCH

        # the operations answer with the same codes
        (appended,) = follower.replica_manager.append(LEADER, 5, [("t", 0, batch(b"a"))])
        assert appended.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and appended.message
        assert fetch_now(rm, topic=uuid.uuid4()).error == ErrorCode.UNKNOWN_TOPIC_ID

        controller.fence(leader.node_id)  # the follower takes over in a newer epoch
        successor = follower.replica_manager.get_partition_or_error("t", 0, epoch + 1)
        assert isinstance(successor, Partition) and successor.leader_epoch == epoch + 1
        assert follower.replica_manager.get_partition_or_error("t", 0, epoch) == ErrorCode.FENCED_LEADER_EPOCH
        assert rm.get_partition_or_error("t", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER


# ---------------------------------------------------------------------------------- long-poll
async def test_fetch_long_poll_returns_as_soon_as_data_is_appended(standalone):
    await standalone.create_topic("t", 1)
    rm = standalone.replica_manager
    pending = rm.fetch(FetchParams(-1, 60_000, 1, BIG, READ_UNCOMMITTED), [FetchPartition("t", 0, 0, BIG)])
    assert not isinstance(pending, list)  # nothing to read: it waits
    answers: list = []

    async def answer() -> None:
        answers.extend(await pending)

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(answer)
            await anyio.wait_all_tasks_blocked()
            assert answers == []
            rm.append(LEADER, 5, [("t", 0, batch(b"x"))])
            await anyio.wait_all_tasks_blocked()  # woken by the append itself: no clock time passes
            assert [values(a) for a in answers] == [[b"x"]]


async def test_fetch_long_poll_sees_an_append_made_before_its_wait_began(standalone):
    """The server starts a long-poll's wait in a task of its own, a loop turn after the read that
    found nothing; an append in between (the next request on any connection) must still end the
    wait. It once did not: a follower's fetch that arrived just before a Produce slept until the
    next append or its max wait, and acks=all waited with it (p99 x3 at 2,000 records/s)."""
    await standalone.create_topic("t", 1)
    rm = standalone.replica_manager
    pending = rm.fetch(FetchParams(-1, 60_000, 1, BIG, READ_UNCOMMITTED), [FetchPartition("t", 0, 0, BIG)])
    assert not isinstance(pending, list)  # nothing to read yet: it will wait
    rm.append(LEADER, 5, [("t", 0, batch(b"x"))])  # before the wait has begun
    with anyio.fail_after(WAIT_S):  # a guard: the answer comes without any clock time passing
        answers = await pending
    assert [values(a) for a in answers] == [[b"x"]]


async def test_high_watermark_checkpoints_are_written_in_one_batch_for_the_partitions_that_moved(standalone):
    """ReplicaManager.checkpoint_high_watermarks (every 5 s from housekeeping, off the event loop):
    one replication-offset-checkpoint per log dir with every replica's, rewritten only when one moved."""
    await standalone.create_topic("t", 3)
    rm = standalone.replica_manager
    await settle(rm.append(ALL, 5, [("t", 0, batch(b"a", b"b")), ("t", 1, batch(b"c"))]))
    path = rm.partition("t", 0).directory.parent / "replication-offset-checkpoint"
    assert await rm.checkpoint_high_watermarks() >= 2
    assert {"t 0 2", "t 1 1", "t 2 0"} <= set(path.read_text().splitlines())
    stamp = path.stat().st_mtime_ns
    assert await rm.checkpoint_high_watermarks() == 0  # nothing moved since: not rewritten
    assert path.stat().st_mtime_ns == stamp
    await settle(rm.append(ALL, 5, [("t", 2, batch(b"d"))]))
    assert await rm.checkpoint_high_watermarks() == 1 and "t 2 1" in path.read_text().splitlines()
    assert not any((rm.partition("t", i).directory / "high-watermark").exists() for i in range(3))
