"""The newest versions of Kafka 4.3's specs, through the handlers (requests and responses
round-trip the codec): topic ids in Produce v13, Fetch v13+, OffsetCommit/OffsetFetch v10 and
Metadata, and what each other bumped version adds."""
from __future__ import annotations

import dataclasses
import importlib
import uuid

import anyio
import pytest

from kshim.broker import BrokerConfig
from kshim.cluster.image import BrokerInfo
from kshim.standalone import open_standalone
from tests.nodes import served
from tests.test_admin_handlers import call
from tests.test_groups import call_awaiting, find
from tests.test_transactions import coordinated, data, init
from wire import records
from wire.errors import ErrorCode

produce = importlib.import_module("kshim.net.handlers.00_produce")
fetch = importlib.import_module("kshim.net.handlers.01_fetch")
metadata = importlib.import_module("kshim.net.handlers.03_metadata")
offset_commit = importlib.import_module("kshim.net.handlers.08_offset_commit")
offset_fetch = importlib.import_module("kshim.net.handlers.09_offset_fetch")
describe_groups = importlib.import_module("kshim.net.handlers.15_describe_groups")
delete_topics = importlib.import_module("kshim.net.handlers.20_delete_topics")
init_producer_id = importlib.import_module("kshim.net.handlers.22_init_producer_id")
write_txn_markers = importlib.import_module("kshim.net.handlers.27_write_txn_markers")
describe_cluster = importlib.import_module("kshim.net.handlers.60_describe_cluster")
list_transactions = importlib.import_module("kshim.net.handlers.66_list_transactions")

pytestmark = pytest.mark.anyio


@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    yield b
    b.close()


def batch(*values: bytes) -> bytes:
    return records.encode_batch([(None, v) for v in values])


async def produce_by_id(broker, topic_id: uuid.UUID, *values: bytes, partition: int = 0):
    resp = await call_awaiting(broker, produce, 13, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                                     "topic_data": [{"topic_id": topic_id, "partition_data": [
                                                         {"index": partition, "records": batch(*values)}]}]})
    [topic] = resp.responses
    assert topic.topic_id == topic_id
    return topic.partition_responses[0]


def sessionless_fetch(topic_id: uuid.UUID, offset: int = 0, version: int = 18) -> dict:
    return {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


# ---------------------------------------------------------------- Produce v13 / Fetch v18 by topic id

async def test_produce_v13_and_fetch_v18_name_topics_by_id(broker):
    await broker.create_topic("t", 1)
    topic_id = broker.topics["t"].topic_id
    answer = await produce_by_id(broker, topic_id, b"a", b"b")
    assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)
    resp = await call_awaiting(broker, fetch, 18, sessionless_fetch(topic_id))
    assert resp.error_code == 0 and resp.session_id == 0
    [topic] = resp.responses
    part = topic.partitions[0]
    assert topic.topic_id == topic_id and part.error_code == 0 and part.high_watermark == 2
    assert part.records and records.read_header(bytes(part.records)).next_offset == 2


async def test_unknown_and_stale_topic_ids_are_unknown_topic_id_and_never_created(broker):
    await broker.create_topic("t", 1)
    old_id = broker.topics["t"].topic_id
    stranger = uuid.uuid4()
    answer = await produce_by_id(broker, stranger, b"x")
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_ID and answer.base_offset == -1
    assert set(broker.topics) == {"t"}  # an id is never auto-created
    # deleted and created again: a new id; the old one is unknown everywhere
    resp = await call_awaiting(broker, delete_topics, 6, {"topics": [{"name": "t", "topic_id": uuid.UUID(int=0)}],
                                                          "timeout_ms": 5000})
    assert resp.responses[0].error_code == 0
    await broker.create_topic("t", 1)
    new_id = broker.topics["t"].topic_id
    assert new_id != old_id
    assert (await produce_by_id(broker, old_id, b"x")).error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert (await produce_by_id(broker, new_id, b"x")).error_code == ErrorCode.NONE
    resp = await call_awaiting(broker, fetch, 18, sessionless_fetch(old_id))
    assert resp.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    resp = await call(broker, metadata, 13, {"topics": [{"topic_id": old_id, "name": None}],
                                             "allow_auto_topic_creation": True,
                                             "include_topic_authorized_operations": False})
    assert resp.error_code == 0 and resp.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


async def test_produce_v13_to_an_unknown_partition_of_a_known_id(broker):
    await broker.create_topic("t", 1)
    answer = await produce_by_id(broker, broker.topics["t"].topic_id, b"x", partition=5)
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_topic_ids_survive_a_restart_and_metadata_v13_serves_them(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        await b.create_topic("t", 2)
        topic_id = b.topics["t"].topic_id
    finally:
        b.close()
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        resp = await call(b, metadata, 13, {"topics": None, "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
        assert resp.error_code == 0
        assert [(t.name, t.topic_id, len(t.partitions)) for t in resp.topics] == [("t", topic_id, 2)]
        assert (await produce_by_id(b, topic_id, b"again")).error_code == ErrorCode.NONE
    finally:
        b.close()


# ---------------------------------------------------------------- OffsetCommit / OffsetFetch v10

def commit_body(topic_id: uuid.UUID, offset: int) -> dict:
    return {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": "m"}]}]}


async def test_offset_commit_and_fetch_v10_by_topic_id(broker):
    await broker.create_topic("t", 1)
    topic_id = broker.topics["t"].topic_id
    assert (await find(broker, "g")).coordinators[0].error_code == 0
    served(broker).groups.load_pending()
    resp = await call_awaiting(broker, offset_commit, 10, commit_body(topic_id, 42))
    assert resp.topics[0].topic_id == topic_id and resp.topics[0].partitions[0].error_code == 0
    stranger = uuid.uuid4()
    resp = await call_awaiting(broker, offset_commit, 10, commit_body(stranger, 1))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    # stored by name: v9 sees the commit too
    resp = await call(broker, offset_fetch, 9, {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1,
                                                            "topics": [{"name": "t", "partition_indexes": [0]}]}],
                                                "require_stable": False})
    assert resp.groups[0].topics[0].partitions[0].committed_offset == 42
    resp = await call(broker, offset_fetch, 10, {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1,
                                                             "topics": [{"topic_id": topic_id, "partition_indexes": [0]},
                                                                        {"topic_id": stranger, "partition_indexes": [3]}]}],
                                                 "require_stable": True})
    got = {(t.topic_id, p.partition_index): (p.committed_offset, p.error_code)
           for t in resp.groups[0].topics for p in t.partitions}
    assert got == {(topic_id, 0): (42, 0), (stranger, 3): (-1, ErrorCode.UNKNOWN_TOPIC_ID)}
    # every topic: named by id; the offsets of a deleted topic are left out
    await call_awaiting(broker, offset_commit, 9, {**commit_body(topic_id, 0), "topics": [
        {"name": "gone", "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                                         "committed_metadata": ""}]}]})
    resp = await call(broker, offset_fetch, 10, {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1,
                                                             "topics": None}], "require_stable": False})
    assert [(t.topic_id, [p.committed_offset for p in t.partitions]) for t in resp.groups[0].topics] == [(topic_id, [42])]


# ---------------------------------------------------------------- the other bumps

async def test_describe_groups_v6_answers_group_id_not_found(broker):
    assert (await find(broker, "nope")).coordinators[0].error_code == 0
    served(broker).groups.load_pending()
    old = await call(broker, describe_groups, 5, {"groups": ["nope"], "include_authorized_operations": False})
    assert (old.groups[0].error_code, old.groups[0].group_state) == (ErrorCode.NONE, "Dead")
    new = await call(broker, describe_groups, 6, {"groups": ["nope"], "include_authorized_operations": False})
    assert (new.groups[0].error_code, new.groups[0].group_state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
    assert new.groups[0].error_message == "Group nope not found."


async def test_describe_cluster_v2_lists_fenced_brokers_only_when_asked(broker):
    image = broker.image
    fenced = BrokerInfo(7, "127.0.0.1", 9999, alive=False)
    broker.apply_image(dataclasses.replace(image, version=image.version + 1,
                                           brokers={**image.brokers, 7: fenced}))
    resp = await call(broker, describe_cluster, 2, {"include_cluster_authorized_operations": False,
                                                    "endpoint_type": 1, "include_fenced_brokers": False})
    assert [(b.broker_id, b.is_fenced) for b in resp.brokers] == [(0, False)]
    resp = await call(broker, describe_cluster, 2, {"include_cluster_authorized_operations": False,
                                                    "endpoint_type": 1, "include_fenced_brokers": True})
    assert [(b.broker_id, b.is_fenced) for b in resp.brokers] == [(0, False), (7, True)]


async def test_init_producer_id_v6_without_two_phase_commit(broker):
    async with anyio.create_task_group() as tg:
        tg.start_soon(served(broker).transactions.run)
        await coordinated(broker, "tx")
        body = {"transactional_id": "tx", "transaction_timeout_ms": 60_000, "producer_id": -1, "producer_epoch": -1}
        resp = await call_awaiting(broker, init_producer_id, 6, {**body, "enable2_pc": True})
        assert resp.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        resp = await call_awaiting(broker, init_producer_id, 6, {**body, "keep_prepared_txn": True})
        assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
        resp = await call_awaiting(broker, init_producer_id, 6, body)
        assert resp.error_code == 0 and resp.producer_id >= 0 and resp.producer_epoch == 0
        assert (resp.ongoing_txn_producer_id, resp.ongoing_txn_producer_epoch) == (-1, -1)
        # ListTransactions v2: a pattern the whole id must match; a bad one is refused
        await coordinated(broker, "other")
        await init(broker, "other")
        listed = await call(broker, list_transactions, 2, {"state_filters": [], "producer_id_filters": [],
                                                           "duration_filter": -1, "transactional_id_pattern": "t.*"})
        assert [t.transactional_id for t in listed.transaction_states] == ["tx"]
        listed = await call(broker, list_transactions, 2, {"state_filters": [], "producer_id_filters": [],
                                                           "duration_filter": -1, "transactional_id_pattern": None})
        assert sorted(t.transactional_id for t in listed.transaction_states) == ["other", "tx"]
        listed = await call(broker, list_transactions, 2, {"state_filters": [], "producer_id_filters": [],
                                                           "duration_filter": -1, "transactional_id_pattern": "("})
        assert listed.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
        tg.cancel_scope.cancel()


async def test_write_txn_markers_v2_transaction_version_2_needs_a_newer_epoch(broker):
    await broker.create_topic("t", 1)
    assert broker.partition("t", 0).append(data(5000, 0, b"x", epoch=3)).error == 0

    async def marker(epoch: int, tv: int) -> ErrorCode:
        resp = await call_awaiting(broker, write_txn_markers, 2, {"markers": [{
            "producer_id": 5000, "producer_epoch": epoch, "transaction_result": True, "coordinator_epoch": 0,
            "transaction_version": tv, "topics": [{"name": "t", "partition_indexes": [0]}]}]})
        return resp.markers[0].topics[0].partitions[0].error_code

    assert await marker(3, 2) == ErrorCode.INVALID_PRODUCER_EPOCH  # TV2: the epoch must have been bumped
    assert await marker(4, 2) == ErrorCode.NONE
    assert await marker(4, 2) == ErrorCode.INVALID_PRODUCER_EPOCH  # a late retry of that marker
    assert await marker(4, 1) == ErrorCode.NONE  # TV1 rules: the same epoch is fine


async def test_fetch_v18_a_follower_behind_on_the_high_watermark_is_answered_at_once(broker):
    await broker.create_topic("t", 1)
    topic_id = broker.topics["t"].topic_id
    assert broker.partition("t", 0).append(batch(b"a", b"b")).error == 0  # one replica: high watermark 2

    def follower_fetch(known_hw: int, max_wait_ms: int) -> dict:
        body = sessionless_fetch(topic_id, offset=2)
        body.update(max_wait_ms=max_wait_ms, min_bytes=1, replica_state={"replica_id": 1, "replica_epoch": 1})
        body["topics"][0]["partitions"][0]["high_watermark"] = known_hw
        return body

    with anyio.fail_after(5):  # nothing new to read, but the follower's high watermark is behind
        resp = await call_awaiting(broker, fetch, 18, follower_fetch(1, 60_000))
    part = resp.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, part.records or b"") == (0, 2, b"")
    # a follower that knows the high watermark waits for data as before (up to max_wait_ms)
    started = anyio.current_time()
    resp = await call_awaiting(broker, fetch, 18, follower_fetch(2, 300))
    assert anyio.current_time() - started >= 0.25
    assert resp.responses[0].partitions[0].high_watermark == 2


async def test_consumer_group_describe_v1_reports_consumer_members(broker):
    heartbeat = importlib.import_module("kshim.net.handlers.68_consumer_group_heartbeat")
    describe = importlib.import_module("kshim.net.handlers.69_consumer_group_describe")
    await broker.create_topic("t", 2)
    assert (await find(broker, "cg")).coordinators[0].error_code == 0
    served(broker).groups.load_pending()
    joined = await call_awaiting(broker, heartbeat, 1, {"group_id": "cg", "member_id": str(uuid.uuid4()),
                                                        "member_epoch": 0, "rebalance_timeout_ms": 30_000,
                                                        "subscribed_topic_names": ["t"], "topic_partitions": []})
    assert joined.error_code == 0
    resp = await call(broker, describe, 1, {"group_ids": ["cg"], "include_authorized_operations": False})
    [group] = resp.groups
    assert group.error_code == 0 and [m.member_type for m in group.members] == [1]
    old = await call(broker, describe, 0, {"group_ids": ["cg"], "include_authorized_operations": False})
    assert old.groups[0].members[0].member_id == group.members[0].member_id


@pytest.mark.anyio
async def test_metadata_answers_are_reused_until_the_image_changes(tmp_path):
    """Without an authorizer, Metadata for all topics (or topics that exist) is encoded once per
    image: the bytes sent are a fresh encoding's, a new topic (a new image) is in the next answer,
    and a missing topic (auto-created) is never answered from the cache."""
    from kshim.net.handlers import RequestContext
    from kshim.net.protocol import ConnectionCore, Encoded, Request
    from wire import codec
    from wire.headers import RequestHeader

    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        await broker.create_topic("a", 2)

        async def answer(topics):
            header = RequestHeader(3, 12, 5, "test", 0)
            req = codec.decode(3, 12, "request", codec.encode(3, 12, "request", {
                "topics": topics, "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False}), exact=True)
            body = await metadata.handle(RequestContext(served(broker), header, "test:0", {}), req)
            sent = b"".join(bytes(c) for c in ConnectionCore.response_bytes(Request(header, None, 0), body))
            fresh = b"".join(bytes(c) for c in ConnectionCore.response_bytes(Request(header, None, 0), dict(body)))
            assert sent == fresh
            return body

        first = await answer(None)
        again = await answer(None)
        assert type(first) is Encoded and again.data is first.data
        assert [t["name"] for t in first["topics"]] == ["a"]
        await broker.create_topic("b", 1)
        assert sorted(t["name"] for t in (await answer(None))["topics"]) == ["a", "b"]
        named = await answer([{"name": "c", "topic_id": None}])  # auto-created: answered afresh
        assert type(named) is not Encoded and [t["name"] for t in named["topics"]] == ["c"]
        assert "c" in broker.topics
    finally:
        broker.close()
