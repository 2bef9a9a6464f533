"""Per-partition idempotent/transactional producer state.

Mirrors Apache Kafka 3.x ``ProducerStateManager`` / ``ProducerAppendInfo``:
for every producer id the partition remembers the current producer epoch and
the metadata of the last :data:`NUM_BATCHES_TO_RETAIN` (5) appended data
batches, which is what lets the broker detect retried (duplicate) batches and
sequence gaps.

Usage per produce request (single-threaded asyncio, no locking)::

    result = state.check(header)          # pure, no mutation
    if result.is_error:        -> answer with result.error_code
    elif result.is_duplicate:  -> answer with result.base_offset, do not append
    else:                      -> append, then state.update(header, base, last)

On startup load :meth:`ProducerStateManager.from_snapshot` (if any) and feed
every batch header at or after ``snapshot_offset`` to :meth:`update`, in log
order.  All operations are O(1) per batch except :meth:`truncate_after`,
:meth:`forget_before`, :meth:`remove_expired`, :meth:`first_unstable_offset`
and :meth:`snapshot`, which are O(number of producers).
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Optional, Protocol

__all__ = [
    "BatchHeaderLike",
    "BatchMetadata",
    "CheckResult",
    "OK",
    "ProducerEntry",
    "ProducerStateManager",
    "NUM_BATCHES_TO_RETAIN",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "INT32_MAX",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
    "INVALID_TXN_STATE",
    "INVALID_RECORD",
    "last_sequence",
    "increment_sequence",
    "in_sequence",
]

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1

# Kafka error codes
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_RECORD = 87
TRANSACTION_COORDINATOR_FENCED = 52

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms


class BatchHeaderLike(Protocol):
    """The attributes of ``wire.records.BatchHeader`` this module reads.

    ``is_control`` is optional (read with ``getattr(..., False)``); control
    batches (transaction markers) only move the epoch and close the open
    transaction, they carry no sequence numbers.
    """

    @property
    def producer_id(self) -> int: ...

    @property
    def producer_epoch(self) -> int: ...

    @property
    def base_sequence(self) -> int: ...

    @property
    def last_offset_delta(self) -> int: ...

    @property
    def max_timestamp(self) -> int: ...

    @property
    def records_count(self) -> int: ...

    @property
    def is_transactional(self) -> bool: ...


# --------------------------------------------------------------------------
# sequence arithmetic (DefaultRecordBatch.incrementSequence & co.)
# --------------------------------------------------------------------------

def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past Int32 max back to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def last_sequence(header: BatchHeaderLike) -> int:
    """Last sequence of a batch; ``NO_SEQUENCE`` if the batch has none."""
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return increment_sequence(header.base_sequence, header.last_offset_delta)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    if last_seq == INT32_MAX:
        return next_seq == 0
    return next_seq == last_seq + 1


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CheckResult:
    """Outcome of :meth:`ProducerStateManager.check`.

    kind is ``"ok"``, ``"duplicate"`` or ``"error"``.  For a duplicate,
    ``base_offset``/``last_offset``/``max_timestamp`` are those of the
    originally appended batch (answer the produce request with
    ``base_offset`` and ``log_append_time=-1`` as Kafka does).  For an error,
    ``error_code`` is the Kafka error code and ``message`` a human-readable
    explanation (suitable for the produce response ``error_message``).
    """

    kind: str
    error_code: int = 0
    message: Optional[str] = None
    base_offset: int = -1
    last_offset: int = -1
    max_timestamp: int = -1

    @property
    def is_ok(self) -> bool:
        return self.kind == "ok"

    @property
    def is_duplicate(self) -> bool:
        return self.kind == "duplicate"

    @property
    def is_error(self) -> bool:
        return self.kind == "error"

    @classmethod
    def duplicate(cls, batch: "BatchMetadata") -> "CheckResult":
        return cls("duplicate", base_offset=batch.base_offset,
                   last_offset=batch.last_offset, max_timestamp=batch.max_timestamp)

    @classmethod
    def error(cls, code: int, message: str) -> "CheckResult":
        return cls("error", error_code=code, message=message)


OK = CheckResult("ok")
_OK = OK


# --------------------------------------------------------------------------
# state
# --------------------------------------------------------------------------

@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    # offset of the batch (data or marker) that set the current epoch
    epoch_offset: int = -1
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    # first offset of the open transaction, or -1
    txn_first_offset: int = -1
    last_timestamp: int = -1
    # offset of the last transaction marker and the first offset of the
    # transaction it closed (to reopen it if the marker is truncated away)
    marker_offset: int = -1
    closed_txn_first_offset: int = -1
    # epoch of the transaction coordinator that wrote the last marker: markers from an older
    # coordinator (one that lost its partition of __transaction_state) are fenced
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> Optional[BatchMetadata]:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def _is_control(header: BatchHeaderLike) -> bool:
    return bool(getattr(header, "is_control", False))


class ProducerStateManager:
    """Producer state of one partition.  See the module docstring."""

    def __init__(self, snapshot_offset: int = 0) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # log end offset the state covers: batches below it are reflected.
        self.snapshot_offset = snapshot_offset
        # producer id -> first offset of its open transaction (kept in step with the entries'
        # txn_first_offset, so the last stable offset costs O(open transactions), not O(producers))
        self.ongoing: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def get(self, producer_id: int) -> Optional[ProducerEntry]:
        return self.producers.get(producer_id)

    # ------------------------------------------------------------------ check

    def check(self, header: BatchHeaderLike) -> CheckResult:
        """Validate one incoming client batch. Never mutates state."""
        return self._check(header, self.producers.get(header.producer_id), None)

    def check_batches(self, headers: Iterable[BatchHeaderLike]) -> CheckResult:
        """Validate all batches of one produce record set, in order, as if
        each earlier one had been appended (no mutation).  Returns the first
        error or duplicate, else OK.  (Kafka treats the whole set as a
        duplicate if any batch is one; clients only ever send one batch.)
        """
        # pid -> (epoch, last_seq, txn_open) of batches earlier in this set
        pending: dict[int, tuple[int, int, bool]] = {}
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            res = self._check(h, self.producers.get(pid), pending.get(pid))
            if not res.is_ok:
                return res
            if _is_control(h):
                prev = pending.get(pid)
                entry = self.producers.get(pid)
                ls = prev[1] if prev else (entry.last_seq if entry else NO_SEQUENCE)
                prev_epoch = prev[0] if prev else (entry.epoch if entry else NO_PRODUCER_EPOCH)
                if h.producer_epoch != prev_epoch:
                    ls = NO_SEQUENCE
                pending[pid] = (h.producer_epoch, ls, False)
            else:
                prev = pending.get(pid)
                entry = self.producers.get(pid)
                txn = prev[2] if prev else (entry is not None and entry.txn_first_offset >= 0)
                pending[pid] = (h.producer_epoch, last_sequence(h), txn or bool(h.is_transactional))
        return _OK

    def _check(self, header: BatchHeaderLike, entry: Optional[ProducerEntry],
               pending: Optional[tuple[int, int, bool]]) -> CheckResult:
        pid = header.producer_id
        if pid < 0:
            return _OK
        epoch = header.producer_epoch

        if pending is not None:
            cur_epoch, cur_last_seq, txn_open = pending
            known = True
        elif entry is not None:
            cur_epoch, cur_last_seq = entry.epoch, entry.last_seq
            txn_open = entry.txn_first_offset >= 0
            known = entry.epoch != NO_PRODUCER_EPOCH
        else:
            cur_epoch, cur_last_seq, txn_open, known = NO_PRODUCER_EPOCH, NO_SEQUENCE, False, False

        if _is_control(header):
            if epoch < cur_epoch:
                return CheckResult.error(
                    INVALID_PRODUCER_EPOCH,
                    f"Epoch of producer {pid} at marker is {epoch}, "
                    f"which is smaller than the last seen epoch {cur_epoch}")
            return _OK

        first_seq = header.base_sequence
        if first_seq < 0:
            return CheckResult.error(
                INVALID_RECORD,
                f"Invalid sequence number {first_seq} in record batch with producerId {pid}")
        last_seq = last_sequence(header)

        # duplicate detection only against really appended batches
        if pending is None and entry is not None:
            dup = entry.find_duplicate(epoch, first_seq, last_seq)
            if dup is not None:
                return CheckResult.duplicate(dup)

        if epoch < cur_epoch:
            return CheckResult.error(
                INVALID_PRODUCER_EPOCH,
                f"Epoch of producer {pid} is {epoch}, which is smaller than "
                f"the last seen epoch {cur_epoch}")

        if epoch != cur_epoch:
            # new epoch: must restart at 0 unless we never saw an epoch
            if first_seq != 0 and cur_epoch != NO_PRODUCER_EPOCH:
                return CheckResult.error(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence number for new epoch of producer {pid} at "
                    f"epoch {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{cur_epoch} (current producer epoch)")
        elif known and not in_sequence(cur_last_seq, first_seq):
            return CheckResult.error(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for producer {pid} at epoch "
                f"{epoch}: {first_seq} (incoming seq. number), {cur_last_seq} "
                f"(current end sequence number)")

        if txn_open and not header.is_transactional:
            return CheckResult.error(
                INVALID_TXN_STATE,
                f"Expected transactional write from producer {pid}")
        return _OK

    def check_fence(self, producer_id: int, producer_epoch: int, coordinator_epoch: int = -1,
                    bumped: bool = False) -> CheckResult:
        """The checks for what a coordinator writes (markers, transactional offset commits): no
        sequence numbers, only the epochs. An older producer epoch is INVALID_PRODUCER_EPOCH (with
        `bumped`, a transaction version 2 marker, the same epoch too), a marker from an older
        coordinator TRANSACTION_COORDINATOR_FENCED."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return _OK
        if producer_epoch < entry.epoch or (bumped and producer_epoch == entry.epoch):
            return CheckResult.error(
                INVALID_PRODUCER_EPOCH,
                f"Epoch {producer_epoch} of producer {producer_id} is not newer than {entry.epoch}" if bumped else
                f"Epoch {producer_epoch} of producer {producer_id} is older than {entry.epoch}")
        if coordinator_epoch >= 0 and coordinator_epoch < entry.coordinator_epoch:
            return CheckResult.error(
                TRANSACTION_COORDINATOR_FENCED,
                f"Marker from coordinator epoch {coordinator_epoch} for producer {producer_id}, "
                f"which already saw coordinator epoch {entry.coordinator_epoch}")
        return _OK

    # ----------------------------------------------------------------- update

    def update(self, header: BatchHeaderLike, base_offset: int, last_offset: int,
               coordinator_epoch: int = -1) -> int:
        """Record a batch appended at [base_offset, last_offset].

        Unconditional (trusts the caller): used after a successful
        :meth:`check` + append, and to rebuild state by replaying the log.
        For a control batch (a marker, written by ``coordinator_epoch``) returns the first
        offset of the transaction it closed, or -1 if none was open; -1 otherwise.
        """
        if last_offset + 1 > self.snapshot_offset:
            self.snapshot_offset = last_offset + 1
        pid = header.producer_id
        if pid < 0:
            return -1
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        epoch = header.producer_epoch
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.epoch_offset = base_offset
            entry.batches.clear()
        if header.max_timestamp > entry.last_timestamp:
            entry.last_timestamp = header.max_timestamp

        if _is_control(header):
            closed = entry.txn_first_offset
            entry.marker_offset = base_offset
            entry.closed_txn_first_offset = closed
            entry.txn_first_offset = -1
            self.ongoing.pop(pid, None)
            if coordinator_epoch > entry.coordinator_epoch:
                entry.coordinator_epoch = coordinator_epoch
            return closed
        if header.base_sequence >= 0:
            entry.batches.append(BatchMetadata(
                header.base_sequence, last_sequence(header), base_offset,
                last_offset, header.max_timestamp))
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = base_offset
            self.ongoing[pid] = base_offset
        return -1

    # ---------------------------------------------------- log maintenance

    def truncate_after(self, offset: int) -> None:
        """The log was truncated to end at ``offset`` (exclusive): forget
        batches at or after it; producers left without batches, or whose
        epoch came from a removed batch, are dropped (and then accept any
        sequence, as after retention)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            if entry.epoch_offset >= offset:
                del self.producers[pid]
                continue
            batches = entry.batches
            had_batches = bool(batches)
            while batches and batches[-1].last_offset >= offset:
                batches.pop()
            if had_batches and not batches:
                # we no longer know where its sequence stands
                del self.producers[pid]
                continue
            if entry.txn_first_offset >= offset:
                entry.txn_first_offset = -1
            if entry.marker_offset >= offset:
                # the marker closing a transaction is gone: reopen it
                if 0 <= entry.closed_txn_first_offset < offset:
                    entry.txn_first_offset = entry.closed_txn_first_offset
                entry.marker_offset = entry.closed_txn_first_offset = -1
            if batches:
                entry.last_timestamp = batches[-1].max_timestamp
        if self.snapshot_offset > offset:
            self.snapshot_offset = offset
        self._reindex_ongoing()

    def _reindex_ongoing(self) -> None:
        self.ongoing = {pid: e.txn_first_offset for pid, e in self.producers.items() if e.txn_first_offset >= 0}

    def forget_before(self, log_start_offset: int) -> None:
        """The log start advanced: drop producers whose last data batch lies
        entirely below it (Kafka's ``truncateHead``)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            if entry.last_data_offset < log_start_offset:
                del self.producers[pid]
        if self.snapshot_offset < log_start_offset:
            self.producers.clear()
            self.snapshot_offset = log_start_offset
        self._reindex_ongoing()

    def remove_expired(self, now_ms: int,
                       expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        """Drop idle producers (``producer.id.expiration.ms``) without an
        open transaction."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            if entry.txn_first_offset < 0 and now_ms - entry.last_timestamp >= expiration_ms:
                del self.producers[pid]

    def first_unstable_offset(self) -> Optional[int]:
        """Smallest first offset of an open transaction, or None."""
        return min(self.ongoing.values()) if self.ongoing else None

    # --------------------------------------------------------------- snapshot
    #
    # Layout (big endian):
    #   magic "KSPS" | version u8 | snapshot_offset i64 | count u32
    #   count x ( producer_id i64 | epoch i16 | epoch_offset i64 |
    #             txn_first_offset i64 | last_timestamp i64 |
    #             marker_offset i64 | closed_txn_first_offset i64 |
    #             coordinator_epoch i32 | nbatches u8 |
    #             nbatches x (first_seq i32 | last_seq i32 | base_offset i64 |
    #                         last_offset i64 | max_timestamp i64) )
    #   crc32 u32 of everything before it

    _MAGIC = b"KSPS"
    _VERSION = 2
    _HEAD = struct.Struct(">4sBqI")
    _ENTRY = struct.Struct(">qhqqqqqiB")
    _BATCH = struct.Struct(">iiqqq")
    _CRC = struct.Struct(">I")

    def snapshot(self) -> bytes:
        parts = [self._HEAD.pack(self._MAGIC, self._VERSION, self.snapshot_offset,
                                 len(self.producers))]
        for e in self.producers.values():
            parts.append(self._ENTRY.pack(e.producer_id, e.epoch, e.epoch_offset,
                                          e.txn_first_offset, e.last_timestamp,
                                          e.marker_offset, e.closed_txn_first_offset,
                                          e.coordinator_epoch, len(e.batches)))
            for b in e.batches:
                parts.append(self._BATCH.pack(b.first_seq, b.last_seq, b.base_offset,
                                              b.last_offset, b.max_timestamp))
        body = b"".join(parts)
        return body + self._CRC.pack(zlib.crc32(body))

    @classmethod
    def from_snapshot(cls, data: bytes) -> "ProducerStateManager":
        """Load a :meth:`snapshot`; raises ValueError if it is corrupt."""
        data = bytes(data)
        if len(data) < cls._HEAD.size + cls._CRC.size:
            raise ValueError("producer state snapshot too short")
        body, (crc,) = data[:-cls._CRC.size], cls._CRC.unpack(data[-cls._CRC.size:])
        if zlib.crc32(body) != crc:
            raise ValueError("producer state snapshot checksum mismatch")
        magic, version, snap_off, count = cls._HEAD.unpack_from(body, 0)
        if magic != cls._MAGIC:
            raise ValueError("not a producer state snapshot (bad magic)")
        if version != cls._VERSION:
            raise ValueError(f"unsupported producer state snapshot version {version}")
        if snap_off < 0:
            raise ValueError("negative snapshot offset")
        mgr = cls(snap_off)
        pos = cls._HEAD.size
        try:
            for _ in range(count):
                (pid, epoch, epoch_off, txn_off, last_ts, marker_off, closed_off,
                 coordinator_epoch, n) = cls._ENTRY.unpack_from(body, pos)
                pos += cls._ENTRY.size
                if pid < 0 or n > NUM_BATCHES_TO_RETAIN or pid in mgr.producers:
                    raise ValueError("invalid producer entry in snapshot")
                entry = ProducerEntry(pid, epoch, epoch_off, txn_first_offset=txn_off,
                                      last_timestamp=last_ts, marker_offset=marker_off,
                                      closed_txn_first_offset=closed_off,
                                      coordinator_epoch=coordinator_epoch)
                for _ in range(n):
                    entry.batches.append(BatchMetadata(*cls._BATCH.unpack_from(body, pos)))
                    pos += cls._BATCH.size
                mgr.producers[pid] = entry
        except struct.error as exc:
            raise ValueError(f"truncated producer state snapshot: {exc}") from None
        if pos != len(body):
            raise ValueError("trailing bytes in producer state snapshot")
        mgr._reindex_ongoing()
        return mgr
