"""Bad input over raw sockets: each case checks what happens to the offending connection (closed,
or answered with the right error) and that the broker goes on serving everyone else."""
from __future__ import annotations

import struct
import time

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.kshim_process import KshimProcess
from compat_tests.raw_kafka import (
    API_VERSIONS, METADATA, PRODUCE, RawConnection, consume_all, offsets, produce_and_consume, produce_body,
    request_frame,
)
from wire import codec
from wire.headers import decode_response_header, encode_request_header, frame
from wire.records import HEADER_SIZE, encode_batch

CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_REQUIRED_ACKS, UNSUPPORTED_VERSION = 2, 10, 21, 35
CLOSE_DEADLINE_S = 5.0


def assert_broker_serves(broker: KshimProcess, topic: str) -> None:
    """Another connection's ApiVersions works, a client's produce/consume works, no internal error."""
    with RawConnection(broker.bootstrap) as other:
        response = other.api_versions(3)
        assert response.error_code == 0
        assert any(k.api_key == PRODUCE for k in response.api_keys)
    produce_and_consume(broker.bootstrap, topic)
    assert broker.proc.poll() is None, "broker exited:\n" + broker.logs()
    assert "Traceback" not in broker.logs(), "broker hit an internal error:\n" + broker.logs()


def send_and_expect_close(broker: KshimProcess, data: bytes) -> None:
    with RawConnection(broker.bootstrap) as conn:
        conn.send(data)
        assert conn.wait_closed(CLOSE_DEADLINE_S), f"connection still open {CLOSE_DEADLINE_S}s after {data[:40]!r}"


def corrupt(batch: bytes) -> bytes:
    """The same batch with one byte of record data flipped: its CRC32C no longer matches."""
    out = bytearray(batch)
    out[HEADER_SIZE + 3] ^= 0xFF
    return bytes(out)


# ---------------------------------------------------------------- framing and headers
def test_negative_frame_size_closes_connection(kshim, topic_name):
    send_and_expect_close(kshim, struct.pack(">i", -1) + b"\0" * 16)
    send_and_expect_close(kshim, struct.pack(">i", -(2**31)))
    assert_broker_serves(kshim, topic_name)


@pytest.fixture(scope="module")
def small_kshim(tmp_path_factory):
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-small"), "--max-request-bytes", "1048576").start()
    yield proc
    code = proc.terminate()
    assert code == 0, "kshim did not shut down cleanly:\n" + proc.logs()


LIMIT = 1048576


def test_frame_over_max_request_bytes_closes_connection(small_kshim, topic_name):
    # only the size prefix and a few bytes are sent: a broker that waited to read (or allocated)
    # the announced frame would keep the connection open
    send_and_expect_close(small_kshim, struct.pack(">i", LIMIT + 1) + b"\0" * 100)
    send_and_expect_close(small_kshim, struct.pack(">i", 2**31 - 1))
    assert_broker_serves(small_kshim, topic_name)


def _produce_frame_of_size(topic: str, size: int) -> tuple[bytes, bytes]:
    """A Produce v3 frame whose size field is exactly `size`, and the value it carries."""
    value_len = size - 200
    for _ in range(10):
        value = b"x" * value_len
        body = produce_body({(topic, 0): encode_batch([(b"k", value)])}, acks=1)
        payload = encode_request_header(PRODUCE, 3, 7, "kshim-raw") + codec.encode(PRODUCE, 3, "request", body)
        if len(payload) == size:
            return frame(payload), value
        value_len += size - len(payload)
    raise AssertionError("could not build a frame of the exact size")


def test_frame_at_max_request_bytes_is_served(small_kshim, topic_name):
    data, value = _produce_frame_of_size(topic_name, LIMIT)
    assert struct.unpack(">i", data[:4])[0] == LIMIT
    with RawConnection(small_kshim.bootstrap) as conn:
        conn.send(data)
        cid, response = conn.read_response(PRODUCE, 3)
        assert cid == 7
        (p,) = response.responses[0].partition_responses
        assert (p.error_code, p.base_offset) == (0, 0)
        # and the same connection goes on
        assert conn.api_versions(3).error_code == 0
    got = consume_all(small_kshim.bootstrap, topic_name, 0)
    assert [(r.offset, r.value) for r in got] == [(0, value)]
    assert_broker_serves(small_kshim, topic_name)


@pytest.mark.parametrize("payload", [
    pytest.param(b"\x00\x12\x00", id="3-byte-frame"),
    pytest.param(b"", id="empty-frame"),
    pytest.param(struct.pack(">hhih", API_VERSIONS, 0, 1, -5), id="client-id-length-negative"),
    pytest.param(struct.pack(">hhih", API_VERSIONS, 0, 1, 100) + b"abc", id="client-id-longer-than-frame"),
    pytest.param(struct.pack(">hhih", API_VERSIONS, 3, 1, -1) + b"\x85", id="truncated-tagged-fields"),
])
def test_unparsable_header_closes_connection(kshim, topic_name, payload):
    send_and_expect_close(kshim, frame(payload))
    assert_broker_serves(kshim, topic_name)


def test_unknown_api_key_closes_connection(kshim, topic_name):
    with RawConnection(kshim.bootstrap) as conn:
        served = {k.api_key for k in conn.api_versions(3).api_keys}
    # a real Kafka API kshim lacks (delegation tokens, reassignments, log dir moves, telemetry, share groups...)
    unserved_known = next(k for k in (38, 39, 40, 41, 45, 46, 34, 71, 72, 76, 77, 78, 79) if k not in served)
    for api_key in (9999, unserved_known, -1):
        send_and_expect_close(kshim, frame(struct.pack(">hhih", api_key, 0, 1, -1) + b"\0" * 8))
    assert_broker_serves(kshim, topic_name)


def test_other_api_at_unsupported_version_closes_connection(kshim, topic_name):
    send_and_expect_close(kshim, frame(struct.pack(">hhih", METADATA, 99, 1, -1) + b"\0" * 8))
    send_and_expect_close(kshim, frame(struct.pack(">hhih", PRODUCE, 0, 1, -1) + b"\0" * 8))
    assert_broker_serves(kshim, topic_name)


def test_api_versions_unsupported_version_answers_and_keeps_connection(kshim, topic_name):
    with RawConnection(kshim.bootstrap) as conn:
        good = conn.api_versions(3)
        supported = {(k.api_key, k.min_version, k.max_version) for k in good.api_keys}
        assert (API_VERSIONS, 0, 4) in supported
        # as a newer client would send it: header v2, a body in the newest shape this codec knows
        future_body = codec.encode(API_VERSIONS, 4, "request",
                                   {"client_software_name": "future", "client_software_version": "9"})
        conn.send(frame(encode_request_header(API_VERSIONS, 99, 4242, "kshim-raw") + future_body))
        payload = conn.read_frame()
        # response header v0: just the correlation id, no tagged fields; then a v0 body
        assert payload[:4] == struct.pack(">i", 4242)
        cid, header_size = decode_response_header(API_VERSIONS, 0, payload)
        assert header_size == 4
        body = codec.decode(API_VERSIONS, 0, "response", payload[header_size:], exact=True)
        assert body.error_code == UNSUPPORTED_VERSION
        assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} == supported
        # the same connection then serves a good request
        again = conn.api_versions(3)
        assert again.error_code == 0
        assert {(k.api_key, k.min_version, k.max_version) for k in again.api_keys} == supported
    assert_broker_serves(kshim, topic_name)


@pytest.mark.parametrize("version, garbage", [
    pytest.param(9, b"\xff" * 7, id="v9-overlong-varint"),
    pytest.param(9, b"", id="v9-empty-body"),
    pytest.param(3, b"garbage!", id="v3-string-longer-than-frame"),
])
def test_unparsable_body_closes_connection(kshim, topic_name, version, garbage):
    send_and_expect_close(kshim, frame(encode_request_header(PRODUCE, version, 1, "kshim-raw") + garbage))
    assert_broker_serves(kshim, topic_name)


def test_truncated_frame_then_peer_close(kshim, topic_name):
    with RawConnection(kshim.bootstrap) as conn:
        conn.send(struct.pack(">i", 100) + encode_request_header(API_VERSIONS, 0, 1, "x")[:6])
    with RawConnection(kshim.bootstrap) as conn:  # a good request cut short, then closed
        conn.send(request_frame(PRODUCE, 9, produce_body({(topic_name, 0): encode_batch([(b"k", b"v")])}), 1)[:-10])
    assert_broker_serves(kshim, topic_name)
    assert offsets(kshim.bootstrap, topic_name, 0)[1] == 1  # only the health check's record


def test_peer_closes_with_responses_unread(kshim, topic_name):
    """A client that goes away with thousands of responses still coming (its close resets the
    connection): the broker's writes to it fail, which must cost that connection only."""
    body = {"client_software_name": "raw", "client_software_version": "1"}
    requests = b"".join(request_frame(API_VERSIONS, 3, body, i) for i in range(5000))
    for _ in range(3):
        with RawConnection(kshim.bootstrap) as conn:
            conn.send(requests)
            assert conn.read_response(API_VERSIONS, 3)[0] == 0  # the broker is busy answering
    assert_broker_serves(kshim, topic_name)


# ---------------------------------------------------------------- produce errors
def test_bad_crc_fails_only_its_partition(kshim, topic_name):
    good, bad = encode_batch([(b"k", b"good")]), corrupt(encode_batch([(b"k", b"bad!")]))
    with RawConnection(kshim.bootstrap) as conn:
        result = conn.produce({(topic_name, 0): bad, (topic_name, 1): good})
        assert result[(topic_name, 0)].error_code == CORRUPT_MESSAGE
        assert result[(topic_name, 1)].error_code == 0
        assert result[(topic_name, 1)].base_offset == 0
        assert conn.api_versions(3).error_code == 0  # the connection stays usable
    assert [(r.offset, r.value) for r in consume_all(kshim.bootstrap, topic_name, 1)] == [(0, b"good")]
    assert offsets(kshim.bootstrap, topic_name, 0) == (0, 0)
    assert_broker_serves(kshim, topic_name)


def test_invalid_acks(kshim, topic_name):
    with RawConnection(kshim.bootstrap) as conn:
        for acks in (2, -2):
            result = conn.produce({(topic_name, 0): encode_batch([(b"k", b"v")]),
                                   (topic_name, 1): encode_batch([(b"k", b"v")])}, acks=acks)
            assert {p.error_code for p in result.values()} == {INVALID_REQUIRED_ACKS}
    assert offsets(kshim.bootstrap, topic_name, 0) == (0, 0)
    assert offsets(kshim.bootstrap, topic_name, 1) == (0, 0)
    assert_broker_serves(kshim, topic_name)


def test_batch_over_max_message_bytes(kshim, topic_name):
    admin = KafkaAdminClient(bootstrap_servers=kshim.bootstrap)
    try:
        admin.create_topics([NewTopic(topic_name, 1, 1, topic_configs={"max.message.bytes": "2000"})])
    finally:
        admin.close()
    with RawConnection(kshim.bootstrap) as conn:
        big = encode_batch([(b"k", b"x" * 2500)])
        result = conn.produce({(topic_name, 0): big})
        assert result[(topic_name, 0)].error_code == MESSAGE_TOO_LARGE
        small = encode_batch([(b"k", b"x" * 1500)])
        result = conn.produce({(topic_name, 0): small})
        assert (result[(topic_name, 0)].error_code, result[(topic_name, 0)].base_offset) == (0, 0)
    assert [r.value for r in consume_all(kshim.bootstrap, topic_name, 0)] == [b"x" * 1500]
    assert_broker_serves(kshim, topic_name)


def test_corrupt_second_batch_keeps_first_drops_rest(kshim, topic_name):
    first = encode_batch([(b"k", b"first-0"), (b"k", b"first-1")])
    second = corrupt(encode_batch([(b"k", b"second")]))
    third = encode_batch([(b"k", b"third")])
    with RawConnection(kshim.bootstrap) as conn:
        result = conn.produce({(topic_name, 0): first + second + third})
        assert result[(topic_name, 0)].error_code == CORRUPT_MESSAGE
        assert offsets(kshim.bootstrap, topic_name, 0) == (0, 2)
        # the next good produce goes right after the first batch
        result = conn.produce({(topic_name, 0): encode_batch([(b"k", b"next")])})
        assert (result[(topic_name, 0)].error_code, result[(topic_name, 0)].base_offset) == (0, 2)
    got = [(r.offset, r.value) for r in consume_all(kshim.bootstrap, topic_name, 0)]
    assert got == [(0, b"first-0"), (1, b"first-1"), (2, b"next")]
    assert_broker_serves(kshim, topic_name)


# ---------------------------------------------------------------- pipelining
def test_pipelined_requests_answer_in_order(kshim, topic_name):
    kinds = ["metadata", "api_versions", "produce_acks1", "produce_acks0"] * 5
    data = bytearray()
    expected = []  # (correlation id, api key, version, kind, produce index)
    produced = 0
    for i, kind in enumerate(kinds):
        cid = 100 + i
        if kind == "metadata":
            body = {"topics": [{"topic_id": None, "name": topic_name}], "allow_auto_topic_creation": True,
                    "include_topic_authorized_operations": False}
            data += request_frame(METADATA, 12, body, cid)
            expected.append((cid, METADATA, 12, kind, None))
        elif kind == "api_versions":
            data += request_frame(API_VERSIONS, 3, {"client_software_name": "raw", "client_software_version": "1"}, cid)
            expected.append((cid, API_VERSIONS, 3, kind, None))
        else:
            acks = 1 if kind == "produce_acks1" else 0
            batch = encode_batch([(b"k", f"record-{produced}".encode())])
            data += request_frame(PRODUCE, 9, produce_body({(topic_name, 0): batch}, acks=acks), cid)
            if acks:
                expected.append((cid, PRODUCE, 9, kind, produced))
            produced += 1
    with RawConnection(kshim.bootstrap) as conn:
        conn.send(bytes(data))  # all 20 in one write
        for cid, api_key, version, kind, index in expected:
            got, body = conn.read_response(api_key, version)
            assert got == cid, f"expected the response to {cid} ({kind}), got {got}"
            if kind == "metadata":
                assert [t.name for t in body.topics] == [topic_name]
            elif kind == "api_versions":
                assert body.error_code == 0
            else:
                (p,) = body.responses[0].partition_responses
                # produces append in arrival order, acks=0 ones included
                assert (p.error_code, p.base_offset) == (0, index)
        # nothing was answered for acks=0: the next response is the next request's
        marker = conn.send_request(API_VERSIONS, 0, {})
        got, body = conn.read_response(API_VERSIONS, 0)
        assert (got, body.error_code) == (marker, 0)
    got = [(r.offset, r.value) for r in consume_all(kshim.bootstrap, topic_name, 0)]
    assert got == [(i, f"record-{i}".encode()) for i in range(produced)]
    assert_broker_serves(kshim, topic_name)


def test_an_answer_in_the_making_keeps_later_ones_behind_it(kshim, topic_name):
    """A fetch that waits for data is answered first, though the requests pipelined behind it are
    answered at once (the reader writes those itself only when nothing is ahead of them)."""
    fetch = {"replica_id": -1, "max_wait_ms": 400, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
             "topics": [{"topic": topic_name, "partitions": [
                 {"partition": 0, "fetch_offset": 1, "partition_max_bytes": 1 << 20}]}]}
    produce_and_consume(kshim.bootstrap, topic_name)  # the topic, with one record: the fetch waits at 1
    with RawConnection(kshim.bootstrap) as conn:
        assert conn.api_versions(3).error_code == 0
        data = request_frame(1, 4, fetch, 1) + request_frame(API_VERSIONS, 3, {
            "client_software_name": "raw", "client_software_version": "1"}, 2)
        data += request_frame(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}, 3)
        started = time.monotonic()
        conn.send(data)
        got, body = conn.read_response(1, 4)
        waited = time.monotonic() - started
        (partition,) = body.responses[0].partitions
        assert got == 1 and (partition.error_code, partition.high_watermark) == (0, 1)
        assert waited >= 0.3, f"the fetch was answered after {waited:.3f} s, not after its wait"
        assert conn.read_response(API_VERSIONS, 3)[0] == 2
        assert conn.read_response(METADATA, 12)[0] == 3


def test_failed_acks_0_produce_closes_the_connection(kshim, topic_name):
    """As Kafka: the only way an acks=0 producer learns its metadata is stale."""
    with RawConnection(kshim.bootstrap) as conn:
        conn.send_request(0, 9, produce_body({(topic_name, 0): corrupt(encode_batch([(b"k", b"v")]))}, acks=0))
        assert conn.wait_closed(), "the connection stayed open after a failed acks=0 produce"
    with RawConnection(kshim.bootstrap) as conn:  # a good acks=0 produce keeps it open
        conn.send_request(0, 9, produce_body({(topic_name, 0): encode_batch([(b"k", b"v")])}, acks=0))
        assert conn.api_versions(3).error_code == 0
    assert_broker_serves(kshim, topic_name)


def test_fetch_limits_bind_every_partition_but_the_first_with_data(kshim, topic_name):
    """KIP-74: only the first partition with data may go over max_bytes / partition_max_bytes."""
    admin = KafkaAdminClient(bootstrap_servers=kshim.bootstrap)
    try:
        admin.create_topics([NewTopic(topic_name, 3, 1)])
    finally:
        admin.close()
    big = encode_batch([(None, bytes(100_000))])
    with RawConnection(kshim.bootstrap) as conn:
        result = conn.produce({(topic_name, p): big for p in range(3)})
        assert all(r.error_code == 0 for r in result.values())
        resp = conn.request(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 150_000,
                                    "isolation_level": 0, "session_epoch": -1, "rack_id": "",
                                    "topics": [{"topic": topic_name, "partitions": [
                                        {"partition": p, "fetch_offset": 0, "partition_max_bytes": 50_000}
                                        for p in range(3)]}]})
    sizes = [len(p.records or b"") for p in resp.responses[0].partitions]
    assert sizes == [len(big), 0, 0]
