#!/usr/bin/env python3
"""The log cleaner: how fast it cleans, and what cleaning costs the produce path.

One kshim (`kshim serve`, started here by PID, its periodic cleaner idle: `--log-cleaner-backoff-ms`
one hour) and, with --peer-mock, librdkafka's mock broker as the latency baseline, in one run:

  clean    a compacted topic (1 partition, segment.bytes 16 MiB) gets --clean-mb of updates
           (200-byte values over --keys keys) from a confluent-kafka producer; then the broker
           cleans it now (the `kshim ctl compact` request, on the broker's admin socket) and
           reports the seconds of the clean: MB/s = bytes of log cleaned / seconds (Kafka's
           "MB of log processed" figure: the copy pass), and the offset-map pass beside it.
           Run with the I/O cap lifted (--log-cleaner-io-max-bytes-per-second 10 GB/s) so
           the figure is the cleaner's own speed.
  latency  a paced producer (--rate records/s of 200 bytes, acks=all, linger.ms 5, 3 partitions)
           for --seconds; p50 / p99 / max of the delivery latency (produce() -> delivery
           report). Three runs: kshim idle; kshim while a second compacted topic holding
           --clean-mb of records with distinct keys (nothing to drop: every clean reads and
           rewrites all of it) is cleaned again and again, back to back, at the default I/O cap
           (100 MB/s, what users run); and the mock (no cleaner: a floor for client and machine).

Ratios: p99 with cleaning / p99 idle (what cleaning costs), and kshim idle / mock.

    python bench/compaction.py --peer-mock [--json results.json]     # ~1 min

Exit status 0 when every phase succeeded, 1 otherwise. Only 127.0.0.1 is used.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from throughput import PhaseError, log, percentile, start_kshim, start_mock  # noqa: E402

import anyio  # noqa: E402

from kshim.ctl.compact import compact  # noqa: E402

VALUE = 200
CAP_UNLIMITED = str(10 * 1000 ** 3)


def produce_updates(bootstrap: str, topic: str, mb: float, keys: int | None) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "acks": "1",
                  "queue.buffering.max.kbytes": 1 << 20, "log_level": 3})
    n = int(mb * 1e6 / VALUE)
    value = b"v" * VALUE
    failed = []
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"key-%08d" % (i % keys if keys else i), value=value, partition=0,
                          on_delivery=lambda err, _m: err and failed.append(err))
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(120) or failed:
        raise PhaseError(f"updates not all delivered: {failed[:3]}")
    return n


def clean_now(data_dir: Path, topic: str) -> list[dict]:
    rows = anyio.run(compact, data_dir, topic, -1)
    bad = [r for r in rows if "error" in r]
    if bad:
        raise PhaseError(f"clean failed: {bad}")
    return rows


def paced(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    """Produce `rate` records/s for `seconds`; delivery latencies in ms."""
    lat: list[float] = []
    failed: list = []

    def report(err, msg):
        if err is not None:
            failed.append(err)
        else:
            lat.append(msg.latency() * 1000)

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 3})
    value = b"x" * VALUE
    start = time.monotonic()
    sent = 0
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * rate)
        while sent < due:
            p.produce(topic, value=value, on_delivery=report)
            sent += 1
        p.poll(0.001)
    if p.flush(60):
        raise PhaseError("latency phase: records not delivered")
    if failed:
        raise PhaseError(f"latency phase: {failed[:3]}")
    lat.sort()
    return {"records": len(lat), "p50_ms": percentile(lat, 0.50), "p99_ms": percentile(lat, 0.99),
            "max_ms": lat[-1]}


def create(bootstrap: str, topic: str, partitions: int, configs: dict) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)


class Cleaning(threading.Thread):
    """Forced cleans of one topic back to back until stopped."""

    def __init__(self, data_dir: Path, topic: str) -> None:
        super().__init__(daemon=True)
        self.data_dir, self.topic = data_dir, topic
        self.stop = threading.Event()
        self.rounds = 0
        self.bytes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for r in clean_now(self.data_dir, self.topic):
                    self.bytes += r["bytes_read"] + r["bytes_written"]
                self.rounds += 1
        except BaseException as e:  # reported by main
            self.error = e


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clean-mb", type=float, default=100.0, help="MB of updates to clean (default 100)")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--rate", type=int, default=5_000, help="records/s of the latency phases")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each latency phase")
    ap.add_argument("--peer-mock", action="store_true", help="also measure librdkafka's mock broker")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    out: dict = {"args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="kshim-bench-compaction-") as work:
        ok = True
        settings = argparse.Namespace(partitions=3, startup_timeout=30.0, kshim_arg=[
            "--log-cleaner-backoff-ms", "3600000", "--log-cleaner-io-max-bytes-per-second", CAP_UNLIMITED])
        kshim, bootstrap = start_kshim(settings, work)
        data_dir = Path(work) / "kshim-data"
        try:
            create(bootstrap, "compacted", 1, {"cleanup.policy": "compact", "segment.bytes": str(16 << 20)})
            create(bootstrap, "latency", 3, {})
            t0 = time.monotonic()
            n = produce_updates(bootstrap, "compacted", args.clean_mb, args.keys)
            log(f"{n:,} updates in {time.monotonic() - t0:.1f} s; cleaning")
            row = clean_now(data_dir, "compacted")[0]
            copied = row["bytes_read"] - row["map_bytes_read"]
            out["clean"] = {**row, "log_mb_s": copied / 1e6 / row["seconds"],
                            "map_mb_s": row["map_bytes_read"] / 1e6 / row["seconds"]}
            log(f"cleaned {copied / 1e6:.1f} MB of log in {row['seconds']:.2f} s: "
                f"{out['clean']['log_mb_s']:.1f} MB/s ({row['records_read']:,} records read, "
                f"{row['records_kept']:,} kept)")
            out["idle"] = paced(bootstrap, "latency", args.rate, args.seconds)
            log(f"idle: {out['idle']}")
        finally:
            kshim.stop()
        # the latency under cleaning at the default I/O cap (a broker as users run it)
        settings.kshim_arg = ["--log-cleaner-backoff-ms", "3600000"]
        kshim, bootstrap = start_kshim(settings, work)
        try:
            create(bootstrap, "compacted-load", 1, {"cleanup.policy": "compact", "segment.bytes": str(16 << 20)})
            produce_updates(bootstrap, "compacted-load", args.clean_mb, None)
            cleaning = Cleaning(data_dir, "compacted-load")
            cleaning.start()
            out["cleaning"] = paced(bootstrap, "latency", args.rate, args.seconds)
            cleaning.stop.set()
            cleaning.join(120)
            if cleaning.error:
                raise cleaning.error
            out["cleaning"].update(clean_rounds=cleaning.rounds, clean_mb=cleaning.bytes / 1e6)
            log(f"while cleaning: {out['cleaning']}")
        finally:
            kshim.stop()
        if args.peer_mock:
            mock, mock_bootstrap = start_mock(settings, work, ["latency"])
            try:
                out["mock"] = paced(mock_bootstrap, "latency", args.rate, args.seconds)
                log(f"mock: {out['mock']}")
            finally:
                mock.stop()
    c, idle, busy = out["clean"], out["idle"], out["cleaning"]
    print(f"\ncleaner: {c['log_mb_s']:.1f} MB/s of log ({c['bytes_read'] - c['map_bytes_read']:,} bytes, "
          f"{c['seconds']:.2f} s; offset map pass {c['map_bytes_read']:,} bytes), "
          f"{c['records_read']:,} records -> {c['records_kept']:,}")
    print(f"\n| produce {args.rate:,} records/s, acks=all | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|")
    for label, r in (("kshim, idle", idle), (f"kshim, cleaning ({busy['clean_rounds']} cleans, "
                                             f"{busy['clean_mb']:.0f} MB of cleaner I/O)", busy),
                     *((("mock", out["mock"]),) if "mock" in out else ())):
        print(f"| {label} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} |")
    print(f"\np99 while cleaning / idle: {busy['p99_ms'] / idle['p99_ms']:.2f}x"
          + (f"; kshim idle p99 / mock p99: {idle['p99_ms'] / out['mock']['p99_ms']:.2f}x" if "mock" in out else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
