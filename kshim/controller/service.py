"""The controller process of `kshim serve --brokers N`: `python -m kshim controller` (internal).

It runs the Controller (metadata in <data-dir>/controller/metadata.sqlite), its session checks,
and the control-plane RPC server on <data-dir>/controller.sock, where the brokers register and
heartbeat and send their metadata changes. The supervisor (kshim.controller.process) starts it and
starts it again when it dies; everything it knows is on disk, so a new process carries on:

- the brokers it had registered count as alive for a full session timeout from its start (the
  grace period to reconnect), and a broker that comes back with its current epoch resumes its
  session without being fenced, so a controller restart moves no leadership;
- a broker that died meanwhile misses that grace period and is fenced then: its partitions get
  new leaders from their ISR;
- producer ids come from the persisted counter, in blocks, so no id is handed out twice.

It exits with its supervisor (kshim.cluster.lifeline) and on SIGTERM or SIGINT.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from kshim.broadcast import Signal
from kshim.cluster import lifeline
from kshim.cluster.image import MetadataImage, replica_status
from kshim.configs.options import positive
from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.store import MetadataStore
from kshim.log.dirlock import DataDirInUse, lock_data_dir

log = logging.getLogger("kshim.controller.process")

MAX_HEARTBEAT_WAIT_FRACTION = 3  # a long-poll never waits more than a third of the session timeout
SOCKET_NAME = "controller.sock"


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_NAME


def metadata_path(data_dir: Path) -> Path:
    return data_dir / "controller" / "metadata.sqlite"


# ------------------------------------------------------------------------------------------ RPC handling
@dataclass
class ControllerService:
    """Serves the control-plane operations of the controller process (messages.Server.PROCESS):
    broker sessions and the controller's status."""

    controller: Controller
    registered: dict[int, int] = field(default_factory=dict)  # node -> pid of its latest registration
    offsets: dict[int, dict[tuple[str, int], tuple[int, int]]] = field(default_factory=dict)  # latest heartbeats
    registrations: Signal = field(default_factory=Signal)

    async def handle(self, request: m.Operation) -> m.Reply:
        """The RPC handler: the Controller or this service serves it, as its schema says."""
        result = await m.invoke({m.Server.CONTROLLER: self.controller, m.Server.PROCESS: self}, request)
        return m.Reply(self.controller.version, result)

    def register(self, node_id: int, host: str, port: int, pid: int) -> m.Registration:
        epoch = self.controller.register_broker(node_id, host, port, pid)
        self.registered[node_id] = pid
        self.registrations.fire()
        return m.Registration(epoch, self.controller.image)

    async def heartbeat(self, node_id: int, broker_epoch: int, known_image_version: int, wait_ms: int,
                        offsets: tuple[m.ReplicaOffsets, ...]) -> MetadataImage | None:
        c = self.controller
        c.heartbeat(node_id, broker_epoch)  # STALE_BROKER_EPOCH: register again
        c.report_image_version(node_id, known_image_version)
        self.offsets[node_id] = {(o.topic, o.partition): (o.log_end_offset, o.high_watermark) for o in offsets}
        c.report_log_ends(node_id, {key: ends[0] for key, ends in self.offsets[node_id].items()})
        if c.version > known_image_version:
            return c.image
        wait_ms = max(0, min(wait_ms, c.config.session_timeout_ms // MAX_HEARTBEAT_WAIT_FRACTION))
        return await c.wait_for_change(known_image_version, wait_ms / 1000)

    def controller_status(self) -> str:
        return json.dumps(self.status_report())

    def status_report(self) -> dict[str, Any]:
        image: MetadataImage = self.controller.image
        applied = {r.node_id: r.log_end_offset for r in self.controller.describe_quorum().observers}
        brokers = [{"id": b.node_id, "host": b.host, "port": b.port, "pid": b.pid, "alive": b.alive,
                    "isolated": b.isolated, "epoch": b.epoch, "image_version": applied.get(b.node_id, -1)}
                   for b in sorted(image.brokers.values(), key=lambda b: b.node_id)]
        partitions = []
        alive = {b.node_id for b in image.brokers.values() if b.alive}
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
                    "adding": list(p.adding), "removing": list(p.removing),
                    "replica_offsets": replica_offsets, "replica_states": replica_status(p, alive, replica_offsets),
                })
        deleting = [{"topic": d.topic, "topic_id": str(d.topic_id), "partition": d.index, "node": d.node}
                    for d in self.controller.pending_deletions()]
        return {
            "cluster_id": image.cluster_id,
            "controller": {"pid": os.getpid(), "image_version": image.version,
                           "session_timeout_ms": self.controller.config.session_timeout_ms},
            "brokers": brokers,
            "partitions": partitions,
            "deleting": deleting,
        }


# ------------------------------------------------------------------------------------------ the process

# kshim.cli.CONTROLLER_HELP: the placeholder that names this command in runs of other commands
HELP = "(internal) run the controller of a cluster; `kshim serve --brokers N` starts it"


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "controller", help=HELP,
        description="Run the controller of a multi-broker cluster. `kshim serve --brokers N` starts it (and "
                    "starts it again when it dies); it is rarely useful to run by hand.")
    p.add_argument("--data-dir", type=Path, required=True,
                   help="the cluster's data dir: metadata in DATA_DIR/controller, the socket DATA_DIR/controller.sock")
    p.add_argument("--session-timeout-ms", type=positive, default=9000,
                   help="a broker with no heartbeat this long is fenced (default 9000)")
    p.add_argument("--partitions", type=positive, default=1, help="partitions of topics created with the default")
    p.add_argument("--replication-factor", type=positive, default=1,
                   help="replication factor of topics created with the default")
    p.add_argument("--min-insync-replicas", type=positive, default=1,
                   help="broker default of min.insync.replicas (default 1)")
    p.add_argument("--uncommitted-read-limit", choices=["log-end", "high-watermark"], default="log-end",
                   help="broker default of kshim.uncommitted.read.limit (default log-end)")
    p.add_argument("--max-partitions-per-broker", type=positive, default=10_000,
                   help="partition replicas one broker may host (default 10000)")
    p.add_argument("--transaction-version", type=int, choices=[0, 1, 2], default=None,
                   help="finalize transaction.version at this level at start (default: as stored, 2 when new)")
    p.add_argument("--supervisor-pid", type=int, default=None,
                   help="exit when this process (the supervisor, our parent) dies")
    p.add_argument("--supervisor-fd", type=int, default=None,
                   help="the read end of the supervisor's watchdog pipe: exit at its EOF")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


async def run_controller(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir
    controller = Controller(MetadataStore(metadata_path(data_dir)), ControllerConfig(
        node_id=0, session_timeout_ms=args.session_timeout_ms, default_partitions=args.partitions,
        default_replication_factor=args.replication_factor,
        topic_defaults={"min.insync.replicas": str(args.min_insync_replicas),
                        "kshim.uncommitted.read.limit": args.uncommitted_read_limit},
        max_partitions_per_broker=args.max_partitions_per_broker, transaction_version=args.transaction_version))
    service = ControllerService(controller)
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:
                async def on_signal() -> None:
                    async for signum in signals:
                        log.info("received %s: stopping", signal.Signals(signum).name)
                        tg.cancel_scope.cancel()
                        return

                async def on_orphaned(fd: int) -> None:
                    await lifeline.watch(fd)
                    log.warning("the supervisor is gone: stopping")
                    tg.cancel_scope.cancel()

                tg.start_soon(on_signal)
                if args.supervisor_fd is not None:
                    tg.start_soon(on_orphaned, args.supervisor_fd)
                await tg.start(rpc.RpcServer(service.handle).serve, socket_path(data_dir))
                log.info("controller (pid %d) serving on %s, image version %d, %d brokers known",
                         os.getpid(), socket_path(data_dir), controller.version, len(controller.image.brokers))
                tg.start_soon(controller.run_session_checks)
    finally:
        controller.close()
    log.info("controller stopped")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.supervisor_pid is not None:
        lifeline.die_with_parent(args.supervisor_pid)
    rpc.check_socket_path(socket_path(args.data_dir))
    try:  # one controller per metadata store, even if a second one is started by hand
        lock_data_dir(metadata_path(args.data_dir).parent, f"kshim controller of {args.data_dir}")
    except (DataDirInUse, OSError) as e:
        print(f"kshim controller: {e}", file=sys.stderr)
        return 1
    return anyio.run(run_controller, args)
