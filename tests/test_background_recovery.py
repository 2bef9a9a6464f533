"""A start after a crash (docs/storage.md, "Durability and recovery"): with recover_in_background
(the serving processes' setting) the logs no clean stop vouched for are recovered after the
broker serves, off the event loop; a request naming one waits for it, and it is recovered first;
the others are served meanwhile, and nothing a crash may not lose is lost."""
from __future__ import annotations

import re
import threading
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.log.log_dirs import CLEAN_MARKER
from kshim.log.offset_checkpoint import REPLICATION_OFFSET_CHECKPOINT, read_offsets
from kshim.net.broker_server import BrokerServer
from kshim.net.server import Server
from kshim.replica import manager as manager_module
from kshim.replica import recovery as recovery_module
from kshim.replication.client import BrokerConnection
from kshim.standalone import open_standalone
from tests.test_restart import batch, crash, filled
from tests.waiting import wait_until
from wire.errors import ErrorCode
from wire.records import decode_all

pytestmark = pytest.mark.anyio
N = 40


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def crashed(data_dir: Path) -> None:
    """N partitions of topic t with two records each, high watermarks checkpointed, then kill -9."""
    broker = await filled(data_dir, N)
    assert await broker.replica_manager.checkpoint_high_watermarks() == N
    crash(broker)


class Gate:
    """Holds the background recovery of every partition but those let through, until a permit is
    released for it (`release`) or all are let go (`all`)."""

    def __init__(self, monkeypatch, *through: int) -> None:
        self.through = set(through)
        self.permits = threading.Semaphore(0)
        self.all = threading.Event()
        self.opened: list[int] = []
        self.held: list[int] = []
        real = manager_module.ReplicaManager._open_replica

        def gated(rm, topic, info, level, log_dir, log_config=None):
            if threading.current_thread() is not threading.main_thread():  # the background's
                deadline = time.monotonic() + 30
                if info.index not in self.through and not self.all.is_set():
                    self.held.append(info.index)
                while info.index not in self.through and not self.all.is_set():
                    assert time.monotonic() < deadline, "the test never let it through"
                    if self.permits.acquire(timeout=0.01):
                        break
                self.opened.append(info.index)
            return real(rm, topic, info, level, log_dir, log_config)
        monkeypatch.setattr(manager_module.ReplicaManager, "_open_replica", gated)
        monkeypatch.setattr(recovery_module, "RECOVERY_BATCH", 1)


@asynccontextmanager
async def serving(data_dir: Path):
    broker = open_standalone(BrokerConfig(data_dir=data_dir, port=0, recover_in_background=True))
    try:
        async with anyio.create_task_group() as tg:
            broker.config.port = await tg.start(Server(BrokerServer(broker)).serve)
            conn = BrokerConnection("127.0.0.1", broker.config.port, "test")
            await conn.connect()
            try:
                yield broker, conn, tg
            finally:
                await conn.aclose()
                tg.cancel_scope.cancel()
    finally:
        broker.close()


async def produce(conn: BrokerConnection, index: int, value: bytes) -> tuple[int, int]:
    resp = await conn.request(0, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": index, "records": batch(value)}]}]})
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


async def fetch_values(conn: BrokerConnection, index: int) -> list[bytes]:
    resp = await conn.request(1, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                      "isolation_level": 1, "session_epoch": -1, "topics": [{
                                          "topic": "t", "partitions": [{"partition": index, "fetch_offset": 0,
                                                                        "partition_max_bytes": 1 << 20}]}]})
    part = resp.responses[0].partitions[0]
    assert part.error_code == ErrorCode.NONE
    return [r.value for r in decode_all(bytes(part.records or b""))]


async def test_a_request_waits_for_its_partition_which_is_recovered_first_while_others_wait(tmp_path, monkeypatch):
    await crashed(tmp_path)
    gate = Gate(monkeypatch, N - 1)
    async with serving(tmp_path) as (broker, conn, tg):
        rm = broker.replica_manager
        assert len(rm.recovering) == N and broker.partition("t", 5) is None  # served before any is open
        answer: list = []

        async def last() -> None:  # the last partition in the queue
            answer.append(await produce(conn, N - 1, b"three"))
        tg.start_soon(last)
        await wait_until(lambda: ("t", N - 1) in rm._recovery.asked)
        gate.permits.release()  # the first partition's batch (held) ends; the asked one goes next
        await wait_until(lambda: answer)
        assert answer == [(ErrorCode.NONE, 2)]
        assert await fetch_values(conn, N - 1) == [b"one", b"two", b"three"]
        assert sorted(k[1] for k in rm.recovering) == list(range(1, N - 1))  # the others still wait
        assert broker.partition("t", 5) is None
        # a checkpoint meanwhile keeps the high watermarks of those not recovered yet
        await rm.checkpoint_high_watermarks()
        saved = read_offsets(tmp_path / REPLICATION_OFFSET_CHECKPOINT)
        assert saved == {f"t-{i}": 3 if i == N - 1 else 2 for i in range(N)}
        gate.all.set()
        await wait_until(lambda: not rm.recovering, timeout_s=30)
        assert [broker.partition("t", i).log_end_offset for i in range(N)] == [2] * (N - 1) + [3]
        assert [broker.partition("t", i).high_watermark for i in range(N)] == [2] * (N - 1) + [3]
        assert await fetch_values(conn, 7) == [b"one", b"two"]
        assert sorted(gate.opened) == list(range(N))  # each recovered once


async def test_a_stop_while_recovering_leaves_the_rest_for_the_next_start(tmp_path, monkeypatch):
    await crashed(tmp_path)
    gate = Gate(monkeypatch, 0)
    async with serving(tmp_path) as (broker, conn, tg):
        assert await produce(conn, 0, b"three") == (ErrorCode.NONE, 2)
        await wait_until(lambda: gate.held)  # the next one is held
        tg.cancel_scope.cancel()  # the stop ...
        gate.all.set()  # ... while a batch is out: it ends (and is hosted), and nothing more is opened
    marked = (tmp_path / CLEAN_MARKER).read_text().split()
    # the clean stop vouches for the logs it opened, not for those it never recovered
    assert "t-0" in marked and len([i for i in range(N) if f"t-{i}" not in marked]) >= N - 3
    monkeypatch.undo()
    again = open_standalone(BrokerConfig(data_dir=tmp_path))  # recovers what is left, inline
    try:
        assert [again.partition("t", i).log_end_offset for i in range(N)] == [3] + [2] * (N - 1)
        assert [again.partition("t", i).high_watermark for i in range(N)] == [3] + [2] * (N - 1)
    finally:
        again.close()


async def test_a_topic_deleted_while_its_partitions_recover_is_deleted(tmp_path, monkeypatch):
    await crashed(tmp_path)
    gate = Gate(monkeypatch)
    async with serving(tmp_path) as (broker, conn, tg):
        rm = broker.replica_manager
        await broker.delete_topic("t")
        gate.all.set()
        await wait_until(lambda: not rm.recovering, timeout_s=30)
        # renamed for deletion at once (the files go file.delete.delay.ms later)
        await wait_until(lambda: not [p for p in tmp_path.iterdir() if re.fullmatch(r"t-\d+", p.name)], timeout_s=30)
        assert all(r.topic != "t" for r in rm.replicas())


async def test_without_the_setting_every_log_is_recovered_before_the_start_returns(tmp_path):
    await crashed(tmp_path)
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert not broker.replica_manager.recovering
        assert [broker.partition("t", i).log_end_offset for i in range(N)] == [2] * N
    finally:
        broker.close()


async def test_logs_recovered_while_the_first_image_is_still_prepared_are_kept(tmp_path):
    """A cluster broker's start after kill -9: its first image arrives after it serves, and
    preparing it (opening the offsets topic's partitions off the event loop) yields while the
    background recovery already runs, against the empty image of before. That image says nothing
    about the crashed logs: they are recovered once the image naming them is applied, never
    deleted with every acknowledged record in them."""
    from tests.test_replica_lifecycle import NoController, image
    topic_id, offsets_id = uuid.uuid4(), uuid.uuid4()
    first = Broker(BrokerConfig(data_dir=tmp_path, recover_in_background=True), NoController())
    await first.install_image(image(1, ("t", topic_id, 3), ("__consumer_offsets", offsets_id, 2)))
    for i in range(3):
        out = first.replica_manager.append(1, 5, [("t", i, batch(b"one")), ("t", i, batch(b"two"))])
        assert all(r.appended for r in out)
    crash(first)

    broker = Broker(BrokerConfig(data_dir=tmp_path, recover_in_background=True), NoController())
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(broker.recover_deferred)
            await broker.install_image(image(2, ("t", topic_id, 3), ("__consumer_offsets", offsets_id, 2)))
            await wait_until(lambda: all(broker.partition("t", i) is not None for i in range(3)), timeout_s=30)
            tg.cancel_scope.cancel()
        assert [broker.partition("t", i).log_end_offset for i in range(3)] == [2, 2, 2]
        assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(("-delete", "-stray"))]
    finally:
        broker.close()
