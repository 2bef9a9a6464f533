"""Partition reassignments in the controller (KIP-455, Kafka's ReplicationControlManager), in-process
on a three-broker cluster: the replica set while a reassignment is under way, its completion when
the ISR holds every target replica (leadership moving off a removed leader), cancellation,
Kafka's error codes, and the replicas left to delete on brokers that are down."""
from __future__ import annotations

import random

import pytest

from kshim.broker import BrokerConfig
from kshim.clock import ManualClock
from kshim.cluster.image import PartitionInfo, replica_status
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.messages import Reassignment
from kshim.controller.store import MetadataStore
from kshim.security.acls import AclOperation as Op, AuthorizerConfig, ResourceType as RT
from kshim.standalone import open_standalone
from tests.test_authorization import ADMIN, call, creation, grant, handler, new_topic
from wire.errors import ErrorCode


@pytest.fixture
def controller(tmp_path, monkeypatch):
    monkeypatch.setattr(random, "randrange", lambda n: 0)  # partition i on brokers i, i+1 (mod 3)
    c = Controller(MetadataStore(tmp_path / "metadata.sqlite"), ControllerConfig(), ManualClock())
    for node in range(3):
        c.register_broker(node, "127.0.0.1", 9092 + node)
    c.create_topic("t", 2, 2)
    yield c
    c.close()


def reassign(c: Controller, *asked: tuple[str, int, tuple[int, ...] | None],
             allow_rf_change: bool = True) -> list[ErrorCode]:
    out = c.alter_partition_reassignments(tuple(Reassignment(t, i, r) for t, i, r in asked), allow_rf_change)
    assert [(r.topic, r.partition) for r in out] == [(t, i) for t, i, _ in asked]
    return [ErrorCode(r.error_code) for r in out]


def part(c: Controller, index: int = 0) -> PartitionInfo:
    return c.image.topics["t"].partitions[index]


def expand_isr(c: Controller, index: int, isr: tuple[int, ...]) -> PartitionInfo:
    """The leader's AlterPartition, as its ISR upkeep sends it once the new replicas caught up."""
    p = part(c, index)
    epoch = c.image.brokers[p.leader].epoch
    return c.alter_partition(p.leader, epoch, "t", index, p.leader_epoch, p.partition_epoch, isr)


def test_a_reassignment_adds_the_target_then_completes_when_it_is_in_sync(controller):
    c = controller
    assert (part(c).replicas, part(c).leader) == ((0, 1), 0)
    epoch = part(c).leader_epoch
    assert reassign(c, ("t", 0, (1, 2))) == [ErrorCode.NONE]
    p = part(c)
    # the target first, then the replica being removed; the leader leads on meanwhile
    assert (p.replicas, p.adding, p.removing, p.isr, p.leader, p.leader_epoch) == ((1, 2, 0), (2,), (0,), (0, 1), 0, epoch)
    assert [(o.partition, o.replicas, o.adding, o.removing) for o in c.list_partition_reassignments(None)] == [
        (0, (1, 2, 0), (2,), (0,))]
    # an ISR change before replica 2 caught up (the same ISR proposed again) completes nothing
    p = expand_isr(c, 0, (0, 1))
    assert (p.replicas, p.adding, p.removing, p.leader) == ((1, 2, 0), (2,), (0,), 0)
    # replica 2 caught up: the ISR change that takes it in completes the reassignment; the leader
    # was removed, so the first target replica in the ISR leads, in a new epoch
    done = expand_isr(c, 0, (0, 1, 2))
    assert (done.replicas, done.isr, done.leader, done.adding, done.removing) == ((1, 2), (1, 2), 1, (), ())
    assert done.leader_epoch == epoch + 1
    assert c.list_partition_reassignments(None) == ()
    # broker 0 must delete its replica: pending until it reports the image that removed it
    assert [(d.topic, d.index, d.node) for d in c.pending_deletions()] == [("t", 0, 0)]
    c.report_image_version(0, c.version)
    assert c.pending_deletions() == []


def test_a_leader_that_stays_keeps_leading_in_a_new_epoch_when_a_replica_is_removed(controller):
    c = controller
    epoch = part(c).leader_epoch
    reassign(c, ("t", 0, (0, 2)))
    done = expand_isr(c, 0, (0, 1, 2))
    assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((0, 2), (0, 2), 0, epoch + 1)


def test_a_target_already_in_sync_completes_at_once_unless_a_live_leader_must_hand_over(controller):
    c = controller
    epoch = part(c).leader_epoch
    reassign(c, ("t", 0, (1, 0)))  # a reorder: nothing to add or remove, the leader stays
    assert (part(c).replicas, part(c).leader, part(c).leader_epoch, part(c).reassigning) == ((1, 0), 0, epoch, False)
    reassign(c, ("t", 0, (0,)))  # a shrink that keeps the leader: at once
    assert (part(c).replicas, part(c).isr, part(c).leader, part(c).reassigning) == ((0,), (0,), 0, False)
    reassign(c, ("t", 1, (2,)))  # a shrink that removes the live leader (1): its move, once it handed over
    assert (part(c, 1).replicas, part(c, 1).leader, part(c, 1).removing) == ((2, 1), 1, (1,))
    done = expand_isr(c, 1, part(c, 1).isr)  # its ISR, proposed after the handover
    assert (done.replicas, done.isr, done.leader, done.reassigning) == ((2,), (2,), 2, False)


def test_a_move_waiting_for_a_leader_that_died_is_completed_by_the_next_leader(controller):
    c = controller
    reassign(c, ("t", 1, (2,)))  # t-1 (replicas 1, 2, both in sync), led by 1: 1 hands over first
    c.fence(1)  # it died first: 2, in sync, leads; its ISR upkeep proposes the ISR that completes the move
    assert (part(c, 1).leader, part(c, 1).removing) == (2, (1,))
    done = expand_isr(c, 1, (2,))
    assert (done.replicas, done.isr, done.leader, done.reassigning) == ((2,), (2,), 2, False)


def test_cancel_reverts_to_the_original_replicas(controller):
    c = controller
    reassign(c, ("t", 0, (1, 2)))
    expanded = expand_isr(c, 0, (0, 1))  # no change for 2 yet: still under way
    assert expanded.adding == (2,)
    assert reassign(c, ("t", 0, None)) == [ErrorCode.NONE]
    p = part(c)
    # the original replicas, in the order of the reassigning set as Kafka reverts it (the preferred
    # leader may change: a preferred election would move it)
    assert (p.replicas, p.isr, p.leader, p.adding, p.removing) == ((1, 0), (1, 0), 0, (), ())
    assert [(d.index, d.node) for d in c.pending_deletions()] == [(0, 2)]  # the replica that was being added
    assert reassign(c, ("t", 0, None)) == [ErrorCode.NO_REASSIGNMENT_IN_PROGRESS]


def test_a_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it(controller):
    c = controller
    reassign(c, ("t", 0, (2, 1)))  # add 2, remove 0
    c.fence(1)
    expand_isr(c, 0, (0, 2))  # 2 caught up, but 1 is out: not complete
    c.fence(0)  # 2, an adding replica, is the only one in sync and leads
    assert (part(c).isr, part(c).leader, part(c).adding) == ((2,), 2, (2,))
    assert reassign(c, ("t", 0, None)) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    c.set_topic_configs("t", {"unclean.leader.election.enable": "true"})
    c.register_broker(1, "127.0.0.1", 9093)
    assert reassign(c, ("t", 0, None)) == [ErrorCode.NONE]
    p = part(c)
    assert (p.replicas, p.leader, p.isr, p.reassigning) == ((1, 0), 1, (1,), False)


def test_errors_are_kafkas_and_each_partition_is_answered_on_its_own(controller):
    c = controller
    before = c.version
    assert reassign(c, ("t", 0, (1, 9)), ("t", 0, (1, 1)), ("t", 0, ()), ("t", 7, (0, 1)), ("nope", 0, (0,)),
                    ("t", 1, None), ("t", 1, (0,)), allow_rf_change=False) == [
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
        ErrorCode.INVALID_REPLICATION_FACTOR]
    assert c.version == before  # nothing changed, nothing published
    # one good partition among bad ones goes ahead
    assert reassign(c, ("t", 1, (9, 0)), ("t", 1, (2, 0))) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.NONE]
    assert part(c, 1).replicas == (2, 0, 1)


def test_list_leaves_out_what_is_not_reassigning(controller):
    c = controller
    reassign(c, ("t", 1, (2, 0)))
    assert [o.partition for o in c.list_partition_reassignments({"t": (0, 1, 5), "nope": (0,)})] == [1]
    assert c.list_partition_reassignments({"t": (0,)}) == ()


def test_a_reassignment_survives_a_controller_restart(controller, tmp_path):
    reassign(controller, ("t", 0, (1, 2)))
    controller.close()
    c = Controller(MetadataStore(tmp_path / "metadata.sqlite"), ControllerConfig(), ManualClock())
    try:
        p = c.image.topics["t"].partitions[0]
        assert (p.replicas, p.adding, p.removing) == ((1, 2, 0), (2,), (0,))
    finally:
        c.close()


def test_a_topic_deleted_while_a_broker_is_down_stays_deleting_there_until_it_returns(controller, tmp_path):
    c = controller
    c.fence(1)
    c.delete_topic("t")
    for node in (0, 2):
        c.report_image_version(node, c.version)
    assert sorted((d.index, d.node) for d in c.pending_deletions()) == [(0, 1), (1, 1)]
    c.report_image_version(1, c.version)  # a fenced broker's report does not count: it is down
    assert len(c.pending_deletions()) == 2
    c.close()
    c = Controller(MetadataStore(tmp_path / "metadata.sqlite"), ControllerConfig(), ManualClock())
    try:
        assert len(c.pending_deletions()) == 2  # kept across a controller restart
        c.register_broker(1, "127.0.0.1", 9093)
        c.report_image_version(1, c.version)  # back: its first image removed its stray replicas
        assert c.pending_deletions() == []
    finally:
        c.close()


def test_replica_states_for_the_status(controller):
    c = controller
    reassign(c, ("t", 0, (1, 2)))
    c.fence(1)
    p = part(c)
    states = replica_status(p, {0, 2}, {"0": {"log_end_offset": 10}, "2": {"log_end_offset": 4}})
    assert states == {"2": {"state": "adding", "in_sync": False, "lag": 6},
                      "1": {"state": "offline", "in_sync": False, "lag": None},
                      "0": {"state": "removing", "in_sync": True, "lag": 0}}


# ---------------------------------------------------------------- the handlers, on a single broker with ACLs

@pytest.mark.anyio
async def test_the_handlers_check_cluster_acls_and_answer_per_partition(tmp_path):
    alter, listing = handler("45_alter_partition_reassignments"), handler("46_list_partition_reassignments")
    broker = open_standalone(BrokerConfig(data_dir=tmp_path, authorizer=AuthorizerConfig(True, frozenset({ADMIN}))))
    try:
        await new_topic(broker, "r", 1)
        await grant(broker, creation(RT.CLUSTER, "kafka-cluster", "User:alice", Op.ALTER),
                    creation(RT.CLUSTER, "kafka-cluster", "User:alice", Op.DESCRIBE))
        body = {"timeout_ms": 1000, "allow_replication_factor_change": False, "topics": [
            {"name": "r", "partitions": [{"partition_index": 0, "replicas": [0, 9]},
                                         {"partition_index": 0, "replicas": None}, {"partition_index": 3, "replicas": [0]}]}]}
        denied = await call(broker, alter, 1, body, "User:bob")
        assert denied.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert [p.error_code for p in denied.responses[0].partitions] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 3
        out = await call(broker, alter, 1, body, "User:alice")
        assert out.error_code == ErrorCode.NONE and out.allow_replication_factor_change is False
        # the assignment is checked first (as Kafka's controller), then the replication factor
        assert [p.error_code for p in out.responses[0].partitions] == [
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        out = await call(broker, alter, 0, {"timeout_ms": 1000, "topics": [
            {"name": "r", "partitions": [{"partition_index": 0, "replicas": [0, 9]}]}]}, "User:alice")
        assert [p.error_code for p in out.responses[0].partitions] == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
        assert "broker 9" in out.responses[0].partitions[0].error_message
        assert (await call(broker, listing, 0, {"timeout_ms": 1000, "topics": None}, "User:bob")).error_code == \
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        listed = await call(broker, listing, 0, {"timeout_ms": 1000, "topics": [{"name": "r", "partition_indexes": [0]}]},
                            "User:alice")
        assert (listed.error_code, listed.topics) == (ErrorCode.NONE, [])
    finally:
        broker.close()
