#!/usr/bin/env python3
"""Per-request cost: small requests per second, kshim and librdkafka's mock cluster side by side.

    python bench/requests.py [--quick] [--repeat 3] [--requests 30000] [--seconds 5] [--json PATH]
    python bench/requests.py --kshim 127.0.0.1:PORT [--kshim-pid PID] --no-mock --apis ApiVersions,Metadata --modes pipelined

A raw client (no Kafka client library: frames encoded once with the project's `wire` package, then
sent as bytes) on 127.0.0.1 sends the same small request over and over:

- ApiVersions v0; Metadata v1 for all topics (after `--topics` topics of `--partitions` partitions
  were created: CreateTopics on kshim, the mock's --topic option);
- FindCoordinator v2 (group); Heartbeat v3 and OffsetCommit v7 (one partition) for a classic group
  the client joined first (JoinGroup v5, SyncGroup v3). A request the mock does not serve (not in
  its ApiVersions, or the join fails) is said so in the output and skipped for the mock only.

in three modes, each a run of `--requests` requests or `--seconds` seconds, whichever ends first:

- pipelined: one connection, `--depth` (64) requests in flight: every answer read sends the next;
- one at a time on one connection: send, wait for the answer, send again;
- `--connections` (64) connections at once, one request at a time on each (one thread, epoll).

Answers are checked: each one's correlation id, and the first and every 256th are decoded and must
carry no error code. Metadata rows run before the group rows, so kshim's all-topics answer does not
yet list __consumer_offsets (which the first FindCoordinator creates); the response sizes are
printed. Each target gets an untimed warm-up per request. Requests/s, best of `--repeat`, targets
alternating; the ratio is kshim / mock (higher is better for kshim). Beside it, per target: the
server's CPU (/proc/PID/stat) per request and in cores, and the client's (this process) in cores:
a side near 1 core is what bounds that row (two cores shared by client and server).

kshim is started here (`python -m kshim serve --ephemeral --no-console --port 0`, this checkout)
unless `--kshim HOST:PORT` names a running one (`--kshim-pid` for its CPU). The mock is
bench/mock_cluster.py (else ../shared/peers/mock_broker.py), started here unless `--no-mock` or
`--peer HOST:PORT` (a running broker on 127.0.0.1 instead); if neither starts (librdkafka comes
with confluent-kafka), the output says so and kshim runs alone.
Every process started here is stopped by its PID. `--quick`: a few thousand requests per row, one
repetition (bench/suite.py --quick, the CI smoke: the figures mean nothing). Figures:
docs/benchmarks.md, "Per-request cost".
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from wire import codec  # noqa: E402
from wire.headers import decode_response_header, encode_request_header, frame  # noqa: E402

HOST = "127.0.0.1"
MOCKS = [os.path.join(ROOT, "bench", "mock_cluster.py"),
         os.path.join(os.path.dirname(ROOT), "shared", "peers", "mock_broker.py")]
CLIENT_ID = "kshim-bench-requests"
GROUP = "kshim-bench-requests"
TOPIC = "bench-req-%d"
API_VERSIONS, METADATA, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, SYNC_GROUP, OFFSET_COMMIT, CREATE_TOPICS = \
    18, 3, 10, 11, 12, 14, 8, 19
MEMBER_ID_REQUIRED, TOPIC_ALREADY_EXISTS = 79, 36
APIS = ["ApiVersions", "Metadata", "FindCoordinator", "Heartbeat", "OffsetCommit"]
MODES = ["pipelined", "one at a time", "connections"]
CHECK_EVERY = 256  # decode every Nth answer (and the first) and look for error codes
# hard caps, whatever the options say
MAX_REQUESTS, MAX_SECONDS, MAX_REPEAT, MAX_CONNECTIONS, MAX_DEPTH = 5_000_000, 120.0, 20, 512, 1024
SETUP_TIMEOUT_S = 30.0
SIZE = struct.Struct(">i")
SIZE_CID = struct.Struct(">ii")


class BenchError(Exception):
    """A target misbehaved (no start, a wrong or failed answer, a run past its hard cap)."""


def log(msg: str) -> None:
    print("[requests %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def cpu_s(pid: int | None) -> float | None:
    """utime + stime of a process, all threads (Linux /proc); None without a PID."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- processes started here


class Started:
    """A broker process started here: stdout and stderr to files, stopped by its PID."""

    def __init__(self, name: str, argv: list[str], work: str, env: dict | None = None) -> None:
        self.name = name
        self.out_path = os.path.join(work, name + ".stdout")
        self.err_path = os.path.join(work, name + ".stderr")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=work)
        self.pid = self.proc.pid

    def wait_line(self, pattern: re.Pattern, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.out_path, errors="replace") as f:
                for line in f:
                    m = pattern.search(line)
                    if m:
                        return m
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name} (pid {self.pid}) exited with status {self.proc.returncode} before "
                                 f"it was ready: {self.stderr_tail()}")
            time.sleep(0.05)
        raise BenchError(f"{self.name} (pid {self.pid}): not ready within {timeout:.0f} s: {self.stderr_tail()}")

    def stderr_tail(self) -> str:
        try:
            with open(self.err_path, errors="replace") as f:
                return f.read()[-1500:].strip()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                log(f"{self.name} (pid {self.pid}) still running 15 s after SIGTERM: SIGKILL")
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(15)


def start_kshim(args, work: str) -> tuple[Started, str]:
    env = {**os.environ, "PYTHONPATH": ROOT + (os.pathsep + os.environ["PYTHONPATH"]
                                               if os.environ.get("PYTHONPATH") else "")}
    argv = [sys.executable, "-m", "kshim", "serve", "--host", HOST, "--port", "0", "--ephemeral", "--no-console",
            *args.kshim_arg]
    log("starting kshim: " + " ".join(argv[1:]))
    proc = Started("kshim", argv, work, env)
    try:
        port = proc.wait_line(re.compile(r"kshim ready: bootstrap [\d.]+:(\d+)"), args.startup_timeout).group(1)
    except BaseException:
        proc.stop()
        raise
    return proc, f"{HOST}:{port}"


def start_mock(args, work: str) -> tuple[Started | None, str | None, str]:
    """(process, bootstrap, what) or (None, None, why not)."""
    why = []
    for path in MOCKS:
        if not os.path.exists(path):
            why.append(f"{os.path.relpath(path, ROOT)}: not there")
            continue
        argv = [sys.executable, path, "--brokers", "1"]
        for i in range(args.topics):
            argv += ["--topic", "%s:%d:1" % (TOPIC % i, args.partitions)]
        log("starting the mock: " + " ".join([os.path.relpath(path, ROOT), *argv[3:]]))
        proc = Started("mock", argv, work)
        try:
            bootstrap = proc.wait_line(re.compile(r"^BOOTSTRAP=(127\.0\.0\.1:\d+)\s*$"), args.startup_timeout).group(1)
        except BenchError as e:
            proc.stop()
            why.append(f"{os.path.relpath(path, ROOT)}: {e}")
            continue
        version = re.search(r"librdkafka ([\w.\-]+)", proc.stderr_tail())
        return proc, bootstrap, "librdkafka %s mock cluster (%s)" % (version.group(1) if version else "?",
                                                                      os.path.relpath(path, ROOT))
    return None, None, "; ".join(why)


# ----------------------------------------------------------------------------- the raw client


def request_frame(api_key: int, version: int, body: dict, cid: int) -> bytes:
    return frame(encode_request_header(api_key, version, cid, CLIENT_ID) + codec.encode(api_key, version, "request", body))


def connect(bootstrap: str, timeout: float = SETUP_TIMEOUT_S) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    if host != HOST:
        raise BenchError(f"{bootstrap}: only {HOST} is allowed")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_frame(sock: socket.socket) -> bytes:
    """One response frame, without its size (blocking, the socket's timeout)."""
    data = b""
    while len(data) < 4 or len(data) < 4 + SIZE.unpack_from(data)[0]:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise BenchError("connection closed by the broker")
        data += chunk
    size = SIZE.unpack_from(data)[0]
    if len(data) != 4 + size:
        raise BenchError("more than one answer to one request")
    return data[4:]


def errors_in(obj: Any, path: str = "") -> list[str]:
    """Every non-zero error_code in a decoded answer, with where it is."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.startswith("_"):
                continue
            if k == "error_code" and v:
                out.append(f"{path or 'top'}: error {v}")
            elif isinstance(v, (dict, list)):
                out += errors_in(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += errors_in(v, f"{path}[{i}]")
    return out


class Conn:
    """A blocking connection for the setup exchanges (topics, the group)."""

    def __init__(self, bootstrap: str) -> None:
        self.sock = connect(bootstrap)
        self.cid = 0

    def request(self, api_key: int, version: int, body: dict):
        self.cid += 1
        self.sock.sendall(request_frame(api_key, version, body, self.cid))
        payload = recv_frame(self.sock)
        cid, header = decode_response_header(api_key, version, payload)
        if cid != self.cid:
            raise BenchError(f"answer to correlation id {cid}, expected {self.cid}")
        return codec.decode(api_key, version, "response", payload[header:])

    def close(self) -> None:
        self.sock.close()


@dataclass
class Request:
    """One kind of request, encoded `ring` times with correlation ids 0..ring-1 (all the same length)."""
    api: str
    api_key: int
    version: int
    body: dict
    ring: int = 64
    frames: list[bytes] = field(init=False)
    blob: memoryview = field(init=False)  # frames 0..ring-1 twice: any `ring` frames in a row are one slice
    length: int = field(init=False)

    def __post_init__(self) -> None:
        self.frames = [request_frame(self.api_key, self.version, self.body, cid) for cid in range(self.ring)]
        self.length = len(self.frames[0])
        assert all(len(f) == self.length for f in self.frames)
        self.blob = memoryview(b"".join(self.frames * 2))


class Checker:
    """Counts answers and decodes the first and every CHECK_EVERY-th: none may carry an error code."""

    def __init__(self, req: Request) -> None:
        self.req = req
        self.count = 0
        self.size: int | None = None

    def check(self, payload: bytes) -> None:
        _, header = decode_response_header(self.req.api_key, self.req.version, payload)
        body = codec.decode(self.req.api_key, self.req.version, "response", payload[header:])
        errors = errors_in(body)
        if errors:
            raise BenchError(f"{self.req.api} v{self.req.version}: " + ", ".join(errors[:5]))
        self.size = len(payload) + 4


def take_frames(buf: bytearray, expected: int, ring: int, checker: Checker) -> tuple[int, int]:
    """Consume the complete answers at the start of buf: (how many, next expected correlation id)."""
    pos, n, end = 0, 0, len(buf)
    while end - pos >= 8:
        size, cid = SIZE_CID.unpack_from(buf, pos)
        if end - pos - 4 < size:
            break
        if cid != expected:
            raise BenchError(f"{checker.req.api}: answer with correlation id {cid}, expected {expected}")
        if checker.count % CHECK_EVERY == 0:
            checker.check(bytes(buf[pos + 4:pos + 4 + size]))
        checker.count += 1
        expected = expected + 1 if expected + 1 < ring else 0
        pos += 4 + size
        n += 1
    if pos:
        del buf[:pos]
    return n, expected


class Clock:
    """The timed part of a run: wall time, this process's CPU (the client) and the server's."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.t0 = self.wall = self.c0 = self.client_s = 0.0
        self.s0: float | None = None
        self.server_s: float | None = None

    def start(self) -> float:
        self.c0, self.s0 = time.process_time(), cpu_s(self.server_pid)
        self.t0 = time.perf_counter()
        return self.t0

    def stop(self) -> None:
        self.wall = time.perf_counter() - self.t0
        self.client_s = time.process_time() - self.c0
        s1 = cpu_s(self.server_pid)
        self.server_s = None if s1 is None or self.s0 is None else s1 - self.s0


def run_pipelined(bootstrap: str, req: Request, n: int, seconds: float, depth: int, clock: Clock) -> int:
    """`depth` requests in flight on one connection: each answer read sends one more."""
    assert depth == req.ring
    sock = connect(bootstrap)
    checker = Checker(req)
    try:
        sock.sendall(req.frames[0])  # untimed: connected and answered before the clock starts
        buf = bytearray()
        while not take_frames(buf, 0, req.ring, checker)[0]:
            buf += sock.recv(1 << 16)
        blob, length = req.blob, req.length
        deadline = clock.start() + seconds
        sent = min(depth, n)
        sock.sendall(blob[:sent * length])
        nxt, expected, done = sent % depth, 0, 0
        while done < n:
            data = sock.recv(1 << 20)
            if not data:
                raise BenchError("connection closed by the broker")
            buf += data
            got, expected = take_frames(buf, expected, req.ring, checker)
            done += got
            more = min(got, n - sent)
            if more:
                sock.sendall(blob[nxt * length:(nxt + more) * length])
                nxt = (nxt + more) % depth
                sent += more
            if time.perf_counter() > deadline:
                break
        clock.stop()
        return done
    finally:
        sock.close()


def run_serial(bootstrap: str, req: Request, n: int, seconds: float, depth: int, clock: Clock) -> int:
    """One request at a time on one connection."""
    sock = connect(bootstrap)
    checker = Checker(req)
    frames, ring = req.frames, req.ring
    try:
        sock.sendall(frames[0])
        buf = bytearray()
        while not take_frames(buf, 0, ring, checker)[0]:
            buf += sock.recv(1 << 16)
        deadline = clock.start() + seconds
        done, expected = 0, 0
        while done < n:
            sock.sendall(frames[expected])
            got = 0
            while not got:
                data = sock.recv(1 << 20)
                if not data:
                    raise BenchError("connection closed by the broker")
                buf += data
                got, expected = take_frames(buf, expected, ring, checker)
            done += got
            if time.perf_counter() > deadline:
                break
        clock.stop()
        return done
    finally:
        sock.close()


def run_connections(bootstrap: str, req: Request, n: int, seconds: float, conns: int, clock: Clock) -> int:
    """`conns` connections, one request at a time on each, all served by one epoll loop."""
    socks: list[socket.socket] = []
    checker = Checker(req)
    frames, ring = req.frames, req.ring
    ep = select.epoll()
    try:
        for _ in range(conns):  # untimed: each connection answered once before the next (the mock's
            s = connect(bootstrap)  # listen backlog is 5) and before the clock starts
            socks.append(s)
            s.sendall(frames[0])
            buf = bytearray()
            while not take_frames(buf, 0, ring, checker)[0]:
                buf += s.recv(1 << 16)
            s.setblocking(False)
        state = {}  # fd -> [socket, buffer, next expected correlation id]
        for s in socks:
            state[s.fileno()] = [s, bytearray(), 0]
            ep.register(s.fileno(), select.EPOLLIN)
        deadline = clock.start() + seconds
        sent = min(conns, n)
        for s in socks[:sent]:
            s.send(frames[0])  # a frame into an empty send buffer: never partial
        done = 0
        while done < n:
            for fd, _ in ep.poll(1.0):
                st = state[fd]
                data = st[0].recv(1 << 16)
                if not data:
                    raise BenchError("connection closed by the broker")
                buf = st[1]
                buf += data
                got, st[2] = take_frames(buf, st[2], ring, checker)
                if got:
                    done += got
                    if sent < n:
                        st[0].send(frames[st[2]])
                        sent += 1
            if time.perf_counter() > deadline:
                break
        clock.stop()
        return done
    finally:
        ep.close()
        for s in socks:
            s.close()


RUNNERS: dict[str, Callable[..., int]] = {
    "pipelined": run_pipelined, "one at a time": run_serial, "connections": run_connections}


# ----------------------------------------------------------------------------- targets


@dataclass
class Target:
    name: str
    bootstrap: str
    pid: int | None
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    member: tuple[str, int] | None = None  # (member id, generation) once joined
    skipped: dict[str, str] = field(default_factory=dict)  # api -> why
    sizes: dict[str, int] = field(default_factory=dict)  # api -> answer bytes

    def supports(self, api_key: int, version: int) -> bool:
        lo, hi = self.versions.get(api_key, (1, 0))
        return lo <= version <= hi


def prepare(target: Target, args, create_topics: bool) -> None:
    conn = Conn(target.bootstrap)
    try:
        answer = conn.request(API_VERSIONS, 0, {})
        target.versions = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
        if create_topics and not target.supports(CREATE_TOPICS, 4):
            log(f"{target.name}: no CreateTopics v4: Metadata lists the topics it has")
            return
        if create_topics:
            answer = conn.request(CREATE_TOPICS, 4, {
                "topics": [{"name": TOPIC % i, "num_partitions": args.partitions, "replication_factor": 1,
                            "assignments": [], "configs": []} for i in range(args.topics)],
                "timeout_ms": 30000, "validate_only": False})
            bad = [(t.name, t.error_code) for t in answer.topics if t.error_code not in (0, TOPIC_ALREADY_EXISTS)]
            if bad:
                raise BenchError(f"{target.name}: CreateTopics: {bad}")
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while True:  # every partition led (kshim elects leaders just after CreateTopics answers)
            meta = conn.request(METADATA, 1, {"topics": None})
            ours = {t.name: t for t in meta.topics if t.name.startswith("bench-req-")}
            if len(ours) >= args.topics and all(t.error_code == 0 and len(t.partitions) == args.partitions and
                                                all(p.leader_id >= 0 for p in t.partitions) for t in ours.values()):
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{target.name}: topics not ready: {[(t.name, t.error_code) for t in meta.topics]}")
            time.sleep(0.1)
    finally:
        conn.close()


def join_group(target: Target) -> None:
    """FindCoordinator, JoinGroup (again with the member id, if asked), SyncGroup as the leader."""
    conn = Conn(target.bootstrap)
    try:
        coord = conn.request(FIND_COORDINATOR, 2, {"key": GROUP, "key_type": 0})
        if coord.error_code:
            raise BenchError(f"FindCoordinator: error {coord.error_code}")
        if f"{coord.host}:{coord.port}" != target.bootstrap:
            raise BenchError(f"the coordinator is {coord.host}:{coord.port}, not the broker asked")
        topic = (TOPIC % 0).encode()
        subscription = struct.pack(">hih", 0, 1, len(topic)) + topic + struct.pack(">i", -1)  # v0: 1 topic, no data
        body = {"group_id": GROUP, "session_timeout_ms": 60000, "rebalance_timeout_ms": 60000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription}]}
        joined = conn.request(JOIN_GROUP, 5, body)
        if joined.error_code == MEMBER_ID_REQUIRED:
            joined = conn.request(JOIN_GROUP, 5, {**body, "member_id": joined.member_id})
        if joined.error_code:
            raise BenchError(f"JoinGroup: error {joined.error_code}")
        synced = conn.request(SYNC_GROUP, 3, {"group_id": GROUP, "generation_id": joined.generation_id,
                                              "member_id": joined.member_id, "group_instance_id": None,
                                              "assignments": [{"member_id": joined.member_id, "assignment": b""}]})
        if synced.error_code:
            raise BenchError(f"SyncGroup: error {synced.error_code}")
        target.member = (joined.member_id, joined.generation_id)
    finally:
        conn.close()


def make_request(api: str, target: Target, depth: int) -> Request:
    if api == "ApiVersions":
        return Request(api, API_VERSIONS, 0, {}, depth)
    if api == "Metadata":
        return Request(api, METADATA, 1, {"topics": None}, depth)
    if api == "FindCoordinator":
        return Request(api, FIND_COORDINATOR, 2, {"key": GROUP, "key_type": 0}, depth)
    assert target.member is not None
    member_id, generation = target.member
    if api == "Heartbeat":
        return Request(api, HEARTBEAT, 3, {"group_id": GROUP, "generation_id": generation, "member_id": member_id,
                                           "group_instance_id": None}, depth)
    if api == "OffsetCommit":
        return Request(api, OFFSET_COMMIT, 7, {
            "group_id": GROUP, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": None, "topics": [{"name": TOPIC % 0, "partitions": [
                {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}, depth)
    raise ValueError(api)


VERSIONS = {"ApiVersions": (API_VERSIONS, 0), "Metadata": (METADATA, 1), "FindCoordinator": (FIND_COORDINATOR, 2),
            "Heartbeat": (HEARTBEAT, 3), "OffsetCommit": (OFFSET_COMMIT, 7)}
GROUP_APIS = {"Heartbeat", "OffsetCommit"}


def label(api: str) -> str:
    return f"{api} v{VERSIONS[api][1]}"


def measure(target: Target, req: Request, mode: str, args) -> dict:
    width = args.connections if mode == "connections" else args.depth
    clock = Clock(target.pid)
    done = RUNNERS[mode](target.bootstrap, req, args.requests, args.seconds, width, clock)
    wall = clock.wall
    if not done or wall <= 0:
        raise BenchError(f"{mode}: no answer in {wall:.1f} s")
    if wall > args.seconds + 30:
        raise BenchError(f"{mode}: {wall:.0f} s, past the {args.seconds:.0f} s cap")
    run = {"target": target.name, "api": req.api, "mode": mode, "requests": done, "wall_s": wall,
           "req_s": done / wall, "client_cores": clock.client_s / wall, "client_us_per_req": clock.client_s / done * 1e6}
    if clock.server_s is not None:
        run["server_cores"] = clock.server_s / wall
        run["server_us_per_req"] = clock.server_s / done * 1e6
    return run


# ----------------------------------------------------------------------------- output


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def tables(best: dict, targets: list[Target], apis: list[str], modes: list[str]) -> str:
    names = [t.name for t in targets]
    head = ["api", "mode"] + [f"{n} req/s" for n in names]
    if len(names) == 2:
        head.append(f"ratio {names[0]}/{names[1]}")
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for api in apis:
        for mode in modes:
            cells = [label(api), mode_label(mode)]
            vals = []
            for t in targets:
                run = best.get((t.name, api, mode))
                vals.append(run and run["req_s"])
                cells.append(fmt(vals[-1], ",.0f") if run else ("skipped" if api in t.skipped else "-"))
            if len(head) > len(cells):
                cells.append(f"{vals[0] / vals[1]:.2f}x" if vals[0] and vals[1] else "-")
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| api | mode | target | req/s | server CPU us/req | server cores | client CPU us/req | client cores |",
              "|---|---|---|---:|---:|---:|---:|---:|"]
    for api in apis:
        for mode in modes:
            for t in targets:
                run = best.get((t.name, api, mode))
                if run:
                    lines.append(f"| {label(api)} | {mode_label(mode)} | {t.name} | {fmt(run['req_s'], ',.0f')} | "
                                 f"{fmt(run.get('server_us_per_req'), '.1f')} | {fmt(run.get('server_cores'), '.2f')} | "
                                 f"{fmt(run['client_us_per_req'], '.1f')} | {fmt(run['client_cores'], '.2f')} |")
    return "\n".join(lines)


MODE_LABELS: dict[str, str] = {}


def mode_label(mode: str) -> str:
    return MODE_LABELS.get(mode, mode)


def parse_list(spec: str, known: list[str], what: str) -> list[str]:
    by_lower = {k.lower(): k for k in known}
    out = []
    for item in spec.split(","):
        item = item.strip()
        if item.lower() not in by_lower:
            raise argparse.ArgumentTypeError(f"{what}: {item!r} is not one of {', '.join(known)}")
        out.append(by_lower[item.lower()])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few thousand requests per row, one repetition (CI smoke)")
    ap.add_argument("--requests", type=int, help="requests per run (default 30,000; --quick 3,000)")
    ap.add_argument("--seconds", type=float, help="time cap per run, seconds (default 5; --quick 5)")
    ap.add_argument("--repeat", type=int, help="runs per row and target, best of N (default 3; --quick 1)")
    ap.add_argument("--depth", type=int, default=64, help="requests in flight when pipelined (default 64)")
    ap.add_argument("--connections", type=int, default=64, help="connections at once (default 64)")
    ap.add_argument("--apis", default=",".join(APIS), help="comma-separated, of: " + ", ".join(APIS))
    ap.add_argument("--modes", default="pipelined,one at a time,connections",
                    help="comma-separated, of: pipelined, one at a time, connections")
    ap.add_argument("--topics", type=int, default=4, help="topics created first (default 4)")
    ap.add_argument("--partitions", type=int, default=4, help="partitions per topic (default 4)")
    ap.add_argument("--kshim", metavar="HOST:PORT", help="a running kshim instead of starting one")
    ap.add_argument("--kshim-pid", type=int, help="its PID, for its CPU columns")
    ap.add_argument("--kshim-arg", action="append", default=[], help="an option for the kshim started here")
    ap.add_argument("--no-mock", action="store_true", help="kshim alone")
    ap.add_argument("--peer", metavar="HOST:PORT", help="a running broker instead of the mock (its topics created "
                    "with CreateTopics when it has it)")
    ap.add_argument("--startup-timeout", type=float, default=60.0)
    ap.add_argument("--json", metavar="PATH", help="write every run and the best of each row there")
    args = ap.parse_args(argv)
    try:
        apis = parse_list(args.apis, APIS, "--apis")
        modes = parse_list(args.modes, MODES, "--modes")
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    args.requests = args.requests or (3_000 if args.quick else 30_000)
    args.seconds = args.seconds or 5.0
    args.repeat = args.repeat or (1 if args.quick else 3)
    if not (1 <= args.requests <= MAX_REQUESTS and 0 < args.seconds <= MAX_SECONDS and 1 <= args.repeat <= MAX_REPEAT
            and 1 <= args.depth <= MAX_DEPTH and 1 <= args.connections <= MAX_CONNECTIONS):
        ap.error(f"--requests 1..{MAX_REQUESTS:,}, --seconds up to {MAX_SECONDS:.0f}, --repeat 1..{MAX_REPEAT}, "
                 f"--depth 1..{MAX_DEPTH}, --connections 1..{MAX_CONNECTIONS}")
    MODE_LABELS.update({"pipelined": f"pipelined, {args.depth} in flight",
                        "one at a time": "one at a time, 1 connection",
                        "connections": f"{args.connections} connections, 1 at a time each"})
    warmup = min(args.requests, 200 if args.quick else 2_000)

    work = tempfile.mkdtemp(prefix="kshim-requests-")
    started: list[Started] = []
    targets: list[Target] = []
    failed: list[str] = []
    mock_note = None
    try:
        if args.kshim:
            targets.append(Target("kshim", args.kshim, args.kshim_pid))
        else:
            proc, bootstrap = start_kshim(args, work)
            started.append(proc)
            targets.append(Target("kshim", bootstrap, proc.pid))
        if args.peer:
            targets.append(Target("peer", args.peer, None))
            mock_note = f"a running broker, {args.peer}"
        elif not args.no_mock:
            proc, bootstrap, what = start_mock(args, work)
            if proc is None:
                mock_note = f"the mock is not available ({what}): kshim alone"
                log(mock_note)
            else:
                started.append(proc)
                targets.append(Target("mock", bootstrap, proc.pid))
                mock_note = what
        for t in targets:
            log(f"{t.name} on {t.bootstrap} (pid {t.pid})")
            prepare(t, args, create_topics=t.name != "mock")
            for api in apis:
                key, version = VERSIONS[api]
                if not t.supports(key, version):
                    t.skipped[api] = f"{t.name} does not serve {label(api)} (its ApiVersions: " \
                                     f"{t.versions.get(key, 'none')})"
        runs: list[dict] = []
        best: dict[tuple[str, str, str], dict] = {}
        for api in apis:
            for t in targets:
                if api in GROUP_APIS and t.member is None and api not in t.skipped:
                    try:
                        join_group(t)
                        log(f"{t.name}: joined group {GROUP} as {t.member[0]} (generation {t.member[1]})")
                    except (BenchError, OSError) as e:
                        for a in GROUP_APIS:
                            t.skipped.setdefault(a, f"{t.name} could not join a classic group: {e}")
                if api in t.skipped:
                    log(f"skipped: {t.skipped[api]}")
                    continue
                try:  # warm-up, untimed
                    RUNNERS["pipelined"](t.bootstrap, make_request(api, t, args.depth), warmup, args.seconds,
                                         args.depth, Clock(None))
                except (BenchError, OSError) as e:
                    t.skipped[api] = f"{t.name}: {label(api)} failed: {e}"
                    failed.append(t.skipped[api])
                    log(t.skipped[api])
            for mode in modes:
                for _ in range(args.repeat):
                    for t in targets:  # alternating: both see the same machine
                        if api in t.skipped:
                            continue
                        req = make_request(api, t, args.depth)
                        try:
                            run = measure(t, req, mode, args)
                        except (BenchError, OSError) as e:
                            t.skipped[api] = f"{t.name}: {label(api)}, {mode}: {e}"
                            failed.append(t.skipped[api])
                            log(t.skipped[api])
                            continue
                        runs.append(run)
                        log(f"{t.name} {label(api)}, {mode_label(mode)}: {run['req_s']:,.0f} req/s, server "
                            f"{fmt(run.get('server_cores'), '.2f')} cores, client {run['client_cores']:.2f} cores")
                        key = (t.name, api, mode)
                        if key not in best or run["req_s"] > best[key]["req_s"]:
                            best[key] = run
            for t in targets:
                if api not in t.skipped:
                    conn = Conn(t.bootstrap)
                    try:
                        req = make_request(api, t, 1)
                        conn.sock.sendall(req.frames[0])
                        t.sizes[api] = len(recv_frame(conn.sock)) + 4
                    finally:
                        conn.close()
        print(f"per-request cost: requests/s, best of {args.repeat} ({args.requests:,} requests or "
              f"{args.seconds:g} s per run); raw client on 127.0.0.1, one process; {os.cpu_count()} cores, "
              f"Python {platform.python_version()}")
        print(f"kshim: {args.kshim or 'python -m kshim serve --ephemeral --no-console'}; "
              f"{'peer' if args.peer else 'mock'}: {mock_note or 'not run (--no-mock)'}")
        print(tables(best, targets, apis, modes))
        for t in targets:
            print(f"{t.name} answer bytes: " + ", ".join(f"{label(a)} {n}" for a, n in t.sizes.items()))
        for t in targets:
            for api, why in t.skipped.items():
                if api in apis:
                    print(f"skipped for {t.name}: {label(api)}: {why}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"requests": args.requests, "seconds": args.seconds, "repeat": args.repeat,
                           "depth": args.depth, "connections": args.connections, "mock": mock_note,
                           "targets": {t.name: {"bootstrap": t.bootstrap, "skipped": t.skipped, "answer_bytes": t.sizes}
                                       for t in targets},
                           "runs": runs,
                           "best": [{"api": label(api), "mode": mode_label(mode), **{
                               t.name: best[(t.name, api, mode)]["req_s"] for t in targets if (t.name, api, mode) in best}}
                               for api in apis for mode in modes]}, f, indent=1)
        if failed:
            print("failed: " + "; ".join(failed))
        return 1 if failed else 0
    finally:
        for proc in started:
            proc.stop()


if __name__ == "__main__":
    sys.exit(main())
