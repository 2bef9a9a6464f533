"""The generated codecs (wire.codegen) against the construct tree they replace (the reference).

For every version of every request and response, with seeded pseudo-random objects:
- decode gives what the tree gives: the same Container keys in the same order, the same value
  types (memoryviews into the input for records, bytes for bytes fields), the same values;
- truncated, corrupted and extended bodies either fail with DecodeError in both or decode equally,
  and exact=True rejects trailing bytes in both;
- encode and encode_into write the same bytes, and objects broken on purpose (an unknown key, a
  missing element key, a null, a value of the wrong type or range) raise the same exception type
  and message, after the same partial output.
Records of 32 KiB or more and FileRecords stay separate GatherStream chunks, never copied.
"""
from __future__ import annotations

import io
import math
import os
import random
import struct
import uuid

import pytest

from tests.test_codec import ALL_VERSIONS, _flexible, _gen_struct
from wire import codec
from wire.primitives import DecodeError, Fields, FileRecords, GatherStream, fields_class
from wire.schema.messages import MESSAGES

SAMPLES = 2  # objects per version (test_codec round-trips 4 more through the generated code)
MUTATIONS = 12  # corruptions of each object's bytes
IDS = [f"{a}-{k}-v{v}" for a, k, v in ALL_VERSIONS]
# every message's oldest and newest version (the fields that differ between versions are the point)
STRICT_VERSIONS = [(a, k, v) for a, k, v in ALL_VERSIONS if v in MESSAGES[(a, k)].versions]
STRICT_OBJECTS = 5


def _same(a, b, path="body"):
    """a and b are equal and of the same types all the way down (a Container's key order too); a
    generated struct is the Fields class of its own field names (wire.primitives.fields_class)."""
    if type(b) is Fields:
        assert type(a) is fields_class(tuple(a)), (path, type(a))
    else:
        assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, memoryview):
        assert a.obj is b.obj and a.tobytes() == b.tobytes() and a.readonly == b.readonly, path
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b, path


def _outcome(fn, *args, **kwargs):
    try:
        return "ok", fn(*args, **kwargs)
    except DecodeError:
        return "DecodeError", None


def _check_decode(api, version, kind, data, exact=False):
    got = _outcome(codec.decode, api, version, kind, data, exact=exact)
    want = _outcome(codec.decode_reference, api, version, kind, data, exact=exact)
    assert got[0] == want[0], (got, want)
    if got[0] == "ok":
        _same(got[1], want[1])


def _mutations(rng: random.Random, data: bytes):
    yield b""
    for _ in range(MUTATIONS):
        r = rng.random()
        if r < 0.3 and data:  # truncated
            yield data[:rng.randrange(len(data))]
        elif r < 0.8 and data:  # one byte changed: lengths, counts, markers, varints, UTF-8
            i = rng.randrange(len(data))
            yield data[:i] + bytes([rng.choice([0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, rng.randrange(256)])]) + data[i + 1:]
        else:  # bytes inserted: garbage in the middle and trailing bytes
            i = rng.randrange(len(data) + 1)
            yield data[:i] + rng.randbytes(rng.randint(1, 4)) + data[i:]


@pytest.mark.parametrize("api,kind,version", ALL_VERSIONS, ids=IDS)
def test_generated_matches_reference(api, kind, version):
    msg = MESSAGES[(api, kind)]
    flexible = _flexible(api, kind, version)
    for i in range(SAMPLES):
        rng = random.Random(f"codegen/{api}/{kind}/{version}/{i}")
        value, _ = _gen_struct(rng, msg.fields, version, flexible)
        ref = io.BytesIO()
        codec.encode_into_reference(api, version, kind, value, ref)
        data = ref.getvalue()
        assert codec.encode(api, version, kind, value) == data
        gather = GatherStream(b"head")
        codec.encode_into(api, version, kind, value, gather)
        assert b"".join(gather.finish()) == b"head" + data
        for buf in (data, bytearray(data), memoryview(data)):
            _check_decode(api, version, kind, buf, exact=True)
        _check_decode(api, version, kind, data + b"\x00", exact=True)
        if i == 0:  # corruptions of one object (both exact modes, alternately)
            for j, bad in enumerate(_mutations(rng, data)):
                _check_decode(api, version, kind, bad, exact=bool(j % 2))


# --------------------------------------------------------------------------------------------
# Strict encoding: broken objects fail the same way in both.
# --------------------------------------------------------------------------------------------

_WRONG = ["x", 2 ** 70, -2 ** 40, b"\x00", [1], {}, 1.5, True, uuid.UUID(int=1), [{}], None]


def _structs(obj, out):
    """Every mapping inside obj (the body, struct fields, array elements)."""
    if isinstance(obj, dict):
        out.append(obj)
        for v in obj.values():
            _structs(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _structs(v, out)
    return out


def _break(rng: random.Random, value: dict) -> None:
    target = rng.choice(_structs(value, []))
    keys = list(target)
    r = rng.random()
    if r < 0.2 or not keys:
        target[rng.choice(["zz_unknown", "session_id", "topic_id", "name", "error_code"])] = rng.choice(_WRONG)
    elif r < 0.35:
        key = rng.choice(keys)
        target[key + "s"] = target.pop(key)  # misspelt
    elif r < 0.55:
        del target[rng.choice(keys)]
    else:
        target[rng.choice(keys)] = rng.choice(_WRONG)


def _encode_outcome(fn, *args):
    stream = io.BytesIO()
    try:
        fn(*args, stream)
    except Exception as e:  # noqa: BLE001 (the exception itself is compared)
        return type(e), str(e), stream.getvalue()
    return None, None, stream.getvalue()


@pytest.mark.parametrize("api,kind,version", STRICT_VERSIONS, ids=[f"{a}-{k}-v{v}" for a, k, v in STRICT_VERSIONS])
def test_strict_encoding_errors_match_reference(api, kind, version):
    msg = MESSAGES[(api, kind)]
    flexible = _flexible(api, kind, version)
    for i in range(STRICT_OBJECTS):
        rng = random.Random(f"codegen-strict/{api}/{kind}/{version}/{i}")
        value, _ = _gen_struct(rng, msg.fields, version, flexible)
        _break(rng, value)
        got = _encode_outcome(codec.encode_into, api, version, kind, value)
        want = _encode_outcome(codec.encode_into_reference, api, version, kind, value)
        assert got == want
        try:
            got_bytes = codec.encode(api, version, kind, value)
        except Exception as e:  # noqa: BLE001
            assert (type(e), str(e)) == want[:2]
        else:
            assert want[0] is None and got_bytes == want[2]


def test_strict_cases_cover_errors_and_successes():
    """The broken objects above really fail in many ways (guards against a silent no-op)."""
    kinds: dict[str, int] = {}
    for api, kind, version in STRICT_VERSIONS:
        msg = MESSAGES[(api, kind)]
        for i in range(STRICT_OBJECTS):
            rng = random.Random(f"codegen-strict/{api}/{kind}/{version}/{i}")
            value, _ = _gen_struct(rng, msg.fields, version, _flexible(api, kind, version))
            _break(rng, value)
            err = _encode_outcome(codec.encode_into_reference, api, version, kind, value)[0]
            name = "ok" if err is None else err.__name__
            kinds[name] = kinds.get(name, 0) + 1
    assert all(kinds.get(k, 0) > 20 for k in ("ok", "EncodeError", "error", "AttributeError", "TypeError")), kinds


# --------------------------------------------------------------------------------------------
# Records stay separate chunks.
# --------------------------------------------------------------------------------------------

def _fetch_response(records) -> dict:
    return {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "records": b"small"}, {"partition_index": 1, "records": records}]}]}


def test_big_records_stay_separate_chunks_by_reference():
    big = memoryview(bytearray(os.urandom(GatherStream.BIG)))
    stream = GatherStream(b"\0\0\0\0")
    codec.encode_into(1, 16, "response", _fetch_response(big), stream)
    chunks = stream.finish()
    assert any(chunk is big for chunk in chunks)
    ref = GatherStream(b"\0\0\0\0")
    codec.encode_into_reference(1, 16, "response", _fetch_response(big), ref)
    assert b"".join(chunks) == b"".join(ref.finish())
    assert isinstance(chunks[0], bytearray) and chunks[0][:4] == b"\0\0\0\0"  # the head stays first, patchable


def test_file_records_stay_a_chunk_and_are_read_for_plain_streams(tmp_path):
    path = tmp_path / "segment"
    path.write_bytes(b"0123456789" * 10)
    fd = os.open(path, os.O_RDONLY)
    records = FileRecords([b"ab", (fd, 5, 20)])
    try:
        stream = GatherStream()
        codec.encode_into(1, 16, "response", _fetch_response(records), stream)
        chunks = stream.finish()
        assert any(chunk is records for chunk in chunks)
        expected = codec.encode(1, 16, "response", _fetch_response(b"ab" + (b"0123456789" * 10)[5:25]))
        assert b"".join(c.read() if isinstance(c, FileRecords) else c for c in chunks) == expected
        plain = io.BytesIO()
        codec.encode_into(1, 16, "response", _fetch_response(records), plain)
        assert plain.getvalue() == expected == codec.encode(1, 16, "response", _fetch_response(records))
    finally:
        records.close()


def test_decoded_records_are_views_into_the_frame_and_bytes_fields_are_bytes():
    body = codec.encode(0, 9, "request", {"acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"batch"}]}]})
    frame = bytearray(body)
    decoded = codec.decode(0, 9, "request", memoryview(frame), exact=True)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and not records.readonly
    records[0:1] = b"B"  # patching in place reaches the frame
    assert b"Batch" in frame
    auth = codec.decode(36, 2, "request", codec.encode(36, 2, "request", {"auth_bytes": b"tok"}), exact=True)
    assert type(auth.auth_bytes) is bytes and auth.auth_bytes == b"tok"


def test_decode_errors_are_decode_errors():
    """Each failure the tree has, through the generated code (the message text may differ)."""
    cases = [
        (18, 3, "request", b"\x00"),  # compact string length 0 for a non-nullable string: -1
        (18, 0, "response", b"\x00\x00\xff\xff\xff\xfe"),  # array count -2
        (18, 0, "response", b"\x00\x00\x00\x00\x00\x09"),  # 9 elements, no bytes
        (3, 0, "request", b"\x00\x00\x00\x01\x00\x02\xff\xfe"),  # invalid UTF-8 in a topic name
        (18, 3, "request", b"\x80\x80\x80\x80\x80\x01"),  # a varint longer than 5 bytes
        (18, 3, "response", b"\x00\x00\x01\x00\x00\x00\x00\x01\x05\x09\x00"),  # a tag's size beyond the end
        (0, 9, "request", b"\x00\x00\x01"),  # short fixed-width fields
    ]
    for api, version, kind, body in cases:
        with pytest.raises(DecodeError):
            codec.decode_reference(api, version, kind, body)
        with pytest.raises(DecodeError):
            codec.decode(api, version, kind, body)


def test_generation_is_lazy_and_cached():
    codec._decoder.cache_clear()
    codec._encoder.cache_clear()
    codec.decode(18, 3, "request", codec.encode(18, 3, "request", {}))
    assert codec._decoder.cache_info().currsize == 1 and codec._encoder.cache_info().currsize == 1
    assert codec._decoder(18, 3, "request") is codec._decoder(18, 3, "request")
    with pytest.raises(codec.UnsupportedVersion):
        codec.decode(18, 99, "request", b"")
    with pytest.raises(codec.UnsupportedVersion):
        codec.encode(9999, 0, "request", {})


def test_struct_error_is_not_swallowed_into_success():
    """An int out of range fails the generated encoder; the tree's own struct.error is raised."""
    with pytest.raises(struct.error):
        codec.encode(0, 9, "request", {"acks": 1 << 20, "timeout_ms": 0, "topic_data": []})
