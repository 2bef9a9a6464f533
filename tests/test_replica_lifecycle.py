"""Replicas opened, replaced and removed as images say (kshim/replica/manager.py,
kshim/log/partition_dir.py): opening is done off the event loop, a directory knows its topic id,
a topic deleted and created again while a broker was away does not bring back the old data,
stray replicas go, and removal renames at once and deletes in the background."""
from __future__ import annotations

import threading
import uuid
from pathlib import Path

import anyio
import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.cluster.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from kshim.log.meta_properties import ForeignMetadata
from kshim.log.partition_dir import METADATA_FILE, DirDeleter, read_topic_id, write_topic_id
from kshim.replica import FetchParams, FetchPartition
from kshim.standalone import open_standalone
from wire.records import decode_all, encode_batch

pytestmark = pytest.mark.anyio
WAIT_S = 10


@pytest.fixture
def anyio_backend():
    return "asyncio"


class NoController:
    """A broker fed images by hand: it never asks the controller anything."""
    connected = True
    node_id = 0
    broker_epoch = 1

    async def call(self, request):  # pragma: no cover - the tests never change metadata
        raise AssertionError(f"unexpected controller call {request}")

    async def alter_partition(self, *args):  # pragma: no cover
        raise AssertionError("unexpected AlterPartition")


def image(version: int, *topics: tuple[str, uuid.UUID, int]) -> MetadataImage:
    """Topics (name, id, partitions) led by broker 0 alone."""
    return MetadataImage(version, "c", 0, {0: BrokerInfo(0, "127.0.0.1", 9092)}, {
        name: TopicInfo(name, topic_id, {}, tuple(PartitionInfo(i, (0,), 0, 0, (0,)) for i in range(n)))
        for name, topic_id, n in topics})


def broker_on(data_dir: Path, delete_delay_ms: int | None = None) -> Broker:
    """`delete_delay_ms`: the broker's log.segment.delete.delay.ms (default Kafka's 60 s)."""
    defaults = {} if delete_delay_ms is None else {"log.segment.delete.delay.ms": str(delete_delay_ms)}
    return Broker(BrokerConfig(data_dir=data_dir, topic_defaults=defaults), NoController())  # type: ignore[arg-type]


def renamed(data_dir: Path, suffix: str) -> list[str]:
    """The partition directories renamed aside with `suffix` ("-delete", "-stray"), by old name."""
    return sorted(p.name.split(".")[0] for p in data_dir.iterdir() if p.name.endswith(suffix))


def values(broker: Broker, topic: str = "t") -> list[bytes]:
    (result,) = broker.replica_manager.fetch(FetchParams(-1, 0, 0, 1 << 20, 0), [FetchPartition(topic, 0, 0, 1 << 20)])
    return [r.value for r in decode_all(bytes(result.records or b""))]


async def produce(broker: Broker, *vals: bytes, topic: str = "t") -> None:
    result = await broker.replica_manager.append_and_wait(topic, 0, encode_batch([(None, v) for v in vals]), WAIT_S)
    assert result.error == 0


def test_topic_id_file_round_trips_in_kafkas_format(tmp_path):
    topic_id = uuid.uuid4()
    write_topic_id(tmp_path, topic_id)
    lines = (tmp_path / METADATA_FILE).read_text().splitlines()
    assert lines[0] == "version: 0" and lines[1].startswith("topic_id: ") and "=" not in lines[1]
    assert read_topic_id(tmp_path) == topic_id
    (tmp_path / METADATA_FILE).write_text("garbage")
    assert read_topic_id(tmp_path) is None
    assert read_topic_id(tmp_path / "absent") is None


async def test_many_new_replicas_are_opened_off_the_event_loop(tmp_path):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path, max_partitions_per_broker=1000))
    opened_on: list[threading.Thread] = []
    original = broker.replica_manager._open_replica

    def spy(*args):
        opened_on.append(threading.current_thread())
        return original(*args)

    broker.replica_manager._open_replica = spy  # type: ignore[method-assign]
    try:
        await broker.create_topic("many", 100)
        assert len(opened_on) == 100
        assert threading.main_thread() not in opened_on
        assert len(broker.replica_manager.replicas()) == 100
        for index in (0, 99):
            p = broker.partition("many", index)
            assert p is not None and read_topic_id(p.directory) == broker.topics["many"].topic_id
    finally:
        broker.close()


async def test_a_topic_created_again_while_away_does_not_bring_back_the_old_data(tmp_path):
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    broker = broker_on(tmp_path)
    await broker.install_image(image(1, ("t", old_id, 1)))
    await produce(broker, b"old-1", b"old-2")
    broker.close()

    # the broker was away while "t" was deleted and created again: its image names a new id; the
    # old data is set aside as a stray, deleted once file.delete.delay.ms has passed
    broker = broker_on(tmp_path)
    try:
        await broker.install_image(image(5, ("t", new_id, 1)))
        assert values(broker) == []
        await produce(broker, b"new-1")
        assert values(broker) == [b"new-1"]
        assert read_topic_id(tmp_path / "t-0") == new_id
        (aside,) = [p for p in tmp_path.iterdir() if p.name.endswith("-stray")]
        assert aside.name.startswith("t-0.") and read_topic_id(aside) == old_id
        assert not broker.replica_manager.deleter.wait_idle(0.2)  # kept for the delay
    finally:
        broker.close()

    broker = broker_on(tmp_path)  # the same id again: the data is kept
    try:
        await broker.install_image(image(6, ("t", new_id, 1)))
        assert values(broker) == [b"new-1"]
    finally:
        broker.close()


async def test_stray_replicas_are_renamed_at_the_first_image_and_deleted_after_the_delay(tmp_path, caplog):
    gone, kept = uuid.uuid4(), uuid.uuid4()
    broker = broker_on(tmp_path)
    await broker.install_image(image(1, ("gone", gone, 2), ("kept", kept, 1)))
    await produce(broker, b"x", topic="kept")
    broker.close()
    (tmp_path / "not-a-partition").mkdir()
    (tmp_path / "legacy-0").mkdir()  # an older kshim's directory carries no topic id: left alone

    broker = broker_on(tmp_path, delete_delay_ms=300)
    try:
        await broker.install_image(image(7, ("kept", kept, 1)))
        assert renamed(tmp_path, "-stray") == ["gone-0", "gone-1"]  # at once, with a warning each
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "stray replica" in r.getMessage()]
        assert len(warned) == 2 and all(str(gone) in w and "bytes" in w for w in warned), warned
        assert broker.replica_manager.deleter.wait_idle(WAIT_S)  # then deleted, the delay past
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["kept-0", "legacy-0", "not-a-partition"]
        assert values(broker, "kept") == [b"x"]
    finally:
        broker.close()


async def test_a_deleted_topic_is_renamed_at_once_and_deleted_after_the_delay(tmp_path):
    topic_id = uuid.uuid4()
    broker = broker_on(tmp_path, delete_delay_ms=300)
    try:
        await broker.install_image(image(1, ("t", topic_id, 1)))
        await produce(broker, b"a")
        await broker.install_image(image(2))
        assert not (tmp_path / "t-0").exists() and broker.partition("t", 0) is None
        assert renamed(tmp_path, "-delete") == ["t-0"]
        assert broker.replica_manager.deleter.wait_idle(WAIT_S)
        assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []
    finally:
        broker.close()


def test_leftovers_renamed_for_deletion_are_deleted_at_the_next_start(tmp_path):
    leftover = tmp_path / f"t-0.{uuid.uuid4().hex}-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x" * 100)
    lookalike = tmp_path / "t-0.delete"  # not our suffix: kept
    lookalike.mkdir()
    deleter = DirDeleter(delay_ms=0)
    assert deleter.sweep(tmp_path) == 1
    assert deleter.wait_idle(WAIT_S)
    assert not leftover.exists() and lookalike.exists()


async def test_images_install_one_at_a_time_in_order(tmp_path):
    broker = broker_on(tmp_path)
    ids = [uuid.uuid4() for _ in range(3)]
    try:
        async with anyio.create_task_group() as tg:
            for version, topic_id in enumerate(ids, start=1):
                tg.start_soon(broker.install_image, image(version, (f"t{version}", topic_id, 40)))
        assert broker.image.version == 3
        # a later image that drops a topic wins even if an earlier one was still opening it
        assert {r.topic for r in broker.replicas()} == {"t3"}
        await broker.install_image(image(2, ("t2", ids[1], 40)))  # older: ignored
        assert broker.image.version == 3
    finally:
        broker.close()


async def test_metadata_of_another_cluster_is_refused_before_any_data_is_touched(tmp_path):
    """The controller's state lost or replaced: its image names none of the data on disk, which
    would all go as strays. The log dir remembers its cluster (meta.properties, as Kafka's), and
    the broker refuses such an image instead."""
    topic_id = uuid.uuid4()
    broker = broker_on(tmp_path, delete_delay_ms=0)
    await broker.install_image(image(1, ("t", topic_id, 1)))
    await produce(broker, b"kept")
    broker.close()
    assert "cluster.id=c" in (tmp_path / "meta.properties").read_text()

    broker = broker_on(tmp_path, delete_delay_ms=0)
    foreign = image(3, ("t", uuid.uuid4(), 1))
    foreign = MetadataImage(foreign.version, "another-cluster", 0, foreign.brokers, foreign.topics)
    try:
        with pytest.raises(ForeignMetadata, match="another-cluster"):
            await broker.install_image(foreign)
        assert broker.image.version == 0 and broker.partition("t", 0) is None
    finally:
        broker.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["t-0"]
    broker = broker_on(tmp_path)
    try:
        await broker.install_image(image(4, ("t", topic_id, 1)))
        assert values(broker) == [b"kept"]
    finally:
        broker.close()
