"""What the transactional APIs share: the version from which a client understands
PRODUCER_FENCED (KIP-588); older versions get INVALID_PRODUCER_EPOCH for the same condition."""
from __future__ import annotations

from wire.errors import ErrorCode


def for_version(code: ErrorCode, version: int, fenced_since: int) -> ErrorCode:
    if code == ErrorCode.PRODUCER_FENCED and version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
