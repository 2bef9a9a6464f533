"""The cluster metadata image: what the controller decided, as every broker sees it.

The controller owns this state and publishes a new image (with a higher version) on every
change; brokers apply images in version order and never edit them. Frozen dataclasses, so an
image can be shared between tasks without copies.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Sequence

from kshim.errors import BrokerError
from kshim.security.acls import AclBinding
from wire.errors import ErrorCode

NO_LEADER = -1


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    epoch: int = 0  # bumped at every registration; fences requests from a previous incarnation
    alive: bool = True  # registered and heartbeating (not fenced)
    isolated: bool = False  # replication traffic cut on purpose (`kshim ctl isolate`)
    pid: int = 0


@dataclass(frozen=True)
class PartitionInfo:
    index: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0  # bumped at every change of leader or ISR (AlterPartition fencing)
    # a reassignment under way (KIP-455): `replicas` holds the target replicas, then those being
    # removed; the adding ones join the ISR as they catch up, then the controller drops the removing
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    def replica_state(self, node: int, alive: bool) -> str:
        """A replica's state in Kafka's replica state machine, as `kshim ctl status` shows it:
        offline (its broker is down), adding or removing (a reassignment), else online."""
        if not alive:
            return "offline"
        if node in self.adding:
            return "adding"
        if node in self.removing:
            return "removing"
        return "online"


def completes_reassignment(replicas: Sequence[int], adding: Sequence[int], removing: Sequence[int],
                           isr: Sequence[int]) -> bool:
    """Whether this ISR completes the reassignment under way: it holds every target replica (the
    replicas not being removed). The controller completes a move by this rule
    (kshim.controller.reassignments); the leader proposes the ISR that does (kshim.replication.isr)."""
    return bool(adding or removing) and all(r in isr for r in replicas if r not in removing)


def replica_status(p: PartitionInfo, alive: set[int], offsets: dict[str, dict[str, int]]) -> dict[str, dict]:
    """Each replica of p as `kshim ctl status` shows it: its state (PartitionInfo.replica_state),
    whether it is in the ISR, and its lag behind the leader's log end in records (None until both
    reported their offsets; `offsets` maps node ids, as str, to their reported log_end_offset)."""
    leader_end = offsets.get(str(p.leader), {}).get("log_end_offset")
    out = {}
    for r in p.replicas:
        end = offsets.get(str(r), {}).get("log_end_offset")
        out[str(r)] = {"state": p.replica_state(r, r in alive), "in_sync": r in p.isr,
                       "lag": None if end is None or leader_end is None else max(leader_end - end, 0)}
    return out


# Feature flags (KIP-584) as Kafka 4.3 names them: what kshim supports, and what a new cluster
# finalizes. metadata.version is kshim's level only: its metadata is no KRaft log whose records a
# lower level would change. group.version 1 enables the consumer rebalance protocol (KIP-848); 0
# turns ConsumerGroupHeartbeat away. share.version 1 enables share groups (KIP-932; Kafka 4.3's
# clients use them only when it is finalized); 0 turns ShareGroupHeartbeat away. transaction.version 2 (KIP-890 part 2, the default as in Kafka
# 4): clients add partitions implicitly with Produce v12+ / TxnOffsetCommit v5 and EndTxn v5 bumps
# the epoch; at 0 or 1 clients keep the v1 protocol (the broker still verifies transactional
# produce, part 1, as Kafka does at every level).
METADATA_VERSION = "metadata.version"
GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"  # 1 enables share groups (KIP-932); 0 turns their APIs away
KSHIM_METADATA_VERSION = 30  # Kafka 4.3-IV0
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (KSHIM_METADATA_VERSION, KSHIM_METADATA_VERSION),
    GROUP_VERSION: (0, 1),
    SHARE_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 2),
}
DEFAULT_FEATURES: dict[str, int] = {METADATA_VERSION: KSHIM_METADATA_VERSION, GROUP_VERSION: 1, SHARE_VERSION: 1,
                                    TRANSACTION_VERSION: 2}


# Kafka's internal topics that kshim has; only the broker's own coordinators write them
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def refuse_internal(name: str, action: str) -> None:
    """INVALID_TOPIC_EXCEPTION, as Kafka answers a produce or DeleteRecords to an internal topic:
    a client must not forge group offsets or transaction state, nor delete or reshape them."""
    if name in INTERNAL_TOPICS:
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot {action} internal topic {name}")


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str] = field(hash=False, compare=True)
    partitions: tuple[PartitionInfo, ...] = ()

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass(frozen=True)
class ScramEntry:
    """A user's SCRAM credential as the controller stores it (salted; never the password), base64."""
    user: str
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    salt: str
    stored_key: str
    server_key: str
    iterations: int


@dataclass(frozen=True)
class QuotaEntityPart:
    type: str  # "user", "client-id" or "ip"
    name: str | None  # None: the type's default entity


@dataclass(frozen=True)
class ClientQuota:
    """The quotas set on one entity (kshim.configs.quotas), its parts sorted by type."""
    entity: tuple[QuotaEntityPart, ...]
    values: dict[str, float] = field(hash=False, compare=True)


@dataclass(frozen=True)
class MetadataImage:
    version: int
    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerInfo] = field(hash=False, default_factory=dict)
    topics: dict[str, TopicInfo] = field(hash=False, default_factory=dict)
    # dynamic broker configs set with AlterConfigs: "" holds the cluster-wide defaults, str(node id)
    # one broker's own settings (kshim.configs.BrokerLevel reads them)
    broker_configs: dict[str, dict[str, str]] = field(hash=False, default_factory=dict)
    # finalized feature levels (a feature at level 0 is absent) and the image version that set them
    features: dict[str, int] = field(hash=False, default_factory=lambda: dict(DEFAULT_FEATURES))
    features_epoch: int = -1

    acls: tuple[AclBinding, ...] = ()  # every broker's authorizer enforces these (kshim.security.acls)
    # SCRAM credentials set with AlterUserScramCredentials, every broker authenticates with them
    scram: tuple[ScramEntry, ...] = ()
    # client quotas set with AlterClientQuotas, in no particular order
    client_quotas: tuple[ClientQuota, ...] = ()
    # client-metrics subscriptions (KIP-714): name -> configs (kshim.configs.client_metrics)
    client_metrics: dict[str, dict[str, str]] = field(hash=False, default_factory=dict)
    # group configs set with AlterConfigs on GROUP resources: group id -> its overrides
    # (kshim.configs.groups.group_config reads them)
    group_configs: dict[str, dict[str, str]] = field(hash=False, default_factory=dict)

    def feature(self, name: str) -> int:
        return self.features.get(name, 0)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def alive_brokers(self) -> list[BrokerInfo]:
        return [b for b in sorted(self.brokers.values(), key=lambda b: b.node_id) if b.alive]
