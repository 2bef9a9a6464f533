"""One partition on this broker: validates and appends produced batches, serves reads, wakes waiters.

The leader orders batches as they arrive and never reorders them. Within one produce request's
records for this partition, batches are appended one after another; an error stops the remaining
batches without rolling back those already appended.

With no followers (single broker) every appended record is COMMITTED at once: the high watermark
equals the log end offset.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from kshim.log import Log, LogConfig, OffsetOutOfRange
from kshim.producer_state import ProducerStateManager
from wire import records
from wire.errors import ErrorCode

SNAPSHOT_NAME = "producer-state.snapshot"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class AppendResult:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    base_offset: int = -1  # of the first batch of the request, appended now or earlier (duplicate)
    last_offset: int = -1
    log_append_time: int = -1
    appended_batches: int = 0


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    directory: Path
    log_config: LogConfig
    max_message_bytes: int = 1048588
    log_append_time: bool = False
    leader_epoch: int = 0
    log: Log = field(init=False)
    producers: ProducerStateManager = field(init=False)
    _waiters: set[anyio.Event] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.log = Log(self.directory, self.log_config)
        self.producers = self._load_producer_state()

    # -- producer state survives restarts: a snapshot at clean close, then replay of later batches
    def _load_producer_state(self) -> ProducerStateManager:
        path = self.directory / SNAPSHOT_NAME
        state = ProducerStateManager(snapshot_offset=self.log.log_start_offset)
        if path.exists():
            try:
                loaded = ProducerStateManager.from_snapshot(path.read_bytes())
                if loaded.snapshot_offset <= self.log.log_end_offset:
                    state = loaded
            except ValueError:
                pass  # rebuild from the log below
            path.unlink()  # a crash before the next clean close must not trust a stale snapshot
        start = max(state.snapshot_offset, self.log.log_start_offset)
        for header in self.log.batch_headers(start):
            if header.producer_id >= 0:
                state.update(header, header.base_offset, header.last_offset)
        return state

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset  # no followers yet: appended == COMMITTED

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark

    def read_bound(self, isolation_level: int) -> int:
        """Highest offset (exclusive) a consumer of this isolation level may read."""
        return self.last_stable_offset if isolation_level == 1 else self.log_end_offset

    def append(self, data: bytes | memoryview | None) -> AppendResult:
        """Validate and append a produce request's records for this partition. A writable view
        (into the request frame) is patched in place; anything else is copied first."""
        result = AppendResult()
        if not data:
            result.error, result.message = ErrorCode.CORRUPT_MESSAGE, "empty or null records"
            return result
        buf = data if isinstance(data, memoryview) and not data.readonly else bytearray(data)
        pos, end = 0, len(buf)
        append_time = now_ms() if self.log_append_time else -1
        while pos < end:
            error, message, header = self._validate(buf, pos, end)
            if error:
                result.error, result.message = error, message
                return result
            if header.producer_id >= 0:
                check = self.producers.check(header)
                if check.is_error:
                    result.error, result.message = ErrorCode(check.error_code), check.message
                    return result
                if check.is_duplicate:
                    if result.base_offset < 0:
                        result.base_offset = check.base_offset
                    result.last_offset = check.last_offset
                    pos += header.size
                    continue
            records.set_leader_epoch(buf, pos, self.leader_epoch)
            if self.log_append_time:
                header = records.set_log_append_time(buf, pos, header, append_time)
            base, last = self.log.append(buf, pos, header.size)
            if header.producer_id >= 0:
                self.producers.update(header, base, last)
            if result.base_offset < 0:
                result.base_offset = base
            result.last_offset = last
            result.appended_batches += 1
            pos += header.size
        result.log_append_time = append_time
        if result.appended_batches:
            self.wake_all()
        return result

    def _validate(self, buf: bytearray, pos: int, end: int) -> tuple[ErrorCode, str | None, records.BatchHeader]:
        try:
            header = records.read_header(buf, pos)
        except records.CorruptRecordError as e:
            if end - pos >= 17 and buf[pos + 16] in (0, 1):
                return ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, "only RecordBatch v2 (magic 2) is accepted", None
            return ErrorCode.CORRUPT_MESSAGE, str(e), None
        if pos + header.size > end:
            return ErrorCode.CORRUPT_MESSAGE, "record batch is truncated", header
        if header.size > self.max_message_bytes:
            return (ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch of {header.size} bytes exceeds max.message.bytes={self.max_message_bytes}", header)
        if not records.crc_ok(buf, pos, header):
            return ErrorCode.CORRUPT_MESSAGE, "record batch CRC32C mismatch", header
        if header.records_count != header.last_offset_delta + 1 or header.records_count <= 0:
            return ErrorCode.INVALID_RECORD, "record count does not match lastOffsetDelta", header
        if header.is_control:
            return ErrorCode.INVALID_RECORD, "clients may not produce control batches", header
        if header.is_transactional:
            return ErrorCode.INVALID_TXN_STATE, "transactions are not supported by this broker yet", header
        return ErrorCode.NONE, None, header

    def read(self, offset: int, max_bytes: int, isolation_level: int) -> bytes:
        """Whole batches from `offset` within the isolation level's bound; raises OffsetOutOfRange."""
        return self.log.read(offset, max_bytes, self.read_bound(isolation_level))

    # -- waiting for data: fetches register an event; every append sets them all
    def add_waiter(self, event: anyio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: anyio.Event) -> None:
        self._waiters.discard(event)

    def wake_all(self) -> None:
        for event in self._waiters:
            event.set()

    def close(self) -> None:
        self.log.close()
        (self.directory / SNAPSHOT_NAME).write_bytes(self.producers.snapshot())

    def delete_records_before(self, offset: int) -> None:
        self.log.advance_start_offset(offset)
        self.producers.forget_before(offset)


__all__ = ["Partition", "AppendResult", "OffsetOutOfRange", "now_ms"]
