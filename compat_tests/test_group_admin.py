"""Group administration with kafka-python's admin client against a real kshim: listing and
describing groups, altering and deleting committed offsets (OffsetDelete), deleting groups
(DeleteGroups), and the refusals a real broker gives for groups that still have members."""
from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import NoError
from kafka.structs import OffsetAndMetadata

DEADLINE_S = 30.0


@pytest.fixture
def admin(kshim):
    client = KafkaAdminClient(bootstrap_servers=kshim.bootstrap)
    yield client
    client.close()


def _committed_group(kshim, admin, topic: str) -> str:
    """A group that committed offsets 3 and 5 on partitions 0 and 1, with no members left."""
    admin.create_topics([NewTopic(topic, 2, 1)])
    producer = KafkaProducer(bootstrap_servers=kshim.bootstrap)
    for i in range(10):
        producer.send(topic, b"v%d" % i, partition=i % 2)
    producer.flush(10)
    producer.close()
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(bootstrap_servers=kshim.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(3, "three", -1),
                         TopicPartition(topic, 1): OffsetAndMetadata(5, "", -1)})
    finally:
        consumer.close()
    return group


def test_list_describe_and_offsets_of_an_empty_group(kshim, admin, topic_name):
    group = _committed_group(kshim, admin, topic_name)
    listed = {g["group_id"]: g for g in admin.list_groups()}
    assert listed[group]["group_state"] == "Empty" and listed[group]["group_type"] == "classic"
    offsets = admin.list_group_offsets({group: None})[group]
    assert {tp.partition: (o.offset, o.metadata) for tp, o in offsets.items()} == {0: (3, "three"), 1: (5, "")}
    described = admin.describe_groups([group])[group]
    assert described["group_state"] == "Empty" and described["members"] == [] and described["error"] is None


def test_alter_then_delete_committed_offsets(kshim, admin, topic_name):
    group = _committed_group(kshim, admin, topic_name)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    result = admin.alter_group_offsets(group, {tp0: OffsetAndMetadata(4, "four", -1)})
    assert result == {tp0: NoError}
    result = admin.delete_group_offsets(group, [tp1])  # OffsetDelete
    assert result == {tp1: NoError}
    offsets = admin.list_group_offsets({group: None})[group]
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {0: 4}


def test_delete_group_only_when_empty(kshim, admin, topic_name):
    group = _committed_group(kshim, admin, topic_name)
    member = KafkaConsumer(topic_name, bootstrap_servers=kshim.bootstrap, group_id=group,
                           enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        # the topic's partitions in the member's metadata before it joins: kafka-python, as the
        # group's leader, assigns from what its metadata holds, and a join that raced its first
        # metadata answer under CI load assigned nothing ("No partition metadata for topic") and
        # was never redone within the deadline
        assert member.partitions_for_topic(topic_name) == {0, 1}
        deadline = time.monotonic() + DEADLINE_S
        while not member.assignment():  # joined: the group has a member now
            assert time.monotonic() < deadline, "the consumer never got an assignment"
            member.poll(timeout_ms=100)
        assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
    finally:
        member.close()
    assert admin.delete_groups([group]) == {group: "OK"}  # DeleteGroups: the group and its offsets go
    assert not admin.list_group_offsets({group: None})[group]
