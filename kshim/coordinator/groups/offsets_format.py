"""kshim's own record format for committed offsets in `__consumer_offsets` (not Kafka's).

key   = version int16 (1), group string, topic string, partition int32
value = version int16 (1), offset int64, leader epoch int32, metadata string, commit timestamp int64
Strings are int16-length-prefixed UTF-8. A record whose value is null (a tombstone) deletes the
key. Readers skip keys of versions they do not know, so later record kinds can share the topic.
"""
from __future__ import annotations

from dataclasses import dataclass

from construct import Int16ub, Int32sb, Int64sb, PascalString, Struct, StreamError, ConstructError

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 1

_String = PascalString(Int16ub, "utf8")
OffsetKey = Struct("version" / Int16ub, "group" / _String, "topic" / _String, "partition" / Int32sb)
OffsetValue = Struct("version" / Int16ub, "offset" / Int64sb, "leader_epoch" / Int32sb,
                     "metadata" / _String, "commit_timestamp" / Int64sb)


@dataclass(slots=True)
class OffsetEntry:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    log_offset: int = -1  # where the record sits in __consumer_offsets (later appends win)


def encode_key(group: str, topic: str, partition: int) -> bytes:
    return OffsetKey.build(dict(version=OFFSET_KEY_VERSION, group=group, topic=topic, partition=partition))


def encode_value(entry: OffsetEntry) -> bytes:
    return OffsetValue.build(dict(version=OFFSET_VALUE_VERSION, offset=entry.offset, leader_epoch=entry.leader_epoch,
                                  metadata=entry.metadata, commit_timestamp=entry.commit_timestamp))


def decode_key(data: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition), or None for a key of another kind or version."""
    try:
        if len(data) < 2 or int.from_bytes(data[:2], "big") != OFFSET_KEY_VERSION:
            return None
        k = OffsetKey.parse(data)
    except (StreamError, ConstructError, UnicodeDecodeError):
        return None
    return k.group, k.topic, k.partition


def decode_value(data: bytes) -> OffsetEntry | None:
    try:
        v = OffsetValue.parse(data)
    except (StreamError, ConstructError, UnicodeDecodeError):
        return None
    if v.version != OFFSET_VALUE_VERSION:
        return None
    return OffsetEntry(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
