"""The flush policy through the public config path: a topic's `flush.messages`, set when it is
created or altered later, reaches its log and makes appends fsync; without it nothing is fsynced
before an acknowledgement (docs/consistency.md)."""
from __future__ import annotations

import os

import pytest

from kshim.broker import BrokerConfig
from kshim.standalone import open_standalone
from wire.records import encode_batch


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    yield b
    b.close()


@pytest.fixture
def fsyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    return calls


def append(broker, topic: str, count: int) -> None:
    result = broker.partition(topic, 0).append(encode_batch([(None, b"v%d" % i) for i in range(count)]))
    assert result.error == 0 and result.appended_batches == 1


@pytest.mark.anyio
async def test_flush_messages_set_at_creation_fsyncs_every_append(broker, fsyncs):
    await broker.create_topic("flushed", 1, {"flush.messages": "1"})
    await broker.create_topic("plain", 1)
    append(broker, "plain", 1)
    assert fsyncs == []  # no policy: acknowledged without fsync
    for n in range(1, 4):
        append(broker, "flushed", 1)
        assert len(fsyncs) >= n, f"append {n} of a flush.messages=1 topic was not fsynced"


@pytest.mark.anyio
async def test_flush_messages_altered_later_takes_effect(broker, fsyncs):
    await broker.create_topic("t", 1)
    append(broker, "t", 2)
    assert fsyncs == []
    await broker.set_topic_configs("t", {"flush.messages": "4"})
    append(broker, "t", 1)
    assert fsyncs == []  # 3 records since the last flush
    append(broker, "t", 1)
    assert fsyncs, "the fourth unflushed record did not fsync"
