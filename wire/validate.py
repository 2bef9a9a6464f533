"""Checks of a produced batch's records section before it is stored, as Kafka's leader makes them
(LogValidator): a known codec, a payload that decompresses within a cap, and records that parse,
as many as the header says, with offset deltas 0, 1, 2, ... Pure functions over bytes, no objects
per record: the broker runs them for compressed batches in a worker thread.
"""
from __future__ import annotations

from typing import NamedTuple

from .compression import CorruptRecordError, decompress
from .records import COMPRESSION_MASK, HEADER_SIZE, ZSTD, BatchHeader, _read_varint

MIN_RECORD_BYTES = 7  # length, attributes, timestamp, offset delta, key, value, header count


class Problem(NamedTuple):
    kind: str  # "codec" (UNSUPPORTED_COMPRESSION_TYPE), "corrupt" (CORRUPT_MESSAGE), "record" (INVALID_RECORD)
    message: str


def unknown_codec(header: BatchHeader) -> Problem | None:
    codec = header.attributes & COMPRESSION_MASK
    if codec > ZSTD:
        return Problem("codec", f"unknown compression codec id {codec}")
    return None


def plausible_count(header: BatchHeader) -> Problem | None:
    """Cheap check for an uncompressed batch: its records fit in its bytes."""
    room = header.size - HEADER_SIZE
    if header.records_count * MIN_RECORD_BYTES > room:
        return Problem("record", f"{header.records_count} records cannot fit in {room} bytes")
    return None


# Kafka's words when a compacted topic gets a record without a key
KEYLESS = "Compacted topic cannot accept message without key."


def check_compressed(batch: bytes | memoryview, header: BatchHeader, max_size: int,
                     keys_required: bool = False) -> Problem | None:
    """Decompress (output capped at `max_size`) and walk every record of a compressed batch (an
    uncompressed one too, with keys_required: a compacted topic's records must all have keys)."""
    problem = unknown_codec(header)
    if problem:
        return problem
    codec = header.attributes & COMPRESSION_MASK
    body = memoryview(batch)[HEADER_SIZE:header.size]
    try:
        data = bytes(body) if codec == 0 else decompress(codec, body, max_size)
    except CorruptRecordError as e:
        return Problem("corrupt", str(e))
    return check_records(data, header.records_count, keys_required)


def check_records(data: bytes, count: int, keys_required: bool = False) -> Problem | None:
    """`data` holds exactly `count` well-formed records whose offset deltas are 0..count-1 (and,
    with keys_required, a key each)."""
    if count <= 0 or count * MIN_RECORD_BYTES > len(data):
        return Problem("record", f"{count} records cannot fit in {len(data)} bytes")
    rv = _read_varint
    end = len(data)
    pos = 0
    try:
        for expected in range(count):
            length, pos = rv(data, pos)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                return Problem("corrupt", f"record {expected} has a bad length {length}")
            pos += 1  # attributes
            _, pos = rv(data, pos)  # timestamp delta
            delta, pos = rv(data, pos)
            if delta != expected:
                return Problem("record", f"record {expected} has offset delta {delta}")
            n, pos = rv(data, pos)  # key
            if n > 0:
                pos += n
            elif n < 0 and keys_required:
                return Problem("record", KEYLESS)
            n, pos = rv(data, pos)  # value
            if n > 0:
                pos += n
            headers, pos = rv(data, pos)
            if headers < 0 or pos > rec_end:
                return Problem("corrupt", f"record {expected} has a bad header count {headers}")
            for _ in range(headers):
                n, pos = rv(data, pos)
                if n < 0:
                    return Problem("corrupt", f"record {expected} has a null header key")
                pos += n
                n, pos = rv(data, pos)
                if n > 0:
                    pos += n
                if pos > rec_end:
                    break
            if pos != rec_end:
                return Problem("corrupt", f"record {expected}'s fields do not add up to its length {length}")
    except IndexError:
        return Problem("corrupt", "record data truncated")
    except CorruptRecordError as e:
        return Problem("corrupt", str(e))
    if pos != end:
        return Problem("corrupt", f"{end - pos} bytes left after {count} records")
    return None
