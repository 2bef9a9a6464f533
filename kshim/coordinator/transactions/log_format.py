"""kshim's own record format for transaction state in `__transaction_state` (not Kafka's).

key   = version int16 (1), transactional id string
value = version int16 (2), producer id int64, producer epoch int16, timeout ms int32, state int8,
        start ms int64, update ms int64, partitions: count int32 x (topic string, partition int32),
        last producer id int64, last epoch int16 (both from version 2 on),
        transactions v2 flag int8, next producer id int64 (both from version 3 on)
Strings are int16-length-prefixed UTF-8. The latest record of a key is its state; a reader skips
records of versions it does not know.
"""
from __future__ import annotations

import struct

from construct import (
    ConstructError, If, Int8ub, Int16sb, Int16ub, Int32sb, Int64sb, PascalString, PrefixedArray, StreamError, Struct,
    this,
)

from kshim.coordinator.transactions.state import STATE_IDS, STATES_BY_ID, TxnMetadata
from wire import records

KEY_VERSION = 1
VALUE_VERSION = 3

_String = PascalString(Int16ub, "utf8")
TxnKey = Struct("version" / Int16ub, "transactional_id" / _String)
TxnValue = Struct(
    "version" / Int16ub, "producer_id" / Int64sb, "producer_epoch" / Int16sb, "timeout_ms" / Int32sb,
    "state" / Int8ub, "start_ms" / Int64sb, "update_ms" / Int64sb,
    "partitions" / PrefixedArray(Int32sb, Struct("topic" / _String, "partition" / Int32sb)),
    "last_producer_id" / If(this.version >= 2, Int64sb),
    "last_epoch" / If(this.version >= 2, Int16sb),
    "tv2" / If(this.version >= 3, Int8ub),
    "next_producer_id" / If(this.version >= 3, Int64sb),
)


_HEAD = struct.Struct(">HqhiBqq")  # version .. update_ms
_TAIL = struct.Struct(">qhBq")  # last producer id, last epoch, tv2, next producer id
_STR_LEN = struct.Struct(">H")
_PARTITION = struct.Struct(">i")


def _string(text: str) -> bytes:
    data = text.encode("utf8")
    return _STR_LEN.pack(len(data)) + data


def encode(meta: TxnMetadata) -> tuple[bytes, bytes]:
    """The record of `meta`: written with struct, three times per transaction (construct's build,
    which decode keeps, took 0.6 ms a record; tests/test_txn_log_format.py checks both agree)."""
    key = _STR_LEN.pack(KEY_VERSION) + _string(meta.transactional_id)
    parts = sorted(meta.partitions)
    value = b"".join([
        _HEAD.pack(VALUE_VERSION, meta.producer_id, meta.producer_epoch, meta.timeout_ms, STATE_IDS[meta.state],
                   meta.start_ms, meta.update_ms),
        _PARTITION.pack(len(parts)),
        *(_string(topic) + _PARTITION.pack(partition) for topic, partition in parts),
        _TAIL.pack(meta.last_producer_id, meta.last_epoch, int(meta.tv2), meta.next_producer_id)])
    return key, value


def encode_batch(meta: TxnMetadata, timestamp_ms: int | None = None) -> bytes:
    """The batch holding `meta`'s record (wire.records.encode_one): the coordinator writes three
    per transaction. `timestamp_ms` defaults to now."""
    return records.encode_one(*encode(meta), timestamp_ms)


def encode_construct(meta: TxnMetadata) -> tuple[bytes, bytes]:
    """The same record built from the construct declaration decode reads with (for the tests)."""
    key = TxnKey.build(dict(version=KEY_VERSION, transactional_id=meta.transactional_id))
    value = TxnValue.build(dict(
        version=VALUE_VERSION, producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
        timeout_ms=meta.timeout_ms, state=STATE_IDS[meta.state], start_ms=meta.start_ms, update_ms=meta.update_ms,
        partitions=[dict(topic=t, partition=p) for t, p in sorted(meta.partitions)],
        last_producer_id=meta.last_producer_id, last_epoch=meta.last_epoch, tv2=int(meta.tv2),
        next_producer_id=meta.next_producer_id))
    return key, value


def decode(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None] | None:
    """(transactional id, its state or None for a tombstone); None for a record not ours."""
    try:
        if len(key) < 2 or int.from_bytes(key[:2], "big") != KEY_VERSION:
            return None
        k = TxnKey.parse(key)
        if value is None:
            return k.transactional_id, None
        v = TxnValue.parse(value)
    except (StreamError, ConstructError, UnicodeDecodeError):
        return None
    if v.version not in (1, 2, 3) or v.state not in STATES_BY_ID:
        return None
    return k.transactional_id, TxnMetadata(
        k.transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms, STATES_BY_ID[v.state],
        frozenset((p.topic, p.partition) for p in v.partitions), v.start_ms, v.update_ms,
        last_producer_id=v.last_producer_id if v.version >= 2 else -1,
        last_epoch=v.last_epoch if v.version >= 2 else -1,
        tv2=bool(v.tv2) if v.version >= 3 else False,
        next_producer_id=v.next_producer_id if v.version >= 3 else -1)
