"""Produced batches checked before they are stored (Kafka's LogValidator), beside the event loop.

A compressed batch is decompressed (output capped at the request size limit: a decompression bomb
is refused without allocating past it) and every record walked: the known codec, the records the
header counts, offset deltas 0..n-1, and on a compacted topic a key in every record (Kafka's
INVALID_RECORD "Compacted topic cannot accept message without key."). That work runs in a worker
thread, two batches at a time, so a bomb never stalls other connections; an uncompressed batch
gets only a cheap check on the loop (its records must fit in its bytes), its CRC covers the rest,
unless its topic is compacted: then its records are walked in the thread too. A failing batch fails its
partition with Kafka's error; batches before it in the same partition are appended as usual.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import anyio

from wire import records, validate
from wire.errors import ErrorCode

CONCURRENT_CHECKS = 2  # worker threads decompressing at once: memory is at most this many caps

_ERRORS = {"codec": ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "corrupt": ErrorCode.CORRUPT_MESSAGE,
           "record": ErrorCode.INVALID_RECORD}


@dataclass(slots=True)
class Rejection:
    """Entry `index` of an append fails with `error`; its first `valid_bytes` are whole good batches."""
    error: ErrorCode
    message: str
    valid_bytes: int


def _scan(data: bytes | memoryview, keys_required: bool) -> tuple[Rejection | None, list[tuple[int, records.BatchHeader]]]:
    """Cheap checks on the loop; the batches left to check in a thread (the compressed ones, all
    data batches with keys_required), in order. A rejection here stands unless a batch checked in
    the thread before it fails first."""
    compressed: list[tuple[int, records.BatchHeader]] = []
    pos, end = 0, len(data)
    while end - pos >= records.HEADER_SIZE:
        try:
            h = records.read_header(data, pos)
        except records.CorruptRecordError:
            break  # the partition's own checks answer for a bad header
        if h.size <= 0 or pos + h.size > end:
            break
        problem = validate.unknown_codec(h)
        if problem is None and h.attributes & records.COMPRESSION_MASK == records.NONE:
            problem = validate.plausible_count(h)
        if problem is not None:
            return Rejection(_ERRORS[problem.kind], problem.message, pos), compressed
        if (keys_required or h.attributes & records.COMPRESSION_MASK != records.NONE) and not h.is_control:
            compressed.append((pos, h))
        pos += h.size
    return None, compressed


def _check_compressed(data: bytes | memoryview, batches: list[tuple[int, records.BatchHeader]],
                      max_size: int, keys_required: bool) -> Rejection | None:
    view = memoryview(data)
    for pos, h in batches:
        problem = validate.check_compressed(view[pos:pos + h.size], h, max_size, keys_required)
        if problem is not None:
            return Rejection(_ERRORS[problem.kind], problem.message, pos)
    return None


class BatchValidator:
    def __init__(self, max_decompressed_bytes: int) -> None:
        self.max_decompressed_bytes = max_decompressed_bytes
        self._limiter: anyio.CapacityLimiter | None = None

    async def check(self, entries: Sequence[bytes | memoryview | None],
                    keys_required: Sequence[bool] = ()) -> dict[int, Rejection]:
        """The entries (a produce request's records per partition) that must not be stored whole;
        `keys_required[i]`: entry i goes to a compacted topic."""
        rejected: dict[int, Rejection] = {}
        for i, data in enumerate(entries):
            if not data:
                continue  # the partition answers for empty records
            keyed = i < len(keys_required) and keys_required[i]
            rejection, compressed = _scan(data, keyed)
            if compressed:
                if self._limiter is None:
                    self._limiter = anyio.CapacityLimiter(CONCURRENT_CHECKS)
                if rejection is not None:
                    compressed = [(pos, h) for pos, h in compressed if pos < rejection.valid_bytes]
                earlier = await anyio.to_thread.run_sync(_check_compressed, data, compressed,
                                                         self.max_decompressed_bytes, keyed, limiter=self._limiter)
                rejection = earlier or rejection
            if rejection is not None:
                rejected[i] = rejection
        return rejected
