"""ACLs through real admin clients and enforced on real producers and consumers: kafka-python's and
confluent-kafka's admin clients create, describe and delete them; with `--authorizer` a DENY for
User:ANONYMOUS (every client until SASL) on a topic makes produce and consume fail with
TOPIC_AUTHORIZATION_FAILED while other topics work, Metadata hides the topic, a group DENY gives
GROUP_AUTHORIZATION_FAILED (each DENY beside an ALLOW it must override), the ACLs survive a
restart, and every broker of a cluster enforces an ACL created through any one of them."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ConfigResource, NewTopic, ResourcePatternType, ResourceType)
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                         KafkaAdminClient, ResourcePattern, ResourcePatternFilter)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import GroupAuthorizationFailedError, SecurityDisabledError, TopicAuthorizationFailedError

from compat_tests.cluster import Cluster, running
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import FETCH, RawConnection
from wire.errors import ErrorCode

pytestmark = pytest.mark.process
TIMEOUT = 20
ANONYMOUS = "User:ANONYMOUS"
METADATA = 3


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker enforcing ACLs, open to everyone where no ACL applies (so the anonymous clients
    may create ACLs and topics)."""
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-acls"), "--authorizer", "--allow-everyone-if-no-acl-found",
                        "--super-users", "User:admin").start()
    yield proc
    assert proc.terminate() == 0, "kshim did not shut down cleanly:\n" + proc.logs()


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def _create_topics(admin: AdminClient, *names: str, rf: int = 1) -> None:
    futures = admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=rf) for n in names])
    for f in futures.values():
        f.result(timeout=TIMEOUT)


def _acl(admin: AdminClient, rtype: ResourceType, name: str, principal: str,
         permission: AclPermissionType) -> AclBinding:
    acl = AclBinding(rtype, name, ResourcePatternType.LITERAL, principal, "*", AclOperation.ALL, permission)
    for f in admin.create_acls([acl]).values():
        f.result(timeout=TIMEOUT)
    return acl


def _deny(admin: AdminClient, rtype: ResourceType, name: str, principal: str = ANONYMOUS) -> AclBinding:
    return _acl(admin, rtype, name, principal, AclPermissionType.DENY)


def _allow(admin: AdminClient, rtype: ResourceType, name: str, principal: str = ANONYMOUS) -> AclBinding:
    return _acl(admin, rtype, name, principal, AclPermissionType.ALLOW)


def _filter_of(acl: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(acl.restype, acl.name, acl.resource_pattern_type, acl.principal, acl.host,
                            acl.operation, acl.permission_type)


def _produce(bootstrap: str, topic: str) -> KafkaError | None:
    """The delivery error of one record (None when it was acknowledged)."""
    outcome: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "log_level": 3})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT)
    assert outcome, "no delivery report"
    return outcome[0]


def _visible(bootstrap: str) -> set[str]:
    """The topics one broker's Metadata lists (asked of that broker, not of the cluster)."""
    with RawConnection(bootstrap) as conn:
        resp = conn.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
    return {t.name for t in resp.topics}


# ------------------------------------------------------------------ admin clients
def test_confluent_admin_creates_describes_and_deletes_acls(secured):
    admin = _admin(secured.bootstrap)
    principal = f"User:app-{uuid.uuid4().hex[:6]}"
    # the cluster ACL below closes the cluster to everyone it does not name (an ACL now applies to
    # it): keep the anonymous admin client allowed to manage ACLs
    keep = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, ANONYMOUS, "*",
                      AclOperation.ALTER, AclPermissionType.ALLOW)
    admin.create_acls([keep])[keep].result(timeout=TIMEOUT)
    bindings = [
        AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, principal, "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, principal, "10.0.0.1",
                   AclOperation.WRITE, AclPermissionType.DENY),
        AclBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, principal, "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.TRANSACTIONAL_ID, "tx", ResourcePatternType.LITERAL, principal, "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, principal, "*",
                   AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW),
    ]
    for f in admin.create_acls(bindings).values():
        assert f.result(timeout=TIMEOUT) is None
    mine = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                            AclPermissionType.ANY)
    assert set(admin.describe_acls(mine).result(timeout=TIMEOUT)) == set(bindings)
    # MATCH: what applies to the topic "orders-eu" (the prefixed DENY), and nothing else
    match = AclBindingFilter(ResourceType.TOPIC, "orders-eu", ResourcePatternType.MATCH, principal, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(match).result(timeout=TIMEOUT) == [bindings[1]]
    groups = AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, principal, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([groups])[groups].result(timeout=TIMEOUT)
    assert deleted == [bindings[2]]
    assert set(admin.describe_acls(mine).result(timeout=TIMEOUT)) == set(bindings) - {bindings[2]}
    for f in admin.delete_acls([mine]).values():
        f.result(timeout=TIMEOUT)
    assert admin.describe_acls(mine).result(timeout=TIMEOUT) == []
    bad = AclBinding(ResourceType.BROKER, "my-cluster", ResourcePatternType.LITERAL, principal, "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as e:
        admin.create_acls([bad])[bad].result(timeout=TIMEOUT)
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST
    for f in admin.delete_acls([_filter_of(keep)]).values():
        assert f.result(timeout=TIMEOUT) == [keep]


def test_kafka_python_admin_creates_describes_and_deletes_acls(secured):
    admin = KafkaAdminClient(bootstrap_servers=secured.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        principal = f"User:kp-{uuid.uuid4().hex[:6]}"
        acls = [ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                    ResourcePattern(KpResourceType.TOPIC, "payments", ACLResourcePatternType.LITERAL)),
                ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                    ResourcePattern(KpResourceType.GROUP, "pay-", ACLResourcePatternType.PREFIXED))]
        result = admin.create_acls(acls)
        assert not result["failed"] and len(result["succeeded"]) == 2
        mine = ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY,
                         ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY))
        found, error = admin.describe_acls(mine)
        assert error.errno == 0
        assert {(a.resource_pattern.resource_type, a.resource_pattern.resource_name,
                 a.resource_pattern.pattern_type) for a in found} == {
            (KpResourceType.TOPIC, "payments", ACLResourcePatternType.LITERAL),
            (KpResourceType.GROUP, "pay-", ACLResourcePatternType.PREFIXED)}
        [(_, deleted, error)] = admin.delete_acls([mine])
        assert error.errno == 0 and len(deleted) == 2
        assert admin.describe_acls(mine)[0] == []
    finally:
        admin.close()


def test_acl_apis_without_an_authorizer_answer_security_disabled(kshim):
    admin = KafkaAdminClient(bootstrap_servers=kshim.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                          ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        admin.close()


def test_describe_configs_shows_the_authorizer(secured):
    res = ConfigResource(ResourceType.BROKER, "0")
    admin = _admin(secured.bootstrap)  # held: a collected client cancels its requests
    configs = admin.describe_configs([res])[res].result(timeout=TIMEOUT)
    assert configs["authorizer.class.name"].value == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert configs["super.users"].value == "User:admin"
    assert configs["allow.everyone.if.no.acl.found"].value == "true"


# ------------------------------------------------------------------ enforcement
def test_topic_deny_fails_produce_and_consume_and_hides_the_topic(secured):
    admin = _admin(secured.bootstrap)
    suffix = uuid.uuid4().hex[:8]
    open_topic, closed = f"open-{suffix}", f"closed-{suffix}"
    _create_topics(admin, open_topic, closed)
    assert _produce(secured.bootstrap, closed) is None  # before the ACL: allowed (no ACL applies)
    # an ALLOW first, which alone lets the client through: a DENY-only topic would be closed to
    # it anyway (an ACL applies, none allows), so the DENY below is proved to override it
    _allow(admin, ResourceType.TOPIC, closed)
    assert _produce(secured.bootstrap, closed) is None and closed in _visible(secured.bootstrap)
    _deny(admin, ResourceType.TOPIC, closed)

    error = _produce(secured.bootstrap, closed)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce(secured.bootstrap, open_topic) is None
    visible = _visible(secured.bootstrap)
    assert open_topic in visible and closed not in visible

    producer = KafkaProducer(bootstrap_servers=secured.bootstrap, max_block_ms=10000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(closed, b"v").get(timeout=TIMEOUT)
        assert producer.send(open_topic, b"v").get(timeout=TIMEOUT).offset >= 0
    finally:
        producer.close()

    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": f"g-{suffix}",
                         "auto.offset.reset": "earliest", "log_level": 3})
    try:
        consumer.subscribe([closed])
        deadline = time.monotonic() + TIMEOUT
        errors = []
        while not errors and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is not None, "a record of a denied topic was delivered"
                errors.append(msg.error().code())
        assert errors == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    finally:
        consumer.close()
    # a consumer that knows the partition anyway (kafka-python only logs the Metadata refusal and
    # never fetches): the fetch itself is refused
    with RawConnection(secured.bootstrap) as conn:
        resp = conn.request(FETCH, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                        "isolation_level": 0, "session_epoch": -1, "rack_id": "",
                                        "topics": [{"topic": closed, "partitions": [
                                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    refused = resp.responses[0].partitions[0]
    assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not refused.records


def test_group_deny_gives_group_authorization_failed(secured):
    admin = _admin(secured.bootstrap)
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"t-{suffix}", f"denied-{suffix}"
    _create_topics(admin, topic)
    assert _produce(secured.bootstrap, topic) is None
    _allow(admin, ResourceType.GROUP, group)  # what the DENY must override (see the topic test)
    _deny(admin, ResourceType.GROUP, group)
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "log_level": 3})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        error = None
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is not None, "a member of a denied group was given records"
                error = msg.error().code()
        assert error == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    kp = KafkaConsumer(topic, bootstrap_servers=secured.bootstrap, group_id=group, auto_offset_reset="earliest")
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in range(40):
                kp.poll(timeout_ms=250)
    finally:
        kp.close()


def test_acls_survive_a_restart(tmp_path):
    proc = KshimProcess(tmp_path / "data", "--authorizer", "--allow-everyone-if-no-acl-found").start()
    try:
        admin = _admin(proc.bootstrap)
        _create_topics(admin, "kept", "denied")
        _deny(admin, ResourceType.TOPIC, "denied")
        assert proc.terminate() == 0
        proc.start()
        assert _visible(proc.bootstrap) >= {"kept"} and "denied" not in _visible(proc.bootstrap)
        error = _produce(proc.bootstrap, "denied")
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        proc.kill()


def test_every_broker_of_a_cluster_enforces_an_acl_created_through_one(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3, "--authorizer", "--allow-everyone-if-no-acl-found")) as cluster:
        brokers = [f"127.0.0.1:{cluster.base_port + i}" for i in range(3)]
        admin = _admin(brokers[1])  # every request of this client goes through broker 1 only
        _create_topics(admin, "free", "locked", rf=3)
        wait_until(lambda: all({"free", "locked"} <= _visible(b) for b in brokers), TIMEOUT,
                   message="every broker lists both topics")
        _deny(admin, ResourceType.TOPIC, "locked")
        # each broker, asked itself, hides the topic: the ACL reached every broker's image
        wait_until(lambda: all("locked" not in _visible(b) for b in brokers), TIMEOUT,
                   message="every broker hides the denied topic")
        assert all("free" in _visible(b) for b in brokers)
        for b in brokers:
            error = _produce(b, "locked")
            assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert _produce(brokers[0], "free") is None
        # deleted through another broker: every broker allows it again
        deny_all = AclBindingFilter(ResourceType.TOPIC, "locked", ResourcePatternType.LITERAL, None, None,
                                    AclOperation.ANY, AclPermissionType.ANY)
        other = _admin(brokers[2])
        for f in other.delete_acls([deny_all]).values():
            assert len(f.result(timeout=TIMEOUT)) == 1
        wait_until(lambda: all("locked" in _visible(b) for b in brokers), TIMEOUT,
                   message="every broker lists the topic again")
