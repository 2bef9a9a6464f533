#!/usr/bin/env python3
"""Side-by-side produce/consume throughput benchmark: kshim vs. a peer broker.

For every target (kshim and/or a peer Kafka bootstrap) in ONE run, on a fresh
topic per target and repetition, this measures with confluent-kafka:

  produce  MB/s and msgs/s from the first produce() call to the last delivery
           callback, plus p50/p99 delivery latency (produce() call -> delivery
           callback, i.e. Message.latency() read inside the callback);
  consume  MB/s and msgs/s of a Consumer that assign()s every partition from
           its earliest available offset (0 unless the broker dropped data)
           up to the high watermark seen after producing, no group commits.

  floor    (no broker, bench/loopback_floor.py; --floor-mb MB, 0 skips) the
           CPU the kernel alone spends per 200 MB sent (sendfile, pread+send)
           and received over loopback TCP: the floor under the broker CPU
           columns; the JSON's "floor" key.  Without --ephemeral also
           (bench/pagecache_floor.py, 2 x MB) the CPU and speed of writing
           200 MB into new page-cache pages in the data dir's file system,
           fresh and just-freed memory: "floor" -> "pagecache".

  restart  (kshim alone, bench/restart.py; --restart-partitions N, default
           10000, 0 skips) a broker with N partitions, one record each: SIGTERM
           to exit, start to ready after it, start to a first acknowledged
           produce, start to ready after kill -9, and whether every record is
           still there; its own markdown table and the JSON's "restart" key.

MB = 10**6 bytes of record values (keys, headers and protocol framing are not
counted).  With --repeat N the best of N is reported (produce and consume are
picked independently; --json has every repetition).

Targets
  kshim   by default started here as
              <python> -m kshim serve --host 127.0.0.1 --port <free port>
                       --data-dir <tmp dir> --partitions <N>
          (ready = a stdout line containing the word "ready", 30 s deadline)
          and stopped with SIGTERM by PID at the end; --kshim HOST:PORT uses a
          running one instead; --no-kshim leaves it out.
  peer    --peer HOST:PORT[,HOST:PORT...] (any Kafka bootstrap), or --peer-mock
          to start bench/mock_cluster.py --brokers 1 (librdkafka's in-memory
          mock, from confluent-kafka; keeps only ~5 MB per partition, so its
          consume phase reads just what is still there: see the "consumed"
          column).
  ceiling --ceiling: bench/null_broker.py, started here: a broker that only
          acknowledges (nothing checked or stored on disk; batches kept in a
          ring in memory touched at start, fetches served from it): the
          client's own produce ceiling. Not in the ratio row. (Its consume
          figure is no ceiling: it copies each fetch, kshim sends files.)

Topics are auto-created on kshim and the ceiling (Metadata request, then wait
until all its partitions have a leader), pre-created with the mock's --topic
option, and created with CreateTopics on a --peer (falling back to
auto-create).

Examples (from the project root, with the project's virtualenv):
    python bench/throughput.py                          # kshim alone
    python bench/throughput.py --peer-mock              # kshim vs. mock
    python bench/throughput.py --peer-mock --no-kshim   # mock alone
    python bench/throughput.py --kshim 127.0.0.1:9092 --peer 127.0.0.1:19092 \\
        --messages 500000 --repeat 3 --json results.json

Exit status: 0 when every phase of every target succeeded, 1 when a phase
failed (e.g. not all messages delivered before the deadline), 2 on bad usage.
Only 127.0.0.1 is used: benchmark targets must be local.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid

try:
    import confluent_kafka
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError:  # pragma: no cover
    sys.stderr.write("bench/throughput.py needs confluent-kafka (pip install confluent-kafka)\n")
    sys.exit(2)

HOST = "127.0.0.1"
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOCK_BROKER = os.path.join(PROJECT_ROOT, "bench", "mock_cluster.py")  # librdkafka's mock cluster, the peer
READY_RE = re.compile(r"\bready\b", re.IGNORECASE)
BOOTSTRAP_RE = re.compile(r"^BOOTSTRAP=(\S+)\s*$")

MIB = 1 << 20
MB = 1e6


class PhaseError(Exception):
    """A benchmark phase (startup, topic setup, produce, consume) failed."""


def log(msg: str) -> None:
    sys.stderr.write("[bench %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


# --------------------------------------------------------------------------
# helpers


def parse_bootstrap(spec: str, what: str) -> str:
    """Validate HOST:PORT[,HOST:PORT...]; only 127.0.0.1 is allowed."""
    out = []
    for hp in spec.split(","):
        hp = hp.strip()
        host, sep, port = hp.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("%s: expected HOST:PORT, got %r" % (what, hp))
        if host != HOST:
            raise ValueError("%s: only %s is allowed (got %r)" % (what, HOST, host))
        out.append("%s:%d" % (host, int(port)))
    return ",".join(out)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_tcp(bootstrap: str, deadline: float) -> None:
    """Wait until the first bootstrap address accepts TCP connections."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    last = None
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise PhaseError("%s not accepting connections: %s" % (bootstrap, last))
        time.sleep(0.1)


def percentile(sorted_vals, q: float):
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, int(math.ceil(q * len(sorted_vals))) - 1))
    return sorted_vals[k]


def make_values(size: int, seed: int = 12345):
    """A pool of distinct values: half random bytes, half a repeat of them, so
    --compression has something (about 2:1) to work on; values are distinct
    across a batch so no codec gets a free ride from repetition."""
    rnd = random.Random(seed)
    count = max(1, min(1024, (64 * MIB) // max(1, size)))
    pool = []
    for _ in range(count):
        half = rnd.randbytes(max(1, size // 2)) if size else b""
        pool.append((half * 2)[:size] if size else b"")
    return pool


# --------------------------------------------------------------------------
# managed broker processes


class ManagedProcess:
    """A child broker process: stdout read by a thread (never left to fill the
    pipe), stderr to a log file; stopped by PID with SIGTERM (then SIGKILL)."""

    def __init__(self, name: str, argv, log_path: str, env=None, cwd=None):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.lines: "queue.Queue[str | None]" = queue.Queue()
        self.tail = collections.deque(maxlen=40)
        self._stderr = open(log_path, "wb")
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr,
            env=env, cwd=cwd, text=True, errors="replace", bufsize=1)
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, name="%s-stdout" % name, daemon=True)
        self._reader.start()

    def _read(self):
        try:
            for line in self.proc.stdout:
                line = line.rstrip("\n")
                self.tail.append(line)
                self.lines.put(line)
        except (OSError, ValueError):
            pass
        finally:
            self.lines.put(None)

    def wait_line(self, pattern, deadline: float):
        """Return the match of the first stdout line matching `pattern`."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PhaseError("%s (pid %d): no stdout line matching %r within the deadline%s"
                                 % (self.name, self.pid, pattern.pattern, self.diagnostics()))
            try:
                line = self.lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    raise PhaseError("%s (pid %d) exited with status %s before it was ready%s"
                                     % (self.name, self.pid, self.proc.returncode, self.diagnostics()))
                continue
            if line is None:  # stdout closed
                try:
                    self.proc.wait(timeout=max(0.0, min(2.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    pass
                raise PhaseError("%s (pid %d) closed stdout (exit status %s) before it was ready%s"
                                 % (self.name, self.pid, self.proc.poll(), self.diagnostics()))
            m = pattern.search(line)
            if m:
                return m

    def diagnostics(self) -> str:
        out = []
        if self.tail:
            out.append("  last stdout lines:\n    " + "\n    ".join(list(self.tail)[-10:]))
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 3000))
                err = f.read().decode("utf-8", "replace").strip()
            if err:
                out.append("  stderr tail (%s):\n    %s" % (self.log_path, err.replace("\n", "\n    ")))
        except OSError:
            pass
        return ("\n" + "\n".join(out)) if out else ""

    def stop(self, timeout: float = 10.0):
        """SIGTERM by PID, wait (bounded), SIGKILL by PID if still running."""
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log("%s (pid %d) ignored SIGTERM for %.0f s: SIGKILL" % (self.name, self.pid, timeout))
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    log("%s (pid %d) still not gone after SIGKILL" % (self.name, self.pid))
        self._reader.join(timeout=2)
        try:
            self._stderr.close()
        except OSError:
            pass
        rc = self.proc.returncode
        if rc not in (0, -signal.SIGTERM, None):
            log("%s (pid %d) exited with status %s (stderr: %s)" % (self.name, self.pid, rc, self.log_path))
        return rc


def start_kshim(args, workdir: str) -> "tuple[ManagedProcess, str]":
    port = free_port()
    data_dir = os.path.join(workdir, "kshim-data")
    os.makedirs(data_dir, exist_ok=True)
    where = ["--ephemeral"] if args.ephemeral else ["--data-dir", data_dir]
    argv = [sys.executable, "-m", "kshim", "serve", "--host", HOST, "--port", str(port),
            *where, "--partitions", str(args.partitions)] + list(args.kshim_arg)
    env = dict(os.environ)
    env["PYTHONPATH"] = PROJECT_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    log("starting kshim: %s" % " ".join(argv))
    mp = ManagedProcess("kshim", argv, os.path.join(workdir, "kshim.stderr.log"), env=env, cwd=workdir)
    deadline = time.monotonic() + args.startup_timeout
    try:
        mp.wait_line(READY_RE, deadline)
        bootstrap = "%s:%d" % (HOST, port)
        wait_tcp(bootstrap, deadline)
    except BaseException:
        mp.stop()
        raise
    log("kshim ready on %s (pid %d)" % (bootstrap, mp.pid))
    return mp, bootstrap


NULL_BROKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "null_broker.py")


def start_announced(name: str, argv: list, workdir: str, args) -> "tuple[ManagedProcess, str]":
    """Start a broker that prints `BOOTSTRAP=host:port` when it listens (bench/mock_cluster.py,
    bench/null_broker.py), wait for that line and for the port; stopped again if either fails."""
    mp = ManagedProcess(name, argv, os.path.join(workdir, name + ".stderr.log"), cwd=workdir)
    deadline = time.monotonic() + args.startup_timeout
    try:
        try:
            bootstrap = parse_bootstrap(mp.wait_line(BOOTSTRAP_RE, deadline).group(1), name + " BOOTSTRAP line")
        except ValueError as e:
            raise PhaseError(str(e))
        wait_tcp(bootstrap, deadline)
    except BaseException:
        mp.stop()
        raise
    log("%s ready on %s (pid %d)" % (name, bootstrap, mp.pid))
    return mp, bootstrap


def start_ceiling(args, workdir: str) -> "tuple[ManagedProcess, str]":
    """bench/null_broker.py: a broker that only acknowledges (the client's own ceiling)."""
    argv = [sys.executable, NULL_BROKER, "--partitions", str(args.partitions)]
    log("starting the client's ceiling: %s" % " ".join(argv))
    return start_announced("ceiling", argv, workdir, args)


def start_mock(args, workdir: str, topics) -> "tuple[ManagedProcess, str]":
    argv = [sys.executable, MOCK_BROKER, "--brokers", "1"]
    for t in topics:  # pre-create with --partitions (auto-create would give 4)
        argv += ["--topic", "%s:%d" % (t, args.partitions)]
    log("starting mock: %s %s --brokers 1 [--topic ...x%d]" % (sys.executable, MOCK_BROKER, len(topics)))
    return start_announced("mock", argv, workdir, args)


# --------------------------------------------------------------------------
# benchmark phases


class ClientErrors:
    """error_cb target: logs the first few client errors, remembers fatal ones."""

    def __init__(self, label: str):
        self.label = label
        self.count = 0
        self.fatal = None

    def __call__(self, err):
        self.count += 1
        if err.fatal():
            self.fatal = err
        if self.count <= 5:
            log("%s client error: %s" % (self.label, err))
        elif self.count == 6:
            log("%s: further client errors not shown" % self.label)


def producer_conf(args, bootstrap: str, errors: ClientErrors) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": "kshim-bench-producer",
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "batch.num.messages": 100000,
        "compression.type": args.compression,
        "queue.buffering.max.messages": 10_000_000,
        "queue.buffering.max.kbytes": args.buffer_mb * 1024,
        "message.timeout.ms": int(args.timeout * 1000),
        "enable.idempotence": False,
        "error_cb": errors,
    }


def ensure_topic(producer: Producer, topic: str, kind: str, args, bootstrap: str, deadline: float) -> int:
    """Make sure `topic` exists and every partition has a leader; return the
    partition count.  kshim: auto-create through the Metadata request (the
    producer's list_topics(topic) allows auto-creation).  external peer: try
    CreateTopics first."""
    if kind == "peer":
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            fut = admin.create_topics([NewTopic(topic, args.partitions, 1)],
                                      operation_timeout=10, request_timeout=10)[topic]
            fut.result(timeout=max(1.0, min(15.0, deadline - time.monotonic())))
        except Exception as e:  # unsupported/denied/timeout: rely on auto-create
            log("peer: CreateTopics %s failed (%s); relying on auto-create" % (topic, e))
    last = "no metadata"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PhaseError("topic %s: partitions not known within the deadline (%s)" % (topic, last))
        try:
            md = producer.list_topics(topic, timeout=max(0.5, min(5.0, remaining)))
            t = md.topics.get(topic)
            if t is None:
                last = "topic absent from metadata"
            elif t.error is not None and t.error.code() != KafkaError.NO_ERROR:
                last = str(t.error)
            elif not t.partitions:
                last = "no partitions"
            elif any(p.leader < 0 or p.error is not None for p in t.partitions.values()):
                last = "partition(s) without leader"
            else:
                return len(t.partitions)
        except KafkaException as e:
            last = str(e)
        time.sleep(0.2)


def produce_phase(producer: Producer, topic: str, args, values, state: dict) -> dict:
    n = args.messages
    pool_len = len(values)
    deadline = time.monotonic() + args.timeout
    produce = producer.produce
    poll = producer.poll
    poll_every = args.poll_every
    t0 = time.perf_counter()
    state["t0"] = t0
    for i in range(n):
        v = values[i % pool_len]
        while True:
            try:
                produce(topic, v)
                break
            except BufferError:  # local queue full (--buffer-mb): serve callbacks
                poll(0.05)
                if time.monotonic() > deadline:
                    raise PhaseError("produce: local queue still full at the deadline "
                                     "(%d of %d produced)" % (i, n))
        if i % poll_every == 0:
            poll(0)  # serve delivery callbacks (latency granularity: poll_every msgs)
        if i & 1023 == 0:
            if time.monotonic() > deadline:
                raise PhaseError("produce: deadline (%g s) hit after %d of %d produce() calls"
                                 % (args.timeout, i, n))
            if state["errors"]:
                raise PhaseError("produce: delivery failed: %s" % state["first_error"])
    remaining = producer.flush(max(0.0, deadline - time.monotonic()))
    t1 = state["t_last"] or time.perf_counter()
    if remaining or state["delivered"] + state["errors"] < n:
        raise PhaseError("produce: %d of %d messages not delivered within %g s"
                         % (n - state["delivered"], n, args.timeout))
    if state["errors"]:
        raise PhaseError("produce: %d of %d deliveries failed, first: %s"
                         % (state["errors"], n, state["first_error"]))
    elapsed = max(t1 - t0, 1e-9)
    lat = state["latencies"]
    lat.sort()
    nbytes = n * args.value_size
    return {
        "messages": n,
        "bytes": nbytes,
        "seconds": elapsed,
        "mb_s": nbytes / elapsed / MB,
        "msgs_s": n / elapsed,
        "p50_ms": percentile(lat, 0.50) * 1e3 if lat else None,
        "p99_ms": percentile(lat, 0.99) * 1e3 if lat else None,
        "max_ms": lat[-1] * 1e3 if lat else None,
    }


def consume_phase(bootstrap: str, topic: str, nparts: int, produced: int, args, label: str) -> dict:
    errors = ClientErrors(label + " consumer")
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "client.id": "kshim-bench-consumer",
        "group.id": "kshim-bench-" + uuid.uuid4().hex[:12],  # required; never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "fetch.max.bytes": 50 * MIB,
        # librdkafka's default (1 MiB). With 10 MiB (this script's choice until 2026-11-27) kshim
        # answered the first fetch with everything: ~24 MB the client had to receive and parse
        # before handing out its first record (75 ms in, against 8 ms with 1 MiB), so the reading
        # started late and the run measured mostly that wait. librdkafka's mock returns one batch
        # per partition per fetch whatever the limit, so its figure does not change
        "max.partition.fetch.bytes": 1 * MIB,
        "queued.max.messages.kbytes": 256 * 1024,
        # librdkafka stops prefetching at queued.min.messages (100,000 by default) and looks again
        # only after fetch.queue.backoff.ms (1 s): 200,000 small records then took ~1 s more in
        # some runs on either broker (100-byte consume: 13-18 MB/s or 120-167 MB/s at random)
        "queued.min.messages": 10_000_000,
        "receive.message.max.bytes": 50 * MIB + 1 * MIB,
        "error_cb": errors,
    })
    deadline = time.monotonic() + args.timeout
    try:
        low, high = {}, {}
        for p in range(nparts):
            try:
                lo, hi = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=max(1.0, min(10.0, deadline - time.monotonic())),
                    cached=False)
            except KafkaException as e:
                raise PhaseError("consume: watermarks of %s[%d]: %s" % (topic, p, e))
            low[p], high[p] = lo, hi
        available = sum(high[p] - low[p] for p in range(nparts))
        if available <= 0:
            raise PhaseError("consume: no records available in %s (watermarks %s)"
                             % (topic, {p: (low[p], high[p]) for p in range(nparts)}))
        if available < produced:
            log("%s: broker keeps only %d of %d produced records (earliest offsets %s); "
                "consuming those" % (label, available, produced, [low[p] for p in range(nparts)]))
        pending = {p for p in range(nparts) if high[p] > low[p]}
        count = 0
        nbytes = 0
        other_errors = 0
        consume = consumer.consume
        EOF = KafkaError._PARTITION_EOF
        t0 = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, low[p]) for p in sorted(pending)])
        t_last = t0
        while pending and count < available:
            if time.monotonic() > deadline:
                raise PhaseError("consume: deadline (%g s) hit after %d of %d records"
                                 % (args.timeout, count, available))
            if errors.fatal is not None:
                raise PhaseError("consume: fatal client error: %s" % errors.fatal)
            # consume() returns once num_messages are collected or the timeout
            # expires: never ask for more than what is left, so the last call
            # returns with the last record instead of idling to its timeout.
            batch = consume(num_messages=max(1, min(10000, available - count)), timeout=0.05)
            got = False
            for m in batch:
                err = m.error()
                if err is None:
                    nbytes += len(m.value() or b"")
                    count += 1
                    got = True
                elif err.code() == EOF:
                    if m.offset() >= high.get(m.partition(), 0):
                        pending.discard(m.partition())
                else:
                    other_errors += 1
                    if other_errors <= 5:
                        log("%s consume error: %s" % (label, err))
                    if err.fatal():
                        raise PhaseError("consume: fatal error: %s" % err)
            if got:
                t_last = time.perf_counter()
        if count < available:  # offset gaps (e.g. control records): not an error
            log("%s: end of every partition reached after %d records, watermarks span %d offsets"
                % (label, count, available))
            if count == 0:
                raise PhaseError("consume: no records received from %s" % topic)
        elapsed = max(t_last - t0, 1e-9)
        return {
            "messages": count,
            "bytes": nbytes,
            "available": available,
            "produced": produced,
            "earliest_offsets": [low[p] for p in range(nparts)],
            "seconds": elapsed,
            "mb_s": nbytes / elapsed / MB,
            "msgs_s": count / elapsed,
        }
    finally:
        try:
            consumer.close()
        except Exception:
            pass


def deliveries() -> "tuple[dict, callable]":
    """A delivery-report state, in the shape produce_phase expects, and its callback."""
    state = {"delivered": 0, "errors": 0, "first_error": None, "latencies": [], "t_last": None, "t0": None}
    lat_append = state["latencies"].append
    perf = time.perf_counter

    def on_delivery(err, msg):
        if err is None:
            state["delivered"] += 1
            lat_append(msg.latency())  # produce() call -> this callback, seconds
        else:
            state["errors"] += 1
            if state["first_error"] is None:
                state["first_error"] = err
        state["t_last"] = perf()
    return state, on_delivery


def run_once(target: dict, topic: str, args, values) -> dict:
    label = target["name"]
    errors = ClientErrors(label + " producer")
    state, on_delivery = deliveries()
    conf = producer_conf(args, target["bootstrap"], errors)
    conf["on_delivery"] = on_delivery
    producer = Producer(conf)
    ok = False
    try:
        deadline = time.monotonic() + min(args.timeout, 60.0)
        nparts = ensure_topic(producer, topic, target["kind"], args, target["bootstrap"], deadline)
        if nparts != args.partitions:
            log("%s: topic %s has %d partitions (--partitions %d)" % (label, topic, nparts, args.partitions))
        log("%s: topic %s ready (%d partitions); producing %d x %d B"
            % (label, topic, nparts, args.messages, args.value_size))
        cpu0 = cpu_seconds(target.get("pid"))
        own0 = own_cpu_seconds()
        prod = produce_phase(producer, topic, args, values, state)
        own1 = own_cpu_seconds()
        cpu1 = cpu_seconds(target.get("pid"))
        broker_cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
        prod["cpu_per_200mb"] = per_200mb(broker_cpu, args.messages * args.value_size)
        # cores busy while producing: this process (the client: its Python loop and librdkafka's
        # threads) and the broker; on 2 cores, client + broker near 2 means the machine, not the
        # broker alone, sets the rate, and every CPU second the broker spends is the client's
        prod["client_cores"] = (own1 - own0) / prod["seconds"]
        prod["broker_cores"] = broker_cpu / prod["seconds"] if broker_cpu is not None else None
        ok = True
    finally:
        if not ok:
            try:
                producer.purge()
                producer.flush(1)
            except Exception:
                pass
        del producer
    log("%s: produce %.1f MB/s, %.0f msg/s, p50 %.2f ms, p99 %.2f ms (%.2f s)"
        % (label, prod["mb_s"], prod["msgs_s"], prod["p50_ms"] or 0, prod["p99_ms"] or 0, prod["seconds"]))
    cpu0 = cpu_seconds(target.get("pid"))
    cons = consume_phase(target["bootstrap"], topic, nparts, args.messages, args, label)
    cpu1 = cpu_seconds(target.get("pid"))
    cons["cpu_per_200mb"] = per_200mb(cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None,
                                      cons["messages"] * args.value_size)
    log("%s: consume %.1f MB/s, %.0f msg/s, %d records (%.2f s)"
        % (label, cons["mb_s"], cons["msgs_s"], cons["messages"], cons["seconds"]))
    if target["kind"] == "kshim" and target.get("managed"):
        drop_topic(target["bootstrap"], topic)
    return {"topic": topic, "partitions": nparts, "produce": prod, "consume": cons}


def drop_topic(bootstrap: str, topic: str) -> None:
    """Delete a run's topic on the kshim started here, after its phases: with --partitions 1000
    and --repeat 5 the topics outgrew the broker's partition budget (sized from the open-file
    limit: 2,500 with 20,000 descriptors), and the third run's was refused (POLICY_VIOLATION).
    bench/replication.py too: its throughput phases left gigabytes for the kernel to write back
    (every byte three times) while the later runs of both modes went on."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([topic], operation_timeout=30, request_timeout=30)[topic].result(timeout=40)
    except Exception as e:  # the next run's topic may then be refused; say why
        log("kshim: deleting %s failed (%s)" % (topic, e))


# --------------------------------------------------------------------------
# report


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def best_of(reps):
    """Best produce and best consume figures over the repetitions (picked
    independently; msgs/s breaks ties, e.g. with --value-size 0)."""
    if not reps:
        return None
    bp = max(reps, key=lambda r: (r["produce"]["mb_s"], r["produce"]["msgs_s"]))
    bc = max(reps, key=lambda r: (r["consume"]["mb_s"], r["consume"]["msgs_s"]))
    return {"produce": bp["produce"], "consume": bc["consume"],
            "produce_topic": bp["topic"], "consume_topic": bc["topic"]}


COLS = [
    ("produce MB/s", lambda b: b["produce"]["mb_s"], ".1f"),
    ("produce msg/s", lambda b: b["produce"]["msgs_s"], ",.0f"),
    ("p50 ms", lambda b: b["produce"]["p50_ms"], ".2f"),
    ("p99 ms", lambda b: b["produce"]["p99_ms"], ".2f"),
    ("consume MB/s", lambda b: b["consume"]["mb_s"], ".1f"),
    ("consume msg/s", lambda b: b["consume"]["msgs_s"], ",.0f"),
    # broker CPU (user + system, /proc/<pid>/stat; brokers started here only) per 200 MB of values
    ("cpu s/200MB prod", lambda b: b["produce"].get("cpu_per_200mb"), ".3f"),
    ("cpu s/200MB cons", lambda b: b["consume"].get("cpu_per_200mb"), ".3f"),
    # CPU cores busy while producing: the client (this process) and the broker (started here only)
    ("client cores prod", lambda b: b["produce"].get("client_cores"), ".2f"),
    ("broker cores prod", lambda b: b["produce"].get("broker_cores"), ".2f"),
]


def cpu_seconds(pid: "int | None") -> "float | None":
    """User + system CPU time of a process, from /proc (None when not measurable)."""
    if not pid:
        return None
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def own_cpu_seconds() -> float:
    """User + system CPU time of this process, every thread (the client's librdkafka threads too)."""
    t = os.times()
    return t.user + t.system


def per_200mb(cpu: "float | None", nbytes: float) -> "float | None":
    return cpu * 200e6 / nbytes if cpu is not None and nbytes > 0 else None


def render_table(targets) -> "tuple[str, dict]":
    header = ["target"] + [c[0] for c in COLS] + ["consumed"]
    rows = []
    for t in targets:
        b = t.get("best")
        if b is None:
            rows.append([t["name"]] + ["FAILED"] + ["-"] * (len(COLS) - 1) + ["-"])
            continue
        c = b["consume"]
        consumed = "%d/%d" % (c["messages"], c["produced"])
        rows.append([t["name"]] + [fmt(get(b), spec) for _, get, spec in COLS] + [consumed])
    ratios = {}
    by_name = {t["name"]: t.get("best") for t in targets}
    if "kshim" in by_name and "peer" in by_name:
        k, p = by_name["kshim"], by_name["peer"]
        row = ["ratio"]
        for name, get, _ in COLS:
            kv = get(k) if k else None
            pv = get(p) if p else None
            r = (kv / pv) if (kv is not None and pv) else None
            ratios[name] = r
            row.append(fmt(r, ".2f") + "x" if r is not None else "-")
        rows.append(row + ["-"])
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = []
    for r in [header] + rows:
        cells = [str(r[0]).ljust(widths[0])] + [str(v).rjust(widths[i]) for i, v in enumerate(r) if i]
        lines.append("  ".join(cells))
    return "\n".join(lines), ratios


# --------------------------------------------------------------------------
# main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("targets")
    g.add_argument("--kshim", metavar="HOST:PORT", help="use a running kshim instead of starting one")
    g.add_argument("--no-kshim", action="store_true", help="leave kshim out")
    g.add_argument("--ephemeral", action="store_true",
                   help="start kshim with --ephemeral (its log on tmpfs, deleted at exit) instead of a data dir")
    g.add_argument("--kshim-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the started 'kshim serve' (repeatable)")
    pg = g.add_mutually_exclusive_group()
    pg.add_argument("--peer", metavar="HOST:PORT[,...]", help="peer Kafka bootstrap")
    pg.add_argument("--peer-mock", action="store_true",
                    help="start %s --brokers 1 as the peer" % MOCK_BROKER)
    g.add_argument("--ceiling", action="store_true",
                   help="also measure against bench/null_broker.py, a broker that only acknowledges "
                        "(and serves fetches from a ring in memory): the client's own ceiling")
    w = ap.add_argument_group("workload")
    w.add_argument("--messages", type=int, default=200000, help="messages per run (default 200000)")
    w.add_argument("--value-size", type=int, default=1024, help="value bytes (default 1024)")
    w.add_argument("--partitions", type=int, default=4, help="partitions per topic (default 4, as the mock)")
    w.add_argument("--acks", default="1", choices=["0", "1", "-1", "all"], help="producer acks (default 1)")
    w.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                   help="producer compression.type (default none)")
    w.add_argument("--linger-ms", type=float, default=10, help="producer linger.ms (default 10)")
    w.add_argument("--batch-size", type=int, default=MIB, help="producer batch.size bytes (default 1 MiB)")
    w.add_argument("--buffer-mb", type=int, default=64,
                   help="producer local queue limit, MiB (queue.buffering.max.kbytes; default 64). "
                        "At saturation the delivery latency is about this queue's depth / throughput")
    w.add_argument("--poll-every", type=int, default=64,
                   help="call producer.poll(0) every N produce() calls (default 64)")
    w.add_argument("--repeat", type=int, default=1, help="runs per target, best of N (default 1)")
    o = ap.add_argument_group("control")
    o.add_argument("--timeout", type=float, default=120.0, help="deadline per phase, seconds (default 120)")
    o.add_argument("--startup-timeout", type=float, default=30.0,
                   help="deadline for a started broker to be ready, seconds (default 30)")
    o.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="also print the results as JSON (last stdout line), or write them to PATH")
    o.add_argument("--keep-data", action="store_true", help="keep the temporary directory (data, logs)")
    w.add_argument("--floor-mb", type=int, default=100, metavar="MB",
                   help="the floor row (bench/loopback_floor.py): the kernel's CPU per 200 MB to send and to receive "
                        "over loopback TCP, on a file of MB megabytes (0 skips)")
    w.add_argument("--restart-partitions", type=int, default=10_000, metavar="N",
                   help="the restart row (kshim alone, bench/restart.py): a broker with N partitions stopped "
                        "with SIGTERM, started again, killed with SIGKILL, started again (default 10000; 0 skips)")
    args = ap.parse_args(argv)
    if args.messages <= 0 or args.value_size < 0 or args.partitions <= 0 or args.repeat <= 0 \
            or args.poll_every <= 0 or args.buffer_mb <= 0 or args.batch_size <= 0 or args.timeout <= 0:
        ap.error("--messages/--partitions/--repeat/--poll-every/--buffer-mb/--batch-size/--timeout "
                 "must be positive, --value-size non-negative")
    if args.acks == "all":
        args.acks = "-1"
    if args.kshim:
        if args.no_kshim:
            ap.error("--kshim and --no-kshim are exclusive")
    try:
        if args.kshim:
            args.kshim = parse_bootstrap(args.kshim, "--kshim")
        if args.peer:
            args.peer = parse_bootstrap(args.peer, "--peer")
    except ValueError as e:
        ap.error(str(e))
    if args.no_kshim and not (args.peer or args.peer_mock):
        ap.error("nothing to benchmark: --no-kshim without --peer/--peer-mock")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    stopping = [False]

    def on_signal(signum, _frame):
        # first signal: unwind through the finally below (which stops the
        # brokers); later ones must not interrupt that cleanup
        if stopping[0]:
            log("signal %d ignored: already stopping" % signum)
            return
        stopping[0] = True
        raise SystemExit(128 + signum)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    run_id = time.strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:6]
    workdir = tempfile.mkdtemp(prefix="kshim-bench-")
    targets = []
    if not args.no_kshim:
        targets.append({"name": "kshim", "kind": "kshim", "bootstrap": args.kshim,
                        "managed": not args.kshim})
    if args.peer or args.peer_mock:
        targets.append({"name": "peer", "kind": "mock" if args.peer_mock else "peer",
                        "bootstrap": args.peer, "managed": bool(args.peer_mock)})
    if args.ceiling:
        targets.append({"name": "ceiling", "kind": "ceiling", "bootstrap": None, "managed": True})
    for t in targets:
        t["topics"] = ["bench-%s-%s-r%d" % (t["name"], run_id, i + 1) for i in range(args.repeat)]
        t["reps"] = []
        t["error"] = None
        t["pid"] = None

    procs = []
    failed = False
    completed = False
    values = make_values(args.value_size)
    try:
        # start/check the targets
        for t in targets:
            try:
                if t["kind"] == "kshim" and t["managed"]:
                    mp, t["bootstrap"] = start_kshim(args, workdir)
                    procs.append(mp)
                    t["pid"] = mp.pid
                elif t["kind"] == "mock":
                    mp, t["bootstrap"] = start_mock(args, workdir, t["topics"])
                    procs.append(mp)
                    t["pid"] = mp.pid
                elif t["kind"] == "ceiling":
                    mp, t["bootstrap"] = start_ceiling(args, workdir)
                    procs.append(mp)
                    t["pid"] = mp.pid
                else:
                    wait_tcp(t["bootstrap"], time.monotonic() + args.startup_timeout)
            except PhaseError as e:
                t["error"] = "startup: %s" % e
                log("%s FAILED: %s" % (t["name"], t["error"]))
                failed = True
        # interleave repetitions across targets so drift hits every target alike
        for rep in range(args.repeat):
            for t in targets:
                if t["error"]:
                    continue
                log("%s: run %d/%d on %s" % (t["name"], rep + 1, args.repeat, t["bootstrap"]))
                try:
                    t["reps"].append(run_once(t, t["topics"][rep], args, values))
                except PhaseError as e:
                    t["error"] = "run %d: %s" % (rep + 1, e)
                    log("%s FAILED: %s" % (t["name"], t["error"]))
                    failed = True
        for t in targets:
            t["best"] = best_of(t["reps"]) if not t["error"] else None
        completed = True
    except BaseException as e:
        # drop the clients still referenced from the traceback's frames, so they
        # are destroyed before their brokers are stopped
        traceback.clear_frames(e.__traceback__)
        raise
    finally:
        stopping[0] = True
        for mp in reversed(procs):
            log("stopping %s (pid %d)" % (mp.name, mp.pid))
            mp.stop()
        if failed:
            for mp in procs:
                d = mp.diagnostics()
                if d:
                    log("%s diagnostics:%s" % (mp.name, d))
        if args.keep_data:
            log("kept %s" % workdir)
        elif failed or not completed:
            shutil.rmtree(os.path.join(workdir, "kshim-data"), ignore_errors=True)
            log("logs kept in %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    table, ratios = render_table(targets)
    print()
    print("%d msgs x %d B, %d partitions, acks=%s, compression=%s, linger.ms=%g, batch.size=%d, "
          "best of %d; MB = 1e6 value bytes; p50/p99 = produce() -> delivery callback; kshim log %s"
          % (args.messages, args.value_size, args.partitions, args.acks, args.compression,
             args.linger_ms, args.batch_size, args.repeat, "ephemeral (tmpfs)" if args.ephemeral else "durable (disk)"))
    for t in targets:
        how = {"kshim": "started here" if t["managed"] else "external",
               "mock": "librdkafka mock, started here", "peer": "external",
               "ceiling": "bench/null_broker.py: only acknowledges, started here"}[t["kind"]]
        print("  %-6s %s (%s%s)" % (t["name"], t["bootstrap"] or "-", how,
                                    ", pid %d" % t["pid"] if t["pid"] else ""))
    print()
    print(table)
    for t in targets:
        if t["error"]:
            print("%s FAILED: %s" % (t["name"], t["error"]))
        elif t["best"] and t["best"]["consume"]["available"] < t["best"]["consume"]["produced"]:
            c = t["best"]["consume"]
            print("note: %s kept only %d of %d produced records; consume figures cover those"
                  % (t["name"], c["available"], c["produced"]))
    if any(v is not None for v in ratios.values()):
        print("(latency ratios: lower is better for kshim; throughput ratios: higher is better)")

    floor = None
    if args.floor_mb > 0:
        import loopback_floor  # bench/loopback_floor.py, beside this file
        log("floor row: %d MB over loopback" % args.floor_mb)
        floor = loopback_floor.measure(args.floor_mb, passes=2, runs=3)
        print()
        print("floor (no broker): the CPU the kernel alone spends per 200 MB sent and received over loopback "
              "TCP here, under the cpu s/200MB columns of any broker")
        print(loopback_floor.markdown(floor))
        if not args.ephemeral:  # the durable log's file system: what storing each byte costs here
            import pagecache_floor  # bench/pagecache_floor.py, beside this file
            where = os.path.dirname(workdir)  # the data dir's parent (the work dir is gone by now)
            log("floor row: %d MB into new page-cache pages in %s" % (2 * args.floor_mb, where))
            floor["pagecache"] = pagecache_floor.measure(where, 2 * args.floor_mb, runs=1 if args.floor_mb < 50 else 3)
            print()
            print("floor (no broker): CPU and speed of writing 200 MB into new page-cache pages in the data dir's "
                  "file system, into fresh memory and into pages freed a moment before (a VM that hands free "
                  "memory back to its host pays for fresh pages; the mock stores ~5 MB per partition and never does)")
            print(pagecache_floor.markdown(floor["pagecache"]))

    restart = None
    if args.restart_partitions > 0 and not args.no_kshim and not args.kshim:
        import restart as restart_bench  # bench/restart.py, beside this file
        log("restart row: %d partitions" % args.restart_partitions)
        try:
            restart = restart_bench.run(args.restart_partitions)
        except Exception as e:  # the other rows stand; this one says why it has no figures
            restart = {"partitions": args.restart_partitions, "error": str(e)[-2000:]}
            failed = True
        print()
        print("restart (kshim alone; seconds; durable log): SIGTERM to exit, start to ready after it, "
              "start to a first acknowledged produce, start to ready after kill -9, start to a first "
              "acknowledged produce after kill -9")
        if "error" in restart:
            print("restart FAILED: %s" % restart["error"])
        else:
            print(restart_bench.markdown(restart))
            failed = failed or not restart["records_ok"]

    if args.json:
        doc = {
            "run_id": run_id,
            "ok": not failed,
            "params": {k: getattr(args, k) for k in (
                "messages", "value_size", "partitions", "acks", "compression", "linger_ms",
                "batch_size", "buffer_mb", "poll_every", "repeat", "timeout")},
            "env": {"python": platform.python_version(), "confluent_kafka": getattr(confluent_kafka, "__version__", None),
                    "librdkafka": confluent_kafka.libversion()[0], "cpus": os.cpu_count(),
                    "platform": platform.platform()},
            "targets": [{k: t[k] for k in ("name", "kind", "bootstrap", "managed", "error", "reps", "best")}
                        for t in targets],
            "ratios": ratios,
            "restart": restart,
            "floor": floor,
        }
        text = json.dumps(doc, sort_keys=True)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
            log("wrote %s" % args.json)
    sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
