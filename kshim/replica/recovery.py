"""Background recovery of the logs a crash left unclean (kill -9, a crash): with
recover_in_background (a serving broker, which runs ReplicaManager.recover_deferred) those replicas
are not opened with the image that assigns them but recovered after, off the event loop, while the
others already serve (Kafka's log recovery runs before its broker serves at all). Keys in
`recovering` are hosted but not open yet: the manager's partition() has none; requests that name
them wait for them (wait_recovered), and are recovered first. Coordinator topics ("__...") are
opened at once.

Separate from the ReplicaManager (kshim.replica.manager), which owns a BackgroundRecovery: the
queue, its batches and the waits on it are state of their own; the manager opens and installs
each replica as it would any other (the Host protocol below)."""
from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from typing import Callable, Iterable, Protocol

import anyio

from kshim.broadcast import Signal
from kshim.cluster.image import MetadataImage, PartitionInfo, TopicInfo
from kshim.configs import BrokerLevel
from kshim.log.log import LogConfig
from kshim.log.partition_dir import DirDeleter
from kshim.replica.partition import Partition

log = logging.getLogger("kshim.replica")

# Logs a crash left unclean are recovered in the background in batches of at most this many
# replicas or this long: a request waiting for one is served within a batch
RECOVERY_BATCH = 32
RECOVERY_BATCH_S = 0.05

TopicPartition = tuple[str, int]


class _Image(Protocol):
    @property
    def image(self) -> MetadataImage: ...


class Host(Protocol):
    """What the recovery needs of the ReplicaManager (a protocol: the manager imports this module)."""
    @property
    def node_id(self) -> int: ...

    @property
    def metadata(self) -> _Image: ...

    def broker_level(self) -> BrokerLevel: ...

    def _open_replica(self, topic: TopicInfo, info: PartitionInfo, level: BrokerLevel, log_dir: Path,
                      log_config: LogConfig | None = None) -> Partition: ...

    def _install_recovered(self, opened: list[tuple[TopicPartition, Partition | None]]) -> int: ...


class BackgroundRecovery:
    def __init__(self, host: Host, deleter: DirDeleter, located: dict[str, Path],
                 unclean: set[tuple[Path, str]]) -> None:
        self._host = host
        self._deleter = deleter
        self._located = located  # the manager's replica directory name -> log dir
        self._unclean = unclean  # (log dir, replica directory name) no clean stop vouched for, not deferred yet
        self.recovering: dict[TopicPartition, Path] = {}  # key -> its log dir
        self.asked: dict[TopicPartition, None] = {}  # asked for by a request, recovered first (ordered)
        self.recovered = Signal()  # a batch of recovering replicas was installed
        self.image_applied = Signal()  # apply_image ran (recovery waits for an image naming its replicas)
        self._due = Signal()  # replicas were deferred
        self.batch: list[tuple[TopicPartition, Partition | None]] = []  # opened, not installed yet

    def defer(self, topic: TopicInfo, info: PartitionInfo) -> bool:
        """Whether this replica's opening is left to run(): a log a crash left unclean, at a
        start with recover_in_background."""
        if not self._unclean or topic.name.startswith("__"):
            return False
        name = f"{topic.name}-{info.index}"
        log_dir = self._located.get(name)
        if log_dir is None or (log_dir, name) not in self._unclean:
            return False
        self._unclean.discard((log_dir, name))
        self.recovering[(topic.name, info.index)] = log_dir
        self._due.fire()
        return True

    async def run(self, on_installed: Callable[[], None] | None = None) -> None:
        """For as long as the broker serves: open, in a worker thread, the replicas a crash left
        unclean once an image assigns them, those a request waits for first, in batches installed
        on the event loop with the image of then; `on_installed` is called after each (the broker
        tells its fetchers and coordinators). A cluster's broker gets its first image after it
        serves, a standalone one before."""
        while True:
            while not self.recovering:
                await self._due.wait()
            await self._recover_all(on_installed)

    async def _recover_all(self, on_installed: Callable[[], None] | None) -> None:
        started, installed = time.monotonic(), 0
        log.info("recovering %d replicas in the background", len(self.recovering))
        try:
            while self.recovering:  # bounded: each round takes keys out or waits for the next image
                batch = self._next_recovery_batch()
                if not batch:
                    await self.image_applied.wait()
                    continue
                await anyio.to_thread.run_sync(self._open_recovering, batch)
                opened, self.batch = self.batch, []
                installed += self._host._install_recovered(opened)
                self.recovered.fire()
                if on_installed is not None:
                    on_installed()
        except BaseException:
            for _, replica in self.batch:  # stopping: opened but never served
                if replica is not None:
                    replica.discard()
            self.batch = []
            raise
        log.info("recovered %d replicas in the background in %.1f s", installed, time.monotonic() - started)

    def _next_recovery_batch(self) -> list[tuple[TopicPartition, TopicInfo, PartitionInfo, Path]]:
        """The next replicas to recover, those requests wait for first, with the applied image's
        state. Empty when none is in that image yet: the image that deferred them is still being
        prepared (prepare_image awaits its openings before apply_image makes it the broker's).
        Only apply_image, with a whole current image, ever gives a recovering replica up."""
        image = self._host.metadata.image
        out: list[tuple[TopicPartition, TopicInfo, PartitionInfo, Path]] = []
        first = [k for k in self.asked if k in self.recovering]
        self.asked.clear()
        taken: set[TopicPartition] = set()
        for key in itertools.chain(first, self.recovering):  # the asked ones, then in order
            if len(out) >= RECOVERY_BATCH:
                break
            topic = image.topics.get(key[0])
            if topic is None or key[1] >= len(topic.partitions) or key in taken:
                continue
            taken.add(key)
            out.append((key, topic, topic.partitions[key[1]], self.recovering[key]))
        return out

    def _open_recovering(self, batch: list[tuple[TopicPartition, TopicInfo, PartitionInfo, Path]]) -> None:
        """In a worker thread: open (recover) the batch, one after the other, for at most
        RECOVERY_BATCH_S; each goes to `batch` as it is (None: it failed). Touches no dict the
        event loop iterates."""
        host = self._host
        level, deadline = host.broker_level(), time.monotonic() + RECOVERY_BATCH_S
        for key, topic, info, log_dir in batch:
            try:
                replica = host._open_replica(topic, info, level, log_dir)
                if info.leader == host.node_id:
                    replica.assign_leader_epoch(info.leader_epoch)
            except OSError:
                log.exception("cannot recover %s-%d; tried again with the next metadata image", *key)
                replica = None
            self.batch.append((key, replica))
            if time.monotonic() >= deadline:
                break

    def cancel(self, key: TopicPartition) -> None:
        """A recovering replica the image no longer assigns here: deleted like any removed one
        (by the manager's _install_recovered if its batch is being opened)."""
        log_dir = self.recovering.pop(key)
        self._located.pop(f"{key[0]}-{key[1]}", None)
        if not any(k == key for k, _ in self.batch):
            self._deleter.remove(log_dir / f"{key[0]}-{key[1]}", "no longer assigned to this broker "
                                 "(removed before its recovery after a crash)")
        self.recovered.fire()

    async def wait_recovered(self, keys: Iterable[tuple[str, int | None]]) -> None:
        """Returns once none of `keys` (a request's partitions) is still being recovered; those
        that are are recovered next."""
        waiting = [(t, i) for t, i in keys if i is not None and (t, i) in self.recovering]
        if not waiting:
            return
        for key in waiting:
            self.asked[key] = None
        while any(k in self.recovering for k in waiting):  # bounded: every batch takes keys out
            await self.recovered.wait()
