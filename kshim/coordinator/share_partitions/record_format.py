"""The records of `__share_group_state`, laid out as Kafka's share coordinator writes them
(share-coordinator's ShareSnapshotKey/Value and ShareUpdateKey/Value):

key   = record type int16 (0 snapshot, 1 update), group id (int16-length string), topic id
        (16 bytes), partition int32
value = version int16 (0), then flexible fields: snapshot epoch uint16, [state epoch int32:
        snapshot only], leader epoch int32, start offset int64, state batches (compact array of
        first offset int64, last offset int64, delivery state int8, delivery count int16, each
        with empty tagged fields), empty tagged fields
A tombstone (null value) under the snapshot key deletes the share partition's state. kshim writes
snapshots only (each write carries the whole in-flight window, see the coordinator); a reader
merges updates into the snapshot before them, as Kafka's coordinator does.
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from kshim.coordinator.share_partitions.state import StateBatch
from wire.primitives import DecodeError, encode_uvarint, uvarint_at

SNAPSHOT, UPDATE = 0, 1
VALUE_VERSION = 0
_BATCH = struct.Struct(">qqbhB")  # the batch's fields and its empty tagged fields


@dataclass(slots=True)
class StoredState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: list[StateBatch] = field(default_factory=list)
    snapshot_epoch: int = 0


def encode_key(kind: int, group: str, topic_id: uuid.UUID, partition: int) -> bytes:
    name = group.encode()
    return struct.pack(">hh", kind, len(name)) + name + topic_id.bytes + struct.pack(">i", partition)


def decode_key(data: bytes) -> tuple[int, str, uuid.UUID, int] | None:
    """(record type, group, topic id, partition), or None for a key of another kind."""
    try:
        kind, n = struct.unpack_from(">hh", data)
        if kind not in (SNAPSHOT, UPDATE) or len(data) != 4 + n + 20:
            return None
        group = data[4:4 + n].decode()
        return kind, group, uuid.UUID(bytes=bytes(data[4 + n:4 + n + 16])), struct.unpack_from(">i", data, 4 + n + 16)[0]
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def encode_value(kind: int, state: StoredState) -> bytes:
    out = bytearray(struct.pack(">hH", VALUE_VERSION, state.snapshot_epoch & 0xFFFF))
    if kind == SNAPSHOT:
        out += struct.pack(">i", state.state_epoch)
    out += struct.pack(">iq", state.leader_epoch, state.start_offset)
    out += encode_uvarint(len(state.batches) + 1)
    for b in state.batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, b.state, b.delivery_count, 0)
    out += b"\x00"
    return bytes(out)


def decode_value(kind: int, data: bytes) -> StoredState | None:
    try:
        version, snapshot_epoch = struct.unpack_from(">hH", data)
        if version != VALUE_VERSION:
            return None
        pos = 4
        state_epoch = 0
        if kind == SNAPSHOT:
            (state_epoch,) = struct.unpack_from(">i", data, pos)
            pos += 4
        leader_epoch, start = struct.unpack_from(">iq", data, pos)
        pos += 12
        n, pos = uvarint_at(data, pos)
        batches = []
        for _ in range(max(n - 1, 0)):
            first, last, st, count, tags = _BATCH.unpack_from(data, pos)
            pos += _BATCH.size
            if tags:
                raise ValueError("tagged fields in a state batch")
            batches.append(StateBatch(first, last, st, count))
        return StoredState(state_epoch, leader_epoch, start, batches, snapshot_epoch)
    except (struct.error, ValueError, IndexError, DecodeError):
        return None


def merge_update(snapshot: StoredState, update: StoredState) -> StoredState:
    """A snapshot with an update applied: the update's batches replace the offsets they cover,
    and nothing below the new start offset is kept (Kafka's ShareCoordinatorShard merge)."""
    start = update.start_offset if update.start_offset >= 0 else snapshot.start_offset
    covered = {o for b in update.batches for o in range(b.first_offset, b.last_offset + 1)}
    kept = []
    for b in snapshot.batches:
        for o in range(max(b.first_offset, start), b.last_offset + 1):
            if o not in covered:
                kept.append(StateBatch(o, o, b.state, b.delivery_count))
    merged = sorted(kept + [b for b in update.batches if b.last_offset >= start])
    return StoredState(snapshot.state_epoch, max(snapshot.leader_epoch, update.leader_epoch), start, merged,
                       snapshot.snapshot_epoch)
