"""ACLs for authenticated principals (docs/security.md): SASL users on a SASL_PLAINTEXT listener, the
authorizer on, an admin super user. An ACL allows alice and not bob, per API: what alice may do
works, bob gets Kafka's authorization errors, and Metadata hides from bob what he may not see."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from compat_tests.kshim_process import KshimProcess

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("acls-sasl")
    users = tmp / "users.txt"
    users.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    proc = KshimProcess(tmp / "data", "--listeners", "SASL_PLAINTEXT://127.0.0.1:0", "--sasl-users", str(users),
                        "--authorizer", "--super-users", "User:admin").start()
    yield proc
    assert proc.terminate() == 0
    for password in USERS.values():
        assert password not in proc.logs()


def settings(broker: KshimProcess, user: str, **extra) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user],
            "log_level": 3, **extra}


def allow(admin: AdminClient, user: str, rtype: ResourceType, name: str, *ops: AclOperation) -> None:
    bindings = [AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op, AclPermissionType.ALLOW)
                for op in ops]
    for future in admin.create_acls(bindings).values():
        future.result(15)


def produce(broker: KshimProcess, user: str, topic: str) -> KafkaError | None:
    """The delivery error of one record (None: delivered)."""
    errors: list[KafkaError | None] = []
    p = Producer(settings(broker, user, **{"message.timeout.ms": 10000}))
    p.produce(topic, b"value", on_delivery=lambda err, msg: errors.append(err))
    p.flush(20)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def consume_error(broker: KshimProcess, user: str, topic: str, group: str) -> tuple[int, KafkaError | None]:
    """(records read, first error) for a group consumer of `user` polling up to 20 s."""
    c = Consumer(settings(broker, user, **{"group.id": group, "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    read, error = 0, None
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline and not read and error is None:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                error = msg.error()
            else:
                read += 1
    finally:
        c.close()
    return read, error


def test_an_acl_allows_one_principal_and_denies_another(broker):
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(settings(broker, "admin"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    allow(admin, "alice", ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ)
    allow(admin, "alice", ResourceType.GROUP, group, AclOperation.READ)

    # Produce: WRITE on the topic
    assert produce(broker, "alice", topic) is None
    denied = produce(broker, "bob", topic)
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied

    # Metadata: bob may not describe the topic, so it is hidden from his listing; alice sees it
    assert topic in AdminClient(settings(broker, "alice")).list_topics(timeout=10).topics
    assert topic not in AdminClient(settings(broker, "bob")).list_topics(timeout=10).topics

    # JoinGroup/Fetch/OffsetCommit: READ on the group and the topic
    read, error = consume_error(broker, "alice", topic, group)
    assert read == 1 and error is None, error
    read, error = consume_error(broker, "bob", topic, group)
    assert read == 0 and error is not None and error.code() in (
        KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED), error

    # CreateTopics: CREATE on the cluster or the topic; neither user has it, the super user does
    bob_admin = AdminClient(settings(broker, "bob"))
    bobs = f"bobs-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException) as refused:
        bob_admin.create_topics([NewTopic(bobs, 1, 1)])[bobs].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # CreateAcls: ALTER on the cluster; bob cannot grant himself anything
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.ALL, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        bob_admin.create_acls([binding])[binding].result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # once the super user allows bob, he may write
    allow(admin, "bob", ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert produce(broker, "bob", topic) is None
