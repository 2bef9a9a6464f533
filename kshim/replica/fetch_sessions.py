"""Incremental fetch sessions (KIP-227), as Kafka's FetchSessionCache and FetchSession keep them.

A consumer or follower that fetches the same partitions over and over opens a session with a
full fetch (session id 0, epoch 0): the broker remembers the partitions, their fetch positions
and what it last answered for each, and gives back a session id. The client's next requests name
that id and the next epoch (1, 2, ...) and carry only the partitions whose position changed (and
the ones to forget); the broker answers only the partitions with news: records, an error, or a
moved high watermark or log start offset. Any other request shape is an error the client answers
with a full fetch.

- `new_context` decides, per request, what Kafka's FetchManager.newContext decides:
  - Fetch below v7, or epoch -1 (FINAL): no session (a session id named with epoch -1 is closed);
    the answer carries session id 0.
  - epoch 0 (INITIAL): a full fetch; a session id named with it is closed first; after the read
    the cache may keep a new session (id answered) or not (0).
  - otherwise incremental: an unknown id is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch
    INVALID_FETCH_SESSION_EPOCH, a session opened with topic names asked with topic ids (v13+)
    or the reverse FETCH_SESSION_TOPIC_ID_ERROR; these answer no partitions and keep the session
    as it was. A good one updates the session (new and changed partitions, then the forgotten
    ones), bumps its epoch and reads every partition of the session; a session left with no
    partition is closed and the request served without one.
- Partitions that returned records move to the end of the session's order, so the next reads
  start with the others (KIP-74 only lets the first partition exceed the size limits).
- The cache holds at most `max_entries` sessions (max.incremental.fetch.session.cache.slots,
  1000; 0 disables sessions). When it is full a new session may take a slot, by Kafka's rules:
  first the session least recently used if it was last used more than EVICTION_MS ago; else the
  least valuable session that the newcomer outranks: a follower's (privileged) session may evict
  a consumer's session or any session older than EVICTION_MS, a consumer's only a session older
  than EVICTION_MS; between those, fewer partitions is less valuable, then the lower id. Otherwise
  the client gets no session (id 0) and keeps sending full fetches.
- Memory: the sessions together hold at most MAX_PARTITIONS partitions (kshim's bound; Kafka has
  none). A full fetch that would pass it opens no session; an incremental one that would grow a
  session past it closes that session and is served without one (the client starts over with a
  full fetch, which then gets no session while the others hold the room).
- Kafka shards its cache in 8 (session ids carry the shard); kshim keeps one cache of all the slots.
"""
from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from kshim.clock import SYSTEM
from kshim.replica.fetch import FetchPartition, FetchPartitionData
from wire.errors import ErrorCode

log = logging.getLogger("kshim.fetch_sessions")

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
DEFAULT_SLOTS = 1000  # max.incremental.fetch.session.cache.slots
MAX_PARTITIONS = 1_000_000  # partitions in all sessions together (a few hundred bytes each)
SESSIONS_SINCE = 7  # Fetch v7 added sessions
TOPIC_IDS_SINCE = 13
INT32_MAX = (1 << 31) - 1

PartitionKey = tuple["str | uuid.UUID", int]


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`, as Kafka's FetchMetadata.nextEpoch: wraps to 1, never to 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A session partition: the client's fetch position, and what the broker last answered for it."""
    request: FetchPartition
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, data: FetchPartitionData) -> bool:
        """Whether an incremental answer includes this partition (Kafka's maybeUpdateResponseData),
        remembering what it answers. After an error the high watermark is forgotten, so the
        partition is answered again once the error is gone."""
        respond = bool(data.records) or data.error != ErrorCode.NONE
        if self.high_watermark != data.high_watermark:
            respond = True
            self.high_watermark = data.high_watermark
        if self.log_start_offset != data.log_start_offset:
            respond = True
            self.log_start_offset = data.log_start_offset
        if data.error != ErrorCode.NONE:
            self.high_watermark = -1
        return respond


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool  # a follower's session (replica id >= 0)
    uses_topic_ids: bool  # opened at Fetch v13+
    creation_ms: int
    last_used_ms: int
    epoch: int
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)  # in fetch order
    incremental_fetches: int = 0  # requests served incrementally (for the close log line and tests)
    # as at the last touch, which is when Kafka re-files a session among the evictable ones
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False
    size_at_touch: int = 0

    def evictable_key(self) -> tuple[bool, int, int]:
        return self.privileged, self.size_at_touch, self.id

    def update(self, asked: Iterable[FetchPartition], forgotten: Iterable[PartitionKey]) -> None:
        """An incremental request: new partitions join at the end, changed ones take the new
        position in place, forgotten ones leave."""
        for p in asked:
            key = (p.topic, p.index)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(p)
            else:
                cached.request = p
        for key in forgotten:
            self.partitions.pop(key, None)

    def requests(self) -> list[FetchPartition]:
        return [c.request for c in self.partitions.values()]

    def answer(self, asked: list[FetchPartition], results: list[FetchPartitionData]
               ) -> list[tuple[FetchPartition, FetchPartitionData]]:
        """The partitions (of `asked`, what `requests()` gave for this request, with their reads)
        an incremental answer carries; those that returned records move to the end of the
        session's order. A partition the session dropped meanwhile is not answered."""
        out = []
        for p, data in zip(asked, results):
            key = (p.topic, p.index)
            cached = self.partitions.get(key)
            if cached is None or not cached.must_respond(data):
                continue
            out.append((p, data))
            if data.records:
                self.partitions[key] = self.partitions.pop(key)
        return out


class FetchSessionCache:
    def __init__(self, max_entries: int = DEFAULT_SLOTS, eviction_ms: int = EVICTION_MS,
                 clock: Callable[[], int] = SYSTEM.monotonic_ms, max_partitions: int = MAX_PARTITIONS) -> None:
        self.max_entries = max_entries
        self.max_partitions = max_partitions
        self.eviction_ms = eviction_ms
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def partitions_held(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int, why: str) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            log.info("fetch session %d %s after %d incremental fetches (%d partitions)",
                     session.id, why, session.incremental_fetches, len(session.partitions))
        return session

    def touch(self, session: FetchSession, now: int) -> None:
        """A use of the session: its age and size decide whether (and how readily) it may be evicted."""
        session.last_used_ms = now
        session.size_at_touch = len(session.partitions)
        old = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old

    def maybe_create(self, privileged: bool, uses_topic_ids: bool, partitions: list[CachedPartition]) -> int:
        """A new session for a full fetch if a slot is free or can be freed; its id, or 0 for none."""
        if self.max_entries <= 0 or self.partitions_held() + len(partitions) > self.max_partitions:
            return INVALID_SESSION_ID
        now = self.clock()
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, uses_topic_ids, now, now, next_epoch(INITIAL_EPOCH),
                               {(c.request.topic, c.request.index): c for c in partitions})
        self.sessions[session.id] = session
        self.touch(session, now)
        log.info("fetch session %d opened for a %s (%d partitions)", session.id,
                 "follower" if privileged else "consumer", len(partitions))
        return session.id

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > self.eviction_ms:
            self.evictions += 1
            self.remove(stale.id, f"evicted (unused for {now - stale.last_used_ms} ms)")
            return True
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < victim.evictable_key():
            return False
        self.evictions += 1
        self.remove(victim.id, "evicted for a more valuable session")
        return True

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, INT32_MAX)
            if session_id not in self.sessions:
                return session_id


@dataclass
class FetchContext:
    """What to read for one Fetch request and how to answer it.

    `error`: the request fails whole (a session error), nothing is read. Otherwise `asked` is read;
    `respond(results)` gives the partitions to answer (with their reads) and the session id."""
    asked: list[FetchPartition]
    error: ErrorCode = ErrorCode.NONE
    session: FetchSession | None = None  # an incremental fetch's session
    full: bool = False  # a full fetch that may open a session
    privileged: bool = False
    uses_topic_ids: bool = False
    cache: FetchSessionCache | None = None

    def respond(self, results: list[FetchPartitionData]) -> tuple[int, list[tuple[FetchPartition, FetchPartitionData]]]:
        if self.session is not None:
            return self.session.id, self.session.answer(self.asked, results)
        answered = list(zip(self.asked, results))
        if not self.full or self.cache is None:
            return INVALID_SESSION_ID, answered
        cached = [CachedPartition(p, r.high_watermark if not r.error else -1, r.log_start_offset)
                  for p, r in answered]
        return self.cache.maybe_create(self.privileged, self.uses_topic_ids, cached), answered


def _refused(session_id: int, epoch: int, code: ErrorCode) -> FetchContext:
    log.debug("fetch session %d: incremental fetch at epoch %d refused: %s", session_id, epoch, code.name)
    return FetchContext([], code)


def new_context(cache: FetchSessionCache, version: int, session_id: int, epoch: int, privileged: bool,
                asked: list[FetchPartition], forgotten: list[PartitionKey]) -> FetchContext:
    """Kafka's FetchManager.newContext: see the module notes."""
    uses_ids = version >= TOPIC_IDS_SINCE
    if version < SESSIONS_SINCE:
        return FetchContext(asked)
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id, "closed by its client")
        if epoch == FINAL_EPOCH:
            return FetchContext(asked)
        return FetchContext(asked, full=True, privileged=privileged, uses_topic_ids=uses_ids, cache=cache)
    session = cache.get(session_id)
    if session is None:
        return _refused(session_id, epoch, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return _refused(session_id, epoch, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != uses_ids:
        return _refused(session_id, epoch, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
    joining = {(p.topic, p.index) for p in asked} - session.partitions.keys()
    if joining and cache.partitions_held() + len(joining) > cache.max_partitions:
        cache.remove(session.id, f"closed: {len(joining)} more partitions would pass the sessions' bound")
        return FetchContext(asked)
    session.update(asked, forgotten)
    if not session.partitions:
        cache.remove(session.id, "closed (no partitions left)")
        return FetchContext(asked)
    cache.touch(session, cache.clock())
    session.epoch = next_epoch(session.epoch)
    session.incremental_fetches += 1
    log.debug("fetch session %d: incremental fetch at epoch %d (%d partitions named, %d forgotten, %d in session)",
              session.id, epoch, len(asked), len(forgotten), len(session.partitions))
    return FetchContext(session.requests(), session=session)
