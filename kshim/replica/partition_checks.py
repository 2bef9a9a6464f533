"""The checks a produced batch passes before the leader appends it, on its header (Kafka's
LogValidator does the same): RecordBatch v2, whole, within max.message.bytes, its CRC32C, its
record count, no control batch from a client, its timestamps within
message.timestamp.before/after.max.ms, and its producer's idempotence and transaction state (a
fenced epoch, a sequence out of order, a retried batch already stored); then the patches that
make it ready to store (the leader epoch, LogAppendTime).

Separate from the appends (kshim.replica.partition_appends), which run these checks on whichever
path a write takes (on the event loop, through the log writer, batch after batch): what a batch
must be to enter the log is said here once. The records inside a batch are checked before, beside
the event loop (kshim.replica.validation).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kshim.replica.producer_state import ProducerStateManager
from wire import records
from wire.errors import ErrorCode

_DUPLICATE = records.BatchHeader(*([0] * len(records.BatchHeader._fields)))  # _prepare's "already stored"
HANDING_OVER = "leadership is moving to a reassignment's target replicas: retry at the new leader"


@dataclass(slots=True)
class AppendResult:
    """An append's outcome on one partition: the checks' error, or where its batches are."""
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    base_offset: int = -1  # of the first batch of the request, appended now or earlier (duplicate)
    last_offset: int = -1
    log_append_time: int = -1
    appended_batches: int = 0
    skipped: int = 0  # the size of the last retried duplicate passed over


class BatchChecks:
    """The checks of a Partition's appends (kshim.replica.partition)."""

    if TYPE_CHECKING:  # the Partition's, of which this is a part
        producers: ProducerStateManager
        leader_epoch: int
        handing_over: bool
        log_append_time: bool
        max_message_bytes: int
        timestamp_before_max_ms: int
        timestamp_after_max_ms: int

    def _prepare(self, buf, pos: int, end: int, now: int, append_time: int, from_coordinator: bool,
                 result: AppendResult) -> records.BatchHeader | None:
        """Check the batch at ``pos`` and make it ready to append (leader epoch, LogAppendTime):
        its header; None after an error (in ``result``); _DUPLICATE for a retried batch already
        stored (``result`` names its offsets; ``result.skipped`` its size)."""
        if self.handing_over:
            result.error, result.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, HANDING_OVER
            return None
        error, message, header = self._validate(buf, pos, end)
        if not error and header is not None and not self.log_append_time and not from_coordinator:
            error, message = self._check_timestamps(header, now)
        if error or header is None:  # a header comes with NONE only
            result.error, result.message = error, message
            return None
        if header.producer_id >= 0:
            if from_coordinator:
                check = self.producers.check_fence(header.producer_id, header.producer_epoch)
            else:
                check = self.producers.check(header)
            if check.is_error:
                result.error, result.message = ErrorCode(check.error_code), check.message
                return None
            if check.is_duplicate:
                if result.base_offset < 0:
                    result.base_offset = check.base_offset
                result.last_offset = check.last_offset
                result.skipped = header.size
                return _DUPLICATE
        records.set_leader_epoch(buf, pos, self.leader_epoch)
        if self.log_append_time:
            header = records.set_log_append_time(buf, pos, header, append_time)
        return header

    def _validate(self, buf, pos: int, end: int) -> tuple[ErrorCode, str | None, records.BatchHeader | None]:
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
        if header.is_transactional and header.producer_id < 0:
            return ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id", header
        return ErrorCode.NONE, None, header

    def _check_timestamps(self, header: records.BatchHeader, now: int) -> tuple[ErrorCode, str | None]:
        """message.timestamp.before/after.max.ms, from the batch's first and largest timestamps
        (the header's; records are not decoded on the append path)."""
        if header.base_timestamp < now - self.timestamp_before_max_ms:
            return (ErrorCode.INVALID_TIMESTAMP, f"timestamp {header.base_timestamp} is more than "
                    f"message.timestamp.before.max.ms={self.timestamp_before_max_ms} behind the broker's clock {now}")
        if header.max_timestamp > now + self.timestamp_after_max_ms:
            return (ErrorCode.INVALID_TIMESTAMP, f"timestamp {header.max_timestamp} is more than "
                    f"message.timestamp.after.max.ms={self.timestamp_after_max_ms} ahead of the broker's clock {now}")
        return ErrorCode.NONE, None
