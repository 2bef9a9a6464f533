#!/usr/bin/env python3
"""A broker that only acknowledges: the benchmark client's own ceiling (issue 18: "when both sides
are limited by the client, say so and show it: the client's own ceiling against a broker that
only acknowledges").

It speaks just enough of the Kafka protocol for bench/throughput.py's confluent-kafka producer and
consumer: ApiVersions, Metadata (every topic asked for exists, with --partitions partitions, led by
this one node), FindCoordinator (itself), Produce, ListOffsets and Fetch. A Produce is answered at
once with the next offsets and nothing is checked (no CRC, no sequence) or written anywhere. To let
the consumer be measured too, the produced batches are kept as received (base offsets patched) in a
ring of --keep-mb whose pages are all touched at start, so that keeping costs a copy and no new
memory, and Fetch serves them from there (overwritten batches are gone: the fetch returns nothing);
a fetch at the end returns nothing after at most min(max_wait_ms, 100 ms).

One thread per connection with blocking sockets (recv and send release the GIL). Listens on
127.0.0.1 only; prints `BOOTSTRAP=127.0.0.1:PORT` when ready; SIGTERM/SIGINT end it. It is not a
broker to use for anything else: it loses everything and answers requests it does not know by
closing the connection.

    python bench/null_broker.py [--port 0] [--partitions 4] [--keep-mb 1024]
"""
from __future__ import annotations

import argparse
import bisect
import os
import signal
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from wire import codec  # noqa: E402  (the project's own codecs)
from wire.headers import decode_request_header, encode_response_header  # noqa: E402

# the versions offered: high enough for librdkafka 2.x's fast paths, below topic ids (Fetch v13,
# Metadata v10) so that names are all this broker needs
VERSIONS = {0: (3, 9), 1: (4, 12), 2: (1, 7), 3: (1, 9), 10: (0, 3), 18: (0, 3)}
_SIZE = struct.Struct(">i")
_BASE = struct.Struct(">q")
_BATCH_LEN = struct.Struct(">i")
_LAST_DELTA = struct.Struct(">i")
WAIT_CAP_S = 0.1


class Ring:
    """Where produced batches are kept: one buffer of --keep-mb, every page touched at start (a
    broker that only acknowledges must not pay for new memory per byte; on a VM that hands free
    memory back to its host that costs more than the copy), overwritten oldest first."""

    def __init__(self, size: int) -> None:
        self.buf = bytearray(size)
        if size:
            self.buf[::4096] = b"\x01" * len(range(0, size, 4096))  # fault every page in now
        self.size = size
        self.cursor = 0  # bytes ever written (a position in the ring is cursor % size)
        self.lock = threading.Lock()

    def put(self, data: memoryview) -> int:
        """Copy `data` in; return its absolute position (-1 when it cannot be kept)."""
        n = len(data)
        if n > self.size:
            return -1
        with self.lock:
            at = self.cursor % self.size
            if at + n > self.size:  # no wrapping inside a batch: skip the ring's tail
                self.cursor += self.size - at
                at = 0
            pos = self.cursor
            self.cursor += n
        self.buf[at:at + n] = data
        return pos

    def get(self, pos: int, n: int) -> memoryview | None:
        """The bytes kept at absolute `pos`, or None once they were overwritten."""
        if pos < 0 or self.cursor > pos + self.size:  # written over since
            return None
        at = pos % self.size
        return memoryview(self.buf)[at:at + n]


class PartitionLog:
    """One partition's batches as received: their base offsets and where the ring keeps them."""

    __slots__ = ("bases", "positions", "sizes", "end")

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.positions: list[int] = []
        self.sizes: list[int] = []
        self.end = 0

    def append(self, records: bytes | memoryview, ring: Ring) -> int:
        """Give the batches in `records` their offsets (and keep them); return the first one."""
        first = self.end
        view = memoryview(records)
        pos = 0
        while pos + 61 <= len(view):  # bounded: every batch moves pos forward by at least 61 bytes
            length = _BATCH_LEN.unpack_from(view, pos + 8)[0]
            size = 12 + length
            if length < 49 or pos + size > len(view):
                break
            count = _LAST_DELTA.unpack_from(view, pos + 23)[0] + 1
            if ring.size:
                at = ring.put(view[pos:pos + size])
                if at >= 0:
                    _BASE.pack_into(ring.buf, at % ring.size, self.end)
                    self.bases.append(self.end)
                    self.positions.append(at)
                    self.sizes.append(size)
            self.end += max(count, 1)
            pos += size
        return first

    def read(self, offset: int, max_bytes: int, ring: Ring) -> bytes:
        """The kept batches from the one holding `offset`: at least one, about `max_bytes` in all."""
        i = bisect.bisect_right(self.bases, offset) - 1
        if i < 0 or offset >= self.end:
            return b""
        parts: list[memoryview] = []
        total = 0
        while i < len(self.bases) and (not parts or total + self.sizes[i] <= max_bytes):  # bounded: batch count
            view = ring.get(self.positions[i], self.sizes[i])
            if view is None:
                break
            parts.append(view)
            total += self.sizes[i]
            i += 1
        return b"".join(parts)


class NullBroker:
    def __init__(self, host: str, port: int, partitions: int, keep_bytes: int) -> None:
        self.listener = socket.create_server((host, port))
        self.host, self.port = self.listener.getsockname()[:2]
        self.partitions = partitions
        self.ring = Ring(keep_bytes)
        self.topics: dict[str, list[PartitionLog]] = {}
        self.lock = threading.Lock()

    def topic(self, name: str) -> list[PartitionLog]:
        with self.lock:
            logs = self.topics.get(name)
            if logs is None:
                logs = self.topics[name] = [PartitionLog() for _ in range(self.partitions)]
            return logs

    # ------------------------------------------------------------------ requests

    def answer(self, api_key: int, version: int, req) -> dict | None:
        if api_key == 18:
            return {"error_code": 0, "throttle_time_ms": 0,
                    "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                                 for k, (lo, hi) in sorted(VERSIONS.items())]}
        if api_key == 3:
            names = [t["name"] for t in req["topics"]] if req["topics"] is not None else list(self.topics)
            return {"throttle_time_ms": 0, "cluster_id": "null-broker", "controller_id": 0,
                    "brokers": [{"node_id": 0, "host": self.host, "port": self.port, "rack": None}],
                    "topics": [{"error_code": 0, "name": n, "is_internal": False,
                                "partitions": [{"error_code": 0, "partition_index": i, "leader_id": 0,
                                                "leader_epoch": 0, "replica_nodes": [0], "isr_nodes": [0],
                                                "offline_replicas": []} for i in range(len(self.topic(n)))]}
                               for n in names]}
        if api_key == 10:
            return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "node_id": 0,
                    "host": self.host, "port": self.port}
        if api_key == 0:
            out = []
            for t in req["topic_data"]:
                logs = self.topic(t["name"])
                parts = []
                for p in t["partition_data"]:
                    i = p["index"]
                    if 0 <= i < len(logs) and p["records"] is not None:
                        parts.append({"index": i, "error_code": 0, "base_offset": logs[i].append(p["records"], self.ring),
                                      "log_append_time_ms": -1, "log_start_offset": 0})
                    else:
                        parts.append({"index": i, "error_code": 3, "base_offset": -1,  # UNKNOWN_TOPIC_OR_PARTITION
                                      "log_append_time_ms": -1, "log_start_offset": -1})
                out.append({"name": t["name"], "partition_responses": parts})
            return None if req["acks"] == 0 else {"responses": out, "throttle_time_ms": 0}
        if api_key == 2:
            out = []
            for t in req["topics"]:
                logs = self.topic(t["name"])
                parts = []
                for p in t["partitions"]:
                    i = p["partition_index"]
                    end = logs[i].end if 0 <= i < len(logs) else -1
                    parts.append({"partition_index": i, "error_code": 0 if end >= 0 else 3, "timestamp": -1,
                                  "offset": 0 if p["timestamp"] == -2 else end, "leader_epoch": 0})
                out.append({"name": t["name"], "partitions": parts})
            return {"throttle_time_ms": 0, "topics": out}
        if api_key == 1:
            deadline = time.monotonic() + min(req["max_wait_ms"], WAIT_CAP_S * 1000) / 1000
            while True:  # bounded: ends at the deadline at the latest
                out, total = self._fetch(req)
                if total > 0 or time.monotonic() >= deadline:
                    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": out}
                time.sleep(0.001)
        return None

    def _fetch(self, req) -> tuple[list, int]:
        out, total = [], 0
        for t in req["topics"]:
            logs = self.topic(t["topic"])
            parts = []
            for p in t["partitions"]:
                i = p["partition"]
                if not 0 <= i < len(logs):
                    parts.append({"partition_index": i, "error_code": 3, "high_watermark": -1,
                                  "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                                  "preferred_read_replica": -1, "records": b""})
                    continue
                log = logs[i]
                records = log.read(p["fetch_offset"], p["partition_max_bytes"], self.ring) if total < req["max_bytes"] else b""
                total += len(records)
                parts.append({"partition_index": i, "error_code": 0, "high_watermark": log.end,
                              "last_stable_offset": log.end, "log_start_offset": 0, "aborted_transactions": None,
                              "preferred_read_replica": -1, "records": records})
            out.append({"topic": t["topic"], "partitions": parts})
        return out, total

    # ------------------------------------------------------------------ connections

    def serve_connection(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(1 << 20)
        head = bytearray(4)
        try:
            while True:  # one request per turn; ends when the client closes
                if not _recv_exactly(conn, memoryview(head)):
                    return
                size = _SIZE.unpack(head)[0]
                if size < 10 or size > 128 << 20:
                    return
                if size > len(buf):
                    buf = bytearray(size)
                frame = memoryview(buf)[:size]
                if not _recv_exactly(conn, frame):
                    return
                hdr = decode_request_header(frame)
                if hdr.api_key not in VERSIONS:
                    return
                req = codec.decode(hdr.api_key, hdr.api_version, "request", frame[hdr.header_size:])
                resp = self.answer(hdr.api_key, hdr.api_version, req)
                if resp is None:
                    if hdr.api_key == 0:
                        continue  # acks=0: no answer
                    return
                body = encode_response_header(hdr.api_key, hdr.api_version, hdr.correlation_id) + \
                    codec.encode(hdr.api_key, hdr.api_version, "response", resp)
                conn.sendall(_SIZE.pack(len(body)) + body)
        except (OSError, ValueError, KeyError, codec.UnsupportedVersion):
            return
        finally:
            conn.close()

    def serve_forever(self) -> None:
        while True:  # ends with the process (SIGTERM)
            conn, _ = self.listener.accept()
            threading.Thread(target=self.serve_connection, args=(conn,), daemon=True).start()


def _recv_exactly(conn: socket.socket, view: memoryview) -> bool:
    got = 0
    while got < len(view):  # bounded: every turn receives at least a byte or returns
        n = conn.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--partitions", type=int, default=4, help="partitions of every topic (default 4)")
    ap.add_argument("--keep-mb", type=int, default=512,
                    help="ring of produced batches kept for fetching, MB, touched at start (default 512; 0 keeps none)")
    args = ap.parse_args(argv)
    broker = NullBroker("127.0.0.1", args.port, args.partitions, args.keep_mb * 1_000_000)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"BOOTSTRAP={broker.host}:{broker.port}", flush=True)
    try:
        broker.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
