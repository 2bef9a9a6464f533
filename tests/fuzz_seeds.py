"""Request frames real clients sent (tests/fuzz_seeds.bin), the fuzzers' seeds beside the frames
built by hand: every API confluent-kafka and kafka-python use, at the versions they chose.
`python -m compat_tests.capture_frames` records them again (after a client or version change)."""
from __future__ import annotations

import struct
from pathlib import Path

SEEDS_FILE = Path(__file__).with_name("fuzz_seeds.bin")


def load_seeds(path: Path = SEEDS_FILE) -> list[bytes]:
    """The recorded frames, each with its int32 size prefix, as sent on the wire."""
    data, out, pos = path.read_bytes(), [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        out.append(data[pos:pos + 4 + size])
        pos += 4 + size
    return out


CLIENT_SEEDS = load_seeds()
