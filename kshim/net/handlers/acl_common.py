"""What DescribeAcls, CreateAcls and DeleteAcls share: the authorizer must be on (else
SECURITY_DISABLED, as Kafka answers without authorizer.class.name), the principal must be allowed
on the cluster, and the request's filters become kshim.security.acls filters.

Not a handler module (no NN_ prefix): the registry does not load it.
"""
from __future__ import annotations

from construct import Container

from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclBinding, AclFilter, AclOperation
from wire.errors import ErrorCode


def check_acl_access(ctx: RequestContext, op: AclOperation) -> None:
    """BrokerError unless ACLs may be read (DESCRIBE) or changed (ALTER) by this principal."""
    if not authz.enabled(ctx):
        raise BrokerError(ErrorCode.SECURITY_DISABLED,
                          "no authorizer is configured: start kshim serve with --authorizer (docs/security.md)")
    authz.check_cluster(ctx, op)


def request_filter(f: Container) -> AclFilter:
    return AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                     f.host_filter, f.operation, f.permission_type)


def acl_fields(acl: AclBinding) -> dict:
    """A binding as the response fields DeleteAcls' matching ACLs have."""
    return {"resource_type": acl.resource_type, "resource_name": acl.resource_name,
            "pattern_type": acl.pattern_type, "principal": acl.principal, "host": acl.host,
            "operation": acl.operation, "permission_type": acl.permission}
