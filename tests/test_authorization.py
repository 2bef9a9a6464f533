"""ACLs enforced by the handlers, per principal: one principal allowed, another denied, API by
API (the principal is the request context's, as the listener sets it once authenticated).

Requests and responses go through the codec, as in test_admin_handlers.
"""
from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.net.handlers import RequestContext
from kshim.security.acls import AclOperation as Op, AuthorizerConfig, Permission, ResourceType as RT
from kshim.standalone import open_standalone
from tests.nodes import served
from wire import codec
from wire.errors import ErrorCode
from wire.headers import RequestHeader
from wire.records import encode_batch


def handler(name: str) -> ModuleType:
    return importlib.import_module(f"kshim.net.handlers.{name}")


produce, fetch, list_offsets, metadata = (handler(n) for n in ("00_produce", "01_fetch", "02_list_offsets",
                                                               "03_metadata"))
offset_commit, offset_fetch, find_coordinator, join_group = (handler(n) for n in (
    "08_offset_commit", "09_offset_fetch", "10_find_coordinator", "11_join_group"))
describe_groups, list_groups, create_topics, delete_topics = (handler(n) for n in (
    "15_describe_groups", "16_list_groups", "19_create_topics", "20_delete_topics"))
init_producer_id, end_txn, describe_configs, alter_configs = (handler(n) for n in (
    "22_init_producer_id", "26_end_txn", "32_describe_configs", "33_alter_configs"))
describe_acls, create_acls, delete_acls, create_partitions = (handler(n) for n in (
    "29_describe_acls", "30_create_acls", "31_delete_acls", "37_create_partitions"))
delete_groups, describe_cluster, offset_for_epoch = (handler(n) for n in (
    "42_delete_groups", "60_describe_cluster", "23_offset_for_leader_epoch"))

ADMIN, ALICE, BOB = "User:admin", "User:alice", "User:bob"
LITERAL, PREFIXED = 3, 4
ALLOW, DENY = Permission.ALLOW, Permission.DENY


@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path, authorizer=AuthorizerConfig(True, frozenset({ADMIN}))))
    yield b
    b.close()


async def call(broker: Broker, module: ModuleType, version: int, body: dict, principal: str = ADMIN,
               peer: str = "10.0.0.7:50000"):
    key = module.API_KEY
    req = codec.decode(key, version, "request", codec.encode(key, version, "request", body), exact=True)
    ctx = RequestContext(served(broker), RequestHeader(key, version, 1, "test", 0), peer, {}, principal)
    resp = await module.handle(ctx, req)
    if resp is not None and not isinstance(resp, dict):
        resp = await resp
    return codec.decode(key, version, "response", codec.encode(key, version, "response", resp), exact=True)


def creation(rtype: RT, name: str, principal: str, op: Op, perm: Permission = ALLOW, pattern: int = LITERAL,
             host: str = "*") -> dict:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": host, "operation": op, "permission_type": perm}


async def grant(broker: Broker, *creations: dict) -> None:
    resp = await call(broker, create_acls, 3, {"creations": list(creations)})
    assert [r.error_code for r in resp.results] == [ErrorCode.NONE] * len(creations), resp


async def new_topic(broker: Broker, name: str, partitions: int = 1) -> None:
    resp = await call(broker, create_topics, 7, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 1000, "validate_only": False})
    assert resp.topics[0].error_code == ErrorCode.NONE


def produce_body(topic: str, tid: str | None = None) -> dict:
    return {"transactional_id": tid, "acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": encode_batch([(b"k", b"v")])}]}]}


# ------------------------------------------------------------------ the ACL APIs
@pytest.mark.anyio
async def test_acl_apis_need_the_authorizer(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        resp = await call(b, describe_acls, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                               "pattern_type_filter": 1, "principal_filter": None,
                                               "host_filter": None, "operation": 1, "permission_type": 1})
        assert resp.error_code == ErrorCode.SECURITY_DISABLED
        resp = await call(b, create_acls, 3, {"creations": [creation(RT.TOPIC, "t", ALICE, Op.READ)]})
        assert resp.results[0].error_code == ErrorCode.SECURITY_DISABLED
        assert b.image.acls == ()
    finally:
        b.close()


@pytest.mark.anyio
async def test_create_describe_delete_acls(broker):
    await grant(broker, creation(RT.TOPIC, "orders", ALICE, Op.READ),
                creation(RT.TOPIC, "ord", BOB, Op.WRITE, DENY, PREFIXED),
                creation(RT.GROUP, "g", ALICE, Op.READ))
    resp = await call(broker, create_acls, 3, {"creations": [
        creation(RT.TOPIC, "t", "alice", Op.READ), creation(RT.CLUSTER, "c", ALICE, Op.ALTER),
        creation(RT.ANY, "t", ALICE, Op.READ), creation(RT.TOPIC, "t", ALICE, Op.READ, pattern=2)]})
    assert [r.error_code for r in resp.results] == [ErrorCode.INVALID_REQUEST] * 4
    # MATCH: the ACLs that apply to topic "orders"
    resp = await call(broker, describe_acls, 3, {
        "resource_type_filter": RT.TOPIC, "resource_name_filter": "orders", "pattern_type_filter": 2,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    assert resp.error_code == ErrorCode.NONE
    got = {(r.resource_name, r.pattern_type, a.principal, a.operation, a.permission_type)
           for r in resp.resources for a in r.acls}
    assert got == {("orders", LITERAL, ALICE, Op.READ, ALLOW), ("ord", PREFIXED, BOB, Op.WRITE, DENY)}
    resp = await call(broker, delete_acls, 3, {"filters": [
        {"resource_type_filter": RT.ANY, "resource_name_filter": None, "pattern_type_filter": 1,
         "principal_filter": ALICE, "host_filter": None, "operation": 1, "permission_type": 1},
        {"resource_type_filter": 0, "resource_name_filter": None, "pattern_type_filter": 1,
         "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]})
    first, second = resp.filter_results
    assert first.error_code == ErrorCode.NONE and {a.resource_name for a in first.matching_acls} == {"orders", "g"}
    assert second.error_code == ErrorCode.INVALID_REQUEST
    assert [(a.resource_name, a.principal) for a in broker.image.acls] == [("ord", BOB)]


@pytest.mark.anyio
async def test_acl_apis_need_cluster_permissions(broker):
    resp = await call(broker, create_acls, 3, {"creations": [creation(RT.TOPIC, "t", ALICE, Op.ALL)]}, ALICE)
    assert resp.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    await grant(broker, creation(RT.CLUSTER, "kafka-cluster", ALICE, Op.ALTER))
    resp = await call(broker, create_acls, 3, {"creations": [creation(RT.TOPIC, "t", ALICE, Op.ALL)]}, ALICE)
    assert resp.results[0].error_code == ErrorCode.NONE
    # ALTER implies DESCRIBE: alice may list them; bob may not
    body = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    assert (await call(broker, describe_acls, 3, body, ALICE)).error_code == ErrorCode.NONE
    assert (await call(broker, describe_acls, 3, body, BOB)).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


# ------------------------------------------------------------------ topics
@pytest.mark.anyio
async def test_produce_and_fetch_per_principal(broker):
    await new_topic(broker, "orders")
    await grant(broker, creation(RT.TOPIC, "orders", ALICE, Op.WRITE), creation(RT.TOPIC, "orders", ALICE, Op.READ))
    ok = await call(broker, produce, 9, produce_body("orders"), ALICE)
    assert ok.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    refused = await call(broker, produce, 9, produce_body("orders"), BOB)
    assert refused.responses[0].partition_responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert broker.partition("orders", 0).log_end_offset == 1  # bob's record was not appended
    body = {"replica_id": -1, "max_wait_ms": 5000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "orders", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                            "fetch_offset": 0, "last_fetched_epoch": -1,
                                                            "log_start_offset": -1,
                                                            "partition_max_bytes": 1 << 20}]}]}
    assert (await call(broker, fetch, 12, body, ALICE)).responses[0].partitions[0].records
    # bob's is answered at once (min_bytes is not waited for), with no records
    denied = (await call(broker, fetch, 12, body, BOB)).responses[0].partitions[0]
    assert denied.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not denied.records
    # a follower's fetch needs CLUSTER_ACTION
    assert (await call(broker, fetch, 12, {**body, "replica_id": 1}, ALICE)).error_code == \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    epochs = {"replica_id": -1, "topics": [{"topic": "orders", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}
    assert (await call(broker, offset_for_epoch, 4, epochs, ALICE)).topics[0].partitions[0].error_code == 0
    assert (await call(broker, offset_for_epoch, 4, epochs, BOB)).topics[0].partitions[0].error_code == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    offsets = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
    assert (await call(broker, list_offsets, 7, offsets, ALICE)).topics[0].partitions[0].offset == 1
    assert (await call(broker, list_offsets, 7, offsets, BOB)).topics[0].partitions[0].error_code == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED


@pytest.mark.anyio
async def test_transactional_produce_needs_write_on_the_transactional_id(broker):
    await new_topic(broker, "t")
    await grant(broker, creation(RT.TOPIC, "t", ALICE, Op.WRITE))
    resp = await call(broker, produce, 9, produce_body("t", tid="tx"), ALICE)
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.mark.anyio
async def test_metadata_hides_topics_the_principal_may_not_describe(broker):
    for name in ("public", "secret"):
        await new_topic(broker, name)
    await grant(broker, creation(RT.TOPIC, "public", "User:*", Op.READ),
                creation(RT.TOPIC, "secret", ALICE, Op.DESCRIBE))
    body = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": True}
    seen = {t.name: t.topic_authorized_operations for t in (await call(broker, metadata, 12, body, BOB)).topics}
    assert set(seen) == {"public"}
    assert seen["public"] == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert {t.name for t in (await call(broker, metadata, 12, body, ALICE)).topics} == {"public", "secret"}
    asked = await call(broker, metadata, 12, {**body, "topics": [{"topic_id": None, "name": "secret"}]}, BOB)
    assert asked.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and asked.topics[0].partitions == []
    # auto-creation needs CREATE on the cluster or the topic
    create = {**body, "topics": [{"topic_id": None, "name": "new"}], "allow_auto_topic_creation": True}
    assert (await call(broker, metadata, 12, create, BOB)).topics[0].error_code == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "new" not in broker.topics


@pytest.mark.anyio
async def test_topic_admin_per_principal(broker):
    await grant(broker, creation(RT.TOPIC, "a-", ALICE, Op.ALL, pattern=PREFIXED))
    topic = {"name": "a-1", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    req = {"topics": [topic, {**topic, "name": "b-1"}], "timeout_ms": 1000, "validate_only": False}
    resp = await call(broker, create_topics, 7, req, ALICE)
    assert [t.error_code for t in resp.topics] == [ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    describe = {"resources": [{"resource_type": 2, "resource_name": "a-1", "configuration_keys": None}],
                "include_synonyms": False, "include_documentation": False}
    assert (await call(broker, describe_configs, 4, describe, ALICE)).results[0].error_code == ErrorCode.NONE
    assert (await call(broker, describe_configs, 4, describe, BOB)).results[0].error_code == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    brokers = {**describe, "resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None}]}
    assert (await call(broker, describe_configs, 4, brokers, ALICE)).results[0].error_code == \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    alter = {"resources": [{"resource_type": 2, "resource_name": "a-1",
                            "configs": [{"name": "retention.ms", "value": "1000"}]}], "validate_only": True}
    assert (await call(broker, alter_configs, 2, alter, BOB)).responses[0].error_code == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    grow = {"topics": [{"name": "a-1", "count": 2, "assignments": None}], "timeout_ms": 1000, "validate_only": True}
    assert (await call(broker, create_partitions, 3, grow, BOB)).results[0].error_code == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert (await call(broker, create_partitions, 3, grow, ALICE)).results[0].error_code == ErrorCode.NONE
    delete = {"topics": [{"name": "a-1", "topic_id": None}], "timeout_ms": 1000}
    assert (await call(broker, delete_topics, 6, delete, BOB)).responses[0].error_code == \
        ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert (await call(broker, delete_topics, 6, delete, ALICE)).responses[0].error_code == ErrorCode.NONE


# ------------------------------------------------------------------ groups and transactions
@pytest.mark.anyio
async def test_group_apis_per_principal(broker):
    await grant(broker, creation(RT.GROUP, "g", ALICE, Op.READ), creation(RT.TOPIC, "t", ALICE, Op.READ))
    find = {"key_type": 0, "coordinator_keys": ["g"]}
    assert (await call(broker, find_coordinator, 4, find, ALICE)).coordinators[0].error_code == ErrorCode.NONE
    assert (await call(broker, find_coordinator, 4, find, BOB)).coordinators[0].error_code == \
        ErrorCode.GROUP_AUTHORIZATION_FAILED
    served(broker).groups.load_pending()
    join = {"group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
            "reason": None}
    assert (await call(broker, join_group, 9, join, BOB)).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    commit = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
              "topics": [{"name": name, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}
                         for name in ("t", "u")]}
    resp = await call(broker, offset_commit, 9, commit, ALICE)
    assert [t.partitions[0].error_code for t in resp.topics] == [ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    resp = await call(broker, offset_commit, 9, commit, BOB)
    assert {t.partitions[0].error_code for t in resp.topics} == {ErrorCode.GROUP_AUTHORIZATION_FAILED}
    fetched = {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1, "topics": None}],
               "require_stable": False}
    resp = await call(broker, offset_fetch, 9, fetched, ALICE)
    assert [(t.name, t.partitions[0].committed_offset) for t in resp.groups[0].topics] == [("t", 5)]
    assert (await call(broker, offset_fetch, 9, fetched, BOB)).groups[0].error_code == \
        ErrorCode.GROUP_AUTHORIZATION_FAILED
    described = await call(broker, describe_groups, 5, {"groups": ["g"], "include_authorized_operations": True}, ALICE)
    assert described.groups[0].error_code == ErrorCode.NONE
    assert described.groups[0].authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert (await call(broker, describe_groups, 5, {"groups": ["g"], "include_authorized_operations": False},
                       BOB)).groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    listed = {"states_filter": [], "types_filter": []}
    assert [g.group_id for g in (await call(broker, list_groups, 5, listed, ALICE)).groups] == ["g"]
    assert (await call(broker, list_groups, 5, listed, BOB)).groups == []
    assert (await call(broker, delete_groups, 2, {"groups_names": ["g"]}, ALICE)).results[0].error_code == \
        ErrorCode.GROUP_AUTHORIZATION_FAILED  # READ is not DELETE


@pytest.mark.anyio
async def test_transactional_and_idempotent_producers(broker):
    await grant(broker, creation(RT.TRANSACTIONAL_ID, "tx-", ALICE, Op.WRITE, pattern=PREFIXED))
    init = {"transactional_id": "tx-1", "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1,
            "enable2_pc": False, "keep_prepared_txn": False}
    find = {"key_type": 1, "coordinator_keys": ["tx-1"]}
    assert (await call(broker, find_coordinator, 4, find, BOB)).coordinators[0].error_code == \
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert (await call(broker, find_coordinator, 4, find, ALICE)).coordinators[0].error_code == ErrorCode.NONE
    assert (await call(broker, init_producer_id, 5, init, BOB)).error_code == \
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    end = {"transactional_id": "tx-1", "producer_id": 1, "producer_epoch": 0, "committed": True}
    assert (await call(broker, end_txn, 4, end, BOB)).error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # idempotence: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679)
    idempotent = {**init, "transactional_id": None}
    assert (await call(broker, init_producer_id, 5, idempotent, BOB)).error_code == \
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    await grant(broker, creation(RT.TOPIC, "t", BOB, Op.WRITE))
    assert (await call(broker, init_producer_id, 5, idempotent, BOB)).error_code == ErrorCode.NONE
    await grant(broker, creation(RT.CLUSTER, "kafka-cluster", "User:carol", Op.IDEMPOTENT_WRITE))
    assert (await call(broker, init_producer_id, 5, idempotent, "User:carol")).error_code == ErrorCode.NONE


@pytest.mark.anyio
async def test_host_acls_and_cluster_operations(broker):
    await grant(broker, creation(RT.CLUSTER, "kafka-cluster", ALICE, Op.DESCRIBE, host="10.0.0.7"))
    body = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
    assert (await call(broker, describe_cluster, 1, body, ALICE)).cluster_authorized_operations == 1 << Op.DESCRIBE
    # from another host: nothing (Kafka answers 0 to a principal that may not describe the cluster)
    assert (await call(broker, describe_cluster, 1, body, ALICE, peer="10.9.9.9:1")).cluster_authorized_operations == 0
    assert (await call(broker, describe_cluster, 1, body, ADMIN)).cluster_authorized_operations == \
        sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


@pytest.mark.anyio
async def test_fetch_by_topic_id_and_broker_only_apis(broker):
    await new_topic(broker, "by-id")
    await grant(broker, creation(RT.TOPIC, "by-id", ALICE, Op.READ))
    topic_id = broker.topics["by-id"].topic_id
    body = {"replica_id": -1, "max_wait_ms": 5000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                               "fetch_offset": 0, "last_fetched_epoch": -1,
                                                               "log_start_offset": -1,
                                                               "partition_max_bytes": 1 << 20}]}]}
    ok = (await call(broker, fetch, 13, {**body, "max_wait_ms": 0}, ALICE)).responses[0].partitions[0]
    assert ok.error_code == ErrorCode.NONE
    refused = (await call(broker, fetch, 13, body, BOB)).responses[0].partitions[0]
    assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    markers = {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                            "topics": [{"name": "by-id", "partition_indexes": [0]}]}]}
    resp = await call(broker, handler("27_write_txn_markers"), 1, markers, ALICE)
    assert resp.markers[0].topics[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@pytest.mark.anyio
async def test_elect_leaders_needs_alter_on_the_cluster(broker):
    await new_topic(broker, "elect")
    body = {"election_type": 0, "topic_partitions": [{"topic": "elect", "partitions": [0]}], "timeout_ms": 1000}
    elect = handler("43_elect_leaders")
    refused = await call(broker, elect, 2, body, ALICE)
    assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [p.error_code for t in refused.replica_election_results for p in t.partition_result] == \
        [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    await grant(broker, creation(RT.CLUSTER, "kafka-cluster", ALICE, Op.ALTER))
    allowed = await call(broker, elect, 2, body, ALICE)  # its only replica leads already
    assert allowed.error_code == ErrorCode.NONE
    assert [p.error_code for t in allowed.replica_election_results for p in t.partition_result] == \
        [ErrorCode.ELECTION_NOT_NEEDED]


# the cluster-wide admin APIs: (handler, version, body, where the refusal shows, operation needed)
CLUSTER_ADMIN = [
    ("48_describe_client_quotas", 1, {"components": [], "strict": False},
     lambda r: [r.error_code], Op.DESCRIBE_CONFIGS),
    ("49_alter_client_quotas", 1, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "c"}],
                                                "ops": [{"key": "producer_byte_rate", "value": 1e6, "remove": False}]}],
                                   "validate_only": True},
     lambda r: [e.error_code for e in r.entries], Op.ALTER_CONFIGS),
    ("50_describe_user_scram_credentials", 0, {"users": [{"name": "carol"}]},
     lambda r: [r.error_code] + [u.error_code for u in r.results], Op.DESCRIBE),
    ("51_alter_user_scram_credentials", 0, {"deletions": [{"name": "carol", "mechanism": 1}], "upsertions": []},
     lambda r: [u.error_code for u in r.results], Op.ALTER),
    ("55_describe_quorum", 2, {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
     lambda r: [r.error_code], Op.DESCRIBE),
    ("57_update_features", 1, {"timeout_ms": 1000, "feature_updates": [
        {"feature": "group.version", "max_version_level": 1, "upgrade_type": 1}], "validate_only": True},
     lambda r: [r.error_code] + [f.error_code for f in r.results], Op.ALTER),
    ("64_unregister_broker", 0, {"broker_id": 7}, lambda r: [r.error_code], Op.ALTER),
]


@pytest.mark.anyio
@pytest.mark.parametrize("name,version,body,codes,op", CLUSTER_ADMIN, ids=[c[0] for c in CLUSTER_ADMIN])
async def test_cluster_admin_apis_need_their_cluster_operation(broker, name, version, body, codes, op):
    module = handler(name)
    refused = codes(await call(broker, module, version, body, ALICE))
    assert refused and set(refused) == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    await grant(broker, creation(RT.CLUSTER, "kafka-cluster", ALICE, op))
    allowed = codes(await call(broker, module, version, body, ALICE))
    assert ErrorCode.CLUSTER_AUTHORIZATION_FAILED not in allowed


@pytest.mark.anyio
async def test_describe_topic_partitions_answers_only_what_the_principal_may_describe(broker):
    await new_topic(broker, "seen")
    await new_topic(broker, "hidden")
    await grant(broker, creation(RT.TOPIC, "seen", ALICE, Op.READ))  # READ implies DESCRIBE
    describe = handler("75_describe_topic_partitions")
    body = {"topics": [], "response_partition_limit": 2000, "cursor": None}
    every = await call(broker, describe, 0, body, ALICE)
    assert [t.name for t in every.topics] == ["seen"]
    assert every.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    named = await call(broker, describe, 0, {**body, "topics": [{"name": "hidden"}, {"name": "absent"}]}, ALICE)
    assert [(t.name, t.error_code, t.partitions) for t in named.topics] == [
        ("absent", ErrorCode.TOPIC_AUTHORIZATION_FAILED, []), ("hidden", ErrorCode.TOPIC_AUTHORIZATION_FAILED, [])]
