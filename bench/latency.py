#!/usr/bin/env python3
"""Latency at fixed rates, kshim and a peer side by side: p50/p99 produce-to-ack and end-to-end.

    python bench/latency.py --peer-mock [--rates 2000,20000] [--seconds 5] [--repeat 3] [--json F]
    python bench/latency.py --peer HOST:PORT            # any other broker

For each target (kshim started here, `--ephemeral` for its log on tmpfs; the peer) and rate, on a
fresh topic of `--partitions` partitions: a confluent-kafka producer (acks=1 unless `--acks`,
linger.ms 5 unless `--linger-ms`: the project's method) sends `--value-size`-byte records
at the rate for `--seconds`, each stamped with its send time, while a consumer (assigned at the
topic's end, fetch.wait.max.ms 5, read_uncommitted) receives them in a thread. Produce-to-ack is
the client's Message.latency() in the delivery callback; end-to-end is the consumer's receive time
minus the stamp (one process, one clock). Best of `--repeat` by p99, targets alternating. A
markdown table and, with --json, every run. Exit 1 if a run loses records or misses its deadline.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import PhaseError, log, parse_bootstrap, start_kshim, start_mock  # noqa: E402

STAMP = struct.Struct(">d")  # perf_counter at send, the first 8 bytes of each value


def percentile(sorted_vals: list[float], q: float) -> float:
    return sorted_vals[min(len(sorted_vals) - 1, int(len(sorted_vals) * q))]


def one_run(bootstrap: str, topic: str, rate: int, args, create: bool) -> dict:
    if create:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)], request_timeout=30)[topic].result(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency-" + uuid.uuid4().hex[:8],
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5, "fetch.min.bytes": 1,
                         "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + args.timeout
    meta = consumer.list_topics(topic, timeout=30)
    parts = sorted(meta.topics[topic].partitions)
    if len(parts) != args.partitions:
        raise PhaseError(f"{topic}: {len(parts)} partitions, not {args.partitions}")
    consumer.assign([TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1])
                     for p in parts])
    total = int(rate * args.seconds)
    e2e: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set() and len(e2e) < total and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.05):
                if msg.error() is None:
                    e2e.append(time.perf_counter() - STAMP.unpack_from(msg.value())[0])

    reader = threading.Thread(target=consume, name="latency-consumer")
    reader.start()
    acked: list[float] = []
    failed: list = []

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append(msg.latency())
        else:
            failed.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": args.acks, "linger.ms": args.linger_ms,
                         "enable.idempotence": False, "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=30)
    time.sleep(0.5)  # the consumer's first fetch is out: records are not waited on before it (bounded)
    pad = os.urandom(max(0, args.value_size - STAMP.size))
    start = time.perf_counter()
    try:
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                producer.poll(delay)  # pace the sends, serving callbacks meanwhile
            producer.produce(topic, STAMP.pack(time.perf_counter()) + pad, partition=i % args.partitions)
            if time.monotonic() > deadline:
                raise PhaseError(f"{rate}/s: deadline hit after {i} of {total} records")
        producer.flush(max(1.0, deadline - time.monotonic()))
        reader.join(max(1.0, deadline - time.monotonic()))
    finally:
        stop.set()
        reader.join(10)
        consumer.close()
    sent_s = time.perf_counter() - start
    if failed or len(acked) < total or len(e2e) < total:
        raise PhaseError(f"{rate}/s: {len(acked)} of {total} acknowledged, {len(e2e)} received ({failed[:1]})")
    acked.sort()
    e2e.sort()
    return {"rate": rate, "records": total, "achieved_rate": total / sent_s,
            "ack_p50_ms": percentile(acked, 0.5) * 1e3, "ack_p99_ms": percentile(acked, 0.99) * 1e3,
            "e2e_p50_ms": percentile(e2e, 0.5) * 1e3, "e2e_p99_ms": percentile(e2e, 0.99) * 1e3}


def markdown(results: dict) -> str:
    """results: {rate: {target: best run}}; ratios are kshim / peer (lower is better)."""
    lines = ["| records/s | target | ack p50 ms | ack p99 ms | end-to-end p50 ms | end-to-end p99 ms |",
             "|---:|---|---:|---:|---:|---:|"]
    keys = ("ack_p50_ms", "ack_p99_ms", "e2e_p50_ms", "e2e_p99_ms")
    for rate, by_target in results.items():
        for name, best in by_target.items():
            lines.append(f"| {rate} | {name} | " + " | ".join(f"{best[k]:.2f}" for k in keys) + " |")
        if "kshim" in by_target and "peer" in by_target:
            k, p = by_target["kshim"], by_target["peer"]
            lines.append(f"| {rate} | ratio | " + " | ".join(f"{k[key] / p[key]:.2f}x" for key in keys) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    peer = ap.add_mutually_exclusive_group()
    peer.add_argument("--peer", metavar="HOST:PORT", help="a running peer broker (its topics created here)")
    peer.add_argument("--peer-mock", action="store_true", help="start librdkafka's mock broker as the peer")
    ap.add_argument("--kshim", metavar="HOST:PORT", help="a running kshim instead of starting one")
    ap.add_argument("--no-kshim", action="store_true")
    ap.add_argument("--ephemeral", action="store_true", help="the started kshim keeps its log on tmpfs")
    ap.add_argument("--kshim-arg", action="append", default=[])
    ap.add_argument("--rates", default="2000,20000", help="records/s, comma-separated (default 2000,20000)")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per run (default 5)")
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--linger-ms", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0, help="deadline per run, seconds")
    ap.add_argument("--startup-timeout", type=float, default=30.0)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    if args.value_size < STAMP.size:
        ap.error(f"--value-size must be at least {STAMP.size} (the send stamp)")
    rates = [int(r) for r in args.rates.split(",") if r]
    names = [f"lat-{rate}-{i}" for rate in rates for i in range(args.repeat)]
    work = tempfile.mkdtemp(prefix="kshim-latency-")
    started = []
    targets: list[tuple[str, str, bool]] = []  # (name, bootstrap, create topics)
    try:
        if not args.no_kshim:
            if args.kshim:
                targets.append(("kshim", parse_bootstrap(args.kshim, "--kshim"), True))
            else:
                proc, bootstrap = start_kshim(args, work)
                started.append(proc)
                targets.append(("kshim", bootstrap, True))
        if args.peer_mock:
            proc, bootstrap = start_mock(args, work, names)  # the mock has no CreateTopics
            started.append(proc)
            targets.append(("peer", bootstrap, False))
        elif args.peer:
            targets.append(("peer", parse_bootstrap(args.peer, "--peer"), True))
        runs: dict = {rate: {name: [] for name, _, _ in targets} for rate in rates}
        failed = False
        for rate in rates:
            for i in range(args.repeat):
                for name, bootstrap, create in targets:  # alternating: the same load for each
                    topic = f"lat-{rate}-{i}" if not create else f"lat-{rate}-{i}-{uuid.uuid4().hex[:6]}"
                    try:
                        run = one_run(bootstrap, topic, rate, args, create)
                    except PhaseError as e:
                        log(f"{name}: {e}")
                        failed = True
                        continue
                    log(f"{name} at {rate}/s: ack p50/p99 {run['ack_p50_ms']:.2f}/{run['ack_p99_ms']:.2f} ms, "
                        f"end-to-end {run['e2e_p50_ms']:.2f}/{run['e2e_p99_ms']:.2f} ms")
                    runs[rate][name].append(run)
        best = {rate: {name: min(rs, key=lambda r: r["e2e_p99_ms"]) for name, rs in by.items() if rs}
                for rate, by in runs.items()}
        print(f"latency at fixed rates ({args.value_size} B, {args.partitions} partitions, acks={args.acks}, "
              f"linger.ms {args.linger_ms:g}, "
              f"{args.seconds:g} s per run, best of {args.repeat} by end-to-end p99; ratio kshim/peer, lower is better)")
        print(markdown(best))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"runs": {str(k): v for k, v in runs.items()},
                           "best": {str(k): v for k, v in best.items()}}, f, indent=2, sort_keys=True)
        return 1 if failed else 0
    finally:
        for proc in started:
            proc.stop()


if __name__ == "__main__":
    sys.exit(main())
