"""The leader epoch cache (kshim.log.epochs) and the OffsetForLeaderEpoch handler (API 23).

Cache semantics are Kafka's LeaderEpochFileCache (see the module docstring for where we differ);
the handler is run against a fake broker, its requests and responses round-tripped through the
codec so field names are checked against the schema for every version.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from pathlib import Path

import pytest

from kshim.broker import BrokerConfig
from kshim.log.log import Log, LogConfig
from kshim.net.handlers import RequestContext
from kshim.log.epochs import (
    CHECKPOINT_NAME, CorruptCheckpoint, LeaderEpochCache, read_checkpoint,
)
from kshim.replica import ReplicaManager
from kshim.replica.partition import Partition
from wire import codec
from wire.errors import ErrorCode
from wire.headers import RequestHeader
from wire.records import BatchHeader, encode_batch

handler = importlib.import_module("kshim.net.handlers.23_offset_for_leader_epoch")


def cache_with(directory: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    directory.mkdir(parents=True, exist_ok=True)
    cache = LeaderEpochCache(directory)
    for epoch, start in entries:
        cache.assign(epoch, start)
    assert cache.entries() == list(entries)
    return cache


def on_disk(directory: Path) -> list[tuple[int, int]]:
    return read_checkpoint(directory / CHECKPOINT_NAME)


def header(epoch: int, base: int) -> BatchHeader:
    return BatchHeader(base, 100, epoch, 2, 0, 0, 0, 0, 0, -1, -1, -1, 1)


# ---------------------------------------------------------------------------------------------- assign
def test_empty_cache(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.entries() == [] and cache.latest_epoch == -1 and cache.latest_entry is None
    assert cache.needs_rebuild  # no checkpoint yet
    assert cache.end_offset_for(0, 10) == (-1, -1)
    assert cache.epoch_for_offset(0) is None
    assert not (tmp_path / CHECKPOINT_NAME).exists()  # nothing written until something changes


def test_assign_appends_newer_epochs_and_persists(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(0, 0)
    cache.assign(2, 10)
    cache.assign(5, 30)
    assert cache.entries() == [(0, 0), (2, 10), (5, 30)]
    assert cache.latest_epoch == 5 and cache.latest_entry == (5, 30) and cache.earliest_entry == (0, 0)
    assert on_disk(tmp_path) == [(0, 0), (2, 10), (5, 30)]
    assert (tmp_path / CHECKPOINT_NAME).read_text() == "0\n3\n0 0\n2 10\n5 30\n"


def test_assign_same_epoch_later_offset_is_a_no_op(tmp_path):
    cache = cache_with(tmp_path, (1, 0), (3, 10))
    (tmp_path / CHECKPOINT_NAME).unlink()
    cache.assign(3, 10)
    cache.assign(3, 11)
    cache.assign(3, 500)
    assert cache.entries() == [(1, 0), (3, 10)]
    assert not (tmp_path / CHECKPOINT_NAME).exists(), "no rewrite on the append path"


def test_assign_lower_epoch_is_ignored(tmp_path):
    cache = cache_with(tmp_path, (1, 0), (3, 10))
    cache.assign(2, 20)
    cache.assign(0, 30)
    assert cache.entries() == [(1, 0), (3, 10)]


def test_assign_negative_is_ignored(tmp_path):
    cache = cache_with(tmp_path, (1, 0))
    cache.assign(-1, 5)  # an unstamped batch
    cache.assign(2, -1)
    assert cache.entries() == [(1, 0)]


def test_higher_epoch_below_latest_start_drops_entries_at_or_after_it(tmp_path):
    cache = cache_with(tmp_path, (1, 0), (2, 10), (3, 20))
    cache.assign(4, 10)
    assert cache.entries() == [(1, 0), (4, 10)]
    assert on_disk(tmp_path) == [(1, 0), (4, 10)]
    cache.assign(5, 5)
    assert cache.entries() == [(1, 0), (5, 5)]
    cache.assign(6, 0)
    assert cache.entries() == [(6, 0)]


def test_same_epoch_at_lower_start_moves_it_down(tmp_path):
    # Kafka's isUpdateNeeded: same epoch, lower start offset -> replace
    cache = cache_with(tmp_path, (1, 0), (3, 100))
    cache.assign(3, 90)
    assert cache.entries() == [(1, 0), (3, 90)]


def test_stale_leader_entry_is_dropped_by_a_write_at_its_offset(tmp_path):
    # KIP-279: we led epoch 5 from offset 100 without writing; epoch 4 data now arrives at 100
    cache = cache_with(tmp_path, (3, 0), (4, 50), (5, 100))
    cache.assign(4, 100)
    assert cache.entries() == [(3, 0), (4, 50)], "epoch 4's true start is kept"
    cache.assign(6, 150)
    assert cache.entries() == [(3, 0), (4, 50), (6, 150)]


def test_observe_replays_known_history_without_change(tmp_path):
    cache = cache_with(tmp_path, (3, 0), (4, 50), (5, 100))
    for epoch, base in [(3, 0), (3, 20), (4, 50), (4, 70), (5, 100), (5, 120)]:
        cache.observe(epoch, base)
    assert cache.entries() == [(3, 0), (4, 50), (5, 100)]
    cache.observe(7, 140)  # the checkpoint missed the last epoch change (crash)
    assert cache.entries() == [(3, 0), (4, 50), (5, 100), (7, 140)]


# ---------------------------------------------------------------------------------------------- end_offset_for
@pytest.mark.parametrize("requested, expected", [
    (-1, (-1, -1)),      # UNDEFINED asked: UNDEFINED answered
    (-7, (-1, -1)),
    (0, (0, 10)),        # below the first epoch: itself, ending at the first start (KAFKA-7415)
    (1, (1, 10)),
    (2, (2, 20)),        # an epoch in the cache: ends where the next begins
    (3, (2, 20)),        # between two epochs: the largest at or below it, the next one's start
    (4, (4, 50)),
    (5, (4, 50)),
    (6, (6, 100)),       # the latest epoch: the log end offset
    (7, (-1, -1)),       # above the latest: UNDEFINED
    (99, (-1, -1)),
])
def test_end_offset_for(tmp_path, requested, expected):
    cache = cache_with(tmp_path, (2, 10), (4, 20), (6, 50))
    assert cache.end_offset_for(requested, 100) == expected


def test_end_offset_for_single_entry(tmp_path):
    cache = cache_with(tmp_path, (3, 0))
    assert cache.end_offset_for(3, 42) == (3, 42)
    assert cache.end_offset_for(2, 42) == (2, 0)
    assert cache.end_offset_for(4, 42) == (-1, -1)


def test_epoch_for_offset(tmp_path):
    cache = cache_with(tmp_path, (2, 10), (4, 20), (6, 50))
    assert [cache.epoch_for_offset(o) for o in (0, 9, 10, 19, 20, 49, 50, 1000)] == \
        [None, None, 2, 2, 4, 4, 6, 6]


# ---------------------------------------------------------------------------------------------- truncation
def test_truncate_from_end(tmp_path):
    cache = cache_with(tmp_path, (2, 10), (4, 20), (6, 50))
    cache.truncate_from_end(51)
    assert cache.entries() == [(2, 10), (4, 20), (6, 50)]
    cache.truncate_from_end(50)  # an entry at the new end has no data left
    assert cache.entries() == [(2, 10), (4, 20)] and cache.latest_epoch == 4
    assert on_disk(tmp_path) == [(2, 10), (4, 20)]
    cache.truncate_from_end(15)
    assert cache.entries() == [(2, 10)]
    cache.truncate_from_end(-1)  # ignored, as Kafka does
    assert cache.entries() == [(2, 10)]
    cache.truncate_from_end(0)
    assert cache.entries() == [] and cache.latest_epoch == -1
    assert on_disk(tmp_path) == []


def test_truncate_from_start(tmp_path):
    cache = cache_with(tmp_path, (2, 10), (4, 20), (6, 50))
    cache.truncate_from_start(5)  # before the first entry: nothing to do
    assert cache.entries() == [(2, 10), (4, 20), (6, 50)]
    cache.truncate_from_start(10)
    assert cache.entries() == [(2, 10), (4, 20), (6, 50)]
    cache.truncate_from_start(15)  # inside epoch 2: its start moves up
    assert cache.entries() == [(2, 15), (4, 20), (6, 50)]
    cache.truncate_from_start(20)  # exactly at epoch 4's start: epoch 2 goes, 4 stays
    assert cache.entries() == [(4, 20), (6, 50)]
    cache.truncate_from_start(70)
    assert cache.entries() == [(6, 70)]
    assert on_disk(tmp_path) == [(6, 70)]
    assert cache.end_offset_for(5, 100) == (5, 70)


def test_clear(tmp_path):
    cache = cache_with(tmp_path, (2, 10), (4, 20))
    cache.clear()
    assert cache.entries() == [] and cache.latest_epoch == -1 and on_disk(tmp_path) == []


# ---------------------------------------------------------------------------------------------- persistence
def test_reload(tmp_path):
    cache_with(tmp_path, (0, 0), (2, 10), (5, 30)).truncate_from_start(12)
    again = LeaderEpochCache(tmp_path)
    assert not again.needs_rebuild
    assert again.entries() == [(2, 12), (5, 30)] and again.latest_epoch == 5
    again.truncate_from_end(30)
    assert LeaderEpochCache(tmp_path).entries() == [(2, 12)]


def test_write_leaves_no_temporary_file(tmp_path):
    cache_with(tmp_path, (0, 0), (1, 5))
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_NAME]


def test_an_overwrite_torn_before_its_truncation_needs_rebuild(tmp_path):
    """The checkpoint is overwritten in place (no fsync asked); a crash between the write and the
    truncation leaves the old tail after a shorter new text, which its count line exposes."""
    path = tmp_path / CHECKPOINT_NAME
    cache = cache_with(tmp_path, (0, 0), (2, 10), (5, 30))
    old, inode = path.read_text(), path.stat().st_ino
    cache.truncate_from_end(10)
    new = path.read_text()
    assert path.stat().st_ino == inode and new == "0\n1\n0 0\n"
    path.write_text(new + old[len(new):])
    assert LeaderEpochCache(tmp_path).needs_rebuild


def test_fsync_option(tmp_path):
    cache = LeaderEpochCache(tmp_path, fsync=True)
    cache.assign(1, 0)
    assert LeaderEpochCache(tmp_path).entries() == [(1, 0)]


def test_deleted_directory_is_not_recreated(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    cache = LeaderEpochCache(d)
    d.rmdir()
    cache.assign(1, 0)
    assert not d.exists() and cache.entries() == [(1, 0)]


@pytest.mark.parametrize("text", [
    "",
    "garbage",
    "1\n1\n0 0\n",          # unknown version
    "0\n2\n0 0\n",          # count mismatch
    "0\n1\n0 0\n1 5\n",
    "0\n1\n0\n",            # short line
    "0\n1\nx 0\n",
    "0\n1\n-1 0\n",         # negative
    "0\n2\n3 0\n2 5\n",     # epochs not increasing
    "0\n2\n1 5\n2 5\n",     # starts not increasing
])
def test_corrupt_checkpoint_needs_rebuild(tmp_path, text):
    (tmp_path / CHECKPOINT_NAME).write_text(text)
    cache = LeaderEpochCache(tmp_path)
    assert cache.needs_rebuild and cache.entries() == []
    with pytest.raises(CorruptCheckpoint):
        read_checkpoint(tmp_path / CHECKPOINT_NAME)


def test_checkpoint_without_trailing_newline_is_fine(tmp_path):
    (tmp_path / CHECKPOINT_NAME).write_text("0\n1\n0 0")
    cache = LeaderEpochCache(tmp_path)
    assert not cache.needs_rebuild and cache.entries() == [(0, 0)]


def test_binary_checkpoint_needs_rebuild(tmp_path):
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"\x00\xff\xfe")
    assert LeaderEpochCache(tmp_path).needs_rebuild


def test_rebuild_from_headers(tmp_path):
    headers = [header(-1, 0), header(0, 0), header(0, 3), header(2, 7), header(2, 9), header(5, 12)]
    cache = LeaderEpochCache.rebuild(tmp_path, headers)
    assert cache.entries() == [(0, 0), (2, 7), (5, 12)] and not cache.needs_rebuild
    assert on_disk(tmp_path) == [(0, 0), (2, 7), (5, 12)]


def test_rebuild_of_an_empty_log_writes_an_empty_checkpoint(tmp_path):
    cache = LeaderEpochCache.rebuild(tmp_path, [])
    assert cache.entries() == [] and on_disk(tmp_path) == []
    assert not LeaderEpochCache(tmp_path).needs_rebuild


# ---------------------------------------------------------------------------------------------- open with a log
def make_log(directory: Path, batches: list[tuple[int, int]]) -> Log:
    """A log of one-record batches: (leader epoch, count of batches)."""
    log = Log(directory, LogConfig(segment_bytes=400))
    for epoch, count in batches:
        for _ in range(count):
            log.append_with_offsets(encode_batch([(b"k", b"v")], base_offset=log.log_end_offset,
                                                 partition_leader_epoch=epoch))
    return log


def test_open_rebuilds_from_the_log_without_checkpoint(tmp_path):
    log = make_log(tmp_path / "p", [(0, 3), (1, 2), (4, 3)])
    cache = LeaderEpochCache.open(tmp_path / "p", log)
    assert cache.entries() == [(0, 0), (1, 3), (4, 5)]
    assert on_disk(tmp_path / "p") == [(0, 0), (1, 3), (4, 5)]


def test_open_rebuilds_a_corrupt_checkpoint(tmp_path):
    log = make_log(tmp_path / "p", [(0, 3), (1, 2)])
    (tmp_path / "p" / CHECKPOINT_NAME).write_text("0\n7\n")
    assert LeaderEpochCache.open(tmp_path / "p", log).entries() == [(0, 0), (1, 3)]


def test_open_cuts_the_checkpoint_to_the_log(tmp_path):
    log = make_log(tmp_path / "p", [(0, 3), (1, 2), (4, 3)])
    cache = LeaderEpochCache.open(tmp_path / "p", log)
    cache.assign(6, 8)  # a leader took office at the log end, then wrote nothing
    log.truncate_to(6)  # and the tail was lost (recovery)
    log.advance_start_offset(4)
    again = LeaderEpochCache.open(tmp_path / "p", log)
    assert again.entries() == [(1, 4), (4, 5)]


def test_open_rebuild_starts_at_the_log_start(tmp_path):
    log = make_log(tmp_path / "p", [(0, 3), (1, 40), (4, 3)])
    log.advance_start_offset(20)
    assert log.log_start_offset == 20
    cache = LeaderEpochCache.open(tmp_path / "p", log)
    assert cache.entries() == [(1, 20), (4, 43)]


# ---------------------------------------------------------------------------------------------- handler
@dataclass
class FakeTopic:
    partitions: list


@dataclass
class FakePartition:
    epochs: LeaderEpochCache
    log_end_offset: int
    leader_epoch: int
    is_leader: bool = True
    leader_epoch_error = Partition.leader_epoch_error  # the real check, on this stand-in


@dataclass
class FakeBroker:
    topics: dict = field(default_factory=dict)
    replicas: dict = field(default_factory=dict)
    config: BrokerConfig = field(default_factory=BrokerConfig)  # no authorizer: the handler asks

    @property
    def replica_manager(self) -> ReplicaManager:
        """The real lookups over these stand-ins."""
        manager = ReplicaManager(0, Path("unused"), {}, self)
        manager._replicas = self.replicas
        return manager


@pytest.fixture
def broker(tmp_path):
    b = FakeBroker()
    b.topics["t"] = FakeTopic(partitions=[0, 1, 2, 3])
    lead = cache_with(tmp_path / "t-0", (2, 10), (4, 20), (6, 50))
    b.replicas[("t", 0)] = FakePartition(lead, log_end_offset=80, leader_epoch=6)
    b.replicas[("t", 1)] = FakePartition(cache_with(tmp_path / "t-1", (6, 0)), 5, 6, is_leader=False)
    # ("t", 2) is not hosted here; ("t", 3) is a leader with an empty log and cache
    b.replicas[("t", 3)] = FakePartition(cache_with(tmp_path / "t-3"), 0, 1)
    return b


async def call(broker, version: int, body: dict):
    req = codec.decode(23, version, "request", codec.encode(23, version, "request", body), exact=True)
    header = RequestHeader(23, version, 1, "test", 0)
    ctx = RequestContext(SimpleNamespace(broker=broker), header, "test:0", {})  # the handler needs no coordinator
    resp = await handler.handle(ctx, req)
    return codec.decode(23, version, "response", codec.encode(23, version, "response", resp), exact=True)


def request(partitions, topic="t", replica_id=-1):
    return {"replica_id": replica_id, "topics": [{"topic": topic, "partitions": [
        {"partition": index, "current_leader_epoch": current, "leader_epoch": epoch}
        for index, current, epoch in partitions]}]}


def answers(resp):
    return {(t.topic, p.partition): (p.error_code, p.get("leader_epoch", None), p.end_offset)
            for t in resp.topics for p in t.partitions}


def test_registry_serves_versions_2_to_4():
    # Kafka 4 removed v0-v1 (KIP-896); the schema is generated from Kafka 4.3's specs
    assert handler.API_KEY == 23 and handler.VERSIONS == (2, 4)
    assert codec.message(23, "request").versions == (2, 4)


@pytest.mark.anyio
@pytest.mark.parametrize("version", [2, 3, 4])
async def test_end_offsets_for_every_version(tmp_path, version):
    b = FakeBroker()
    b.topics["t"] = FakeTopic(partitions=[0])
    b.replicas[("t", 0)] = FakePartition(cache_with(tmp_path / "t-0", (2, 10), (4, 20), (6, 50)), 80, 6)
    resp = await call(b, version, request([(0, -1, 6), (0, -1, 5), (0, -1, 1), (0, -1, 9)]))
    got = [(p.error_code, p.get("leader_epoch", None), p.end_offset) for p in resp.topics[0].partitions]
    assert got == [(0, e, o) for e, o in zip([6, 4, 1, -1], [80, 50, 10, -1])]
    assert resp.throttle_time_ms == 0


@pytest.mark.anyio
@pytest.mark.parametrize("replica_id", [-1, 7])
async def test_followers_and_consumers_get_the_same_answer(tmp_path, broker, replica_id):
    resp = await call(broker, 3, request([(0, 6, 4)], replica_id=replica_id))
    assert answers(resp) == {("t", 0): (0, 4, 50)}


@pytest.mark.anyio
async def test_errors(tmp_path, broker):
    resp = await call(broker, 4, request([(0, 6, 6), (1, 6, 6), (2, 6, 6), (9, 6, 6), (-1, 6, 6)]))
    assert resp.topics[0].partitions[0].end_offset == 80
    assert [p.error_code for p in resp.topics[0].partitions] == [
        ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    for p in resp.topics[0].partitions[1:]:
        assert (p.leader_epoch, p.end_offset) == (-1, -1)
    resp = await call(broker, 4, request([(0, -1, 6)], topic="nope"))
    assert answers(resp) == {("nope", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)}


@pytest.mark.anyio
@pytest.mark.parametrize("version", [2, 3, 4])
async def test_current_leader_epoch_is_checked(tmp_path, broker, version):
    resp = await call(broker, version, request([(0, 7, 6), (0, 5, 6), (0, 6, 6), (0, -1, 6)]))
    assert [(p.error_code, p.leader_epoch, p.end_offset) for p in resp.topics[0].partitions] == [
        (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1), (ErrorCode.FENCED_LEADER_EPOCH, -1, -1),
        (0, 6, 80), (0, 6, 80)]


@pytest.mark.anyio
async def test_empty_cache_answers_undefined(tmp_path, broker):
    resp = await call(broker, 4, request([(3, 1, 1), (3, 1, 0)]))
    assert [(p.error_code, p.leader_epoch, p.end_offset) for p in resp.topics[0].partitions] == [
        (0, -1, -1), (0, -1, -1)]


@pytest.mark.anyio
async def test_several_topics(tmp_path, broker):
    body = request([(0, -1, 2)])
    body["topics"].append({"topic": "other", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                              "leader_epoch": 0}]})
    resp = await call(broker, 4, body)
    assert answers(resp) == {("t", 0): (0, 2, 20),
                             ("other", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)}
