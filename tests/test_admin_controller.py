"""The controller's admin operations on a three-broker cluster, in-process: manual partition
assignments, leader elections, features, broker unregistration (Kafka's error codes for each)."""
from __future__ import annotations

import pytest

from kshim.clock import ManualClock
from kshim.controller.controller import Controller, ControllerConfig
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
