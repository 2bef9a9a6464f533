"""A broker's static settings, as `kshim serve` (or a test) gives them. DescribeConfigs reports them
under Kafka's broker config names (kshim.configs.resolver.broker_settings)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kshim.configs.groups import GroupSettings
from kshim.security.acls import AuthorizerConfig
from kshim.security.config import SecurityConfig


# the memory a hosted partition replica is budgeted (kshim.tuning.default_partition_budget): an
# idle one measures 9-11 KiB of RSS (docs/benchmarks.md), the rest is room for a busy one's state
BYTES_PER_PARTITION = 32 * 1024


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
    max_partitions_per_broker: int = 10_000  # serve sets it from the memory unless given (kshim.tuning)
    node_id: int = 0
    advertised_host: str | None = None  # what Metadata tells clients; defaults to host
    topic_defaults: dict[str, str] = field(default_factory=dict)  # broker-level topic config defaults
    # the classic group coordinator (kshim.coordinator.groups): JoinGroup's bounds on a member's
    # session timeout (group.min.session.timeout.ms, group.max.session.timeout.ms) and on a
    # group's members (group.max.size)
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    # committed offsets: an Empty group's offsets expire this long after their commit
    # (offsets.retention.minutes, here in ms: 7 days), looked for this often
    # (offsets.retention.check.interval.ms); an OffsetCommit's metadata longer than
    # offset.metadata.max.bytes is OFFSET_METADATA_TOO_LARGE; an offset or group write not
    # COMMITTED within offsets.commit.timeout.ms fails (COORDINATOR_NOT_AVAILABLE)
    offsets_retention_ms: int = 10_080 * 60_000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    offsets_commit_timeout_ms: int = 5000
    # __consumer_offsets as it is first created: partitions (offsets.topic.num.partitions: Kafka's
    # default is 50, kshim's 10), replication factor (offsets.topic.replication.factor; see
    # kshim.coordinator.runtime.internal_replication_factor for a cluster smaller than it),
    # segment.bytes (offsets.topic.segment.bytes); the coordinator's writes are compressed with
    # offsets.topic.compression.codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)
    offsets_topic_partitions: int = 10
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_topic_compression_codec: int = 0
    # __transaction_state as it is first created: partitions (transaction.state.log.num.partitions:
    # Kafka's default is 50, kshim's 10), replication factor and min.insync.replicas
    # (transaction.state.log.replication.factor, transaction.state.log.min.isr), segment.bytes
    # (transaction.state.log.segment.bytes)
    transaction_state_partitions: int = 10
    transaction_state_replication_factor: int = 3
    transaction_state_min_isr: int = 2
    transaction_state_segment_bytes: int = 100 * 1024 * 1024
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    # a transactional id idle (no transaction) this long is removed, a tombstone written to
    # __transaction_state (transactional.id.expiration.ms); looked for this often
    # (transaction.remove.expired.transaction.cleanup.interval.ms)
    transactional_id_expiration_ms: int = 604_800_000
    transaction_remove_expired_interval_ms: int = 3_600_000
    # a partition forgets an idempotent producer (its epoch and sequence numbers) once its last
    # batch is this old and it has no open transaction (producer.id.expiration.ms); looked for this
    # often (producer.id.expiration.check.interval.ms)
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
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
    # __share_group_state as it is first created, as the offsets and transaction-state topics
    # (share.coordinator.state.topic.num.partitions: Kafka's default is 50, kshim's 10;
    # .replication.factor, .min.isr, .segment.bytes)
    share_state_partitions: int = 10
    share_state_replication_factor: int = 3
    share_state_min_isr: int = 2
    share_state_segment_bytes: int = 100 * 1024 * 1024
    # Kafka's log.cleaner.enable: false leaves compacted logs uncleaned (`kshim ctl compact` still cleans)
    log_cleaner_enable: bool = True
    # the Kafka broker configs given by name (--config-file, --override), as given: DescribeConfigs
    # reports them as STATIC_BROKER_CONFIG (kshim.configs.server_properties)
    static_configs: dict[str, str] = field(default_factory=dict)

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host
