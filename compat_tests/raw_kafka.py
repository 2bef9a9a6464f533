"""Raw Kafka protocol over a plain socket, for tests that send what no client library would, and
small kafka-python helpers to check, as a user would, what a broker holds."""
from __future__ import annotations

import socket
import struct
import time
from typing import Any, Mapping

from construct import Container
from crc32c import crc32c
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from wire import codec
from wire.headers import decode_response_header, encode_request_header, frame

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, INIT_PRODUCER_ID = 0, 1, 2, 3, 18, 22


def request_frame(api_key: int, version: int, body: Mapping[str, Any], correlation_id: int,
                  client_id: str | None = "kshim-raw") -> bytes:
    return frame(encode_request_header(api_key, version, correlation_id, client_id)
                 + codec.encode(api_key, version, "request", body))


def produce_body(partitions: Mapping[tuple[str, int], bytes], acks: int = 1, timeout_ms: int = 5000) -> dict:
    topics: dict[str, list] = {}
    for (topic, index), records in partitions.items():
        topics.setdefault(topic, []).append({"index": index, "records": records})
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": t, "partition_data": p} for t, p in topics.items()]}


class RawConnection:
    """One TCP connection speaking the Kafka protocol byte by byte."""

    def __init__(self, bootstrap: str, timeout: float = 10.0, source: str | None = None) -> None:
        """`source`: the local address to connect from (e.g. 127.0.0.2: another client address on
        loopback)."""
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.settimeout(timeout)
        self._next_correlation = 1

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def next_correlation_id(self) -> int:
        cid = self._next_correlation
        self._next_correlation += 1
        return cid

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_request(self, api_key: int, version: int, body: Mapping[str, Any]) -> int:
        cid = self.next_correlation_id()
        self.send(request_frame(api_key, version, body, cid))
        return cid

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def read_response(self, api_key: int, version: int) -> tuple[int, Container]:
        """(correlation id, decoded body) of the next response, read as `api_key` at `version`."""
        payload = self.read_frame()
        cid, header_size = decode_response_header(api_key, version, payload)
        return cid, codec.decode(api_key, version, "response", payload[header_size:])

    def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> Container:
        cid = self.send_request(api_key, version, body)
        got, response = self.read_response(api_key, version)
        assert got == cid, f"response correlation id {got}, expected {cid}"
        return response

    def api_versions(self, version: int = 3) -> Container:
        body = {"client_software_name": "kshim-raw", "client_software_version": "1.0"} if version >= 3 else {}
        return self.request(API_VERSIONS, version, body)

    def produce(self, partitions: Mapping[tuple[str, int], bytes], acks: int = 1, version: int = 9) -> dict:
        """{(topic, partition): partition response} of one produce request."""
        response = self.request(PRODUCE, version, produce_body(partitions, acks))
        return {(t.name, p.index): p for t in response.responses for p in t.partition_responses}

    def init_producer_id(self, version: int = 4) -> Container:
        return self.request(INIT_PRODUCER_ID, version, {
            "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1})

    def wait_closed(self, timeout: float = 5.0) -> bool:
        """True once the broker closes this connection (EOF or reset) within `timeout`, reading and
        discarding anything it still sends; False if it is still open at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                if not self.sock.recv(65536):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except socket.timeout:
                return False


def listed_brokers(bootstrap: str) -> set[int]:
    """The node ids one broker's Metadata lists (its own image, not the controller's view)."""
    with RawConnection(bootstrap) as conn:
        resp = conn.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
    return {b.node_id for b in resp.brokers}


def listed_isr(bootstrap: str, topic: str, partition: int = 0) -> list[int]:
    """The ISR of one partition as one broker's Metadata lists it. Its leader answers produce
    requests from this view, which can trail the controller's (`kshim ctl status`) for as long as
    the image holding a change takes to reach it."""
    with RawConnection(bootstrap) as conn:
        resp = conn.request(METADATA, 12, {"topics": [{"topic_id": None, "name": topic}],
                                            "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
    parts = [p for t in resp.topics for p in t.partitions if p.partition_index == partition]
    return sorted(parts[0].isr_nodes) if parts else []


# ---------------------------------------------------------------- what a kafka-python user would see
def list_offsets_latest(bootstrap: str, topic: str, isolation_level: int, partition: int = 0) -> int:
    """ListOffsets latest under one isolation level: the offset that level reads up to (the last
    stable offset for read_committed)."""
    with RawConnection(bootstrap) as conn:
        response = conn.request(LIST_OFFSETS, 5, {
            "replica_id": -1, "isolation_level": isolation_level,
            "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1,
                                                       "current_leader_epoch": -1}]}]})
    p = response.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def consumer(bootstrap: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", request_timeout_ms=10000)


def offsets(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(earliest, latest) offsets of a partition, as ListOffsets reports them."""
    tp = TopicPartition(topic, partition)
    c = consumer(bootstrap)
    try:
        return c.beginning_offsets([tp])[tp], c.end_offsets([tp])[tp]
    finally:
        c.close()


def consume_all(bootstrap: str, topic: str, partition: int = 0, timeout: float = 20.0) -> list:
    """Every record from the earliest offset up to the current end offset, as kafka-python
    ConsumerRecords in offset order; fails if the end is not reached by the deadline."""
    tp = TopicPartition(topic, partition)
    c = consumer(bootstrap)
    try:
        end = c.end_offsets([tp])[tp]
        c.assign([tp])
        c.seek_to_beginning(tp)
        out: list = []
        deadline = time.monotonic() + timeout
        while c.position(tp) < end:
            if time.monotonic() > deadline:
                raise AssertionError(f"consumed up to {c.position(tp)} of {topic}-{partition}, end is {end}")
            for records in c.poll(timeout_ms=500).values():
                out.extend(records)
        return [r for r in out if r.offset < end]
    finally:
        c.close()


def produce_and_consume(bootstrap: str, topic: str, value: bytes = b"still-alive") -> None:
    """A kafka-python producer's acks=1 send lands and a consumer reads it back: the broker serves."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, request_timeout_ms=10000)
    try:
        meta = p.send(topic, key=b"k", value=value, partition=0).get(timeout=15)
    finally:
        p.close()
    got = [(r.offset, r.value) for r in consume_all(bootstrap, topic, 0)]
    assert (meta.offset, value) in got, f"record at {meta.offset} not read back: {got[-5:]}"


# ---------------------------------------------------------------- hand-made batches (bad on purpose)
def rebuild_batch(batch: bytes, *, attributes: int | None = None, records_count: int | None = None,
                  last_offset_delta: int | None = None, records_section: bytes | None = None) -> bytes:
    """`batch` (RecordBatch v2) with fields or its records section replaced, then its length and
    CRC32C set so that only the replaced part is wrong. Built with struct and crc32c directly."""
    head = bytearray(batch[:61])
    body = batch[61:] if records_section is None else records_section
    if attributes is not None:
        struct.pack_into(">h", head, 21, attributes)
    if last_offset_delta is not None:
        struct.pack_into(">i", head, 23, last_offset_delta)
    if records_count is not None:
        struct.pack_into(">i", head, 57, records_count)
    struct.pack_into(">i", head, 8, len(head) + len(body) - 12)  # batch length: after base offset and itself
    out = bytearray(head + body)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)
