"""Produce and consume MB/s over TLS against plaintext, on one kshim with both listeners.

    python bench/tls.py [--mb 100] [--record-bytes 1024]

Starts `kshim serve --listeners PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0 --tls-dev` in a temporary
data directory, then per listener: a confluent-kafka producer sends --mb megabytes (acks=all,
no compression) to a topic of its own, and a consumer reads them all back from the start. Prints
one row per listener (markdown) for docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from compat_tests.kshim_process import KshimProcess  # noqa: E402


def produce(settings: dict, topic: str, count: int, value: bytes) -> float:
    p = Producer({**settings, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.kbytes": 1 << 20})
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(120) == 0
    return time.perf_counter() - started


def consume(settings: dict, topic: str, count: int) -> float:
    c = Consumer({**settings, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 10 << 20})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < count:
        got += sum(1 for m in c.consume(10_000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - started
    c.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--record-bytes", type=int, default=1024)
    args = parser.parse_args()
    count = args.mb * 1024 * 1024 // args.record_bytes
    value = os.urandom(args.record_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        proc = KshimProcess(Path(tmp) / "data", "--listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                            "--tls-dev").start()
        try:
            listeners = {line.split()[-1].split("://")[0]: line.split("://")[1]
                         for line in proc.output if line.startswith("kshim listener ")}
            ca = next(line.split(" in ", 1)[1] for line in proc.output if line.startswith("kshim tls-dev:"))
            print(f"| listener | produce MB/s | consume MB/s |  ({args.mb} MB of {args.record_bytes}-byte records)")
            print("|---|---:|---:|")
            for name in ("PLAINTEXT", "SSL"):
                settings: dict = {"bootstrap.servers": listeners[name], "security.protocol": name}
                if name == "SSL":
                    settings["ssl.ca.location"] = ca
                topic = f"bench-{name.lower()}"
                p_s = produce(settings, topic, count, value)
                c_s = consume(settings, topic, count)
                print(f"| {name} | {args.mb / p_s:.1f} | {args.mb / c_s:.1f} |", flush=True)
        finally:
            proc.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
