"""Several log directories per broker (kshim/log/log_dirs.py, ReplicaManager): placement on the
dir with the fewest replicas, one dir per replica, a replica in two dirs refused at start,
DescribeLogDirs per dir, and AlterReplicaLogDirs moving a replica while appends go on (the future
replica, the swap, a restart in the middle of a move)."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

import anyio
import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.log.dirlock import DataDirInUse
from kshim.log.log_dirs import MOVE_COMPLETE, DuplicateReplica, future_name, open_log_dirs
from kshim.net.handlers import RequestContext
from kshim.security.acls import AuthorizerConfig
from kshim.standalone import open_standalone
from tests.nodes import served
from tests.test_admin_handlers import create, new_topic
from wire import codec
from wire.errors import ErrorCode
from wire.headers import RequestHeader
from wire.records import decode_all, encode_batch

alter_dirs = importlib.import_module("kshim.net.handlers.34_alter_replica_log_dirs")
describe_dirs = importlib.import_module("kshim.net.handlers.35_describe_log_dirs")
pytestmark = [pytest.mark.anyio, pytest.mark.unit]
WAIT_S = 20


@pytest.fixture
def anyio_backend():
    return "asyncio"


def open_on(tmp_path: Path, **kw) -> Broker:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir(exist_ok=True)
    return open_standalone(BrokerConfig(data_dir=tmp_path / "data", log_dirs=dirs, **kw))


async def call(broker: Broker, module, version: int, body: dict, principal: str = "User:ANONYMOUS"):
    key = module.API_KEY
    req = codec.decode(key, version, "request", codec.encode(key, version, "request", body), exact=True)
    ctx = RequestContext(served(broker), RequestHeader(key, version, 1, "test", 0), "127.0.0.1:1", {}, principal)
    resp = await module.handle(ctx, req)
    return codec.decode(key, version, "response", codec.encode(key, version, "response", resp), exact=True)


def where(broker: Broker) -> dict[tuple[str, int], str]:
    return {(r.topic, r.index): r.directory.parent.name for r in broker.replicas()}


def values(broker: Broker, topic: str, index: int = 0) -> list[bytes]:
    p = broker.partition(topic, index)
    out = []
    offset = p.log_start_offset
    for _ in range(10_000):
        if offset >= p.log_end_offset:
            break
        data = p.log.read(offset, 1 << 20)
        batch = decode_all(data)
        out += [r.value for r in batch]
        offset = batch[-1].offset + 1
    return out


async def alter(broker: Broker, path: Path | str, topic: str, *indexes: int, version: int = 2, **kw):
    resp = await call(broker, alter_dirs, version, {"dirs": [
        {"path": str(path), "topics": [{"name": topic, "partitions": list(indexes)}]}]}, **kw)
    return {(t.topic_name, p.partition_index): p.error_code for t in resp.results for p in t.partitions}


async def describe(broker: Broker, version: int = 4):
    resp = await call(broker, describe_dirs, version, {"topics": None})
    return {r.log_dir: (r.error_code, {(t.name, p.partition_index, p.is_future_key): p for t in r.topics
                                       for p in t.partitions}) for r in resp.results}


async def test_new_replicas_go_to_the_dir_with_the_fewest(tmp_path):
    broker = open_on(tmp_path)
    try:
        await create(broker, new_topic("t", 4), new_topic("u", 3))
        placed = where(broker)
        counts = {d: list(placed.values()).count(d) for d in ("a", "b")}
        assert counts == {"a": 4, "b": 3}  # alternating, the first dir taking ties
        for (topic, index), d in placed.items():  # each replica in exactly one dir
            assert (tmp_path / d / f"{topic}-{index}").is_dir()
            other = "b" if d == "a" else "a"
            assert not (tmp_path / other / f"{topic}-{index}").exists()
        assert not any(p.name.startswith("t-") for p in (tmp_path / "data").iterdir())
        dirs = await describe(broker)
        assert set(dirs) == {str(tmp_path / "a"), str(tmp_path / "b")}
        assert {k[:2] for k in dirs[str(tmp_path / "a")][1]} == {k for k, d in placed.items() if d == "a"}
    finally:
        broker.close()
    broker = open_on(tmp_path)  # a restart finds each replica where it was
    try:
        assert where(broker) == placed
    finally:
        broker.close()


async def test_a_replica_in_two_dirs_is_refused_at_start(tmp_path):
    broker = open_on(tmp_path)
    await create(broker, new_topic("t", 1))
    d = where(broker)[("t", 0)]
    broker.close()
    other = tmp_path / ("b" if d == "a" else "a")
    (other / "t-0").mkdir()
    dirs = [tmp_path / "a", tmp_path / "b"]
    with pytest.raises(DuplicateReplica, match="t-0 is in two log directories"):
        open_log_dirs(dirs, tmp_path / "data", "test")
    with pytest.raises(DuplicateReplica):
        open_on(tmp_path)
    (other / "t-0").rmdir()
    locks = open_log_dirs(dirs, tmp_path / "data", "test")
    with pytest.raises(DataDirInUse):  # every log dir is locked, one process each
        open_log_dirs([tmp_path / "b"], tmp_path / "data", "other")
    for lock in locks:
        lock.release()


async def test_describe_log_dirs_storage_error_is_per_dir(tmp_path):
    broker = open_on(tmp_path)
    try:
        await create(broker, new_topic("t", 2))
        os.rename(tmp_path / "b", tmp_path / "b-gone")
        dirs = await describe(broker, version=5)
        assert dirs[str(tmp_path / "b")][0] == ErrorCode.KAFKA_STORAGE_ERROR
        assert dirs[str(tmp_path / "a")][0] == 0 and dirs[str(tmp_path / "a")][1]
        assert await alter(broker, tmp_path / "b", "t", 0) == {("t", 0): ErrorCode.KAFKA_STORAGE_ERROR}
        os.rename(tmp_path / "b-gone", tmp_path / "b")
    finally:
        broker.close()


async def test_alter_replica_log_dirs_errors(tmp_path):
    broker = open_on(tmp_path)
    try:
        await create(broker, new_topic("t", 1))
        assert await alter(broker, tmp_path / "nope", "t", 0, version=1) == {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND}
        assert await alter(broker, "a", "t", 0) == {("t", 0): ErrorCode.LOG_DIR_NOT_FOUND}  # not absolute
        current = tmp_path / where(broker)[("t", 0)]
        assert await alter(broker, current, "t", 0) == {("t", 0): 0}  # already there: nothing moves
        assert not broker.replica_manager.moves
        # not hosted: REPLICA_NOT_AVAILABLE, and a later replica is created there
        assert await alter(broker, tmp_path / "b", "later", 0) == {("later", 0): ErrorCode.REPLICA_NOT_AVAILABLE}
        await create(broker, new_topic("later", 1))
        assert where(broker)[("later", 0)] == "b"
        assert await alter(broker, tmp_path / "a", "x" * 240, 0) == {("x" * 240, 0): ErrorCode.INVALID_TOPIC_EXCEPTION}
    finally:
        broker.close()


async def test_alter_replica_log_dirs_needs_alter_on_the_cluster(tmp_path):
    broker = open_on(tmp_path, authorizer=AuthorizerConfig(True, frozenset({"User:admin"})))
    try:
        await broker.create_topic("t", 1)
        out = await alter(broker, tmp_path / "b", "t", 0, principal="User:bob")
        assert out == {("t", 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
        resp = await call(broker, describe_dirs, 4, {"topics": None}, principal="User:bob")
        assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not resp.results
        target = tmp_path / ("b" if where(broker)[("t", 0)] == "a" else "a")
        assert await alter(broker, target, "t", 0, principal="User:admin") == {("t", 0): 0}
    finally:
        broker.close()


async def test_a_move_under_appends_loses_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr("kshim.replica.moves.MOVE_FINAL_BYTES", 4096)  # several rounds
    broker = open_on(tmp_path)
    manager = broker.replica_manager
    sent: list[bytes] = []
    try:
        await create(broker, new_topic("t", 1, configs={"segment.bytes": "20000"}))
        source = broker.partition("t", 0).directory
        target_dir = tmp_path / ("b" if source.parent.name == "a" else "a")
        for i in range(300):
            value = b"before-%d-" % i + b"x" * 200
            assert broker.partition("t", 0).append(encode_batch([(None, value)])).error == 0
            sent.append(value)
        seen_future = False
        async with anyio.create_task_group() as tg:
            tg.start_soon(manager.run_moves)
            assert await alter(broker, target_dir, "t", 0) == {("t", 0): 0}
            with anyio.fail_after(WAIT_S):
                for i in range(100_000):
                    if ("t", 0) not in manager.moves:
                        break
                    if i % 5 == 0:  # DescribeLogDirs shows the future replica under the destination
                        _, parts = (await describe(broker))[str(target_dir)]
                        seen_future = seen_future or ("t", 0, True) in parts
                    value = b"during-%d-" % i + b"y" * 200
                    assert broker.partition("t", 0).append(encode_batch([(None, value)])).error == 0
                    sent.append(value)
                    await anyio.sleep(0.001)
            tg.cancel_scope.cancel()
        replica = broker.partition("t", 0)
        assert replica.directory == target_dir / "t-0" and seen_future
        assert not source.exists() or not any(source.iterdir())
        assert not [p for p in target_dir.iterdir() if p.name.endswith("-future")]
        for i in range(20):  # appends go on in the new dir
            value = b"after-%d" % i
            assert replica.append(encode_batch([(None, value)])).error == 0
            sent.append(value)
        assert values(broker, "t") == sent
        assert not source.exists()  # renamed aside at once, deleted file.delete.delay.ms later
        _, parts = (await describe(broker))[str(target_dir)]
        assert set(parts) == {("t", 0, False)} and parts[("t", 0, False)].partition_size == replica.log.size_bytes
    finally:
        broker.close()
    broker = open_on(tmp_path)
    try:
        assert broker.partition("t", 0).directory == target_dir / "t-0" and values(broker, "t") == sent
    finally:
        broker.close()


async def test_a_restart_finishes_a_complete_move_and_restarts_an_incomplete_one(tmp_path):
    broker = open_on(tmp_path)
    await create(broker, new_topic("t", 2))
    for index in (0, 1):
        assert broker.partition("t", index).append(encode_batch([(None, b"v%d" % index)])).error == 0
    placed = where(broker)
    broker.close()
    # t-0: a complete copy was made and marked, then the broker stopped before the swap
    src0 = tmp_path / placed[("t", 0)] / "t-0"
    dst0 = tmp_path / ("b" if placed[("t", 0)] == "a" else "a")
    future0 = dst0 / future_name("t-0", "1" * 32)
    future0.mkdir()
    for f in src0.iterdir():
        (future0 / f.name).write_bytes(f.read_bytes())
    (future0 / MOVE_COMPLETE).touch()
    # t-1: a half-made copy
    dst1 = tmp_path / ("b" if placed[("t", 1)] == "a" else "a")
    future1 = dst1 / future_name("t-1", "2" * 32)
    future1.mkdir()
    (future1 / "00000000000000000000.log").write_bytes(b"partial")
    broker = open_on(tmp_path)
    manager = broker.replica_manager
    try:
        assert broker.partition("t", 0).directory == dst0 / "t-0" and values(broker, "t", 0) == [b"v0"]
        assert not (dst0 / "t-0" / MOVE_COMPLETE).exists() and not future0.exists()
        assert broker.partition("t", 1).directory.parent.name == placed[("t", 1)]  # still the source
        assert ("t", 1) in manager.moves and manager.moves[("t", 1)].destination == dst1  # started over
        async with anyio.create_task_group() as tg:
            tg.start_soon(manager.run_moves)
            with anyio.fail_after(WAIT_S):
                while manager.moves:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        assert broker.partition("t", 1).directory == dst1 / "t-1" and values(broker, "t", 1) == [b"v1"]
    finally:
        broker.close()


def test_each_broker_of_a_cluster_gets_its_own_subdirectory_of_each_log_dir(tmp_path):
    from kshim.controller.process import ClusterSettings
    settings = ClusterSettings(brokers=3, port=9092, data_dir=tmp_path, log_dirs=[tmp_path / "a", tmp_path / "b"])
    cmd = settings.broker_command(2)
    assert cmd[cmd.index("--log-dirs") + 1] == f"{tmp_path / 'a' / 'broker-2'},{tmp_path / 'b' / 'broker-2'}"
    assert "--log-dirs" not in ClusterSettings(brokers=1, port=9092, data_dir=tmp_path).broker_command(0)
