"""Produced batches checked before they are stored (wire/validate.py, kshim/replica/validation.py):
codec, decompression cap, record count and offset deltas. Bad batches are made by hand
(compat_tests/raw_kafka.rebuild_batch: struct and crc32c), never by the code under test."""
from __future__ import annotations

import anyio
import cramjam
import pytest

from compat_tests.raw_kafka import rebuild_batch
from kshim.replica.validation import BatchValidator
from wire.errors import ErrorCode
from wire.records import GZIP, LZ4, SNAPPY, ZSTD, encode_batch, read_header
from wire.validate import check_compressed

MiB = 1024 * 1024
THREE = [(b"k%d" % i, b"v" * 100, [("h", b"x")]) for i in range(3)]


def problem(batch: bytes, cap: int = MiB):
    return check_compressed(batch, read_header(batch), cap)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_a_good_compressed_batch_passes(codec):
    assert problem(encode_batch(THREE, compression=codec)) is None


def test_a_decompression_bomb_is_refused_at_the_cap():
    bomb = bytes(cramjam.zstd.compress(bytes(64 * MiB)))  # 64 MiB of zeros in a few KB
    batch = rebuild_batch(encode_batch(THREE, compression=ZSTD), records_section=bomb,
                          records_count=9_000_000, last_offset_delta=8_999_999)
    assert len(batch) < 64 * 1024
    found = problem(batch, cap=8 * MiB)
    assert found is not None and found.kind == "corrupt" and "exceeds" in found.message


def test_an_unknown_codec_is_refused():
    batch = encode_batch(THREE, compression=ZSTD)
    found = problem(rebuild_batch(batch, attributes=(read_header(batch).attributes & ~7) | 6))
    assert found is not None and found.kind == "codec"


def test_a_garbage_payload_is_refused():
    found = problem(rebuild_batch(encode_batch(THREE, compression=ZSTD), records_section=b"\x28\xb5\x2f\xfd" + bytes(40)))
    assert found is not None and found.kind == "corrupt"


def test_a_record_count_that_does_not_match_is_refused():
    batch = encode_batch(THREE, compression=ZSTD)
    found = problem(rebuild_batch(batch, records_count=4, last_offset_delta=3))
    assert found is not None and found.kind in ("record", "corrupt")
    found = problem(rebuild_batch(batch, records_count=2, last_offset_delta=1))
    assert found is not None and found.kind == "corrupt" and "left after 2 records" in found.message


def test_offset_deltas_must_count_from_zero():
    section = bytes(cramjam.zstd.compress(encode_batch(THREE)[61:]))
    skewed = encode_batch([(b"a", b"1"), (b"b", b"2")])[61:]  # deltas 0, 1 ...
    skewed = skewed[:3] + bytes([2]) + skewed[4:]  # first record: delta 0 -> 1 (zigzag 2), same length
    batch = rebuild_batch(encode_batch(THREE, compression=ZSTD),
                          records_section=bytes(cramjam.zstd.compress(skewed)), records_count=2, last_offset_delta=1)
    assert problem(rebuild_batch(batch, records_section=section, records_count=3, last_offset_delta=2)) is None
    found = problem(batch)
    assert found is not None and found.kind == "record" and "offset delta 1" in found.message


def test_the_validator_keeps_the_good_batches_before_a_bad_one():
    good = encode_batch(THREE, compression=GZIP)
    bad = rebuild_batch(encode_batch(THREE, compression=ZSTD), records_section=b"not zstd at all")
    plain = encode_batch(THREE)

    async def check():
        return await BatchValidator(MiB).check([good + bad + good, plain, plain + rebuild_batch(plain, records_count=10**6)])

    rejected = anyio.run(check)
    assert set(rejected) == {0, 2}
    assert (rejected[0].error, rejected[0].valid_bytes) == (ErrorCode.CORRUPT_MESSAGE, len(good))
    assert (rejected[2].error, rejected[2].valid_bytes) == (ErrorCode.INVALID_RECORD, len(plain))


def test_a_compacted_topic_needs_a_key_in_every_record_checked_off_the_loop(monkeypatch):
    keyed = encode_batch([(b"k1", b"a"), (b"k2", b"b")])
    keyless_plain = encode_batch([(b"k", b"a"), (None, b"b")])
    keyless_zstd = encode_batch([(None, b"a")], compression=ZSTD)
    threads = []
    real = anyio.to_thread.run_sync

    async def spy(func, *args, **kwargs):
        threads.append(func.__name__)
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", spy)

    async def check():
        return await BatchValidator(MiB).check([keyed + keyless_plain, keyless_zstd, keyless_plain],
                                               [True, True, False])

    rejected = anyio.run(check)
    assert set(rejected) == {0, 1}  # a topic that is not compacted takes keyless records
    assert (rejected[0].error, rejected[0].valid_bytes) == (ErrorCode.INVALID_RECORD, len(keyed))
    assert rejected[0].message == "Compacted topic cannot accept message without key."  # Kafka's words
    assert rejected[1].error == ErrorCode.INVALID_RECORD and rejected[1].valid_bytes == 0
    assert threads == ["_check_compressed", "_check_compressed"]  # the uncompressed keyed ones too
