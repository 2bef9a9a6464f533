"""Unit tests of the admin handlers: topics, partitions, configs, cluster, delete records.

Requests go through the codec (encode then decode) so field names are checked against the schema;
responses go through it too, so a misspelt response field fails the test (wire.codec refuses it).
"""
from __future__ import annotations

import importlib
import uuid

import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.standalone import open_standalone
from kshim.net.handlers import RequestContext
from wire import codec
from wire.errors import ErrorCode
from wire.headers import RequestHeader
from wire.primitives import ZERO_UUID
from wire.records import encode_batch
from tests.nodes import served

create_topics = importlib.import_module("kshim.net.handlers.19_create_topics")
delete_topics = importlib.import_module("kshim.net.handlers.20_delete_topics")
delete_records = importlib.import_module("kshim.net.handlers.21_delete_records")
describe_configs = importlib.import_module("kshim.net.handlers.32_describe_configs")
alter_configs = importlib.import_module("kshim.net.handlers.33_alter_configs")
create_partitions = importlib.import_module("kshim.net.handlers.37_create_partitions")
incremental_alter = importlib.import_module("kshim.net.handlers.44_incremental_alter_configs")
describe_cluster = importlib.import_module("kshim.net.handlers.60_describe_cluster")
elect_leaders = importlib.import_module("kshim.net.handlers.43_elect_leaders")
describe_topic_partitions = importlib.import_module("kshim.net.handlers.75_describe_topic_partitions")
describe_log_dirs = importlib.import_module("kshim.net.handlers.35_describe_log_dirs")
describe_quorum = importlib.import_module("kshim.net.handlers.55_describe_quorum")
update_features = importlib.import_module("kshim.net.handlers.57_update_features")
api_versions = importlib.import_module("kshim.net.handlers.18_api_versions")
group_heartbeat = importlib.import_module("kshim.net.handlers.68_consumer_group_heartbeat")
unregister_broker = importlib.import_module("kshim.net.handlers.64_unregister_broker")
list_config_resources = importlib.import_module("kshim.net.handlers.74_list_config_resources")

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    yield b
    if not getattr(b, "_closed_by_test", False):
        b.close()


def reopen(broker: Broker) -> Broker:
    """Close the broker and open a new one on the same data dir (the caller closes it)."""
    broker.close()
    broker._closed_by_test = True
    return open_standalone(BrokerConfig(data_dir=broker.config.data_dir))


async def call(broker: Broker, module, version: int, body: dict):
    """Round-trip the request through the codec, run the handler, round-trip the response."""
    key = module.API_KEY
    lo, hi = module.VERSIONS
    assert lo <= version <= hi
    req = codec.decode(key, version, "request", codec.encode(key, version, "request", body), exact=True)
    header = RequestHeader(key, version, 1, "test", 0)
    ctx = RequestContext(served(broker), header, "test:0", {})
    resp = await module.handle(ctx, req)
    return codec.decode(key, version, "response", codec.encode(key, version, "response", resp), exact=True)


def new_topic(name, partitions=1, replication=1, configs=None, assignments=()):
    return {"name": name, "num_partitions": partitions, "replication_factor": replication,
            "assignments": list(assignments),
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}


async def create(broker, *topics, version=7, validate_only=False):
    resp = await call(broker, create_topics, version, {"topics": list(topics), "timeout_ms": 1000,
                                                       "validate_only": validate_only})
    return {t.name: t for t in resp.topics}


# ---------------------------------------------------------------- CreateTopics

@pytest.mark.anyio
@pytest.mark.parametrize("version", range(2, 8))
async def test_create_topics_versions(broker, version):
    out = await create(broker, new_topic("a", 3), new_topic("b", -1, -1, {"retention.ms": "1000"}), version=version)
    assert out["a"].error_code == 0 and out["b"].error_code == 0
    assert out["a"].error_message is None
    assert len(broker.topics["a"].partitions) == 3
    assert len(broker.topics["b"].partitions) == broker.config.default_partitions
    assert broker.topics["b"].configs == {"retention.ms": "1000"}
    if version >= 5:
        assert (out["a"].num_partitions, out["a"].replication_factor) == (3, 1)
        assert (out["b"].num_partitions, out["b"].replication_factor) == (1, 1)
        configs = {c.name: c for c in out["b"].configs}
        assert set(configs) == set(broker.topics["b"].configs) | set(configs)
        assert configs["retention.ms"].value == "1000" and configs["retention.ms"].config_source == 1
        assert configs["segment.bytes"].config_source == 5
        assert not configs["segment.bytes"].read_only and not configs["segment.bytes"].is_sensitive
    if version >= 7:
        assert out["a"].topic_id == broker.topics["a"].topic_id != ZERO_UUID


@pytest.mark.anyio
@pytest.mark.parametrize("version", [2, 4, 5, 7])
async def test_create_topics_errors_are_independent(broker, version):
    await create(broker, new_topic("exists"))
    out = await create(
        broker,
        new_topic("ok", 2),
        new_topic("bad name!"),
        new_topic("exists"),
        new_topic("rf3", 1, 3),
        new_topic("rf0", 1, 0),
        new_topic("p0", 0),
        new_topic("manual", -1, -1, assignments=[{"partition_index": 0, "broker_ids": [0]}]),
        new_topic("badvalue", 1, 1, {"retention.ms": "soon"}),
        new_topic("unknowncfg", 1, 1, {"no.such.config": "1"}),
        new_topic("policy", 1, 1, {"cleanup.policy": "compress"}),
        version=version,
    )
    assert out["ok"].error_code == 0
    assert out["bad name!"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert out["exists"].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert out["rf3"].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert out["rf0"].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert out["p0"].error_code == ErrorCode.INVALID_PARTITIONS
    assert out["manual"].error_code == ErrorCode.INVALID_REQUEST
    for name in ("badvalue", "unknowncfg", "policy"):
        assert out[name].error_code == ErrorCode.INVALID_CONFIG
    assert "(1)" in out["rf3"].error_message and "brokers" in out["rf3"].error_message
    assert "retention.ms" in out["badvalue"].error_message
    assert "no.such.config" in out["unknowncfg"].error_message
    if version >= 5:
        assert out["rf3"].num_partitions == -1 and out["rf3"].replication_factor == -1
    assert set(broker.topics) == {"exists", "ok"}


@pytest.mark.anyio
async def test_create_topics_null_config_and_duplicates(broker):
    topic = new_topic("nullcfg")
    topic["configs"] = [{"name": "retention.ms", "value": None}]
    out = await create(broker, topic)
    assert out["nullcfg"].error_code == ErrorCode.INVALID_CONFIG
    resp = await call(broker, create_topics, 7, {"topics": [new_topic("dup"), new_topic("dup", 2), new_topic("solo")]})
    assert [(t.name, t.error_code) for t in resp.topics] == [("dup", ErrorCode.INVALID_REQUEST), ("solo", 0)]
    assert set(broker.topics) == {"solo"}


@pytest.mark.anyio
async def test_create_topics_validate_only(broker):
    out = await create(broker, new_topic("v", 4, -1, {"max.message.bytes": "2000"}), new_topic("v2", 1, 2),
                       version=5, validate_only=True)
    assert out["v"].error_code == 0 and out["v"].num_partitions == 4
    assert {c.name: c.value for c in out["v"].configs}["max.message.bytes"] == "2000"
    assert out["v2"].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert broker.topics == {}
    assert not (broker.config.data_dir / "v-0").exists()


@pytest.mark.anyio
async def test_create_topics_replication_limit_follows_cluster_size(broker):
    for node_id in (1, 2):  # two more live brokers, as a cluster's controller would see them
        broker.controller.controller.register_broker(node_id, "127.0.0.1", 9100 + node_id)
    assert broker.cluster_size == 3
    out = await create(broker, new_topic("r3", 1, 3), new_topic("r4", 1, 4))
    assert out["r3"].error_code == 0 and out["r3"].replication_factor == 3
    assert out["r4"].error_code == ErrorCode.INVALID_REPLICATION_FACTOR and "(3)" in out["r4"].error_message


@pytest.mark.anyio
async def test_create_topics_persist(broker):
    await create(broker, new_topic("keep", 3, 1, {"retention.bytes": "4096", "cleanup.policy": "delete"}))
    topic_id = broker.topics["keep"].topic_id
    again = reopen(broker)
    try:
        topic = again.topics["keep"]
        assert topic.topic_id == topic_id and len(topic.partitions) == 3
        assert topic.configs == {"retention.bytes": "4096", "cleanup.policy": "delete"}
        out = await create(again, new_topic("keep"))
        assert out["keep"].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    finally:
        again.close()


# ---------------------------------------------------------------- DeleteTopics

@pytest.mark.anyio
@pytest.mark.parametrize("version", range(1, 6))
async def test_delete_topics_by_name(broker, version):
    await create(broker, new_topic("x", 2), new_topic("y"))
    resp = await call(broker, delete_topics, version, {"topic_names": ["x", "nope"], "timeout_ms": 1000})
    out = {r.name: r for r in resp.responses}
    assert out["x"].error_code == 0
    assert out["nope"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if version >= 5:
        assert "nope" in out["nope"].error_message
    assert set(broker.topics) == {"y"}
    assert not (broker.config.data_dir / "x-0").exists()


@pytest.mark.anyio
async def test_delete_topics_v6_by_name_and_id(broker):
    await create(broker, new_topic("byname"), new_topic("byid"), new_topic("both"))
    ids = {name: t.topic_id for name, t in broker.topics.items()}
    unknown = uuid.uuid4()
    resp = await call(broker, delete_topics, 6, {"topics": [
        {"name": "byname"},
        {"name": None, "topic_id": ids["byid"]},
        {"name": None, "topic_id": unknown},
        {"name": "both", "topic_id": ids["both"]},
        {"name": "missing"},
    ], "timeout_ms": 1000})
    r = resp.responses
    assert (r[0].name, r[0].topic_id, r[0].error_code) == ("byname", ids["byname"], 0)
    assert (r[1].name, r[1].topic_id, r[1].error_code) == ("byid", ids["byid"], 0)
    assert (r[2].name, r[2].topic_id, r[2].error_code) == (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID)
    assert r[3].error_code == ErrorCode.INVALID_REQUEST
    assert (r[4].name, r[4].error_code) == ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert set(broker.topics) == {"both"}


@pytest.mark.anyio
async def test_delete_topics_persist_and_recreate(broker):
    await create(broker, new_topic("gone", 2, 1, {"retention.ms": "5"}))
    await call(broker, delete_topics, 4, {"topic_names": ["gone"], "timeout_ms": 1000})
    again = reopen(broker)
    try:
        assert "gone" not in again.topics
        out = await create(again, new_topic("gone", 1))
        assert out["gone"].error_code == 0
        assert again.topics["gone"].configs == {} and len(again.topics["gone"].partitions) == 1
    finally:
        again.close()


# ---------------------------------------------------------------- CreatePartitions

@pytest.mark.anyio
@pytest.mark.parametrize("version", range(0, 4))
async def test_create_partitions(broker, version):
    await create(broker, new_topic("t", 2), new_topic("u", 3), new_topic("w", 1), new_topic("d"))
    resp = await call(broker, create_partitions, version, {"topics": [
        {"name": "t", "count": 5, "assignments": None},
        {"name": "u", "count": 3, "assignments": None},
        {"name": "w", "count": 2, "assignments": [{"broker_ids": [0]}]},
        {"name": "missing", "count": 2, "assignments": None},
        {"name": "d", "count": 2, "assignments": None},
        {"name": "d", "count": 3, "assignments": None},
    ], "timeout_ms": 1000, "validate_only": False})
    out = [(r.name, r.error_code) for r in resp.results]
    assert out == [("t", 0), ("u", ErrorCode.INVALID_PARTITIONS), ("w", 0),
                   ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ("d", ErrorCode.INVALID_REQUEST)]
    assert resp.results[0].error_message is None and "3" in resp.results[1].error_message
    assert [len(broker.topics[n].partitions) for n in "tuwd"] == [5, 3, 2, 1]
    assert broker.topics["w"].partitions[1].replicas == (0,) and broker.partition("w", 1) is not None


@pytest.mark.anyio
async def test_create_partitions_manual_assignments_are_checked(broker):
    await create(broker, *(new_topic(n, 1) for n in "abcdef"))
    resp = await call(broker, create_partitions, 3, {"topics": [
        {"name": "a", "count": 3, "assignments": [{"broker_ids": [0]}]},  # one list for two new partitions
        {"name": "b", "count": 2, "assignments": [{"broker_ids": []}]},
        {"name": "c", "count": 2, "assignments": [{"broker_ids": [0, 0]}]},
        {"name": "d", "count": 2, "assignments": [{"broker_ids": [7]}]},  # no such broker
        {"name": "e", "count": 2, "assignments": [{"broker_ids": [0, 7]}]},  # checked before the factor
        {"name": "f", "count": 3, "assignments": [{"broker_ids": [0]}, {"broker_ids": [0]}]},
    ], "timeout_ms": 1000, "validate_only": False})
    out = {r.name: (r.error_code, r.error_message) for r in resp.results}
    assert {n: c for n, (c, _) in out.items()} == {**{n: ErrorCode.INVALID_REPLICA_ASSIGNMENT for n in "abcde"}, "f": 0}
    assert "2 additional" in out["a"][1] and "no replicas" in out["b"][1] and "twice" in out["c"][1]
    assert "broker 7" in out["d"][1] and "broker 7" in out["e"][1]
    assert [len(broker.topics[n].partitions) for n in "abcdef"] == [1, 1, 1, 1, 1, 3]


@pytest.mark.anyio
async def test_create_partitions_validate_only_and_persist(broker):
    await create(broker, new_topic("t", 1))
    resp = await call(broker, create_partitions, 3, {"topics": [{"name": "t", "count": 4, "assignments": None}],
                                                     "timeout_ms": 1000, "validate_only": True})
    assert resp.results[0].error_code == 0 and len(broker.topics["t"].partitions) == 1
    await call(broker, create_partitions, 3, {"topics": [{"name": "t", "count": 4, "assignments": None}],
                                              "timeout_ms": 1000, "validate_only": False})
    assert broker.partition("t", 3) is not None
    again = reopen(broker)
    try:
        assert len(again.topics["t"].partitions) == 4
    finally:
        again.close()


# ---------------------------------------------------------------- ElectLeaders

@pytest.mark.anyio
@pytest.mark.parametrize("version", range(0, 3))
async def test_elect_leaders_answers_each_partition_in_order(broker, version):
    await create(broker, new_topic("t", 2))
    body = {"topic_partitions": [{"topic": "t", "partitions": [1, 0, 9]}, {"topic": "gone", "partitions": [0]}],
            "timeout_ms": 1000}
    if version >= 1:
        body["election_type"] = 0
    resp = await call(broker, elect_leaders, version, body)
    assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in resp.replica_election_results] == [
        ("t", [(1, ErrorCode.ELECTION_NOT_NEEDED), (0, ErrorCode.ELECTION_NOT_NEEDED),
               (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("gone", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]


@pytest.mark.anyio
async def test_elect_leaders_for_every_partition_and_bad_election_types(broker):
    await create(broker, new_topic("t", 2))
    resp = await call(broker, elect_leaders, 2, {"election_type": 1, "topic_partitions": None, "timeout_ms": 1})
    assert resp.error_code == 0 and resp.replica_election_results == []  # every partition has its leader
    resp = await call(broker, elect_leaders, 2, {"election_type": 2, "topic_partitions": None, "timeout_ms": 1})
    assert resp.error_code == ErrorCode.INVALID_REQUEST


# ---------------------------------------------------------------- DescribeTopicPartitions

async def describe_partitions(broker, names, limit=2000, cursor=None):
    resp = await call(broker, describe_topic_partitions, 0, {
        "topics": [{"name": n} for n in names], "response_partition_limit": limit, "cursor": cursor})
    pages = [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in resp.topics]
    nxt = None if resp.next_cursor is None else (resp.next_cursor.topic_name, resp.next_cursor.partition_index)
    return pages, nxt, resp


@pytest.mark.anyio
async def test_describe_topic_partitions_pages_with_the_cursor(broker):
    await create(broker, new_topic("b", 3), new_topic("a", 2), new_topic("c", 1))
    pages, nxt, resp = await describe_partitions(broker, ["c", "b", "a", "no-such", "bad name!"])
    assert pages == [("a", 0, [0, 1]), ("b", 0, [0, 1, 2]), ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION, []),
                     ("c", 0, [0]), ("no-such", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])] and nxt is None
    p = resp.topics[0].partitions[0]
    assert (p.leader_id, list(p.replica_nodes), list(p.isr_nodes), list(p.eligible_leader_replicas)) == (0, [0], [0], [])
    assert resp.topics[0].topic_id == broker.topics["a"].topic_id
    # three partitions a page: the cursor walks through the topics, in name order
    pages, nxt, _ = await describe_partitions(broker, ["a", "b", "c"], limit=3)
    assert pages == [("a", 0, [0, 1]), ("b", 0, [0])] and nxt == ("b", 1)
    pages, nxt, _ = await describe_partitions(broker, ["a", "b", "c"], 3, {"topic_name": "b", "partition_index": 1})
    assert pages == [("b", 0, [1, 2]), ("c", 0, [0])] and nxt is None
    # the limit reached exactly at a topic's end: the cursor names the next topic
    pages, nxt, _ = await describe_partitions(broker, ["a", "b"], limit=2)
    assert pages == [("a", 0, [0, 1])] and nxt == ("b", 0)
    # no topics named: every topic; a limit below 1 counts as 1
    pages, nxt, _ = await describe_partitions(broker, [], limit=0)
    assert pages == [("a", 0, [0])] and nxt == ("a", 1)


@pytest.mark.anyio
async def test_describe_topic_partitions_refuses_a_bad_cursor(broker):
    await create(broker, new_topic("a", 2))
    pages, nxt, _ = await describe_partitions(broker, ["a"], cursor={"topic_name": "z", "partition_index": 0})
    assert pages == [("a", ErrorCode.INVALID_REQUEST, [])] and nxt is None
    pages, _, _ = await describe_partitions(broker, ["a"], cursor={"topic_name": "a", "partition_index": -1})
    assert pages == [("a", ErrorCode.INVALID_REQUEST, [])]


# ---------------------------------------------------------------- DescribeConfigs

def resource(rtype, name, keys=None):
    return {"resource_type": rtype, "resource_name": name, "configuration_keys": keys}


async def describe(broker, *resources, version=4, synonyms=False, docs=False):
    resp = await call(broker, describe_configs, version, {"resources": list(resources),
                                                          "include_synonyms": synonyms,
                                                          "include_documentation": docs})
    return resp.results


@pytest.mark.anyio
@pytest.mark.parametrize("version", range(1, 5))
async def test_describe_topic_configs(broker, version):
    from kshim.configs import TOPIC_CONFIGS
    await create(broker, new_topic("t", 1, 1, {"retention.ms": "60000"}))
    [result] = await describe(broker, resource(TOPIC, "t"), version=version, synonyms=True, docs=version >= 3)
    assert result.error_code == 0 and result.error_message is None
    assert (result.resource_type, result.resource_name) == (TOPIC, "t")
    configs = {c.name: c for c in result.configs}
    assert set(configs) == set(TOPIC_CONFIGS)
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source, retention.read_only, retention.is_sensitive) == \
        ("60000", 1, False, False)
    assert [(s.value, s.source) for s in retention.synonyms] == [("60000", 1),
                                                                  (TOPIC_CONFIGS["retention.ms"].default, 5)]
    segment = configs["segment.bytes"]
    assert segment.value == TOPIC_CONFIGS["segment.bytes"].default and segment.config_source == 5
    assert [(s.name, s.source) for s in segment.synonyms] == [("segment.bytes", 5)]
    if version >= 3:
        assert retention.config_type == 5 and segment.config_type == 3
        assert configs["cleanup.policy"].config_type == 7
        assert configs["message.timestamp.type"].config_type == 2
        assert retention.documentation


@pytest.mark.anyio
async def test_describe_configs_filters_and_options(broker):
    await create(broker, new_topic("t"))
    [result] = await describe(broker, resource(TOPIC, "t", ["cleanup.policy", "max.message.bytes", "nope"]))
    assert sorted(c.name for c in result.configs) == ["cleanup.policy", "max.message.bytes"]
    assert all(c.synonyms == [] and c.documentation is None for c in result.configs)
    [result] = await describe(broker, resource(TOPIC, "t", []), version=1)
    assert len(result.configs) > 2


@pytest.mark.anyio
async def test_describe_configs_errors_are_per_resource(broker):
    await create(broker, new_topic("t"))
    results = await describe(broker, resource(TOPIC, "missing"), resource(TOPIC, "t"), resource(8, "0"),
                             resource(BROKER, "7"), resource(TOPIC, ""))
    codes = [r.error_code for r in results]
    assert codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
                     ErrorCode.INVALID_TOPIC_EXCEPTION]
    assert "missing" in results[0].error_message
    assert results[0].configs == []


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["", "0"])
async def test_describe_broker_configs(broker, name):
    [result] = await describe(broker, resource(BROKER, name), synonyms=True)
    assert result.error_code == 0
    configs = {c.name: c for c in result.configs}
    assert configs["num.partitions"].value == str(broker.config.default_partitions)
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["broker.id"].value == "0"
    assert configs["socket.request.max.bytes"].value == str(broker.config.max_request_bytes)
    assert configs["log.dirs"].value == str(broker.config.data_dir)
    assert "message.max.bytes" in configs
    # read-only; from the command line (4) where it differs from the default, else the default (5)
    static = {"broker.id", "node.id", "advertised.listeners", "log.dirs"}
    assert all(configs[n].read_only and configs[n].config_source == 4 for n in static)
    defaulted = {"num.partitions", "auto.create.topics.enable", "default.replication.factor", "socket.request.max.bytes"}
    assert all(configs[n].read_only and configs[n].config_source == 5 for n in defaulted)
    # the topic-config defaults are dynamic, at Kafka's default until someone sets them
    assert not configs["log.retention.ms"].read_only and configs["log.retention.ms"].config_source == 5
    # every Kafka broker config is listed; passwords never with a value
    assert configs["ssl.keystore.password"].is_sensitive and configs["ssl.keystore.password"].value is None
    assert not any(c.value for c in configs.values() if c.is_sensitive)
    assert configs["broker.id"].config_type == 3 and configs["auto.create.topics.enable"].config_type == 1
    [result] = await describe(broker, resource(BROKER, name, ["num.partitions"]), version=2)
    assert [c.name for c in result.configs] == ["num.partitions"]


# ---------------------------------------------------------------- AlterConfigs

def alter_resource(rtype, name, configs):
    return {"resource_type": rtype, "resource_name": name,
            "configs": [{"name": k, "value": v} for k, v in configs.items()]}


async def alter(broker, *resources, version=2, validate_only=False):
    resp = await call(broker, alter_configs, version, {"resources": list(resources), "validate_only": validate_only})
    return resp.responses


@pytest.mark.anyio
@pytest.mark.parametrize("version", range(0, 3))
async def test_alter_configs_replaces_overrides(broker, version):
    await create(broker, new_topic("t", 2, 1, {"retention.ms": "1000", "segment.bytes": "2000000"}))
    [r] = await alter(broker, alter_resource(TOPIC, "t", {"retention.bytes": "2048", "max.message.bytes": "5000"}),
                      version=version)
    assert (r.error_code, r.error_message, r.resource_type, r.resource_name) == (0, None, TOPIC, "t")
    assert broker.topics["t"].configs == {"retention.bytes": "2048", "max.message.bytes": "5000"}
    assert all(broker.partition("t", p.index).max_message_bytes == 5000 for p in broker.topics["t"].partitions)
    [result] = await describe(broker, resource(TOPIC, "t", ["retention.ms", "retention.bytes"]))
    sources = {c.name: c.config_source for c in result.configs}
    assert sources == {"retention.ms": 5, "retention.bytes": 1}
    again = reopen(broker)
    try:
        assert again.topics["t"].configs == {"retention.bytes": "2048", "max.message.bytes": "5000"}
        assert again.partition("t", 1).max_message_bytes == 5000
    finally:
        again.close()


@pytest.mark.anyio
async def test_alter_configs_errors_and_validate_only(broker):
    await create(broker, new_topic("t", 1, 1, {"retention.ms": "1000"}), new_topic("u"))
    null_value = alter_resource(TOPIC, "u", {})
    null_value["configs"] = [{"name": "retention.ms", "value": None}]
    responses = await alter(
        broker,
        alter_resource(TOPIC, "t", {"retention.ms": "-5"}),
        alter_resource(TOPIC, "missing", {}),
        alter_resource(BROKER, "0", {"num.partitions": "3"}),
        alter_resource(8, "0", {}),
        null_value,
    )
    codes = [r.error_code for r in responses]
    assert codes == [ErrorCode.INVALID_CONFIG, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_CONFIG,
                     ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert "retention.ms" in responses[0].error_message
    assert "'num.partitions' is read-only" in responses[2].error_message
    assert broker.topics["t"].configs == {"retention.ms": "1000"}
    [r] = await alter(broker, alter_resource(TOPIC, "t", {"retention.ms": "5"}), validate_only=True)
    assert r.error_code == 0 and broker.topics["t"].configs == {"retention.ms": "1000"}
    responses = await alter(broker, alter_resource(TOPIC, "u", {"retention.ms": "5"}),
                            alter_resource(TOPIC, "t", {"retention.ms": "5"}),
                            alter_resource(TOPIC, "u", {}))
    assert [r.error_code for r in responses] == [ErrorCode.INVALID_REQUEST, 0, ErrorCode.INVALID_REQUEST]
    assert broker.topics["t"].configs == {"retention.ms": "5"} and broker.topics["u"].configs == {}


# ---------------------------------------------------------------- IncrementalAlterConfigs

def incr_resource(rtype, name, *ops):
    return {"resource_type": rtype, "resource_name": name,
            "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]}


async def incr(broker, *resources, version=1, validate_only=False):
    resp = await call(broker, incremental_alter, version, {"resources": list(resources),
                                                           "validate_only": validate_only})
    return resp.responses


@pytest.mark.anyio
@pytest.mark.parametrize("version", [0, 1])
async def test_incremental_alter_configs(broker, version):
    await create(broker, new_topic("t", 1, 1, {"retention.ms": "1000", "segment.bytes": "2000000"}))
    [r] = await incr(broker, incr_resource(TOPIC, "t", ("retention.bytes", SET, "999"),
                                           ("segment.bytes", DELETE, None),
                                           ("cleanup.policy", APPEND, "delete")), version=version)
    assert (r.error_code, r.error_message, r.resource_name) == (0, None, "t")
    assert broker.topics["t"].configs == {"retention.ms": "1000", "retention.bytes": "999",
                                          "cleanup.policy": "delete"}
    again = reopen(broker)
    try:
        assert again.topics["t"].configs == {"retention.ms": "1000", "retention.bytes": "999",
                                             "cleanup.policy": "delete"}
    finally:
        again.close()


@pytest.mark.anyio
async def test_incremental_alter_configs_errors(broker):
    await create(broker, new_topic("t", 1, 1, {"retention.ms": "1000"}))
    before = {"retention.ms": "1000"}
    cases = [
        (incr_resource(TOPIC, "t", ("retention.ms", APPEND, "5")), ErrorCode.INVALID_CONFIG),
        (incr_resource(TOPIC, "t", ("cleanup.policy", APPEND, "compress")), ErrorCode.INVALID_CONFIG),
        (incr_resource(TOPIC, "t", ("retention.bytes", SET, "3"), ("retention.ms", SET, "x")),
         ErrorCode.INVALID_CONFIG),
        (incr_resource(TOPIC, "t", ("no.such", DELETE, None)), ErrorCode.INVALID_CONFIG),
        (incr_resource(TOPIC, "t", ("retention.ms", SET, None)), ErrorCode.INVALID_REQUEST),
        (incr_resource(TOPIC, "t", ("retention.ms", 9, "1")), ErrorCode.INVALID_REQUEST),
        (incr_resource(TOPIC, "t", ("retention.ms", SET, "1"), ("retention.ms", DELETE, None)),
         ErrorCode.INVALID_REQUEST),
        (incr_resource(TOPIC, "missing", ("retention.ms", SET, "1")), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (incr_resource(BROKER, "0", ("num.partitions", SET, "3")), ErrorCode.INVALID_CONFIG),
        (incr_resource(BROKER, "7", ("log.retention.ms", SET, "3")), ErrorCode.INVALID_REQUEST),
    ]
    for case, code in cases:  # one resource per request: a resource named twice is itself an error
        [r] = await incr(broker, case)
        assert r.error_code == code, case
        assert r.error_message
    responses = await incr(broker, cases[0][0], cases[-3][0], incr_resource(TOPIC, "t", ("retention.ms", SET, "7")),
                           incr_resource(TOPIC, "t"))
    assert [r.error_code for r in responses] == [ErrorCode.INVALID_REQUEST, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                 ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST]
    assert broker.topics["t"].configs == before
    [r] = await incr(broker, incr_resource(TOPIC, "t", ("retention.ms", DELETE, None)), validate_only=True)
    assert r.error_code == 0 and broker.topics["t"].configs == before
    [r] = await incr(broker, incr_resource(TOPIC, "t", ("retention.ms", DELETE, None),
                                           ("cleanup.policy", SUBTRACT, "compact")))
    assert r.error_code == 0 and broker.topics["t"].configs == {"cleanup.policy": "delete"}


@pytest.mark.anyio
async def test_subtracting_the_last_cleanup_policy_leaves_the_empty_list(broker):
    """As Kafka 4.x: SUBTRACT of `delete` from `delete` is cleanup.policy="" (neither retention nor
    compaction), which DescribeConfigs shows as the topic's own value; SET "" is taken too, and
    APPEND starts again from the empty list."""
    await create(broker, new_topic("t"), new_topic("u"))
    [r] = await incr(broker, incr_resource(TOPIC, "t", ("cleanup.policy", SUBTRACT, "delete")))
    assert (r.error_code, r.error_message) == (0, None)
    [u] = await alter(broker, alter_resource(TOPIC, "u", {"cleanup.policy": ""}))
    assert u.error_code == 0
    for name in ("t", "u"):
        assert broker.topics[name].configs == {"cleanup.policy": ""}
        [result] = await describe(broker, resource(TOPIC, name, ["cleanup.policy"]))
        [entry] = result.configs
        assert (entry.value, entry.config_source) == ("", 1)
        log_config = broker.partition(name, 0).log_config
        assert not log_config.delete and not log_config.compact
    [r] = await incr(broker, incr_resource(TOPIC, "t", ("cleanup.policy", APPEND, "compact")))
    assert r.error_code == 0 and broker.topics["t"].configs == {"cleanup.policy": "compact"}
    again = reopen(broker)
    try:
        assert again.topics["u"].configs == {"cleanup.policy": ""}
    finally:
        again.close()


@pytest.mark.anyio
async def test_internal_topics_take_config_changes(broker):
    """As Kafka's KRaft brokers: AlterConfigs and IncrementalAlterConfigs on __consumer_offsets and
    __transaction_state succeed and reach their partitions' logs (writes stay the coordinators')."""
    from kshim.coordinator.runtime import INTERNAL_TOPIC_CONFIGS
    for name in ("__consumer_offsets", "__transaction_state"):
        await broker.create_topic(name, 2, INTERNAL_TOPIC_CONFIGS)  # as their coordinators create them
    [r] = await incr(broker, incr_resource(TOPIC, "__consumer_offsets", ("segment.bytes", SET, "1024")))
    assert (r.error_code, r.error_message) == (0, None)
    [r] = await alter(broker, alter_resource(TOPIC, "__transaction_state", {"cleanup.policy": "compact",
                                                                           "segment.bytes": "2048"}))
    assert (r.error_code, r.error_message) == (0, None)
    for name, size in (("__consumer_offsets", 1024), ("__transaction_state", 2048)):
        assert broker.topics[name].configs == {"cleanup.policy": "compact", "segment.bytes": str(size)}
        for index in range(2):
            assert broker.partition(name, index).log.config.segment_bytes == size


# ---------------------------------------------------------------- DescribeCluster

@pytest.mark.anyio
@pytest.mark.parametrize("version", [0, 1])
async def test_describe_cluster(broker, version):
    body = {"include_cluster_authorized_operations": True}
    if version >= 1:
        body["endpoint_type"] = 1
    resp = await call(broker, describe_cluster, version, body)
    assert resp.error_code == 0 and resp.cluster_id == broker.cluster_id and resp.controller_id == 0
    assert [(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers] == [(0, "127.0.0.1", 9092, None)]
    # asked for, without an authorizer: every cluster operation (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION,
    # DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE), as Kafka answers
    assert resp.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    if version >= 1:
        assert resp.endpoint_type == 1
        resp = await call(broker, describe_cluster, 1, {"endpoint_type": 2})
        assert resp.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


# ---------------------------------------------------------------- DeleteRecords

def produce(broker, topic, index, count):
    result = broker.partition(topic, index).append(encode_batch([(b"k", b"v%d" % i) for i in range(count)]))
    assert result.error == 0


async def delete_recs(broker, version, *topics):
    resp = await call(broker, delete_records, version, {"topics": [
        {"name": name, "partitions": [{"partition_index": i, "offset": o} for i, o in parts]}
        for name, parts in topics], "timeout_ms": 1000})
    return {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in resp.topics for p in t.partitions}


@pytest.mark.anyio
@pytest.mark.parametrize("version", range(0, 3))
async def test_delete_records(broker, version):
    await create(broker, new_topic("t", 3))
    for index in range(3):
        for _ in range(3):
            produce(broker, "t", index, 4)  # 12 records per partition
    out = await delete_recs(broker, version, ("t", [(0, 5), (1, -1), (2, 13), (3, 0)]), ("missing", [(0, 0)]))
    assert out == {("t", 0): (0, 5), ("t", 1): (0, 12), ("t", 2): (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
                   ("t", 3): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
                   ("missing", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    assert broker.partition("t", 0).log_start_offset == 5
    assert broker.partition("t", 1).log_start_offset == 12
    assert broker.partition("t", 2).log_start_offset == 0
    # below the current start: nothing changes, not an error
    out = await delete_recs(broker, version, ("t", [(0, 2), (2, -2)]))
    assert out == {("t", 0): (0, 5), ("t", 2): (ErrorCode.OFFSET_OUT_OF_RANGE, -1)}
    again = reopen(broker)
    try:
        assert again.partition("t", 0).log_start_offset == 5
        assert again.partition("t", 1).log_start_offset == 12
    finally:
        again.close()


@pytest.mark.anyio
@pytest.mark.parametrize("version", range(0, 3))
async def test_delete_records_of_a_compact_only_topic_is_a_policy_violation(broker, version):
    """Kafka's Partition.deleteRecordsOnLeader: cleanup.policy compact without delete refuses
    DeleteRecords (POLICY_VIOLATION, before the offset is even looked at), the log start unmoved;
    compact,delete and the empty policy allow it."""
    policies = {"compact": "compact", "both": "compact,delete", "empty": ""}
    await create(broker, *(new_topic(name, 1, 1, {"cleanup.policy": policy}) for name, policy in policies.items()))
    for name in policies:
        broker.partition(name, 0).append(encode_batch([(b"k%d" % i, b"v") for i in range(12)]))
    out = await delete_recs(broker, version, ("compact", [(0, 5)]), ("both", [(0, 5)]), ("empty", [(0, -1)]))
    assert out == {("compact", 0): (ErrorCode.POLICY_VIOLATION, -1), ("both", 0): (0, 5), ("empty", 0): (0, 12)}
    for offset in (-1, 99):
        out = await delete_recs(broker, version, ("compact", [(0, offset)]))
        assert out == {("compact", 0): (ErrorCode.POLICY_VIOLATION, -1)}
    assert broker.partition("compact", 0).log_start_offset == 0
    [r] = await incr(broker, incr_resource(TOPIC, "compact", ("cleanup.policy", APPEND, "delete")))
    assert r.error_code == 0
    assert await delete_recs(broker, version, ("compact", [(0, 5)])) == {("compact", 0): (0, 5)}


@pytest.mark.anyio
async def test_partition_counts_are_capped(broker):
    out = await create(broker, new_topic("huge", 10_001, 1), new_topic("ok", 2, 1))
    assert out["huge"].error_code == ErrorCode.INVALID_PARTITIONS and "10000" in out["huge"].error_message
    assert out["ok"].error_code == 0
    assert "huge" not in broker.topics


@pytest.mark.anyio
async def test_concurrent_creates_of_one_topic_open_each_replica_once(broker):
    """Two coordinators asking for __consumer_offsets at once (two FindCoordinator requests on a
    new broker): one create wins, the other gets TOPIC_ALREADY_EXISTS while the winner's replicas
    are still being opened off the loop. The loser must not open them again beside it (it once
    did, synchronously: two writers of one partition directory, a FileNotFoundError)."""
    import threading
    import time

    import anyio
    from kshim.errors import BrokerError

    outcomes: list[object] = []

    async def create_one() -> None:
        try:
            outcomes.append(await broker.create_topic("raced", 64))
        except BrokerError as e:
            outcomes.append(e.code)

    opening = anyio.Event()
    real_open = broker.replica_manager._open_replica

    def slow_open(*args, **kwargs):  # the winner's replicas open slowly, in a worker thread
        if threading.current_thread() is not threading.main_thread():
            anyio.from_thread.run_sync(opening.set)
            time.sleep(0.002)
        return real_open(*args, **kwargs)

    broker.replica_manager._open_replica = slow_open
    async with anyio.create_task_group() as tg:
        tg.start_soon(create_one)
        await opening.wait()  # the others come while the winner is opening its replicas
        for _ in range(3):
            tg.start_soon(create_one)
    broker.replica_manager._open_replica = real_open
    assert sorted(o == ErrorCode.TOPIC_ALREADY_EXISTS for o in outcomes) == [False, True, True, True]
    replicas = [p for p in broker.replicas() if p.topic == "raced"]
    assert sorted(p.index for p in replicas) == list(range(64))
    assert len({id(p.log) for p in replicas}) == 64


# ---------------------------------------------------------------- DescribeLogDirs

@pytest.mark.anyio
@pytest.mark.parametrize("version", range(1, 6))
async def test_describe_log_dirs_reports_real_sizes_and_the_file_system(broker, version):
    await create(broker, new_topic("t", 2), new_topic("u", 1))
    produce(broker, "t", 1, 10)
    resp = await call(broker, describe_log_dirs, version, {"topics": None})
    [result] = resp.results
    assert result.error_code == 0 and result.log_dir == str(broker.config.data_dir.resolve())
    sizes = {(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
             for t in result.topics for p in t.partitions}
    assert sizes == {("t", 0): (0, 0, False), ("t", 1): (broker.partition("t", 1).log.size_bytes, 0, False),
                     ("u", 0): (0, 0, False)}
    assert sizes[("t", 1)][0] > 10 * 5  # ten records and a batch header
    if version >= 4:
        assert 0 < result.usable_bytes <= result.total_bytes
    resp = await call(broker, describe_log_dirs, version, {"topics": [
        {"topic": "t", "partitions": [1, 7]}, {"topic": "nope", "partitions": [0]}]})
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.results[0].topics] == [("t", [1])]


# ---------------------------------------------------------------- DescribeQuorum

@pytest.mark.anyio
@pytest.mark.parametrize("version", range(0, 3))
async def test_describe_quorum_answers_a_quorum_of_one(broker, version):
    asked = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
    resp = await call(broker, describe_quorum, version, asked)
    [topic] = resp.topics
    [p] = topic.partitions
    assert (resp.error_code, topic.topic_name, p.error_code, p.leader_id) == (0, "__cluster_metadata", 0, 0)
    assert p.high_watermark == broker.image.version and p.leader_epoch >= 1
    assert [(r.replica_id, r.log_end_offset) for r in p.current_voters] == [(0, broker.image.version)]
    assert [(r.replica_id, r.log_end_offset) for r in p.observers] == [(0, broker.image.version)]
    for wrong in ({"topics": [{"topic_name": "other", "partitions": [{"partition_index": 0}]}]},
                  {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 1}]}]}):
        resp = await call(broker, describe_quorum, version, wrong)
        assert [(p.partition_index, p.error_code) for t in resp.topics for p in t.partitions] == [
            (wrong["topics"][0]["partitions"][0]["partition_index"], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


# ---------------------------------------------------------------- UpdateFeatures, ApiVersions features

async def features(broker, version=4):
    header = RequestHeader(18, version, 1, "test", 0)
    resp = await api_versions.handle(RequestContext(served(broker), header, "test:0", {}), codec.decode(
        18, version, "request", codec.encode(18, version, "request", {"client_software_name": "t",
                                                                      "client_software_version": "1"}), exact=True))
    resp = codec.decode(18, version, "response", codec.encode(18, version, "response", resp), exact=True)
    return ({f.name: (f.min_version, f.max_version) for f in resp.supported_features},
            {f.name: f.max_version_level for f in resp.finalized_features}, resp.finalized_features_epoch)


@pytest.mark.anyio
async def test_api_versions_reports_features_with_transaction_version_2(broker):
    supported, finalized, epoch = await features(broker)
    assert supported == {"metadata.version": (30, 30), "group.version": (0, 1), "share.version": (0, 1),
                         "transaction.version": (0, 2)}
    assert finalized == {"metadata.version": 30, "group.version": 1, "share.version": 1,
                         "transaction.version": 2} and epoch > 0
    supported, _, _ = await features(broker, 3)
    assert supported == {"metadata.version": (30, 30)}  # v3 leaves out minimum-0 features


@pytest.mark.anyio
async def test_api_versions_is_sent_as_encoded_once_until_features_or_throttle_change(broker):
    """The answer goes out as the bytes encoded for the first one; they are what a fresh encoding
    of the body gives, after a feature change too, and a quota's throttle is never lost to them."""
    from kshim.net.protocol import ConnectionCore, Encoded, Request
    supported = {18: (0, 4), 3: (0, 12)}  # the server's table: one object for its whole life

    async def answer(version=4):
        header = RequestHeader(18, version, 7, "test", 0)
        body = await api_versions.handle(
            RequestContext(served(broker), header, "test:0", supported),
            codec.decode(18, version, "request", codec.encode(18, version, "request", {
                "client_software_name": "t", "client_software_version": "1"}), exact=True))
        return Request(header, None, 0), body

    def sent(request, body):
        return b"".join(bytes(c) for c in ConnectionCore.response_bytes(request, body))

    request, body = await answer()
    assert type(body) is Encoded
    assert sent(request, body) == sent(request, dict(body))  # the encoded bytes are the body's
    again = (await answer())[1]
    assert again is not body and again.data is body.data  # encoded once
    again["throttle_time_ms"] = 250  # a request quota raised it on the way out
    assert sent(request, again) == sent(request, dict(again)) != sent(request, body)
    resp = await call(broker, update_features, 2, {"timeout_ms": 1000, "validate_only": False, "feature_updates": [
        feature_update(2, "transaction.version", 1, upgrade_type=2)]})
    assert resp.error_code == ErrorCode.NONE
    request, changed = await answer()
    assert changed.data != body.data and sent(request, changed) == sent(request, dict(changed))
    assert {f["name"]: f["max_version_level"] for f in changed["finalized_features"]}["transaction.version"] == 1


def feature_update(version, name, level, upgrade_type=1):
    if version == 0:
        return {"feature": name, "max_version_level": level, "allow_downgrade": upgrade_type > 1}
    return {"feature": name, "max_version_level": level, "upgrade_type": upgrade_type}


@pytest.mark.anyio
@pytest.mark.parametrize("version", range(0, 3))
async def test_update_features_validates_persists_and_gates_the_consumer_protocol(broker, version):
    def body(*updates, validate_only=False):
        return {"timeout_ms": 1000, "feature_updates": list(updates), **({"validate_only": validate_only} if version else {})}

    resp = await call(broker, update_features, version, body(feature_update(version, "transaction.version", 3)))
    assert resp.error_code == ErrorCode.INVALID_UPDATE_VERSION and "transaction.version" in resp.error_message
    if version < 2:
        assert [(r.feature, r.error_code) for r in resp.results] == [("transaction.version", resp.error_code)]
    resp = await call(broker, update_features, version, body(feature_update(version, "transaction.version", 0, 2)))
    assert resp.error_code == 0
    if version >= 1:
        resp = await call(broker, update_features, version, body(feature_update(version, "group.version", 0, 4)))
        assert resp.error_code == ErrorCode.INVALID_UPDATE_VERSION and "upgrade type" in resp.error_message
        resp = await call(broker, update_features, version, body(feature_update(version, "group.version", 0, 2),
                                                                 validate_only=True))
        assert resp.error_code == 0 and (await features(broker))[1]["group.version"] == 1
    resp = await call(broker, update_features, version, body(feature_update(version, "group.version", 0, 1)))
    assert resp.error_code == ErrorCode.INVALID_UPDATE_VERSION  # a downgrade, not said to be one
    resp = await call(broker, update_features, version, body(feature_update(version, "group.version", 0, 2)))
    assert resp.error_code == 0
    _, finalized, epoch = await features(broker)
    assert finalized == {"metadata.version": 30, "share.version": 1} and epoch == broker.image.version  # transaction.version 0: absent
    hb = {"group_id": "g", "member_id": "m" * 22, "member_epoch": 0, "instance_id": None, "rack_id": None,
          "rebalance_timeout_ms": 1000, "subscribed_topic_names": ["t"], "server_assignor": None,
          "topic_partitions": [], "subscribed_topic_regex": None}
    resp = await call(broker, group_heartbeat, 1, hb)
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    again = reopen(broker)
    try:
        assert again.image.features == {"metadata.version": 30, "share.version": 1}
    finally:
        again.close()


# ---------------------------------------------------------------- ListConfigResources, UnregisterBroker

@pytest.mark.anyio
async def test_list_config_resources(broker):
    await create(broker, new_topic("b"), new_topic("a"))
    resp = await call(broker, list_config_resources, 1, {"resource_types": []})
    assert resp.error_code == 0
    assert [(r.resource_type, r.resource_name) for r in resp.config_resources] == [(2, "a"), (2, "b"), (4, "0")]
    resp = await call(broker, list_config_resources, 1, {"resource_types": [4]})
    assert [(r.resource_type, r.resource_name) for r in resp.config_resources] == [(4, "0")]
    for unsupported in (8, 99):
        resp = await call(broker, list_config_resources, 1, {"resource_types": [2, unsupported]})
        assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION and resp.config_resources == []
    resp = await call(broker, list_config_resources, 0, {})
    assert resp.error_code == 0 and resp.config_resources == []  # no client-metrics subscriptions yet
    resp = await call(broker, list_config_resources, 1, {"resource_types": [16]})
    assert resp.error_code == 0 and resp.config_resources == []  # (tests/test_telemetry.py lists some)


@pytest.mark.anyio
async def test_unregister_an_unknown_broker(broker):
    resp = await call(broker, unregister_broker, 0, {"broker_id": 5})
    assert resp.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED and "5" in resp.error_message
