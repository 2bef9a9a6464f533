"""What the share-group offset APIs (90-92) share (not a handler module): the group's checks on
its coordinator, and the share-partition state calls (through the share coordinator)."""
from __future__ import annotations

from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode


def group_error(ctx: RequestContext, group: str, op: AclOperation, must_be_empty: bool = False
                ) -> tuple[ErrorCode, str | None]:
    """The group-level error: no `op` on the group, not coordinated here (or loading), no such
    share group, or (to change offsets) members in it."""
    if not authz.group_allowed(ctx, op, group):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    code = ctx.groups.check(group)
    if code:
        return code, None
    code, share = ctx.groups.share_group(group)
    if code or share is None:
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} is not a share group."
    if must_be_empty and share.members:
        return ErrorCode.NON_EMPTY_GROUP, "The group has active members: its offsets cannot change."
    return ErrorCode.NONE, None
