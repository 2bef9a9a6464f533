"""One partition replica on this broker: the leader's append and read path, the follower's
append path, and the high watermark that separates COMMITTED from UNCOMMITTED records.

- A record is COMMITTED once it is below the high watermark. With the `isr` commit quorum (the
  default, Kafka's) the high watermark is the lowest log end offset among the in-sync replicas;
  with `majority` it is the offset a majority of the assigned replicas have reached. With no
  followers it equals the log end offset: appended means COMMITTED.
- read_committed reads up to the last stable offset: the first offset of the earliest transaction
  still open here (or whose marker is not yet COMMITTED), else the high watermark; fetches also
  name the aborted transactions in what they return (the aborted transaction index).
  read_uncommitted reads up to the log end offset, or up to the high watermark when the topic sets
  kshim.uncommitted.read.limit=high-watermark (Kafka's bound).
- Followers learn the high watermark from the leader's fetch responses.
- A partition a clean stop summarised (kshim.log.summary) starts dormant: its offsets, size and
  leader epoch come from the summary and no file of it is opened; its log, leader epochs and
  producer state are opened on first use (`wake`), from whichever thread uses them first. A
  broker with thousands of partitions is ready without opening any (Kafka opens segments lazily).

The Partition is its core, here (its state, opening and waking, configuration and role, the
offsets and the high watermark, what the leader knows of its followers, reads, maintenance and
close), and three parts it inherits, a module each:
- kshim.replica.partition_checks: the checks a produced batch passes before the leader appends it;
- kshim.replica.partition_appends: the leader's and the follower's appends, on the event loop or
  through the log writer, and the follower's truncation;
- kshim.replica.partition_txns: the producer state, transaction markers and the last stable offset.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence, overload

import anyio

from kshim.broadcast import Signal
from kshim.clock import SYSTEM
from kshim.cluster.image import NO_LEADER, MetadataImage, PartitionInfo
from kshim.configs import COMPRESSION_CODECS, TopicConfig
from kshim.configs.definitions import LONG_MAX
from kshim.errors import BrokerError
from kshim.log.log import Log, LogConfig, OffsetOutOfRange
from kshim.log.epochs import LeaderEpochCache
from kshim.log.files import save_checkpoint
from kshim.log.summary import ActiveEnd, LogSummary
from kshim.log.writer import LogWriter
from kshim.replica.partition_appends import INLINE_APPEND_MAX, Appends
from kshim.replica.partition_checks import AppendResult, BatchChecks
from kshim.replica.partition_txns import TxnBookkeeping
from kshim.replica.producer_state import ProducerStateManager
from wire.compression import GZIP, LZ4, ZSTD
from wire.errors import ErrorCode
from wire.primitives import FileRecords

log = logging.getLogger("kshim.replica.partition")

HW_CHECKPOINT = "high-watermark"
_LAZY = frozenset({"log", "producers", "epochs"})  # what a dormant partition opens on first use


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetch requests."""
    log_end_offset: int = -1  # unknown until it fetches
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0  # last time it had everything the leader had (Kafka's lastCaughtUpTimeMs)
    leader_end_at_last_fetch: int = 0


@dataclass(eq=False)
class Partition(Appends, BatchChecks, TxnBookkeeping):
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
    # a reassignment under way (the image's adding and removing replicas)
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    # this leader is handing leadership over to a reassignment's targets (hand_over): it takes no
    # appends until they hold its whole log, so the move loses no acknowledged record, acks=1 ones
    # included
    handing_over: bool = False
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

    # ------------------------------------------------------------------ the high-watermark checkpoint
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
        if info.partition_epoch != self.partition_epoch:
            self.handing_over = False  # what became of a handover's proposal is known now
        self.leader_id = info.leader
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.replicas = info.replicas
        self.isr = info.isr
        self.adding, self.removing = info.adding, info.removing
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

    def committed(self, offset: int) -> bool:
        """Whether `offset` is below the high watermark (COMMITTED) now."""
        return self._high_watermark > offset

    async def wait_committed(self, offset: int, timeout_s: float) -> bool:
        """Wait until `offset` is below the high watermark (COMMITTED); False at the timeout or
        when this replica stops leading, even for a moment (its log may have been truncated and
        refilled meanwhile, so the same offset may hold other records)."""
        if self.committed(offset):  # already (one replica in the ISR): no timer to set up
            return True
        epoch = self.leader_epoch
        with anyio.move_on_after(timeout_s):
            while self._high_watermark <= offset:
                if not self.is_leader or self.leader_epoch != epoch:
                    return False
                await self._hw_changed.wait()
            return self.leader_epoch == epoch
        return False

    async def hand_over(self, targets: Sequence[int], timeout_s: float) -> bool:
        """Before a change that moves leadership away from this leader (it completes a
        reassignment that removes it): stop taking appends (they get NOT_LEADER_OR_FOLLOWER and the
        producer retries at the new leader), then wait until every write is out and each target
        replica has fetched up to the log end, so that it holds the whole log. Without it an acks=1
        record acknowledged after a target's last fetch would be lost with the old leader's log,
        though no process crashed. False at the timeout or when leadership moved meanwhile; the
        caller clears handing_over after. False at once, taking appends on, if a target has not
        fetched within the timeout: a paused follower would stall the producers for nothing."""
        now = SYSTEM.wall_ms()
        if any(r != self.node_id and (r not in self.followers or now - self.followers[r].last_fetch_ms > timeout_s * 1000)
               for r in targets):
            return False
        self.handing_over = True
        epoch = self.leader_epoch
        with anyio.move_on_after(timeout_s):
            while self.is_leader and self.leader_epoch == epoch:
                leo = self.log_end_offset
                if self._jobs_out == 0 and all(
                        r == self.node_id or (r in self.followers and self.followers[r].log_end_offset >= leo)
                        for r in targets):
                    return True
                # a fetch that changes no high watermark (another ISR member lags) signals nothing
                with anyio.move_on_after(0.005):
                    await self._hw_changed.wait()
        return False

    def update_follower_hw(self, leader_high_watermark: int) -> None:
        # forward only: a truncation lowers it explicitly; a leader's answer never does
        hw = min(leader_high_watermark, self.log_end_offset)
        if hw > self._high_watermark and not self.is_leader:
            self._high_watermark = hw
            self._prune_unreplicated()
            self.wake_all()

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

    def delete_records(self, offset: int) -> int:
        """DeleteRecords, on the leader (Kafka's Partition.deleteRecordsOnLeader): `offset` (-1: the
        high watermark) becomes the log start offset if it is beyond it; returns the log start
        offset after. BrokerError POLICY_VIOLATION when cleanup.policy is compact without delete
        (only the cleaner removes records there; an empty policy allows it, as in Kafka), else
        OFFSET_OUT_OF_RANGE for an offset past the high watermark or below -1."""
        if self.log_config.compact and not self.log_config.delete:  # Kafka's words
            raise BrokerError(ErrorCode.POLICY_VIOLATION, f"Records of partition {self.topic}-{self.index} "
                                                          f"can not be deleted due to the configured policy")
        high_watermark = self.high_watermark
        if offset == -1:
            offset = high_watermark
        if offset < 0 or offset > high_watermark:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                              f"offset {offset} is outside [0, {high_watermark}] (or -1 for the high watermark)")
        if offset > self.log_start_offset:
            self.delete_records_before(offset)
        return self.log_start_offset

    def delete_records_before(self, offset: int) -> None:
        """Make `offset` the log start offset, whatever the policy: DeleteRecords once checked, or a
        follower following its leader's log start."""
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
        self._save_producer_snapshot()
        return clean


def save_hw_checkpoint(path: Path, hw: int) -> bool:
    """The high-watermark file's one format (Partition._load_hw_checkpoint reads it); whether it
    was written (save_checkpoint: a failure is logged and kept for the next try)."""
    return save_checkpoint(path, f"{hw}\n", "high watermark")


__all__ = ["Partition", "AppendResult", "FollowerState", "OffsetOutOfRange"]
