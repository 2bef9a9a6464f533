"""Kafka RecordBatch v2 (magic 2).

The broker's hot path never decodes records: it reads the fixed 61-byte header
with one struct call, checks the CRC32C, patches base offset and leader epoch
in place (both outside the CRC) and stores/serves the bytes as they came.
Record decoding (any codec) is for tests, tools and ListOffsets-by-timestamp.
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple, Sequence, Union

from .crc import crc32c

from .compression import (  # noqa: F401  (codec constants re-exported)
    DEFAULT_MAX_SIZE, GZIP, LZ4, NONE, SNAPPY, ZSTD, CorruptRecordError, compress, decompress,
)

HEADER_SIZE = 61
MAGIC = 2
# batchLength counts bytes after its own field; a batch with no records has 49.
MIN_BATCH_LENGTH = HEADER_SIZE - 12
LOG_OVERHEAD = 12  # baseOffset + batchLength

# Field offsets inside a batch.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # CRC covers from here to the end of the batch
MAX_TIMESTAMP_OFFSET = 35
RECORDS_COUNT_OFFSET = 57

# Attribute bits.
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_unpack_header = _HEADER.unpack_from
_pack_q = struct.Struct(">q").pack_into
_pack_i = struct.Struct(">i").pack_into
_pack_I = struct.Struct(">I").pack_into
_pack_h = struct.Struct(">h").pack_into
_INT32_MAX = 2**31 - 1


class BatchHeader(NamedTuple):
    """The 61-byte header. A NamedTuple rather than a frozen dataclass: it is
    built straight from struct's tuple (~5x cheaper per batch), still immutable
    with named fields."""
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        # Kafka's DefaultRecordBatch.incrementSequence: wraps past INT32_MAX to 0.
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & _INT32_MAX


_new_header = tuple.__new__


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``. Does not check that the whole batch is present."""
    if len(buf) - pos < HEADER_SIZE or pos < 0:
        raise CorruptRecordError(f"truncated batch header at {pos}")
    h = _new_header(BatchHeader, _unpack_header(buf, pos))
    if h[3] != MAGIC:
        raise CorruptRecordError(f"unsupported magic {h[3]} at {pos}")
    if h[1] < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {h[1]} too small at {pos}")
    return h


def iter_batches(buf, pos: int = 0, end: int | None = None, *,
                 strict: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch in buf[pos:end].

    A tail that ends inside a batch raises CorruptRecordError, or with
    strict=False ends iteration silently (log recovery, fetch responses cut at
    max bytes). Bad magic / length always raise: that is corruption, not a
    short write; the last yielded batch tells the caller where valid data ends.
    """
    end = len(buf) if end is None else min(end, len(buf))
    while pos < end:
        if end - pos < HEADER_SIZE:
            if strict:
                raise CorruptRecordError(f"truncated batch header at {pos}")
            return
        h = read_header(buf, pos)
        nxt = pos + h[1] + LOG_OVERHEAD
        if nxt > end:
            if strict:
                raise CorruptRecordError(f"batch at {pos} needs {h[1] + LOG_OVERHEAD} bytes, "
                                         f"{end - pos} present")
            return
        yield pos, h
        pos = nxt


def compute_crc(buf, pos: int, size: int) -> int:
    """CRC32C over attributes..end of the batch of ``size`` bytes at ``pos``."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size])


def crc_ok(buf, pos: int, header: BatchHeader) -> bool:
    size = header[1] + LOG_OVERHEAD
    if len(buf) < pos + size:
        return False
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size]) == header[4]


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    _pack_q(buf, pos, base_offset)  # outside the CRC: no recompute


def set_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _pack_i(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)  # outside the CRC


def set_log_append_time(buf: bytearray | memoryview, pos: int, header: BatchHeader, now_ms: int) -> BatchHeader:
    """Kafka's in-place LogAppendTime (DefaultRecordBatch.setMaxTimestamp): set the
    timestamp-type bit and maxTimestamp, keep baseTimestamp, recompute the CRC.
    Readers then give every record maxTimestamp. Returns the updated header
    (the one passed in is stale: attributes, max_timestamp, crc)."""
    attrs = header[5] | TIMESTAMP_TYPE_MASK
    if attrs == header[5] and now_ms == header[8]:
        return header
    _pack_h(buf, pos + ATTRIBUTES_OFFSET, attrs)
    _pack_q(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    crc = compute_crc(buf, pos, header[1] + LOG_OVERHEAD)
    _pack_I(buf, pos + CRC_OFFSET, crc)
    return header._replace(attributes=attrs, max_timestamp=now_ms, crc=crc)


# ---------------------------------------------------------------------------
# Records (decoded only off the hot path)

class Header(NamedTuple):
    """A record header; a tuple so it compares equal to (key, value) pairs."""
    key: str
    value: bytes | None


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]  # decoding gives a list of Header


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint/varlong at pos -> (value, new pos); >10 bytes is corrupt.
    Running off the end raises IndexError, which callers turn into corruption."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    for i in range(pos + 1, pos + 10):
        b = buf[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), i + 1
        shift += 7
    raise CorruptRecordError(f"varint longer than 10 bytes at {pos}")


def _write_varint(out: bytearray, n: int) -> None:
    z = (n << 1) ^ (n >> 63)  # zigzag for the int64 range
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def decode_records(batch, max_size: int = DEFAULT_MAX_SIZE) -> list[Record]:
    """Decode one whole batch (bytes-like starting at its header) into records
    with absolute offsets and timestamps; decompresses (output capped at max_size)."""
    h = read_header(batch, 0)
    size = h.size
    if len(batch) < size:
        raise CorruptRecordError(f"batch needs {size} bytes, {len(batch)} present")
    mv = memoryview(batch)
    codec = h.attributes & COMPRESSION_MASK
    if codec == NONE:
        data = bytes(mv[HEADER_SIZE:size])
    else:
        data = decompress(codec, mv[HEADER_SIZE:size], max_size)
    count = h.records_count
    # Each record takes at least 7 bytes: refuse absurd counts before looping.
    if count < 0 or count * 7 > len(data):
        raise CorruptRecordError(f"records count {count} does not fit in {len(data)} bytes")
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    log_append = h.attributes & TIMESTAMP_TYPE_MASK
    max_ts = h.max_timestamp
    rv = _read_varint
    records = []
    pos = 0
    end = len(data)
    try:
        for _ in range(count):
            length, pos = rv(data, pos)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise CorruptRecordError(f"bad record length {length}")
            pos += 1  # record attributes: unused
            ts_delta, pos = rv(data, pos)
            off_delta, pos = rv(data, pos)
            n, pos = rv(data, pos)
            if n < 0:  # Kafka reads any negative length as null
                key = None
            else:
                key = data[pos:pos + n]
                pos += n
            n, pos = rv(data, pos)
            if n < 0:  # Kafka reads any negative length as null
                value = None
            else:
                value = data[pos:pos + n]
                pos += n
            n_headers, pos = rv(data, pos)
            if n_headers < 0 or pos > rec_end:
                raise CorruptRecordError(f"bad header count {n_headers}")
            headers = []
            for _ in range(n_headers):
                n, pos = rv(data, pos)
                if n < 0 or pos + n > rec_end:
                    raise CorruptRecordError(f"bad header key length {n}")
                hkey = data[pos:pos + n].decode()
                pos += n
                n, pos = rv(data, pos)
                if n < 0:
                    hval = None
                else:
                    hval = data[pos:pos + n]
                    pos += n
                headers.append(Header(hkey, hval))
                if pos > rec_end:
                    break  # caught by the length check below
            if pos != rec_end:
                raise CorruptRecordError(f"record length {length} does not match its fields")
            records.append(Record(base_offset + off_delta,
                                  max_ts if log_append else base_ts + ts_delta,
                                  key, value, headers))
    except IndexError:
        raise CorruptRecordError("record data truncated") from None
    except UnicodeDecodeError:
        raise CorruptRecordError("header key is not utf-8") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after {count} records")
    return records


def record_times(batch, max_size: int = DEFAULT_MAX_SIZE) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of one whole batch, lazily and without building
    records: a lookup by time stops at its record (ListOffsets). Decompression is capped."""
    h = read_header(batch, 0)
    mv = memoryview(batch)
    codec = h.attributes & COMPRESSION_MASK
    data = bytes(mv[HEADER_SIZE:h.size]) if codec == NONE else decompress(codec, mv[HEADER_SIZE:h.size], max_size)
    log_append = h.attributes & TIMESTAMP_TYPE_MASK
    rv = _read_varint
    pos = 0
    try:
        for _ in range(h.records_count):
            length, start = rv(data, pos)
            pos = start + 1  # attributes
            ts_delta, pos = rv(data, pos)
            off_delta, pos = rv(data, pos)
            yield h.base_offset + off_delta, h.max_timestamp if log_append else h.base_timestamp + ts_delta
            pos = start + length
    except IndexError:
        raise CorruptRecordError("record data truncated") from None


def decode_all(buf, *, include_control: bool = False,
               max_size: int = DEFAULT_MAX_SIZE) -> list[Record]:
    """Records of every whole batch in a records blob (strict about truncation).
    Control batches (transaction markers) are skipped unless include_control."""
    mv = memoryview(buf)
    out: list[Record] = []
    for pos, h in iter_batches(buf):
        if h.attributes & CONTROL_MASK and not include_control:
            continue
        out.extend(decode_records(mv[pos:pos + h.size], max_size))
    return out


RecordInput = Union[Record, Sequence]  # Record, or (key, value[, headers[, timestamp]])


def encode_batch(records: Iterable[RecordInput], *, base_offset: int = 0,
                 compression: int = NONE, producer_id: int = NO_PRODUCER_ID,
                 producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE,
                 partition_leader_epoch: int = -1, transactional: bool = False,
                 control: bool = False, timestamp_type: int = CREATE_TIME,
                 max_timestamp: int | None = None) -> bytes:
    """Build one RecordBatch v2 (tests and tools).

    Each item is a Record (its offset is kept: delta = offset - base_offset) or a
    tuple (key, value[, headers[, timestamp]]) whose offset delta is its index;
    a missing/None timestamp means now. ``max_timestamp`` overrides the computed
    one (e.g. the broker's time for LogAppendTime batches).
    """
    body = bytearray()
    rec = bytearray()
    count = 0
    last_delta = -1
    base_ts: int | None = None
    max_ts = NO_TIMESTAMP
    now = None
    headers: Sequence[tuple[str, bytes | None]]
    ts: int | None
    for i, r in enumerate(records):
        if isinstance(r, Record):
            delta, ts, key, value, headers = (r.offset - base_offset, r.timestamp,
                                              r.key, r.value, r.headers)
        else:
            key, value = r[0], r[1]
            headers = r[2] if len(r) > 2 and r[2] is not None else ()
            ts = r[3] if len(r) > 3 else None
            delta = i
        if delta <= last_delta:
            raise ValueError(f"record offsets must increase (delta {delta} after {last_delta})")
        if ts is None:
            if now is None:
                now = int(time.time() * 1000)
            ts = now
        if base_ts is None:
            base_ts = ts
        if ts > max_ts:
            max_ts = ts
        _add_record(body, rec, ts - base_ts, delta, key, value, headers)
        last_delta = delta
        count += 1
    if base_ts is None:  # no records
        base_ts = NO_TIMESTAMP
        last_delta = 0
    if max_timestamp is not None:
        max_ts = max_timestamp
    payload = compress(compression, body) if compression != NONE else body
    attrs = compression & COMPRESSION_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attrs |= TIMESTAMP_TYPE_MASK
    if transactional:
        attrs |= TRANSACTIONAL_MASK
    if control:
        attrs |= CONTROL_MASK
    return _batch(payload, base_offset, partition_leader_epoch, attrs, last_delta, base_ts, max_ts, producer_id,
                  producer_epoch, base_sequence, count)


def encode_one(key: bytes, value: bytes | None, timestamp_ms: int | None = None) -> bytes:
    """The batch of one record (no producer, headers or compression, CreateTime `timestamp_ms`,
    now by default), as encode_batch([(key, value, (), timestamp_ms)]) builds it without its
    generality: what the coordinators write for each change of their state."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    body = bytearray()
    _add_record(body, bytearray(), 0, 0, key, value, ())
    return _batch(body, 0, -1, 0, 0, ts, ts, NO_PRODUCER_ID, -1, NO_SEQUENCE, 1)


def _add_record(body: bytearray, rec: bytearray, ts_delta: int, delta: int, key: bytes | None,
                value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> None:
    """One record, length-prefixed, at the end of `body` (`rec`: a scratch buffer)."""
    rec.clear()
    rec.append(0)  # record attributes
    _write_varint(rec, ts_delta)
    _write_varint(rec, delta)
    for field in (key, value):
        if field is None:
            rec.append(1)  # zigzag(-1)
        else:
            _write_varint(rec, len(field))
            rec += field
    _write_varint(rec, len(headers))
    for hk, hv in headers:
        hkb = hk.encode()
        _write_varint(rec, len(hkb))
        rec += hkb
        if hv is None:
            rec.append(1)
        else:
            _write_varint(rec, len(hv))
            rec += hv
    _write_varint(body, len(rec))
    body += rec


def _batch(payload: bytes | bytearray, base_offset: int, leader_epoch: int, attrs: int, last_delta: int,
           base_ts: int, max_ts: int, producer_id: int, producer_epoch: int, base_sequence: int, count: int) -> bytes:
    """The batch header before `payload` (records, compressed or not), its CRC computed."""
    size = HEADER_SIZE + len(payload)
    out = bytearray(size)
    _HEADER.pack_into(out, 0, base_offset, size - LOG_OVERHEAD, leader_epoch, MAGIC, 0, attrs, last_delta,
                      base_ts, max_ts, producer_id, producer_epoch, base_sequence, count)
    out[HEADER_SIZE:] = payload
    _pack_I(out, CRC_OFFSET, compute_crc(out, 0, size))
    return bytes(out)


# ---------------------------------------------------------------------------- transaction markers
# A marker is a control batch (transactional + control attributes) holding one record whose key is
# (version int16 = 0, type int16: 0 = ABORT, 1 = COMMIT) and whose value is (version int16 = 0,
# coordinator epoch int32): Kafka's ControlRecordType and EndTransactionMarker.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class Marker(NamedTuple):
    committed: bool
    coordinator_epoch: int


def encode_marker(producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                  timestamp: int | None = None) -> bytes:
    """One transaction marker batch (base offset 0: the log assigns it)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if committed else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return encode_batch([(key, value, (), timestamp)], producer_id=producer_id,
                        producer_epoch=producer_epoch, transactional=True, control=True)


def read_marker(batch) -> Marker | None:
    """The marker of a control batch (its whole bytes); None if it is no transaction marker."""
    found = decode_records(batch)
    if not found or found[0].key is None or len(found[0].key) < _CONTROL_KEY.size:
        return None
    _version, kind = _CONTROL_KEY.unpack_from(found[0].key)
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    epoch = -1
    value = found[0].value
    if value is not None and len(value) >= _MARKER_VALUE.size:
        epoch = _MARKER_VALUE.unpack_from(value)[1]
    return Marker(kind == CONTROL_COMMIT, epoch)
