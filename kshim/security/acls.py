"""ACLs and the decision whether a principal may do an operation on a resource, as Kafka's
StandardAuthorizer decides it (pure logic: the controller stores the bindings, the metadata image
carries them to every broker, and the handlers ask `Authorizer.allowed`).

- A binding is a resource pattern (type, name, LITERAL or PREFIXED) and an entry (principal,
  host, operation, ALLOW or DENY). A LITERAL name "*" matches every resource of its type; a
  PREFIXED name matches the resources whose name starts with it. Principal "User:*" and host "*"
  match everyone.
- Super users may do everything. Otherwise a matching DENY wins over any ALLOW; an ALLOW of ALL
  allows everything, and DESCRIBE is implied by READ, WRITE, DELETE and ALTER, DESCRIBE_CONFIGS
  by ALTER_CONFIGS (a DENY denies only its own operation, or everything for ALL).
- A resource no binding at all applies to (for any principal) is allowed only with
  allow.everyone.if.no.acl.found; a resource with bindings, none of them allowing the principal, is
  denied.
- Filters (DescribeAcls, DeleteAcls): ANY matches any value, a null name, principal or host any;
  pattern type MATCH selects the bindings that would apply to the named resource (the literal
  name, the literal "*", prefixes of it).

The codes are Kafka's (org.apache.kafka.common.acl and .resource), as they travel on the wire.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable

from kshim.controller.schema import Int32


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"  # a LITERAL resource name, a host, or the name part of a principal ("User:*")
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"
# what authorizer.class.name reports when the authorizer is on (the class kshim's follows)
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# an ALLOW of any of these also allows DESCRIBE (resp. DESCRIBE_CONFIGS): Kafka's implied operations
_IMPLY_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                             AclOperation.DELETE, AclOperation.ALTER})
_IMPLY_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# the operations each resource type has (Kafka's AclEntry.supportedOperations), for the
# authorized-operations bit fields of Metadata and DescribeGroups
OPERATIONS_OF: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


class InvalidAcl(ValueError):
    """A binding or filter Kafka refuses with INVALID_REQUEST."""


@dataclass(frozen=True)
class AclBinding:
    resource_type: Int32
    resource_name: str
    pattern_type: Int32  # LITERAL or PREFIXED
    principal: str
    host: str
    operation: Int32
    permission: Int32


@dataclass(frozen=True)
class AclFilter:
    resource_type: Int32  # ANY: every type
    resource_name: str | None  # None: any name
    pattern_type: Int32  # ANY, MATCH, LITERAL or PREFIXED
    principal: str | None
    host: str | None
    operation: Int32  # ANY: every operation
    permission: Int32  # ANY: both

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not _pattern_applies(acl, self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and acl.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and acl.resource_name != self.resource_name:
                return False
        return ((self.principal is None or acl.principal == self.principal)
                and (self.host is None or acl.host == self.host)
                and (self.operation == AclOperation.ANY or acl.operation == self.operation)
                and (self.permission == Permission.ANY or acl.permission == self.permission))


def _pattern_applies(acl: AclBinding, name: str) -> bool:
    """Whether acl's resource pattern covers the resource called `name`."""
    if acl.pattern_type == PatternType.LITERAL:
        return acl.resource_name in (name, WILDCARD)
    return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.resource_name)


def _known(enum: type[IntEnum], value: int) -> IntEnum:
    try:
        return enum(value)
    except ValueError:
        raise InvalidAcl(f"unknown {enum.__name__} code {value}") from None


def validate_binding(acl: AclBinding) -> None:
    """InvalidAcl unless `acl` may be created (Kafka's AclControlManager and AclApis checks)."""
    rtype = _known(ResourceType, acl.resource_type)
    if rtype in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise InvalidAcl(f"invalid resource type {rtype.name}")
    pattern = _known(PatternType, acl.pattern_type)
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"invalid pattern type {pattern.name}: an ACL is LITERAL or PREFIXED")
    op = _known(AclOperation, acl.operation)
    if op in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise InvalidAcl(f"invalid operation {op.name}")
    perm = _known(Permission, acl.permission)
    if perm not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAcl(f"invalid permission type {perm.name}")
    if not acl.resource_name:
        raise InvalidAcl("invalid empty resource name")
    if rtype == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise InvalidAcl(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    kind, colon, name = acl.principal.partition(":")
    if not colon or not kind or not name:
        raise InvalidAcl(f"could not parse principal {acl.principal!r}: expected TYPE:NAME, e.g. User:alice")
    if not acl.host:
        raise InvalidAcl("invalid empty host: use * for every host")


def parse_super_users(text: str) -> frozenset[str]:
    """Kafka's super.users: principals separated by semicolons; InvalidAcl for one not TYPE:NAME."""
    users = frozenset(u.strip() for u in text.split(";") if u.strip())
    for user in users:
        kind, colon, name = user.partition(":")
        if not colon or not kind or not name:
            raise InvalidAcl(f"super user {user!r} is not a principal TYPE:NAME, e.g. User:alice")
    return users


def validate_filter(f: AclFilter) -> None:
    """InvalidAcl for a filter with an UNKNOWN (or out-of-range) code."""
    for enum, value in ((ResourceType, f.resource_type), (PatternType, f.pattern_type),
                        (AclOperation, f.operation), (Permission, f.permission)):
        if _known(enum, value) == 0:
            raise InvalidAcl(f"invalid filter: {enum.__name__} UNKNOWN")


@dataclass(frozen=True)
class AuthorizerConfig:
    enabled: bool = False  # off: everything is allowed and the ACL APIs answer SECURITY_DISABLED
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


class AclIndex:
    """The bindings of one image, indexed by resource type and name, for quick decisions."""

    def __init__(self, acls: Iterable[AclBinding]) -> None:
        self.acls = tuple(acls)
        self._literal: dict[tuple[int, str], list[AclBinding]] = defaultdict(list)
        self._prefixed: dict[int, list[AclBinding]] = defaultdict(list)
        for acl in self.acls:
            if acl.pattern_type == PatternType.LITERAL:
                self._literal[(acl.resource_type, acl.resource_name)].append(acl)
            else:
                self._prefixed[acl.resource_type].append(acl)

    def applying(self, resource_type: int, name: str) -> list[AclBinding]:
        """The bindings whose pattern covers the resource (any principal, host, operation)."""
        out = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out += self._literal.get((resource_type, WILDCARD), ())
        out += [a for a in self._prefixed.get(resource_type, ()) if name.startswith(a.resource_name)]
        return out

    def find(self, f: AclFilter) -> list[AclBinding]:
        return [a for a in self.acls if f.matches(a)]


def principal_matches(acl: AclBinding, principal: str) -> bool:
    return acl.principal in (principal, WILDCARD_PRINCIPAL)


def _operation_matches(acl: AclBinding, op: AclOperation) -> bool:
    if acl.operation in (AclOperation.ALL, op):
        return True
    if acl.permission == Permission.DENY:
        return False  # a DENY denies its own operation only
    if op == AclOperation.DESCRIBE:
        return acl.operation in _IMPLY_DESCRIBE
    if op == AclOperation.DESCRIBE_CONFIGS:
        return acl.operation in _IMPLY_DESCRIBE_CONFIGS
    return False


class Authorizer:
    """Decisions for one configuration and one image's bindings."""

    def __init__(self, config: AuthorizerConfig, index: AclIndex) -> None:
        self.config = config
        self.index = index

    def allowed(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if not self.config.enabled or principal in self.config.super_users:
            return True
        applying = self.index.applying(resource_type, name)
        if not applying:
            return self.config.allow_everyone_if_no_acl_found
        allow = False
        for acl in applying:
            if not principal_matches(acl, principal) or acl.host not in (host, WILDCARD):
                continue
            if not _operation_matches(acl, op):
                continue
            if acl.permission == Permission.DENY:
                return False
            allow = True
        return allow

    def any_allowed(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType) -> bool:
        """Whether `op` is allowed on some resource of the type (Kafka's authorizeByResourceType,
        KIP-679: idempotent producers need WRITE on some topic): an ALLOW that no DENY covers."""
        if not self.config.enabled or principal in self.config.super_users:
            return True
        mine = [a for a in self.index.acls if a.resource_type == resource_type and principal_matches(a, principal)
                and a.host in (host, WILDCARD) and a.operation in (AclOperation.ALL, op)]
        denies = [a for a in mine if a.permission == Permission.DENY]
        if any(d.pattern_type == PatternType.LITERAL and d.resource_name == WILDCARD for d in denies):
            return False
        if self.config.allow_everyone_if_no_acl_found:
            return True  # some name no ACL applies to exists
        for allow in mine:
            if allow.permission != Permission.ALLOW:
                continue
            if not any(_covers(d, allow) for d in denies):
                return True
        return False

    def allowed_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The bit field of the operations allowed on the resource (Metadata's and DescribeGroups'
        authorized operations: bit i set for operation code i)."""
        bits = 0
        for op in OPERATIONS_OF.get(resource_type, ()):
            if self.allowed(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether every resource `allow` applies to is also denied by `deny`."""
    if deny.pattern_type == PatternType.PREFIXED:
        return allow.resource_name.startswith(deny.resource_name) and allow.resource_name != WILDCARD
    return (deny.resource_name == allow.resource_name and allow.pattern_type == PatternType.LITERAL
            and allow.resource_name != WILDCARD)


def host_of(peer: str) -> str:
    """The client address of a "host:port" peer (IPv6 hosts keep their colons)."""
    host, _, _ = peer.rpartition(":")
    return host.strip("[]") or peer
