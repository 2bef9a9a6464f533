"""Fuzzing the sans-IO connection core and request decoding (Hypothesis): whatever bytes arrive,
in whatever chunks, the core yields requests or raises ProtocolError, never anything else, and
holds memory in proportion to the bytes that arrived, never to a size they claim.

Seeds are request frames built by hand (tests/test_connection_core.py) and the frames real clients
sent for every API they use (tests/fuzz_seeds.py), mutated: bit flips, truncations, overwritten
size and length fields, spliced frames. CI runs a bounded number of
examples; `KSHIM_FUZZ_EXAMPLES=100000 python -m pytest tests/test_fuzz_connection_core.py` runs
a long search.
"""
from __future__ import annotations

import os
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kshim.net.protocol import ConnectionCore, ProtocolError
from tests.fuzz_seeds import CLIENT_SEEDS
from tests.test_connection_core import SUPPORTED, api_versions, metadata_v1, produce_v3
from wire.records import encode_batch

EXAMPLES = int(os.environ.get("KSHIM_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SEEDS = [
    api_versions(0, 1), api_versions(3, 2), metadata_v1(3, ["a", "topic-b"]), metadata_v1(4),
    produce_v3(5, encode_batch([(b"k", b"v"), (None, b"x" * 300)])),
    produce_v3(6, b""),
    *CLIENT_SEEDS,
]
MAX_REQUEST = 1024 * 1024


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "int32", "int16", "insert", "splice"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[at:]
        elif kind == "int32" and at + 4 <= len(data):
            struct.pack_into(">i", data, at, draw(st.sampled_from([-1, 0, 1, 0x7FFFFFFF, -0x80000000, 1 << 20])))
        elif kind == "int16" and at + 2 <= len(data):
            struct.pack_into(">h", data, at, draw(st.sampled_from([-1, 0, 0x7FFF, -0x8000, 255])))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "splice":
            data += draw(st.sampled_from(SEEDS))
    return bytes(data)


def feed(data: bytes, chunks: list[int]) -> ConnectionCore:
    """Feed `data` as the server does (into the buffers the core hands out), taking requests after
    each read; any exception but ProtocolError fails the test."""
    core = ConnectionCore(SUPPORTED, MAX_REQUEST)
    pos, i = 0, 0
    while pos < len(data):
        with core.receive_buffer() as target:
            n = min(len(target), chunks[i % len(chunks)], len(data) - pos)
            target[:n] = data[pos:pos + n]
        core.received(n)
        pos += n
        i += 1
        # memory follows what arrived: at most twice it, plus the first buffers
        assert core.memory <= 2 * pos + 2 * ConnectionCore.FRAME_STEP + ConnectionCore.INITIAL_BUFFER
        try:
            while core.next_request() is not None:
                pass
        except ProtocolError:
            return core
    return core


@FUZZ
@given(mutated(), st.lists(st.integers(1, 4096), min_size=1, max_size=8))
def test_mutated_real_requests_yield_requests_or_protocol_errors(data, chunks):
    feed(data, chunks)


@FUZZ
@given(st.binary(max_size=2048), st.lists(st.integers(1, 512), min_size=1, max_size=4))
def test_random_bytes_yield_requests_or_protocol_errors(data, chunks):
    feed(data, chunks)


@FUZZ
@given(st.integers(ConnectionCore.LARGE_FRAME, MAX_REQUEST), st.integers(0, 200_000))
def test_a_claimed_size_costs_nothing_until_its_bytes_arrive(claimed, sent):
    data = struct.pack(">i", claimed) + bytes(min(sent, claimed))
    core = feed(data, [65536])
    assert core.memory <= 2 * len(data) + 2 * ConnectionCore.FRAME_STEP + ConnectionCore.INITIAL_BUFFER
