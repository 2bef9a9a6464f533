"""The command line: `kshim serve` runs a broker. `python -m kshim` is the same program.

- `kshim serve` runs one broker with its controller in the same process.
- `kshim serve --brokers N` runs a cluster on one machine: a supervisor process
  (kshim.controller.process) that spawns the controller process (`kshim controller`, internal,
  kshim.controller.service) and N broker processes (`kshim broker`, internal) on ports P..P+N-1.
- `kshim ctl` inspects and disturbs such a cluster (kshim.ctl).
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import sys
from pathlib import Path

import anyio

from kshim import tuning
from kshim.broker import BrokerConfig
from kshim.cluster import admin
from kshim.configs import server_properties
from kshim.configs.options import (CLUSTER_ONLY, add_authorizer_options, add_connection_options,
                                   add_security_options, authorizer_config, broker_secrets, connection_settings,
                                   positive, security_argv, security_config, take_secrets)
from kshim.log.dirlock import DataDirInUse, DataDirLock, lock_data_dir
from kshim.log.ephemeral import abandoned_dirs, ephemeral_dir
from kshim.log.log_dirs import DuplicateReplica, log_dirs_arg, open_log_dirs
from kshim.observability.faults import FaultRules
from kshim.observability.requestlog import RequestLog
from kshim.runner import run_server
from kshim.security.config import Listener, SecurityConfigError
from kshim.standalone import announce_port, open_standalone

log = logging.getLogger("kshim")



class _Version(argparse.Action):
    """--version, looked up only when asked (importlib.metadata takes a tenth of the start)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"kshim {version()}")
        parser.exit()


CTL_HELP = "inspect and disturb a running kshim serve: a single broker or a --brokers N cluster"  # kshim.ctl.commands.HELP
# the cluster's internal commands, named in the command list of every run; their modules load only
# for themselves (kshim.cluster.broker_process.HELP, kshim.controller.service.HELP)
BROKER_HELP = "(internal) run one broker of a cluster; `kshim serve --brokers N` starts these"
CONTROLLER_HELP = "(internal) run the controller of a cluster; `kshim serve --brokers N` starts it"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; `command`: the one this run executes, when known. Only its options are complete:
    `kshim ctl` (and kshim.ctl), `broker` and `controller` load only for themselves, or when no
    command is known (--help)."""
    parser = argparse.ArgumentParser(prog="kshim", description="A Kafka-protocol broker in Python.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker", description="Run a broker on 127.0.0.1 with its data on disk.")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=9092, help="port to listen on; 0 picks a free one (default 9092)")
    serve.add_argument("--data-dir", type=Path, default=None, help="where logs and metadata live (default ./kshim-data)")
    serve.add_argument("--ephemeral", action="store_true",
                       help="for tests and quick experiments: keep everything in a new directory on tmpfs "
                            "(/dev/shm when there is one) and delete it when the process exits. NOTHING "
                            "SURVIVES THE PROCESS: topics, records, offsets and configs are gone after it "
                            "stops (a SIGKILL leaves the directory behind, named on the ready line). Same "
                            "log code as on disk; not with --data-dir")
    serve.add_argument("--log-dirs", type=log_dirs_arg, default=None, metavar="A,B",
                       help="directories the partition logs live in, comma-separated (Kafka's log.dirs; "
                            "default: the data dir). New replicas go to the one with the fewest; "
                            "with --brokers, broker i uses A/broker-i, B/broker-i (docs/storage.md)")
    serve.add_argument("--partitions", type=positive, default=1, help="partitions of auto-created topics (default 1)")
    serve.add_argument("--no-auto-create-topics", action="store_true", help="do not create unknown topics on Metadata and Produce")
    serve.add_argument("--max-request-bytes", type=positive, default=100 * 1024 * 1024,
                       help="largest request frame accepted; larger ones close the connection (default 100 MiB)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    server_properties.add_options(serve)
    add_connection_options(serve)
    add_authorizer_options(serve)
    add_security_options(serve)
    serve.add_argument("--console-port", type=int, default=0,
                       help="port of the web console and /metrics (docs/console.md); 0 picks a free one, "
                            "printed on the ready line (default 0)")
    serve.add_argument("--no-console", action="store_true", help="serve no web console and no /metrics")
    serve.add_argument("--schema-registry", action="store_true",
                       help="also serve a Confluent-compatible Schema Registry, its state in the compacted topic "
                            "_schemas (docs/schema-registry.md); its URL is on the ready line")
    serve.add_argument("--schema-registry-port", type=int, default=8081,
                       help="port of the schema registry, on --host; 0 picks a free one (default 8081)")
    serve.add_argument("--transaction-version", type=int, choices=[0, 1, 2], default=None,
                       help="finalize the transaction.version feature at this level when starting (2, the "
                            "default of a new cluster: transactions v2, KIP-890; 0 or 1: clients use v1); "
                            "UpdateFeatures changes it later (docs/transactions.md)")
    serve.add_argument("--max-partitions-per-broker", type=positive, default=None,
                       help="partition replicas one broker may host; CreateTopics and CreatePartitions past it "
                            "fail with POLICY_VIOLATION (default: a memory budget, half the machine's or the "
                            "cgroup's memory at 32 KiB per partition)")
    serve.add_argument("--max-open-segment-files", type=positive, default=None,
                       help="segment files (.log, .index, .timeindex) open at once per broker: they open on use "
                            "and the least recently used close past this (default: 3/4 of the open-file limit, "
                            "which serve raises to its hard limit)")
    cluster = serve.add_argument_group(
        "cluster", "--brokers N runs N broker processes on ports PORT..PORT+N-1 under a controller process, "
                   "with data in DATA_DIR/broker-i and DATA_DIR/controller; `kshim ctl` controls them")
    cluster.add_argument("--brokers", type=positive, default=None,
                         help="run a cluster of this many brokers, one process each (needs a fixed --port)")
    cluster.add_argument("--replication-factor", type=positive, default=None,
                         help="replication factor of topics created with the default (default min(3, brokers))")
    cluster.add_argument("--broker-session-timeout-ms", type=positive, default=None,
                         help="a broker with no heartbeat this long is fenced (default 9000)")
    cluster.add_argument("--replica-lag-time-max-ms", type=positive, default=None,
                         help="a follower that has not caught up for this long leaves the ISR (default 30000)")
    cluster.add_argument("--min-insync-replicas", type=positive, default=None,
                         help="broker default of min.insync.replicas (default 1)")
    cluster.add_argument("--uncommitted-read-limit", choices=["log-end", "high-watermark"], default=None,
                         help="broker default of kshim.uncommitted.read.limit (default log-end)")
    if command in (None, "broker"):
        from kshim.cluster import broker_process
        broker_process.add_parser(sub)
    else:
        sub.add_parser("broker", help=BROKER_HELP)
    if command in (None, "controller"):
        from kshim.controller import service as controller_service
        controller_service.add_parser(sub)
    else:
        sub.add_parser("controller", help=CONTROLLER_HELP)
    if command in (None, "ctl"):
        from kshim.ctl import commands as ctl  # start-up: serve and the brokers need no ctl
        ctl.add_parser(sub)
    else:
        sub.add_parser("ctl", help=CTL_HELP)  # named for the command list; never parsed in this run
    return parser


def _partition_budget(args: argparse.Namespace) -> int:
    fd_limit = tuning.raise_fd_limit()
    memory = tuning.memory_limit()
    budget = args.max_partitions_per_broker or tuning.default_partition_budget(memory)
    segments = tuning.configure_open_segments(args.max_open_segment_files)
    log.info("memory %d MiB: up to %d partition replicas per broker; open-file limit %d: %d segment files "
             "open at once", memory >> 20, budget, fd_limit, segments)
    return budget


def _serve_cluster(args: argparse.Namespace) -> int:
    # lazy, like the server below: only `serve --brokers` runs the controller process
    from kshim.controller.process import ClusterSettings, run_cluster

    try:
        security = security_config(args)  # TLS or SASL options without a listener for them are refused
    except SecurityConfigError as e:
        print(f"kshim: {e}", file=sys.stderr)
        return 2
    broker_security: list[list[str]] = []
    inter_broker = None
    if security.listeners:
        if any(listener.port == 0 for listener in security.listeners):
            print("kshim: --brokers needs fixed listener ports (each broker offsets them by its index)", file=sys.stderr)
            return 2
        inter = security.inter_broker()
        assert inter is not None
        if inter.sasl and security.inter_broker_user is None:
            print(f"kshim: the inter-broker listener {inter.name} needs --inter-broker-user", file=sys.stderr)
            return 2
        # one development CA for the whole cluster, made by the supervisor
        tls_files = None
        if security.tls_dev:
            from kshim.security.tls import dev_files  # cryptography loads only for TLS
            ca, cert, key = dev_files(args.data_dir)
            tls_files = (cert, key, args.tls_ca or ca)
            print(f"kshim tls-dev: clients trust the CA in {ca.resolve()}", flush=True)
        broker_security = [security_argv(args, i, tls_files) for i in range(args.brokers)]
        inter_broker = (inter.host, inter.port)
        args.host, args.port = security.listeners[0].host, security.listeners[0].port  # the bootstrap
        for listener in security.listeners:
            urls = ",".join(listener.url(port=listener.port + i) for i in range(args.brokers))
            print(f"kshim listener {urls}", flush=True)
    if args.port == 0:
        print("kshim: --port 0 is not supported with --brokers: the brokers listen on PORT..PORT+N-1, "
              "which must be known; give a fixed --port", file=sys.stderr)
        return 2
    if args.port + args.brokers - 1 > 65535:
        print(f"kshim: ports {args.port}..{args.port + args.brokers - 1} go past 65535", file=sys.stderr)
        return 2
    overrides, secrets = broker_secrets(args, getattr(args, "passed_on", []))
    settings = ClusterSettings(
        brokers=args.brokers, port=args.port, data_dir=args.data_dir, host=args.host, partitions=args.partitions,
        log_dirs=args.log_dirs or [],
        replication_factor=args.replication_factor,
        session_timeout_ms=args.broker_session_timeout_ms or 9000,
        min_insync_replicas=args.min_insync_replicas or 1,
        uncommitted_read_limit=args.uncommitted_read_limit or "log-end",
        replica_lag_time_max_ms=args.replica_lag_time_max_ms, max_request_bytes=args.max_request_bytes,
        auto_create_topics=not args.no_auto_create_topics, log_level=args.log_level,
        connection=connection_settings(args), max_partitions_per_broker=_partition_budget(args),
        max_open_segment_files=args.max_open_segment_files, authorizer=authorizer_config(args),
        console_port=None if args.no_console else args.console_port, broker_security=broker_security,
        inter_broker=inter_broker, transaction_version=args.transaction_version,
        schema_registry_port=args.schema_registry_port if args.schema_registry else None,
        security=security if security.listeners else None,
        client_properties=security.client_properties(args.data_dir), overrides=overrides, secrets=secrets)
    auth = settings.authorizer
    inter = security.inter_broker() if security.listeners else None
    fetcher = f"User:{security.inter_broker_user}" if inter is not None and inter.sasl else "User:ANONYMOUS"
    if auth.enabled and not auth.allow_everyone_if_no_acl_found and fetcher not in auth.super_users:
        # followers fetch from leaders as the inter-broker principal: without an ACL for it, replication stops
        log.warning("--authorizer: followers fetch from leaders as %s; make it a super user or allow it "
                    "CLUSTER_ACTION on the cluster (kafka-acls.sh --add --allow-principal %s --operation "
                    "ClusterAction --cluster) or replication stops (docs/security.md)", fetcher, fetcher)
    if settings.rf > settings.brokers:
        print(f"kshim: --replication-factor {settings.rf} is more than --brokers {settings.brokers}", file=sys.stderr)
        return 2
    return anyio.run(run_cluster, settings)


async def _serve(config: BrokerConfig, lock: DataDirLock, console_port: int | None, ephemeral: bool = False,
                 registry_port: int | None = None) -> None:
    # lazy: `kshim ctl` and the cluster's controller process do not load the server and its handlers
    from kshim.net.broker_server import BrokerServer
    from kshim.net.server import Server, open_listeners

    tuning.freeze_loaded_objects()  # the code is loaded, no data yet
    # bind before opening any log: a serve whose port is taken leaves the data directory as it was
    listeners = open_listeners(config.security.listeners or [Listener("PLAINTEXT", config.host, config.port)])
    try:
        broker = open_standalone(config)
    except BaseException:
        for _, sock in listeners:
            sock.close()
        raise
    try:
        async with anyio.create_task_group() as tg:
            node = BrokerServer(broker)
            faults, requests = FaultRules(), RequestLog(config.request_log_entries)
            server = Server(node, faults, requests)
            port = await tg.start(server.serve, listeners)
            # `kshim ctl compact, fault, requests`; the replica offsets and metrics of the console
            client_properties = config.security.client_properties(config.data_dir)  # ctl's and the console's
            await tg.start(admin.serve, broker, config.data_dir, node.metrics.exposition, faults, requests,
                           node.share_in_flight, node.telemetry.instances, client_properties)
            registered = port
            if config.security.listeners:
                config.security.listeners = server.bound  # Metadata advertises the bound ports
                inter = config.security.inter_broker()
                assert inter is not None
                registered = inter.port  # as a cluster's brokers do: `kshim ctl groups/txns` connect there
            announce_port(broker, registered)  # --port 0: advertise the port actually bound
            lock.update_owner(f"kshim serve on {config.host}:{port}")
            if config.security.listeners:
                for listener in server.bound:
                    print(f"kshim listener {listener.url()}", flush=True)
            if server.dev_ca is not None:
                print(f"kshim tls-dev: clients trust the CA in {server.dev_ca.resolve()}", flush=True)
            console, console_app = "", None
            if console_port is not None:
                from kshim.console.console import Console  # start-up: not with --no-console
                from kshim.console.sources import StandaloneSource
                source = StandaloneSource(broker, lambda: broker.image, node.metrics.exposition, faults)
                console_app = Console(source, client_properties)
                bound = await tg.start(console_app.serve, config.host, console_port)
                console = f"; console http://{config.host}:{bound}/"
            if registry_port is not None:
                from kshim.schema_registry import service as registry  # start-up: only with --schema-registry
                bound_inter = config.security.inter_broker() if config.security.listeners else None
                inter_address = (bound_inter.host, bound_inter.port) if bound_inter is not None else (config.host, port)
                bound = await tg.start(registry.serve, registry.RegistryConfig(
                    config.host, registry_port, [inter_address], config.data_dir, config.security,
                    on_ready=console_app.set_schemas if console_app is not None else None))
                scheme = "https" if config.security.needs_tls else "http"
                console += f"; schema registry {scheme}://{config.host}:{bound}/"
            # signals are ours before the ready line: a SIGTERM right after it stops cleanly
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                kept = " (EPHEMERAL: deleted at exit)" if ephemeral else ""
                print(f"kshim ready: bootstrap {config.host}:{port} (data in {config.data_dir}{kept}){console}", flush=True)
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    tg.cancel_scope.cancel()
                    break
    finally:
        broker.close()  # "stopped cleanly" comes from _main, after what is left (an --ephemeral dir's deletion)


def version() -> str:
    """The installed distribution's version, else (a source checkout) pyproject.toml's."""
    import importlib.metadata
    try:
        return importlib.metadata.version("kshim")
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        match = re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.M) if pyproject.exists() else None
        return match.group(1) if match else "unknown"


SERVER_COMMANDS = ("serve", "broker", "controller")


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
    except BrokenPipeError:
        # the reader went away (`kshim ctl ... | head`): not an error of ours; stdout is closed
        # quietly (pointing it at /dev/null keeps the interpreter's final flush from failing too)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if argv is None and next((a for a in sys.argv[1:] if not a.startswith("-")), None) in SERVER_COMMANDS:
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End a server process that has stopped cleanly without the interpreter's teardown: the
    exit handlers run, logs and standard streams are flushed, then os._exit. Freeing every object
    of a broker with 10,000 open partitions one by one took 1.3 s of its SIGTERM (a clean stop's
    files are closed and synced by then; nothing else is left to finish)."""
    import atexit
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # the command is the first word (kshim's own options take no value)
    parser = build_parser(next((a for a in argv if not a.startswith("-")), None))
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(args, "log_level", "warning").upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "broker":
        take_secrets(args)  # its supervisor's, from the environment (kshim.configs.options.SECRETS_ENV)
    if args.command in ("serve", "broker"):
        try:
            _apply_kafka_configs(parser, args, argv)
        except server_properties.ConfigError as e:
            print(f"kshim: {e}", file=sys.stderr)
            return 2
    if args.command == "serve":
        if args.schema_registry:
            from kshim.schema_registry import missing_libraries  # start-up: only with --schema-registry
            missing = missing_libraries()
            if missing:  # the registry's modules import them: refused before the broker starts
                print(f"kshim: --schema-registry needs {', '.join(missing)}: pip install 'kshim[schema-registry]'",
                      file=sys.stderr)
                return 2
        if args.ephemeral and args.log_dirs:  # they would outlive the process it deletes its data with
            print("kshim: --ephemeral keeps the logs in its own directory: leave out --log-dirs", file=sys.stderr)
            return 2
        if args.ephemeral and args.data_dir is not None:
            print("kshim: --ephemeral makes its own data directory: leave out --data-dir", file=sys.stderr)
            return 2
        if args.ephemeral:
            # A killed --ephemeral broker lost its data by design; say so, and free what it left
            for left, size in abandoned_dirs():
                log.warning("a killed `kshim serve --ephemeral` left %s (%d bytes): ephemeral data does not "
                            "survive a crash; deleting it, this broker starts empty", left, size)
                shutil.rmtree(left, ignore_errors=True)
            args.data_dir = ephemeral_dir()
            try:
                code = _run(args)
            finally:
                shutil.rmtree(args.data_dir, ignore_errors=True)  # before `stopped cleanly`: 0.5 s at 9,000 partitions
            return _stopped(code)
        if args.data_dir is None:
            args.data_dir = Path("kshim-data")
        return _stopped(_run(args))
    return _run(args)


def _apply_kafka_configs(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> None:
    """--config-file and --override onto the parsed command line (kshim.configs.server_properties)."""
    props = server_properties.gather(args.config_file, args.override)
    if not props:
        return
    command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    words = argv[argv.index(args.command) + 1:]
    explicit = server_properties.explicit_dests(command, words)
    server_properties.apply(args, props, explicit, cluster=args.command == "broker" or args.brokers is not None)


def _stopped(code: int) -> int:
    """After a serve (one broker, or a cluster's supervisor) ran: its last line, logged once nothing
    is left to do but exit (_exit_now), so that the process ends as it says it stopped."""
    if code == 0:
        log.info("stopped cleanly")
    return code


def _run(args: argparse.Namespace) -> int:
    if args.command == "ctl":
        from kshim.ctl import commands as ctl
        return ctl.main(args)
    if args.command == "broker":
        from kshim.cluster import broker_process
        tuning.keep_freed_buffers()
        return broker_process.main(args)
    if args.command == "controller":
        from kshim.controller import service as controller_service
        return controller_service.main(args)
    if args.command == "serve" and args.brokers is not None:
        return _serve_cluster(args)
    if args.command == "serve":
        given = [f"--{name.replace('_', '-')}" for name in CLUSTER_ONLY if getattr(args, name) is not None]
        if given:
            print(f"kshim: {', '.join(given)} need --brokers (a cluster)", file=sys.stderr)
            return 2
        try:
            security = security_config(args)
        except SecurityConfigError as e:
            print(f"kshim: {e}", file=sys.stderr)
            return 2
        inter = security.inter_broker() if security.listeners else None
        if args.schema_registry and inter is not None and inter.sasl and security.inter_broker_user is None:
            print(f"kshim: --schema-registry connects to the SASL listener {inter.name} as a client: "
                  "give it a user with --inter-broker-user", file=sys.stderr)
            return 2
        if security.listeners:  # the first listener is the broker's address (its bootstrap)
            args.host, args.port = security.listeners[0].host, security.listeners[0].port
        tuning.keep_freed_buffers()
        topic_defaults = {}
        if args.min_insync_replicas is not None:
            topic_defaults["min.insync.replicas"] = str(args.min_insync_replicas)
        if args.uncommitted_read_limit is not None:
            topic_defaults["kshim.uncommitted.read.limit"] = args.uncommitted_read_limit
        topic_defaults.update(getattr(args, "topic_properties", {}))
        fields = getattr(args, "broker_fields", {})
        config = BrokerConfig(
            host=args.host, port=args.port, data_dir=args.data_dir, log_dirs=args.log_dirs or [],
            default_partitions=args.partitions,
            auto_create_topics=not args.no_auto_create_topics, max_request_bytes=args.max_request_bytes,
            topic_defaults=topic_defaults, **connection_settings(args),
            max_partitions_per_broker=_partition_budget(args), authorizer=authorizer_config(args), security=security,
            transaction_version=args.transaction_version, recover_in_background=True,
            static_configs=getattr(args, "static_configs", {}), **fields,
        )
        try:
            lock = lock_data_dir(config.data_dir, f"kshim serve on {args.host}:{args.port}")
        except (DataDirInUse, OSError) as e:
            print(f"kshim: {e}", file=sys.stderr)
            return 1
        try:  # held until the process ends
            open_log_dirs(config.log_dirs, config.data_dir, f"kshim serve on {args.host}:{args.port}")
        except (DataDirInUse, DuplicateReplica, OSError) as e:
            print(f"kshim: log dir: {e}", file=sys.stderr)
            return 1
        return run_server(_serve, config, lock, None if args.no_console else args.console_port, args.ephemeral,
                          args.schema_registry_port if args.schema_registry else None,
                          name="kshim", address=f"{args.host}:{args.port}")
    return 2
