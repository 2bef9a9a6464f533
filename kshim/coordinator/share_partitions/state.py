"""One share partition's delivery state (Kafka's SharePartition), kept by the partition's leader
for one share group: pure bookkeeping, no I/O; the clock is the caller's (monotonic ms).

- `start` is the share-partition start offset (SPSO): every record below it is done with.
  `end` is the first offset never taken into the in-flight window. Records in [start, end) are
  in flight, each with a state and a delivery count: AVAILABLE (may be acquired), ACQUIRED (by
  one member, until its lock deadline), ACKNOWLEDGED (accepted) or ARCHIVED (rejected, over the
  delivery limit, or no deliverable record: a control batch, an aborted transaction's record,
  an offset compaction removed).
- `records` maps offset -> InFlight in increasing offsets (a dict keeps insertion order: offsets
  join only at `end` and leave only from `start`); an offset in [start, end) missing from it is
  a gap (nothing there to deliver).
- Acquiring hands a member the AVAILABLE records first, then new ones from `end`, at most
  `max_records` (whole log batches of new records in the batch-optimized mode, exactly in the
  record-limit mode) and never more than `max_locks` records in flight; each acquisition adds
  one to the record's delivery count and locks it for `lock_ms`.
- Acknowledging (only records ACQUIRED by that member, else INVALID_RECORD_STATE for the whole
  partition, nothing applied): accept -> ACKNOWLEDGED, reject and gap -> ARCHIVED, release ->
  AVAILABLE (ARCHIVED once its delivery count reached the delivery limit), renew -> a fresh lock.
  An expired lock releases as release does; so does the end of the member's share session.
- The start moves past every leading ACKNOWLEDGED/ARCHIVED record, which then leave the window.
- The persisted form (`state_batches`) is Kafka's: ranges of (first, last, state, delivery
  count), an ACQUIRED record written as AVAILABLE (a new leader redelivers it, its count kept).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Iterable, NamedTuple

from wire.errors import ErrorCode


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member: str | None = None
    deadline_ms: int = 0  # when its acquisition lock expires (monotonic ms), while ACQUIRED


class StateBatch(NamedTuple):
    first_offset: int
    last_offset: int
    state: int
    delivery_count: int


class Acquired(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class LogBatch(NamedTuple):
    """What acquiring needs of a record batch read from the log."""
    base_offset: int
    last_offset: int
    deliverable: bool  # False: a control batch, or an aborted transaction's under read_committed


@dataclass(frozen=True, slots=True)
class ShareLimits:
    """The group configs that bound a share partition."""
    lock_ms: int = 30_000  # share.record.lock.duration.ms
    delivery_limit: int = 5  # group.share.delivery.count.limit
    max_locks: int = 2000  # group.share.partition.max.record.locks


class AckBatch(NamedTuple):
    first_offset: int
    last_offset: int
    types: tuple[int, ...]  # one type for the whole range, or one per offset


Undo = tuple[int, int, dict[int, InFlight | None]]


class SharePartitionState:
    def __init__(self, start: int, batches: Iterable[StateBatch] = (), state_epoch: int = 0) -> None:
        self.start = start
        self.state_epoch = state_epoch
        self.records: dict[int, InFlight] = {}
        end = start
        for b in sorted(batches):
            for offset in range(max(b.first_offset, start), b.last_offset + 1):
                state = RecordState(b.state) if b.state in RecordState._value2member_map_ else RecordState.AVAILABLE
                if state == RecordState.ACQUIRED:
                    state = RecordState.AVAILABLE
                self.records[offset] = InFlight(state, b.delivery_count)
            end = max(end, b.last_offset + 1)
        self.end = end
        self._advance()

    # ------------------------------------------------------------------ reading
    def next_fetch_offset(self) -> int:
        """Where a fetch reads from: the first AVAILABLE record, else the end of the window."""
        for offset, rec in self.records.items():
            if rec.state == RecordState.AVAILABLE:
                return offset
        return self.end

    def has_available(self) -> bool:
        return any(r.state == RecordState.AVAILABLE for r in self.records.values())

    def in_flight(self) -> int:
        return self.end - self.start

    def counts(self) -> dict[str, int]:
        out = {s.name.lower(): 0 for s in RecordState}
        for rec in self.records.values():
            out[rec.state.name.lower()] += 1
        return out

    def acquired_by(self, member: str) -> int:
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED and r.member == member)

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline_ms for r in self.records.values() if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def state_batches(self) -> list[StateBatch]:
        """The persisted form: consecutive offsets of the same state and count as one range."""
        out: list[StateBatch] = []
        for offset, rec in self.records.items():
            state = RecordState.AVAILABLE if rec.state == RecordState.ACQUIRED else rec.state
            last = out[-1] if out else None
            if last is not None and last.last_offset == offset - 1 and last.state == state \
                    and last.delivery_count == rec.delivery_count:
                out[-1] = last._replace(last_offset=offset)
            else:
                out.append(StateBatch(offset, offset, int(state), rec.delivery_count))
        return out

    # ------------------------------------------------------------------ acquiring
    def acquire(self, member: str, fetch_offset: int, batches: Iterable[LogBatch], max_records: int,
                limits: ShareLimits, now_ms: int, strict: bool = False) -> list[Acquired]:
        """Acquire records of `batches` (read from the log at `fetch_offset`) for `member`; the
        ranges acquired with their delivery counts."""
        taken: list[Acquired] = []
        count = 0
        deadline = now_ms + limits.lock_ms
        max_records = max(max_records, 1)
        run_first = run_last = run_count = -1  # the range being taken (consecutive offsets, one count)
        acquired, available, archived = RecordState.ACQUIRED, RecordState.AVAILABLE, RecordState.ARCHIVED
        records = self.records

        def take(offset: int, rec: InFlight) -> None:
            nonlocal run_first, run_last, run_count
            rec.state, rec.member, rec.deadline_ms = acquired, member, deadline
            rec.delivery_count += 1
            if run_last == offset - 1 and run_count == rec.delivery_count:
                run_last = offset
                return
            if run_first >= 0:
                taken.append(Acquired(run_first, run_last, run_count))
            run_first = run_last = offset
            run_count = rec.delivery_count

        for batch in batches:
            if count >= max_records:
                break
            if batch.base_offset >= self.end and self.end - self.start >= limits.max_locks:
                break  # the window is full: no new records until some are done
            offset = max(batch.base_offset, fetch_offset, self.start)
            last = batch.last_offset
            while offset <= last and offset < self.end:  # records already in the window
                rec = records.get(offset)
                offset += 1
                if rec is None or rec.state != available:
                    continue
                if not batch.deliverable:
                    rec.state = archived
                    continue
                if count >= max_records:
                    offset = last + 1
                    break
                take(offset - 1, rec)
                count += 1
            if offset > last:
                continue
            # new records from the end of the window (offsets skipped before `offset` are gaps)
            if strict and count >= max_records:
                break
            if not batch.deliverable:
                for o in range(offset, last + 1):
                    records[o] = InFlight(archived, 0)
                self.end = last + 1
                continue
            # the window holds at most max_locks records: the first new one needs room below the
            # old end, each next one below start + max_locks
            n = 0 if self.end - self.start >= limits.max_locks else max(1, self.start + limits.max_locks - offset)
            n = min(n, last + 1 - offset)
            if strict:
                n = min(n, max_records - count)
            if n <= 0:
                break
            for o in range(offset, offset + n):
                records[o] = InFlight(acquired, 1, member, deadline)
            if run_last == offset - 1 and run_count == 1:
                run_last = offset + n - 1
            else:
                if run_first >= 0:
                    taken.append(Acquired(run_first, run_last, run_count))
                run_first, run_last, run_count = offset, offset + n - 1, 1
            self.end = offset + n
            count += n
            if n < last + 1 - offset:
                break
        if run_first >= 0:
            taken.append(Acquired(run_first, run_last, run_count))
        self._advance()
        return taken

    # ------------------------------------------------------------------ acknowledging
    def acknowledge(self, member: str, acks: Iterable[AckBatch], limits: ShareLimits, now_ms: int
                    ) -> tuple[ErrorCode, Undo | None]:
        """Apply `member`'s acknowledgements; INVALID_REQUEST for a malformed batch and
        INVALID_RECORD_STATE for a record it does not hold (nothing applied then). The undo
        restores the state if the change cannot be made durable."""
        acks = list(acks)
        plan: list[tuple[int, int, int]] = []  # (first, last, kind): validated ranges of one kind
        records, acquired, kinds = self.records, RecordState.ACQUIRED, AckType._value2member_map_
        for ack in acks:
            span = ack.last_offset - ack.first_offset + 1
            if span <= 0 or not ack.types or len(ack.types) not in (1, span):
                return ErrorCode.INVALID_REQUEST, None
            if any(kind not in kinds for kind in ack.types):
                return ErrorCode.INVALID_REQUEST, None
            one = len(ack.types) == 1
            for i, offset in enumerate(range(ack.first_offset, ack.last_offset + 1)):
                kind = ack.types[0 if one else i]
                rec = records.get(offset)
                if rec is None:
                    if kind == AckType.GAP and self.start <= offset < self.end:
                        continue  # a gap already known as one
                    return ErrorCode.INVALID_RECORD_STATE, None
                if rec.state is not acquired or rec.member != member:
                    return ErrorCode.INVALID_RECORD_STATE, None
                if not one:
                    plan.append((offset, offset, kind))
            if one:
                plan.append((ack.first_offset, ack.last_offset, ack.types[0]))
        undo: dict[int, InFlight | None] = {}
        old_start, old_end = self.start, self.end
        for first, last, kind in plan:
            done = RecordState.ACKNOWLEDGED if kind == AckType.ACCEPT else \
                RecordState.ARCHIVED if kind in (AckType.REJECT, AckType.GAP) else None
            for offset in range(first, last + 1):
                rec = records.get(offset)
                if rec is None:
                    continue  # a known gap
                if offset not in undo:
                    undo[offset] = InFlight(rec.state, rec.delivery_count, rec.member, rec.deadline_ms)
                if done is not None:
                    rec.state, rec.member = done, None
                elif kind == AckType.RELEASE:
                    self._release(rec, limits)
                else:  # RENEW: the member keeps the record, with a fresh lock
                    rec.deadline_ms = now_ms + limits.lock_ms
        for offset, rec in self._advance():
            undo.setdefault(offset, rec)
        return ErrorCode.NONE, (old_start, old_end, undo)

    def restore(self, undo: Undo) -> None:
        """Put back what an acknowledgement changed (its write failed)."""
        old_start, _old_end, entries = undo
        self.start = min(self.start, old_start)
        merged = {o: replace(r) for o, r in entries.items() if r is not None and o not in self.records}
        for offset, rec in entries.items():
            if rec is not None and offset in self.records:
                self.records[offset] = replace(rec)
        if merged:
            self.records = dict(sorted({**self.records, **merged}.items()))

    # ------------------------------------------------------------------ releasing
    def _release(self, rec: InFlight, limits: ShareLimits) -> None:
        rec.member = None
        rec.state = RecordState.ARCHIVED if rec.delivery_count >= limits.delivery_limit else RecordState.AVAILABLE

    def release_member(self, member: str, limits: ShareLimits) -> int:
        """Release every record `member` holds (it left or closed its session); how many."""
        n = 0
        for rec in self.records.values():
            if rec.state == RecordState.ACQUIRED and rec.member == member:
                self._release(rec, limits)
                n += 1
        if n:
            self._advance()
        return n

    def expire_locks(self, now_ms: int, limits: ShareLimits) -> int:
        """Release every record whose lock expired; how many."""
        n = 0
        for rec in self.records.values():
            if rec.state == RecordState.ACQUIRED and rec.deadline_ms <= now_ms:
                self._release(rec, limits)
                n += 1
        if n:
            self._advance()
        return n

    def move_start(self, offset: int) -> None:
        """Records below `offset` are gone from the log (retention, DeleteRecords): past them."""
        if offset <= self.start:
            return
        for o in [o for o in self.records if o < offset]:
            del self.records[o]
        self.start, self.end = offset, max(self.end, offset)
        self._advance()

    def _advance(self) -> list[tuple[int, InFlight]]:
        """Move the start past the leading done records (and gaps); those that left."""
        gone: list[tuple[int, InFlight]] = []
        records = self.records
        for offset, rec in records.items():
            if rec.state not in DONE:
                self.start = max(self.start, offset)
                break
            gone.append((offset, rec))
        else:
            self.start = self.end
        for offset, _rec in gone:
            del records[offset]
        return gone
