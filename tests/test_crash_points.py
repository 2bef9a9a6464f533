"""A kill -9 at any moment of the log's multi-step file operations loses no acknowledged record:
compaction's segment swap, a segment roll, retention and DeleteRecords deleting
segments, a follower's truncation, new leader epochs, a log's own clean close, a replica's move
between log dirs (AlterReplicaLogDirs), a topic's deletion, a broker's clean stop (high-watermark
checkpoint, producer snapshots, the log dirs' clean-shutdown markers) and the start after it.

How: kshim never waits for fsync, and a killed process leaves the OS every page it wrote, so what
a kill -9 leaves on disk is exactly what the file-system calls made so far left. `Crashes` wraps
the calls that change files (os.replace / rename / unlink / remove / rmdir / mkdir / truncate /
ftruncate / write / writev / pwrite, os.open with O_CREAT or O_TRUNC, open() for writing) and,
before each one that touches the test's directory, keeps the tree as it is then (a crash point;
consecutive identical trees once), and for a write also the tree with half of its bytes written
(a write of several pages can stop short when the signal comes). Each crash point is then opened
as a start after a crash opens it (a Partition with no clean-stop marker: recovered; a broker:
the ReplicaManager's start, alternately recovering before it serves and in the background as
`kshim serve` does), and every record acknowledged before that moment must be readable at its
offset with its value, CRCs intact, offsets only growing, the log end never behind it. Where the
start itself repairs in several steps (a swap or a move to finish), its own crash points are
opened too: a crash during the recovery of a crash. CRASH_POINTS_LIST=1 with -s prints them."""
from __future__ import annotations

import builtins
import dataclasses
import fcntl
import io
import os
import shutil
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import anyio
import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.clock import SYSTEM
from kshim.log.log import LogConfig
from kshim.log import log_dirs
from kshim.log import files as log_files
from kshim.log.cleaner import write_cleaned
from kshim.log.ephemeral import ephemeral_dir
from kshim.log.log_dirs import MOVE_COMPLETE
from kshim.replica import cleaning
from kshim.replica import moves as moves_module
from kshim.replica.partition import Partition
from kshim.standalone import open_standalone
from wire.records import crc_ok, decode_records, encode_batch, iter_batches

pytestmark = pytest.mark.unit


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """On tmpfs when there is one (kshim.log.ephemeral): the hundreds of crash points written out and
    started here, SQLite's syncs included, cost no disk writeback."""
    path = ephemeral_dir("kshim-crash-points-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)

_real_open = io.open  # builtins.open is the same function
_MUTATING_FLAGS = os.O_CREAT | os.O_TRUNC


# ============================================================================ the crash recorder
@dataclass
class CrashState:
    """The tree a kill -9 would leave, before the call `label`; `progress` is what the test had
    been told was acknowledged by then (Crashes.progress at that moment)."""
    label: str
    files: dict[str, bytes]
    dirs: frozenset[str]
    progress: dict = field(default_factory=dict)
    mtimes: dict[str, int] = field(default_factory=dict)  # a clean stop's summary checks the active segment's


def _read_tree(root: str) -> tuple[dict[str, bytes], frozenset[str], dict[str, int]]:
    files: dict[str, bytes] = {}
    mtimes: dict[str, int] = {}
    dirs = set()
    for path, _, filenames in os.walk(root):
        rel = os.path.relpath(path, root)
        dirs.add(rel)
        for name in filenames:
            key = os.path.normpath(os.path.join(rel, name))
            with _real_open(os.path.join(path, name), "rb") as f:
                files[key] = f.read()
                mtimes[key] = os.fstat(f.fileno()).st_mtime_ns
    return files, frozenset(dirs), mtimes


class Crashes:
    """Records the crash points of whatever runs inside `recording(root)` (see the module's
    docstring): `states`, in order. The calls of every thread are serialised with the snapshots,
    so each snapshot is one instant."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = ""
        self.states: list[CrashState] = []
        self.progress: dict = {}  # copied into each state: what the test knows was acknowledged by then
        self._lock = threading.RLock()
        self._busy = threading.local()
        self._on = False
        self._install(monkeypatch)

    # ------------------------------------------------------------------ recording
    @contextmanager
    def recording(self, root: Path, progress: dict | None = None) -> Iterator[list[CrashState]]:
        """Record the crash points under `root` until the block ends (and the state it leaves)."""
        assert not self._on
        self.root, self.states = os.path.abspath(root), []
        self.progress = {} if progress is None else progress
        self._on = True
        try:
            yield self.states
        finally:
            self._on = False
            self.capture("the end")

    def capture(self, label: str) -> None:
        if getattr(self._busy, "on", False):
            return
        with self._lock:
            self._busy.on = True
            try:
                files, dirs, mtimes = _read_tree(self.root)
                last = self.states[-1] if self.states else None
                if last is not None and last.files == files and last.dirs == dirs:
                    last.progress, last.mtimes = dict(self.progress), mtimes  # the same tree, later
                    return
                if last is not None:  # unchanged files share their bytes
                    files = {k: last.files[k] if last.files.get(k) == v else v for k, v in files.items()}
                self.states.append(CrashState(label, files, dirs, dict(self.progress), mtimes))
            finally:
                self._busy.on = False

    @staticmethod
    def materialize(state: CrashState, dest: Path) -> Path:
        """Write `state` out at `dest` (a fresh directory) and return it."""
        for d in sorted(state.dirs):
            os.makedirs(os.path.join(dest, d), exist_ok=True)
        for rel, data in state.files.items():
            with _real_open(os.path.join(dest, rel), "wb") as f:
                f.write(data)
            os.utime(os.path.join(dest, rel), ns=(state.mtimes[rel], state.mtimes[rel]))
        return dest

    # ------------------------------------------------------------------ interception
    def _ours(self, path, dir_fd: int | None = None) -> bool:
        if isinstance(path, int):
            return self._fd_ours(path)
        p = os.fsdecode(os.fspath(path))
        if dir_fd is not None and not os.path.isabs(p):
            try:
                p = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
            except OSError:
                return False
        p = os.path.abspath(p)
        return p == self.root or p.startswith(self.root + os.sep)

    def _fd_ours(self, fd: int) -> bool:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return False
        return target.startswith(self.root + os.sep)

    @contextmanager
    def _call(self, relevant: Callable[[], bool], label: Callable[[], str]) -> Iterator[bool]:
        """Around a call that may change files: the state before it, when it is one of ours
        (yields whether it was; the call runs inside, so no other thread's changes meanwhile)."""
        if not self._on or getattr(self._busy, "on", False) or not relevant():
            yield False
            return
        with self._lock:
            self.capture(label())
            yield True

    def _torn(self, fd: int, data: bytes, offset: int | None, label: str) -> None:
        """After capture(): add the state with the first half of `data` written at `offset` (None:
        where the descriptor writes next), on top of the state just captured."""
        if len(data) < 2:
            return
        rel = self._rel(fd)
        last = self.states[-1]
        before = last.files.get(rel)
        if before is None:
            return
        if offset is None:
            append = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
            offset = len(before) if append else os.lseek(fd, 0, os.SEEK_CUR)
        half = data[:len(data) // 2]
        torn = before[:offset] + b"\0" * (offset - len(before)) + half + before[offset + len(half):]
        self.states.append(CrashState(label, {**last.files, rel: torn}, last.dirs, dict(self.progress),
                                      last.mtimes))

    def _rel(self, path, dir_fd: int | None = None) -> str:
        if isinstance(path, int):
            try:
                path = os.readlink(f"/proc/self/fd/{path}")
            except OSError:
                return f"fd {path}"
        p = os.fsdecode(os.fspath(path))
        if dir_fd is not None and not os.path.isabs(p):
            try:
                p = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
            except OSError:
                pass
        return os.path.relpath(os.path.abspath(p), self.root)

    def _install(self, mp: pytest.MonkeyPatch) -> None:
        c = self

        def two_paths(name: str, real):
            def wrapper(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
                with c._call(lambda: c._ours(src, src_dir_fd) or c._ours(dst, dst_dir_fd),
                             lambda: f"{name}({c._rel(src, src_dir_fd)} -> {c._rel(dst, dst_dir_fd)})"):
                    return real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            return wrapper

        def one_path(name: str, real):
            def wrapper(path, *args, dir_fd=None, **kw):
                with c._call(lambda: c._ours(path, dir_fd), lambda: f"{name}({c._rel(path, dir_fd)})"):
                    if dir_fd is not None:
                        kw["dir_fd"] = dir_fd
                    return real(path, *args, **kw)
            return wrapper

        def by_fd(name: str, real):
            def wrapper(fd, *args):
                with c._call(lambda: c._fd_ours(fd), lambda: f"{name}({c._rel(fd)})"):
                    return real(fd, *args)
            return wrapper

        def writing(name: str, real, data_of, offset_of):
            """A write: also the state a kill in its middle leaves (a write of several pages can
            stop short when a fatal signal comes): half of its bytes there."""
            def wrapper(fd, *args):
                with c._call(lambda: c._fd_ours(fd), lambda: f"{name}({c._rel(fd)})") as ours:
                    if ours:
                        c._torn(fd, data_of(args), offset_of(fd, args), f"{name}({c._rel(fd)}) half done")
                    return real(fd, *args)
            return wrapper

        real_os_open = os.open

        def os_open(path, flags, mode=0o777, *, dir_fd=None):
            if not flags & _MUTATING_FLAGS:
                return real_os_open(path, flags, mode, dir_fd=dir_fd)
            with c._call(lambda: c._ours(path, dir_fd), lambda: f"os.open({c._rel(path, dir_fd)}, create/truncate)"):
                return real_os_open(path, flags, mode, dir_fd=dir_fd)

        def py_open(file, mode="r", *args, **kw):
            if isinstance(file, int) or not any(ch in mode for ch in "wax+"):
                return _real_open(file, mode, *args, **kw)
            with c._call(lambda: c._ours(file), lambda: f"open({c._rel(file)}, {mode!r})"):
                f = _real_open(file, mode, *args, **kw)
            if "w" in mode:  # created or emptied, its content not written yet
                with c._call(lambda: c._ours(file), lambda: f"open({c._rel(file)}, {mode!r}) returned"):
                    pass
            return f

        for name in ("replace", "rename"):
            mp.setattr(os, name, two_paths(f"os.{name}", getattr(os, name)))
        for name in ("unlink", "remove", "rmdir", "mkdir", "truncate"):
            mp.setattr(os, name, one_path(f"os.{name}", getattr(os, name)))
        mp.setattr(os, "ftruncate", by_fd("os.ftruncate", os.ftruncate))
        mp.setattr(os, "write", writing("os.write", os.write, lambda a: bytes(a[0]), lambda fd, a: None))
        mp.setattr(os, "writev", writing("os.writev", os.writev, lambda a: b"".join(map(bytes, a[0])),
                                         lambda fd, a: None))
        mp.setattr(os, "pwrite", writing("os.pwrite", os.pwrite, lambda a: bytes(a[0]), lambda fd, a: a[1]))
        mp.setattr(os, "open", os_open)
        # fsync changes nothing a kill -9 leaves (the OS keeps written pages either way), and it
        # costs milliseconds each on a shared disk: the thousands of starts here skip it
        for name in ("fsync", "fdatasync"):
            mp.setattr(os, name, lambda fd: None)
        mp.setattr(os, "sync", lambda: None)
        mp.setattr(log_files, "_syncfs", None)
        mp.setattr(builtins, "open", py_open)
        mp.setattr(io, "open", py_open)  # pathlib's write_text / open


# ============================================================================ reading a log back
Stored = dict[int, tuple[bytes | None, bytes | None]]  # offset -> (key, value)


def stored(log) -> Stored:
    """Every record of the log from its start to its end, checking each batch's CRC and that
    offsets only grow (gaps only where compaction removed whole batches)."""
    out: Stored = {}
    offset, end = log.log_start_offset, log.log_end_offset
    for _ in range(100_000):  # bounded: each round moves past a batch
        if offset >= end:
            break
        data = bytes(log.read(offset, 1 << 20))
        assert data, f"nothing readable at {offset} below the log end {end}"
        for k, (pos, h) in enumerate(iter_batches(data)):
            last = h.base_offset + h.last_offset_delta
            assert crc_ok(data, pos, h), f"batch [{h.base_offset}, {last}]: CRC mismatch"
            # a read starts with the batch holding `offset`; each next one starts after the last
            assert last >= offset and (k == 0 or h.base_offset >= offset), (
                f"batch [{h.base_offset}, {last}] goes back (next offset {offset})")
            for r in decode_records(memoryview(data)[pos:pos + h.size]):
                out[r.offset] = (r.key, r.value)
            offset = last + 1
    assert offset == end, f"the batches end at {offset}, the log at {end}"
    return out


def assert_holds(got: Stored, want: Stored, where: str) -> None:
    """Every record of `want` is in `got`, at its offset, with its key and value."""
    missing = sorted(o for o in want if o not in got)
    assert not missing, f"{where}: acknowledged offsets lost: {missing[:10]}{'...' if len(missing) > 10 else ''}"
    wrong = [o for o in want if got[o] != want[o]]
    assert not wrong, f"{where}: offsets with another record: {wrong[:10]}"


# ============================================================================ log operations (Partition)
TOPIC_ID = uuid.UUID(int=31)
PID = 4000  # an idempotent producer writing some of the batches


class Producer:
    """Appends to a leader partition. `content` is what the log holds as far as the test knows
    (offset -> record, every append acknowledged), kept in the recorder's progress as "log"."""

    def __init__(self, p: Partition, progress: dict) -> None:
        self.p = p
        self.progress = progress
        self.content: Stored = {}
        self.appended = 0
        self.seq = 0  # the idempotent producer's next sequence; its last batch: progress["retry"]
        self.kept: Stored = {}   # after a clean: what it kept
        self.start_after = 0     # after retention: the log start offset it left

    def send(self, n: int, tag: str, *, keys: int | None = None, idempotent: bool = False,
             ts: int | None = None) -> None:
        for _ in range(n):
            key = None if keys is None else b"k%d" % (self.appended % keys)
            value = b"%s-%d-" % (tag.encode(), self.appended) + b"v" * 40
            self.appended += 1
            kw = dict(producer_id=PID, producer_epoch=0, base_sequence=self.seq) if idempotent else {}
            data = encode_batch([(key, value, [], ts)], **kw)
            result = self.p.append(data)
            assert result.error == 0, result.message
            if idempotent:
                self.seq += 1
                self.progress["retry"] = (data, result.base_offset)
            self.content[result.base_offset] = (key, value)
            self.progress["log"] = dict(self.content)

    def cut(self, offset: int) -> None:
        """The log was truncated at `offset`."""
        self.content = {o: r for o, r in self.content.items() if o < offset}
        self.progress["log"] = dict(self.content)
        if self.progress.get("retry", (b"", -1))[1] >= offset:
            del self.progress["retry"]


def leader(directory: Path, config: LogConfig, epoch: int = 1) -> Partition:
    """A replica opened as a start opens it (with no clean-stop marker: recovered), made this
    broker's leader at `epoch`."""
    p = Partition("t", 0, directory, dataclasses.replace(config), topic_id=TOPIC_ID)
    p.leader_id, p.leader_epoch = p.node_id, epoch
    p.assign_leader_epoch(epoch)
    return p


def check_epochs(p: Partition) -> None:
    """The leader-epoch cache agrees with the batches: each batch's epoch is the one the cache
    names for its offset (what OffsetForLeaderEpoch answers from)."""
    log = p.log
    for h in log.batch_headers(log.log_start_offset):
        if h.partition_leader_epoch >= 0 and h.base_offset >= log.log_start_offset:
            assert p.epochs.epoch_for_offset(h.base_offset) == h.partition_leader_epoch, (
                f"batch at {h.base_offset} of epoch {h.partition_leader_epoch}, the cache says "
                f"{p.epochs.epoch_for_offset(h.base_offset)}: {p.epochs}")


def end_of(content: Stored) -> int:
    return max(content) + 1 if content else 0


def keeps_all(p: Partition, got: Stored, state: CrashState, prod: Producer) -> None:
    """Appends (a roll, a new epoch, a close): every record acknowledged by then is there."""
    assert_holds(got, state.progress["log"], state.label)
    assert p.log_end_offset >= end_of(state.progress["log"]), state.label


def compaction_check(p: Partition, got: Stored, state: CrashState, prod: Producer) -> None:
    """Every record the clean keeps is there; any other record there is the one appended at its
    offset (a half-done clean may keep more, never lose, change or move one); the end stays."""
    assert_holds(got, prod.kept, state.label)
    assert set(got) <= set(prod.content), f"{state.label}: records that were never appended"
    assert_holds(got, {o: prod.content[o] for o in got}, state.label)
    assert p.log_end_offset == end_of(prod.content), state.label


def retention_check(p: Partition, got: Stored, state: CrashState, prod: Producer) -> None:
    """Retention: everything at or past the log start it leaves stays (records below may come
    back: the log start offset is not fsynced, as in Kafka); the end never goes back."""
    assert_holds(got, {o: r for o, r in prod.content.items() if o >= prod.start_after}, state.label)
    assert p.log_start_offset <= prod.start_after and p.log_end_offset == end_of(prod.content), state.label


def delete_records_check(p: Partition, got: Stored, state: CrashState, prod: Producer) -> None:
    """DeleteRecords (`floor`: the offset asked when the crash came): the same, at that offset."""
    floor = state.progress["floor"]
    assert_holds(got, {o: r for o, r in prod.content.items() if o >= floor}, state.label)
    assert p.log_start_offset <= floor and p.log_end_offset == end_of(prod.content), state.label


def truncation_check(p: Partition, got: Stored, state: CrashState, prod: Producer) -> None:
    """A follower's truncation (to `floor`, when the crash came): what is below stays; what is
    left is a prefix of the log as it was (only its tail may go: no hole a reader would skip)."""
    floor, content = state.progress["floor"], state.progress["log"]
    assert_holds(got, {o: r for o, r in content.items() if o < floor}, state.label)
    end = min(p.log_end_offset, end_of(content))  # past the content: an append under way when it came
    assert [o for o in sorted(got) if o < end] == [o for o in sorted(content) if o < end], (
        f"{state.label}: not a prefix of the log: offsets "
        f"{sorted(set(o for o in content if o < end) - set(got))[:10]} missing below its end {p.log_end_offset}")
    assert_holds(got, {o: content[o] for o in got if o in content}, state.label)


def _in_epochs(n: int) -> Callable[[Producer], None]:
    """`n` records written in three leader epochs: cutting the log's front or tail then rewrites a
    shorter leader-epoch checkpoint (overwritten in place: a crash can leave it torn)."""
    def setup(prod: Producer) -> None:
        for epoch, count in ((1, n // 4), (2, n // 4), (3, n - 2 * (n // 4))):
            prod.p.leader_epoch = epoch
            prod.p.assign_leader_epoch(epoch)
            prod.send(count, f"epoch{epoch}")
    return setup


def _roll(prod: Producer) -> None:
    prod.send(12, "rolling", idempotent=True)  # several rolls (segment.bytes 600)


def _fill_compacted(prod: Producer) -> None:
    prod.send(24, "before", keys=4)  # two records a segment
    p = prod.p
    p.log.update_config(dataclasses.replace(p.log.config, segment_bytes=1000))  # so the clean groups them by 3 or 4


def _clean(prod: Producer) -> None:
    p = prod.p
    cleaner = cleaning.LogCleaner(cleaning.CleanerSettings())
    # the copy in this process (the broker runs it in a process of its own: the same file calls)
    cleaner._write = lambda plan: write_cleaned(plan, None)  # type: ignore[method-assign]
    result = cleaner._clean_one(cleaning._candidate(p), force=True)
    assert not isinstance(result, str) and result.groups >= 2, result
    assert len(p.log.segment_base_offsets) < 6, p.log  # groups of several segments swapped in


def _retention(prod: Producer) -> None:
    p = prod.p
    before = p.log_start_offset
    p.log.update_config(dataclasses.replace(p.log.config, retention_bytes=1200))  # two segments or so stay
    p.housekeeping(SYSTEM.wall_ms())
    assert p.log_start_offset > before


def _expire_all(prod: Producer) -> None:
    p = prod.p
    p.log.update_config(dataclasses.replace(p.log.config, retention_ms=1000))  # the records are from 1970
    p.housekeeping(SYSTEM.wall_ms())
    assert p.log_start_offset == p.log_end_offset  # the active segment rolled first, then went


def _delete_records(prod: Producer) -> None:
    p = prod.p
    for offset in (7, 23, p.log_end_offset):  # inside a segment, at a later one, everything
        prod.progress["floor"] = offset
        p.delete_records_before(offset)
        assert p.log_start_offset == offset


def _truncate(prod: Producer) -> None:
    p = prod.p
    for offset in (30, 9):  # inside the active segment's predecessors, several segments back
        prod.progress["floor"] = offset
        p.truncate_to(offset)
        assert p.log_end_offset == offset
        prod.cut(offset)
    p.leader_epoch = 4  # and it goes on at a new epoch from there
    p.assign_leader_epoch(4)
    prod.send(3, "after")


def _new_epochs(prod: Producer) -> None:
    p = prod.p
    for epoch in (2, 3):
        p.leader_epoch = epoch
        p.assign_leader_epoch(epoch)
        prod.send(3, f"epoch{epoch}", idempotent=True)


def _close(prod: Producer) -> None:
    prod.p.close()  # durable: its high watermark, fsyncs, its own clean-shutdown marker, producer snapshot


@dataclass
class LogCase:
    config: LogConfig
    setup: Callable[[Producer], None]      # acknowledged before the operation
    operation: Callable[[Producer], None]  # recorded
    # what a start after a crash at `state` must find (given the log the operation left, in prod)
    check: Callable[[Partition, Stored, CrashState, Producer], None]
    # the start's own crash points are recorded and opened too when this says so of a state
    nested: Callable[[CrashState], bool] = lambda state: False


SEGMENTS = LogConfig(segment_bytes=600, index_interval_bytes=100)
LOG_CASES = {
    "segment roll": LogCase(SEGMENTS, lambda prod: prod.send(10, "before", idempotent=True), _roll, keeps_all),
    "compaction and its swap": LogCase(
        dataclasses.replace(SEGMENTS, segment_bytes=300, compact=True, delete=False), _fill_compacted, _clean,
        compaction_check, nested=lambda state: f"t-0/{0:020d}.log.swap" in state.files),  # the first group's
    "retention by size": LogCase(SEGMENTS, _in_epochs(40), _retention, retention_check),
    "retention of everything": LogCase(SEGMENTS, lambda prod: prod.send(30, "old", ts=1000), _expire_all,
                                       retention_check),
    "DeleteRecords": LogCase(SEGMENTS, _in_epochs(40), _delete_records, delete_records_check),
    "follower truncation": LogCase(SEGMENTS, _in_epochs(40), _truncate, truncation_check),
    "new leader epochs": LogCase(SEGMENTS, lambda prod: prod.send(8, "before", idempotent=True), _new_epochs,
                                 keeps_all),
    "clean close": LogCase(SEGMENTS, lambda prod: prod.send(20, "before", idempotent=True), _close, keeps_all),
}


def _check_restarted(case: LogCase, p: Partition, state: CrashState, prod: Producer) -> None:
    case.check(p, stored(p.log), state, prod)
    check_epochs(p)
    retry = state.progress.get("retry")
    if retry is not None and (case.check is not compaction_check or retry[1] in prod.kept):
        # the idempotent producer's retry of its last acknowledged batch is recognised, not appended again
        end = p.log_end_offset
        result = p.append(retry[0])
        assert (result.error, result.base_offset, p.log_end_offset) == (0, retry[1], end), (
            f"{state.label}: a retry of the last idempotent batch: {result}")
    end = p.log_end_offset  # and the log takes appends where it ended
    assert p.append(encode_batch([(b"k", b"after the crash")])).base_offset == end, state.label
    p.discard()


@pytest.mark.parametrize("name", list(LOG_CASES))
def test_a_kill_at_any_point_of_a_log_operation_loses_nothing_acknowledged(tmp_path, monkeypatch, name):
    case = LOG_CASES[name]
    crashes = Crashes(monkeypatch)
    live = tmp_path / "live"
    p = leader(live / "t-0", case.config)
    progress: dict = {}
    prod = Producer(p, progress)
    case.setup(prod)
    with crashes.recording(live, progress) as states:
        case.operation(prod)
    if not p.log._closed:
        prod.kept, prod.start_after = stored(p.log), p.log_start_offset
    p.discard()
    assert len(states) >= 3, [s.label for s in states]
    starts = 0
    # a crash at any point of the start's own repairs too: from every third state that needs them
    # (the repair's steps are alike from each), and from the last
    eligible = [i for i, state in enumerate(states) if case.nested(state)]
    nested = set(eligible[::3] + eligible[-1:])
    for i, state in enumerate(states):
        snap = crashes.materialize(state, tmp_path / f"crash-{i}")
        if i in nested:
            with crashes.recording(snap) as again:
                restarted = leader(snap / "t-0", case.config, epoch=9)
            _check_restarted(case, restarted, state, prod)
            for j, inner in enumerate(again):
                inner.progress, inner.label = state.progress, f"{state.label}, then at the start {inner.label}"
                snap2 = crashes.materialize(inner, tmp_path / f"crash-{i}-{j}")
                _check_restarted(case, leader(snap2 / "t-0", case.config, epoch=9), inner, prod)
                starts += 1
        else:
            _check_restarted(case, leader(snap / "t-0", case.config, epoch=9), state, prod)
        starts += 1
    print(f"{name}: {len(states)} crash points, {starts} starts")
    if os.environ.get("CRASH_POINTS_LIST"):
        print("\n".join(s.label for s in states))


# ============================================================================ broker operations
def broker_at(node: Path, **kw) -> Broker:
    """The standalone broker of `node`: its data dir and two log dirs (as `kshim serve --log-dirs`)."""
    return open_standalone(BrokerConfig(data_dir=node / "data", log_dirs=[node / "a", node / "b"], **kw))


@contextmanager
def inline_threads(monkeypatch: pytest.MonkeyPatch, before: Callable[[Callable], None] = lambda fn: None):
    """Work the broker hands to worker threads runs inline, `before(fn)` first: a move's rounds and
    the appends between them come in one fixed order (the same calls as with threads)."""
    async def run_sync(fn, *args, **kw):
        before(fn)
        return fn(*args)
    with monkeypatch.context() as m:
        m.setattr(anyio.to_thread, "run_sync", run_sync)
        yield


class Appender:
    """Appends single records to broker partitions and notes each acknowledged one in `progress`
    (progress[(topic, index)]: offset -> record)."""

    def __init__(self, broker: Broker, progress: dict) -> None:
        self.broker = broker
        self.progress = progress
        self.n = 0

    def send(self, topic: str, index: int = 0, count: int = 1, tag: str = "", idempotent_pid: int = -1) -> None:
        for _ in range(count):
            value = b"%s-%s-%d-" % (topic.encode(), tag.encode(), self.n) + b"x" * 60
            self.n += 1
            p = self.broker.partition(topic, index)
            kw = {}
            if idempotent_pid >= 0:
                seq = self.progress.setdefault(("seq", idempotent_pid), 0)
                kw = dict(producer_id=idempotent_pid, producer_epoch=0, base_sequence=seq)
                self.progress[("seq", idempotent_pid)] = seq + 1
            data = encode_batch([(None, value)], **kw)
            result = p.append(data)
            assert result.error == 0, result.message
            acked = dict(self.progress.get((topic, index), {}))
            acked[result.base_offset] = (None, value)
            self.progress[(topic, index)] = acked
            if idempotent_pid >= 0:
                self.progress[("retry", topic, index)] = (data, result.base_offset)


async def restarted(snap: Path, background: bool) -> Broker:
    """A broker started on a crashed node; with `background`, as `kshim serve` does: the logs a
    crash left unclean are recovered after the start (recover_deferred), here until all are."""
    broker = broker_at(snap, recover_in_background=background)
    if background:
        rm = broker.replica_manager
        async with anyio.create_task_group() as tg:
            tg.start_soon(broker.recover_deferred)
            with anyio.fail_after(20):
                while rm.recovering:
                    await rm.wait_recovered(list(rm.recovering))
            tg.cancel_scope.cancel()
    return broker


def check_broker(broker: Broker, state: CrashState, where: str, topics: list[tuple[str, int]]) -> None:
    """Every record acknowledged by then (state.progress) is in the restarted broker's replica,
    readable at its offset; its log end is not behind; the high watermark covers them; a retried
    idempotent batch is recognised."""
    for key in topics:
        acked = state.progress.get(key, {})
        p = broker.partition(*key)
        assert p is not None, f"{where}: {key} is not hosted after the start"
        got = stored(p.log)
        assert_holds(got, acked, where)
        assert p.log_end_offset >= end_of(acked) and p.high_watermark >= end_of(acked), where
        retry = state.progress.get(("retry", *key))
        if retry is not None:
            end = p.log_end_offset
            result = p.append(retry[0])
            assert (result.error, result.base_offset, p.log_end_offset) == (0, retry[1], end), (
                f"{where}: a retry of the last idempotent batch: {result}")


async def verify_states(crashes: Crashes, states: list[CrashState], tmp_path: Path, name: str,
                        check: Callable[[Broker, CrashState, str], None],
                        nested: Callable[[CrashState], bool] = lambda s: False) -> int:
    """Start a broker on every crash point, alternately as a library broker (every log recovered
    before the first image) and as `kshim serve` starts (recovery in the background), and check
    it; where `nested` says so, record that start's own crash points and check those too.
    Returns how many starts."""
    starts = 0
    for i, state in enumerate(states):
        snap = crashes.materialize(state, tmp_path / f"{name}-{i}")
        where = f"{name}: a crash before {state.label}"
        if nested(state):
            with crashes.recording(snap) as again:
                broker = await restarted(snap, background=False)
            try:
                check(broker, state, where)
            finally:
                broker.close()
            for j, inner in enumerate(again):
                snap2 = crashes.materialize(inner, tmp_path / f"{name}-{i}-{j}")
                inner.progress = state.progress
                broker = await restarted(snap2, background=bool(j % 2))
                try:
                    check(broker, inner, f"{where}, then at the start before {inner.label}")
                finally:
                    broker.close()
                starts += 1
        else:
            broker = await restarted(snap, background=bool(i % 2))
            try:
                check(broker, state, where)
            finally:
                broker.close()
        starts += 1
    print(f"{name}: {len(states)} crash points, {starts} starts")
    if os.environ.get("CRASH_POINTS_LIST"):
        print("\n".join(s.label for s in states))
    return starts


def _other_dir(broker: Broker, node: Path, topic: str = "t") -> Path:
    return node / ("b" if broker.partition(topic, 0).directory.parent.name == "a" else "a")


async def _move(broker: Broker, appender: Appender, dest: Path, monkeypatch, appends: bool = True) -> None:
    """Move t-0 to `dest`, appending before each of the copy's first two rounds and during them
    (after each segment file copied), as the event loop appends while the worker thread copies."""
    rm = broker.replica_manager
    real_copy = log_dirs._copy
    rounds = 0 if appends else 3

    def copy_and_append(src, dst, start, fsync):
        out = real_copy(src, dst, start, fsync)
        if rounds <= 2 and src.name.endswith(".log") and not broker.partition("t", 0).log._closed:
            appender.send("t", tag="during")
        return out

    def before(fn):
        nonlocal rounds
        if isinstance(getattr(fn, "__self__", None), log_dirs.DirCopier):
            rounds += 1
            if rounds <= 2:
                appender.send("t", count=2, tag="between", idempotent_pid=PID)

    monkeypatch.setattr(log_dirs, "_copy", copy_and_append)
    with inline_threads(monkeypatch, before):
        async with anyio.create_task_group() as tg:
            tg.start_soon(rm.run_moves)
            assert rm.alter_log_dir("t", 0, dest) == 0
            with anyio.fail_after(20):
                while ("t", 0) in rm.moves:
                    await anyio.sleep(0)
            tg.cancel_scope.cancel()
    monkeypatch.setattr(log_dirs, "_copy", real_copy)
    assert broker.partition("t", 0).directory == dest / "t-0"
    assert 3 <= rounds <= 5 or not appends, rounds


def _move_check(broker: Broker, state: CrashState, where: str) -> None:
    check_broker(broker, state, where, [("t", 0)])
    p = broker.partition("t", 0)
    names = [d.name for log_dir in ("a", "b") for d in (p.directory.parent.parent / log_dir).iterdir()
             if d.is_dir() and d.name.startswith("t-0")]
    assert names.count("t-0") == 1, f"{where}: {names}"


@pytest.mark.anyio
async def test_a_kill_at_any_point_of_a_replica_move_loses_nothing_acknowledged(tmp_path, monkeypatch):
    """AlterReplicaLogDirs: the copy's rounds (appends going on between and during them), the
    last round with the source closed, the move-complete marker, the renames, the reopen; and
    the start that finishes a complete move (its own crash points too)."""
    monkeypatch.setattr(moves_module, "MOVE_FINAL_BYTES", 300)  # a few rounds before the last
    crashes = Crashes(monkeypatch)
    node = tmp_path / "live"
    broker = broker_at(node)
    progress: dict = {}
    appender = Appender(broker, progress)
    try:
        await broker.create_topic("t", 1, {"segment.bytes": "700"})
        appender.send("t", count=12, tag="before", idempotent_pid=PID)
        dest = _other_dir(broker, node)
        with crashes.recording(node, progress) as states:
            await _move(broker, appender, dest, monkeypatch)
            appender.send("t", count=2, tag="after", idempotent_pid=PID)
    finally:
        broker.close()
    assert any(MOVE_COMPLETE in s.label for s in states)
    await verify_states(crashes, states, tmp_path, "move", _move_check,
                        nested=lambda s: any(n.endswith(f"-future/{MOVE_COMPLETE}") for n in s.files))


@pytest.mark.anyio
async def test_a_move_of_a_replica_whose_last_move_was_killed_before_its_marker_went(tmp_path, monkeypatch):
    """A kill between a move's rename of the copy into place and the removal of its move-complete
    marker leaves the marker in the replica's directory (the start finishes nothing: there is no
    future directory). The replica's next move must not carry that marker into its new copy: a
    kill during that copy would make the start take the half-made copy for a complete one and
    delete the source."""
    monkeypatch.setattr(moves_module, "MOVE_FINAL_BYTES", 300)
    crashes = Crashes(monkeypatch)
    node = tmp_path / "live"
    broker = broker_at(node)
    progress: dict = {}
    appender = Appender(broker, progress)
    try:
        await broker.create_topic("t", 1, {"segment.bytes": "700"})
        appender.send("t", count=12, tag="before", idempotent_pid=PID)
        dest = _other_dir(broker, node)
        with crashes.recording(node, progress) as states:
            await _move(broker, appender, dest, monkeypatch, appends=False)
    finally:
        broker.close()
    (killed,) = [s for s in states if s.label == f"os.unlink({dest.name}/t-0/{MOVE_COMPLETE})"]
    node = crashes.materialize(killed, tmp_path / "killed")
    broker = await restarted(node, background=False)
    appender = Appender(broker, progress)
    try:
        _move_check(broker, killed, "the start after the kill")
        assert (dest / "t-0" / MOVE_COMPLETE).name in os.listdir(node / dest.name / "t-0")  # left behind
        with crashes.recording(node, progress) as states:
            await _move(broker, appender, node / _other_dir(broker, node).name, monkeypatch)
    finally:
        broker.close()
    await verify_states(crashes, states, tmp_path, "second move", _move_check)


@pytest.mark.anyio
async def test_a_kill_at_any_point_of_a_topic_deletion_loses_nothing_acknowledged(tmp_path, monkeypatch):
    """A topic deleted (its directory renamed, then deleted file.delete.delay.ms later: 0 here, so
    the deletion's own steps are crash points too) and created again under its name: the other
    topic keeps every record; the deleted one keeps all of its records while the metadata still
    has it, and the new one under its name never shows one of them."""
    crashes = Crashes(monkeypatch)
    node = tmp_path / "live"
    broker = broker_at(node, topic_defaults={"log.segment.delete.delay.ms": "0"})
    progress: dict = {}
    appender = Appender(broker, progress)
    try:
        for topic in ("keep", "gone"):
            await broker.create_topic(topic, 1, {"segment.bytes": "700"})
            appender.send(topic, count=8, tag="old")
        old_id = broker.topics["gone"].topic_id
        progress["old gone"] = progress.pop(("gone", 0))
        with crashes.recording(node, progress) as states:
            await broker.delete_topic("gone")
            assert broker.replica_manager.deleter.wait_idle(10)
            await broker.create_topic("gone", 1, {"segment.bytes": "700"})
            appender.send("gone", count=3, tag="new")
            appender.send("keep", count=2, tag="new")
    finally:
        broker.close()
    assert any(s.label.startswith("os.rmdir") for s in states)  # the files went while recorded

    def check(restarted: Broker, state: CrashState, where: str) -> None:
        check_broker(restarted, state, where, [("keep", 0)])
        topic = restarted.topics.get("gone")
        if topic is None:
            return
        got = stored(restarted.partition("gone", 0).log)
        if topic.topic_id == old_id:  # the deletion had not been decided yet
            assert_holds(got, state.progress["old gone"], where)
        else:
            assert_holds(got, state.progress.get(("gone", 0), {}), where)
            assert all(value.startswith(b"gone-new") for _, value in got.values()), f"{where}: {got}"

    await verify_states(crashes, states, tmp_path, "deletion", check)


@pytest.mark.anyio
async def test_a_kill_at_any_point_of_a_clean_stop_or_of_the_start_after_it(tmp_path, monkeypatch):
    """A high-watermark checkpoint (replication-offset-checkpoint), more appends, a clean stop
    (each log closed, producer-state snapshots, the checkpoint, the log dirs' clean-shutdown
    markers with their summaries); then the start after it (the markers taken, dormant
    partitions woken by appends): a kill anywhere loses no acknowledged record, and an
    idempotent producer's retry is still recognised."""
    crashes = Crashes(monkeypatch)
    node = tmp_path / "live"
    broker = broker_at(node)
    progress: dict = {}
    appender = Appender(broker, progress)
    keys = [("t", 0), ("t", 1), ("c", 0)]
    try:
        await broker.create_topic("t", 2, {"segment.bytes": "700"})
        await broker.create_topic("c", 1, {"segment.bytes": "700", "cleanup.policy": "compact"})
        for topic, index in keys:
            appender.send(topic, index, count=6, tag="before", idempotent_pid=PID + index if topic == "t" else -1)
        with crashes.recording(node, progress) as states:
            assert await broker.replica_manager.checkpoint_high_watermarks() == 3
            appender.send("t", 0, count=2, tag="then", idempotent_pid=PID)
            broker.close()
    finally:
        broker.close()
    assert [s for s in states if "clean-shutdown" in s.label and s.label.startswith("os.replace")]

    def check(restarted: Broker, state: CrashState, where: str) -> None:
        check_broker(restarted, state, where, keys)

    await verify_states(crashes, states, tmp_path, "clean stop", check)

    # the start after the clean stop, and the first appends, which wake its dormant partitions
    node = crashes.materialize(states[-1], tmp_path / "stopped")
    with crashes.recording(node, progress) as states:
        broker = broker_at(node)
        try:
            assert broker.partition("t", 1).dormant is not None
            appender = Appender(broker, progress)
            for topic, index in keys:
                appender.send(topic, index, count=2, tag="after", idempotent_pid=PID + index if topic == "t" else -1)
        finally:
            broker.close()
    await verify_states(crashes, states, tmp_path, "start after a clean stop", check)


# ============================================================================ found on the way
@pytest.mark.anyio
async def test_a_truncation_while_a_move_flushes_its_source_is_not_missed(tmp_path, monkeypatch):
    """Not a crash: a move's rounds notice a truncation (a truncated segment keeps its inode, so
    its tail alone would be copied), but the event loop also runs while the source is flushed
    before the last round; a follower's truncation and appends then must not leave the copy with
    the truncated bytes under the new ones."""
    monkeypatch.setattr(moves_module, "MOVE_FINAL_BYTES", 1 << 20)  # one round, then the last
    node = tmp_path / "live"
    broker = broker_at(node)
    try:
        await broker.create_topic("t", 1, {"segment.bytes": "100000"})
        p = broker.partition("t", 0)
        for i in range(10):
            assert p.append(encode_batch([(None, b"old-%d" % i)])).error == 0
        dest = _other_dir(broker, node)

        def before(fn):
            if fn == p.log.flush:  # meanwhile, on the event loop: a new leader's divergence
                p.truncate_to(5)
                for i in range(10):
                    assert p.append(encode_batch([(None, b"new-%d-" % i + b"x" * 20)])).error == 0

        rm = broker.replica_manager
        with inline_threads(monkeypatch, before):
            async with anyio.create_task_group() as tg:
                tg.start_soon(rm.run_moves)
                assert rm.alter_log_dir("t", 0, dest) == 0
                with anyio.fail_after(20):
                    while ("t", 0) in rm.moves:
                        await anyio.sleep(0)
                tg.cancel_scope.cancel()
        moved = broker.partition("t", 0)
        assert moved.directory == dest / "t-0"
        values = [value for _, (_, value) in sorted(stored(moved.log).items())]
        assert values == [b"old-%d" % i for i in range(5)] + [b"new-%d-" % i + b"x" * 20 for i in range(10)]
    finally:
        broker.close()
