"""Many partitions on one broker: the "restart" row of bench/throughput.py (docs/benchmarks.md).

The broker runs under an open-file limit of 20,000 (soft and hard: a common default, which serve
cannot raise) and its default partition budget. On a new data dir it gets N single-replica
partitions in CreateTopics of 1,000 each (topics of up to 1,000), then:

  create_s       all the CreateTopics, one after the other; create_max_s the slowest one
  sample_s       a record produced into each of 500 sampled partitions (acks=all) and read back
                 (sample_ok); then one record in every partition

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
FD_LIMIT = 20_000
SAMPLE = 500
# the targets (issue 34), for the report
TARGETS = {"create_s": ("< 30 s at 10,000", 30.0), "sigterm_s": ("< 2 s", 2.0), "clean_ready_s": ("< 5 s", 5.0),
           "dirty_ready_s": ("< 30 s", 30.0)}


def _fd_limit() -> None:
    """In the broker (preexec_fn): the open-file limit most machines start with, which serve cannot raise."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = FD_LIMIT if hard == resource.RLIM_INFINITY else min(FD_LIMIT, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, data: Path, partitions: int, extra: list[str], log: Path | None = None) -> None:
        self.port = free_port()
        self.argv = [sys.executable, "-m", "kshim", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                     "--data-dir", str(data), "--group-initial-rebalance-delay-ms", "0", *extra]
        self.proc: subprocess.Popen | None = None
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log = log  # every line of the broker's output appended there (each start's)

    def start(self) -> float:
        """Seconds from the exec to the ready line."""
        started = time.monotonic()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=ROOT, env=env, preexec_fn=_fd_limit)
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


def create(bootstrap: str, topics: dict[str, int]) -> float:
    """CreateTopics of up to 1,000 partitions, one after the other; the slowest one's seconds."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    slowest = 0.0
    for name, n in topics.items():  # one at a time: a 10,000-partition request is one long answer
        t0 = time.monotonic()
        admin.create_topics([NewTopic(name, n, 1)], request_timeout=300)[name].result(timeout=360)
        slowest = max(slowest, time.monotonic() - t0)
    return slowest


def sample_drawn(topics: dict[str, int], count: int = SAMPLE) -> list[tuple[str, int]]:
    """`count` partitions drawn at random (the same ones every time)."""
    import random
    everyone = [(n, p) for n, c in topics.items() for p in range(c)]
    return random.Random(34).sample(everyone, min(count, len(everyone)))


def sample(bootstrap: str, topics: dict[str, int]) -> bool:
    """A record (acks=all) into each of the sampled partitions, each read back."""
    drawn = sample_drawn(topics)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    acked: dict[tuple[str, int], int] = {}
    for name, part in drawn:
        p.produce(name, b"sample-%s-%d" % (name.encode(), part), partition=part,
                  on_delivery=lambda err, m: err is None and acked.__setitem__((m.topic(), m.partition()), m.offset()))
    if p.flush(120) or len(acked) != len(drawn):
        return False
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restart-sample", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(n, q, o) for (n, q), o in acked.items()])
        want = {tp: b"sample-%s-%d" % (tp[0].encode(), tp[1]) for tp in acked}
        got: dict[tuple[str, int], bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < len(want) and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    got.setdefault((m.topic(), m.partition()), m.value())
        return got == want
    finally:
        c.close()


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
            create_max_s = create(broker.bootstrap, topics)
            create_s = time.monotonic() - t0
            t0 = time.monotonic()
            sample_ok = sample(broker.bootstrap, topics)
            sample_s = time.monotonic() - t0
            produced = produce_each(broker.bootstrap, topics, b"v" * 100)
            sigterm_s = broker.terminate()
            clean_ready_s = broker.start()
            expected = {tp: 1 for tp in ((n, p) for n, c in topics.items() for p in range(c))}
            for tp in sample_drawn(topics):
                expected[tp] += 1
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
            "create_s": round(create_s, 3), "create_max_s": round(create_max_s, 3), "sample_s": round(sample_s, 3),
            "sample_ok": sample_ok, "fd_limit": FD_LIMIT, "sigterm_s": round(sigterm_s, 3),
            "clean_ready_s": round(clean_ready_s, 3), "clean_serve_s": round(clean_serve_s, 3),
            "dirty_ready_s": round(dirty_ready_s, 3), "dirty_serve_s": round(dirty_serve_s, 3),
            "records_ok": clean_ok and dirty_ok}


def markdown(result: dict) -> str:
    cols = ["partitions", "sigterm_s", "clean_ready_s", "clean_serve_s", "dirty_ready_s", "dirty_serve_s", "records_ok",
            "create_s", "create_max_s", "sample_s", "sample_ok"]
    table = ("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n| "
             + " | ".join(str(result[c]) for c in cols) + " |")
    rows = ["| figure | s | target | met |", "|---|---:|---|---|"]
    for key, (target, bound) in TARGETS.items():
        rows.append(f"| {key} | {result[key]} | {target} | {'yes' if result[key] < bound else 'NO'} |")
    return table + "\n\n" + "\n".join(rows)


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
    sys.exit(0 if result["records_ok"] and result["sample_ok"] else 1)


if __name__ == "__main__":
    main()
