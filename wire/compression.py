"""Kafka record-batch compression codecs: gzip, snappy, lz4 (frame), zstd.

Decompression is bounded: output beyond ``max_size`` raises CorruptRecordError,
so a small malicious payload cannot make the broker allocate without limit.
Every failure of compressed data surfaces as CorruptRecordError.
"""
from __future__ import annotations

import gzip
import struct
import zlib

import cramjam

Buffer = bytes | bytearray | memoryview  # records sections arrive as views into request frames

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

DEFAULT_MAX_SIZE = 256 * 1024 * 1024

# cramjam's wording for "the output buffer is full" (Rust io::ErrorKind::WriteZero);
# anything else from decompress_into means the input is bad.
_OUTPUT_FULL = "failed to write whole buffer"

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_INT32 = struct.Struct(">i")


class CorruptRecordError(ValueError):
    """Bad magic, truncated data, bad lengths, bad CRC or bad compressed data."""


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress a records section for ``codec``; output is what Java, librdkafka
    and kafka-python consumers all decode. ``level``: the codec's level (Kafka's
    compression.*.level ranges, gzip -1 meaning zlib's default); None is Kafka's
    default level (gzip 6, lz4 9, zstd 3)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        # Level 6 is Java's GZIPOutputStream default; mtime=0 keeps output deterministic.
        gz_level = 6 if level is None or level == -1 else level
        return gzip.compress(data, compresslevel=gz_level, mtime=0)
    if codec == SNAPPY:
        # Raw block, as librdkafka writes; Java's snappy-java and kafka-python
        # both fall back to raw when the xerial magic is absent.
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        # Independent blocks: Java's KafkaLZ4BlockInputStream decodes each block
        # on its own and cannot follow linked blocks (cramjam's default).
        c = cramjam.lz4.Compressor(level=9 if level is None else level, block_linked=False, content_checksum=False)
        c.compress(data if type(data) is bytes else bytes(data))  # it takes only bytes
        return bytes(c.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))  # 3: Kafka's default
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data: Buffer, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Decompress a records section; CorruptRecordError on bad data or output > max_size."""
    try:
        if codec == GZIP:
            return _gunzip(data, max_size)
        if codec == SNAPPY:
            return _unsnappy(data, max_size)
        if codec == LZ4:
            return _bounded(cramjam.lz4.decompress_into, data, _lz4_content_size(data), max_size)
        if codec == ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, _zstd_content_size(data), max_size)
        if codec == NONE:
            return bytes(data)
    except CorruptRecordError:
        raise
    except Exception as e:  # cramjam.DecompressionError, zlib.error, OSError, ...
        raise CorruptRecordError(f"bad {_NAMES.get(codec, codec)} data: {e}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")


_NAMES = {GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}


def _too_big(max_size: int) -> CorruptRecordError:
    return CorruptRecordError(f"decompressed size exceeds {max_size} bytes")


def _gunzip(data: Buffer, max_size: int) -> bytes:
    out = []
    total = 0
    rest = data
    while True:  # Java's GZIPInputStream reads concatenated members; so do we
        d = zlib.decompressobj(31)
        chunk = d.decompress(rest, max_size - total + 1)  # +1 detects overflow
        total += len(chunk)
        if total > max_size:
            raise _too_big(max_size)
        out.append(chunk)
        if not d.eof:
            raise CorruptRecordError("truncated gzip data")
        rest = d.unused_data
        if not rest:
            return out[0] if len(out) == 1 else b"".join(out)


def _unsnappy(data: Buffer, max_size: int) -> bytes:
    raw_len = cramjam.snappy.decompress_raw_len
    if bytes(data[:8]) != _XERIAL_MAGIC:
        # Raw block: the preamble states the exact output size, check it first.
        if raw_len(data) > max_size:
            raise _too_big(max_size)
        return bytes(cramjam.snappy.decompress_raw(data))
    # xerial framing: 16-byte header, then [int32 length][raw snappy block]...
    # Version fields are ignored (some producers write them little-endian).
    mv = memoryview(data)
    if len(mv) < 16:
        raise CorruptRecordError("truncated xerial snappy header")
    blocks = []
    total = 0
    pos, end = 16, len(mv)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = _INT32.unpack_from(mv, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError("bad xerial snappy block length")
        block = mv[pos:pos + n]
        pos += n
        size = raw_len(block)
        total += size
        if total > max_size:
            raise _too_big(max_size)
        blocks.append((block, size))
    out = bytearray(total)
    view = memoryview(out)
    at = 0
    for block, size in blocks:
        if cramjam.snappy.decompress_raw_into(block, view[at:at + size]) != size:
            raise CorruptRecordError("snappy block shorter than its preamble")
        at += size
    return bytes(out)


def _bounded(decompress_into, data: Buffer, hint: int | None, max_size: int) -> bytes:
    """Decompress into a fixed buffer, doubling it until the output fits or
    max_size is reached: memory never exceeds max_size, work stays ~2x output."""
    if hint is not None:
        if hint > max_size:
            raise _too_big(max_size)
        size = max(hint, 64)  # first frame's size; later concatenated frames grow it
    else:
        size = min(max(len(data) * 8, 64 * 1024), max_size)
    while True:
        out = bytearray(size)
        try:
            n = decompress_into(data, out)
        except Exception as e:
            if _OUTPUT_FULL not in str(e):
                raise
            if size >= max_size:
                raise _too_big(max_size) from None
            size = min(size * 2, max_size)
            continue
        return bytes(memoryview(out)[:n])


def _lz4_content_size(data: Buffer) -> int | None:
    # LZ4 frame: magic(4) FLG(1) BD(1) [content size u64 LE if FLG bit 3]
    if len(data) >= 14 and bytes(data[:4]) == _LZ4_MAGIC and data[4] & 0x08:
        return int.from_bytes(data[6:14], "little")
    return None


def _zstd_content_size(data: Buffer) -> int | None:
    # zstd frame header: magic(4) descriptor(1) [window(1)] [dict id 0/1/2/4] [content size 0/1/2/4/8]
    if len(data) < 5 or bytes(data[:4]) != _ZSTD_MAGIC:
        return None
    fhd = data[4]
    fcs_flag, single_segment, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    fcs_len = (0, 2, 4, 8)[fcs_flag] if fcs_flag or not single_segment else 1
    if fcs_len == 0:
        return None
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    if len(data) < pos + fcs_len:
        return None
    size = int.from_bytes(data[pos:pos + fcs_len], "little")
    return size + 256 if fcs_len == 2 else size
