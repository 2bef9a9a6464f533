#!/usr/bin/env python3
"""Share-group consumption (KIP-932) against a classic consumer group on the same topic, in ONE run.

One kshim (started here, `python -m kshim serve`, stopped by PID; or --kshim HOST:PORT), one topic
of --partitions partitions holding --records records of --value-size bytes, then for --repeat
rounds, each on a fresh group:

  classic   --members confluent-kafka Consumers in one classic consumer group (subscribe,
            auto.offset.reset=earliest, auto commit), polling until every record was read.
  share     --members confluent-kafka ShareConsumers in one share group (implicit
            acknowledgement: a poll acknowledges the records of the one before, each
            acknowledgement a durable write to __share_group_state before its answer), the group
            set to share.auto.offset.reset=earliest with IncrementalAlterConfigs, polling until
            every record was read.
  share-raw --members share members speaking ShareFetch v1 to the leader with kshim's wire codec
            (max_records --max-records, one request in flight each, acknowledging a fetch's
            records with the next fetch): the broker's side without the client's.

Each round produces --records records to a new topic, then reads them in each mode (share-raw's
members fetch once first: that group starts at the latest offset). Every mode counts the records
it got: a total other than --records is an error (exit 1); records/s is timed from the first
record to the last.

    python bench/share_groups.py --records 50000 --members 1 --repeat 3 [--json out.json]
    python bench/share_groups.py --state-cpu --records 200000

--state-cpu measures no broker: it times (CPU) the partition leader's bookkeeping in-process
(kshim's SharePartitionState: acquire a fetch's records, accept them, build the persisted
batches), fetches of --max-records records in batches of 10, and prints microseconds per record.

Prints a markdown table of records/s per mode (best of --repeat) and each mode's ratio to classic.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import PhaseError, log, make_values, start_kshim  # noqa: E402
from wire import codec  # noqa: E402
from wire.headers import decode_response_header, encode_request_header, frame  # noqa: E402

METADATA, SHARE_FETCH = 3, 78
MODES = ("classic", "share", "share-raw")


class Raw:
    """One Kafka connection (the request/answer loop of a share member)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.cid = 0

    def request(self, key: int, version: int, body: dict):
        self.cid += 1
        self.sock.sendall(frame(encode_request_header(key, version, self.cid, "kshim-bench-share")
                                + codec.encode(key, version, "request", body)))
        size = struct.unpack(">i", self._exact(4))[0]
        payload = self._exact(size)
        _cid, header = decode_response_header(key, version, payload)
        return codec.decode(key, version, "response", payload[header:])

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)


class RawShareMember:
    def __init__(self, bootstrap: str, group: str, topic: str, max_records: int) -> None:
        meta = Raw(bootstrap).request(METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                                     "allow_auto_topic_creation": False,
                                                     "include_topic_authorized_operations": False})
        t = meta.topics[0]
        nodes = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}
        self.topic_id = t.topic_id
        self.partitions = [p.partition_index for p in t.partitions]
        self.conn = Raw(nodes[t.partitions[0].leader_id])  # a single broker: every partition's leader
        self.group, self.member, self.epoch, self.max_records = group, str(uuid.uuid4()), 0, max_records
        self.pending: dict[int, list[tuple[int, int]]] = {}

    def fetch(self, wait_ms: int) -> int:
        """One ShareFetch acknowledging the last one's records; how many records it acquired."""
        resp = self.conn.request(SHARE_FETCH, 1, {
            "group_id": self.group, "member_id": self.member, "share_session_epoch": self.epoch,
            "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 8 << 20, "max_records": self.max_records,
            "batch_size": self.max_records,
            "topics": [{"topic_id": self.topic_id, "partitions": [
                {"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": a, "last_offset": b, "acknowledge_types": [1]}
                    for a, b in (self.pending.get(p, []) if self.epoch else [])]} for p in self.partitions]}],
            "forgotten_topics_data": []})
        if resp.error_code:
            raise PhaseError(f"ShareFetch error {resp.error_code}")
        self.epoch += 1
        self.pending = {}
        got = 0
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code or p.acknowledge_error_code:
                    raise PhaseError(f"partition {p.partition_index}: error {p.error_code}/{p.acknowledge_error_code}")
                for a in p.acquired_records:
                    self.pending.setdefault(p.partition_index, []).append((a.first_offset, a.last_offset))
                    got += a.last_offset - a.first_offset + 1
        return got


def produce(bootstrap: str, topic: str, count: int, values) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 3})
    for i in range(count):
        producer.produce(topic, values[i % len(values)])
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise PhaseError("records left unsent")


def classic_round(bootstrap: str, topic: str, records: int, members: int, deadline_s: float) -> float:
    group = f"bench-classic-{uuid.uuid4().hex[:8]}"
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                           "log_level": 3}) for _ in range(members)]
    return read_all("classic", consumers, topic, records, deadline_s, lambda c: c.consume(1000, 0.05))


def share_round(bootstrap: str, topic: str, records: int, members: int, deadline_s: float) -> float:
    group = f"bench-share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(60)
    consumers = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
                 for _ in range(members)]
    return read_all("share", consumers, topic, records, deadline_s, lambda c: c.poll(0.05))


def read_all(mode: str, consumers: list, topic: str, records: int, deadline_s: float, take) -> float:
    """Subscribe `consumers` to `topic` and read `records` among them, each asked in turn with
    `take(consumer)`; records/s from the first record read. Closing a share consumer acknowledges
    its last records."""
    for c in consumers:
        c.subscribe([topic])
    got, start, first = 0, time.monotonic(), None
    deadline = start + deadline_s
    while got < records:
        if time.monotonic() > deadline:
            raise PhaseError(f"{mode}: read {got} of {records}")
        for c in consumers:
            for m in take(c):
                if m.error() is None:
                    first = first or time.monotonic()
                    got += 1
    end = time.monotonic()
    for c in consumers:
        c.close()
    if got != records:
        raise PhaseError(f"{mode}: read {got}, produced {records}")
    return records / (end - (first or start))


def raw_share_round(bootstrap: str, topic: str, records: int, members: int, args, values) -> float:
    group = f"bench-share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(60)
    readers = [RawShareMember(bootstrap, group, topic, args.max_records) for _ in range(members)]
    for r in readers:
        r.fetch(0)  # the share partitions start here, at the topic's end
    produce(bootstrap, topic, records, values)
    got, start, first = 0, time.monotonic(), None
    deadline = start + args.deadline
    while got < records:
        if time.monotonic() > deadline:
            raise PhaseError(f"share: read {got} of {records}")
        for r in readers:
            n = r.fetch(100)
            if n:
                first = first or time.monotonic()
                got += n
    end = time.monotonic()
    for r in readers:
        r.fetch(0)  # the last acknowledgements
    if got != records:
        raise PhaseError(f"share: read {got}, produced {records}")
    return records / (end - (first or start))


def state_cpu(records: int, max_records: int) -> float:
    """CPU microseconds per record of a share partition's acquire + accept + persisted form."""
    from kshim.coordinator.share_partitions.state import AckBatch, LogBatch, SharePartitionState, ShareLimits
    state, limits = SharePartitionState(0), ShareLimits()
    batches = [LogBatch(o, o + 9, True) for o in range(0, records, 10)]
    done, i = 0, 0
    start = time.process_time()
    while done < records:
        offset = state.next_fetch_offset()
        while i < len(batches) and batches[i].last_offset < offset:
            i += 1
        taken = state.acquire("m", offset, batches[i:i + max_records // 10 + 1], max_records, limits, 0)
        code, _undo = state.acknowledge("m", [AckBatch(a.first_offset, a.last_offset, (1,)) for a in taken],
                                        limits, 0)
        assert not code and taken
        state.state_batches()
        done += sum(a.last_offset - a.first_offset + 1 for a in taken)
    return (time.process_time() - start) / records * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kshim", help="HOST:PORT of a running kshim (else one is started here)")
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--members", type=int, default=1)
    ap.add_argument("--max-records", type=int, default=500, help="ShareFetch max_records (raw share client)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds per round")
    ap.add_argument("--startup-timeout", type=float, default=120.0)
    ap.add_argument("--kshim-arg", action="append", default=[])
    ap.add_argument("--json")
    ap.add_argument("--state-cpu", action="store_true", help="only time the share-partition bookkeeping in-process")
    args = ap.parse_args(argv)
    if args.state_cpu:
        us = min(state_cpu(args.records, args.max_records) for _ in range(max(args.repeat, 1)))
        print(f"share-partition bookkeeping: {us:.2f} us CPU per record (acquire + accept + persisted form, "
              f"{args.records} records, fetches of {args.max_records}, best of {args.repeat})")
        return 0
    args.ephemeral = False  # start_kshim (bench/throughput.py): a data dir in the work dir
    values = make_values(args.value_size)
    workdir = tempfile.mkdtemp(prefix="kshim-bench-share-")
    managed = None
    results: dict[str, list[float]] = {k: [] for k in MODES}
    try:
        if args.kshim:
            bootstrap = args.kshim
        else:
            managed, bootstrap = start_kshim(args, workdir)
        for rep in range(args.repeat):
            topic = f"bench-share-{rep}-{uuid.uuid4().hex[:6]}"
            rates = {"share-raw": raw_share_round(bootstrap, topic, args.records, args.members, args, values),
                     "share": share_round(bootstrap, topic, args.records, args.members, args.deadline),
                     "classic": classic_round(bootstrap, topic, args.records, args.members, args.deadline)}
            log(f"round {rep + 1}: " + ", ".join(f"{k} {v:,.0f} records/s" for k, v in rates.items()))
            for k, v in rates.items():
                results[k].append(v)
    except PhaseError as e:
        log(f"error: {e}")
        return 1
    finally:
        if managed is not None:
            managed.stop()
    best = {k: max(v) for k, v in results.items()}
    print(f"{args.records} records of {args.value_size} B, {args.partitions} partition(s), {args.members} member(s) "
          f"per group, best of {args.repeat}")
    print()
    print("| mode | records/s | / classic |")
    print("|---|---:|---:|")
    for k in MODES:
        print(f"| {k} | {best[k]:,.0f} | {best[k] / best['classic']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "best": best}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
