"""Every Kafka broker config name, and what kshim does with it: the one table behind
`kshim serve --config-file server.properties --override NAME=VALUE`, DescribeConfigs on a broker
and docs/configs.md.

Each name is one of:
- served: it takes effect. `route` says where the value goes: a `kshim serve` option (the same
  setting: giving both with different values is an error), a topic-config default, a group
  coordinator setting, a BrokerConfig field, or the listener and TLS settings
  (kshim.security.properties).
- no-op: accepted (its value still type-checked) and logged at start, because it cannot apply to
  kshim: a thread pool kshim does not have, a socket buffer the OS sizes, the KRaft quorum of a
  controller that lives in the broker's process.
- refused: the broker does not start, and the message names the config and why; most are
  accepted at Kafka's default value, which is what kshim does (remote.log.storage.system.enable=
  false), and refused at any other.
Names that are no Kafka 4.3 broker config are refused, ZooKeeper-era ones with that reason, as a
misspelt name must not pass unnoticed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Literal

from kshim.configs.definitions import BROKER_CONFIGS, TOPIC_CONFIGS
from kshim.configs.groups import GroupSettings
from kshim.configs.kafka43 import KAFKA_BROKER_CONFIGS
from kshim.security import properties as security_properties

Kind = Literal["served", "no-op", "refused"]
Route = Literal["option", "topic-default", "group", "field", "security", "special", "none"]


@dataclass(frozen=True)
class Entry:
    name: str
    kind: Kind
    why: str  # served: what it sets; no-op and refused: why
    route: Route = "none"
    target: str | None = None  # option: the argparse dest; field: the BrokerConfig field; topic-default: the name
    option: str | None = None  # the kshim serve option of the same setting
    convert: Callable[[str], object] | None = None  # the raw value as the target takes it
    refuse_default: bool = False  # refused even at Kafka's default (no default means kshim's behaviour)
    shown: Callable[[object], str] | None = None  # field: the target's value in the config's unit, when converted


def _int(raw: str) -> int:
    return int(raw.strip())


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{raw!r} is not true or false")
    return value == "true"


def _not(raw: str) -> bool:
    return not _bool(raw)


TABLE: dict[str, Entry] = {}


def _add(entry: Entry) -> None:
    assert entry.name not in TABLE, entry.name
    TABLE[entry.name] = entry


def option(name: str, dest: str, flag: str, why: str, convert: Callable[[str], object] = str) -> None:
    _add(Entry(name, "served", why, "option", dest, flag, convert))


def field(name: str, target: str, why: str, convert: Callable[[str], object] = _int,
          shown: Callable[[object], str] | None = None) -> None:
    _add(Entry(name, "served", why, "field", target, None, convert, shown=shown))


def special(name: str, why: str) -> None:
    _add(Entry(name, "served", why, "special"))


def noop(names: Iterable[str] | str, why: str) -> None:
    for name in (names,) if isinstance(names, str) else names:
        _add(Entry(name, "no-op", why))


def refused(names: Iterable[str] | str, why: str, *, even_default: bool = False) -> None:
    for name in (names,) if isinstance(names, str) else names:
        _add(Entry(name, "refused", why, refuse_default=even_default))


# ---------------------------------------------------------------- served: kshim serve's options
option("num.partitions", "partitions", "--partitions", "Partitions of auto-created topics.", _int)
option("auto.create.topics.enable", "no_auto_create_topics", "--no-auto-create-topics",
       "Metadata and Produce for an unknown topic create it.", _not)
option("socket.request.max.bytes", "max_request_bytes", "--max-request-bytes",
       "The largest request frame accepted; a larger one closes the connection.", _int)
option("queued.max.request.bytes", "queued_max_request_bytes", "--queued-max-request-bytes",
       "Bytes of large requests in flight across all connections before reading pauses "
       "(-1 in Kafka means unbounded; kshim needs a bound).", _int)
option("max.connections", "max_connections", "--max-connections", "Connections open at once.", _int)
option("max.connections.per.ip", "max_connections_per_ip", "--max-connections-per-ip",
       "Connections open at once from one address.", _int)
option("connections.max.idle.ms", "connections_max_idle_ms", "--connections-max-idle-ms",
       "A connection quiet this long is closed.", _int)
option("log.cleaner.io.max.bytes.per.second", "log_cleaner_io_max_bytes_per_second",
       "--log-cleaner-io-max-bytes-per-second", "The log cleaner's read and write rate.",
       lambda raw: int(float(raw)))
option("log.cleaner.dedupe.buffer.size", "log_cleaner_dedupe_buffer_size", "--log-cleaner-dedupe-buffer-size",
       "Memory for the cleaner's key to offset map.", _int)
option("log.cleaner.backoff.ms", "log_cleaner_backoff_ms", "--log-cleaner-backoff-ms",
       "The pause between the cleaner's rounds.", _int)
option("max.incremental.fetch.session.cache.slots", "max_incremental_fetch_session_cache_slots",
       "--max-incremental-fetch-session-cache-slots", "Incremental fetch sessions kept at once.", _int)
option("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms", "--group-initial-rebalance-delay-ms",
       "How long a new classic group's first rebalance waits for more members.", _int)
option("quota.window.num", "quota_window_num", "--quota-window-num", "Samples client quota rates are measured over.",
       _int)
option("quota.window.size.seconds", "quota_window_size_seconds", "--quota-window-size-seconds",
       "The length of one quota sample.", _int)
option("sasl.enabled.mechanisms", "sasl_mechanisms", "--sasl-mechanisms",
       "SASL mechanisms offered on SASL listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER).")
option("ssl.client.auth", "tls_client_auth", "--tls-client-auth",
       "Client certificates on SSL listeners: none, requested or required (SASL_SSL listeners only "
       "with listener.name.<listener>.ssl.client.auth).")
option("connection.failed.authentication.delay.ms", "connection_failed_authentication_delay_ms",
       "--connection-failed-authentication-delay-ms", "A failed authentication is answered after this delay.", _int)
option("connections.max.reauth.ms", "connections_max_reauth_ms", "--connections-max-reauth-ms",
       "SASL sessions last this long (0: no end).", _int)
option("inter.broker.listener.name", "inter_broker_listener", "--inter-broker-listener",
       "The listener brokers replicate and send transaction markers over.")
option("sasl.mechanism.inter.broker.protocol", "inter_broker_sasl_mechanism", "--inter-broker-sasl-mechanism",
       "The SASL mechanism brokers use with each other.")
option("super.users", "super_users", "--super-users", "Principals allowed everything, separated by semicolons.")
option("allow.everyone.if.no.acl.found", "allow_everyone_if_no_acl_found", "--allow-everyone-if-no-acl-found",
       "A resource no ACL applies to is open to everyone.", _bool)
field("transaction.max.timeout.ms", "transaction_max_timeout_ms",
      "The longest transaction timeout a producer may ask for.")
option("replica.lag.time.max.ms", "replica_lag_time_max_ms", "--replica-lag-time-max-ms",
       "A follower that has not caught up for this long leaves the ISR (a cluster; one broker has no followers).",
       _int)
option("broker.session.timeout.ms", "broker_session_timeout_ms", "--broker-session-timeout-ms",
       "A broker without a heartbeat for this long is fenced (a cluster).", _int)
option("default.replication.factor", "replication_factor", "--replication-factor",
       "The replication factor of topics created without one (a cluster; one broker: 1).", _int)

# ---------------------------------------------------------------- served: by meaning, not one option
special("listeners", "The listeners, NAME://HOST:PORT each (--listeners, or --host and --port); those "
        "named in controller.listener.names belong to the in-process controller and are not opened.")
special("log.dirs", "The directories partition logs live in (--log-dirs); the first also holds kshim's metadata "
        "unless --data-dir is given.")
special("log.dir", "The directory partition logs live in, when log.dirs is not given.")
special("advertised.listeners", "The host Metadata names for each listener; the ports must be those listened on.")
special("node.id", "This broker's node id.")
special("broker.id", "This broker's node id (node.id's older name; both given must agree).")
special("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer turns ACLs on "
        "(--authorizer); empty: every request is allowed.")
special("process.roles", "broker,controller: kshim serve is both, its controller in the same process.")
special("security.inter.broker.protocol", "Picks the inter-broker listener by its security protocol, when "
        "inter.broker.listener.name is not given.")
special("log.retention.hours", "log.retention.ms in hours (the ms and minutes forms win when given).")
special("log.retention.minutes", "log.retention.ms in minutes (the ms form wins when given).")
special("log.roll.hours", "log.roll.ms in hours (the ms form wins when given).")
special("log.roll.jitter.hours", "log.roll.jitter.ms in hours (the ms form wins when given).")
field("delete.topic.enable", "delete_topic_enable", "false: DeleteTopics answers TOPIC_DELETION_DISABLED.", _bool)

# ---------------------------------------------------------------- served: topic defaults and group settings
for _topic in TOPIC_CONFIGS.values():
    # a topic config's broker-level default (log.retention.ms, min.insync.replicas, ...)
    if _topic.synonym is not None and BROKER_CONFIGS[_topic.synonym].dynamic and _topic.synonym not in TABLE:
        _add(Entry(_topic.synonym, "served", f"The default of the topic config {_topic.name} for topics that do "
                   "not set it.", "topic-default", _topic.synonym))
for _name in GroupSettings().broker_configs():
    _add(Entry(_name, "served", "A group coordinator setting (the default or bound of a group config).", "group"))

# ZooKeeper mode and what went with it: gone in Kafka 4, refused as there
ZOOKEEPER_ERA = "ZooKeeper mode is gone since Kafka 4.0; kshim, like Kafka 4, runs KRaft only"
_ZOOKEEPER_PREFIXES = ("zookeeper.",)
_ZOOKEEPER_NAMES = frozenset((
    "control.plane.listener.name", "broker.id.generation.enable", "reserved.broker.max.id",
    "inter.broker.protocol.version", "log.message.format.version", "zookeeper.connect",
    "migration.enabled", "zookeeper.metadata.migration.enable", "host.name", "port", "advertised.host.name",
    "advertised.port", "delegation.token.master.key", "log.message.downconversion.enable",
))
_LISTENER_PREFIX = "listener.name."


def lookup(name: str) -> Entry:
    """The entry of a name; names outside the table (misspelt, ZooKeeper-era) come back refused."""
    entry = TABLE.get(name)
    if entry is not None:
        return entry
    if name.startswith(_LISTENER_PREFIX):
        listener, _, suffix = name[len(_LISTENER_PREFIX):].partition(".")
        if listener and suffix in security_properties.LISTENER_SERVED:
            return Entry(name, "served", f"{suffix} on the {listener} listener only.", "security")
        return Entry(name, "refused", f"kshim takes no per-listener {suffix or 'setting'} (served per listener: "
                     f"{', '.join(sorted(security_properties.LISTENER_SERVED))})", refuse_default=True)
    if name in _ZOOKEEPER_NAMES or name.startswith(_ZOOKEEPER_PREFIXES):
        return Entry(name, "refused", ZOOKEEPER_ERA, refuse_default=True)
    return Entry(name, "refused", "not a Kafka 4.3 broker config (a misspelling?)", refuse_default=True)


# ---------------------------------------------------------------- served: the coordinators' settings
field("group.min.session.timeout.ms", "group_min_session_timeout_ms",
      "The shortest session timeout a classic group member may ask for (INVALID_SESSION_TIMEOUT below it).")
field("group.max.session.timeout.ms", "group_max_session_timeout_ms",
      "The longest session timeout a classic group member may ask for.")
field("group.max.size", "group_max_size", "The members a classic group takes; more are GROUP_MAX_SIZE_REACHED.")
field("offsets.retention.minutes", "offsets_retention_ms",
      "An Empty group's committed offsets expire this long after their commit.", lambda raw: int(raw) * 60_000,
      lambda ms: str(ms // 60_000 if isinstance(ms, int) else ms))
field("offsets.retention.check.interval.ms", "offsets_retention_check_interval_ms",
      "How often expired offsets are looked for.")
field("offset.metadata.max.bytes", "offset_metadata_max_bytes",
      "Longer OffsetCommit metadata is OFFSET_METADATA_TOO_LARGE.")
field("offsets.commit.timeout.ms", "offsets_commit_timeout_ms",
      "An offset or group write not committed this soon fails (COORDINATOR_NOT_AVAILABLE).")
field("offsets.topic.num.partitions", "offsets_topic_partitions",
      "Partitions of __consumer_offsets when it is created (kshim's default: 10).")
field("offsets.topic.replication.factor", "offsets_topic_replication_factor",
      "Replication factor of __consumer_offsets when it is created (a cluster with fewer registered brokers gets "
      "one replica on each live one; otherwise its creation waits for that many live brokers).")
field("offsets.topic.segment.bytes", "offsets_topic_segment_bytes", "segment.bytes of __consumer_offsets.")
field("offsets.topic.compression.codec", "offsets_topic_compression_codec",
      "The codec of the group coordinator's writes: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.")
field("transaction.state.log.num.partitions", "transaction_state_partitions",
      "Partitions of __transaction_state when it is created (kshim's default: 10).")
field("transaction.state.log.replication.factor", "transaction_state_replication_factor",
      "Replication factor of __transaction_state when it is created (as offsets.topic.replication.factor).")
field("transaction.state.log.min.isr", "transaction_state_min_isr", "min.insync.replicas of __transaction_state.")
field("transaction.state.log.segment.bytes", "transaction_state_segment_bytes", "segment.bytes of __transaction_state.")
field("transactional.id.expiration.ms", "transactional_id_expiration_ms",
      "A transactional id idle this long is removed (a tombstone in __transaction_state).")
field("transaction.remove.expired.transaction.cleanup.interval.ms",
      "transaction_remove_expired_interval_ms", "How often idle transactional ids are looked for.")
field("producer.id.expiration.ms", "producer_id_expiration_ms",
      "A producer id with no write for this long is forgotten by the partitions (its sequence state dropped).")
field("producer.id.expiration.check.interval.ms", "producer_id_expiration_check_interval_ms",
      "How often the partitions look for expired producer ids (one of Kafka's internal configs).")
_add(Entry("transaction.abort.timed.out.transaction.cleanup.interval.ms", "served",
           "Served as a stricter bound: kshim aborts a transaction at its own deadline (a timer), never later than "
           "this interval's check would."))
field("share.coordinator.state.topic.num.partitions", "share_state_partitions",
      "Partitions of __share_group_state when it is created (kshim's default: 10).")
field("share.coordinator.state.topic.replication.factor", "share_state_replication_factor",
      "Replication factor of __share_group_state when it is created (as offsets.topic.replication.factor).")
field("share.coordinator.state.topic.min.isr", "share_state_min_isr", "min.insync.replicas of __share_group_state.")
field("share.coordinator.state.topic.segment.bytes", "share_state_segment_bytes",
      "segment.bytes of __share_group_state.")
field("log.cleaner.enable", "log_cleaner_enable",
      "false: compacted topics are not cleaned on their own (`kshim ctl compact` still cleans).", _bool)
special("controller.listener.names", "The listeners of the controller, which runs in kshim's broker process: "
        "they are not opened.")
special("group.coordinator.rebalance.protocols", "Must name classic and consumer, which kshim always serves; "
        "share groups are always served, streams groups never.")

# ---------------------------------------------------------------- no-ops: nothing in kshim they could set
_THREADS = "kshim runs one event loop (blocking work in worker threads and the cleaner's process): no pool to size"
noop(("background.threads", "num.io.threads", "num.network.threads", "num.recovery.threads.per.data.dir",
      "num.replica.alter.log.dirs.threads", "num.replica.fetchers", "log.cleaner.threads", "group.coordinator.threads",
      "group.coordinator.background.threads", "share.coordinator.threads"), _THREADS)
noop("queued.max.requests", "kshim bounds queued requests by their bytes (queued.max.request.bytes), not their count")
noop(("socket.send.buffer.bytes", "socket.receive.buffer.bytes", "replica.socket.receive.buffer.bytes",
      "socket.listen.backlog.size"), "the operating system sizes kshim's socket buffers and backlog")
noop(("socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms", "controller.socket.timeout.ms",
      "replica.socket.timeout.ms", "request.timeout.ms"),
     "timeouts of a Kafka broker's own outgoing connections; kshim's followers and controller client keep theirs")
noop(("delete.records.purgatory.purge.interval.requests", "fetch.purgatory.purge.interval.requests",
      "producer.purgatory.purge.interval.requests", "share.fetch.purgatory.purge.interval.requests"),
     "kshim's waiting requests are woken and dropped as they end; there is no purgatory to purge")
noop(("kafka.metrics.polling.interval.secs", "metrics.num.samples", "metrics.recording.level",
      "metrics.sample.window.ms"), "kshim's metrics are Prometheus counters and gauges at /metrics (docs/console.md)")
noop(("log.cleaner.io.buffer.size", "log.cleaner.io.buffer.load.factor"),
     "the cleaner reads whole segments through its own buffers; its budget is log.cleaner.dedupe.buffer.size")
noop(("log.flush.offset.checkpoint.interval.ms", "log.flush.start.offset.checkpoint.interval.ms",
      "replica.high.watermark.checkpoint.interval.ms", "log.flush.scheduler.interval.ms",
      "log.retention.check.interval.ms"),
     "kshim checkpoints at clean stops and as it changes them, and checks retention and flush.ms every second")
noop(("offsets.load.buffer.size", "transaction.state.log.load.buffer.size", "share.coordinator.load.buffer.size",
      "group.coordinator.append.linger.ms", "share.coordinator.append.linger.ms",
      "group.coordinator.cached.buffer.max.bytes", "share.coordinator.cached.buffer.max.bytes",
      "share.coordinator.snapshot.update.records.per.snapshot", "share.coordinator.write.timeout.ms"),
     "buffers and batching of Kafka's coordinator runtime; kshim's coordinators write each change as one batch")
_ONE_CONTROLLER = "kshim's controller is one process (in the broker for `kshim serve`), not a Raft quorum"
noop(("controller.quorum.voters", "controller.quorum.bootstrap.servers", "controller.quorum.append.linger.ms",
      "controller.quorum.auto.join.enable", "controller.quorum.election.backoff.max.ms",
      "controller.quorum.election.timeout.ms", "controller.quorum.fetch.max.bytes",
      "controller.quorum.fetch.snapshot.max.bytes", "controller.quorum.fetch.timeout.ms",
      "controller.quorum.request.timeout.ms", "controller.quorum.retry.backoff.ms", "sasl.mechanism.controller.protocol",
      "initial.broker.registration.timeout.ms", "broker.heartbeat.interval.ms"), _ONE_CONTROLLER)
noop(("metadata.log.dir", "metadata.log.max.record.bytes.between.snapshots", "metadata.log.max.snapshot.interval.ms",
      "metadata.log.segment.bytes", "metadata.log.segment.ms", "metadata.max.idle.interval.ms",
      "metadata.max.retention.bytes", "metadata.max.retention.ms"),
     "kshim keeps its metadata in its own store (metadata.sqlite in the data dir, or the cluster controller's), "
     "not a metadata log")
noop(("replica.fetch.backoff.ms", "replica.fetch.max.bytes", "replica.fetch.min.bytes",
      "replica.fetch.response.max.bytes", "replica.fetch.wait.max.ms"),
     "kshim's followers size and pace their fetches themselves (docs/cluster.md)")
noop(("alter.log.dirs.replication.quota.window.num", "alter.log.dirs.replication.quota.window.size.seconds",
      "replication.quota.window.num", "replication.quota.window.size.seconds", "controller.quota.window.num",
      "controller.quota.window.size.seconds"),
     "kshim measures every client quota over quota.window.num and quota.window.size.seconds; replication is "
     "not throttled")
noop(("auto.leader.rebalance.enable", "leader.imbalance.check.interval.seconds"),
     "kshim moves leadership back to the preferred replica only when asked (ElectLeaders, "
     "kafka-leader-election.sh), never on its own")
noop("replica.selector.class", "kshim's consumers always fetch from the leader (no preferred read replica, "
     "KIP-392); they fall back to it as they do when a Kafka broker names none")
noop(("add.partitions.to.txn.retry.backoff.max.ms", "add.partitions.to.txn.retry.backoff.ms"),
     "kshim's partition leaders verify transactions in their own process; nothing is retried")
noop("early.start.listeners", "kshim opens every listener once its logs are open")
noop("log.dir.failure.timeout.ms", "a failed log dir takes its partitions offline at once (docs/storage.md)")
noop("fetch.max.bytes", "a fetch response is bounded by the request's own max_bytes")
noop(("group.consumer.assignment.interval.ms", "group.consumer.min.assignment.interval.ms",
      "group.consumer.max.assignment.interval.ms", "group.share.assignment.interval.ms",
      "group.share.min.assignment.interval.ms", "group.share.max.assignment.interval.ms"),
     "kshim computes a target assignment at the heartbeat that needs it, never batched")
noop(("sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", "sasl.login.refresh.buffer.seconds",
      "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
      "sasl.login.retry.backoff.max.ms", "sasl.login.retry.backoff.ms"),
     "the broker's own SASL login is its inter-broker user's password; no token is fetched or refreshed")
noop("sasl.server.max.receive.size", "kshim bounds a SASL exchange by socket.request.max.bytes")
noop("telemetry.max.bytes", "kshim takes telemetry pushes up to its own bound (docs/telemetry.md)")
noop("broker.rack", "kshim reports no rack for its brokers; rack-aware clients then fetch and place as without racks")

# ---------------------------------------------------------------- refused unless at Kafka's default
_JAVA_CLASS = "kshim loads no Java classes"
refused(("alter.config.policy.class.name", "create.topic.policy.class.name", "client.quota.callback.class",
         "metric.reporters", "kafka.metrics.reporters", "config.providers"), _JAVA_CLASS)
refused("controlled.shutdown.enable", "kshim's brokers always hand their leaders over before they stop")
refused("cordoned.log.dirs", "kshim places new replicas on any log dir (docs/storage.md); none can be cordoned")
refused(("delegation.token.expiry.check.interval.ms", "delegation.token.expiry.time.ms",
         "delegation.token.max.lifetime.ms", "delegation.token.secret.key"), "kshim has no delegation tokens")
refused(("follower.fetch.last.tiered.offset.enable", *[n for n in KAFKA_BROKER_CONFIGS if n.startswith("remote.")]),
        "kshim has no tiered storage: every segment stays local")
refused(("leader.replication.throttled.rate", "follower.replication.throttled.rate",
         "replica.alter.log.dirs.io.max.bytes.per.second"), "kshim does not throttle replication")
refused(("max.connection.creation.rate", "max.connections.per.ip.overrides"),
        "kshim bounds connections by max.connections and max.connections.per.ip only")
refused("max.request.partition.size.limit", "kshim does not bound the partitions of one request")
refused(("group.consumer.assignors",), "kshim's consumer groups assign with its uniform and range assignors, "
        "as Kafka's default names them")
refused(("group.consumer.max.size", "group.consumer.migration.policy", "group.share.assignors",
         "group.share.max.share.sessions"), "kshim's groups have no such setting (docs/share_groups.md)")
refused([n for n in KAFKA_BROKER_CONFIGS if n.startswith("group.streams.")], "kshim has no streams groups (KIP-1071)")
refused(("transaction.partition.verification.enable",), "kshim's leaders always verify transactional writes "
        "(KIP-890)")
refused("transaction.two.phase.commit.enable", "kshim has no two-phase commit transactions (KIP-939)")
refused([n for n in KAFKA_BROKER_CONFIGS if n.startswith(("sasl.kerberos.", "sasl.oauthbearer."))],
        "kshim's SASL is PLAIN, SCRAM and unsecured OAUTHBEARER: no Kerberos, no OAuth JWT validation")
refused("share.coordinator.state.topic.compression.codec", "the share coordinator writes its records uncompressed")

# ---------------------------------------------------------------- not Kafka 4.3 configs, yet still written
_IGNORED = "no Kafka 4.3 broker config: Kafka 4 ignores it with a warning, and so does kshim"
AUTHORIZER_CONFIGS = ("super.users", "allow.everyone.if.no.acl.found")  # read by Kafka's authorizer, not KafkaConfig
LEFTOVERS = ("port", "host.name", "advertised.host.name", "advertised.port", "reserved.broker.max.id",
             "broker.id.generation.enable", "offsets.topic.min.isr",
             "inter.broker.protocol.version", "log.message.format.version", "control.plane.listener.name")
noop(LEFTOVERS, _IGNORED)
# Kafka's internal configs (defined, accepted, not in its docs) that kshim cannot apply
INTERNAL_CONFIGS = ("producer.id.expiration.check.interval.ms", "unstable.api.versions.enable",
                    "unstable.feature.versions.enable", "log.initial.task.delay.ms", "server.max.startup.time.ms")
noop(("log.initial.task.delay.ms", "server.max.startup.time.ms"), "a Kafka internal config; kshim starts its "
     "housekeeping at once and has no start-up deadline")
INTERNAL_DEFAULTS = {"unstable.api.versions.enable": "false", "unstable.feature.versions.enable": "false"}
refused(tuple(INTERNAL_DEFAULTS), "kshim advertises only the API and feature versions it serves in full")

# ---------------------------------------------------------------- listeners and TLS (kshim.security.properties)
for _name in security_properties.SERVED:
    if _name not in TABLE:
        _add(Entry(_name, "served", security_properties.describe(_name), "security"))
for _name, _why in security_properties.REFUSED.items():
    if _name not in TABLE:
        _add(Entry(_name, "refused", _why))
