"""Replication inside one process: three brokers with their own servers on 127.0.0.1, one
in-process controller, followers fetching from leaders over real TCP.

The multi-process cluster (`kshim serve --brokers 3`) is exercised with real clients in
compat_tests; these tests pin the mechanics: the high watermark, acks=all, ISR changes and the
truncation of a former leader's divergent suffix.
"""
from __future__ import annotations

import os
from contextlib import asynccontextmanager

import anyio
import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.local import LocalControllerClient
from kshim.controller.store import MetadataStore
from kshim.net.broker_server import BrokerServer
from kshim.net.server import Server
from kshim.replication.client import BrokerConnection
from kshim.replication.run import run_replication
from tests.waiting import wait_until
from wire.errors import ErrorCode
from wire.records import decode_all, encode_batch

pytestmark = pytest.mark.anyio


class Cluster:
    def __init__(self, controller: Controller, brokers: list[Broker]) -> None:
        self.controller = controller
        self.brokers = brokers

    def leader_of(self, topic: str, index: int = 0) -> int:
        return self.controller.image.topics[topic].partitions[index].leader

    def replica(self, node: int, topic: str, index: int = 0):
        return self.brokers[node].partition(topic, index)

    async def connect(self, node: int) -> BrokerConnection:
        conn = BrokerConnection("127.0.0.1", self.brokers[node].config.port, "test")
        await conn.connect()
        return conn

    async def produce(self, topic: str, values: list[bytes], acks: int = -1, timeout_ms: int = 5000,
                      index: int = 0) -> tuple[int, int]:
        """(error code, base offset) from the partition's leader."""
        conn = await self.connect(self.leader_of(topic, index))
        try:
            resp = await conn.request(0, 9, {"acks": acks, "timeout_ms": timeout_ms, "topic_data": [
                {"name": topic, "partition_data": [{"index": index, "records": encode_batch(
                    [(None, v) for v in values])}]}]})
        finally:
            await conn.aclose()
        part = resp.responses[0].partition_responses[0]
        return part.error_code, part.base_offset

    async def fetch(self, node: int, topic: str, isolation: int, index: int = 0) -> tuple[int, list[bytes], int]:
        """(error code, values, high watermark) as a consumer fetching from offset 0 sees them."""
        conn = await self.connect(node)
        try:
            resp = await conn.request(1, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                                              "max_bytes": 1 << 20, "isolation_level": isolation,
                                              "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                                                  {"partition": index, "fetch_offset": 0,
                                                   "partition_max_bytes": 1 << 20}]}]})
        finally:
            await conn.aclose()
        part = resp.responses[0].partitions[0]
        values = [r.value for r in decode_all(bytes(part.records or b""))]
        return part.error_code, values, part.high_watermark


@asynccontextmanager
async def cluster(tmp_path, n: int = 3, lag_ms: int = 1000):
    store = MetadataStore(tmp_path / "controller" / "metadata.sqlite")
    controller = Controller(store, ControllerConfig(default_replication_factor=n, session_timeout_ms=60000))
    brokers: list[Broker] = []
    async with anyio.create_task_group() as tg:
        for i in range(n):
            config = BrokerConfig(node_id=i, port=0, data_dir=tmp_path / f"broker-{i}")
            client = LocalControllerClient(controller, i)
            broker = Broker(config, client)
            controller.listeners.append(broker.apply_image)
            config.port = await tg.start(Server(BrokerServer(broker)).serve)
            client.register("127.0.0.1", config.port, os.getpid())
            brokers.append(broker)
        for broker in brokers:
            tg.start_soon(lambda b=broker: run_replication(b, replica_lag_time_max_ms=lag_ms))
        try:
            yield Cluster(controller, brokers)
        finally:
            tg.cancel_scope.cancel()
    for broker in brokers:
        broker.close()
    controller.close()


async def test_acks_all_commits_on_every_replica(tmp_path):
    async with cluster(tmp_path) as c:
        c.controller.create_topic("t", 1, 3)
        assert await c.produce("t", [b"a", b"b", b"c"]) == (ErrorCode.NONE, 0)
        leader = c.leader_of("t")
        assert c.replica(leader, "t").high_watermark == 3
        for node in range(3):  # acks=all answered: every in-sync replica has the records
            assert c.replica(node, "t").log_end_offset == 3
        assert (await c.fetch(leader, "t", 1))[1] == [b"a", b"b", b"c"]
        follower = next(n for n in range(3) if n != leader)
        assert (await c.fetch(follower, "t", 1))[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_uncommitted_records_visible_only_to_read_uncommitted(tmp_path):
    async with cluster(tmp_path, lag_ms=60000) as c:
        c.controller.create_topic("t", 1, 3)
        assert (await c.produce("t", [b"committed"]))[0] == ErrorCode.NONE
        leader = c.leader_of("t")
        for node in range(3):
            if node != leader:
                c.controller.set_isolated(node, True)  # followers stop fetching, stay in the ISR
        code, _ = await c.produce("t", [b"pending"], acks=-1, timeout_ms=300)
        assert code == ErrorCode.REQUEST_TIMED_OUT  # not COMMITTED in time: outcome unknown, kept
        assert (await c.fetch(leader, "t", 0))[1] == [b"committed", b"pending"]
        assert (await c.fetch(leader, "t", 1))[1] == [b"committed"]
        for node in range(3):
            c.controller.set_isolated(node, False)
        await wait_until(lambda: c.replica(leader, "t").high_watermark == 2, message="commit after heal")
        assert (await c.fetch(leader, "t", 1))[1] == [b"committed", b"pending"]


async def test_lagging_follower_leaves_the_isr_then_rejoins(tmp_path):
    async with cluster(tmp_path, lag_ms=300) as c:
        c.controller.create_topic("t", 1, 3)
        leader = c.leader_of("t")
        follower = next(n for n in range(3) if n != leader)
        c.controller.set_isolated(follower, True)
        assert (await c.produce("t", [b"x"]))[0] == ErrorCode.NONE  # waits for the shrink, then commits
        assert follower not in c.controller.image.topics["t"].partitions[0].isr
        c.controller.set_isolated(follower, False)
        await wait_until(lambda: follower in c.controller.image.topics["t"].partitions[0].isr, message="rejoin")
        assert c.replica(follower, "t").log_end_offset == 1


async def test_not_enough_replicas_when_isr_below_min_insync(tmp_path):
    async with cluster(tmp_path, lag_ms=200) as c:
        c.controller.create_topic("t", 1, 3, {"min.insync.replicas": "3"})
        leader = c.leader_of("t")
        follower = next(n for n in range(3) if n != leader)
        c.controller.set_isolated(follower, True)
        await wait_until(lambda: len(c.controller.image.topics["t"].partitions[0].isr) == 2, message="shrink")
        assert (await c.produce("t", [b"x"]))[0] == ErrorCode.NOT_ENOUGH_REPLICAS
        assert c.replica(leader, "t").log_end_offset == 0  # refused before appending


async def test_majority_quorum_commits_without_one_follower(tmp_path):
    async with cluster(tmp_path, lag_ms=60000) as c:
        c.controller.create_topic("t", 1, 3, {"kshim.commit.quorum": "majority"})
        leader = c.leader_of("t")
        follower = next(n for n in range(3) if n != leader)
        c.controller.set_isolated(follower, True)  # still in the ISR: the isr quorum would block
        assert await c.produce("t", [b"x"], timeout_ms=3000) == (ErrorCode.NONE, 0)
        assert len(c.controller.image.topics["t"].partitions[0].isr) == 3


async def test_strict_read_limit_hides_uncommitted_records(tmp_path):
    async with cluster(tmp_path, lag_ms=60000) as c:
        c.controller.create_topic("t", 1, 3, {"kshim.uncommitted.read.limit": "high-watermark"})
        leader = c.leader_of("t")
        for node in range(3):
            if node != leader:
                c.controller.set_isolated(node, True)
        assert (await c.produce("t", [b"x"], acks=1))[0] == ErrorCode.NONE
        assert (await c.fetch(leader, "t", 0))[1] == []  # Kafka's own behaviour: up to the HW


async def test_former_leader_truncates_its_uncommitted_suffix(tmp_path):
    async with cluster(tmp_path, lag_ms=60000) as c:
        c.controller.create_topic("t", 1, 3)
        assert (await c.produce("t", [b"a"]))[0] == ErrorCode.NONE
        old = c.leader_of("t")
        for node in range(3):
            if node != old:
                c.controller.set_isolated(node, True)
        assert (await c.produce("t", [b"lost-1", b"lost-2"], acks=1))[0] == ErrorCode.NONE
        assert c.replica(old, "t").log_end_offset == 3
        c.controller.fence(old)  # the leader "crashes": a follower from the ISR takes over
        new = c.leader_of("t")
        assert new not in (old, -1)
        for node in range(3):
            c.controller.set_isolated(node, False)
        assert (await c.produce("t", [b"b"]))[0] == ErrorCode.NONE
        c.controller.register_broker(old, "127.0.0.1", c.brokers[old].config.port)  # it comes back
        await wait_until(lambda: c.replica(old, "t").log_end_offset == 2 and
                       c.replica(old, "t").high_watermark == 2, message="truncate and catch up")
        assert [r.value for r in decode_all(c.replica(old, "t").log.read(0, 1 << 20))] == [b"a", b"b"]


async def test_not_enough_replicas_after_append_when_isr_shrinks_while_waiting(tmp_path):
    async with cluster(tmp_path, lag_ms=300) as c:
        c.controller.create_topic("t", 1, 3, {"min.insync.replicas": "3"})
        leader = c.leader_of("t")
        follower = next(n for n in range(3) if n != leader)
        c.controller.set_isolated(follower, True)  # still in the ISR: the check before appending passes
        code, _ = await c.produce("t", [b"x"], timeout_ms=5000)
        # the ISR shrank to 2 while the produce waited; the 2 left committed it, below the minimum
        assert code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert c.replica(leader, "t").log_end_offset == 1  # appended, and kept


@pytest.mark.parametrize("unclean", [False, True])
async def test_leader_election_from_the_isr_only_unless_unclean_is_enabled(tmp_path, unclean):
    async with cluster(tmp_path, lag_ms=200) as c:
        c.controller.create_topic("t", 1, 3, {"unclean.leader.election.enable": str(unclean).lower()})
        leader = c.leader_of("t")
        followers = [n for n in range(3) if n != leader]
        for node in followers:
            c.controller.set_isolated(node, True)
        await wait_until(lambda: c.controller.image.topics["t"].partitions[0].isr == (leader,), message="shrink")
        assert (await c.produce("t", [b"only-on-the-leader"]))[0] == ErrorCode.NONE  # COMMITTED: ISR is 1
        c.controller.fence(leader)
        state = c.controller.image.topics["t"].partitions[0]
        if not unclean:
            assert state.leader == -1 and state.isr == (leader,)  # offline, waiting for its last in-sync replica
        else:
            assert state.leader in followers and state.isr == (state.leader,)  # available, the record is lost
            for node in followers:
                c.controller.set_isolated(node, False)
            assert (await c.fetch(state.leader, "t", 1))[1] == []


async def test_majority_quorum_failover_elects_the_replica_holding_committed_records(tmp_path):
    async with cluster(tmp_path, lag_ms=60000) as c:
        c.controller.create_topic("t", 1, 3, {"kshim.commit.quorum": "majority"})
        assert (await c.produce("t", [b"a"]))[0] == ErrorCode.NONE
        leader, first_in_line, other = c.controller.image.topics["t"].partitions[0].replicas
        c.controller.set_isolated(first_in_line, True)  # in the ISR, first in election order, lacking the next record
        assert await c.produce("t", [b"committed"], timeout_ms=3000) == (ErrorCode.NONE, 1)
        await wait_until(lambda: c.replica(other, "t").log_end_offset == 2, message="the majority has it")
        for node in range(3):  # what the brokers' heartbeats report
            c.controller.report_log_ends(node, {("t", 0): c.replica(node, "t").log_end_offset})
        c.controller.fence(leader)
        assert c.leader_of("t") == other
        c.controller.set_isolated(first_in_line, False)
        assert (await c.produce("t", [b"later"]))[0] == ErrorCode.NONE
        assert (await c.fetch(other, "t", 1))[1] == [b"a", b"committed", b"later"]


async def test_high_watermark_never_passes_a_replica_joining_the_isr(tmp_path, monkeypatch):
    proposals: list[list[int]] = []
    original = LocalControllerClient.alter_partition
    in_flight = {"hold": False}
    answered = anyio.Event()  # the controller's answer arrives when the test says

    async def slow_alter(self, topic, index, leader_epoch, partition_epoch, new_isr):
        proposals.append(list(new_isr))
        if in_flight["hold"]:
            await answered.wait()  # the round trip to a controller process and back, still under way
        return await original(self, topic, index, leader_epoch, partition_epoch, new_isr)

    monkeypatch.setattr(LocalControllerClient, "alter_partition", slow_alter)
    async with cluster(tmp_path, lag_ms=300) as c:
        c.controller.create_topic("t", 1, 3)
        leader, joiner, _ = c.controller.image.topics["t"].partitions[0].replicas
        c.controller.set_isolated(joiner, True)
        await wait_until(lambda: joiner not in c.controller.image.topics["t"].partitions[0].isr, message="shrink")
        assert (await c.produce("t", [b"a"]))[0] == ErrorCode.NONE
        seen = len(proposals)
        in_flight["hold"] = True
        c.controller.set_isolated(joiner, False)
        await wait_until(lambda: any(joiner in p for p in proposals[seen:]), message="expansion proposed")
        c.controller.set_isolated(joiner, True)  # the joiner's next fetch is late
        code, _ = await c.produce("t", [b"b"], timeout_ms=300)
        # while the joiner is about to become in-sync, the record is not COMMITTED without it
        assert code == ErrorCode.REQUEST_TIMED_OUT
        assert c.replica(leader, "t").high_watermark <= c.replica(joiner, "t").log_end_offset
        answered.set()


async def test_truncation_keeps_an_idempotent_producers_earlier_batches(tmp_path):
    from kshim.log.log import LogConfig
    from kshim.replica.partition import Partition
    from kshim.cluster.image import MetadataImage, PartitionInfo
    from kshim.configs import resolve
    p = Partition("t", 0, tmp_path / "t-0", LogConfig(), node_id=0)
    p.apply_partition_state(PartitionInfo(0, (0,), 0, 0, (0,)), MetadataImage(1, "c", 0))
    p.configure(resolve({}))
    batches = [encode_batch([(None, b"%d" % seq)], producer_id=7, producer_epoch=0, base_sequence=seq)
               for seq in range(10)]
    for batch in batches:
        assert p.append(batch).error == ErrorCode.NONE
    p.truncate_to(5)  # the last five batches go, and with them every batch the producer state remembered
    retry = p.append(batches[4])  # a retry of a batch that is still in the log
    assert (retry.error, retry.base_offset, retry.appended_batches) == (ErrorCode.NONE, 4, 0)
    assert p.append(batches[6]).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # a gap is still a gap
    p.close()


async def test_acks_all_waiter_ends_when_the_topic_is_deleted(tmp_path):
    async with cluster(tmp_path, lag_ms=60000) as c:
        c.controller.create_topic("t", 1, 3)
        leader = c.leader_of("t")
        for node in range(3):
            if node != leader:
                c.controller.set_isolated(node, True)
        result = {}

        async def produce():
            # a timeout far beyond the test's: a waiter left waiting would answer REQUEST_TIMED_OUT
            result["answer"] = await c.produce("t", [b"x"], timeout_ms=600_000)

        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            await wait_until(lambda: c.replica(leader, "t") and c.replica(leader, "t").log_end_offset == 1,
                           message="appended")
            c.controller.delete_topic("t")
        assert result["answer"][0] not in (ErrorCode.NONE, ErrorCode.REQUEST_TIMED_OUT)


def test_a_parked_partition_is_retried_soon_and_bounds_the_long_poll():
    """A follower that learns of a partition before its leader does (a new topic) parks it on
    NOT_LEADER_OR_FOLLOWER: it is tried again after 5 ms, then twice as late each time up to
    100 ms, and the long-poll on its other partitions ends by then (it waited 500 ms: the first
    acks=all records to a new RF 3 topic took that long)."""
    from types import SimpleNamespace

    from kshim.replication import fetcher as fetcher_module
    from kshim.replication.fetcher import FETCH_MAX_WAIT_MS, PARK_RETRY_FIRST_S, PARK_RETRY_S, Fetcher

    now = [100.0]
    broker = SimpleNamespace(image=SimpleNamespace(version=7))
    f = Fetcher(broker, leader_id=1)  # type: ignore[arg-type]
    p = SimpleNamespace(topic="t", index=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fetcher_module.SYSTEM, "monotonic", lambda: now[0])
        assert f._max_wait_ms() == FETCH_MAX_WAIT_MS
        delays = []
        for _ in range(7):
            f._park(p)  # type: ignore[arg-type]
            delays.append(round(f._parked[("t", 0)][1] - now[0], 6))
        assert delays == [0.005, 0.01, 0.02, 0.04, 0.08, PARK_RETRY_S, PARK_RETRY_S]
        assert f._max_wait_ms() <= PARK_RETRY_S * 1000 + 1
        f._parked.clear()
        f._park(p)  # type: ignore[arg-type]
        assert f._max_wait_ms() <= PARK_RETRY_FIRST_S * 1000 + 1
        assert f._is_parked(("t", 0), 7, now[0])
        assert not f._is_parked(("t", 0), 8, now[0])  # a newer image: tried at once
        broker.image.version = 8
        assert f._max_wait_ms() == FETCH_MAX_WAIT_MS  # ... and bounds nothing
