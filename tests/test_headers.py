"""Tests of request/response headers and framing (`wire.headers`)."""
from __future__ import annotations

import random
import struct

import kafka.protocol.metadata as kp  # kafka-python, an independent implementation (a test dependency)
import pytest

from wire.codec import decode, encode
from wire.headers import (
    decode_request_header, decode_response_header, encode_request_header, encode_response_header, frame,
    request_header_version, response_header_version,
)
from wire.primitives import DecodeError, encode_uvarint

CLIENT_IDS = [None, "", "kafka-python", "ünïcødé-客户端-🚀", "x" * 300]
CORRELATION_IDS = [0, 1, -1, 2**31 - 1, -(2**31)]

# (api key, version, header version): Produce, Metadata, ApiVersions either side of their first flexible version
HEADER_CASES = [(0, 8, 1), (0, 9, 2), (3, 8, 1), (3, 12, 2), (18, 2, 1), (18, 3, 2), (18, 4, 2), (1, 11, 1), (1, 12, 2)]


@pytest.mark.parametrize("api,version,hv", HEADER_CASES)
def test_request_header_version(api, version, hv):
    assert request_header_version(api, version) == hv


def test_request_header_version_of_unknown_api_is_v1():
    assert request_header_version(9999, 0) == 1
    assert request_header_version(9999, 50) == 1


@pytest.mark.parametrize("api,version,hv", HEADER_CASES)
@pytest.mark.parametrize("client_id", CLIENT_IDS, ids=["null", "empty", "ascii", "non-ascii", "long"])
def test_request_header_round_trip(api, version, hv, client_id):
    for cid in CORRELATION_IDS:
        raw = encode_request_header(api, version, cid, client_id)
        cid_len = 0 if client_id is None else len(client_id.encode("utf-8"))
        assert len(raw) == 10 + cid_len + (1 if hv == 2 else 0)
        assert raw[8:10] == struct.pack(">h", -1 if client_id is None else cid_len)  # int16 length even in v2
        body = b"\x01\x02\x03"
        for data in (raw, raw + body, memoryview(raw + body)):
            h = decode_request_header(data)
            assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (api, version, cid, client_id)
            assert h.header_size == len(raw)
            assert h.tagged == {}


def test_request_header_v2_tagged_fields():
    fixed = struct.pack(">hhi", 3, 12, 42) + struct.pack(">h", 3) + "cli".encode()
    tags = encode_uvarint(3) + encode_uvarint(0) + encode_uvarint(3) + b"abc"
    tags += encode_uvarint(5) + encode_uvarint(0)
    tags += encode_uvarint(300) + encode_uvarint(130) + bytes(range(130))
    body = encode(3, 12, "request", {"topics": None})
    h = decode_request_header(fixed + tags + body)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 12, 42, "cli")
    assert h.tagged == {0: b"abc", 5: b"", 300: bytes(range(130))}
    assert h.header_size == len(fixed) + len(tags)
    assert decode(3, 12, "request", (fixed + tags + body)[h.header_size:], exact=True).topics is None


def test_request_header_v1_has_no_tag_section():
    raw = struct.pack(">hhi", 3, 8, 1) + b"\xff\xff"
    h = decode_request_header(raw + b"\x00")
    assert h.header_size == 10 and h.client_id is None and h.tagged == {}


def test_request_header_null_client_id_in_v2():
    raw = struct.pack(">hhi", 18, 3, 9) + b"\xff\xff" + b"\x00"
    h = decode_request_header(raw)
    assert h.client_id is None and h.header_size == 11


@pytest.mark.parametrize("cls_path,version,body", [
    ("kafka.protocol.metadata:MetadataRequest", 8, {"topics": None, "allow_auto_topic_creation": False}),
    ("kafka.protocol.metadata:MetadataRequest", 12, {"topics": None, "allow_auto_topic_creation": True}),
    ("kafka.protocol.metadata:ApiVersionsRequest", 2, {}),
    ("kafka.protocol.metadata:ApiVersionsRequest", 3, {"client_software_name": "kp", "client_software_version": "3"}),
    ("kafka.protocol.metadata:ApiVersionsRequest", 4, {"client_software_name": "kp", "client_software_version": "3"}),
])
@pytest.mark.parametrize("client_id", [None, "kafka-pythön"])
def test_decode_kafka_python_request_headers(cls_path, version, body, client_id):
    """kafka-python frames a request with its header; we parse the frame and then the body."""
    cls = getattr(kp, cls_path.split(":")[1])
    req = cls[version](**body)
    req.with_header(correlation_id=1234, client_id=client_id)
    framed = bytes(req.encode(header=True, framed=True))
    (size,) = struct.unpack_from(">i", framed)
    assert size == len(framed) - 4
    payload = framed[4:]
    h = decode_request_header(payload)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (cls.API_KEY, version, 1234, client_id)
    d = decode(cls.API_KEY, version, "request", payload[h.header_size:], exact=True)
    for k, v in body.items():
        assert d[k] == v


# ---- malformed request headers --------------------------------------------------------------

def test_truncated_request_header():
    full = encode_request_header(3, 12, 7, "client")
    for cut in range(len(full)):
        with pytest.raises(DecodeError):
            decode_request_header(full[:cut])
    full = encode_request_header(3, 8, 7, "client")
    for cut in range(len(full)):
        with pytest.raises(DecodeError):
            decode_request_header(full[:cut])


@pytest.mark.parametrize("length", [7, 100, 32767])
def test_client_id_length_beyond_frame(length):
    with pytest.raises(DecodeError):
        decode_request_header(struct.pack(">hhih", 3, 8, 1, length) + b"abc")


@pytest.mark.parametrize("length", [-2, -100, -32768])
def test_negative_client_id_length(length):
    with pytest.raises(DecodeError):
        decode_request_header(struct.pack(">hhih", 3, 8, 1, length) + b"abc")


def test_client_id_invalid_utf8():
    with pytest.raises(DecodeError):
        decode_request_header(struct.pack(">hhih", 3, 8, 1, 2) + b"\xc3\x28")


def test_malformed_tag_section():
    head = struct.pack(">hhih", 3, 12, 1, -1)
    for tags in (
        encode_uvarint(1) + encode_uvarint(0) + encode_uvarint(10) + b"abc",  # tagged field past the frame
        encode_uvarint(2) + encode_uvarint(0) + encode_uvarint(0),  # fewer fields than counted
        b"\x80\x80\x80\x80\x80\x01",  # count varint longer than 5 bytes
        encode_uvarint(1) + b"\xff\xff\xff\xff\xff\x01",  # tag varint longer than 5 bytes
        encode_uvarint(1) + encode_uvarint(0) + b"\xff\xff\xff\xff\x0f",  # 4 GiB tagged field
        encode_uvarint(2**31) + b"\x00",  # huge count, no data
    ):
        with pytest.raises(DecodeError):
            decode_request_header(head + tags)


def test_request_header_fuzz_raises_only_decode_error():
    rng = random.Random("header-fuzz")
    seeds = [encode_request_header(a, v, 5, c) for a, v, _ in HEADER_CASES for c in CLIENT_IDS[:4]]
    for i in range(3000):
        if i % 4 == 0:
            data = rng.randbytes(rng.randint(0, 24))
        else:
            b = bytearray(rng.choice(seeds) + rng.randbytes(rng.randint(0, 6)))
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.choice([0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            data = bytes(b[:rng.randint(0, len(b))])
        try:
            h = decode_request_header(data)
        except DecodeError:
            continue
        assert 10 <= h.header_size <= len(data)


# ---- response headers -----------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_response_always_header_v0(version):
    assert response_header_version(18, version) == 0
    assert encode_response_header(18, version, 77) == struct.pack(">i", 77)


def test_response_header_versions():
    assert response_header_version(18, 3) == 0
    assert response_header_version(3, 8) == 0
    assert response_header_version(3, 9) == 1
    assert response_header_version(3, 12) == 1
    assert response_header_version(0, 8) == 0
    assert response_header_version(0, 9) == 1
    assert response_header_version(1, 12) == 1
    assert response_header_version(9999, 3) == 0


@pytest.mark.parametrize("api,version,hv", [(3, 8, 0), (3, 12, 1), (0, 9, 1), (18, 3, 0), (18, 0, 0)])
@pytest.mark.parametrize("cid", CORRELATION_IDS)
def test_response_header_round_trip(api, version, hv, cid):
    raw = encode_response_header(api, version, cid)
    assert raw == struct.pack(">i", cid) + (b"\x00" if hv == 1 else b"")
    assert decode_response_header(api, version, raw + b"body") == (cid, len(raw))


def test_response_header_v1_with_tagged_fields():
    raw = struct.pack(">i", 5) + encode_uvarint(2) + b"\x00\x02ab" + encode_uvarint(200) + b"\x00"
    assert decode_response_header(3, 12, raw + b"rest") == (5, len(raw))


def test_truncated_response_header():
    for data in (b"", b"\x00", b"\x00\x00\x00"):
        with pytest.raises(DecodeError):
            decode_response_header(3, 8, data)
    for data in (b"\x00\x00\x00\x01", b"\x00\x00\x00\x01\x01\x00", b"\x00\x00\x00\x01\x01\x00\x05ab",
                 b"\x00\x00\x00\x01\x80\x80\x80\x80\x80\x01"):
        with pytest.raises(DecodeError):
            decode_response_header(3, 12, data)


def test_kafka_python_reads_our_response_frames():
    keys = [{"api_key": 18, "min_version": 0, "max_version": 4}]
    for version in (0, 3, 4):
        body = encode(18, version, "response", {"error_code": 0, "api_keys": keys})
        data = frame(encode_response_header(18, version, 99) + body)
        r = kp.ApiVersionsResponse[version].decode(data, header=True, framed=True)
        assert r.header.correlation_id == 99
        assert [(k.api_key, k.max_version) for k in r.api_keys] == [(18, 4)]
    for version in (8, 12):
        body = encode(3, version, "response", {"brokers": [{"node_id": 1, "host": "h", "port": 1}], "controller_id": 1})
        data = frame(encode_response_header(3, version, 100) + body)
        r = kp.MetadataResponse[version].decode(data, header=True, framed=True)
        assert r.header.correlation_id == 100 and r.brokers[0].host == "h"


def test_frame():
    assert frame(b"") == b"\x00\x00\x00\x00"
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
