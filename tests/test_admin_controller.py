"""The controller's admin operations on a three-broker cluster, in-process: manual partition
assignments, leader elections, features, broker unregistration (Kafka's error codes for each)."""
from __future__ import annotations

import pytest

from kshim.clock import ManualClock
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.messages import Election, FeatureUpdate, FeatureUpgrade
from kshim.controller.store import MetadataStore
from kshim.errors import BrokerError
from wire.errors import ErrorCode


@pytest.fixture
def controller(tmp_path):
    c = Controller(MetadataStore(tmp_path / "metadata.sqlite"), ControllerConfig(), ManualClock())
    for node in range(3):
        c.register_broker(node, "127.0.0.1", 9092 + node)
    yield c
    c.close()


def reopened(c: Controller, tmp_path) -> Controller:
    c.close()
    return Controller(MetadataStore(tmp_path / "metadata.sqlite"), ControllerConfig(), ManualClock())


def error_of(call) -> tuple[ErrorCode, str]:
    with pytest.raises(BrokerError) as e:
        call()
    return e.value.code, e.value.message


# ---------------------------------------------------------------- CreatePartitions, manual assignments

def test_manual_assignment_places_the_new_partitions_as_asked(controller):
    controller.create_topic("t", 1, 2)
    controller.create_partitions("t", 3, assignments=((2, 0), (1, 2)))
    parts = controller.image.topics["t"].partitions
    assert [(p.replicas, p.leader, p.isr) for p in parts[1:]] == [((2, 0), 2, (2, 0)), ((1, 2), 1, (1, 2))]


def test_manual_assignment_must_match_the_replication_factor(controller):
    controller.create_topic("t", 1, 2)
    code, message = error_of(lambda: controller.create_partitions("t", 2, assignments=((0, 1, 2),)))
    assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "3 replica(s)" in message and "have 2" in message


def test_manual_assignment_to_fenced_brokers_only_is_refused_and_fenced_ones_stay_out_of_the_isr(controller):
    controller.create_topic("t", 1, 2)
    controller.fence(2)
    code, message = error_of(lambda: controller.create_partitions("t", 2, assignments=((2,), )))
    assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT  # one replica where the topic has two
    code, message = error_of(lambda: controller.create_partitions("t", 2, assignments=((2, 2),)))
    assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "twice" in message
    controller.create_partitions("t", 2, assignments=((2, 1),))
    p = controller.image.topics["t"].partitions[1]
    assert (p.replicas, p.leader, p.isr) == ((2, 1), 1, (1,))


def test_manual_assignment_validate_only_changes_nothing_and_survives_a_restart(controller, tmp_path):
    controller.create_topic("t", 1, 1)
    version = controller.image.version
    controller.create_partitions("t", 2, validate_only=True, assignments=((1,),))
    assert controller.image.version == version and len(controller.image.topics["t"].partitions) == 1
    controller.create_partitions("t", 2, assignments=((1,),))
    again = reopened(controller, tmp_path)
    try:
        assert again.image.topics["t"].partitions[1].replicas == (1,)
    finally:
        again.close()


# ---------------------------------------------------------------- ElectLeaders

def results(out) -> dict[tuple[str, int], ErrorCode]:
    return {(r.topic, r.partition): ErrorCode(r.error_code) for r in out}


def test_preferred_election_moves_leadership_back_to_the_first_replica(controller):
    controller.create_topic("t", 1, 3)
    first = controller.image.topics["t"].partitions[0].replicas[0]
    controller.fence(first)
    moved = controller.image.topics["t"].partitions[0]
    assert moved.leader != first
    # not alive: not available; back but not yet in sync (fencing took it out of the ISR): the same
    out = controller.elect_leaders(Election.PREFERRED, {"t": (0,)})
    assert results(out) == {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    controller.register_broker(first, "127.0.0.1", 9092 + first)
    assert results(controller.elect_leaders(Election.PREFERRED, {"t": (0,)})) == {
        ("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    p = controller.image.topics["t"].partitions[0]
    controller.alter_partition(p.leader, controller.image.brokers[p.leader].epoch, "t", 0, p.leader_epoch,
                               p.partition_epoch, p.replicas)  # the leader takes it back into the ISR
    version = controller.image.version
    out = controller.elect_leaders(Election.PREFERRED, {"t": (0, 5), "nope": (0,)})
    assert results(out) == {("t", 0): ErrorCode.NONE, ("t", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    after = controller.image.topics["t"].partitions[0]
    assert controller.image.version > version
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (
        first, p.leader_epoch + 1, p.partition_epoch + 2)
    assert results(controller.elect_leaders(Election.PREFERRED, {"t": (0,)})) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}


def test_preferred_election_under_the_majority_quorum_waits_for_the_leaders_log_end(controller):
    controller.create_topic("t", 1, 3, {"kshim.commit.quorum": "majority"})
    first = controller.image.topics["t"].partitions[0].replicas[0]
    controller.fence(first)
    controller.register_broker(first, "127.0.0.1", 9092 + first)
    p = controller.image.topics["t"].partitions[0]
    controller.alter_partition(p.leader, controller.image.brokers[p.leader].epoch, "t", 0, p.leader_epoch,
                               p.partition_epoch, p.replicas)
    controller.report_log_ends(p.leader, {("t", 0): 100})
    controller.report_log_ends(first, {("t", 0): 60})  # in the ISR, but a majority may hold more
    assert results(controller.elect_leaders(Election.PREFERRED, {"t": (0,)})) == {
        ("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    controller.report_log_ends(first, {("t", 0): 100})
    assert results(controller.elect_leaders(Election.PREFERRED, {"t": (0,)})) == {("t", 0): ErrorCode.NONE}
    assert controller.image.topics["t"].partitions[0].leader == first


def test_all_partitions_leaves_out_the_elections_not_needed(controller):
    controller.create_topic("a", 3, 1)
    controller.create_topic("b", 1, 3)
    first = controller.image.topics["b"].partitions[0].replicas[0]
    controller.fence(first)
    out = controller.elect_leaders(Election.PREFERRED, None)
    # a's single replicas lead already; b's preferred replica is fenced; a-x led by `first` went offline
    offline = [(p.index) for p in controller.image.topics["a"].partitions if p.replicas == (first,)]
    assert results(out) == {("b", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                            **{("a", i): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE for i in offline}}


def test_unclean_election_only_without_an_alive_in_sync_replica(controller):
    controller.create_topic("t", 1, 2)
    p = controller.image.topics["t"].partitions[0]
    leader, follower = p.replicas
    assert results(controller.elect_leaders(Election.UNCLEAN, {"t": (0,)})) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}
    # the follower drops out of the ISR, then the leader dies: the partition goes offline
    controller.alter_partition(leader, controller.image.brokers[leader].epoch, "t", 0, p.leader_epoch,
                               p.partition_epoch, (leader,))
    controller.fence(leader)
    assert controller.image.topics["t"].partitions[0].leader == -1
    out = controller.elect_leaders(Election.UNCLEAN, {"t": (0,)})
    after = controller.image.topics["t"].partitions[0]
    assert results(out) == {("t", 0): ErrorCode.NONE}
    assert (after.leader, after.isr) == (follower, (follower,)) and after.leader_epoch == p.leader_epoch + 2


def test_unclean_election_with_no_replica_alive(controller):
    controller.create_topic("t", 1, 1)
    only = controller.image.topics["t"].partitions[0].replicas[0]
    controller.fence(only)
    out = controller.elect_leaders(Election.UNCLEAN, {"t": (0,)})
    assert results(out) == {("t", 0): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}
    assert [r.message for r in out][0]


# ---------------------------------------------------------------- DescribeQuorum, UpdateFeatures

def test_quorum_of_one_voter_with_the_brokers_as_observers(controller, tmp_path):
    v0 = controller.version
    controller.report_image_version(1, v0)
    controller.report_image_version(2, v0 - 1)
    controller.fence(0)
    q = controller.describe_quorum()
    assert (q.leader_id, q.high_watermark) == (0, controller.version)
    assert [(v.node_id, v.log_end_offset) for v in q.voters] == [(0, controller.version)]
    assert [(o.node_id, o.log_end_offset) for o in q.observers] == [(1, v0), (2, v0 - 1)]
    assert q.observers[0].last_caught_up_ms >= 0 and q.observers[1].last_caught_up_ms == -1
    again = reopened(controller, tmp_path)
    try:
        assert again.describe_quorum().leader_epoch == q.leader_epoch + 1  # a restart is a new election
    finally:
        again.close()


def update(c: Controller, name: str, level: int, upgrade: FeatureUpgrade = FeatureUpgrade.UPGRADE,
           validate_only: bool = False) -> None:
    c.update_features((FeatureUpdate(name, level, upgrade),), validate_only)


def test_features_are_checked_as_kafka_does(controller):
    assert controller.image.features == {"metadata.version": 30, "group.version": 1, "transaction.version": 2}
    checks = [("metadata.version", 29, FeatureUpgrade.SAFE_DOWNGRADE, "supports versions 30 to 30"),
              ("metadata.version", 31, FeatureUpgrade.UPGRADE, "supports versions 30 to 30"),
              ("share.version", 1, FeatureUpgrade.UPGRADE, "does not support"),
              ("transaction.version", 3, FeatureUpgrade.UPGRADE, "supports versions 0 to 2"),
              ("transaction.version", 1, FeatureUpgrade.UPGRADE, "without setting the upgrade type"),
              ("group.version", 0, FeatureUpgrade.UPGRADE, "without setting the upgrade type"),
              ("group.version", -1, FeatureUpgrade.SAFE_DOWNGRADE, "less than 0"),
              ("group.version", 2, FeatureUpgrade.UPGRADE, "supports versions 0 to 1")]
    for name, level, upgrade, reason in checks:
        code, message = error_of(lambda: update(controller, name, level, upgrade))
        assert code == ErrorCode.INVALID_UPDATE_VERSION and reason in message, (name, level, message)
    version = controller.image.version
    update(controller, "metadata.version", 30)  # its own level: nothing to do
    update(controller, "kraft.version", 0, FeatureUpgrade.SAFE_DOWNGRADE)  # absent already
    assert controller.image.version == version


def test_features_are_all_or_nothing_and_persist(controller, tmp_path):
    version = controller.image.version
    code, _ = error_of(lambda: controller.update_features((
        FeatureUpdate("group.version", 0, FeatureUpgrade.SAFE_DOWNGRADE),
        FeatureUpdate("transaction.version", 3, FeatureUpgrade.UPGRADE))))
    assert code == ErrorCode.INVALID_UPDATE_VERSION and controller.image.features["group.version"] == 1
    update(controller, "group.version", 0, FeatureUpgrade.SAFE_DOWNGRADE, validate_only=True)
    assert controller.image.version == version
    update(controller, "group.version", 0, FeatureUpgrade.SAFE_DOWNGRADE)
    update(controller, "transaction.version", 1, FeatureUpgrade.SAFE_DOWNGRADE)
    assert controller.image.features == {"metadata.version": 30, "transaction.version": 1}
    assert controller.image.features_epoch == controller.image.version > version
    again = reopened(controller, tmp_path)
    try:
        assert again.image.features == {"metadata.version": 30, "transaction.version": 1}
        assert again.image.features_epoch == controller.image.features_epoch
        update(again, "group.version", 1)
        assert again.image.features["group.version"] == 1
    finally:
        again.close()


# ---------------------------------------------------------------- UnregisterBroker

def test_unregister_a_broker_gone_for_good(controller, tmp_path):
    controller.create_topic("t", 1, 3)
    p = controller.image.topics["t"].partitions[0]
    gone = p.leader
    controller.fence(gone)
    assert error_of(lambda: controller.unregister_broker(7))[0] == ErrorCode.BROKER_ID_NOT_REGISTERED
    controller.unregister_broker(gone)
    after = controller.image.topics["t"].partitions[0]
    assert gone not in controller.image.brokers and gone not in after.isr and after.leader not in (gone, -1)
    assert after.replicas == p.replicas  # assignments stay until reassigned
    assert error_of(lambda: controller.unregister_broker(gone))[0] == ErrorCode.BROKER_ID_NOT_REGISTERED
    code, _ = error_of(lambda: controller.create_partitions("t", 2, assignments=((gone, *[r for r in p.replicas if r != gone]),)))
    assert code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    epoch = p.leader_epoch
    again = reopened(controller, tmp_path)
    try:
        assert gone not in again.image.brokers
        assert again.register_broker(gone, "127.0.0.1", 9999) == 2  # past the epoch it had
        assert again.image.topics["t"].partitions[0].leader_epoch > epoch
    finally:
        again.close()


def test_unregister_a_live_broker_makes_it_register_again(controller):
    epoch = controller.image.brokers[1].epoch
    controller.unregister_broker(1)
    code, _ = error_of(lambda: controller.heartbeat(1, epoch))
    assert code == ErrorCode.STALE_BROKER_EPOCH
    assert controller.register_broker(1, "127.0.0.1", 9093) == epoch + 1
