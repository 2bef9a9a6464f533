"""Restart with many partitions: the "restart" row of bench/throughput.py (docs/benchmarks.md).

One broker on a new data dir gets N single-replica partitions (topics of up to 1,000 each) and one
record in every partition; then:

  sigterm_s      SIGTERM to exit (a clean stop: logs flushed, clean-shutdown markers written)
  clean_ready_s  start to the `kshim ready` line after that clean stop
  clean_serve_s  start until a record produced to the last partition is acknowledged
  dirty_ready_s  start to ready after a kill -9 (every partition recovers its tail, in the
                 background: the broker serves first)
  dirty_serve_s  start after a second kill -9 until a record produced to the last partition is
                 acknowledged (its recovery is done first, ahead of the others')
  records_ok     after the restarts, every partition's log end offset is what was produced

    python bench/restart.py [--partitions 10000] [--json PATH]

Each phase has a deadline; the broker is stopped by its PID.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
TOPIC_SIZE = 1000
DEADLINE_S = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, data: Path, partitions: int, extra: list[str], log: Path | None = None) -> None:
        self.port = free_port()
        self.argv = [sys.executable, "-m", "kshim", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                     "--data-dir", str(data), "--max-partitions-per-broker", str(partitions + 100),
                     "--group-initial-rebalance-delay-ms", "0", *extra]
        self.proc: subprocess.Popen | None = None
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log = log  # every line of the broker's output appended there (each start's)

    def start(self) -> float:
        """Seconds from the exec to the ready line."""
        started = time.monotonic()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=ROOT, env=env)
        ready = threading.Event()
        tail: list[str] = []
        out = open(self.log, "a") if self.log else None

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:  # ends with the process; keeps the pipe drained
                if line.startswith("kshim ready"):
                    ready.set()
                tail.append(line)
                del tail[:-20]
                if out is not None:
                    out.write(line)
                    out.flush()
            if out is not None:
                out.close()
        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(DEADLINE_S):
            self.kill()
            raise RuntimeError("no ready line:\n" + "".join(tail))
        return time.monotonic() - started

    def terminate(self) -> float:
        """Seconds from SIGTERM to exit."""
        assert self.proc is not None
        started = time.monotonic()
        os.kill(self.proc.pid, signal.SIGTERM)
        rc = self.proc.wait(DEADLINE_S)
        if rc != 0:
            raise RuntimeError(f"kshim exited with {rc} after SIGTERM")
        return time.monotonic() - started

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def topics_for(partitions: int) -> dict[str, int]:
    out = {}
    left, i = partitions, 0
    while left > 0:
        out[f"restart-{i}"] = min(TOPIC_SIZE, left)
        left -= TOPIC_SIZE
        i += 1
    return out


def create(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, n in topics.items():  # one at a time: a 10,000-partition request is one long answer
        admin.create_topics([NewTopic(name, n, 1)], request_timeout=300)[name].result(timeout=360)


def produce_each(bootstrap: str, topics: dict[str, int], value: bytes) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1",
                  "queue.buffering.max.messages": 1_000_000})
    failed: list[str] = []

    def done(err, _msg) -> None:
        if err is not None:
            failed.append(str(err))
    n = 0
    for name, count in topics.items():
        for part in range(count):
            p.produce(name, value, partition=part, on_delivery=done)
            n += 1
        p.poll(0)
    if p.flush(120) or failed:
        raise RuntimeError(f"produce failed: {failed[:3]}")
    return n


def end_offsets(bootstrap: str, topics: dict[str, int]) -> dict[tuple[str, int], int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-bench", "enable.auto.commit": False})
    try:
        out = {}
        for name, count in topics.items():
            for part in range(count):
                out[(name, part)] = c.get_watermark_offsets(TopicPartition(name, part), timeout=30)[1]
        return out
    finally:
        c.close()


def serve_after_start(broker: Broker, topics: dict[str, int]) -> float:
    """Seconds from the exec until a record to the last partition is acknowledged."""
    started = time.monotonic()
    broker.start()
    name = list(topics)[-1]
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1"})
    failed: list[str] = []
    p.produce(name, b"x", partition=topics[name] - 1, on_delivery=lambda err, _m: err and failed.append(str(err)))
    if p.flush(60) or failed:
        raise RuntimeError(f"no ack after restart: {failed}")
    return time.monotonic() - started


def run(partitions: int, extra: list[str] | None = None, log: Path | None = None) -> dict:
    topics = topics_for(partitions)
    with tempfile.TemporaryDirectory(prefix="kshim-restart-") as tmp:
        broker = Broker(Path(tmp) / "data", partitions, extra or [], log)
        try:
            first_start = broker.start()
            t0 = time.monotonic()
            create(broker.bootstrap, topics)
            create_s = time.monotonic() - t0
            produced = produce_each(broker.bootstrap, topics, b"v" * 100)
            sigterm_s = broker.terminate()
            clean_ready_s = broker.start()
            expected = {tp: 1 for tp in ((n, p) for n, c in topics.items() for p in range(c))}
            clean_ok = end_offsets(broker.bootstrap, topics) == expected
            broker.terminate()
            clean_serve_s = serve_after_start(broker, topics)
            name = list(topics)[-1]
            expected[(name, topics[name] - 1)] += 1
            produce_each(broker.bootstrap, topics, b"w" * 100)
            expected = {tp: v + 1 for tp, v in expected.items()}
            broker.kill()
            dirty_ready_s = broker.start()
            dirty_ok = end_offsets(broker.bootstrap, topics) == expected
            produce_each(broker.bootstrap, topics, b"y" * 100)  # every log dirty again
            expected = {tp: v + 1 for tp, v in expected.items()}
            broker.kill()
            dirty_serve_s = serve_after_start(broker, topics)
            expected[(name, topics[name] - 1)] += 1
            dirty_ok = dirty_ok and end_offsets(broker.bootstrap, topics) == expected
            broker.terminate()
        finally:
            broker.kill()
    return {"partitions": partitions, "records": produced, "first_start_s": round(first_start, 3),
            "create_s": round(create_s, 3), "sigterm_s": round(sigterm_s, 3),
            "clean_ready_s": round(clean_ready_s, 3), "clean_serve_s": round(clean_serve_s, 3),
            "dirty_ready_s": round(dirty_ready_s, 3), "dirty_serve_s": round(dirty_serve_s, 3),
            "records_ok": clean_ok and dirty_ok}


def markdown(result: dict) -> str:
    cols = ["partitions", "sigterm_s", "clean_ready_s", "clean_serve_s", "dirty_ready_s", "dirty_serve_s", "records_ok",
            "create_s"]
    return ("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n| "
            + " | ".join(str(result[c]) for c in cols) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--broker-log", metavar="PATH", help="append the broker's output there")
    ap.add_argument("extra", nargs="*", help="options for kshim serve (after --)")
    args = ap.parse_args()
    result = run(args.partitions, args.extra, Path(args.broker_log) if args.broker_log else None)
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    sys.exit(0 if result["records_ok"] else 1)


if __name__ == "__main__":
    main()
