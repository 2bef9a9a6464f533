"""One broker of a cluster, in its own OS process: `kshim broker`, started by `kshim serve --brokers`.

It binds its Kafka port, registers with the controller over the controller's unix socket, applies
the images its heartbeat long-poll brings, and runs replication when kshim.replication is there.
SIGTERM or SIGINT: close the replicas and exit 0. It dies with its supervisor, even one killed with
SIGKILL (kshim.cluster.lifeline). It prints nothing on stdout; logs go to stderr (the supervisor
appends them to <data-dir>/broker.log).
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from functools import partial
from pathlib import Path

import anyio

from kshim import tuning
from kshim.broker import Broker, BrokerConfig, warn_without_sasl_users
from kshim.cluster import admin, lifeline
from kshim.cluster.remote import RemoteControllerClient
from kshim.configs import server_properties
from kshim.configs.options import (add_authorizer_options, add_connection_options, add_security_options,
                                   authorizer_config, connection_settings, positive, security_config)
from kshim.log.dirlock import DataDirInUse, lock_data_dir
from kshim.log.log_dirs import DuplicateReplica, log_dirs_arg, open_log_dirs
from kshim.observability.faults import FaultRules
from kshim.observability.requestlog import RequestLog
from kshim.replication.client import BrokerConnection, inter_broker_client
from kshim.replication.isr import IsrChanges
from kshim.replication.run import run_replication
from kshim.runner import run_server
from kshim.security.config import Listener

log = logging.getLogger("kshim.broker_process")

DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000  # Kafka's replica.lag.time.max.ms
CONTROLLED_SHUTDOWN_TIMEOUT_S = 2.0



# kshim.cli.BROKER_HELP: the placeholder that names this command in runs of other commands
HELP = "(internal) run one broker of a cluster; `kshim serve --brokers N` starts these"


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "broker", help=HELP,
        description="Run one broker of a multi-broker cluster. `kshim serve --brokers N` starts one per node "
                    "with these options; it is rarely useful to run by hand.")
    p.add_argument("--node-id", type=int, required=True, help="this broker's node id")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise (default 127.0.0.1)")
    p.add_argument("--port", type=int, required=True, help="port to listen on")
    p.add_argument("--data-dir", type=Path, required=True, help="this broker's partition logs")
    p.add_argument("--log-dirs", type=log_dirs_arg, default=None, metavar="A,B",
                   help="directories of this broker's partition logs (default: the data dir)")
    p.add_argument("--controller-socket", type=Path, required=True, help="the controller's unix socket")
    p.add_argument("--partitions", type=positive, default=1, help="partitions of auto-created topics (default 1)")
    p.add_argument("--replication-factor", type=positive, default=1,
                   help="replication factor of topics created with the default (the controller decides)")
    p.add_argument("--no-auto-create-topics", action="store_true", help="do not create unknown topics")
    p.add_argument("--max-request-bytes", type=positive, default=100 * 1024 * 1024,
                   help="largest request frame accepted (default 100 MiB)")
    p.add_argument("--min-insync-replicas", type=positive, default=1,
                   help="broker default of min.insync.replicas (default 1)")
    p.add_argument("--uncommitted-read-limit", choices=["log-end", "high-watermark"], default="log-end",
                   help="broker default of kshim.uncommitted.read.limit (default log-end)")
    p.add_argument("--replica-lag-time-max-ms", type=positive, default=DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                   help=f"a follower this far behind leaves the ISR (default {DEFAULT_REPLICA_LAG_TIME_MAX_MS})")
    p.add_argument("--max-open-segment-files", type=positive, default=None,
                   help="segment files open at once, a cache (default: 3/4 of the open-file limit)")
    p.add_argument("--supervisor-pid", type=int, default=None,
                   help="exit when this process (the supervisor, our parent) dies")
    p.add_argument("--supervisor-fd", type=int, default=None,
                   help="the read end of the supervisor's watchdog pipe: exit at its EOF")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_connection_options(p)
    add_authorizer_options(p)
    add_security_options(p)
    server_properties.add_options(p)
    return p


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    return BrokerConfig(
        host=args.host, port=args.port, data_dir=args.data_dir, node_id=args.node_id, log_dirs=args.log_dirs or [],
        default_partitions=args.partitions, default_replication_factor=args.replication_factor,
        auto_create_topics=not args.no_auto_create_topics, max_request_bytes=args.max_request_bytes,
        topic_defaults={"min.insync.replicas": str(args.min_insync_replicas),
                        "kshim.uncommitted.read.limit": args.uncommitted_read_limit,
                        **getattr(args, "topic_properties", {})},
        **connection_settings(args), authorizer=authorizer_config(args), security=security_config(args),
        recover_in_background=True, static_configs=getattr(args, "static_configs", {}),
        **getattr(args, "broker_fields", {}),
    )


async def run_broker(config: BrokerConfig, controller_socket: Path, replica_lag_time_max_ms: int,
                     supervisor_fd: int | None = None) -> None:
    # lazy: `kshim` imports this module for its options; ctl and the controller need no server
    from kshim.net.broker_server import BrokerServer
    from kshim.net.server import Server, open_listeners

    tuning.freeze_loaded_objects()  # the code is loaded, no data yet
    # bind before opening any log: a broker whose port is taken leaves its data directory as it was
    listeners = open_listeners(config.security.listeners or [Listener("PLAINTEXT", config.host, config.port)])
    client = RemoteControllerClient(controller_socket, config.node_id)
    BrokerConnection.inter_broker = inter_broker_client(config.security)
    try:
        broker = Broker(config, client)
    except BaseException:
        for _, sock in listeners:
            sock.close()
        raise
    client.attach(broker)
    warn_without_sasl_users(broker, config.data_dir.parent)  # ctl's --data-dir: the cluster's
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:
                isr_changes = IsrChanges()
                node = BrokerServer(broker, isr_changes)
                faults, requests = FaultRules(), RequestLog(config.request_log_entries)
                # the inter-broker listener's (fixed) port is what brokers register
                port = config.port if config.security.listeners else listeners[0][1].getsockname()[1]
                # `kshim ctl compact, fault, requests`; the console's replica offsets and metrics
                await tg.start(admin.serve, broker, config.data_dir, node.metrics.exposition, faults, requests,
                               node.share_in_flight, node.telemetry.instances,
                               config.security.client_properties(config.data_dir))
                config.port = port
                # Registered, with the controller's current image applied, before any request is
                # served (Kafka enables request processing once its broker caught up with the
                # metadata): a broker answering with the empty image of its start told clients
                # the cluster had no brokers, and librdkafka then dropped its connections to all
                # of them. Meanwhile connections wait in the listen backlog.
                await tg.start(client.run, config.advertised, port, os.getpid())
                await tg.start(Server(node, faults, requests).serve, listeners)
                tg.start_soon(partial(run_replication, broker, replica_lag_time_max_ms=replica_lag_time_max_ms,
                                      isr_changes=isr_changes))
                if supervisor_fd is not None:
                    tg.start_soon(_stop_when_orphaned, supervisor_fd, tg.cancel_scope)
                log.info("broker %d (pid %d) listening on %s:%d", config.node_id, os.getpid(), config.host, port)
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    await client.shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)
                    tg.cancel_scope.cancel()
                    break
    finally:
        broker.close()
        log.info("broker %d stopped cleanly", config.node_id)


async def _stop_when_orphaned(fd: int, scope: anyio.CancelScope) -> None:
    await lifeline.watch(fd)
    log.warning("the supervisor is gone: shutting down")
    scope.cancel()


def main(args: argparse.Namespace) -> int:
    if args.supervisor_pid is not None:
        lifeline.die_with_parent(args.supervisor_pid)
    config = config_from_args(args)
    tuning.configure_open_segments(args.max_open_segment_files)
    try:
        lock_data_dir(config.data_dir, f"kshim broker {args.node_id} on {args.host}:{args.port}")
        open_log_dirs(config.log_dirs, config.data_dir, f"kshim broker {args.node_id} on {args.host}:{args.port}")
    except (DataDirInUse, DuplicateReplica, OSError) as e:
        print(f"kshim broker {args.node_id}: {e}", file=sys.stderr)
        return 1
    return run_server(run_broker, config, args.controller_socket, args.replica_lag_time_max_ms, args.supervisor_fd,
                      name=f"kshim broker {args.node_id}", address=f"{args.host}:{args.port}")
