"""`kshim serve --brokers N`: the controller process, which also supervises the broker processes.

It runs the Controller (metadata in <data-dir>/controller/metadata.sqlite), its session checks,
and the control-plane RPC server on <data-dir>/controller.sock; it spawns broker i as
`python -m kshim broker` on port P+i with data in <data-dir>/broker-i (output appended to
<data-dir>/broker-i/broker.log), prints one `kshim ready` line once every broker has registered,
and on SIGTERM or SIGINT stops the brokers it started, then itself.

It restarts nothing on its own: a broker that dies stays down until `kshim ctl start`. Signals
(`ctl kill/pause/resume`) go only to the processes it started, by their Popen handles, which are
never reaped behind its back, so a PID can never be reused under it.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from kshim.clock import SYSTEM
from kshim.cluster.image import MetadataImage
from kshim.configs.connection_options import ConnectionSettings, connection_argv
from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.store import MetadataStore
from kshim.errors import BrokerError
from kshim.log.dirlock import DataDirInUse, lock_data_dir
from kshim.signal import Signal
from wire.errors import ErrorCode

log = logging.getLogger("kshim.cluster")

READY_TIMEOUT_S = 20.0  # every broker must register within this at start-up (and after `ctl start`)
STOP_TIMEOUT_S = 10.0  # after SIGTERM, brokers get this long before SIGKILL
REAP_INTERVAL_S = 0.1
LOG_TAIL_LINES = 20
MAX_HEARTBEAT_WAIT_FRACTION = 3  # a long-poll never waits more than a third of the session timeout


def socket_path(data_dir: Path) -> Path:
    return data_dir / "controller.sock"


@dataclass
class ClusterSettings:
    brokers: int
    port: int
    data_dir: Path
    host: str = "127.0.0.1"
    partitions: int = 1
    replication_factor: int | None = None  # min(3, brokers)
    session_timeout_ms: int = 9000
    min_insync_replicas: int = 1
    uncommitted_read_limit: str = "log-end"
    replica_lag_time_max_ms: int | None = None  # the brokers' default
    max_request_bytes: int = 100 * 1024 * 1024
    auto_create_topics: bool = True
    log_level: str = "info"
    connection: ConnectionSettings | None = None  # the brokers' connection budgets
    max_partitions_per_broker: int = 10_000

    @property
    def rf(self) -> int:
        return self.replication_factor if self.replication_factor is not None else min(3, self.brokers)

    @property
    def topic_defaults(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_insync_replicas),
                "kshim.uncommitted.read.limit": self.uncommitted_read_limit}

    def broker_command(self, node_id: int) -> list[str]:
        cmd = [sys.executable, "-m", "kshim", "broker", "--node-id", str(node_id), "--host", self.host,
               "--port", str(self.port + node_id), "--data-dir", str(self.broker_dir(node_id)),
               "--controller-socket", str(socket_path(self.data_dir)),
               "--partitions", str(self.partitions), "--replication-factor", str(self.rf),
               "--max-request-bytes", str(self.max_request_bytes),
               "--min-insync-replicas", str(self.min_insync_replicas),
               "--uncommitted-read-limit", self.uncommitted_read_limit, "--log-level", self.log_level]
        if not self.auto_create_topics:
            cmd.append("--no-auto-create-topics")
        if self.replica_lag_time_max_ms is not None:
            cmd += ["--replica-lag-time-max-ms", str(self.replica_lag_time_max_ms)]
        return cmd + connection_argv(self.connection)

    def broker_dir(self, node_id: int) -> Path:
        return self.data_dir / f"broker-{node_id}"


class StartupFailed(Exception):
    pass


# ------------------------------------------------------------------------------------------ processes
@dataclass
class BrokerProcess:
    node_id: int
    log_path: Path
    proc: subprocess.Popen | None = None
    paused: bool = False
    exit_logged: bool = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def started(self) -> subprocess.Popen:
        """The process, for a broker that was spawned (every caller checked it was)."""
        if self.proc is None:
            raise RuntimeError(f"broker {self.node_id} was never started")
        return self.proc

    @property
    def state(self) -> str:
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        if code is not None:
            return f"exited ({code})" if code >= 0 else f"killed ({signal.Signals(-code).name})"
        return "paused" if self.paused else "running"


class Supervisor:
    """The broker processes this controller started, one per node id."""

    def __init__(self, settings: ClusterSettings) -> None:
        self.settings = settings
        self.brokers = {i: BrokerProcess(i, settings.broker_dir(i) / "broker.log") for i in range(settings.brokers)}

    def get(self, node_id: int) -> BrokerProcess:
        broker = self.brokers.get(node_id)
        if broker is None:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE,
                              f"no broker {node_id}: this cluster has nodes 0-{self.settings.brokers - 1}")
        return broker

    def spawn(self, node_id: int) -> BrokerProcess:
        broker = self.get(node_id)
        if broker.running:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"broker {node_id} is already running (pid {broker.started.pid})")
        broker.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.settings.broker_command(node_id)
        with open(broker.log_path, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting broker {node_id}: "
                      f"{' '.join(cmd)}\n".encode())
            out.flush()
            # a session of its own: a terminal's Ctrl-C reaches this process only, which then
            # stops the brokers in order
            broker.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True)
        broker.paused = False
        broker.exit_logged = False
        log.info("started broker %d (pid %d, port %d)", node_id, broker.started.pid, self.settings.port + node_id)
        return broker

    def reap(self) -> None:
        """Collect exited brokers (no zombies) and log each exit once."""
        for broker in self.brokers.values():
            if broker.proc is not None and broker.started.poll() is not None and not broker.exit_logged:
                broker.exit_logged = True
                broker.paused = False
                log.warning("broker %d (pid %d) %s", broker.node_id, broker.started.pid, broker.state)

    async def reap_loop(self) -> None:
        while True:
            self.reap()
            await anyio.sleep(REAP_INTERVAL_S)

    def _signal(self, broker: BrokerProcess, signum: signal.Signals) -> None:
        assert broker.proc is not None
        if broker.started.poll() is None:  # not reaped, so the PID is still ours
            broker.started.send_signal(signum)

    def _require_running(self, node_id: int) -> BrokerProcess:
        broker = self.get(node_id)
        if not broker.running:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"broker {node_id} is not running: {broker.state}")
        return broker

    async def kill(self, node_id: int) -> str:
        broker = self._require_running(node_id)
        self._signal(broker, signal.SIGKILL)
        with anyio.move_on_after(5):
            while broker.started.poll() is None:
                await anyio.sleep(0.01)
        self.reap()
        return f"killed broker {node_id} (pid {broker.started.pid})"

    def pause(self, node_id: int) -> str:
        broker = self._require_running(node_id)
        if broker.paused:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"broker {node_id} is already paused")
        self._signal(broker, signal.SIGSTOP)
        broker.paused = True
        return f"paused broker {node_id} (pid {broker.started.pid})"

    def resume(self, node_id: int) -> str:
        broker = self._require_running(node_id)
        if not broker.paused:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"broker {node_id} is not paused")
        self._signal(broker, signal.SIGCONT)
        broker.paused = False
        return f"resumed broker {node_id} (pid {broker.started.pid})"

    async def stop_all(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every running broker (waking paused ones), wait, then SIGKILL what remains."""
        running = [b for b in self.brokers.values() if b.running]
        for broker in running:
            self._signal(broker, signal.SIGTERM)
            if broker.paused:
                self._signal(broker, signal.SIGCONT)
                broker.paused = False
        deadline = SYSTEM.monotonic() + timeout_s
        while any(b.started.poll() is None for b in running) and SYSTEM.monotonic() < deadline:
            await anyio.sleep(0.02)
        for broker in running:
            if broker.started.poll() is None:
                log.warning("broker %d (pid %d) did not stop within %.0fs: killing it",
                            broker.node_id, broker.started.pid, timeout_s)
                self._signal(broker, signal.SIGKILL)
                broker.started.wait()
        for broker in running:
            broker.exit_logged = True  # an exit asked for: logged here, not by reap()
            code = broker.started.returncode
            (log.info if code == 0 else log.warning)("broker %d (pid %d) stopped with exit code %d",
                                                     broker.node_id, broker.started.pid, code)

    def log_tail(self, node_id: int, lines: int = LOG_TAIL_LINES) -> str:
        path = self.brokers[node_id].log_path
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError as e:
            return f"(cannot read {path}: {e})"
        return "\n".join(f"    {line}" for line in text)


# ------------------------------------------------------------------------------------------ RPC handling
@dataclass
class ControllerService:
    """Serves the control-plane operations of the controller process (messages.Server.PROCESS):
    broker sessions, status and node commands. Process commands (kill, start, pause, resume)
    need a Supervisor; without one (tests) they are refused."""

    controller: Controller
    supervisor: Supervisor | None = None
    registered: dict[int, int] = field(default_factory=dict)  # node -> pid of its latest registration
    offsets: dict[int, dict[tuple[str, int], tuple[int, int]]] = field(default_factory=dict)  # latest heartbeats
    _registrations: Signal = field(default_factory=Signal)

    async def handle(self, request: m.Operation) -> m.Reply:
        """The RPC handler: the Controller or this service serves it, as its schema says."""
        result = await m.invoke({m.Server.CONTROLLER: self.controller, m.Server.PROCESS: self}, request)
        return m.Reply(self.controller.version, result)

    def register(self, node_id: int, host: str, port: int, pid: int) -> m.Registration:
        epoch = self.controller.register_broker(node_id, host, port, pid)
        self.registered[node_id] = pid
        self._registrations.fire()
        return m.Registration(epoch, self.controller.image)

    async def heartbeat(self, node_id: int, broker_epoch: int, known_image_version: int, wait_ms: int,
                        offsets: tuple[m.ReplicaOffsets, ...]) -> MetadataImage | None:
        c = self.controller
        c.heartbeat(node_id, broker_epoch)  # STALE_BROKER_EPOCH: register again
        self.offsets[node_id] = {(o.topic, o.partition): (o.log_end_offset, o.high_watermark) for o in offsets}
        c.report_log_ends(node_id, {key: ends[0] for key, ends in self.offsets[node_id].items()})
        if c.version > known_image_version:
            return c.image
        wait_ms = max(0, min(wait_ms, c.config.session_timeout_ms // MAX_HEARTBEAT_WAIT_FRACTION))
        return await c.wait_for_change(known_image_version, wait_ms / 1000)

    def status(self) -> str:
        return json.dumps(self.status_report())

    async def node_command(self, action: m.NodeAction, node_id: int) -> str:
        c = self.controller
        if action in (m.NodeAction.ISOLATE, m.NodeAction.HEAL):
            if node_id not in c.image.brokers:
                raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker {node_id} has ever registered")
            isolated = action is m.NodeAction.ISOLATE
            c.set_isolated(node_id, isolated)
            return f"{'isolated' if isolated else 'healed'} broker {node_id}"
        sup = self.supervisor
        if sup is None:
            raise BrokerError(ErrorCode.INVALID_REQUEST, "this controller does not run broker processes")
        if action is m.NodeAction.KILL:
            return await sup.kill(node_id)
        if action is m.NodeAction.PAUSE:
            return sup.pause(node_id)
        if action is m.NodeAction.RESUME:
            return sup.resume(node_id)
        broker = sup.spawn(node_id)  # START: it answers once the new process registered
        try:
            await self.wait_registered(node_id, READY_TIMEOUT_S)
        except StartupFailed as e:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE, str(e)) from None
        return f"started broker {node_id} (pid {broker.started.pid})"

    async def wait_registered(self, node_id: int, timeout_s: float) -> None:
        """Until the process the supervisor started for node_id has registered; StartupFailed if it
        exits or the deadline passes first."""
        assert self.supervisor is not None
        broker = self.supervisor.brokers[node_id]
        deadline = SYSTEM.monotonic() + timeout_s
        while self.registered.get(node_id) != broker.started.pid:
            if broker.started.poll() is not None:
                raise StartupFailed(f"broker {node_id} {broker.state} before registering; "
                                    f"tail of {broker.log_path}:\n{self.supervisor.log_tail(node_id)}")
            if SYSTEM.monotonic() >= deadline:
                raise StartupFailed(f"broker {node_id} did not register within {timeout_s:.0f}s; "
                                    f"tail of {broker.log_path}:\n{self.supervisor.log_tail(node_id)}")
            with anyio.move_on_after(REAP_INTERVAL_S):
                await self._registrations.wait()

    def status_report(self) -> dict[str, Any]:
        image: MetadataImage = self.controller.image
        processes = self.supervisor.brokers if self.supervisor else {}
        brokers = []
        for node_id in sorted(set(image.brokers) | set(processes)):
            info = image.brokers.get(node_id)
            process = processes.get(node_id)
            pid = process.proc.pid if process and process.proc else info.pid if info else 0
            brokers.append({
                "id": node_id,
                # a node without an image entry is one the supervisor knows: it has settings
                "host": info.host if info else self.supervisor.settings.host if self.supervisor else "",
                "port": info.port if info else self.supervisor.settings.port + node_id if self.supervisor else -1,
                "pid": pid,
                "alive": bool(info and info.alive),  # the controller's view: registered and not fenced
                "isolated": bool(info and info.isolated),
                "epoch": info.epoch if info else 0,
                "process": process.state if process else "external",
            })
        partitions = []
        for topic in sorted(image.topics.values(), key=lambda t: t.name):
            for p in topic.partitions:
                replica_offsets = {}
                for r in p.replicas:
                    reported = self.offsets.get(r, {}).get((topic.name, p.index))
                    if reported is not None:
                        replica_offsets[str(r)] = {"log_end_offset": reported[0], "high_watermark": reported[1]}
                partitions.append({
                    "topic": topic.name, "partition": p.index, "leader": p.leader, "leader_epoch": p.leader_epoch,
                    "partition_epoch": p.partition_epoch, "replicas": list(p.replicas), "isr": list(p.isr),
                    "replica_offsets": replica_offsets,
                })
        return {
            "cluster_id": image.cluster_id,
            "controller": {"pid": os.getpid(), "image_version": image.version,
                           "session_timeout_ms": self.controller.config.session_timeout_ms},
            "brokers": brokers,
            "partitions": partitions,
        }


# ------------------------------------------------------------------------------------------ the process
async def _controller_running(path: Path) -> bool:
    try:
        with anyio.fail_after(2):
            await rpc.call_once(path, m.Status(), timeout_s=2)
        return True
    except (OSError, rpc.RpcConnectionError, TimeoutError, BrokerError):
        return False


def _check_ports(settings: ClusterSettings) -> None:
    from kshim.net.server import open_listener

    for node_id in range(settings.brokers):
        port = settings.port + node_id
        try:
            open_listener(settings.host, port).close()
        except OSError as e:
            raise StartupFailed(f"cannot serve broker {node_id} on {settings.host}:{port}: {e}") from None


async def run_cluster(settings: ClusterSettings) -> int:
    """The controller process: returns the exit code."""
    data_dir = settings.data_dir
    sock = socket_path(data_dir)
    try:
        # before anything else in the directory: a second serve on it must not touch it
        lock_data_dir(data_dir, f"kshim serve --brokers {settings.brokers} on {settings.host}:{settings.port}")
        rpc.check_socket_path(sock)
        if await _controller_running(sock):
            raise StartupFailed(f"a kshim cluster is already running with data in {data_dir} "
                                f"(its controller answers on {sock})")
        _check_ports(settings)
    except (StartupFailed, DataDirInUse, OSError) as e:
        print(f"kshim: {e}", file=sys.stderr)
        return 1
    (data_dir / "controller").mkdir(exist_ok=True)
    store = MetadataStore(data_dir / "controller" / "metadata.sqlite")
    controller = Controller(store, ControllerConfig(
        node_id=0, session_timeout_ms=settings.session_timeout_ms, default_partitions=settings.partitions,
        default_replication_factor=settings.rf, topic_defaults=settings.topic_defaults,
        max_partitions_per_broker=settings.max_partitions_per_broker))
    supervisor = Supervisor(settings)
    service = ControllerService(controller, supervisor)
    code = 0
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:
                async def on_signal() -> None:
                    async for signum in signals:
                        log.info("received %s: stopping the brokers", signal.Signals(signum).name)
                        await supervisor.stop_all()
                        tg.cancel_scope.cancel()
                        return

                tg.start_soon(on_signal)
                await tg.start(rpc.RpcServer(service.handle).serve, sock)
                tg.start_soon(controller.run_session_checks)
                tg.start_soon(supervisor.reap_loop)
                for node_id in range(settings.brokers):
                    supervisor.spawn(node_id)
                try:
                    with anyio.fail_after(READY_TIMEOUT_S + 5):
                        for node_id in range(settings.brokers):
                            await service.wait_registered(node_id, READY_TIMEOUT_S)
                except (StartupFailed, TimeoutError) as e:
                    print(f"kshim: the cluster did not start: {e}", file=sys.stderr, flush=True)
                    code = 1
                    await supervisor.stop_all()
                    tg.cancel_scope.cancel()
                    return code
                bootstrap = ",".join(f"{settings.host}:{settings.port + i}" for i in range(settings.brokers))
                print(f"kshim ready: bootstrap {bootstrap} ({settings.brokers} brokers, data in {data_dir})",
                      flush=True)
    finally:
        with anyio.CancelScope(shield=True):
            await supervisor.stop_all()
        controller.close()
    log.info("stopped cleanly")
    return code
