#!/usr/bin/env python3
"""acks=1 versus acks=all on a three-broker kshim cluster with replication factor 3.

    python bench/replication.py [--messages 100000] [--value-size 1024] [--repeat 3]

Starts `python -m kshim serve --brokers 3` itself (consecutive free ports on 127.0.0.1, a
temporary data dir), creates one topic per run with replication factor 3 (deleted once measured),
and produces with confluent-kafka using large batches (linger.ms 10, batch.size 1 MiB), first
acks=1 then acks=all, alternating over the repeats, in two phases:
- throughput: as fast as the client can send (saturation); MB/s, msgs/s and p50/p99 delivery
  latency, which at saturation is mostly time queued in the client;
- latency: at a fixed rate well below capacity (`--latency-rate`, as kafka-producer-perf-test's
  --throughput does), so p50/p99 measure the produce path itself, replication round trip included.
Reports the best of the repeats per mode and the acks=all / acks=1 ratios. Stops the cluster by
its PID at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import tempfile
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import (  # noqa: E402  (the sibling script's building blocks)
    ClientErrors, ManagedProcess, PhaseError, deliveries, drop_topic, log, make_values, produce_phase, producer_conf,
)

READY = re.compile(r"ready: bootstrap (\S+)")


def free_port_run(count: int, tries: int = 50) -> int:
    """A base port with `count` consecutive free ports after it (kshim node i listens on base+i)."""
    for _ in range(tries):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        ok = True
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise PhaseError(f"no run of {count} free ports found")


def create_topic(bootstrap: str, topic: str, partitions: int, deadline: float) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, partitions, 3)], request_timeout=30)[topic]
    future.result(timeout=max(1.0, deadline - time.monotonic()))


def run_mode(bootstrap: str, acks: str, args, values) -> dict:
    topic = f"bench-acks{acks}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, args.partitions, time.monotonic() + 60)
    state, on_delivery = deliveries()
    args.acks = acks
    conf = producer_conf(args, bootstrap, ClientErrors(f"acks={acks} producer"))
    conf["on_delivery"] = on_delivery
    producer = Producer(conf)
    producer.list_topics(topic, timeout=30)
    result = produce_phase(producer, topic, args, values, state)
    log("acks=%s: %.1f MB/s, %.0f msg/s, p50 %.2f ms, p99 %.2f ms"
        % (acks, result["mb_s"], result["msgs_s"], result["p50_ms"], result["p99_ms"]))
    drop_topic(bootstrap, topic)  # what the throughput phases left to write back slowed later runs
    return result


def latency_mode(bootstrap: str, acks: str, args, values) -> dict:
    """Produce `--latency-messages` at `--latency-rate` msgs/s; p50/p99 of delivery latency."""
    topic = f"bench-lat{acks}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, args.partitions, time.monotonic() + 60)
    latencies: list[float] = []
    failures: list = []

    def on_delivery(err, msg):
        if err is None:
            latencies.append(msg.latency())
        else:
            failures.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 1,
                         "enable.idempotence": False, "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=30)
    n, rate = args.latency_messages, args.latency_rate
    start = time.perf_counter()
    deadline = time.monotonic() + args.timeout
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            producer.poll(delay)  # pace the sends, serving callbacks meanwhile
        producer.produce(topic, values[i % len(values)])
        if time.monotonic() > deadline:
            raise PhaseError(f"latency phase: deadline hit after {i} of {n} messages")
    if producer.flush(max(1.0, deadline - time.monotonic())) or failures or len(latencies) < n:
        raise PhaseError(f"latency phase: {n - len(latencies)} of {n} not delivered ({failures[:1]})")
    latencies.sort()
    result = {"p50_ms": latencies[n // 2] * 1e3, "p99_ms": latencies[int(n * 0.99)] * 1e3}
    log("acks=%s at %d msg/s: p50 %.2f ms, p99 %.2f ms" % (acks, rate, result["p50_ms"], result["p99_ms"]))
    drop_topic(bootstrap, topic)  # what the throughput phases left to write back slowed later runs
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--value-size", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--linger-ms", type=float, default=10)
    p.add_argument("--batch-size", type=int, default=1 << 20)
    p.add_argument("--buffer-mb", type=int, default=64)
    p.add_argument("--poll-every", type=int, default=64)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--compression", default="none")
    p.add_argument("--latency-rate", type=int, default=2000, help="msgs/s in the latency phase (default 2000)")
    p.add_argument("--latency-messages", type=int, default=6000, help="messages per latency run (default 6000)")
    p.add_argument("--json", metavar="PATH", help="also write the runs and the best figures as JSON")
    args = p.parse_args(argv)
    values = make_values(args.value_size)
    workdir = tempfile.mkdtemp(prefix="kshim-repl-bench-")
    base = free_port_run(3)
    cluster = ManagedProcess("kshim-cluster", [sys.executable, "-m", "kshim", "serve", "--brokers", "3",
                                               "--port", str(base), "--data-dir", os.path.join(workdir, "data")],
                             os.path.join(workdir, "cluster.log"))
    try:
        bootstrap = cluster.wait_line(READY, time.monotonic() + 60).group(1)
        log(f"cluster ready at {bootstrap} (pid {cluster.pid})")
        runs: dict[str, list[dict]] = {"1": [], "all": []}
        lat: dict[str, list[dict]] = {"1": [], "all": []}
        for _ in range(args.repeat):
            for acks in ("1", "all"):
                runs[acks].append(run_mode(bootstrap, acks, args, values))
            for acks in ("1", "all"):
                lat[acks].append(latency_mode(bootstrap, acks, args, values))
    finally:
        cluster.stop()
    best = {acks: max(rs, key=lambda r: r["mb_s"]) for acks, rs in runs.items()}
    print()
    print(f"{'acks':<6} {'MB/s':>8} {'msg/s':>10} {'p50 ms':>8} {'p99 ms':>8}   (best of {args.repeat}; "
          f"{args.messages} x {args.value_size} B, RF=3, {args.partitions} partitions)")
    for acks in ("1", "all"):
        r = best[acks]
        print(f"{acks:<6} {r['mb_s']:>8.1f} {r['msgs_s']:>10,.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}")
    one, all_ = best["1"], best["all"]
    print(f"ratio  {all_['mb_s'] / one['mb_s']:>7.2f}x {all_['msgs_s'] / one['msgs_s']:>9.2f}x "
          f"{all_['p50_ms'] / one['p50_ms']:>7.2f}x {all_['p99_ms'] / one['p99_ms']:>7.2f}x   (acks=all / acks=1)")
    print("runs MB/s: acks=1 %s; acks=all %s" % ([round(r["mb_s"]) for r in runs["1"]],
                                                 [round(r["mb_s"]) for r in runs["all"]]))
    best_lat = {acks: min(rs, key=lambda r: r["p99_ms"]) for acks, rs in lat.items()}
    print()
    print(f"latency at {args.latency_rate} msg/s x {args.value_size} B (best p99 of {args.repeat}):")
    for acks in ("1", "all"):
        print(f"  acks={acks:<4} p50 {best_lat[acks]['p50_ms']:7.2f} ms   p99 {best_lat[acks]['p99_ms']:7.2f} ms")
    print(f"  ratio     p50 {best_lat['all']['p50_ms'] / best_lat['1']['p50_ms']:6.2f}x     "
          f"p99 {best_lat['all']['p99_ms'] / best_lat['1']['p99_ms']:6.2f}x   (acks=all / acks=1)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "latency_runs": lat, "best": best, "best_latency": best_lat,
                       "latency_rate": args.latency_rate}, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
