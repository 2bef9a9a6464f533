"""The handlers' questions to the authorizer (kshim.security.acls): may this request's principal, from its
client host, do an operation on a topic, group, transactional id or the cluster? The answer comes
from the broker's authorizer settings and the ACLs of the image it last applied, so every broker
decides the same. Without --authorizer everything is allowed.
"""
from __future__ import annotations

from typing import Iterable, Protocol

from kshim.cluster.image import MetadataImage
from kshim.errors import BrokerError
from kshim.security.acls import (CLUSTER_NAME, OPERATIONS_OF, AclIndex, AclOperation, Authorizer, AuthorizerConfig,
                                  ResourceType, host_of)
from wire.errors import ErrorCode

class _Settings(Protocol):
    @property
    def authorizer(self) -> AuthorizerConfig: ...


class _Node(Protocol):
    @property
    def image(self) -> MetadataImage: ...

    @property
    def config(self) -> _Settings: ...


class Asker(Protocol):
    """What a question to the authorizer reads: the request's principal and client address, the
    broker's authorizer settings and the ACLs of its image (a handler's RequestContext is one)."""
    @property
    def principal(self) -> str: ...

    @property
    def peer(self) -> str: ...

    @property
    def broker(self) -> _Node: ...

# the authorized-operations fields when the client did not ask for them (or there is no authorizer)
NOT_PROVIDED = -(1 << 31)

# the index of the bindings of the last few images seen (an image's ACL tuple is shared by its
# successors until the ACLs change, so this is rebuilt only on ACL changes)
_indexes: dict[int, tuple[tuple, AclIndex]] = {}


def authorizer(ctx: Asker) -> Authorizer:
    acls = ctx.broker.image.acls
    cached = _indexes.get(id(acls))
    if cached is None or cached[0] is not acls:
        if len(_indexes) >= 8:
            _indexes.clear()
        cached = _indexes[id(acls)] = (acls, AclIndex(acls))
    return Authorizer(ctx.broker.config.authorizer, cached[1])


def enabled(ctx: Asker) -> bool:
    return ctx.broker.config.authorizer.enabled


def allowed(ctx: Asker, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
    if not enabled(ctx):
        return True
    return authorizer(ctx).allowed(ctx.principal, host_of(ctx.peer), op, resource_type, name)


def topic_allowed(ctx: Asker, op: AclOperation, topic: str) -> bool:
    return allowed(ctx, op, ResourceType.TOPIC, topic)


def group_allowed(ctx: Asker, op: AclOperation, group: str) -> bool:
    return allowed(ctx, op, ResourceType.GROUP, group)


def cluster_allowed(ctx: Asker, op: AclOperation) -> bool:
    return allowed(ctx, op, ResourceType.CLUSTER, CLUSTER_NAME)


def txn_allowed(ctx: Asker, op: AclOperation, transactional_id: str) -> bool:
    return allowed(ctx, op, ResourceType.TRANSACTIONAL_ID, transactional_id)


def may_create_topic(ctx: Asker, topic: str) -> bool:
    """CREATE on the cluster or on the topic, as Kafka asks of CreateTopics and auto-creation."""
    return cluster_allowed(ctx, AclOperation.CREATE) or topic_allowed(ctx, AclOperation.CREATE, topic)


def any_topic_allowed(ctx: Asker, op: AclOperation) -> bool:
    """Whether some topic, existing or not, may be `op`ed: an ALLOW binding for the principal
    that no DENY of ALL (or `op`) on every topic outweighs (Kafka's authorizeByResourceType)."""
    if not enabled(ctx):
        return True
    auth = authorizer(ctx)
    if ctx.principal in auth.config.super_users:
        return True
    return auth.any_allowed(ctx.principal, host_of(ctx.peer), op, ResourceType.TOPIC)


def check_cluster(ctx: Asker, op: AclOperation) -> None:
    """CLUSTER_AUTHORIZATION_FAILED unless the principal may do `op` on the cluster."""
    if not cluster_allowed(ctx, op):
        raise BrokerError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                          f"{ctx.principal} may not {op.name} the cluster")


def check_group(ctx: Asker, op: AclOperation, group: str) -> None:
    if not group_allowed(ctx, op, group):
        raise BrokerError(ErrorCode.GROUP_AUTHORIZATION_FAILED, f"{ctx.principal} may not {op.name} group {group!r}")


def check_txn(ctx: Asker, op: AclOperation, transactional_id: str) -> None:
    if not txn_allowed(ctx, op, transactional_id):
        raise BrokerError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                          f"{ctx.principal} may not {op.name} transactional id {transactional_id!r}")


CONFIG_TOPIC, CONFIG_BROKER, CONFIG_CLIENT_METRICS, CONFIG_GROUP = 2, 4, 16, 32  # config resource types (DescribeConfigs, AlterConfigs)


def check_configs(ctx: Asker, resource_type: int, name: str, op: AclOperation) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on a config resource: the topic (else
    TOPIC_AUTHORIZATION_FAILED), the group (else GROUP_AUTHORIZATION_FAILED) or, for a broker or a
    client-metrics subscription, the cluster (else CLUSTER_AUTHORIZATION_FAILED)."""
    if resource_type == CONFIG_TOPIC and not topic_allowed(ctx, op, name):
        raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not {op.name} topic {name!r}")
    if resource_type == CONFIG_GROUP and not group_allowed(ctx, op, name):
        raise BrokerError(ErrorCode.GROUP_AUTHORIZATION_FAILED, f"{ctx.principal} may not {op.name} group {name!r}")
    if resource_type in (CONFIG_BROKER, CONFIG_CLIENT_METRICS):
        check_cluster(ctx, op)


def denied_topics(ctx: Asker, op: AclOperation, names: Iterable[str]) -> set[str]:
    """The names among `names` the principal may not `op` (nothing without an authorizer)."""
    if not enabled(ctx):
        return set()
    auth, host = authorizer(ctx), host_of(ctx.peer)
    return {n for n in set(names) if not auth.allowed(ctx.principal, host, op, ResourceType.TOPIC, n)}


def operations(ctx: Asker, resource_type: ResourceType, name: str, asked: bool) -> int:
    """An authorized-operations bit field: NOT_PROVIDED unless asked for; every operation of the
    resource type when there is no authorizer."""
    if not asked:
        return NOT_PROVIDED
    if not enabled(ctx):
        return sum(1 << op for op in OPERATIONS_OF[resource_type])
    bits = authorizer(ctx).allowed_operations(ctx.principal, host_of(ctx.peer), resource_type, name)
    return bits if bits & (1 << AclOperation.DESCRIBE) else 0  # as Kafka: nothing for what one may not see
