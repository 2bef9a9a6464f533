"""Command-line options shared by `kshim serve`, `kshim broker` and `kshim controller`: the
connection budgets (the cluster's supervisor hands them on to its broker processes) and the
argument types."""
from __future__ import annotations

import argparse
from dataclasses import fields
from typing import TypedDict, cast

from kshim.configs.broker import BrokerConfig

# (option, BrokerConfig field, help); defaults come from BrokerConfig
OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--queued-max-request-bytes", "queued_max_request_bytes",
     "bytes of large requests received or being handled across all connections before reading pauses "
     "(Kafka's queued.max.request.bytes); at least --max-request-bytes"),
    ("--max-connections", "max_connections", "connections open at once; more are closed on accept"),
    ("--max-connections-per-ip", "max_connections_per_ip", "connections open at once from one address"),
    ("--connections-max-idle-ms", "connections_max_idle_ms", "close a connection quiet for this long"),
    ("--request-stall-timeout-ms", "request_stall_timeout_ms",
     "close a connection that stops sending halfway through a request for this long"),
    ("--log-cleaner-io-max-bytes-per-second", "log_cleaner_io_max_bytes_per_second",
     "bytes per second the log cleaner reads and writes, all compacted partitions together "
     "(Kafka's log.cleaner.io.max.bytes.per.second)"),
    ("--log-cleaner-dedupe-buffer-size", "log_cleaner_dedupe_buffer_size",
     "memory for the cleaner's key -> offset map (Kafka's log.cleaner.dedupe.buffer.size); a larger "
     "dirty section is cleaned over several rounds"),
    ("--log-cleaner-backoff-ms", "log_cleaner_backoff_ms",
     "pause between the cleaner's looks at the compacted partitions (Kafka's log.cleaner.backoff.ms)"),
    ("--group-initial-rebalance-delay-ms", "group_initial_rebalance_delay_ms",
     "how long a classic consumer group's first rebalance waits for more members to join, extended while "
     "they keep arriving (Kafka's group.initial.rebalance.delay.ms); 0 forms the group at once"),
    ("--quota-window-num", "quota_window_num",
     "samples over which client quota rates are measured (Kafka's quota.window.num)"),
    ("--quota-window-size-seconds", "quota_window_size_seconds",
     "length of one client quota sample (Kafka's quota.window.size.seconds)"),
)
_ZERO_ALLOWED = {"group_initial_rebalance_delay_ms"}
_DEFAULTS = {f.name: f.default for f in fields(BrokerConfig)}


class ConnectionSettings(TypedDict):
    queued_max_request_bytes: int
    max_connections: int
    max_connections_per_ip: int
    connections_max_idle_ms: int
    request_stall_timeout_ms: int
    log_cleaner_io_max_bytes_per_second: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_backoff_ms: int
    group_initial_rebalance_delay_ms: int
    quota_window_num: int
    quota_window_size_seconds: int


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection budgets (docs/robustness.md), cleaner, group and quota settings")
    for option, name, text in OPTIONS:
        group.add_argument(option, dest=name, type=non_negative if name in _ZERO_ALLOWED else positive,
                           default=_DEFAULTS[name],
                           help=f"{text} (default {_DEFAULTS[name]})")


def connection_settings(args: argparse.Namespace) -> ConnectionSettings:
    """The budgets given on the command line, as BrokerConfig keyword arguments."""
    settings = cast(ConnectionSettings, {name: getattr(args, name) for _, name, _ in OPTIONS})
    if settings["queued_max_request_bytes"] < args.max_request_bytes:
        raise SystemExit(f"kshim: --queued-max-request-bytes {settings['queued_max_request_bytes']} is less than "
                         f"--max-request-bytes {args.max_request_bytes}: a largest request could never be read")
    return settings


def connection_argv(settings: ConnectionSettings | None) -> list[str]:
    """The same budgets as options for a broker process (none: the broker's defaults)."""
    given: dict = dict(settings or {})
    return [arg for option, name, _ in OPTIONS if name in given for arg in (option, str(given[name]))]
