"""kshim's own record format for committed offsets in `__consumer_offsets` (not Kafka's).

key   = version int16 (1), group string, topic string, partition int32
value = version int16 (1), offset int64, leader epoch int32, metadata string, commit timestamp int64
Strings are int16-length-prefixed UTF-8. A record whose value is null (a tombstone) deletes the
key. Readers skip keys of versions they do not know, so later record kinds can share the topic.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

# struct, not construct: a commit encodes a key and a value per partition, and construct's builders
# were a fifth of an OffsetCommit's CPU
_U16 = struct.Struct(">H")
_KEY_TAIL = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">Hqi")
_VALUE_TAIL = struct.Struct(">q")

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 1
MAX_STRING_BYTES = 0xFFFF


@dataclass(slots=True)
class OffsetEntry:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    log_offset: int = -1  # where the record sits in __consumer_offsets (later appends win)


def _string(s: str) -> bytes:
    b = s.encode()
    if len(b) > MAX_STRING_BYTES:
        raise ValueError(f"a string of {len(b)} bytes does not fit an int16 length")
    return _U16.pack(len(b)) + b


def encode_key(group: str, topic: str, partition: int) -> bytes:
    return b"".join((_U16.pack(OFFSET_KEY_VERSION), _string(group), _string(topic), _KEY_TAIL.pack(partition)))


def encode_value(entry: OffsetEntry) -> bytes:
    return b"".join((_VALUE_HEAD.pack(OFFSET_VALUE_VERSION, entry.offset, entry.leader_epoch),
                     _string(entry.metadata), _VALUE_TAIL.pack(entry.commit_timestamp)))


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    (n,) = _U16.unpack_from(data, at)
    end = at + 2 + n
    if end > len(data):
        raise ValueError("string past the end")
    return data[at + 2:end].decode(), end


def decode_key(data: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition), or None for a key of another kind or version."""
    try:
        if len(data) < 2 or _U16.unpack_from(data)[0] != OFFSET_KEY_VERSION:
            return None
        group, at = _read_string(data, 2)
        topic, at = _read_string(data, at)
        (partition,) = _KEY_TAIL.unpack_from(data, at)
    except (struct.error, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    return group, topic, partition


def decode_value(data: bytes) -> OffsetEntry | None:
    try:
        version, offset, leader_epoch = _VALUE_HEAD.unpack_from(data)
        if version != OFFSET_VALUE_VERSION:
            return None
        metadata, at = _read_string(data, _VALUE_HEAD.size)
        (commit_timestamp,) = _VALUE_TAIL.unpack_from(data, at)
    except (struct.error, ValueError):
        return None
    return OffsetEntry(offset, leader_epoch, metadata, commit_timestamp)
