"""The sans-IO connection core (kshim/net/protocol.py), in-process: frames in, requests out, responses
out as bytes. Requests are built by hand here (struct), so the codec under test does not make its
own input; responses are read back by hand too."""
from __future__ import annotations

import random
import struct

import pytest

from kshim.net.handlers import load_handlers, supported_versions
from kshim.net.protocol import ConnectionCore, ProtocolError, Request

SUPPORTED = supported_versions(load_handlers())
API_VERSIONS, METADATA, PRODUCE = 18, 3, 0


def string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def header_v1(api_key: int, version: int, correlation_id: int, client_id: str | None = "test") -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id) + string(client_id)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def metadata_v1(correlation_id: int, topics: list[str] | None = None) -> bytes:
    """Metadata v1 (not flexible): a nullable array of topic names."""
    body = struct.pack(">i", -1) if topics is None else \
        struct.pack(">i", len(topics)) + b"".join(string(t) for t in topics)
    return frame(header_v1(METADATA, 1, correlation_id) + body)


def api_versions(version: int, correlation_id: int) -> bytes:
    """ApiVersions v0-2 have an empty body; v3+ (flexible, header v2) two compact strings and tags."""
    if version < 3:
        return frame(header_v1(API_VERSIONS, version, correlation_id))
    head = header_v1(API_VERSIONS, version, correlation_id) + b"\x00"  # header v2: empty tagged fields
    body = b"\x05kshi" + b"\x021" + b"\x00"  # compact strings are length+1
    return frame(head + body)


def produce_v3(correlation_id: int, records: bytes) -> bytes:
    body = (string(None) + struct.pack(">hi", 1, 30000)  # transactional id, acks, timeout
            + struct.pack(">i", 1) + string("t") + struct.pack(">i", 1)
            + struct.pack(">ii", 0, len(records)) + records)
    return frame(header_v1(PRODUCE, 3, correlation_id) + body)


def core(max_request_bytes: int = 100 * 1024 * 1024) -> ConnectionCore:
    return ConnectionCore(SUPPORTED, max_request_bytes)


def drain(c: ConnectionCore) -> list[Request]:
    out = []
    while (request := c.next_request()) is not None:
        out.append(request)
    return out


def ids(requests: list[Request]) -> list[tuple[int, int, int]]:
    return [(r.header.api_key, r.header.api_version, r.header.correlation_id) for r in requests]


# ---------------------------------------------------------------------------------------- frame sizes
def test_a_negative_frame_size_is_fatal():
    c = core()
    c.receive_data(struct.pack(">i", -1))
    with pytest.raises(ProtocolError, match="frame size -1"):
        c.next_request()


def test_a_frame_above_max_request_bytes_is_fatal_on_its_size_alone():
    request = metadata_v1(1, ["a"])
    c = core(max_request_bytes=len(request) - 5)
    c.receive_data(request[:4])  # only the size prefix has arrived
    with pytest.raises(ProtocolError, match="outside"):
        c.next_request()


def test_a_frame_of_exactly_max_request_bytes_is_served():
    request = metadata_v1(1, ["a"])
    c = core(max_request_bytes=len(request) - 4)
    c.receive_data(request)
    assert ids(drain(c)) == [(METADATA, 1, 1)]


# ---------------------------------------------------------------------------------------- arrival
STREAM = [metadata_v1(1), api_versions(3, 2), metadata_v1(3, ["orders", "users"]), api_versions(0, 4)]
EXPECTED = [(METADATA, 1, 1), (API_VERSIONS, 3, 2), (METADATA, 1, 3), (API_VERSIONS, 0, 4)]


def test_requests_fed_one_byte_at_a_time():
    c = core()
    got = []
    for byte in b"".join(STREAM):
        c.receive_data(bytes([byte]))
        got += drain(c)
    assert ids(got) == EXPECTED
    assert [t.name for t in got[2].body.topics] == ["orders", "users"]


def test_several_requests_in_one_feed():
    c = core()
    c.receive_data(b"".join(STREAM))
    assert ids(drain(c)) == EXPECTED
    assert c.buffered == 0


def test_a_pair_of_frames_split_at_every_position():
    data = STREAM[0] + STREAM[2]
    for cut in range(len(data) + 1):
        c = core()
        c.receive_data(data[:cut])
        got = drain(c)
        c.receive_data(data[cut:])
        assert ids(got + drain(c)) == [EXPECTED[0], EXPECTED[2]], cut


def test_random_splits_of_twenty_mixed_requests():
    rng = random.Random(848)
    makers = [lambda i: metadata_v1(i), lambda i: metadata_v1(i, ["x" * rng.randint(1, 300)]),
              lambda i: api_versions(rng.randint(0, 4), i), lambda i: produce_v3(i, bytes(rng.randint(0, 5000)))]
    for _ in range(50):
        requests = [rng.choice(makers)(i) for i in range(20)]
        data = b"".join(requests)
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 30)))
        c = core()
        got = []
        for start, end in zip([0, *cuts], [*cuts, len(data)]):
            c.receive_data(data[start:end])
            got += drain(c)
        assert [r.header.correlation_id for r in got] == list(range(20))


def test_a_large_frame_is_read_in_place_and_its_records_are_views_into_it():
    records = bytes(range(256)) * 400  # 100 KiB: over LARGE_FRAME
    data = produce_v3(7, records) + metadata_v1(8)
    frame_size = len(produce_v3(7, records)) - 4
    c = core()
    pos = 0
    got = []
    targets = []  # (bytes received so far, size of the buffer the core handed out)
    while pos < len(data):  # the server's path: recv_into the buffer the core hands out
        with c.receive_buffer() as target:
            targets.append((pos, len(target.obj)))
            n = min(len(target), 4096, len(data) - pos)
            target[:n] = data[pos:pos + n]
        c.received(n)
        pos += n
        got += drain(c)
    assert ids(got) == [(PRODUCE, 3, 7), (METADATA, 1, 8)]
    # once the size is known, the rest of the frame is received straight into its own buffer, which
    # grows with what arrived (never the claimed size up front) and ends at the frame's size
    in_frame = [(received, size) for received, size in targets if 4096 <= received < frame_size]
    assert in_frame and in_frame[-1][1] == frame_size
    assert all(size <= max(ConnectionCore.FRAME_STEP, 2 * received) for received, size in in_frame)
    view = got[0].body.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and bytes(view) == records
    # a view into the frame's own buffer, sized to the frame: not a copy, not the shared buffer
    assert isinstance(view.obj, bytearray) and len(view.obj) == len(produce_v3(7, records)) - 4


def feed_in_chunks(c: ConnectionCore, data: bytes, chunk: int = 4096) -> None:
    """The server's path: recv_into whatever buffer the core hands out."""
    pos = 0
    while pos < len(data):
        with c.receive_buffer() as target:
            n = min(len(target), chunk, len(data) - pos)
            target[:n] = data[pos:pos + n]
        c.received(n)
        pos += n


def test_memory_follows_the_bytes_that_arrived_not_the_claimed_size():
    c = core()
    c.receive_data(struct.pack(">i", 100 * 1024 * 1024))  # claims 100 MiB, sends nothing more
    assert c.next_request() is None and c.in_frame
    assert c.memory <= 2 * ConnectionCore.FRAME_STEP
    feed_in_chunks(c, bytes(1024 * 1024))  # 1 MiB of it arrives
    assert c.next_request() is None
    assert c.memory <= 2 * 1024 * 1024 + 2 * ConnectionCore.FRAME_STEP


def test_a_quiet_connection_gives_a_grown_buffer_back():
    c = core()
    assert c.memory == ConnectionCore.INITIAL_BUFFER
    big_small_frame = metadata_v1(1, ["t%05d" % i for i in range(4000)])  # ~32 KiB: below LARGE_FRAME
    assert ConnectionCore.INITIAL_BUFFER < len(big_small_frame) < ConnectionCore.LARGE_FRAME
    feed_in_chunks(c, big_small_frame)
    assert ids(drain(c)) == [(METADATA, 1, 1)]
    assert c.memory > ConnectionCore.INITIAL_BUFFER and not c.in_frame
    c.release_idle()
    assert c.memory == ConnectionCore.INITIAL_BUFFER
    feed_in_chunks(c, metadata_v1(2, ["a"]))
    assert ids(drain(c)) == [(METADATA, 1, 2)]


def test_a_small_frame_whose_size_is_known_gets_room_for_the_rest_in_one_read():
    """A 32 KiB request arriving after a full first read: the next receive buffer holds all the
    rest (one recv, one loop turn), not the next doubling."""
    c = core()
    request = metadata_v1(1, ["t%05d" % i for i in range(4000)])
    assert ConnectionCore.INITIAL_BUFFER < len(request) < ConnectionCore.LARGE_FRAME
    with c.receive_buffer() as view:
        first = len(view)
        view[:] = request[:first]
    c.received(first)
    assert c.next_request() is None and c.in_frame
    with c.receive_buffer() as view:
        assert len(view) == len(request) - first
        view[:] = request[first:]
    c.received(len(request) - first)
    assert ids(drain(c)) == [(METADATA, 1, 1)]


# ---------------------------------------------------------------------------------------- bad frames
def test_an_unparsable_header_is_fatal():
    c = core()
    c.receive_data(frame(b"\x00\x03\x00"))  # three bytes: not even api key and version
    with pytest.raises(ProtocolError, match="header"):
        c.next_request()


def test_an_api_key_that_is_not_served_is_fatal():
    assert 999 not in SUPPORTED
    c = core()
    c.receive_data(frame(header_v1(999, 0, 1)))
    with pytest.raises(ProtocolError, match="not served"):
        c.next_request()


def test_another_api_at_an_unsupported_version_is_fatal():
    c = core()
    c.receive_data(frame(header_v1(METADATA, 99, 1) + b"\x00" + b"\x00\x01\x00\x00\x00"))  # header v2 tags
    with pytest.raises(ProtocolError, match="outside"):
        c.next_request()


def test_a_body_that_does_not_parse_is_fatal():
    c = core()
    c.receive_data(frame(header_v1(METADATA, 1, 1) + struct.pack(">i", 5)))  # five names announced, none sent
    with pytest.raises(ProtocolError, match="bad body"):
        c.next_request()


@pytest.mark.anyio
async def test_api_versions_at_an_unsupported_version_is_answered_in_a_v0_body():
    c = core()
    # a future version: header v2 (flexible), then a body the broker cannot know
    c.receive_data(frame(header_v1(API_VERSIONS, 99, 42) + b"\x00" + b"garbage of a future version"))
    request = c.next_request()
    assert request is not None and request.unsupported and request.body is None
    handler = load_handlers()[API_VERSIONS]

    class Ctx:  # the ApiVersions handler reads the served versions only
        supported = SUPPORTED
        version = 99

    body = await handler.handle(Ctx(), None)  # type: ignore[arg-type]  # a stand-in context
    data = b"".join(bytes(chunk) for chunk in ConnectionCore.response_bytes(request, body))
    size, correlation_id, error_code, count = struct.unpack_from(">iihi", data)
    assert (size, correlation_id, error_code) == (len(data) - 4, 42, 35)  # UNSUPPORTED_VERSION
    listed = {struct.unpack_from(">hhh", data, 14 + 6 * i)[0]: struct.unpack_from(">hhh", data, 14 + 6 * i)[1:]
              for i in range(count)}
    assert listed == SUPPORTED and len(data) == 14 + 6 * count  # v0: nothing after the list
    assert c.next_request() is None  # and the connection goes on


# ---------------------------------------------------------------------------------------- responses
def _response(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    header = struct.pack(">hhi", api_key, version, correlation_id) + string("test")
    if version >= {METADATA: 9, API_VERSIONS: 3}[api_key]:
        header += b"\x00"
    c = core()
    if api_key == API_VERSIONS:
        payload = b"\x01\x01\x00"  # two empty compact strings, no tags
    elif version < 9:
        payload = struct.pack(">i", -1)  # every topic
    else:  # null topics, allow auto-creation, no authorized operations, no tags
        payload = b"\x00\x01\x00\x00\x00"
    c.receive_data(frame(header + payload))
    request = c.next_request()
    assert request is not None
    return b"".join(bytes(chunk) for chunk in ConnectionCore.response_bytes(request, body))


def test_a_non_flexible_response_has_header_v0():
    data = _response(METADATA, 1, 77, {"brokers": [], "controller_id": 3, "topics": []})
    # size, correlation id, then the body: brokers [] , controller id, topics []
    assert data == struct.pack(">iiiii", 16, 77, 0, 3, 0)


def test_a_flexible_response_has_header_v1_but_api_versions_keeps_header_v0():
    data = _response(METADATA, 9, 77, {"throttle_time_ms": 0, "brokers": [], "cluster_id": None,
                                       "controller_id": 3, "topics": []})
    # correlation id, header tags (0), throttle, compact brokers [] (1), null cluster id (0),
    # controller id, compact topics [] (1), cluster authorized operations (int32 min), body tags (0)
    body = struct.pack(">i", 0) + b"\x01" + b"\x00" + struct.pack(">i", 3) + b"\x01" \
        + struct.pack(">i", -2147483648) + b"\x00"
    assert data == struct.pack(">ii", 4 + 1 + len(body), 77) + b"\x00" + body
    data = _response(API_VERSIONS, 3, 78, {"error_code": 0, "api_keys": [], "throttle_time_ms": 0})
    # header v0: the correlation id is followed directly by the body's error code
    assert data[4:10] == struct.pack(">ih", 78, 0) and data[10:11] == b"\x01"

