"""Share sessions (KIP-932), as Kafka's ShareSessionCache keeps them: one per (group, member).

- ShareFetch epoch 0 opens a session with the partitions it names (one the member had is
  replaced; acknowledgements with it are INVALID_REQUEST); the next requests carry the next
  epochs (1, 2, ... wrapping to 1), add partitions and forget others. An unknown session is
  SHARE_SESSION_NOT_FOUND (epoch -1 included), a wrong epoch INVALID_SHARE_SESSION_EPOCH; epoch -1
  closes it whatever its epoch (the handler applies that request's acknowledgements first, then
  releases what the member holds). The member leaving its group does not close it.
  ShareAcknowledge never opens one (epoch 0 is INVALID_SHARE_SESSION_EPOCH) and advances the
  epoch as a fetch does.
- At most `max_sessions` (Kafka's group.share.max.share.sessions, 2000) at once: a new one
  evicts the least recently used session idle for more than EVICTION_MS (its member's records
  go back by the caller), else it gets SHARE_SESSION_LIMIT_REACHED.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from wire.errors import ErrorCode

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
INT32_MAX = (1 << 31) - 1
DEFAULT_MAX_SESSIONS = 2000
EVICTION_MS = 45_000  # Kafka's group.share.session.timeout.ms: a member silent this long has left

SessionKey = tuple[str, str]
SharePartitionId = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclass(slots=True)
class ShareSession:
    key: SessionKey
    epoch: int
    last_used_ms: int
    partitions: dict[SharePartitionId, None] = field(default_factory=dict)  # ordered set


class ShareSessionCache:
    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}

    def open(self, key: SessionKey, partitions: list[SharePartitionId], now_ms: int
             ) -> tuple[ErrorCode, ShareSession | None, list[ShareSession]]:
        """A new session for `key` (replacing its old one); the sessions it replaced or evicted."""
        gone = [s for s in [self.sessions.pop(key, None)] if s is not None]
        if len(self.sessions) >= self.max_sessions:
            idle = min(self.sessions.values(), key=lambda s: s.last_used_ms, default=None)
            if idle is None or now_ms - idle.last_used_ms <= EVICTION_MS:
                return ErrorCode.SHARE_SESSION_LIMIT_REACHED, None, gone
            gone.append(self.sessions.pop(idle.key))
        session = ShareSession(key, next_epoch(INITIAL_EPOCH), now_ms, dict.fromkeys(partitions))
        self.sessions[key] = session
        return ErrorCode.NONE, session, gone

    def use(self, key: SessionKey, epoch: int, now_ms: int) -> tuple[ErrorCode, ShareSession | None]:
        """The session for an incremental request (epoch > 0) or a closing one (-1)."""
        session = self.sessions.get(key)
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        if epoch == FINAL_EPOCH:
            return ErrorCode.NONE, session
        if epoch != session.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        return ErrorCode.NONE, session

    def close(self, key: SessionKey) -> ShareSession | None:
        return self.sessions.pop(key, None)

    def of_group(self, group: str) -> list[ShareSession]:
        return [s for k, s in self.sessions.items() if k[0] == group]
