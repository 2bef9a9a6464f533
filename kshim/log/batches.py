"""The record batches an append brings to a log, checked and located before the Log writes them:
for each whole batch its position, size, last offset and largest timestamp (the metas
Segment.append indexes by). A leader's batches get their base offsets here (patched in place); a
follower's come with theirs and their CRCs are checked (the bytes came over the network).

Apart from the Log (kshim.log.log): pure functions of the bytes, on the append hot path of
every produce and replication write, that need nothing of the Log's state."""
from __future__ import annotations

import struct

from wire.crc import crc32c
from wire.records import (
    ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH, CorruptRecordError, read_header,
)

# The append hot path unpacks the 61-byte batch header with one precompiled struct (the layout of
# wire.records.BatchHeader) and patches the base offset itself: a few hundred ns cheaper per batch
# than read_header() + set_base_offset().
unpack_header = struct.Struct(">qiibIhiqqqhii").unpack_from
_pack_q = struct.Struct(">q").pack_into


def leader_metas(batch: bytearray | memoryview | bytes, pos: int, end: int, base: int) -> tuple[list, int, int]:
    """Patch the base offsets of the whole batches in ``batch[pos:end]`` (writable) from ``base`` on:
    (their metas, positions relative to pos; the last offset; the record count)."""
    if end - pos >= HEADER_SIZE:
        h = unpack_header(batch, pos)
        size = h[1] + LOG_OVERHEAD
        if size == end - pos and h[3] == MAGIC and h[1] >= MIN_BATCH_LENGTH and h[6] >= 0:
            # the hot path: exactly one batch
            _pack_q(batch, pos, base)
            last = base + h[6]
            return [(0, size, last, h[8])], last, h[12]
    next_offset = base
    metas = []
    records = 0
    p = pos
    while p < end:
        h = read_header(batch, p)
        size = h[1] + LOG_OVERHEAD
        if p + size > end or h[6] < 0:
            raise CorruptRecordError(f"malformed batch at {p}")
        _pack_q(batch, p, next_offset)
        last = next_offset + h[6]
        metas.append((p - pos, size, last, h[8]))
        records += h[12]
        next_offset = last + 1
        p += size
    if not metas:
        raise ValueError("no record batch to append")
    return metas, next_offset - 1, records


def follower_metas(data: bytes | bytearray | memoryview, expected: int) -> tuple[list, int, int]:
    """Check the whole batches a follower fetched: each follows on from ``expected`` (a gap is
    fine: the leader's cleaner removed whole batches), CRCs match. (metas, last offset, records);
    no metas for empty data."""
    metas = []
    records = 0
    p, end = 0, len(data)
    mv = memoryview(data)
    while p < end:
        h = read_header(data, p)
        size = h[1] + LOG_OVERHEAD
        if p + size > end or h[6] < 0:
            raise CorruptRecordError(f"malformed batch at {p}")
        if h[0] < expected:
            raise ValueError(f"batch at offset {h[0]} does not follow on at {expected}")
        if crc32c(mv[p + ATTRIBUTES_OFFSET:p + size]) != h[4]:
            raise CorruptRecordError(f"CRC mismatch in batch at offset {h[0]}")
        last = h[0] + h[6]
        metas.append((p, size, last, h[8]))
        records += h[12]
        expected = last + 1
        p += size
    return metas, expected - 1, records
