"""Broker-side recompression for compression.type (Kafka's LogValidator, when the topic's codec is
not `producer` and differs from the batch's): each such batch is decompressed and its records
section compressed again with the topic's codec and level, keeping every header field (offsets,
timestamps, producer id, epoch and sequence, transactional flag) except the codec bits, the batch
length and the CRC. `uncompressed` stores the records section decompressed.

CPU-bound: the replica manager runs `recompress` in a worker thread (anyio.to_thread), never on
the event loop; `needs_recompression` is the cheap header scan that decides whether to.

A batch this module cannot read (bad header, truncated, CRC mismatch, magic other than 2) and
every batch after it are left as they are: the partition's validation then answers for them with
Kafka's error. Compressed data that does not decompress is CorruptRecordError (CORRUPT_MESSAGE).
"""
from __future__ import annotations

from wire.compression import DEFAULT_MAX_SIZE, CorruptRecordError, compress, decompress
from wire.records import (
    ATTRIBUTES_OFFSET, COMPRESSION_MASK, CRC_OFFSET, HEADER_SIZE, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC, compute_crc,
    crc_ok, read_header,
)

__all__ = ["CorruptRecordError", "needs_recompression", "recompress"]


def needs_recompression(data: bytes | bytearray | memoryview, codec: int) -> bool:
    """Whether a readable batch in `data` is stored with another codec than `codec`."""
    pos, end = 0, len(data)
    while end - pos >= HEADER_SIZE:
        try:
            header = read_header(data, pos)
        except CorruptRecordError:
            return False
        if header.magic != MAGIC or header.size <= 0 or pos + header.size > end:
            return False
        if header.compression != codec and not header.is_control:
            return True
        pos += header.size
    return False


def recompress(data: bytes | bytearray | memoryview, codec: int, level: int | None,
               max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """`data` with every batch of another codec rewritten with `codec` at `level` (None: the
    codec's default). `max_size` caps each batch's decompressed records section."""
    view = memoryview(data)
    out = bytearray()
    pos, end = 0, len(view)
    while pos < end:
        try:
            header = read_header(view, pos)
        except CorruptRecordError:
            break
        if header.magic != MAGIC or pos + header.size > end or not crc_ok(view, pos, header):
            break
        if header.compression == codec or header.is_control:
            out += view[pos:pos + header.size]
        else:
            section = decompress(header.compression, view[pos + HEADER_SIZE:pos + header.size], max_size)
            payload = compress(codec, section, level) if codec else section
            start = len(out)
            out += view[pos:pos + HEADER_SIZE]
            out += payload
            size = HEADER_SIZE + len(payload)
            out[start + LENGTH_OFFSET:start + LENGTH_OFFSET + 4] = (size - LOG_OVERHEAD).to_bytes(4, "big", signed=True)
            attributes = (header.attributes & ~COMPRESSION_MASK) | codec
            out[start + ATTRIBUTES_OFFSET:start + ATTRIBUTES_OFFSET + 2] = attributes.to_bytes(2, "big", signed=True)
            crc = compute_crc(out, start, size)
            out[start + CRC_OFFSET:start + CRC_OFFSET + 4] = crc.to_bytes(4, "big")
        pos += header.size
    out += view[pos:end]  # what could not be read, for the partition to refuse
    return bytes(out)
