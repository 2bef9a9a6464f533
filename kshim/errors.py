"""Errors that carry a Kafka error code to answer, shared by broker, controller and handlers."""
from __future__ import annotations

import re

from wire.errors import ErrorCode

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class BrokerError(Exception):
    """A request-level failure with the Kafka error code to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message


class StartRefused(Exception):
    """A server that must not start as things are (its message says why and what to do)."""


def refusal_behind(e: BaseException) -> StartRefused | None:
    """The StartRefused behind `e`, also inside exception groups."""
    if isinstance(e, StartRefused):
        return e
    for inner in getattr(e, "exceptions", ()) or ():
        found = refusal_behind(inner)
        if found is not None:
            return found
    return None


def os_error_behind(e: BaseException) -> OSError | None:
    """The OSError behind `e`, also when a task group wrapped it alone in an exception group
    (a port already in use surfaces that way from a server's task group)."""
    if isinstance(e, OSError):
        return e
    inner = getattr(e, "exceptions", None)
    return os_error_behind(inner[0]) if inner and len(inner) == 1 else None


def check_topic_name(name: str | None) -> None:
    if not name or name in (".", "..") or not _LEGAL_TOPIC.match(name):
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                          f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-] and not '.' or '..'")
