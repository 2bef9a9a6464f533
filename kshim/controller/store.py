"""Cluster metadata that must survive restarts: cluster id, topics, partition counts, topic configs,
dynamic broker configs, group configs, SCRAM credentials (salted), client quotas, partition state (replicas,
leader, leader epoch, ISR, and a reassignment's adding and removing replicas), the replicas a
broker that was down has yet to delete, registered brokers, ACLs, and the producer-id counter.
Only the controller writes it.

SQLite (stdlib) because it gives atomic, crash-safe updates of small relational state with no
format of our own to get wrong, and a user can inspect it with the `sqlite3` shell. Record data
never goes here: it lives in the partition logs.
"""
from __future__ import annotations

import json
import sqlite3
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kshim.cluster.image import ScramEntry
from kshim.security.acls import AclBinding

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cluster (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    topic_id TEXT NOT NULL UNIQUE,
    partitions INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS partitions (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    replicas TEXT NOT NULL,
    leader INTEGER NOT NULL,
    leader_epoch INTEGER NOT NULL,
    isr TEXT NOT NULL,
    partition_epoch INTEGER NOT NULL,
    adding TEXT NOT NULL DEFAULT '[]',  -- a reassignment under way: replicas being added
    removing TEXT NOT NULL DEFAULT '[]',  -- and being removed (KIP-455)
    PRIMARY KEY (topic, idx)
);
CREATE TABLE IF NOT EXISTS pending_deletions (
    -- replicas whose broker has not yet applied the image that removed them (topic deleted,
    -- reassigned away): `kshim ctl status` shows them as deleting until it has
    topic TEXT NOT NULL,
    topic_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    node INTEGER NOT NULL,
    version INTEGER NOT NULL,  -- the image version that removed it
    PRIMARY KEY (topic_id, idx, node)
);
CREATE TABLE IF NOT EXISTS brokers (
    node_id INTEGER PRIMARY KEY,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    pid INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS broker_configs (
    resource TEXT NOT NULL,  -- '' for the cluster-wide defaults, else a node id
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (resource, key)
);
CREATE TABLE IF NOT EXISTS group_configs (
    group_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (group_id, key)
);
CREATE TABLE IF NOT EXISTS acls (
    resource_type INTEGER NOT NULL,
    resource_name TEXT NOT NULL,
    pattern_type INTEGER NOT NULL,
    principal TEXT NOT NULL,
    host TEXT NOT NULL,
    operation INTEGER NOT NULL,
    permission INTEGER NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission)
);
CREATE TABLE IF NOT EXISTS scram_credentials (
    user TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    salt TEXT NOT NULL,
    stored_key TEXT NOT NULL,
    server_key TEXT NOT NULL,
    iterations INTEGER NOT NULL,
    PRIMARY KEY (user, mechanism)
);
CREATE TABLE IF NOT EXISTS client_metrics (  -- KIP-714 subscriptions: CLIENT_METRICS config resources
    name TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (name, key)
);
CREATE TABLE IF NOT EXISTS client_quotas (
    entity TEXT NOT NULL,  -- JSON [[type, name or null], ...], sorted by type
    key TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (entity, key)
);
CREATE TABLE IF NOT EXISTS topic_configs (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (topic, key)
);
"""


@dataclass
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    created_ms: int
    configs: dict[str, str] = field(default_factory=dict)
    partition_states: list[PartitionRow] = field(default_factory=list)


@dataclass
class PartitionRow:
    index: int
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0
    adding: list[int] = field(default_factory=list)  # a reassignment under way (KIP-455)
    removing: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class PendingDeletion:
    """A replica removed from a broker that has not yet applied the image that removed it."""
    topic: str
    topic_id: uuid.UUID
    index: int
    node: int
    version: int


@dataclass
class BrokerRow:
    node_id: int
    host: str
    port: int
    epoch: int
    pid: int  # STOPPED_PID once it stopped cleanly (controlled shutdown)


STOPPED_PID = -1


class MetadataStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None)  # autocommit; explicit transactions below
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.execute("PRAGMA journal_mode = WAL")
        # one transaction: in autocommit each CREATE would be a commit (and a WAL sync) of its own
        self._db.executescript(f"BEGIN;{_SCHEMA}COMMIT;")
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(partitions)")}
        for column in ("adding", "removing"):  # a data dir from before reassignments
            if column not in columns:
                self._db.execute(f"ALTER TABLE partitions ADD COLUMN {column} TEXT NOT NULL DEFAULT '[]'")

    def close(self) -> None:
        self._db.close()

    def cluster_value(self, key: str, make: str) -> str:
        """The stored value for key, storing `make` first if there is none."""
        row = self._db.execute("SELECT value FROM cluster WHERE key = ?", (key,)).fetchone()
        if row:
            return row[0]
        self._db.execute("INSERT INTO cluster (key, value) VALUES (?, ?)", (key, make))
        return make

    def load_features(self) -> dict[str, int] | None:
        """The finalized feature levels UpdateFeatures stored (level 0 included); None if never."""
        rows = self._db.execute("SELECT key, value FROM cluster WHERE key LIKE 'feature:%'").fetchall()
        return {key.removeprefix("feature:"): int(value) for key, value in rows} or None

    def save_features(self, levels: dict[str, int], epoch: int) -> None:
        """Every finalized level and the features epoch, in one transaction."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            for name, level in levels.items():
                self._db.execute("INSERT OR REPLACE INTO cluster (key, value) VALUES (?, ?)", (f"feature:{name}", str(level)))
            self._db.execute("INSERT OR REPLACE INTO cluster (key, value) VALUES ('features_epoch', ?)", (str(epoch),))

    def allocate_producer_ids(self, count: int = 1) -> int:
        """Reserve `count` producer ids; returns the first. Never hands out an id twice, even after a crash."""
        return self.reserve("next_producer_id", count)

    def reserve(self, key: str, count: int, at_least: int = 0) -> int:
        """Reserve `count` values of the counter `key`, from at least `at_least`; returns the first.
        Committed before it returns: a crash never hands out a value twice."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute("SELECT value FROM cluster WHERE key = ?", (key,)).fetchone()
            first = max(int(row[0]) if row else 0, at_least)
            self._db.execute("INSERT OR REPLACE INTO cluster (key, value) VALUES (?, ?)", (key, str(first + count)))
        return first

    def load_topics(self) -> list[TopicRecord]:
        topics = {name: TopicRecord(name, uuid.UUID(tid), parts, created)
                  for name, tid, parts, created in self._db.execute(
                      "SELECT name, topic_id, partitions, created_ms FROM topics")}
        for topic, key, value in self._db.execute("SELECT topic, key, value FROM topic_configs"):
            topics[topic].configs[key] = value
        for row in self._db.execute("SELECT topic, idx, replicas, leader, leader_epoch, isr, partition_epoch, adding, "
                                    "removing FROM partitions ORDER BY topic, idx"):
            topics[row[0]].partition_states.append(
                PartitionRow(row[1], json.loads(row[2]), row[3], row[4], json.loads(row[5]), row[6],
                             json.loads(row[7]), json.loads(row[8])))
        return list(topics.values())

    def save_partitions(self, topic: str, rows: list[PartitionRow],
                        deletions: list[PendingDeletion] | None = None) -> None:
        """Partition states, and the replicas they no longer hold (`deletions`), in one transaction."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(_SAVE_PARTITION, [_partition_row(topic, r) for r in rows])
            self._add_deletions(deletions or [])

    def _add_deletions(self, deletions: list[PendingDeletion]) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO pending_deletions (topic, topic_id, idx, node, version) VALUES (?, ?, ?, ?, ?)",
            [(d.topic, str(d.topic_id), d.index, d.node, d.version) for d in deletions])

    def load_pending_deletions(self) -> list[PendingDeletion]:
        return [PendingDeletion(topic, uuid.UUID(tid), idx, node, version) for topic, tid, idx, node, version in
                self._db.execute("SELECT topic, topic_id, idx, node, version FROM pending_deletions "
                                 "ORDER BY topic, idx, node")]

    def forget_deletions(self, done: list[PendingDeletion]) -> None:
        """Replicas their broker has removed (or will never remove: it was unregistered)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("DELETE FROM pending_deletions WHERE topic_id = ? AND idx = ? AND node = ?",
                                 [(str(d.topic_id), d.index, d.node) for d in done])

    def load_brokers(self) -> list[BrokerRow]:
        return [BrokerRow(*row) for row in self._db.execute("SELECT node_id, host, port, epoch, pid FROM brokers")]

    def save_broker(self, row: BrokerRow) -> None:
        self._db.execute("INSERT OR REPLACE INTO brokers (node_id, host, port, epoch, pid) VALUES (?, ?, ?, ?, ?)",
                         (row.node_id, row.host, row.port, row.epoch, row.pid))

    def delete_broker(self, node_id: int, epoch: int) -> None:
        """Forget a broker (UnregisterBroker), remembering its epoch: a later registration of the
        same id must get a higher one."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM brokers WHERE node_id = ?", (node_id,))
            self._db.execute("INSERT OR REPLACE INTO cluster (key, value) VALUES (?, ?)",
                             (f"unregistered_epoch:{node_id}", str(epoch)))

    def unregistered_epoch(self, node_id: int) -> int:
        """The epoch an unregistered broker last had (0 if it never was unregistered)."""
        row = self._db.execute("SELECT value FROM cluster WHERE key = ?", (f"unregistered_epoch:{node_id}",)).fetchone()
        return int(row[0]) if row else 0

    def create_topic(self, record: TopicRecord) -> None:
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("INSERT INTO topics (name, topic_id, partitions, created_ms) VALUES (?, ?, ?, ?)",
                             (record.name, str(record.topic_id), record.partitions, record.created_ms))
            self._db.executemany("INSERT INTO topic_configs (topic, key, value) VALUES (?, ?, ?)",
                                 [(record.name, k, v) for k, v in record.configs.items()])
            self._db.executemany(_SAVE_PARTITION, [_partition_row(record.name, r) for r in record.partition_states])

    def delete_topic(self, name: str, deletions: list[PendingDeletion] | None = None) -> None:
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM topics WHERE name = ?", (name,))
            self._add_deletions(deletions or [])

    def set_partition_count(self, name: str, partitions: int) -> None:
        self._db.execute("UPDATE topics SET partitions = ? WHERE name = ?", (partitions, name))

    def replace_configs(self, name: str, configs: dict[str, str]) -> None:
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM topic_configs WHERE topic = ?", (name,))
            self._db.executemany("INSERT INTO topic_configs (topic, key, value) VALUES (?, ?, ?)",
                                 [(name, k, v) for k, v in configs.items()])

    def load_scram(self) -> list[ScramEntry]:
        return [ScramEntry(*row) for row in self._db.execute(
            "SELECT user, mechanism, salt, stored_key, server_key, iterations FROM scram_credentials "
            "ORDER BY user, mechanism")]

    def alter_scram(self, deletions: list[tuple[str, str]], upsertions: list[ScramEntry]) -> None:
        """Delete (user, mechanism) credentials and insert or replace others, in one transaction."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("DELETE FROM scram_credentials WHERE user = ? AND mechanism = ?", deletions)
            self._db.executemany(
                "INSERT OR REPLACE INTO scram_credentials (user, mechanism, salt, stored_key, server_key, iterations) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(e.user, e.mechanism, e.salt, e.stored_key, e.server_key, e.iterations) for e in upsertions])

    def load_broker_configs(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for resource, key, value in self._db.execute("SELECT resource, key, value FROM broker_configs"):
            out.setdefault(resource, {})[key] = value
        return out

    def replace_broker_configs(self, resource: str, configs: dict[str, str]) -> None:
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM broker_configs WHERE resource = ?", (resource,))
            self._db.executemany("INSERT INTO broker_configs (resource, key, value) VALUES (?, ?, ?)",
                                 [(resource, k, v) for k, v in configs.items()])

    def load_client_metrics(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for name, key, value in self._db.execute("SELECT name, key, value FROM client_metrics"):
            out.setdefault(name, {})[key] = value
        return out

    def replace_client_metrics(self, name: str, configs: dict[str, str]) -> None:
        """A subscription's whole set of configs (empty: the subscription goes)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM client_metrics WHERE name = ?", (name,))
            self._db.executemany("INSERT INTO client_metrics (name, key, value) VALUES (?, ?, ?)",
                                 [(name, k, v) for k, v in configs.items()])

    def load_group_configs(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for group_id, key, value in self._db.execute("SELECT group_id, key, value FROM group_configs"):
            out.setdefault(group_id, {})[key] = value
        return out

    def replace_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM group_configs WHERE group_id = ?", (group_id,))
            self._db.executemany("INSERT INTO group_configs (group_id, key, value) VALUES (?, ?, ?)",
                                 [(group_id, k, v) for k, v in configs.items()])

    def load_acls(self) -> list[AclBinding]:
        return [AclBinding(*row) for row in self._db.execute(
            "SELECT resource_type, resource_name, pattern_type, principal, host, operation, permission "
            "FROM acls ORDER BY rowid")]

    def change_acls(self, add: list[AclBinding], remove: list[AclBinding]) -> None:
        """Add and remove bindings in one transaction (adding one that exists is a no-op)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "DELETE FROM acls WHERE resource_type = ? AND resource_name = ? AND pattern_type = ? "
                "AND principal = ? AND host = ? AND operation = ? AND permission = ?", [_acl_row(a) for a in remove])
            self._db.executemany(
                "INSERT OR IGNORE INTO acls (resource_type, resource_name, pattern_type, principal, host, operation, "
                "permission) VALUES (?, ?, ?, ?, ?, ?, ?)", [_acl_row(a) for a in add])


    def load_client_quotas(self) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
        out: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = {}
        for entity, key, value in self._db.execute("SELECT entity, key, value FROM client_quotas"):
            out.setdefault(tuple((t, n) for t, n in json.loads(entity)), {})[key] = value
        return out

    def replace_client_quotas(self, changes: dict[tuple[tuple[str, str | None], ...], dict[str, float]]) -> None:
        """Each entity's whole set of quotas (an empty set removes the entity), in one transaction."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            for entity, values in changes.items():
                text = json.dumps([list(part) for part in entity])
                self._db.execute("DELETE FROM client_quotas WHERE entity = ?", (text,))
                self._db.executemany("INSERT INTO client_quotas (entity, key, value) VALUES (?, ?, ?)",
                                     [(text, k, v) for k, v in values.items()])


_SAVE_PARTITION = ("INSERT OR REPLACE INTO partitions (topic, idx, replicas, leader, leader_epoch, isr, partition_epoch, "
                   "adding, removing) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")


def _partition_row(topic: str, r: PartitionRow) -> tuple:
    return (topic, r.index, json.dumps(r.replicas), r.leader, r.leader_epoch, json.dumps(r.isr), r.partition_epoch,
            json.dumps(r.adding), json.dumps(r.removing))


def _acl_row(a: AclBinding) -> tuple:
    return (a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation, a.permission)
