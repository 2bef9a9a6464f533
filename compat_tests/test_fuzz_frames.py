"""Fuzzed frames against a real broker over TCP (docs/robustness.md): mutated real requests on many
connections never crash it, never hit a handler bug (no "internal error" in its log), and never
stall a bystander: its ApiVersions are answered throughout, while a connection is halfway through a
frame (and each fuzzed frame the broker holds, waiting for the rest, too); afterwards producers and
consumers work as before.

CI sends a bounded number of frames; `KSHIM_FUZZ_FRAMES=20000 python -m pytest
compat_tests/test_fuzz_frames.py` sends more.
"""
from __future__ import annotations

import os
import random
import select
import socket

from compat_tests.kshim_process import KshimProcess
from compat_tests.raw_kafka import produce_and_consume
from compat_tests.test_connection_limits import answer, bystander, connect
from tests.test_connection_core import api_versions, produce_v3
from tests.test_fuzz_connection_core import SEEDS
from wire.records import encode_batch

FRAMES = int(os.environ.get("KSHIM_FUZZ_FRAMES", "600"))


def mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(4, len(data)) if len(data) > 4 else 0  # keep the size prefix mostly sane
        kind = rng.choice(["flip", "byte", "int32", "truncate_body"])
        if kind == "flip":
            data[at] ^= 1 << rng.randrange(8)
        elif kind == "byte":
            data[at] = rng.choice([0, 0x7F, 0x80, 0xFF])
        elif kind == "int32" and at + 4 <= len(data):
            data[at:at + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x10\x00\x00"])
        elif kind == "truncate_body" and len(data) > 12:
            del data[rng.randrange(12, len(data)):]
            data[:4] = (len(data) - 4).to_bytes(4, "big")  # a whole frame with a short body
    return bytes(data)


PROBE_ID = 0x7EADBEEF
ANSWER_EVERY = 50  # frames between a bystander's round trips (and after each frame the broker holds)


def probe(sock: socket.socket, frame: bytes) -> str:
    sock.settimeout(0.5)
    try:
        sock.sendall(frame + api_versions(0, PROBE_ID))
        buf = b""
        while True:  # answers come in order: skip the fuzzed frame's own answer, if any
            while len(buf) < 8 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
                chunk = sock.recv(65536)
                if not chunk:
                    return "closed"
                buf += chunk
            size = int.from_bytes(buf[:4], "big")
            if int.from_bytes(buf[4:8], "big") == PROBE_ID:
                return "answered"
            buf = buf[4 + size:]
    except socket.timeout:
        return "held"
    except OSError:
        return "closed"


def read_answer(sock: socket.socket) -> int:
    """The correlation id of the next answer on `sock`."""
    buf = b""
    while len(buf) < 8 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
        chunk = sock.recv(65536)
        assert chunk, "the broker closed the connection"
        buf += chunk
    return int.from_bytes(buf[4:8], "big")


def test_fuzzed_frames_do_not_crash_stall_or_hit_handler_bugs(tmp_path, topic_name):
    # the connection stopped halfway through a frame stays open for the whole attack
    broker = KshimProcess(tmp_path / "data", "--request-stall-timeout-ms", "3600000").start()
    try:
        produce_and_consume(broker.bootstrap, topic_name)
        rng = random.Random(20261124)
        frames = [mutate(rng, rng.choice(SEEDS)) for _ in range(FRAMES)]
        outcome = {"answered": 0, "closed": 0, "held": 0}
        with bystander(broker.bootstrap) as watcher, connect(broker.bootstrap) as halfway:
            # a request, then half of the next frame in the same packet: once the request is
            # answered, the broker has the half frame too, and waits for the rest, which never comes
            produce = produce_v3(2, encode_batch([(b"k", b"v" * 300)]))
            halfway.sendall(api_versions(0, 1) + produce[:len(produce) // 2])
            assert read_answer(halfway) == 1
            answer(watcher, "while a connection was halfway through a frame")
            # Each fuzzed frame, then an ApiVersions probe on the same connection: its answer means
            # the broker dealt with the frame (answered it or let it pass); a close means it refused
            # it; no answer within 0.5 s means it holds a frame still arriving (a size claimed
            # bigger than sent). Either of the last two: a new connection for the next. The
            # bystander is answered every ANSWER_EVERY frames and while each held frame's
            # connection is still open, the rest of its frame unsent: a broker that read a
            # connection's frame to its end before serving others would never answer it.
            sock: socket.socket | None = None
            try:
                for i, frame in enumerate(frames):
                    if sock is None:
                        sock = connect(broker.bootstrap)
                    kind = probe(sock, frame)
                    outcome[kind] += 1
                    if kind == "held" or i % ANSWER_EVERY == 0:
                        answer(watcher, f"after fuzzed frame {i} ({kind}), while a connection was halfway "
                                        f"through a frame")
                    if kind != "answered":
                        sock.close()
                        sock = None
            finally:
                if sock is not None:
                    sock.close()
            # the half frame was held throughout: its connection neither answered nor closed
            assert not select.select([halfway], [], [], 0)[0], "the half-sent frame's connection was closed"
        assert broker.proc.poll() is None, "the broker died"
        # the frames reached the broker: most were dealt with at once (answered or refused)
        print(f"{FRAMES} fuzzed frames: {outcome}")
        assert outcome["held"] < FRAMES // 10, outcome
        produce_and_consume(broker.bootstrap, topic_name, b"after the fuzz")
        assert "internal error" not in broker.logs() and "Traceback" not in broker.logs(), broker.logs()[-3000:]
    finally:
        broker.kill()
