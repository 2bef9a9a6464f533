"""A broker's static settings, as `kshim serve` (or a test) gives them. DescribeConfigs reports them
under Kafka's broker config names (kshim.configs.resolver.broker_settings)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kshim.configs.groups import GroupSettings
from kshim.security.acls import AuthorizerConfig
from kshim.security.config import SecurityConfig


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path("kshim-data")
    # Kafka's log.dirs: the directories partition replicas live in (docs/storage.md); empty: data_dir
    log_dirs: list[Path] = field(default_factory=list)
    default_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics: bool = True
    max_request_bytes: int = 100 * 1024 * 1024
    # connection budgets (docs/robustness.md): bytes of large requests in flight across all
    # connections, connections in total and per client address, and how long a connection may be
    # quiet (idle) or stop halfway through a request (stalled) before it is closed
    queued_max_request_bytes: int = 512 * 1024 * 1024
    max_connections: int = 10_000
    max_connections_per_ip: int = 10_000
    connections_max_idle_ms: int = 600_000
    request_stall_timeout_ms: int = 30_000
    max_partitions_per_broker: int = 10_000  # serve sets it from the open-file limit unless given
    node_id: int = 0
    advertised_host: str | None = None  # what Metadata tells clients; defaults to host
    topic_defaults: dict[str, str] = field(default_factory=dict)  # broker-level topic config defaults
    offsets_topic_partitions: int = 10  # partitions of __consumer_offsets when it is first created
    transaction_state_partitions: int = 10  # partitions of __transaction_state when it is first created
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transaction_version: int | None = None  # serve --transaction-version: the single broker's controller finalizes it
    # the log cleaner (docs/compaction.md): its I/O rate, offset-map budget and pause between rounds
    log_cleaner_io_max_bytes_per_second: int = 100 * 1024 * 1024
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_cleaner_backoff_ms: int = 15_000
    # a classic group's first rebalance waits this long for more members (Kafka's
    # group.initial.rebalance.delay.ms), longer while members keep arriving
    group_initial_rebalance_delay_ms: int = 3000
    # incremental fetch sessions (KIP-227) the broker keeps at once; 0: none (full fetches only)
    max_incremental_fetch_session_cache_slots: int = 1000
    # ACLs (docs/security.md): off by default, as in Kafka; then every request is allowed
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)  # listeners, TLS, SASL (docs/security.md)
    request_log_entries: int = 10_000  # requests kept in the broker's request log (kshim.observability.requestlog); 0: off
    # client quotas' rates are measured over this many samples of this many seconds (Kafka's
    # quota.window.num and quota.window.size.seconds)
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    # the group coordinator's settings: session timeouts, heartbeat intervals, share-group limits,
    # and the bounds of the group configs (kshim.configs.groups)
    group_settings: GroupSettings = field(default_factory=GroupSettings)
    # logs a crash left unclean are recovered after the start, while the other partitions serve
    # (kshim.replica.recovery); set by the serving processes, which run BrokerServer (its task
    # recovers them); off: every log is opened before the first image is applied, as a test expects
    recover_in_background: bool = False
    # Kafka's delete.topic.enable: false refuses DeleteTopics with TOPIC_DELETION_DISABLED
    delete_topic_enable: bool = True
    # the Kafka broker configs given by name (--config-file, --override), as given: DescribeConfigs
    # reports them as STATIC_BROKER_CONFIG (kshim.configs.server_properties)
    static_configs: dict[str, str] = field(default_factory=dict)

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host
