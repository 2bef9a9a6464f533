"""kshim's record format for a classic group's membership in `__consumer_offsets` (Kafka keeps the
same facts in its GroupMetadata records), beside the offset records of `offsets_format`.

key   = version int16 (2), group string
value = version int16 (1), protocol type, generation int32, protocol, leader (nullable strings),
        state timestamp int64, then an int32 count of members, each: member id, group instance id
        (nullable), client id, client host, rebalance timeout int32, session timeout int32,
        subscription bytes (the metadata of the group's protocol), assignment bytes
A tombstone (null value) forgets the group. Offset readers skip this key version (their key is
version 1), and this reader skips theirs, so both kinds share the partition and its compaction.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Hashable

from construct import (Adapter, Bytes, ConstructError, GreedyBytes, Int16sb, Int16ub, Int32sb, Int64sb, PascalString,
                       Prefixed, PrefixedArray, StreamError, Struct, Terminated)

GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 1

_String = PascalString(Int16ub, "utf8")


class _Nullable(Adapter):
    """An int16-length UTF-8 string whose length -1 is None."""

    def _decode(self, obj, context, path):
        return None if obj.length < 0 else bytes(obj.data).decode()

    def _encode(self, obj, context, path):
        data = b"" if obj is None else obj.encode()
        return {"length": -1 if obj is None else len(data), "data": data}


_NullableString = _Nullable(Struct("length" / Int16sb, "data" / Bytes(lambda ctx: max(ctx.length, 0))))
_Bytes = Prefixed(Int32sb, GreedyBytes)

GroupKey = Struct("version" / Int16ub, "group" / _String, Terminated)
_Member = Struct("member_id" / _String, "instance_id" / _NullableString, "client_id" / _String,
                 "client_host" / _String, "rebalance_timeout_ms" / Int32sb, "session_timeout_ms" / Int32sb,
                 "subscription" / _Bytes, "assignment" / _Bytes)
GroupValue = Struct("version" / Int16ub, "protocol_type" / _NullableString, "generation" / Int32sb,
                    "protocol" / _NullableString, "leader" / _NullableString, "state_timestamp" / Int64sb,
                    "members" / PrefixedArray(Int32sb, _Member), Terminated)


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    protocol_type: str | None
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[StoredMember, ...]


def encode_key(group: str) -> bytes:
    return GroupKey.build(dict(version=GROUP_KEY_VERSION, group=group))


def encode_value(g: StoredGroup) -> bytes:
    return GroupValue.build(dict(
        version=GROUP_VALUE_VERSION, protocol_type=g.protocol_type, generation=g.generation,
        protocol=g.protocol, leader=g.leader, state_timestamp=g.state_timestamp,
        members=[dict(member_id=m.member_id, instance_id=m.instance_id, client_id=m.client_id,
                      client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                      session_timeout_ms=m.session_timeout_ms, subscription=m.subscription,
                      assignment=m.assignment) for m in g.members]))


def decode_key(data: bytes) -> str | None:
    """The group id, or None for a key of another kind or version."""
    if len(data) < 2 or int.from_bytes(data[:2], "big") != GROUP_KEY_VERSION:
        return None
    try:
        return str(GroupKey.parse(data).group)
    except (StreamError, ConstructError, UnicodeDecodeError):
        return None


def decode_value(data: bytes) -> StoredGroup | None:
    """The stored group, or None for a value this version cannot read (it is then skipped)."""
    if len(data) < 2 or int.from_bytes(data[:2], "big") != GROUP_VALUE_VERSION:
        return None
    try:
        v = GroupValue.parse(data)
    except (StreamError, ConstructError, UnicodeDecodeError):
        return None
    return StoredGroup(v.protocol_type, v.generation, v.protocol, v.leader, v.state_timestamp,
                       tuple(StoredMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                                          m.rebalance_timeout_ms, m.session_timeout_ms, bytes(m.subscription),
                                          bytes(m.assignment)) for m in v.members))


# ---------------------------------------------------------------------------------------- KIP-848
# A consumer group (the "consumer" protocol) as one record: Kafka spreads the same facts over its
# ConsumerGroupMetadata, MemberMetadata, TargetAssignment and CurrentMemberAssignment records.
#
# key   = version int16 (3), group string
# value = version int16 (1), group epoch int32, assignment epoch int32, assignor string, then an
#         int32 count of members, each: member id, instance id, rack id (nullable), client id,
#         client host, subscribed names (int32 count of strings), subscribed regex (nullable),
#         rebalance timeout int32, server assignor (nullable), epoch int32, previous epoch int32,
#         state string, assigned, revoking and target partitions (each an int32 count of
#         topic id (16 bytes) + partition int32)

CONSUMER_GROUP_KEY_VERSION = 3
CONSUMER_GROUP_VALUE_VERSION = 1

_Partitions = PrefixedArray(Int32sb, Struct("topic_id" / Bytes(16), "partition" / Int32sb))
_ConsumerMember = Struct(
    "member_id" / _String, "instance_id" / _NullableString, "rack_id" / _NullableString, "client_id" / _String,
    "client_host" / _String, "subscribed_names" / PrefixedArray(Int32sb, _String),
    "subscribed_regex" / _NullableString, "rebalance_timeout_ms" / Int32sb, "server_assignor" / _NullableString,
    "epoch" / Int32sb, "previous_epoch" / Int32sb, "state" / _String, "assigned" / _Partitions,
    "revoking" / _Partitions, "target" / _Partitions)
ConsumerGroupKey = Struct("version" / Int16ub, "group" / _String, Terminated)
ConsumerGroupValue = Struct("version" / Int16ub, "group_epoch" / Int32sb, "assignment_epoch" / Int32sb,
                            "assignor" / _String, "members" / PrefixedArray(Int32sb, _ConsumerMember), Terminated)

TopicPartitions = frozenset[tuple[Hashable, int]]  # topic ids are uuid.UUIDs


@dataclass(frozen=True, slots=True)
class StoredConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_names: tuple[str, ...]
    subscribed_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    epoch: int
    previous_epoch: int
    state: str
    assigned: TopicPartitions
    revoking: TopicPartitions
    target: TopicPartitions


@dataclass(frozen=True, slots=True)
class StoredConsumerGroup:
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[StoredConsumerMember, ...]


def _partitions(tps: TopicPartitions) -> list[dict]:
    pairs = sorted((uuid.UUID(str(t)).bytes, p) for t, p in tps)
    return [{"topic_id": t, "partition": p} for t, p in pairs]


def encode_consumer_key(group: str) -> bytes:
    return ConsumerGroupKey.build(dict(version=CONSUMER_GROUP_KEY_VERSION, group=group))


def encode_consumer_value(g: StoredConsumerGroup) -> bytes:
    return ConsumerGroupValue.build(dict(
        version=CONSUMER_GROUP_VALUE_VERSION, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
        assignor=g.assignor, members=[dict(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
            client_host=m.client_host, subscribed_names=list(m.subscribed_names), subscribed_regex=m.subscribed_regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor, epoch=m.epoch,
            previous_epoch=m.previous_epoch, state=m.state, assigned=_partitions(m.assigned),
            revoking=_partitions(m.revoking), target=_partitions(m.target)) for m in g.members]))


def decode_consumer_key(data: bytes) -> str | None:
    if len(data) < 2 or int.from_bytes(data[:2], "big") != CONSUMER_GROUP_KEY_VERSION:
        return None
    try:
        return str(ConsumerGroupKey.parse(data).group)
    except (StreamError, ConstructError, UnicodeDecodeError):
        return None


def decode_consumer_value(data: bytes) -> StoredConsumerGroup | None:
    if len(data) < 2 or int.from_bytes(data[:2], "big") != CONSUMER_GROUP_VALUE_VERSION:
        return None
    try:
        v = ConsumerGroupValue.parse(data)
    except (StreamError, ConstructError, UnicodeDecodeError):
        return None

    def tps(items) -> TopicPartitions:
        return frozenset((uuid.UUID(bytes=bytes(i.topic_id)), i.partition) for i in items)

    return StoredConsumerGroup(v.group_epoch, v.assignment_epoch, v.assignor, tuple(StoredConsumerMember(
        m.member_id, m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_names),
        m.subscribed_regex, m.rebalance_timeout_ms, m.server_assignor, m.epoch, m.previous_epoch, m.state,
        tps(m.assigned), tps(m.revoking), tps(m.target)) for m in v.members))


# ---------------------------------------------------------------------------------------- KIP-932
# A share group as one record (Kafka spreads the same facts over its ShareGroupMetadata,
# ShareGroupMemberMetadata, ShareGroupTargetAssignment* and ShareGroupCurrentMemberAssignment records).
#
# key   = version int16 (4), group string
# value = version int16 (1), group epoch int32, assignment epoch int32, then an int32 count of
#         members, each: member id, rack id (nullable), client id, client host, subscribed names
#         (int32 count of strings), epoch int32, assigned and target partitions (each an int32
#         count of topic id (16 bytes) + partition int32)

SHARE_GROUP_KEY_VERSION = 4
SHARE_GROUP_VALUE_VERSION = 1

_ShareMember = Struct(
    "member_id" / _String, "rack_id" / _NullableString, "client_id" / _String, "client_host" / _String,
    "subscribed_names" / PrefixedArray(Int32sb, _String), "epoch" / Int32sb, "assigned" / _Partitions,
    "target" / _Partitions)
ShareGroupKey = Struct("version" / Int16ub, "group" / _String, Terminated)
ShareGroupValue = Struct("version" / Int16ub, "group_epoch" / Int32sb, "assignment_epoch" / Int32sb,
                         "members" / PrefixedArray(Int32sb, _ShareMember), Terminated)


@dataclass(frozen=True, slots=True)
class StoredShareMember:
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_names: tuple[str, ...]
    epoch: int
    assigned: TopicPartitions
    target: TopicPartitions


@dataclass(frozen=True, slots=True)
class StoredShareGroup:
    group_epoch: int
    assignment_epoch: int
    members: tuple[StoredShareMember, ...]


def encode_share_key(group: str) -> bytes:
    return ShareGroupKey.build(dict(version=SHARE_GROUP_KEY_VERSION, group=group))


def encode_share_value(g: StoredShareGroup) -> bytes:
    return ShareGroupValue.build(dict(
        version=SHARE_GROUP_VALUE_VERSION, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
        members=[dict(member_id=m.member_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                      subscribed_names=list(m.subscribed_names), epoch=m.epoch, assigned=_partitions(m.assigned),
                      target=_partitions(m.target)) for m in g.members]))


def decode_share_key(data: bytes) -> str | None:
    if len(data) < 2 or int.from_bytes(data[:2], "big") != SHARE_GROUP_KEY_VERSION:
        return None
    try:
        return str(ShareGroupKey.parse(data).group)
    except (StreamError, ConstructError, UnicodeDecodeError):
        return None


def decode_share_value(data: bytes) -> StoredShareGroup | None:
    if len(data) < 2 or int.from_bytes(data[:2], "big") != SHARE_GROUP_VALUE_VERSION:
        return None
    try:
        v = ShareGroupValue.parse(data)
    except (StreamError, ConstructError, UnicodeDecodeError):
        return None

    def tps(items) -> TopicPartitions:
        return frozenset((uuid.UUID(bytes=bytes(i.topic_id)), i.partition) for i in items)

    return StoredShareGroup(v.group_epoch, v.assignment_epoch, tuple(StoredShareMember(
        m.member_id, m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_names), m.epoch, tps(m.assigned),
        tps(m.target)) for m in v.members))
