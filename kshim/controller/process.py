"""`kshim serve --brokers N`: the supervisor of the cluster's processes.

It spawns the controller as `python -m kshim controller` (kshim.controller.service: metadata in
<data-dir>/controller/metadata.sqlite, the control-plane RPC on <data-dir>/controller.sock, output
appended to <data-dir>/controller/controller.log) and broker i as `python -m kshim broker` on port
P+i with data in <data-dir>/broker-i (output appended to <data-dir>/broker-i/broker.log). It prints
one `kshim ready` line once every broker has registered with the controller, and on SIGTERM or
SIGINT stops the brokers, then the controller, then itself.

The controller is restarted as soon as it dies (after a back-off only when it keeps dying right
after its start); its state is on disk and the brokers reconnect to it. A broker is restarted by
nothing but `kshim ctl start`. `kshim ctl` talks to this process on <data-dir>/supervisor.sock:
status (its processes merged with the controller's view) and the process commands. It also
serves the web console (kshim.console) on --console-port. Signals go only
to the processes it started, by their Popen handles, which are never reaped behind its back, so a
PID can never be reused under it. Every child dies with it, even when it is killed with SIGKILL
(kshim.cluster.lifeline), so a new `serve` on the same data dir and ports can start.
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
from typing import Any, TypeVar

import anyio

from kshim.clock import SYSTEM
from kshim.cluster.lifeline import Lifeline
from kshim.configs.options import ConnectionSettings, authorizer_argv, connection_argv, secrets_environment
from kshim.console.console import Console
from kshim.console.sources import ClusterSource
from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.errors import BrokerError
from kshim.log.dirlock import DataDirInUse, lock_data_dir
from kshim.security.acls import AuthorizerConfig
from kshim.security.config import SecurityConfig
from kshim.sockets import open_listener
from wire.errors import ErrorCode

log = logging.getLogger("kshim.cluster")

R = TypeVar("R")

READY_TIMEOUT_S = 20.0  # every broker must register within this at start-up (and after `ctl start`)
STOP_TIMEOUT_S = 10.0  # after SIGTERM, brokers get this long before SIGKILL
REAP_INTERVAL_S = 0.1
LOG_TAIL_LINES = 20
STATUS_TIMEOUT_S = 2.0  # the supervisor's questions to the controller
POLL_INTERVAL_S = 0.1  # while waiting for a broker to register
RESTART_BACKOFF_MIN_S = 0.1  # a controller that dies this soon after its start waits before the next
RESTART_BACKOFF_MAX_S = 5.0
STABLE_RUN_S = 10.0  # a controller that ran this long is restarted at once when it dies


def socket_path(data_dir: Path) -> Path:
    """The controller's socket (brokers)."""
    return data_dir / "controller.sock"


def supervisor_socket_path(data_dir: Path) -> Path:
    """This process's socket (`kshim ctl`)."""
    return data_dir / "supervisor.sock"


@dataclass
class ClusterSettings:
    brokers: int
    port: int
    data_dir: Path
    host: str = "127.0.0.1"
    # --log-dirs: broker i keeps its partition logs in <dir>/broker-i of each (default: its data dir)
    log_dirs: list[Path] = field(default_factory=list)
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
    max_open_segment_files: int | None = None  # the brokers' cache of segment files; default: from their open-file limit
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)  # every broker enforces the same ACLs
    console_port: int | None = None  # the web console's port (0: a free one); None: no console
    # --listeners (docs/security.md): each broker's security options, and the base address of the
    # inter-broker listener, which brokers register (None: host and port above)
    broker_security: list[list[str]] = field(default_factory=list)
    inter_broker: tuple[str, int] | None = None
    transaction_version: int | None = None  # finalized by the controller at its start (None: as stored)
    # the inter-broker identity as Kafka client properties: the console's groups and transactions
    client_properties: dict[str, str] = field(default_factory=dict, repr=False)
    # Kafka broker configs every broker process gets as --override (topic defaults, BrokerConfig
    # fields: kshim.configs.server_properties), NAME=VALUE each; never a secret (below)
    overrides: list[str] = field(default_factory=list)
    # what every broker process gets in its environment, not on its command line
    # (kshim.configs.options.broker_secrets): secret configs as --override, --sasl-user entries
    secrets: dict[str, list[str]] = field(default_factory=dict, repr=False)
    schema_registry_port: int | None = None  # --schema-registry (0: a free port); None: no registry
    security: SecurityConfig | None = field(default=None, repr=False)  # with --listeners: the registry's TLS and users

    @property
    def rf(self) -> int:
        return self.replication_factor if self.replication_factor is not None else min(3, self.brokers)

    @property
    def topic_defaults(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_insync_replicas),
                "kshim.uncommitted.read.limit": self.uncommitted_read_limit}

    def controller_command(self) -> list[str]:
        return [sys.executable, "-m", "kshim", "controller", "--data-dir", str(self.data_dir),
                "--session-timeout-ms", str(self.session_timeout_ms), "--partitions", str(self.partitions),
                "--replication-factor", str(self.rf), "--min-insync-replicas", str(self.min_insync_replicas),
                "--uncommitted-read-limit", self.uncommitted_read_limit, "--log-level", self.log_level,
                "--max-partitions-per-broker", str(self.max_partitions_per_broker)] + (
            [] if self.transaction_version is None else ["--transaction-version", str(self.transaction_version)])

    def broker_command(self, node_id: int) -> list[str]:
        host, port = self.inter_broker or (self.host, self.port)
        cmd = [sys.executable, "-m", "kshim", "broker", "--node-id", str(node_id), "--host", host,
               "--port", str(port + node_id), "--data-dir", str(self.broker_dir(node_id)),
               "--controller-socket", str(socket_path(self.data_dir)),
               "--partitions", str(self.partitions), "--replication-factor", str(self.rf),
               "--max-request-bytes", str(self.max_request_bytes),
               "--min-insync-replicas", str(self.min_insync_replicas),
               "--uncommitted-read-limit", self.uncommitted_read_limit, "--log-level", self.log_level]
        if self.log_dirs:
            cmd += ["--log-dirs", ",".join(str(d / f"broker-{node_id}") for d in self.log_dirs)]
        if not self.auto_create_topics:
            cmd.append("--no-auto-create-topics")
        if self.max_open_segment_files is not None:
            cmd += ["--max-open-segment-files", str(self.max_open_segment_files)]
        if self.replica_lag_time_max_ms is not None:
            cmd += ["--replica-lag-time-max-ms", str(self.replica_lag_time_max_ms)]
        if self.broker_security:
            cmd += self.broker_security[node_id]
        for item in self.overrides:
            cmd += ["--override", item]
        return cmd + connection_argv(self.connection) + authorizer_argv(self.authorizer)

    def broker_environment(self) -> dict[str, str] | None:
        """A broker process's environment: the secrets kept off its command line (None: inherited as is)."""
        return secrets_environment(self.secrets) if any(self.secrets.values()) else None

    def broker_dir(self, node_id: int) -> Path:
        return self.data_dir / f"broker-{node_id}"


class StartupFailed(Exception):
    pass


# ------------------------------------------------------------------------------------------ processes
@dataclass
class ChildProcess:
    """A process this supervisor started: a broker (node_id >= 0) or the controller (node_id -1)."""
    name: str
    log_path: Path
    node_id: int = -1
    proc: subprocess.Popen | None = None
    paused: bool = False
    exit_logged: bool = False
    started_at: float = 0.0  # monotonic

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def started(self) -> subprocess.Popen:
        """The process, for a child that was spawned (every caller checked it was)."""
        if self.proc is None:
            raise RuntimeError(f"{self.name} was never started")
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
    """The processes this supervisor started: the controller and one broker per node id."""

    def __init__(self, settings: ClusterSettings, lifeline: Lifeline | None = None) -> None:
        self.settings = settings
        self.lifeline = lifeline or Lifeline()
        self.brokers = {i: ChildProcess(f"broker {i}", settings.broker_dir(i) / "broker.log", i)
                        for i in range(settings.brokers)}
        self.controller = ChildProcess("the controller", settings.data_dir / "controller" / "controller.log")
        self.controller_restarts = 0
        self.stopping = False
        self._restart_backoff = RESTART_BACKOFF_MIN_S
        self._restart_at: float | None = None  # when the dead controller is started again

    def get(self, node_id: int) -> ChildProcess:
        broker = self.brokers.get(node_id)
        if broker is None:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE,
                              f"no broker {node_id}: this cluster has nodes 0-{self.settings.brokers - 1}")
        return broker

    def _popen(self, child: ChildProcess, cmd: list[str], env: dict[str, str] | None = None) -> None:
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = cmd + self.lifeline.child_args()
        with open(child.log_path, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {child.name}: {' '.join(cmd)}\n".encode())
            out.flush()
            # a session of its own: a terminal's Ctrl-C reaches this process only, which then
            # stops the children in order. Spawned from the event loop's (main) thread: the
            # child's parent-death signal fires when the thread that forked it ends.
            child.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True, pass_fds=(self.lifeline.read_fd,), env=env)
        child.paused = False
        child.exit_logged = False
        child.started_at = SYSTEM.monotonic()

    def spawn(self, node_id: int) -> ChildProcess:
        broker = self.get(node_id)
        if broker.running:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"broker {node_id} is already running (pid {broker.started.pid})")
        self._popen(broker, self.settings.broker_command(node_id), self.settings.broker_environment())
        log.info("started broker %d (pid %d, port %d)", node_id, broker.started.pid, self.settings.port + node_id)
        return broker

    def spawn_controller(self) -> ChildProcess:
        self._popen(self.controller, self.settings.controller_command())
        self._restart_at = None
        log.info("started the controller (pid %d)", self.controller.started.pid)
        return self.controller

    @property
    def controller_state(self) -> str:
        if self._restart_at is not None:
            return "restarting"
        return self.controller.state

    def reap(self) -> None:
        """Collect exited children (no zombies) and log each exit once; schedule the controller's
        restart when it died."""
        for child in [self.controller, *self.brokers.values()]:
            if child.proc is not None and child.started.poll() is not None and not child.exit_logged:
                child.exit_logged = True
                child.paused = False
                log.warning("%s (pid %d) %s", child.name, child.started.pid, child.state)
                if child is self.controller and not self.stopping:
                    ran = SYSTEM.monotonic() - child.started_at
                    if ran >= STABLE_RUN_S:
                        self._restart_backoff = RESTART_BACKOFF_MIN_S
                        delay = 0.0
                    else:  # dying right after its start: do not spin
                        delay = self._restart_backoff
                        self._restart_backoff = min(self._restart_backoff * 2, RESTART_BACKOFF_MAX_S)
                    self._restart_at = SYSTEM.monotonic() + delay
                    log.warning("restarting the controller in %.1fs", delay)

    async def reap_loop(self) -> None:
        while True:
            self.reap()
            if self._restart_at is not None and SYSTEM.monotonic() >= self._restart_at and not self.stopping:
                self.controller_restarts += 1
                self.spawn_controller()
            await anyio.sleep(REAP_INTERVAL_S)

    def _signal(self, child: ChildProcess, signum: signal.Signals) -> None:
        assert child.proc is not None
        if child.started.poll() is None:  # not reaped, so the PID is still ours
            child.started.send_signal(signum)

    def _require_running(self, node_id: int) -> ChildProcess:
        broker = self.get(node_id)
        if not broker.running:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"broker {node_id} is not running: {broker.state}")
        return broker

    async def _kill(self, child: ChildProcess) -> None:
        self._signal(child, signal.SIGKILL)
        with anyio.move_on_after(5):
            while child.started.poll() is None:
                await anyio.sleep(0.01)
        self.reap()

    async def kill(self, node_id: int) -> str:
        broker = self._require_running(node_id)
        await self._kill(broker)
        return f"killed broker {node_id} (pid {broker.started.pid})"

    async def kill_controller(self) -> str:
        if not self.controller.running:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"the controller is not running: {self.controller_state}")
        await self._kill(self.controller)
        return f"killed the controller (pid {self.controller.started.pid}); it is being restarted"

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
        """Brokers first, then the controller: SIGTERM (waking paused ones), wait, then SIGKILL."""
        self.stopping = True
        self._restart_at = None
        await self._stop(list(self.brokers.values()), timeout_s)
        await self._stop([self.controller], timeout_s)

    async def _stop(self, children: list[ChildProcess], timeout_s: float) -> None:
        running = [c for c in children if c.running]
        for child in running:
            child.exit_logged = True  # an exit asked for: logged below once all stopped, not by reap() meanwhile
            self._signal(child, signal.SIGTERM)
            if child.paused:
                self._signal(child, signal.SIGCONT)
                child.paused = False
        deadline = SYSTEM.monotonic() + timeout_s
        while any(c.started.poll() is None for c in running) and SYSTEM.monotonic() < deadline:
            await anyio.sleep(0.02)
        for child in running:
            if child.started.poll() is None:
                log.warning("%s (pid %d) did not stop within %.0fs: killing it", child.name, child.started.pid,
                            timeout_s)
                self._signal(child, signal.SIGKILL)
                child.started.wait()
        for child in running:
            code = child.started.returncode
            (log.info if code == 0 else log.warning)("%s (pid %d) stopped with exit code %d",
                                                     child.name, child.started.pid, code)

    def log_tail(self, child: ChildProcess, lines: int = LOG_TAIL_LINES) -> str:
        path = child.log_path
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError as e:
            return f"(cannot read {path}: {e})"
        return "\n".join(f"    {line}" for line in text)


# ------------------------------------------------------------------------------------------ RPC handling
async def ask_controller(data_dir: Path, request: m.Operation[R], timeout_s: float = STATUS_TIMEOUT_S) -> R:
    """One request to the controller process; BrokerError NOT_CONTROLLER when it does not answer."""
    path = socket_path(data_dir)
    try:
        return await rpc.call_once(path, request, timeout_s)
    except BrokerError:
        raise
    except (OSError, TimeoutError) as e:  # RpcConnectionError is an OSError
        raise BrokerError(ErrorCode.NOT_CONTROLLER, f"the controller is not reachable at {path}: {e}") from None


@dataclass
class SupervisorService:
    """Serves `kshim ctl` on supervisor.sock (messages.Server.SUPERVISOR): the cluster's status,
    this process's view of its children merged with the controller's, and the process commands."""

    supervisor: Supervisor

    @property
    def data_dir(self) -> Path:
        return self.supervisor.settings.data_dir

    async def handle(self, request: m.Operation) -> m.Reply:
        return m.Reply(0, await m.invoke({m.Server.SUPERVISOR: self}, request))

    async def controller_view(self) -> dict[str, Any] | None:
        """The controller's status, or None while it does not answer."""
        try:
            text: str = await ask_controller(self.data_dir, m.ControllerStatus())
        except BrokerError:
            return None
        return json.loads(text)

    async def status(self) -> str:
        return json.dumps(await self.status_report())

    async def kill_controller(self) -> str:
        return await self.supervisor.kill_controller()

    async def node_command(self, action: m.NodeAction, node_id: int) -> str:
        sup = self.supervisor
        if action in (m.NodeAction.ISOLATE, m.NodeAction.HEAL):
            view = await self.controller_view()
            if view is not None and node_id not in {b["id"] for b in view["brokers"]}:
                raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker {node_id} has ever registered")
            isolated = action is m.NodeAction.ISOLATE
            await ask_controller(self.data_dir, m.SetIsolated(node_id, isolated))
            return f"{'isolated' if isolated else 'healed'} broker {node_id}"
        if action is m.NodeAction.KILL:
            return await sup.kill(node_id)
        if action is m.NodeAction.PAUSE:
            return sup.pause(node_id)
        if action is m.NodeAction.RESUME:
            return sup.resume(node_id)
        broker = sup.spawn(node_id)  # START: it answers once the new process registered
        try:
            await self.wait_registered([node_id], READY_TIMEOUT_S)
        except StartupFailed as e:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE, str(e)) from None
        return f"started broker {node_id} (pid {broker.started.pid})"

    async def wait_registered(self, node_ids: list[int], timeout_s: float, applied: bool = False) -> None:
        """Until the processes the supervisor started for node_ids have registered with the
        controller (it reports them alive with their pid) and, with `applied`, each has applied a
        metadata image that lists them all (so any of them names every other one to a client);
        StartupFailed if one exits or the deadline passes first."""
        sup = self.supervisor
        deadline = SYSTEM.monotonic() + timeout_s
        waiting = list(node_ids)
        target = -1  # the image version in which the last of them was registered
        while True:
            view = await self.controller_view()
            pids = {n: b.proc.pid for n, b in sup.brokers.items() if b.proc is not None}
            registered = {b["id"] for b in view["brokers"] if b["alive"] and b["pid"] == pids.get(b["id"])} \
                if view else set()
            waiting = [n for n in waiting if n not in registered]
            if not waiting and applied and view is not None:
                if target < 0:
                    target = view["controller"]["image_version"]
                behind = {b["id"] for b in view["brokers"] if b.get("image_version", -1) < target}
                waiting = [n for n in node_ids if n in behind]
            if not waiting:
                return
            for node_id in waiting:
                broker = sup.brokers[node_id]
                if broker.started.poll() is not None:
                    raise StartupFailed(f"broker {node_id} {broker.state} before registering; "
                                        f"tail of {broker.log_path}:\n{sup.log_tail(broker)}")
            if SYSTEM.monotonic() >= deadline:
                broker = sup.brokers[waiting[0]]
                raise StartupFailed(f"broker {waiting[0]} did not register (and apply the metadata that lists "
                                    f"its peers) within {timeout_s:.0f}s; "
                                    f"tail of {broker.log_path}:\n{sup.log_tail(broker)}")
            await anyio.sleep(POLL_INTERVAL_S)

    async def status_report(self) -> dict[str, Any]:
        sup = self.supervisor
        settings = sup.settings
        view = await self.controller_view()
        registered = {b["id"]: b for b in view["brokers"]} if view else {}
        brokers = []
        for node_id in sorted(set(registered) | set(sup.brokers)):
            info = registered.get(node_id)
            process = sup.brokers.get(node_id)
            brokers.append({
                "id": node_id,
                # a node the controller does not know (yet): the supervisor knows its settings
                "host": info["host"] if info else settings.host,
                "port": info["port"] if info else settings.port + node_id,
                "pid": process.proc.pid if process and process.proc else info["pid"] if info else 0,
                # the controller's view (registered and not fenced), and the process runs: a killed
                # broker is down at once, not once the controller's session timeout fences it
                "alive": bool(info and info["alive"]) and (process is None or process.running),
                "isolated": bool(info and info["isolated"]),
                "epoch": info["epoch"] if info else 0,
                "image_version": info.get("image_version", -1) if info else -1,  # the metadata it applied
                "process": process.state if process else "external",
            })
        controller = sup.controller
        return {
            "cluster_id": view["cluster_id"] if view else "",
            "supervisor": {"pid": os.getpid()},
            "controller": {
                "pid": controller.proc.pid if controller.proc else 0,
                # running: it answers; otherwise the process's state (restarting, starting...)
                "state": "running" if view else
                         ("starting" if controller.running else sup.controller_state),
                "restarts": sup.controller_restarts,
                **({"image_version": view["controller"]["image_version"],
                    "session_timeout_ms": view["controller"]["session_timeout_ms"]} if view else {}),
            },
            "brokers": brokers,
            "partitions": view["partitions"] if view else [],
            "deleting": view.get("deleting", []) if view else [],
        }


# ------------------------------------------------------------------------------------------ the process
async def _answers(path: Path, request: m.Operation) -> bool:
    try:
        with anyio.fail_after(2):
            await rpc.call_once(path, request, timeout_s=2)
        return True
    except (OSError, rpc.RpcConnectionError, TimeoutError, BrokerError):
        return False


def _check_ports(settings: ClusterSettings) -> None:
    for node_id in range(settings.brokers):
        port = settings.port + node_id
        try:
            open_listener(settings.host, port).close()
        except OSError as e:
            raise StartupFailed(f"cannot serve broker {node_id} on {settings.host}:{port}: {e}") from None
    if settings.console_port:  # 0 (a free port) cannot be taken
        try:
            open_listener(settings.host, settings.console_port).close()
        except OSError as e:
            raise StartupFailed(f"cannot serve the console on {settings.host}:{settings.console_port}: {e} "
                                "(--console-port 0 picks a free one, --no-console turns it off)") from None
    if settings.schema_registry_port:
        try:
            open_listener(settings.host, settings.schema_registry_port).close()
        except OSError as e:
            raise StartupFailed(f"cannot serve the schema registry on {settings.host}:{settings.schema_registry_port}: "
                                f"{e} (--schema-registry-port 0 picks a free one)") from None


async def _wait_controller(service: SupervisorService, timeout_s: float) -> None:
    sup = service.supervisor
    deadline = SYSTEM.monotonic() + timeout_s
    while await service.controller_view() is None:
        if not sup.controller.running:
            raise StartupFailed(f"the controller {sup.controller.state} at start-up; "
                                f"tail of {sup.controller.log_path}:\n{sup.log_tail(sup.controller)}")
        if SYSTEM.monotonic() >= deadline:
            raise StartupFailed(f"the controller did not answer within {timeout_s:.0f}s; "
                                f"tail of {sup.controller.log_path}:\n{sup.log_tail(sup.controller)}")
        await anyio.sleep(POLL_INTERVAL_S)


async def run_cluster(settings: ClusterSettings) -> int:
    """The supervisor process: returns the exit code."""
    data_dir = settings.data_dir
    try:
        # before anything else in the directory: a second serve on it must not touch it
        lock_data_dir(data_dir, f"kshim serve --brokers {settings.brokers} on {settings.host}:{settings.port}")
        for sock in (supervisor_socket_path(data_dir), socket_path(data_dir)):
            rpc.check_socket_path(sock)
            if await _answers(sock, m.Status() if sock.name == "supervisor.sock" else m.ControllerStatus()):
                raise StartupFailed(f"a kshim cluster is already running with data in {data_dir} "
                                    f"(something answers on {sock})")
        _check_ports(settings)
    except (StartupFailed, DataDirInUse, OSError) as e:
        print(f"kshim: {e}", file=sys.stderr)
        return 1
    (data_dir / "controller").mkdir(exist_ok=True)
    supervisor = Supervisor(settings)
    service = SupervisorService(supervisor)
    code = 0
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:
                async def on_signal() -> None:
                    async for signum in signals:
                        log.info("received %s: stopping the cluster", signal.Signals(signum).name)
                        await supervisor.stop_all()
                        tg.cancel_scope.cancel()
                        return

                tg.start_soon(on_signal)
                supervisor.spawn_controller()
                tg.start_soon(supervisor.reap_loop)
                try:
                    await _wait_controller(service, READY_TIMEOUT_S)
                    await tg.start(rpc.RpcServer(service.handle).serve, supervisor_socket_path(data_dir))
                    for node_id in range(settings.brokers):
                        supervisor.spawn(node_id)
                    with anyio.fail_after(READY_TIMEOUT_S + 5):
                        await service.wait_registered(list(range(settings.brokers)), READY_TIMEOUT_S, applied=True)
                except (StartupFailed, TimeoutError) as e:
                    print(f"kshim: the cluster did not start: {e}", file=sys.stderr, flush=True)
                    code = 1
                    await supervisor.stop_all()
                    tg.cancel_scope.cancel()
                    return code
                console, console_app = "", None
                if settings.console_port is not None:
                    source = ClusterSource(service, settings.broker_dir)
                    console_app = Console(source, settings.client_properties)
                    bound = await tg.start(console_app.serve, settings.host, settings.console_port)
                    console = f"; console http://{settings.host}:{bound}/"
                if settings.schema_registry_port is not None:
                    from kshim.schema_registry import service as registry  # start-up: only with --schema-registry
                    host, base = settings.inter_broker or (settings.host, settings.port)
                    bound = await tg.start(registry.serve, registry.RegistryConfig(
                        settings.host, settings.schema_registry_port,
                        [(host, base + i) for i in range(settings.brokers)], data_dir, settings.security,
                        brokers=settings.brokers,
                        on_ready=console_app.set_schemas if console_app is not None else None))
                    scheme = "https" if settings.security is not None and settings.security.needs_tls else "http"
                    console += f"; schema registry {scheme}://{settings.host}:{bound}/"
                bootstrap = ",".join(f"{settings.host}:{settings.port + i}" for i in range(settings.brokers))
                print(f"kshim ready: bootstrap {bootstrap} ({settings.brokers} brokers, data in {data_dir}){console}",
                      flush=True)
    finally:
        with anyio.CancelScope(shield=True):
            await supervisor.stop_all()
        supervisor.lifeline.close()
    return code  # kshim.cli logs "stopped cleanly" once nothing else is left (an --ephemeral dir's deletion)
