"""A broker's static settings, as `kshim serve` (or a test) gives them. DescribeConfigs reports them
under Kafka's broker config names (kshim.configs.resolver.broker_settings)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path("kshim-data")
    default_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics: bool = True
    max_request_bytes: int = 100 * 1024 * 1024
    node_id: int = 0
    advertised_host: str | None = None  # what Metadata tells clients; defaults to host
    topic_defaults: dict[str, str] = field(default_factory=dict)  # broker-level topic config defaults
    offsets_topic_partitions: int = 10  # partitions of __consumer_offsets when it is first created
    transaction_state_partitions: int = 10  # partitions of __transaction_state when it is first created
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host
