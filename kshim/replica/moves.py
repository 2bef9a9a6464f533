"""Replica moves between this broker's log dirs (AlterReplicaLogDirs; Kafka's future replicas and
its ReplicaAlterLogDirsThread): the replica's directory is copied in rounds off the event loop,
then swapped in with its log closed for the last round.

Separate from the ReplicaManager (kshim.replica.manager), which owns the ReplicaMover: a move is a
long-running task with state of its own, and touches the manager only to find the replica it
moves and to record where that replica now lives."""
from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import anyio

from kshim.broadcast import Signal
from kshim.log.files import fsync_dir
from kshim.log.log_dirs import MOVE_COMPLETE, DirCopier, future_name
from kshim.log.partition_dir import DirDeleter
from kshim.replica.partition import Partition
from wire.errors import ErrorCode

log = logging.getLogger("kshim.replica")

# a replica move copies in rounds off the event loop until a round copies at most this much; the
# last round runs on the event loop with the source closed (appends wait that long)
MOVE_FINAL_BYTES = 1 << 20
MOVE_MAX_ROUNDS = 50

TopicPartition = tuple[str, int]


@dataclass(eq=False)
class ReplicaMove:
    """A replica being copied to another log directory of this broker (Kafka's future replica)."""
    topic: str
    index: int
    destination: Path  # the log dir it moves to
    future: Path  # <destination>/<topic>-<index>.<hex>-future
    copier: DirCopier
    copied_end_offset: int = 0  # the future copy has the log up to here (for its offset lag)
    started: bool = False
    cancelled: bool = False
    done: anyio.Event | None = field(default=None)


def log_dir_online(log_dir: Path) -> bool:
    """Whether the directory can take writes (exists, is a directory, writable)."""
    return log_dir.is_dir() and os.access(log_dir, os.W_OK | os.X_OK)


class ReplicaMover:
    """The moves under way and those asked for replicas not hosted yet (Kafka's preferred log dir)."""

    def __init__(self, log_dirs: Sequence[Path], deleter: DirDeleter, replicas: Mapping[TopicPartition, Partition],
                 located: dict[str, Path], resume: dict[str, Path]) -> None:
        self.log_dirs = log_dirs
        self.deleter = deleter
        self._replicas = replicas  # the manager's hosted replicas (its dict: read as it changes)
        self._located = located  # the manager's replica directory name -> log dir (a move updates it)
        self._resume = resume  # interrupted moves found at start (kshim.log.log_dirs.scan), by directory name
        # AlterReplicaLogDirs for a replica not hosted yet: where it goes once created (Kafka's
        # preferred log dir)
        self.preferred: dict[TopicPartition, Path] = {}
        self.moves: dict[TopicPartition, ReplicaMove] = {}
        self._changed = Signal()

    def hosted(self, key: TopicPartition, replica: Partition) -> None:
        """`replica` was just opened and hosted for `key`: where it was asked to go is settled,
        and an interrupted move of it starts again."""
        self.preferred.pop(key, None)
        resume = self._resume.pop(replica.directory.name, None)
        if resume is not None:
            self.alter(key[0], key[1], resume)

    def cancel(self, key: TopicPartition) -> None:
        """The replica is removed: its move (if any) stops, and its task deletes the copy."""
        move = self.moves.get(key)
        if move is not None:
            move.cancelled = True

    def alter(self, topic: str, index: int, log_dir: Path) -> ErrorCode:
        """AlterReplicaLogDirs for one replica (Kafka's ReplicaManager.alterReplicaLogDirs): start
        moving it to `log_dir` (an absolute path among log_dirs), cancelling a move elsewhere."""
        if log_dir not in self.log_dirs:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if not log_dir_online(log_dir):
            return ErrorCode.KAFKA_STORAGE_ERROR
        key = (topic, index)
        replica = self._replicas.get(key)
        if replica is None:
            self.preferred[key] = log_dir  # created there if it comes here later (as Kafka does)
            return ErrorCode.REPLICA_NOT_AVAILABLE
        move = self.moves.get(key)
        if move is not None:
            if move.destination == log_dir:
                return ErrorCode.NONE
            move.cancelled = True  # its task deletes its copy
            del self.moves[key]
        if replica.directory.parent == log_dir:
            return ErrorCode.NONE
        name = replica.directory.name
        future = log_dir / future_name(name, uuid.uuid4().hex)
        self.moves[key] = ReplicaMove(topic, index, log_dir, future, DirCopier(replica.directory, future))
        log.info("moving replica %s from %s to %s", name, replica.directory.parent, log_dir)
        self._changed.fire()
        return ErrorCode.NONE

    async def run(self) -> None:
        """Replica moves between log dirs, one at a time (Kafka's ReplicaAlterLogDirsThread)."""
        while True:
            move = next((m for m in self.moves.values() if not m.started), None)
            if move is None:
                await self._changed.wait()
                continue
            move.started = True
            try:
                await self._move(move)
            except OSError as e:
                log.warning("moving %s-%d to %s failed: %s", move.topic, move.index, move.destination, e)
                self.deleter.remove(move.future, "the move failed")
            finally:
                if self.moves.get((move.topic, move.index)) is move:
                    del self.moves[(move.topic, move.index)]
                self._changed.fire()

    async def _move(self, move: ReplicaMove) -> None:
        key = (move.topic, move.index)
        replica = self._replicas.get(key)
        if replica is None:
            return
        for _ in range(MOVE_MAX_ROUNDS):
            if move.cancelled or self._replicas.get(key) is not replica:
                self.deleter.remove(move.future, "the move was cancelled")
                return
            truncations, end = replica.log.truncations, replica.log_end_offset
            try:
                copied = await anyio.to_thread.run_sync(move.copier.sync)
            except FileNotFoundError:
                if self._replicas.get(key) is not replica:  # deleted while copying
                    self.deleter.remove(move.future, "the replica was removed while it moved")
                    return
                raise
            if replica.log.truncations != truncations:
                move.copier.reset()  # a truncated segment keeps its inode: copy everything again
                continue
            move.copied_end_offset = end
            if copied <= MOVE_FINAL_BYTES:
                break
        # fsync the source off the event loop first: closing it in _swap then has little left to sync
        truncations = replica.log.truncations
        await anyio.to_thread.run_sync(replica.log.flush)
        if move.cancelled or self._replicas.get(key) is not replica:
            self.deleter.remove(move.future, "the move was cancelled")
            return
        if replica.log.truncations != truncations:
            move.copier.reset()  # truncated while it flushed: the last round copies everything
        self._swap(replica, move)

    def _swap(self, replica: Partition, move: ReplicaMove) -> None:
        """The last round, on the event loop so nothing appends meanwhile (Kafka does it under the
        partition's lock): close the source log, copy what is left, mark the copy complete, rename
        the source away and the copy into place, reopen the log there."""
        source = replica.directory
        target = move.destination / source.name
        replica.close_for_move()
        try:
            move.copier.sync(final=True)
            marker = move.future / MOVE_COMPLETE
            with open(marker, "wb") as f:
                os.fsync(f.fileno())
            fsync_dir(move.future)
        except OSError:
            replica.reopen_at(source)  # the source is untouched: it stays the replica
            raise
        # from here the copy is the replica (a restart finishes the move: kshim.log.log_dirs.scan)
        self.deleter.remove(source, f"moved to {move.destination}", topic_id=replica.topic_id)
        os.replace(move.future, target)
        (target / MOVE_COMPLETE).unlink()
        self._located[source.name] = move.destination
        replica.reopen_at(target)
        log.info("moved replica %s to %s (%d bytes copied)", source.name, move.destination, move.copier.bytes_copied)
