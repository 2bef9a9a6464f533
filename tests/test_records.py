import gzip
import random
import struct

import pytest
from kafka.codec import snappy_encode
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from wire import compression
from wire.records import (
    GZIP, HEADER_SIZE, LZ4, NONE, SNAPPY, ZSTD, BatchHeader, CorruptRecordError, Header, Record,
    crc_ok, decode_all, decode_records, encode_batch, iter_batches, read_header, set_base_offset,
    set_leader_epoch, set_log_append_time,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]
TS = 1_700_000_000_000


def sample(n=50):
    """Compressible records with null keys/values and every header shape."""
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"key-%d" % i
        value = None if i % 11 == 5 else (b"value %d " % i) * (i % 5 + 1)
        headers = [("h", b"v"), ("empty", b""), ("null", None), ("ünï", b"\x00\xff")][: i % 5]
        out.append((key, value, headers, TS + i * 3 - (i % 4)))
    return out


def as_tuples(records):
    return [(r.key, r.value, list(r.headers), r.timestamp) for r in records]


def kp_records(batch):
    b = DefaultRecordBatch(bytes(batch))
    assert b.validate_crc()
    return b, list(b)


# --- round trips ------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(codec):
    recs = sample()
    batch = encode_batch(recs, base_offset=100, compression=codec)
    h = read_header(batch)
    assert h.compression == codec and h.records_count == len(recs) and h.size == len(batch)
    assert h.last_offset == 100 + len(recs) - 1
    assert h.base_timestamp == TS and h.max_timestamp == max(r[3] for r in recs)
    assert crc_ok(batch, 0, h)
    got = decode_records(batch)
    assert [r.offset for r in got] == list(range(100, 100 + len(recs)))
    assert as_tuples(got) == recs
    assert all(type(r.key) is bytes or r.key is None for r in got)


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_many_and_large(codec):
    recs = [(b"k%d" % i, bytes([i % 256]) * (i % 300), [], TS) for i in range(5000)]
    recs.append((None, b"x" * 2_000_000, [("big", b"y" * 70_000)], TS + 1))
    got = decode_records(encode_batch(recs, compression=codec))
    assert as_tuples(got) == recs


def test_null_and_empty_fields():
    recs = [(None, None, [], TS), (b"", b"", [("", b"")], TS), (b"k", None, [("a", None)], TS)]
    assert as_tuples(decode_records(encode_batch(recs))) == recs


def test_headers_are_tuples_and_named():
    (r,) = decode_records(encode_batch([(b"k", b"v", [("a", b"1")], TS)]))
    assert r.headers == [("a", b"1")] and r.headers[0].key == "a" and r.headers[0] == Header("a", b"1")


def test_record_inputs_keep_offsets_and_empty_batch():
    recs = [Record(10, TS, b"a", b"1", []), Record(13, TS + 5, None, b"2", [("x", None)])]
    batch = encode_batch(recs, base_offset=10, producer_id=7, producer_epoch=1, base_sequence=0)
    h = read_header(batch)
    assert h.last_offset_delta == 3 and h.records_count == 2 and h.last_sequence == 3
    assert decode_records(batch) == recs
    with pytest.raises(ValueError):
        encode_batch([Record(5, TS, None, None, []), Record(5, TS, None, None, [])], base_offset=5)
    empty = encode_batch([], base_offset=42)
    h = read_header(empty)
    assert h.records_count == 0 and h.size == HEADER_SIZE and crc_ok(empty, 0, h)
    assert decode_records(empty) == []


def test_header_fields_and_flags():
    batch = encode_batch([(b"k", b"v")] * 3, base_offset=5, producer_id=99, producer_epoch=3,
                         base_sequence=2**31 - 2, partition_leader_epoch=7, transactional=True,
                         timestamp_type=1, compression=GZIP)
    h = read_header(batch)
    assert isinstance(h, BatchHeader)
    assert (h.base_offset, h.partition_leader_epoch, h.magic, h.producer_id, h.producer_epoch) == \
        (5, 7, 2, 99, 3)
    assert h.is_transactional and not h.is_control and h.timestamp_type == 1
    assert h.compression == GZIP and h.next_offset == 8
    # 2**31-2 + 2 wraps to 0 like Kafka's DefaultRecordBatch.incrementSequence
    assert h.last_sequence == 0 == DefaultRecordBatch(batch).last_sequence
    assert read_header(encode_batch([(b"k", b"v")])).last_sequence == -1


def test_decode_all_and_control_batches():
    a = encode_batch([(b"a", b"1", [], TS)], base_offset=0)
    marker = encode_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], TS)],
                          base_offset=1, control=True, transactional=True, producer_id=1,
                          producer_epoch=0)
    b = encode_batch([(b"b", b"2", [], TS)], base_offset=2, compression=ZSTD)
    blob = a + marker + b
    assert [r.offset for r in decode_all(blob)] == [0, 2]
    assert [r.offset for r in decode_all(blob, include_control=True)] == [0, 1, 2]
    assert [(p, h.base_offset) for p, h in iter_batches(blob)] == \
        [(0, 0), (len(a), 1), (len(a) + len(marker), 2)]


def test_iter_batches_truncation():
    a = encode_batch([(b"a", b"1")])
    b = encode_batch([(b"b", b"2")], base_offset=1)
    for cut in (1, 12, HEADER_SIZE - 1, HEADER_SIZE, len(b) - 1):
        blob = a + b[:cut]
        with pytest.raises(CorruptRecordError):
            list(iter_batches(blob))
        assert [p for p, _ in iter_batches(blob, strict=False)] == [0]
    blob = a + b + b"junk"
    assert [p for p, _ in iter_batches(blob, end=len(a) + len(b))] == [0, len(a)]
    assert [p for p, _ in iter_batches(blob, len(a), len(a) + len(b))] == [len(a)]
    assert list(iter_batches(b"")) == []


# --- interop with kafka-python (an independent implementation) --------------

def kp_build(codec, recs, **kw):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=kw.get("transactional", False),
        producer_id=kw.get("producer_id", -1), producer_epoch=kw.get("producer_epoch", -1),
        base_sequence=kw.get("base_sequence", -1), batch_size=1 << 30)
    for i, (key, value, headers, ts) in enumerate(recs):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS)
def test_decode_kafka_python_batches(codec):
    recs = sample(200)
    batch = kp_build(codec, recs, transactional=True, producer_id=5, producer_epoch=2,
                     base_sequence=10)
    h = read_header(batch)
    assert h.compression == codec, "kafka-python fell back to uncompressed"
    assert crc_ok(batch, 0, h)
    assert h.is_transactional and h.producer_id == 5 and h.last_sequence == 209
    got = decode_records(batch)
    assert [r.offset for r in got] == list(range(200))
    assert as_tuples(got) == recs


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec):
    recs = sample(200)
    batch = encode_batch(recs, base_offset=1000, compression=codec, producer_id=3,
                         producer_epoch=1, base_sequence=0, partition_leader_epoch=4)
    b, got = kp_records(batch)
    assert b.compression_type == codec and b.base_offset == 1000 and b.leader_epoch == 4
    assert [r.offset for r in got] == list(range(1000, 1200))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == recs


def test_kafka_python_reads_multi_block_lz4():
    # > 64 KiB so the frame has several blocks; they must be independent for Java.
    recs = [(None, bytes(random.Random(i).randbytes(100)) * 50, [], TS) for i in range(100)]
    batch = encode_batch(recs, compression=LZ4)
    assert batch[HEADER_SIZE + 4] & 0x20, "LZ4 blocks must be independent (FLG bit 5)"
    _, got = kp_records(batch)
    assert [r.value for r in got] == [r[1] for r in recs]


# --- CRC and in-place patching --------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_crc_detects_flipped_byte(codec):
    batch = encode_batch(sample(), compression=codec)
    h = read_header(batch)
    for i in (21, 22, 30, HEADER_SIZE, len(batch) // 2, len(batch) - 1):
        bad = bytearray(batch)
        bad[i] ^= 0x01
        assert not crc_ok(bad, 0, read_header(bad)), i
    assert not crc_ok(batch[:-1], 0, h)  # short buffer is never ok


@pytest.mark.parametrize("codec", [NONE, LZ4])
def test_patch_offset_and_epoch(codec):
    first = encode_batch([(b"x", b"y")])
    batch = bytearray(first + encode_batch(sample(20), compression=codec))
    pos = len(first)
    set_base_offset(batch, pos, 5_000_000_000)
    set_leader_epoch(batch, pos, 17)
    h = read_header(batch, pos)
    assert (h.base_offset, h.partition_leader_epoch) == (5_000_000_000, 17)
    assert crc_ok(batch, pos, h)
    b, got = kp_records(batch[pos:])
    assert b.leader_epoch == 17
    assert [r.offset for r in got] == list(range(5_000_000_000, 5_000_000_020))
    assert read_header(batch).base_offset == 0  # neighbour untouched


@pytest.mark.parametrize("codec", [NONE, ZSTD])
def test_set_log_append_time(codec):
    batch = bytearray(encode_batch(sample(10), compression=codec))
    h = read_header(batch)
    now = TS + 99_999
    returned = set_log_append_time(batch, 0, h, now)
    h2 = read_header(batch)
    assert returned == h2
    assert crc_ok(batch, 0, h2) and h2.crc != h.crc
    assert h2.timestamp_type == 1 and h2.max_timestamp == now
    assert h2.base_timestamp == h.base_timestamp  # Kafka keeps it (setMaxTimestamp)
    assert h2.compression == codec
    assert {r.timestamp for r in decode_records(batch)} == {now}
    b, got = kp_records(batch)  # kafka-python recomputes the CRC: an implementation independent of ours
    assert b.timestamp_type == 1 and {r.timestamp for r in got} == {now}
    b, got = kp_records(batch)
    assert b.timestamp_type == 1 and {r.timestamp for r in got} == {now}
    assert set_log_append_time(batch, 0, h2, now) == h2  # idempotent
    assert read_header(batch) == h2


# --- corrupt input ----------------------------------------------------------

def test_read_header_errors():
    batch = encode_batch([(b"k", b"v")])
    with pytest.raises(CorruptRecordError):
        read_header(batch[:HEADER_SIZE - 1])
    shifted = bytearray(batch)
    shifted[17] = 0  # read at 1, the magic byte is the CRC's first: 2 once in 256 timestamps (no error)
    with pytest.raises(CorruptRecordError):
        read_header(shifted, 1)
    bad = bytearray(batch)
    bad[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        read_header(bad)
    with pytest.raises(CorruptRecordError, match="magic"):
        list(iter_batches(bad, strict=False))  # corruption is not a truncated tail
    bad = bytearray(batch)
    struct.pack_into(">i", bad, 8, 48)
    with pytest.raises(CorruptRecordError, match="length"):
        read_header(bad)


def test_batch_length_beyond_buffer():
    bad = bytearray(encode_batch([(b"k", b"v")]))
    struct.pack_into(">i", bad, 8, len(bad))  # 12 bytes too many
    with pytest.raises(CorruptRecordError):
        decode_records(bad)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bad))
    assert list(iter_batches(bad, strict=False)) == []
    assert not crc_ok(bad, 0, read_header(bad))


def raw_batch(records_bytes, count, codec=NONE):
    """A header around hand-made (possibly bogus) record bytes."""
    payload = compression.compress(codec, records_bytes) if codec else records_bytes
    out = bytearray(encode_batch([], compression=codec)[:HEADER_SIZE]) + payload
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 57, count)
    return bytes(out)


@pytest.mark.parametrize("records_bytes,count", [
    (b"\xff" * 11, 1),                       # varint longer than 10 bytes
    (b"\xff" * 20, 2),
    (b"\x80", 1),                            # varint runs off the end
    (b"\x0c\x00\x00\x00\x01\x01\x00", 1),    # length 6 but needs 6: ok size, count mismatch below
    (b"\x0e\x00\x00\x00\x01\x01\x00\x00", 1),  # declared length 7, fields use 6
    (b"\x0c\x00\x00\x00\x0a\x01\x00", 1),    # key length 5 runs past the record
    (b"\x0c\x00\x00\x00\x01\x01\x03", 1),    # header count -2
    (b"\x10\x00\x00\x00\x01\x01\x02\x02\xff\xfe", 1),  # header key not utf-8
    (b"\x0c\x00\x00\x00\x01\x01\x00", 2),    # fewer records than declared
    (b"\x0c\x00\x00\x00\x01\x01\x00\x00", 1),  # trailing bytes
    (b"\x0c\x00\x00\x00\x01\x01\x00", -1),   # negative count
    (b"\x0c\x00\x00\x00\x01\x01\x00", 2**31 - 1),  # absurd count
])
@pytest.mark.parametrize("codec", [NONE, ZSTD])
def test_bogus_records(records_bytes, count, codec):
    batch = raw_batch(records_bytes, count, codec)
    if records_bytes == b"\x0c\x00\x00\x00\x01\x01\x00" and count == 1:
        assert decode_records(batch)[0].key is None
        return
    with pytest.raises(CorruptRecordError):
        decode_records(batch)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_compressed_payload(codec):
    for junk in (b"", b"\x00", b"garbage" * 20, bytes(range(256)),
                 compression.compress(codec, b"hello world" * 100)[:-3]):
        batch = bytearray(raw_batch(junk, 1, NONE))
        batch[22] = codec  # claim a codec for the junk payload
        with pytest.raises(CorruptRecordError):
            decode_records(batch)
        if codec == SNAPPY and junk == b"\x00":
            continue  # a valid raw snappy block holding nothing
        with pytest.raises(CorruptRecordError):
            compression.decompress(codec, junk, 1 << 20)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompression_over_max_size(codec):
    data = bytes(1 << 20)
    blob = compression.compress(codec, data)
    assert compression.decompress(codec, blob, 1 << 20) == data  # exactly at the cap
    with pytest.raises(CorruptRecordError, match="exceeds"):
        compression.decompress(codec, blob, (1 << 20) - 1)
    batch = encode_batch([(None, data)], compression=codec)
    with pytest.raises(CorruptRecordError, match="exceeds"):
        decode_records(batch, max_size=1000)


def test_other_framings_and_bounds():
    data = b"".join(b"line %d of text\n" % i for i in range(20_000))
    # xerial snappy (Java, kafka-python) with many blocks, and raw snappy
    xerial = snappy_encode(data, xerial_compatible=True, xerial_blocksize=4096)
    assert xerial.startswith(b"\x82SNAPPY\x00")
    assert compression.decompress(SNAPPY, xerial) == data
    with pytest.raises(CorruptRecordError):
        compression.decompress(SNAPPY, xerial, len(data) - 1)
    with pytest.raises(CorruptRecordError):
        compression.decompress(SNAPPY, xerial[:-1])
    # lz4: python-lz4 frames, linked blocks and with content size
    import lz4.frame
    for kw in ({}, {"block_linked": True}, {"store_size": True}, {"content_checksum": True}):
        frame = lz4.frame.compress(data, **kw)
        assert compression.decompress(LZ4, frame) == data
        with pytest.raises(CorruptRecordError):
            compression.decompress(LZ4, frame, len(data) - 1)
    # zstd: frames without content size (Java streaming) take the growing-buffer path
    import zstandard
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert compression.decompress(ZSTD, frame) == data
    assert compression.decompress(ZSTD, frame + frame) == data + data  # concatenated frames
    with pytest.raises(CorruptRecordError):
        compression.decompress(ZSTD, frame, len(data) - 1)
    # gzip: concatenated members, trailing junk, truncation
    gz = gzip.compress(data)
    assert compression.decompress(GZIP, gz + gz) == data + data
    for bad in (gz[:-1], gz + b"junk"):
        with pytest.raises(CorruptRecordError):
            compression.decompress(GZIP, bad)
    with pytest.raises(CorruptRecordError):
        compression.decompress(GZIP, gz + gz, 2 * len(data) - 1)


def test_bomb_is_refused_cheaply():
    # 64 MiB of zeros compresses to KiBs (snappy: ~3 MiB); a 1 MiB cap must refuse it.
    data = bytes(64 << 20)
    for codec in COMPRESSED:
        blob = compression.compress(codec, data)
        assert len(blob) < len(data) // 20
        with pytest.raises(CorruptRecordError):
            compression.decompress(codec, blob, 1 << 20)


@pytest.mark.parametrize("codec", CODECS)
def test_fuzzed_batches_only_raise_corrupt(codec):
    rnd = random.Random(codec)
    batch = encode_batch(sample(30), compression=codec)
    for _ in range(300):
        bad = bytearray(batch)
        for _ in range(rnd.randint(1, 4)):
            i = rnd.randrange(HEADER_SIZE - 4, len(bad))  # leave length/magic mostly valid
            bad[i] = rnd.randrange(256)
        if rnd.random() < 0.2:
            del bad[rnd.randrange(HEADER_SIZE, len(bad)):]
        try:
            decode_records(bad, max_size=1 << 20)
        except CorruptRecordError:
            pass
    for cut in range(0, len(batch), max(1, len(batch) // 50)):
        with pytest.raises(CorruptRecordError):
            decode_records(batch[:cut])


@pytest.mark.parametrize("key_size", [0, 1, 63, 64, 200, 9000])
@pytest.mark.parametrize("value_size", [None, 0, 63, 64, 70_000])
def test_encode_one_builds_what_encode_batch_builds(key_size, value_size):
    from wire import records
    key = bytes(range(256)) * (key_size // 256) + bytes(key_size % 256)
    value = None if value_size is None else b"v" * value_size
    batch = records.encode_one(key, value, 1_700_000_000_123)
    assert batch == records.encode_batch([(key, value, (), 1_700_000_000_123)])
    [record] = records.decode_records(batch)
    assert bytes(record.key) == key and (record.value is None if value is None else bytes(record.value) == value)
