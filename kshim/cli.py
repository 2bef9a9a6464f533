"""The command line: `kshim serve` runs a broker. `python -m kshim` is the same program.

Subcommands live in one parser so the cluster options (`--brokers`) and the `ctl` command of the
replication work slot in beside `serve`.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

import anyio

from kshim import tuning
from kshim.broker import BrokerConfig
from kshim.standalone import announce_port, open_standalone

log = logging.getLogger("kshim")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kshim", description="A Kafka-protocol broker in Python.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker", description="Run a broker on 127.0.0.1 with its data on disk.")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=9092, help="port to listen on; 0 picks a free one (default 9092)")
    serve.add_argument("--data-dir", type=Path, default=Path("kshim-data"), help="where logs and metadata live (default ./kshim-data)")
    serve.add_argument("--partitions", type=_positive, default=1, help="partitions of auto-created topics (default 1)")
    serve.add_argument("--no-auto-create-topics", action="store_true", help="do not create unknown topics on Metadata and Produce")
    serve.add_argument("--max-request-bytes", type=_positive, default=100 * 1024 * 1024,
                       help="largest request frame accepted; larger ones close the connection (default 100 MiB)")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


async def _serve(config: BrokerConfig) -> None:
    from kshim.server import Server

    broker = open_standalone(config)
    try:
        async with anyio.create_task_group() as tg:
            port = await tg.start(Server(broker).serve)
            announce_port(broker, port)  # --port 0: advertise the port actually bound
            print(f"kshim ready: bootstrap {config.host}:{port} (data in {config.data_dir})", flush=True)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    tg.cancel_scope.cancel()
                    break
    finally:
        broker.close()
        log.info("stopped cleanly")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        tuning.keep_freed_buffers()
        config = BrokerConfig(
            host=args.host, port=args.port, data_dir=args.data_dir, default_partitions=args.partitions,
            auto_create_topics=not args.no_auto_create_topics, max_request_bytes=args.max_request_bytes,
        )
        try:
            anyio.run(_serve, config)
        except OSError as e:
            print(f"kshim: cannot serve on {args.host}:{args.port}: {e}", file=sys.stderr)
            return 1
        return 0
    return 2
