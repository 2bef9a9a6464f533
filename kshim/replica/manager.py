"""The ReplicaManager: the partition replicas hosted on this broker, opened, reconfigured and
removed as metadata images say, and the one way handlers and coordinators reach them.

Its parts with state or a path of their own are in modules beside it: the write path
(kshim.replica.appends) and the read path (kshim.replica.fetch), the background recovery of logs
a crash left unclean (kshim.replica.recovery) and replica moves between log dirs
(kshim.replica.moves). This module keeps the hosting (opening replicas from the log dirs,
applying images, removals), the leader ladder, housekeeping and the clean stop."""
from __future__ import annotations

import logging
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Mapping, Protocol, Sequence

import anyio

from kshim.clock import SYSTEM
from kshim.cluster.image import MetadataImage, PartitionInfo, TopicInfo
from kshim.configs import BrokerLevel, TopicConfig, resolve
from kshim.log.log import LogConfig
from kshim.log.files import sync_filesystem
from kshim.log.log_dirs import scan, subdirs, take_clean_marker, write_clean_marker
from kshim.log.meta_properties import check_cluster
from kshim.log.offset_checkpoint import REPLICATION_OFFSET_CHECKPOINT, format_offsets, read_offsets, write_offsets
from kshim.log.partition_dir import DirDeleter, read_topic_id, write_topic_id
from kshim.log.summary import ActiveEnd, LogSummary
from kshim.log.writer import LogWriter
from kshim.replica import fetch as reads
from kshim.replica.appends import Appender, PartitionAppend, Records, TxnMarker
from kshim.replica.cleaning import CleanerSettings, LogCleaner
from kshim.replica.fetch import FetchParams, FetchPartition, FetchResult
from kshim.replica.fetch_sessions import DEFAULT_SLOTS, FetchSessionCache
from kshim.replica.moves import ReplicaMove, ReplicaMover, log_dir_online
from kshim.replica.partition import Partition
from kshim.replica.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from kshim.replica.recovery import BackgroundRecovery
from kshim.replica.validation import BatchValidator, Rejection
from wire.errors import ErrorCode

log = logging.getLogger("kshim.replica")

HOUSEKEEPING_INTERVAL_S = 1.0


@dataclass(frozen=True)
class ProducerExpiry:
    """When a partition forgets an idle producer: producer.id.expiration.ms and
    producer.id.expiration.check.interval.ms (Kafka's defaults)."""
    expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    check_interval_ms: int = 600_000


# Kafka's replica.high.watermark.checkpoint.interval.ms default. A checkpoint only bounds what a
# restart starts from (the leader moves its high watermark on from there), so a crash losing the
# last seconds of moves loses nothing; writing every partition's file each second kept the event
# loop in os.replace for a third of the time when 1,000 partitions took writes.
HW_CHECKPOINT_INTERVAL_S = 5.0
# replicas opened per worker-thread call when an image adds many: the event loop runs in between
OPEN_CHUNK = 32
LEADERSHIPS_LOGGED = 10  # leaderships taken in one image logged a line each; more: one line
# Replicas opened at once beside the event loop (a large CreateTopics; a start opens them all on
# its own thread). One: opening is many cheap system calls and a little Python, and threads only
# handed the GIL to each other. A start after kill -9 of 10,000 small logs opened them in 67 s
# with 1 thread against 82 s with 8 (cold page cache) and 36 s against 68 s (warm); a clean start
# of all of them 22 s against 44 s.
OPEN_THREADS = 1
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")

TopicPartition = tuple[str, int]


class Metadata(Protocol):
    """The broker's view of the cluster that the replica manager reads (it never changes it)."""
    @property
    def image(self) -> MetadataImage: ...

    @property
    def topics(self) -> Mapping[str, TopicInfo]: ...

    @property
    def topics_by_id(self) -> Mapping[uuid.UUID, TopicInfo]: ...


class ReplicaManager:
    def __init__(self, node_id: int, data_dir: Path, topic_defaults: Mapping[str, str], metadata: Metadata,
                 max_decompressed_bytes: int = 100 * 1024 * 1024,
                 cleaner: CleanerSettings = CleanerSettings(), fetch_session_slots: int = DEFAULT_SLOTS,
                 log_dirs: Sequence[Path] = (), recover_in_background: bool = False) -> None:
        self.node_id = node_id
        # incremental fetch sessions (KIP-227): the Fetch handler's, kept beside the replicas as
        # Kafka keeps its FetchManager beside the ReplicaManager
        self.fetch_sessions = FetchSessionCache(fetch_session_slots)
        self.cleaner = LogCleaner(cleaner)  # compacted partitions (run by the BrokerServer)
        # produced compressed batches decompress within the request size limit (see validation.py)
        self.validator = BatchValidator(max_decompressed_bytes)
        self.data_dir = data_dir
        # Kafka's log.dirs: each replica lives in one of them (kshim.log.log_dirs); the data dir
        # when none are given
        self.log_dirs: list[Path] = [Path(os.path.abspath(d)) for d in log_dirs or [data_dir]]
        self.topic_defaults = topic_defaults
        self.metadata = metadata
        self._replicas: dict[TopicPartition, Partition] = {}
        # opened off the event loop by prepare_image, taken by the apply_image that follows
        self._prepared: dict[TopicPartition, Partition] = {}
        self._strays_checked = False
        self._cluster_checked = False
        self._removed: list[Partition] = []  # retired by apply_image, files not yet closed and renamed
        # removed replicas: renamed at once, their files deleted file.delete.delay.ms later
        self.deleter = DirDeleter(self._delete_delay_ms(BrokerLevel.of(topic_defaults, {}, node_id)))
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            if self.deleter.sweep(d):
                log.info("deleting partition directories a previous run left renamed for deletion in %s", d)
        found = scan(self.log_dirs, self.deleter)  # raises DuplicateReplica
        self._located: dict[str, Path] = found.located  # replica directory name -> its log dir
        # replica directories the last clean stop closed cleanly (the log dirs' markers, removed
        # here so a crash from now on is seen): opened without recovery, once each, and with a
        # summary of the log started dormant (opened on first use: kshim.replica.partition)
        self._clean: dict[tuple[Path, str], LogSummary | ActiveEnd] = {}  # by (log dir, replica dir name)
        for d in self.log_dirs:
            self._clean.update(((d, name), end) for name, end in take_clean_marker(d).items())
        # high watermarks from each log dir's replication-offset-checkpoint, taken once per replica
        # at its open (a replica not in it reads its own `high-watermark` file, an older kshim's)
        self._saved_hw: dict[tuple[Path, str], int] = {}
        for d in self.log_dirs:
            self._saved_hw.update(((d, name), hw) for name, hw in read_offsets(d / REPLICATION_OFFSET_CHECKPOINT).items())
        # replica moves between log dirs; interrupted ones (found by scan) restart once opened
        self._mover = ReplicaMover(self.log_dirs, self.deleter, self._replicas, self._located, found.pending_moves)
        # Replica directories no clean stop vouched for (kill -9, a crash): with recover_in_background
        # (a serving broker, which runs recover_deferred) they are recovered in the background
        # (kshim.replica.recovery) while the others already serve.
        unclean: set[tuple[Path, str]] = set()
        if recover_in_background:
            unclean = {(d, name) for name, d in found.located.items() if (d, name) not in self._clean}
        self._recovery = BackgroundRecovery(self, self.deleter, self._located, unclean)
        # told of every transaction marker this broker appended once it is COMMITTED (Kafka's
        # group coordinator learns of transaction completions on its partitions the same way)
        self.marker_listeners: list[Callable[[str, int, TxnMarker, int], None]] = []
        # appends off the event loop (kshim.log.writer): one writer thread per data directory,
        # once start_writers() was called by the serving broker (direct users append in place)
        self._writers: dict[Path, LogWriter] | None = None
        self._appender = Appender(self)

    def start_writers(self) -> None:
        """From now on, produce and replication appends go through the log writers."""
        if self._writers is None:
            self._writers = {}
            for replica in [*self._replicas.values(), *self._prepared.values()]:
                replica.writer = self._writer_for(replica.directory.parent)

    def _writer_for(self, data_dir: Path) -> LogWriter | None:
        if self._writers is None:
            return None
        writer = self._writers.get(data_dir)
        if writer is None:  # a dict insert is atomic: replicas opened in worker threads may race here
            writer = self._writers.setdefault(data_dir, LogWriter(f"log-writer {data_dir.name}"))
        return writer

    # ------------------------------------------------------------------ hosting
    async def prepare_image(self, image: MetadataImage) -> None:
        """Open, in worker threads, the replicas `image` adds to this broker, so that the
        apply_image that follows finds them ready. Opening is file I/O (a new directory and
        segment, or recovery and producer-state replay of an existing one): about 0.4 ms for an
        empty partition, far more for one with data; thousands at once (a big CreateTopics, a
        broker's start) must not stall every connection."""
        self._check_cluster(image)
        level = BrokerLevel.of(self.topic_defaults, image.broker_configs, self.node_id)
        todo = self._unopened(image)
        if not todo:
            return  # no await: an image that opens nothing is applied without yielding, as before
        placed = self._place([(topic.name, info.index) for topic, info in todo])
        limiter = anyio.CapacityLimiter(OPEN_THREADS)

        async def open_chunk(chunk: list[tuple[TopicInfo, PartitionInfo]]) -> None:
            opened = await anyio.to_thread.run_sync(self._open_chunk, chunk, level, placed, limiter=limiter)
            for replica in opened:
                self._prepared[(replica.topic, replica.index)] = replica

        async with anyio.create_task_group() as tg:
            for start in range(0, len(todo), OPEN_CHUNK):
                tg.start_soon(open_chunk, todo[start:start + OPEN_CHUNK])

    def _check_cluster(self, image: MetadataImage) -> None:
        """Before the first image touches any replica: it must be of the cluster whose data the
        log dirs hold (kshim.log.meta_properties); raises ForeignMetadata otherwise."""
        if not self._cluster_checked and image.version > 0:
            check_cluster(self.log_dirs, image.cluster_id, self.node_id)
            self._cluster_checked = True

    def _unopened(self, image: MetadataImage) -> list[tuple[TopicInfo, PartitionInfo]]:
        """The replicas `image` gives this broker that are neither open, prepared nor being
        recovered; those it finds a crash left unclean are deferred to recover_deferred."""
        return [(topic, info) for topic in image.topics.values() for info in topic.partitions
                if self.node_id in info.replicas and (topic.name, info.index) not in self._replicas
                and (topic.name, info.index) not in self._prepared
                and (topic.name, info.index) not in self.recovering and not self._recovery.defer(topic, info)]

    def _open_chunk(self, chunk: list[tuple[TopicInfo, PartitionInfo]], level: BrokerLevel,
                    placed: Mapping[TopicPartition, Path]) -> list[Partition]:
        opened = []
        configs: dict[str, LogConfig] = {}  # resolved once per topic
        for topic, info in chunk:
            log_config = configs.get(topic.name)
            if log_config is None:
                log_config = configs[topic.name] = resolve(topic.configs, level).log_config()
            replica = self._open_replica(topic, info, level, placed[(topic.name, info.index)], log_config)
            if info.leader == self.node_id:
                # the epoch checkpoint write a new leader makes (apply_partition_state then
                # finds the epoch recorded and writes nothing)
                replica.assign_leader_epoch(info.leader_epoch)
            opened.append(replica)
        return opened

    def _prepare_now(self, image: MetadataImage) -> None:
        """apply_image without a prepare_image before it (a broker's start): every replica opened
        here, on the caller's thread, which has nothing else to do until they are (threads only
        handed the GIL to each other: OPEN_THREADS)."""
        deferred = len(self.recovering)
        todo = self._unopened(image)
        deferred = len(self.recovering) - deferred
        if deferred:
            log.info("%d replicas a crash left unclean are recovered in the background, while the others "
                     "serve", deferred)
        if len(todo) < OPEN_CHUNK:
            return  # one by one in apply_image
        started = time.monotonic()
        recovered = dormant = 0
        for replica in self._open_chunk(todo, self.broker_level(),
                                        self._place([(topic.name, info.index) for topic, info in todo])):
            self._prepared[(replica.topic, replica.index)] = replica
            if replica.dormant is not None:
                dormant += 1
            else:
                recovered += replica.log.recovered
        log.info("opened %d replicas in %.1f s: %d recovered (no clean shutdown), %d clean (%d of them "
                 "dormant: opened on first use)", len(todo), time.monotonic() - started, recovered,
                 len(todo) - recovered, dormant)

    async def finish_removals(self) -> None:
        """Close and rename, in worker threads, the replicas the last apply_image(defer_removal=True)
        removed (their files are then deleted in the background). Before the next image is
        applied, so a topic created again under the same name finds its directory free."""
        removed, self._removed = self._removed, []

        def finish(chunk: list[Partition]) -> None:
            for replica in chunk:
                self._finish_removal(replica)

        for start in range(0, len(removed), OPEN_CHUNK):
            await anyio.to_thread.run_sync(finish, removed[start:start + OPEN_CHUNK])

    # ------------------------------------------------------------------ recovery after a crash
    @property
    def recovering(self) -> dict[TopicPartition, Path]:
        """Replicas hosted here whose logs a crash left unclean, not open yet: key -> its log dir
        (kshim.replica.recovery). partition() has none of them."""
        return self._recovery.recovering

    async def recover_deferred(self, on_installed: Callable[[], None] | None = None) -> None:
        """For as long as the broker serves: recover, in the background, the replicas a crash left
        unclean (BackgroundRecovery.run); `on_installed` is called after each batch is hosted."""
        await self._recovery.run(on_installed)

    async def wait_recovered(self, keys: Iterable[tuple[str, int | None]]) -> None:
        """Returns once none of `keys` (a request's partitions) is still being recovered; those
        that are are recovered next."""
        await self._recovery.wait_recovered(keys)

    def _install_recovered(self, opened: list[tuple[TopicPartition, Partition | None]]) -> int:
        """Host the replicas recover_deferred opened, as apply_image would have, with the image of
        now; one no longer assigned here, or of a topic since created again, is not kept. One
        that failed to open is left to the next image's apply_image. Returns how many are hosted."""
        image, level, leaders, hosted = self.metadata.image, self.broker_level(), [], 0
        for key, replica in opened:
            topic = image.topics.get(key[0])
            log_dir = self.recovering.pop(key, None)
            if replica is None:
                continue
            if log_dir is None:  # apply_image gave it up meanwhile (BackgroundRecovery.cancel): removed
                self._finish_removal(replica, "no longer assigned to this broker")
                continue
            if topic is None or topic.topic_id != replica.topic_id:
                # not in the applied image (its image is being prepared), or the topic was created
                # again: opened anew with the image of then; nothing is deleted here
                self.recovering[key] = log_dir
                replica.discard()
                continue
            info = topic.partitions[key[1]]
            self._host(key, replica)
            hosted += 1
            replica.configure(resolve(topic.configs, level))
            if replica.apply_partition_state(info, image):
                leaders.append(replica)
        _log_leaderships(leaders)
        return hosted

    def _host(self, key: TopicPartition, replica: Partition) -> None:
        """`replica`, just opened, is the one hosted here for `key` (apply_image, a recovery in
        the background); an interrupted move of it starts again."""
        self._replicas[key] = replica
        self._located[replica.directory.name] = replica.directory.parent
        self._mover.hosted(key, replica)

    def apply_image(self, image: MetadataImage, *, defer_removal: bool = False) -> None:
        """Open, reconfigure or remove local replicas as the image assigns them; with
        defer_removal, removed replicas' files are left for finish_removals."""
        self._check_cluster(image)
        wanted = set()
        leaders: list[Partition] = []
        self._prepare_now(image)
        level = self.broker_level()
        self.deleter.delay_ms = self._delete_delay_ms(level)
        for topic in image.topics.values():
            config: TopicConfig | None = None  # resolved once per topic, not per partition
            for info in topic.partitions:
                if self.node_id not in info.replicas:
                    continue
                key = (topic.name, info.index)
                wanted.add(key)
                replica = self._replicas.get(key)
                if replica is not None and replica.topic_id != topic.topic_id:
                    self._remove(key)  # a topic deleted and created again under the same name
                    self._finish_removal(self._removed.pop())  # its directory is needed now
                    replica = None
                if replica is None:
                    if key in self.recovering or self._recovery.defer(topic, info):
                        continue  # installed by recover_deferred, with the image of then
                    replica = self._prepared.pop(key, None)
                    if replica is not None and replica.topic_id != topic.topic_id:
                        replica.close()  # prepared for an image this one replaced
                        replica = None
                    if replica is None:
                        replica = self._open_replica(topic, info, level, self._place([key])[key])
                    self._host(key, replica)
                if config is None:
                    config = resolve(topic.configs, level)
                replica.configure(config)
                if replica.apply_partition_state(info, image):
                    leaders.append(replica)
        _log_leaderships(leaders)
        for key in [k for k in self._replicas if k not in wanted]:
            self._remove(key)
        for key in [k for k in self.recovering if k not in wanted]:
            self._recovery.cancel(key)
        if not defer_removal:
            for replica in self._removed:
                self._finish_removal(replica)
            self._removed.clear()
        for replica in self._prepared.values():  # an image that no longer has them came first
            replica.close()
        self._prepared.clear()
        if not self._strays_checked and image.version > 0:
            self._strays_checked = True
            self._remove_strays(image)
        self._recovery.image_applied.fire()

    @staticmethod
    def _delete_delay_ms(level: BrokerLevel) -> int:
        """How long a removed replica's renamed directory waits before it is deleted: the
        broker's file.delete.delay.ms (log.segment.delete.delay.ms), as Kafka's LogManager waits."""
        return resolve({}, level)["file.delete.delay.ms"]

    def broker_level(self) -> BrokerLevel:
        """This broker's topic-config defaults: the command line's under the image's dynamic ones."""
        return BrokerLevel.of(self.topic_defaults, self.metadata.image.broker_configs, self.node_id)

    def _place(self, keys: Sequence[TopicPartition]) -> dict[TopicPartition, Path]:
        """The log dir of each replica: where it already is, the one AlterReplicaLogDirs asked
        for, else the dir with the fewest replicas (Kafka's default), counting these as placed."""
        counts = {d: 0 for d in self.log_dirs}
        for d in self._located.values():
            if d in counts:
                counts[d] += 1
        placed: dict[TopicPartition, Path] = {}
        online: list[Path] | None = None
        for topic, index in keys:
            name = f"{topic}-{index}"
            located = self._located.get(name)
            if located is None:
                located = self._mover.preferred.get((topic, index))
                if located is None or located not in counts:
                    if online is None:  # a dir that cannot be written takes no new replica
                        online = [x for x in self.log_dirs if self.log_dir_online(x)] or self.log_dirs
                    located = min(online, key=lambda x: counts[x])  # the first of equals: the order given
                counts[located] += 1
                self._located[name] = located
            placed[(topic, index)] = located
        return placed

    def _open_replica(self, topic: TopicInfo, info: PartitionInfo, level: BrokerLevel, log_dir: Path,
                      log_config: LogConfig | None = None) -> Partition:
        """The replica's partition, its directory made or loaded (`log_config`: the topic's, when
        the caller resolved it). Runs in worker threads too: it touches nothing but its own
        directory (and the thread-safe deleter)."""
        if log_config is None:
            log_config = resolve(topic.configs, level).log_config()
        dormant = self._open_dormant(topic, info, log_dir, log_config)
        if dormant is not None:
            return dormant
        directory = log_dir / f"{topic.name}-{info.index}"
        vouched = self._clean.pop((log_dir, directory.name), None)  # once: a reopened replica was written since
        assert not isinstance(vouched, LogSummary)  # _open_dormant narrowed one it could not start from
        saved_hw = self._saved_hw.pop((log_dir, directory.name), None)
        recorded = read_topic_id(directory)
        if recorded is not None and recorded != topic.topic_id:
            # the topic was deleted and created again while this broker was away: the old data is
            # set aside as a stray (deleted file.delete.delay.ms later), the new topic starts empty
            self.deleter.remove(directory, f"it holds topic id {recorded}, the metadata's {topic.name} is "
                                f"{topic.topic_id} (deleted and created again while this broker was away)",
                                stray=True, topic_id=recorded)
        clean = vouched if recorded == topic.topic_id else None
        replica = Partition(topic.name, info.index, directory, log_config,
                            node_id=self.node_id, topic_id=topic.topic_id, clean_start=clean,
                            saved_hw=saved_hw if recorded == topic.topic_id else None)
        replica.writer = self._writer_for(directory.parent)
        if recorded != topic.topic_id:
            write_topic_id(directory, topic.topic_id, replace=recorded is not None)
        return replica

    def _open_dormant(self, topic: TopicInfo, info: PartitionInfo, log_dir: Path,
                      log_config: LogConfig) -> Partition | None:
        """The replica started dormant from its clean stop's summary, touching no file but a stat
        of its active segment; None when it has no summary it can start from (the log cleaner's
        partitions are opened: it reads them), which is then narrowed to its active segment for
        the open that follows."""
        key = (log_dir, f"{topic.name}-{info.index}")
        summary = self._clean.get(key)
        if not isinstance(summary, LogSummary):
            return None
        saved_hw = self._saved_hw.get(key)
        if not (summary.topic_id == topic.topic_id and saved_hw is not None and not log_config.compact
                and summary.unchanged(f"{log_dir}/{key[1]}")):
            self._clean[key] = summary.active
            return None
        del self._clean[key], self._saved_hw[key]  # once: a reopened replica was written since
        replica = Partition(topic.name, info.index, log_dir / key[1], log_config, node_id=self.node_id,
                            topic_id=topic.topic_id, clean_start=summary.active, saved_hw=saved_hw, dormant=summary)
        replica.writer = self._writer_for(log_dir)
        return replica

    def _remove_strays(self, image: MetadataImage) -> None:
        """After the first image: partition directories this broker no longer hosts (their topic
        was deleted, or the partition moved away, while it was down) are renamed aside as strays
        and deleted file.delete.delay.ms later, as Kafka's LogManager handles stray logs once its
        broker has caught up with the metadata (here: the first image, the controller's whole
        current one). Only directories that carry a topic id are touched, so
        nothing that is not a kshim partition is ever removed."""
        found = []
        for d in self.log_dirs:
            try:
                found += [(name, d) for name in subdirs(d)]
            except FileNotFoundError:
                continue
        for name, d in found:
            m = _PARTITION_DIR.match(name)
            if m is None or (key := (m.group(1), int(m.group(2)))) in self._replicas or key in self.recovering:
                continue
            directory = d / name
            recorded = read_topic_id(directory)
            if recorded is None:
                continue
            topic = image.topics.get(m.group(1))
            if (topic is not None and topic.topic_id == recorded and key[1] < len(topic.partitions)
                    and self.node_id in topic.partitions[key[1]].replicas):
                continue  # assigned here (not open: it failed to, and is tried again): never a stray
            why = ("its topic is not in the metadata (deleted while this broker was away)"
                   if topic is None or topic.topic_id != recorded
                   else "the metadata no longer assigns the partition to this broker")
            self.deleter.remove(directory, f"{why}; metadata version {image.version}", stray=True, topic_id=recorded)
            self._located.pop(name, None)

    def _remove(self, key: TopicPartition) -> None:
        replica = self._replicas.pop(key)
        self._located.pop(replica.directory.name, None)
        self._mover.cancel(key)
        replica.retire()  # whoever waits on it stops waiting now; the files go next
        self._removed.append(replica)

    def _finish_removal(self, replica: Partition, why: str = "") -> None:
        replica.discard()  # no flush, no clean-shutdown marker: the files are going
        topic = self.metadata.image.topics.get(replica.topic)
        if not why:
            why = ("its topic was deleted" if topic is None or topic.topic_id != replica.topic_id
                   else "the metadata no longer assigns it to this broker")
        # renamed now, its files deleted file.delete.delay.ms later
        self.deleter.remove(replica.directory, why, topic_id=replica.topic_id)

    def partition(self, topic: str, index: int) -> Partition | None:
        """The replica of topic-index hosted here, leader or follower; None if not hosted."""
        return self._replicas.get((topic, index))

    def replicas(self) -> list[Partition]:
        return list(self._replicas.values())

    # ------------------------------------------------------------------ log dirs
    def log_dir_of(self, replica: Partition) -> Path:
        return replica.directory.parent

    def log_dir_online(self, log_dir: Path) -> bool:
        """Whether the directory can take writes (exists, is a directory, writable)."""
        return log_dir_online(log_dir)

    @property
    def moves(self) -> dict[TopicPartition, ReplicaMove]:
        """The replica moves between log dirs under way (kshim.replica.moves)."""
        return self._mover.moves

    def alter_log_dir(self, topic: str, index: int, log_dir: Path) -> ErrorCode:
        """AlterReplicaLogDirs for one replica (Kafka's ReplicaManager.alterReplicaLogDirs): start
        moving it to `log_dir` (an absolute path among log_dirs), cancelling a move elsewhere."""
        return self._mover.alter(topic, index, log_dir)

    async def run_moves(self) -> None:
        """Replica moves between log dirs, one at a time (Kafka's ReplicaAlterLogDirsThread)."""
        await self._mover.run()

    # ------------------------------------------------------------------ the leader ladder
    def requires_keys(self, topic: str, index: int) -> bool:
        """Whether records appended to this replica must all have keys (a compacted topic)."""
        replica = self._replicas.get((topic, index))
        return replica is not None and replica.log_config.compact

    def get_partition_or_error(self, topic: str | uuid.UUID, index: int,
                               current_leader_epoch: int = -1) -> Partition | ErrorCode:
        """The replica of topic-index if this broker leads it, else why not: UNKNOWN_TOPIC_ID for a
        topic id not known (requests naming topics by id), UNKNOWN_TOPIC_OR_PARTITION for a name
        not known or an index out of range, NOT_LEADER_OR_FOLLOWER when it is not hosted here or
        only as a follower; then `current_leader_epoch` against ours (KIP-320, -1 skips it)."""
        if isinstance(topic, uuid.UUID):
            info = self.metadata.topics_by_id.get(topic)
            if info is None:
                return ErrorCode.UNKNOWN_TOPIC_ID
            topic = info.name
        else:
            info = self.metadata.topics.get(topic)
        if info is None or not 0 <= index < len(info.partitions):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        replica = self._replicas.get((topic, index))
        if replica is None or not replica.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        epoch_error = replica.leader_epoch_error(current_leader_epoch)
        return epoch_error if epoch_error else replica

    # ------------------------------------------------------------------ appends (kshim.replica.appends)
    def append(self, acks: int, timeout_s: float, entries: Sequence[tuple[str, int, Records]],
               topic_errors: Mapping[str, ErrorCode] | None = None, internal_topics_allowed: bool = False,
               rejected: Mapping[int, Rejection] | None = None
               ) -> list[PartitionAppend] | Awaitable[list[PartitionAppend]]:
        """A Produce request's appends (Kafka's appendRecords): Appender.append."""
        return self._appender.append(acks, timeout_s, entries, topic_errors, internal_topics_allowed, rejected)

    async def append_and_wait(self, topic: str, index: int, records: bytes | TxnMarker, timeout_s: float,
                              on_appended: Callable[[PartitionAppend], None] | None = None) -> PartitionAppend:
        """A coordinator's write (acks=all, Kafka's origin=Coordinator): a batch of its own, with
        the partition's from_coordinator checks, or a transaction marker. Returns once the records
        are COMMITTED (error NONE) or not within `timeout_s`. `on_appended` runs right after a
        successful append, before the wait."""
        return await self._appender.append_and_wait(topic, index, records, timeout_s, on_appended)

    def append_started(self, topic: str, index: int, records: bytes, timeout_s: float
                       ) -> PartitionAppend | Awaitable[PartitionAppend]:
        """`append_and_wait` of a batch: the outcome at once when there is nothing to wait for, else an awaitable."""
        return self._appender.append_started(topic, index, records, timeout_s)

    async def append_markers_and_wait(self, tps: list[tuple[str, int]], marker: TxnMarker,
                                      timeout_s: float) -> dict[tuple[str, int], ErrorCode]:
        """`append_and_wait` of one marker on several partitions: all appended first, then each
        waited for in turn (together they last as long as the slowest, with no task per partition)."""
        return await self._appender.append_markers_and_wait(tps, marker, timeout_s)

    # ------------------------------------------------------------------ reads
    def fetch(self, params: FetchParams, asked: list[FetchPartition]) -> FetchResult | Awaitable[FetchResult]:
        """A Fetch's reads (Kafka's fetchMessages), one answer per asked partition in order. Reads
        now; if fewer than min_bytes are ready (and nothing failed), the answer is an awaitable
        that completes when appends bring enough or max_wait_ms passes."""
        return reads.fetch(self, params, asked)

    # ------------------------------------------------------------------ housekeeping
    async def housekeeping(self, producers: ProducerExpiry = ProducerExpiry()) -> None:
        """Retention and time-based flushes once a second; high-watermark checkpoints every
        HW_CHECKPOINT_INTERVAL_S; idle producers forgotten every `producers.check_interval_ms`."""
        checkpointed = SYSTEM.monotonic()
        producers_checked = SYSTEM.wall_ms()
        while True:
            await anyio.sleep(min(HOUSEKEEPING_INTERVAL_S, producers.check_interval_ms / 1000))
            now = SYSTEM.wall_ms()
            if now - producers_checked >= producers.check_interval_ms:
                producers_checked = now
                self.expire_producers(now, producers.expiration_ms)
            due = []  # dormant replicas whose retention would cut: opened in a worker thread, cut next round
            for replica in list(self._replicas.values()):
                try:
                    if replica.dormant is not None:
                        if replica.dormant_retention_due(now):
                            due.append(replica)
                        continue
                    replica.housekeeping(now)
                except OSError:
                    log.exception("housekeeping failed for %s-%d", replica.topic, replica.index)
            if due:
                try:
                    await anyio.to_thread.run_sync(_wake_all, due)
                except OSError:
                    log.exception("cannot open %d replicas for retention", len(due))
            if SYSTEM.monotonic() - checkpointed >= HW_CHECKPOINT_INTERVAL_S:
                checkpointed = SYSTEM.monotonic()
                await self.checkpoint_high_watermarks()

    def expire_producers(self, now_ms: int, expiration_ms: int) -> None:
        """Every open replica forgets the idempotent producers whose last batch is `expiration_ms`
        old and that have no open transaction (Kafka's producer.id.expiration.ms): a later batch
        of one is then judged as a new producer's. A dormant replica keeps its state until opened."""
        for replica in list(self._replicas.values()):
            if replica.dormant is None:
                replica.producers.remove_expired(now_ms, expiration_ms)

    async def checkpoint_high_watermarks(self) -> int:
        """Rewrite the replication-offset-checkpoint of every log dir where a replica's high
        watermark moved since the last one (Kafka's: one file per log dir with every replica's,
        fsynced), in a worker thread; returns how many replicas' moved. A log dir's file is one
        write however many partitions moved (a file per partition cost a millisecond each)."""
        due = self._hw_checkpoints(moved_only=True)
        if not due:
            return 0
        texts = [(d / REPLICATION_OFFSET_CHECKPOINT, text) for d, (text, _) in due.items()]
        written = await anyio.to_thread.run_sync(_write_hw_files, texts, True)
        moved = 0
        for (d, (_, entries)), ok in zip(due.items(), written):
            moved += sum(replica.hw_moved for replica, _ in entries)
            if ok:
                for replica, hw in entries:
                    if replica.directory.parent == d:  # not moved to another log dir meanwhile
                        replica.hw_checkpointed(hw)
        return moved

    def _hw_checkpoints(self, replicas: Sequence[Partition] | None = None, moved_only: bool = False
                        ) -> dict[Path, tuple[str, list[tuple[Partition, int]]]]:
        """Per log dir: its replication-offset-checkpoint's text and the (replica, high watermark)
        it holds; with moved_only, only the dirs where some replica's moved."""
        by_dir: dict[Path, list[tuple[Partition, int]]] = {}
        for replica in self._replicas.values() if replicas is None else replicas:
            by_dir.setdefault(replica.directory.parent, []).append((replica, replica.high_watermark))
        # replicas still being recovered keep the high watermark the file had for them
        pending: dict[Path, list[tuple[str, int, int]]] = {}
        for (topic, index), d in self.recovering.items():
            hw = self._saved_hw.get((d, f"{topic}-{index}"))
            if hw is not None:
                pending.setdefault(d, []).append((topic, index, hw))
        return {d: (format_offsets([*((r.topic, r.index, hw) for r, hw in entries), *pending.get(d, ())]), entries)
                for d, entries in by_dir.items()
                if d in self.log_dirs and (not moved_only or any(r.hw_moved for r, _ in entries))}

    def close(self) -> None:
        """A clean stop: every log closed without an fsync each (in a few threads: closing is file
        writes and renames), then one sync per log dir's file system, then each dir's
        clean-shutdown marker naming the logs it vouches for (written last, synced)."""
        for writer in (self._writers or {}).values():  # what is queued is written first
            writer.close()
        for replica in self._removed:
            self._finish_removal(replica)
        self._removed.clear()
        replicas = [*self._replicas.values(), *self._prepared.values()]
        self._prepared.clear()
        started = time.monotonic()
        # One after the other, in this thread: a close is a few cheap system calls (no fsync: the
        # file system is synced once below), and threads only made them slower. 10,000 open
        # replicas closed by 8 threads took 2.4-3.1 s, 1.9 s of it a pool work item each, and
        # 10,000 fstat and close calls take 0.1 s in one thread against 0.7 s in 8 (GIL hand-offs).
        closed = [(r, r.close(durable=False)) for r in replicas]
        closed_s = time.monotonic() - started
        # the high watermarks, one file per log dir, made durable by the sync below
        hw_files = self._hw_checkpoints(list(self._replicas.values()), moved_only=True)
        _write_hw_files([(d / REPLICATION_OFFSET_CHECKPOINT, text) for d, (text, _) in hw_files.items()], False)
        synced = time.monotonic()
        for d in self.log_dirs:
            try:
                sync_filesystem(d)
            except OSError as e:
                log.warning("cannot sync %s (%s): no clean-shutdown marker, the next start recovers", d, e)
                continue
            ends = {r.directory.name: end for r, end in closed if end is not None and r.directory.parent == d}
            try:
                write_clean_marker(d, ends)
            except OSError as e:  # a full disk: the next start recovers this dir's logs instead
                log.warning("%s: no clean-shutdown marker (%s); the next start recovers its logs", d, e)
        log.info("closed %d replicas in %.2f s (%d log dirs synced and marked in %.2f s)", len(replicas), closed_s,
                 len(self.log_dirs), time.monotonic() - synced)


def _log_leaderships(leaders: list[Partition]) -> None:
    """A line per partition this broker now leads, or one for all when many came at once (a
    start, a failover): a line each was a tenth of the start of a broker with 2,000 partitions."""
    many = len(leaders) > LEADERSHIPS_LOGGED
    if many:
        log.info("now leader of %d partitions (%s, ...)", len(leaders),
                 ", ".join(f"{p.topic}-{p.index} at epoch {p.leader_epoch}" for p in leaders[:LEADERSHIPS_LOGGED]))
    level = logging.DEBUG if many else logging.INFO
    for p in leaders if log.isEnabledFor(level) else ():
        log.log(level, "%s-%d: leader at epoch %d, log end %d, isr %s", p.topic, p.index, p.leader_epoch,
                p.log_end_offset, list(p.isr))


def _wake_all(replicas: list[Partition]) -> None:
    for replica in replicas:
        replica.wake()


def _write_hw_files(files: list[tuple[Path, str]], fsync: bool) -> list[bool]:
    """Each log dir's replication-offset-checkpoint (a failure is logged once and tried again at
    the next checkpoint)."""
    return [write_offsets(path, text, "high watermarks", fsync=fsync) for path, text in files]
