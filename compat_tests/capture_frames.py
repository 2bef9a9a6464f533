"""Record real client requests as fuzzing seeds (tests/fuzz_seeds.bin).

The frame fuzzer (compat_tests/test_fuzz_frames.py) mutates requests that real clients sent, of every
API they use, so that mutations reach every handler's decoding and checks, not only the few requests
built by hand. This script starts a broker whose connection core records every request frame it
parses (patched here, in the broker process this script starts: the product has no capture hook),
drives confluent-kafka and kafka-python through admin calls, idempotent and transactional produce,
classic and KIP-848 groups, offsets and deletions, then keeps a few frames per (api key, version).

    python -m compat_tests.capture_frames            # rewrites tests/fuzz_seeds.bin

The file is a sequence of frames, each as sent on the wire (int32 size, then the request).
"""
from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

from tests.fuzz_seeds import SEEDS_FILE, load_seeds

PER_VERSION = 2  # frames kept per (api key, version)
MAX_FRAME = 16 * 1024  # small seeds mutate into more interesting shapes per byte


def _broker_main(record_to: str, argv: list[str]) -> int:
    """Runs in the broker process: every frame the connection core parses is appended to a file."""
    from kshim import cli
    from kshim.net.protocol import ConnectionCore

    sink = open(record_to, "ab", buffering=0)
    parse = ConnectionCore._parse

    def recording(self: ConnectionCore, frame: bytearray, size: int):  # type: ignore[no-untyped-def]
        sink.write(struct.pack(">i", size) + bytes(frame[:size]))
        return parse(self, frame, size)

    ConnectionCore._parse = recording  # type: ignore[method-assign]
    return cli.main(argv)


def _start_broker(data_dir: Path, record_to: Path) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "compat_tests.capture_frames", "--broker", str(record_to), "--",
           "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(data_dir), "--partitions", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    ready: list[str] = []
    event = threading.Event()

    def pump() -> None:
        assert proc.stdout
        for line in proc.stdout:
            if line.startswith("kshim ready:"):
                ready.append(line.split("bootstrap", 1)[1].split()[0])
                event.set()
        event.set()

    threading.Thread(target=pump, daemon=True).start()
    if not event.wait(30) or not ready:
        proc.kill()
        raise RuntimeError("the recording broker did not start")
    return proc, ready[0]


def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                       NewTopic, OffsetSpec)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic, compacted = f"cap-{uuid.uuid4().hex[:6]}", f"capc-{uuid.uuid4().hex[:6]}"
    for f in admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3600000"}),
                                  NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"})]).values():
        f.result(15)
    admin.create_topics([NewTopic(topic + "-v", 1, 1)], validate_only=True)[topic + "-v"].result(15)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin.describe_configs([res])[res].result(15)
    admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])])[res].result(15)
    broker_res = ConfigResource(ConfigResource.Type.BROKER, "0")
    admin.describe_configs([broker_res])[broker_res].result(15)
    admin.describe_cluster().result(15)

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "compression.type": "lz4"})
    for i in range(50):
        p.produce(topic, key=str(i % 7).encode(), value=b"v" * (i % 40), headers={"h": b"1"})
        p.produce(compacted, key=str(i % 5).encode(), value=None if i % 11 == 0 else b"x")
    p.flush(15)

    tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"cap-tx-{uuid.uuid4().hex[:6]}"})
    tp.init_transactions(15)
    group = f"cap-g-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([topic])
    got, deadline = 0, time.monotonic() + 20
    while got < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    c.commit(asynchronous=False)
    tp.begin_transaction()
    tp.produce(topic, key=b"t", value=b"in a transaction")
    tp.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 15)
    tp.commit_transaction(15)
    tp.begin_transaction()
    tp.produce(topic, key=b"t", value=b"aborted")
    tp.abort_transaction(15)
    c.committed([TopicPartition(topic, 0)], 10)
    c.get_watermark_offsets(TopicPartition(topic, 0), 10)
    c.offsets_for_times([TopicPartition(topic, 0, int(time.time() * 1000) - 60_000)], 10)
    c.close()

    kip848 = Consumer({"bootstrap.servers": bootstrap, "group.id": group + "-848", "group.protocol": "consumer",
                       "auto.offset.reset": "earliest"})
    kip848.subscribe([topic])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        m = kip848.poll(0.5)
        if m is not None and m.error() is None:
            break
    kip848.close()

    admin.list_consumer_groups().result(15)
    admin.describe_consumer_groups([group]).get(group).result(15)
    admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest(),
                        TopicPartition(topic, 1): OffsetSpec.earliest()}).popitem()
    admin.delete_records([TopicPartition(topic, 1, 1)])
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(15)
    admin.delete_consumer_groups([group + "-848"])
    for f in admin.delete_topics([compacted]).values():
        f.result(15)


def _attempt(what: str, fn, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
    """Best effort: the frame was sent whatever the answer; a client-side failure is only reported."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any client error still leaves the request recorded
        print(f"  ({what}: {type(e).__name__}: {e})")


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    topic = f"capk-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.describe_topics([topic])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
    for i in range(20):
        producer.send(topic, key=str(i).encode(), value=b"kafka-python %d" % i)
    producer.flush(15)
    producer.close()
    group = f"capk-g-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000)
    for _ in consumer:
        pass
    consumer.commit()
    consumer.offsets_for_times({TopicPartition(topic, 0): 0})
    consumer.close()
    _attempt("list_groups", admin.list_groups)
    _attempt("describe_groups", admin.describe_groups, [group])
    _attempt("list_group_offsets", admin.list_group_offsets, group)
    _attempt("delete_group_offsets", admin.delete_group_offsets, group, [TopicPartition(topic, 1)])
    _attempt("describe_producers", admin.describe_producers, [TopicPartition(topic, 0)])
    _attempt("list_transactions", admin.list_transactions)
    _attempt("describe_transactions", admin.describe_transactions, ["no-such-txn"])
    _attempt("describe_cluster", admin.describe_cluster)
    _attempt("delete_records", admin.delete_records, {TopicPartition(topic, 0): 1})
    _attempt("delete_groups", admin.delete_groups, [group])
    admin.delete_topics([topic])
    admin.close()


def capture(out: Path) -> dict[tuple[int, int], int]:
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "frames.bin"
        proc, bootstrap = _start_broker(Path(tmp) / "data", record)
        try:
            _confluent(bootstrap)
            _kafka_python(bootstrap)
        finally:
            proc.terminate()
            proc.wait(30)
        kept: dict[tuple[int, int], list[bytes]] = defaultdict(list)
        for frame in load_seeds(record):
            if len(frame) > MAX_FRAME:
                continue
            api_key, version = struct.unpack_from(">hh", frame, 4)
            bucket = kept[(api_key, version)]
            if len(bucket) < PER_VERSION and frame not in bucket:
                bucket.append(frame)
    out.write_bytes(b"".join(f for key in sorted(kept) for f in kept[key]))
    return {key: len(v) for key, v in sorted(kept.items())}


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--broker":
        return _broker_main(sys.argv[2], sys.argv[4:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SEEDS_FILE)
    args = parser.parse_args()
    kept = capture(args.out)
    print(f"{sum(kept.values())} frames of {len({k for k, _ in kept})} APIs written to {args.out}: "
          + ", ".join(f"{k}v{v}" for k, v in kept))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
