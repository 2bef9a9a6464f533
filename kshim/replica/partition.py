"""One partition replica on this broker: the leader's append and read path, the follower's
append path, and the high watermark that separates COMMITTED from UNCOMMITTED records.

- The leader orders batches as they arrive and never reorders them. Within one produce
  request's records for this partition, batches are appended one after another; an error stops
  the remaining batches without rolling back those already appended.
- A record is COMMITTED once it is below the high watermark. With the `isr` commit quorum (the
  default, Kafka's) the high watermark is the lowest log end offset among the in-sync replicas;
  with `majority` it is the offset a majority of the assigned replicas have reached. With no
  followers it equals the log end offset: appended means COMMITTED.
- read_committed reads up to the last stable offset: the first offset of the earliest transaction
  still open here (or whose marker is not yet COMMITTED), else the high watermark; fetches also
  name the aborted transactions in what they return (the aborted transaction index).
  read_uncommitted reads up to the log end offset, or up to the high watermark when the topic sets
  kshim.uncommitted.read.limit=high-watermark (Kafka's bound).
- Transaction markers (control batches) are written here by the transaction coordinator
  (`append_marker`) and replicated like any batch; producer state and the aborted index are
  derived from the log, so a restarted or newly elected replica rebuilds them by replay.
- Followers learn the high watermark from the leader's fetch responses.
- A partition a clean stop summarised (kshim.log.summary) starts dormant: its offsets, size and
  leader epoch come from the summary and no file of it is opened; its log, leader epochs and
  producer state are opened on first use (`wake`), from whichever thread uses them first. A
  broker with thousands of partitions is ready without opening any (Kafka opens segments lazily).
"""
from __future__ import annotations

import asyncio
import logging
import struct
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Literal, overload

import anyio

from kshim.broadcast import Signal
from kshim.clock import SYSTEM
from kshim.cluster.image import NO_LEADER, MetadataImage, PartitionInfo
from kshim.configs import COMPRESSION_CODECS, TopicConfig
from kshim.configs.definitions import LONG_MAX
from kshim.log.log import Log, LogConfig, OffsetOutOfRange
from kshim.log.epochs import LeaderEpochCache
from kshim.log.files import save_checkpoint, write_atomic
from kshim.log.log import LogClosed
from kshim.log.summary import ActiveEnd, LogSummary
from kshim.log.txnindex import AbortedTxn
from kshim.log.writer import INLINE_SLOW_COUNT, Fenced, LogWriter, WriteJob
from kshim.replica.producer_state import ProducerStateManager
from wire import records
from wire.compression import GZIP, LZ4, ZSTD
from wire.errors import ErrorCode
from wire.primitives import FileRecords

log = logging.getLogger("kshim.replica.partition")

SNAPSHOT_NAME = "producer-state.snapshot"
HW_CHECKPOINT = "high-watermark"
_LAZY = frozenset({"log", "producers", "epochs"})  # what a dormant partition opens on first use
_DUPLICATE = records.BatchHeader(*([0] * len(records.BatchHeader._fields)))  # _prepare's "already stored"
_BATCH_LENGTH = struct.Struct(">i").unpack_from
_PRODUCER_ID = struct.Struct(">q").unpack_from
_PRODUCER_ID_OFFSET = 43
# a leader's append this small is written on the event loop when the writer holds nothing of its
# partition and no flush policy would fsync it there: the hand-off to the writer thread and back
# cost more than a page-cache write of a few KiB (issue 18, transactions: 1.4 ms at the median per
# Produce on a loaded machine). 64 KiB, not 16: a page-cache write of 64 KiB takes ~15 us (warm
# pages; ~140 us on pages this VM has not touched for a while), less than the hand-off, and
# librdkafka's batches at 20,000 records/s (linger 5 ms, 4 partitions) or of a 1,000-record
# transaction are 25-30 KiB: Produce round trip p50 1.15 -> 0.77 ms, produce-to-ack p50 4.5 ->
# 4.0 ms. The kernel's writeback throttling, which the writer exists for, stalls a write of any
# size: INLINE_SLOW_S below catches it
INLINE_APPEND_MAX = 64 * 1024
# ... unless INLINE_SLOW_COUNT inline appends within INLINE_SLOW_WINDOW_S took longer than
# INLINE_SLOW_S each (the kernel throttling writeback, which the writer thread exists for): then
# every append of that data directory goes to the writer for INLINE_PAUSE_S. A slow append alone
# is the scheduler (another process ran: over 5 ms every few seconds on a loaded 2-core machine,
# several a second with CPU hogs beside it), and sending everything to the thread for it cost a
# fifth more CPU per single-record Produce; the kernel's writeback pauses are longer and sustained
INLINE_SLOW_S = 0.02
INLINE_SLOW_WINDOW_S = 1.0
INLINE_PAUSE_S = 10.0


def _producer_id(buf: bytearray | memoryview) -> int:
    """The producer id of the first batch (-1 if none, or too short to tell)."""
    return _PRODUCER_ID(buf, _PRODUCER_ID_OFFSET)[0] if len(buf) >= records.HEADER_SIZE else -1


@dataclass(slots=True)
class AppendResult:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    base_offset: int = -1  # of the first batch of the request, appended now or earlier (duplicate)
    last_offset: int = -1
    log_append_time: int = -1
    appended_batches: int = 0
    skipped: int = 0  # the size of the last retried duplicate passed over


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetch requests."""
    log_end_offset: int = -1  # unknown until it fetches
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0  # last time it had everything the leader had (Kafka's lastCaughtUpTimeMs)
    leader_end_at_last_fetch: int = 0


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    directory: Path
    log_config: LogConfig
    node_id: int = 0
    topic_id: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    max_message_bytes: int = 1048588
    log_append_time: bool = False
    # compression.type: the codec batches are stored with (None: the producer's) and its level
    compression_codec: int | None = None
    compression_level: int | None = None
    # message.timestamp.before.max.ms / after.max.ms (CreateTime only)
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = 3_600_000
    config: TopicConfig | None = None  # the effective topic configs last applied
    # partition state, as the controller decided it
    leader_id: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    followers: dict[int, FollowerState] = field(default_factory=dict)
    # replicas the leader asked the controller to add to the ISR: until the answer arrives they
    # count for the high watermark too (Kafka's "maximal ISR"), so it can never pass a replica
    # that is about to become in-sync
    pending_isr: tuple[int, ...] = ()
    majority_quorum: bool = False
    uncommitted_reads_to_hw: bool = False
    min_insync_replicas: int = 1
    # not in repr: a dormant partition's repr (a log line, a failed assertion) must not open it
    log: Log = field(init=False, repr=False)
    producers: ProducerStateManager = field(init=False, repr=False)
    epochs: LeaderEpochCache = field(init=False, repr=False)
    _high_watermark: int = field(init=False, default=0)
    _waiters: set[anyio.Event] = field(init=False, default_factory=set)
    # wake_all calls so far: a long-poll compares it with the count at its read, so an append made
    # between that read and the start of its wait (a loop turn later) is not missed
    wakes: int = field(init=False, default=0)
    _hw_changed: Signal = field(init=False, default_factory=Signal)
    # (first offset, marker offset) of ended transactions whose marker is not yet below the high
    # watermark: they hold the last stable offset until it is (Kafka's unreplicated transactions)
    _unreplicated: list[tuple[int, int]] = field(init=False, default_factory=list)
    _storage_error: str | None = field(init=False, default=None)  # the last append's OSError, until one works
    writer: LogWriter | None = None  # appends leave the event loop through it (kshim.log.writer)
    # its active segment as its log dir's clean-shutdown marker recorded it: no recovery at open
    # if the segment is still that one
    clean_start: ActiveEnd | None = None
    # its high watermark as its log dir's replication-offset-checkpoint recorded it (None: not
    # there, read the replica's own `high-watermark` file, which older kshims wrote)
    saved_hw: int | None = None
    # per producer id, its last append still being written here: a later one is checked after it
    _inflight: dict[int, asyncio.Future] = field(init=False, default_factory=dict)
    _jobs_out: int = field(init=False, default=0)  # appends handed to the writer, not yet answered
    inline_append_max: int = INLINE_APPEND_MAX  # see INLINE_APPEND_MAX (tests of the writer set 0)
    # the last clean stop's summary of this replica while it is dormant (nothing opened yet: see
    # the module's notes); None once woken. Given with saved_hw and clean_start (its active end)
    dormant: LogSummary | None = None

    def __post_init__(self) -> None:
        self._wake_lock = threading.Lock()
        self._snapshot_saved: bytes | None = None  # the snapshot file's content when known: unchanged is not rewritten
        self._stopped = False  # closed: a dormant replica woken after it closes its files again
        saved_hw = self.saved_hw
        if self.dormant is not None:
            assert saved_hw is not None
            self._high_watermark = min(saved_hw, self.dormant.log_end_offset)
        else:
            self._open_files()
            if saved_hw is None:
                saved_hw = self._load_hw_checkpoint() if HW_CHECKPOINT in self.log.files_at_open else 0
            self._high_watermark = min(saved_hw, self.log.log_end_offset)
            self.producers = self._load_producer_state()
        # the checkpoint on disk already says so: a stop that changed nothing rewrites nothing
        self._hw_checkpointed = saved_hw if saved_hw == self._high_watermark else -1

    def _open_files(self) -> None:
        self.log = Log(self.directory, self.log_config, clean=self.clean_start)
        self.epochs = LeaderEpochCache.open(self.directory, self.log, defer_write=True)  # saved by apply_partition_state

    def __getattr__(self, name: str):
        # reached only for an attribute that is not set: a dormant partition's log, epochs, producers
        if name in _LAZY and self.__dict__.get("dormant") is not None:
            self.wake()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def wake(self) -> None:
        """Open a dormant partition's log (without recovery when it is as its summary says),
        leader epochs and producer state. A log that is not as summarised (changed while the
        broker was stopped) is recovered and its own offsets taken."""
        with self._wake_lock:
            summary = self.dormant
            if summary is None:
                return
            self._open_files()
            self.producers = self._load_producer_state()
            if (self.log.log_start_offset, self.log.log_end_offset) != (summary.log_start_offset,
                                                                         summary.log_end_offset):
                log.warning("%s-%d: the log holds offsets [%d, %d), not [%d, %d) as its clean stop recorded: "
                            "it was changed while the broker was stopped", self.topic, self.index,
                            self.log.log_start_offset, self.log.log_end_offset, summary.log_start_offset,
                            summary.log_end_offset)
                self._high_watermark = min(self._high_watermark, self.log.log_end_offset)
            if self._stopped:  # used after the broker closed it: as a closed log, it takes nothing
                self.log.discard()
            else:
                self.epochs.save()  # a new leader epoch is assigned by whoever woke it for that
            self.dormant = None

    # ------------------------------------------------------------------ state from disk
    def _load_producer_state(self) -> ProducerStateManager:
        """The snapshot of a clean close, then replay of later batches; after a crash, the log."""
        path = self.directory / SNAPSHOT_NAME
        state = ProducerStateManager(snapshot_offset=self.log.log_start_offset)
        if SNAPSHOT_NAME in self.log.files_at_open:
            try:
                data = path.read_bytes()
                loaded = ProducerStateManager.from_snapshot(data)
                if loaded.snapshot_offset <= self.log.log_end_offset:
                    state = loaded
                    self._snapshot_saved = data
                else:  # recovery cut the log below it: void, and so once the log grows past it again
                    path.unlink()
            except ValueError:
                path.unlink()  # rebuild from the log below
        # A snapshot stays valid while the log below its offset is unchanged: later appends are
        # replayed over it at the next start, so it is kept (one unlink fewer per partition at a
        # start) and removed only before a truncation could cut below it (_drop_snapshot).
        return self._replay_producer_state(state, observe_epochs=True)

    def _drop_snapshot(self) -> None:
        self._snapshot_saved = None
        (self.directory / SNAPSHOT_NAME).unlink(missing_ok=True)

    def _replay_producer_state(self, state: ProducerStateManager, observe_epochs: bool = False) -> ProducerStateManager:
        """Feed `state` every batch of the log from where it left off."""
        start = max(state.snapshot_offset, self.log.log_start_offset)
        self._unreplicated = []
        for header in self.log.batch_headers(start):
            if observe_epochs:  # at open, this also recovers an epoch change the checkpoint missed
                self.epochs.observe(header.partition_leader_epoch, header.base_offset)
            if header.producer_id >= 0:
                self._track(state, header)
        self._prune_unreplicated()
        return state

    def _track(self, state: ProducerStateManager, header: records.BatchHeader, batch=None,
               marker: records.Marker | None = None) -> None:
        """Producer state for one stored batch; a marker also ends its transaction: an aborted
        one goes into the aborted index (idempotent, so replays may repeat it). `marker`: the
        control batch's marker when the caller just wrote it (else read from the batch)."""
        if not header.is_control:
            state.update(header, header.base_offset, header.last_offset)
            return
        if marker is None:
            if batch is None:
                batch = self.log.read(header.base_offset, header.size, header.base_offset + 1)
            marker = records.read_marker(memoryview(batch)[:header.size])
        first = state.update(header, header.base_offset, header.last_offset,
                             marker.coordinator_epoch if marker else -1)
        if first < 0 or marker is None:
            return
        self._unreplicated.append((first, header.base_offset))
        if not marker.committed:
            unstable = state.first_unstable_offset()
            lso = header.base_offset + 1 if unstable is None else min(unstable, header.base_offset + 1)
            self.log.add_aborted(AbortedTxn(header.producer_id, first, header.base_offset, lso))

    def _prune_unreplicated(self) -> None:
        if self._unreplicated:
            hw = self._high_watermark
            self._unreplicated = [t for t in self._unreplicated if t[1] >= hw]

    def _load_hw_checkpoint(self) -> int:
        try:
            return int((self.directory / HW_CHECKPOINT).read_text().strip())
        except (FileNotFoundError, ValueError):
            return 0

    def _write_hw_checkpoint(self) -> None:
        due = self.hw_checkpoint_due()
        if due is not None and save_hw_checkpoint(*due):
            self.hw_checkpoint_written(*due)  # else tried again at the next checkpoint

    def hw_checkpoint_due(self) -> tuple[Path, int] | None:
        """(the checkpoint file, the high watermark to write) when it moved since the last one: the
        replica manager writes these for all partitions at once, off the event loop."""
        if self._high_watermark == self._hw_checkpointed:
            return None
        return self.directory / HW_CHECKPOINT, self._high_watermark

    def hw_checkpoint_written(self, path: Path, hw: int) -> None:
        if path.parent == self.directory:  # not a log dir this replica has since moved from
            self._hw_checkpointed = hw

    @property
    def hw_moved(self) -> bool:
        """The high watermark changed since it was last checkpointed (its log dir's file is due)."""
        return self._high_watermark != self._hw_checkpointed

    def hw_checkpointed(self, hw: int) -> None:
        """Its log dir's replication-offset-checkpoint now holds `hw` for it."""
        self._hw_checkpointed = hw

    # ------------------------------------------------------------------ configuration and role
    def configure(self, config: TopicConfig) -> None:
        """Apply the topic's effective configs (kshim.configs.resolve); the same ones again change nothing."""
        if config == self.config:
            return
        self.config = config
        self.log_config = config.log_config()
        if self.dormant is None:  # a dormant log is opened with them
            self.log.update_config(self.log_config)
        self.max_message_bytes = config["max.message.bytes"]
        self.log_append_time = config["message.timestamp.type"] == "LogAppendTime"
        self.compression_codec = COMPRESSION_CODECS[config["compression.type"]]
        self.compression_level = {GZIP: config["compression.gzip.level"], LZ4: config["compression.lz4.level"],
                                  ZSTD: config["compression.zstd.level"]}.get(self.compression_codec or 0)
        self.timestamp_before_max_ms = config["message.timestamp.before.max.ms"]
        self.timestamp_after_max_ms = config["message.timestamp.after.max.ms"]
        self.majority_quorum = config["kshim.commit.quorum"] == "majority"
        self.uncommitted_reads_to_hw = config["kshim.uncommitted.read.limit"] == "high-watermark"
        self.min_insync_replicas = config["min.insync.replicas"]
        self._advance_hw()

    def apply_partition_state(self, info: PartitionInfo, image: MetadataImage) -> bool:
        """Take the image's state of this partition; True if this broker became its leader (the
        caller logs it: one line per partition, or one for many at a broker's start)."""
        became_leader = info.leader == self.node_id and (self.leader_id != self.node_id
                                                         or info.leader_epoch != self.leader_epoch)
        self.leader_id = info.leader
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.replicas = info.replicas
        self.isr = info.isr
        if became_leader or info.leader != self.node_id:
            self.pending_isr = ()  # a proposal from an earlier term is void
        if became_leader:
            # a new term starts at our log end (Kafka's makeLeader); what followers had is unknown
            # until they fetch again
            self.assign_leader_epoch(self.leader_epoch)
            now = SYSTEM.wall_ms()
            self.followers = {r: FollowerState(last_caught_up_ms=now) for r in info.replicas if r != self.node_id}
        if self.dormant is None:
            self.epochs.save()  # the cut of the open, if the assignment above did not restore it
        if self.is_leader:
            self._advance_hw()
        self._hw_changed.fire()  # acks=all waiters must re-check leadership
        self.wake_all()  # so must fetches waiting here
        return became_leader

    def assign_leader_epoch(self, epoch: int) -> None:
        """A term of this broker as leader starts at our log end (the leader-epoch cache records
        it); a dormant partition whose latest epoch it already is stays dormant."""
        if self.dormant is None or self.dormant.leader_epoch != epoch:
            self.epochs.assign(epoch, self.log.log_end_offset)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    def leader_epoch_error(self, current_leader_epoch: int) -> ErrorCode:
        """A client's current_leader_epoch against ours (KIP-320): newer than ours is
        UNKNOWN_LEADER_EPOCH (we lag the metadata), older is FENCED_LEADER_EPOCH; -1 skips the check."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.FENCED_LEADER_EPOCH

    # ------------------------------------------------------------------ offsets
    @property
    def log_start_offset(self) -> int:
        d = self.dormant
        return self.log.log_start_offset if d is None else d.log_start_offset

    @property
    def log_end_offset(self) -> int:
        d = self.dormant
        return self.log.log_end_offset if d is None else d.log_end_offset

    @property
    def size_bytes(self) -> int:
        d = self.dormant
        return self.log.size_bytes if d is None else d.size_bytes

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """No read_committed consumer reads at or past it: the first offset of the earliest open
        transaction, or of an ended one whose marker is not COMMITTED yet; else the high watermark."""
        lso = self._high_watermark
        if self.dormant is not None:
            return lso  # summarised only with no transaction open or unreplicated (kshim.log.summary)
        if self.producers.ongoing:
            lso = min(lso, min(self.producers.ongoing.values()))
        for first, marker in self._unreplicated:
            if marker >= self._high_watermark and first < lso:
                lso = first
        return lso

    def read_bound(self, isolation_level: int) -> int:
        """Highest offset (exclusive) a consumer of this isolation level may read."""
        if isolation_level == 1:
            return self.last_stable_offset
        return self._high_watermark if self.uncommitted_reads_to_hw else self.log_end_offset

    def _advance_hw(self) -> None:
        """Recompute the leader's high watermark; it never moves backwards."""
        if not self.is_leader:
            return
        leo = self.log_end_offset
        if self.majority_quorum:
            ends = sorted([leo] + [max(self.followers[r].log_end_offset, 0) if r in self.followers else 0
                                   for r in self.replicas if r != self.node_id], reverse=True)
            candidate = ends[len(self.replicas) // 2] if len(ends) >= len(self.replicas) // 2 + 1 else leo
        else:
            candidate = leo
            for r in set(self.isr) | set(self.pending_isr):
                if r != self.node_id:
                    follower = self.followers.get(r)
                    candidate = min(candidate, follower.log_end_offset if follower else 0)
        candidate = min(max(candidate, 0), leo)
        if candidate > self._high_watermark:
            self._high_watermark = candidate
            self._prune_unreplicated()
            self._hw_changed.fire()
            self.wake_all()

    async def wait_committed(self, offset: int, timeout_s: float) -> bool:
        """Wait until `offset` is below the high watermark (COMMITTED); False at the timeout or
        when this replica stops leading, even for a moment (its log may have been truncated and
        refilled meanwhile, so the same offset may hold other records)."""
        if self._high_watermark > offset:  # already (one replica in the ISR): no timer to set up
            return True
        epoch = self.leader_epoch
        with anyio.move_on_after(timeout_s):
            while self._high_watermark <= offset:
                if not self.is_leader or self.leader_epoch != epoch:
                    return False
                await self._hw_changed.wait()
            return self.leader_epoch == epoch
        return False

    def retire(self) -> None:
        """This replica is going away (topic deleted): whoever waits on it must stop waiting."""
        self.leader_id = NO_LEADER
        self._hw_changed.fire()
        self.wake_all()


    # ------------------------------------------------------------------ leader: followers
    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now: int) -> None:
        """A follower fetched from `fetch_offset`: it has everything below it."""
        state = self.followers.get(replica_id)
        if state is None:
            state = self.followers[replica_id] = FollowerState()
        leo = self.log_end_offset
        if fetch_offset >= leo:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.leader_end_at_last_fetch:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_ms = now
        state.leader_end_at_last_fetch = leo
        self._advance_hw()

    def lagging_isr_members(self, now: int, max_lag_ms: int) -> list[int]:
        return [r for r in self.isr if r != self.node_id and
                now - self.followers.get(r, FollowerState()).last_caught_up_ms > max_lag_ms]

    def caught_up_outsiders(self) -> list[int]:
        """Replicas outside the ISR that have caught up to the high watermark (can rejoin)."""
        out = []
        for r in self.replicas:
            if r == self.node_id or r in self.isr:
                continue
            state = self.followers.get(r)
            if state and state.last_fetch_ms and state.log_end_offset >= self._high_watermark:
                out.append(r)
        return out

    # ------------------------------------------------------------------ leader: appends
    def append(self, data: bytes | memoryview | None, from_coordinator: bool = False) -> AppendResult:
        """Validate and append a produce request's records for this partition. A writable view
        (into the request frame) is patched in place; anything else is copied first.
        `from_coordinator`: a group coordinator's transactional offset commit, which carries the
        producer's id and epoch but no sequence numbers (only the epoch is checked)."""
        result = AppendResult()
        if not data:
            result.error, result.message = ErrorCode.CORRUPT_MESSAGE, "empty or null records"
            return result
        buf = data if isinstance(data, memoryview) and not data.readonly else bytearray(data)
        pos, end = 0, len(buf)
        now = SYSTEM.wall_ms()
        append_time = now if self.log_append_time else -1
        while pos < end:
            header = self._prepare(buf, pos, end, now, append_time, from_coordinator, result)
            if header is None:
                break
            if header is _DUPLICATE:
                pos += result.skipped
                continue
            try:
                base, last = self.log.append(buf, pos, header.size)
            except OSError as e:  # a full disk, no descriptors: the segment is back as it was
                result.error, result.message = ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the log: {e}"
                self._storage_failed(e)
                break
            self._appended(header, base, last, result)
            pos += header.size
        result.log_append_time = append_time
        if result.appended_batches:
            self._advance_hw()
            self.wake_all()
        return result

    def _prepare(self, buf, pos: int, end: int, now: int, append_time: int, from_coordinator: bool,
                 result: AppendResult) -> records.BatchHeader | None:
        """Check the batch at ``pos`` and make it ready to append (leader epoch, LogAppendTime):
        its header; None after an error (in ``result``); _DUPLICATE for a retried batch already
        stored (``result`` names its offsets; ``result.skipped`` its size)."""
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

    def _appended(self, header: records.BatchHeader, base: int, last: int, result: AppendResult) -> None:
        self._storage_works()
        if header.producer_id >= 0:
            self.producers.update(header, base, last)
        if result.base_offset < 0:
            result.base_offset = base
        result.last_offset = last
        result.appended_batches += 1

    # ------------------------------------------------------------------ appends through the log writer
    def submit_append(self, data: bytes | memoryview | None, from_coordinator: bool = False
                      ) -> AppendResult | Awaitable[AppendResult]:
        """append(), with the write handed to the log writer (kshim.log.writer) when there is one:
        an awaitable answer, unless nothing is to be written (a refusal or a retried duplicate,
        answered at once). The checks run now, against the producer state as of the writes
        already done; so a producer whose earlier write here is still out waits for it (in a
        task of its own, which keeps the order even if nobody awaits the answer), as does a
        request holding several batches (each is checked after the one before is written)."""
        if self.writer is None or not data or len(data) < records.HEADER_SIZE:
            return self.append(data, from_coordinator)  # nothing to write, or refused at once
        if self._inline_ok(len(data)):  # small, and the writer holds nothing of ours
            started = SYSTEM.monotonic()
            result = self.append(data, from_coordinator)
            self._inline_took(started)
            return result
        # patched and written in place when it is a request's records (a writable view of the frame,
        # which the connection never reuses: the inline path above does the same); bytes are copied.
        # The copy of every produced byte was a tenth of a produce benchmark's event-loop samples
        buf = data if isinstance(data, memoryview) and not data.readonly else bytearray(data)
        pid = _producer_id(buf)
        prev = self._inflight.get(pid) if pid >= 0 else None
        if prev is not None or _BATCH_LENGTH(buf, 8)[0] + records.LOG_OVERHEAD != len(buf):
            task = asyncio.ensure_future(self._append_in_turn(buf, from_coordinator, prev))
            if pid >= 0:
                self._inflight[pid] = task
                task.add_done_callback(lambda t: self._forget_inflight(pid, t))
            return asyncio.shield(task)
        result = AppendResult()
        now = SYSTEM.wall_ms()
        append_time = now if self.log_append_time else -1
        result.log_append_time = append_time
        header = self._prepare(buf, 0, len(buf), now, append_time, from_coordinator, result)
        if header is None or header is _DUPLICATE:
            return result
        job = self._submit(buf, header, result)
        if pid >= 0:
            self._inflight[pid] = job.future
        return asyncio.shield(job.future)

    async def _append_in_turn(self, buf: bytearray | memoryview, from_coordinator: bool,
                              prev: asyncio.Future | None) -> AppendResult:
        if prev is not None:
            await asyncio.wait({prev})
        result = AppendResult()
        now = SYSTEM.wall_ms()
        append_time = now if self.log_append_time else -1
        result.log_append_time = append_time
        pos, end = 0, len(buf)
        while pos < end:  # bounded: each round moves past a batch or stops
            header = self._prepare(buf, pos, end, now, append_time, from_coordinator, result)
            if header is None:
                break
            if header is _DUPLICATE:
                pos += result.skipped
                continue
            job = self._submit(buf if pos == 0 and header.size == end else buf[pos:pos + header.size], header, result)
            await asyncio.wait({job.future})
            if job.error is not None:
                break
            pos += header.size
        return result

    def _submit(self, data: bytearray | memoryview, header: records.BatchHeader, result: AppendResult) -> WriteJob:
        assert self.writer is not None
        epoch = self.leader_epoch
        self._jobs_out += 1
        job = WriteJob(self.log, data, True, self._written, asyncio.get_running_loop().create_future(),
                       context=(header, result),
                       still_valid=lambda: self.is_leader and self.leader_epoch == epoch)
        self.writer.submit(job)
        return job

    def _written(self, job: WriteJob) -> AppendResult:
        """On the event loop, once the writer wrote (or failed) a leader job."""
        self._jobs_out -= 1
        header, result = job.context
        if header.producer_id >= 0:
            self._forget_inflight(header.producer_id, job.future)
        e = job.error
        if e is None and job.still_valid is not None and not job.still_valid():
            # written, then the leadership moved before this answer: a truncation may have cut
            # it; the producer retries against the new leader
            e = Fenced("leadership changed while the write was out")
        if e is None:
            self._appended(header, job.base, job.last, result)
            self._advance_hw()
            self.wake_all()
        elif isinstance(e, OSError):
            result.error, result.message = ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the log: {e}"
            self._storage_failed(e)
        elif isinstance(e, (LogClosed, Fenced)):
            result.error, result.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, f"not appended: {e}"
        else:
            result.error, result.message = ErrorCode.CORRUPT_MESSAGE, str(e)
        return result

    def _forget_inflight(self, pid: int, future: asyncio.Future) -> None:
        if self._inflight.get(pid) is future:
            del self._inflight[pid]

    def _storage_works(self) -> None:
        if self._storage_error is not None:
            log.warning("%s-%d: appends work again (after: %s)", self.topic, self.index, self._storage_error)
            self._storage_error = None

    def _storage_failed(self, e: OSError) -> None:
        """Log a storage failure once per occurrence: when it starts, and (above) when it ends."""
        if self._storage_error is None:
            self._storage_error = str(e)
            log.warning("%s-%d: appends fail with KAFKA_STORAGE_ERROR until the log can be written: %s",
                        self.topic, self.index, e)

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

    def append_marker(self, producer_id: int, producer_epoch: int, committed: bool,
                      coordinator_epoch: int, transaction_version: int = 1) -> AppendResult:
        """The leader writes a transaction marker (WriteTxnMarkers): it ends the producer's
        transaction here, COMMIT or ABORT. A transaction version 2 marker carries the epoch its
        coordinator bumped, so it must be newer than the producer's (KIP-1228)."""
        result = AppendResult()
        check = self.producers.check_fence(producer_id, producer_epoch, coordinator_epoch,
                                           bumped=transaction_version >= 2)
        if check.is_error:
            result.error, result.message = ErrorCode(check.error_code), check.message
            return result
        buf = bytearray(records.encode_marker(producer_id, producer_epoch, committed, coordinator_epoch,
                                              SYSTEM.wall_ms()))
        records.set_leader_epoch(buf, 0, self.leader_epoch)
        try:
            base, last = self.log.append(buf)
        except OSError as e:  # the coordinator retries a retriable error until the marker is written
            result.error, result.message = ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the log: {e}"
            self._storage_failed(e)
            return result
        self._storage_works()
        header = records.read_header(buf)
        self._track(self.producers, header, marker=records.Marker(committed, coordinator_epoch))
        result.base_offset, result.last_offset, result.appended_batches = base, last, 1
        self._advance_hw()
        self.wake_all()
        return result

    # ------------------------------------------------------------------ follower: appends
    def append_as_follower(self, data: bytes | memoryview, leader_high_watermark: int) -> None:
        """Batches fetched from the leader, offsets as the leader assigned them. An OSError (a
        full disk) leaves the log as it was (a write split over segments is cut back) and is
        raised for the fetcher to try again later; it is logged once, as a leader's is."""
        if data:
            before = self.log.log_end_offset
            started = SYSTEM.monotonic()
            try:
                self.log.append_with_offsets(data)
            except OSError as e:
                self._storage_failed(e)
                if self.log.log_end_offset > before:
                    self.log.truncate_to(before)
                raise
            self._inline_took(started)
            self._took_from_leader(data)
        self.update_follower_hw(leader_high_watermark)

    def _took_from_leader(self, data: bytes | bytearray | memoryview) -> None:
        """After a follower append: the leader epochs and producer state of what it brought."""
        self._storage_works()
        for pos, header in records.iter_batches(data):
            self.epochs.assign(header.partition_leader_epoch, header.base_offset)
            if header.producer_id >= 0:
                self._track(self.producers, header, memoryview(data)[pos:pos + header.size])

    def _inline_ok(self, size: int) -> bool:
        """Whether a write of `size` bytes is made on the event loop (INLINE_APPEND_MAX): small,
        the writer holds nothing of this partition's, no flush policy fsyncs, and its data dir's
        inline writes are not paused for being slow."""
        writer, cfg = self.writer, self.log.config
        return (writer is not None and not self._jobs_out and size <= self.inline_append_max
                and cfg.flush_messages is None and cfg.flush_ms is None
                and SYSTEM.monotonic() >= writer.inline_paused_until)

    def _inline_took(self, started: float) -> None:
        """An inline write begun at `started` is done: the slow ones counted (INLINE_SLOW_S)."""
        took = SYSTEM.monotonic() - started
        if took > INLINE_SLOW_S and self.writer is not None:
            slow = self.writer.inline_slow
            slow.append(started)
            if len(slow) == INLINE_SLOW_COUNT and started - slow[0] <= INLINE_SLOW_WINDOW_S:
                slow.clear()
                self.writer.inline_paused_until = started + took + INLINE_PAUSE_S
                log.info("%s-%d: %d appends on the event loop took over %.0f ms within %.0f s (the "
                         "last %.0f ms); appends of its data directory go through the writer thread "
                         "for %.0f s", self.topic, self.index, INLINE_SLOW_COUNT, INLINE_SLOW_S * 1000,
                         INLINE_SLOW_WINDOW_S, took * 1000, INLINE_PAUSE_S)

    def submit_follower_append(self, data: bytes | memoryview) -> asyncio.Future | None:
        """append_as_follower's write handed to the log writer (None: there is none, or the
        write is small enough for the event loop (_inline_ok, as a leader's), so the caller
        appends directly). The future's value is None, or the OSError of a failed write (logged
        here; the log is as it was). Call :meth:`follower_appended` after it."""
        if self.writer is None or self._inline_ok(len(data)):
            return None
        epoch = self.leader_epoch
        job = WriteJob(self.log, bytes(data), False, self._follower_written,
                       asyncio.get_running_loop().create_future(),
                       still_valid=lambda: not self.is_leader and self.leader_epoch == epoch)
        self.writer.submit(job)
        return job.future

    def _follower_written(self, job: WriteJob) -> BaseException | None:
        e = job.error
        if e is None:
            self._took_from_leader(job.data)
            return None
        if isinstance(e, OSError):
            self._storage_failed(e)
        return e

    def update_follower_hw(self, leader_high_watermark: int) -> None:
        # forward only: a truncation lowers it explicitly; a leader's answer never does
        hw = min(leader_high_watermark, self.log_end_offset)
        if hw > self._high_watermark and not self.is_leader:
            self._high_watermark = hw
            self._prune_unreplicated()
            self.wake_all()

    def truncate_to(self, offset: int) -> None:
        """Drop a divergent suffix (a follower after a leader change, KIP-101). The epoch cache is
        cut even when the log is not: a term in which a former leader wrote nothing must go."""
        before, size = self.log.log_end_offset, self.log.size_bytes
        if offset < before:
            self._drop_snapshot()
        # always asked of the log: under its write lock, after any write still out (a write the
        # log writer took before the leadership changed lands first, and is cut here)
        if self.log.truncate_to(offset):
            # what a follower cuts it fetches again: after a crash this should be next to nothing
            log.warning("%s-%d: truncated from %d to %d (%d bytes, fetched again from the leader)",
                        self.topic, self.index, before, offset, size - self.log.size_bytes)
            self._high_watermark = min(self._high_watermark, self.log.log_end_offset)
            # rebuilt, not trimmed: a producer whose last 5 batches were cut still has earlier ones
            # in the log, and its retries must still be recognised (Kafka rebuilds the same way)
            self.producers = self._replay_producer_state(ProducerStateManager(snapshot_offset=self.log.log_start_offset))
        self.epochs.truncate_from_end(self.log.log_end_offset)

    def reset_to(self, offset: int) -> None:
        """Start over, empty, at the leader's log start offset (we fell behind its retention)."""
        log.warning("%s-%d: log end %d is below the leader's log start %d: starting over there",
                    self.topic, self.index, self.log.log_end_offset, offset)
        self._drop_snapshot()
        self.log.reset_to(offset)
        self.producers = ProducerStateManager(snapshot_offset=offset)
        self._unreplicated = []
        self.epochs.clear()
        self._high_watermark = offset

    # ------------------------------------------------------------------ reads
    @overload
    def read(self, offset: int, max_bytes: int, isolation_level: int, min_one: bool = True,
             regions: Literal[False] = False) -> bytes: ...

    @overload
    def read(self, offset: int, max_bytes: int, isolation_level: int, min_one: bool,
             regions: bool) -> bytes | FileRecords: ...

    def read(self, offset: int, max_bytes: int, isolation_level: int, min_one: bool = True,
             regions: bool = False) -> bytes | FileRecords:
        """Whole batches from `offset` within the isolation level's bound; raises OffsetOutOfRange.
        `min_one`: the first batch even if larger than max_bytes (KIP-74's first partition).
        `regions`: as file regions for the sender to transfer (Log.read)."""
        bound = self.read_bound(isolation_level)
        if self.dormant is not None and self._nothing_to_read(offset, bound):
            return b""
        return self.log.read(offset, max_bytes, bound, min_one, regions)

    def read_for_follower(self, offset: int, max_bytes: int, min_one: bool = True,
                          regions: bool = False) -> bytes | FileRecords:
        if self.dormant is not None and self._nothing_to_read(offset, self.log_end_offset):
            return b""
        return self.log.read(offset, max_bytes, self.log.log_end_offset, min_one, regions)

    def _nothing_to_read(self, offset: int, bound: int) -> bool:
        """A dormant partition's read at or past the bound (a consumer polling an idle partition at
        its end) returns nothing, as Log.read would, without opening the log; out of range raises."""
        start, end = self.log_start_offset, self.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRange(offset, start, end)
        return offset >= bound

    # ------------------------------------------------------------------ waiting for data
    def add_waiter(self, event: anyio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: anyio.Event) -> None:
        self._waiters.discard(event)

    def wake_all(self) -> None:
        self.wakes += 1
        for event in self._waiters:
            event.set()

    # ------------------------------------------------------------------ maintenance
    def housekeeping(self, now: int) -> None:
        """Retention and the flush.ms policy; nothing for a dormant partition (the replica manager
        wakes one when its summary says retention would delete something)."""
        if self.dormant is not None:
            return
        if self.log.apply_retention(now, max_offset=self._high_watermark if self.is_leader else None):
            self.producers.forget_before(self.log_start_offset)
            self.epochs.truncate_from_start(self.log_start_offset)
        self.log.maybe_flush(now)  # the high watermark: ReplicaManager.checkpoint_high_watermarks

    def delete_records_before(self, offset: int) -> None:
        self.log.advance_start_offset(offset)
        self.producers.forget_before(offset)
        self.epochs.truncate_from_start(self.log_start_offset)

    def close_for_move(self) -> None:
        """Close the log's files (durable, marked clean) before they are copied to another log
        dir; the producer state stays in memory (no snapshot: the copy's would outlive it)."""
        self._hw_checkpointed = -1
        self._write_hw_checkpoint()
        self.log.close()

    def reopen_at(self, directory: Path) -> None:
        """Go on with the log in `directory`, a complete copy of the one close_for_move closed."""
        self.directory = directory
        self.log = Log(directory, self.log_config)
        self.epochs = LeaderEpochCache.open(directory, self.log)

    def dormant_retention_due(self, now: int) -> bool:
        """A dormant partition whose log retention would cut now (woken for it off the event loop)."""
        d, cfg = self.dormant, self.log_config
        return (d is not None and cfg.delete and
                d.retention_due(now, cfg.retention_ms, cfg.retention_bytes,
                                self._high_watermark if self.is_leader else d.log_end_offset))

    def discard(self) -> None:
        """Close the files of a replica being deleted (a dormant one has none open)."""
        if self.dormant is None:
            self.log.discard()

    def close(self, durable: bool = True) -> LogSummary | ActiveEnd | None:
        """Checkpoint the high watermark, close the log and snapshot the producer state. With
        durable False nothing is fsynced, the log is not marked clean and the high watermark is
        left to the caller, which writes its log dir's replication-offset-checkpoint, syncs the
        whole file system once and marks the log dir (ReplicaManager.close). Returns, for that
        marker, the replica's summary (kshim.log.summary) when the log may be marked clean, or its
        active segment alone when it cannot be summarised (a transaction open or unreplicated);
        None when it may not be marked. A dormant replica returns its summary, touching nothing."""
        with self._wake_lock:
            self._stopped = True
            if self.dormant is not None:
                if durable:
                    self._write_hw_checkpoint()
                return self.dormant
        if durable:
            self._write_hw_checkpoint()
        closed = self.log.close(durable=durable)
        clean: LogSummary | ActiveEnd | None = closed
        if closed is not None:
            latest = self.epochs.latest_entry or (-1, -1)
            clean = (closed.active if self.producers.ongoing or self._unreplicated else
                     closed._replace(topic_id=self.topic_id, leader_epoch=latest[0], leader_epoch_start=latest[1]))
        path = self.directory / SNAPSHOT_NAME
        try:
            snapshot = self.producers.snapshot()
            # No producer and nothing a replay from the log start would skip: no file is needed
            # (a log never written by an idempotent producer keeps none). Otherwise the file is
            # rewritten only when its content changed (known in memory: no read of the old one).
            needed = bool(self.producers.producers) or self.producers.snapshot_offset > self.log.log_start_offset
            if needed and snapshot != self._snapshot_saved:
                write_atomic(path, snapshot)  # replaced whole: a start never reads a torn one
                self._snapshot_saved = snapshot
            elif not needed and self._snapshot_saved is not None:  # its producers all expired
                self._drop_snapshot()
        except OSError as e:  # a full disk: the next start replays producer state from the log
            path.unlink(missing_ok=True)
            log.warning("%s-%d: no producer-state snapshot (%s); the next start rebuilds it", self.topic, self.index, e)
        return clean


def save_hw_checkpoint(path: Path, hw: int) -> bool:
    """The high-watermark file's one format (Partition._load_hw_checkpoint reads it); whether it
    was written (save_checkpoint: a failure is logged and kept for the next try)."""
    return save_checkpoint(path, f"{hw}\n", "high watermark")


__all__ = ["Partition", "AppendResult", "FollowerState", "OffsetOutOfRange"]
