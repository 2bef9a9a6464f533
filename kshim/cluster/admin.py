"""A broker's local admin socket, ``<broker data dir>/broker.sock``: the control-plane RPC
(kshim.controller.rpc, operations served by ``Server.BROKER``) for `kshim ctl` commands that concern
one broker's own replicas or requests and have no Kafka API: `kshim ctl compact`, `kshim ctl fault`
(this broker's fault rules, kshim.observability.faults), `kshim ctl requests` (its request log, kshim.observability.requestlog),
`kshim ctl groups` (the in-flight records of the share partitions it leads),
for the console (kshim.console) the replicas' offsets and the broker's metrics, and for `kshim ctl groups`
and `txns` the inter-broker identity they connect with (ClientProperties). Served by `kshim serve`
(single broker: ``<data-dir>/broker.sock``) and by each broker process of a cluster
(``<data-dir>/broker-i/broker.sock``). Unix socket only (mode 0600): nothing listens on the network.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable, Mapping, Protocol

import anyio

from kshim.cluster.image import MetadataImage, replica_status
from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.errors import BrokerError
from kshim.observability.faults import FaultError, FaultRules
from kshim.observability.requestlog import RequestLog
from kshim.replica.manager import ReplicaManager
from wire.errors import ErrorCode

log = logging.getLogger("kshim.cluster.admin")
SOCKET_NAME = "broker.sock"


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_NAME


class AdminHost(Protocol):
    """What the admin socket uses of the Broker."""
    node_id: int
    replica_manager: ReplicaManager
    image: MetadataImage

    @property
    def topics(self) -> Mapping[str, object]: ...


class BrokerAdmin:
    def __init__(self, broker: AdminHost, metrics: Callable[[], bytes] | None = None, faults: FaultRules | None = None,
                 requests: RequestLog | None = None, share_in_flight: Callable[[str], list[dict]] | None = None,
                 telemetry: Callable[[], list[dict]] | None = None,
                 client_properties: Mapping[str, str] | None = None) -> None:
        self.broker = broker
        self.share_in_flight_of = share_in_flight
        self.telemetry = telemetry
        self._client_properties = dict(client_properties or {})  # the inter-broker identity (a password)
        self.metrics = metrics
        self.faults = faults if faults is not None else FaultRules()
        self.requests = requests if requests is not None else RequestLog(0)

    async def replica_states(self) -> str:
        return json.dumps(replica_states(self.broker))

    async def metrics_text(self) -> str:
        if self.metrics is None:
            raise BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR, "this broker keeps no metrics")
        return self.metrics().decode()

    async def broker_status(self) -> str:
        image = self.broker.image
        me = self.broker.node_id
        offsets = {(p.topic, p.index): {"log_end_offset": p.log_end_offset, "high_watermark": p.high_watermark}
                   for p in self.broker.replica_manager.replicas()}
        brokers = [{"id": b.node_id, "host": b.host, "port": b.port, "pid": os.getpid() if b.node_id == me else b.pid,
                    "alive": b.alive, "isolated": b.isolated, "epoch": b.epoch, "process": "running"}
                   for b in sorted(image.brokers.values(), key=lambda b: b.node_id)]
        alive = {b.node_id for b in image.brokers.values() if b.alive}
        partitions = []
        for t in sorted(image.topics.values(), key=lambda t: t.name):
            for p in t.partitions:
                reported = {str(me): offsets[(t.name, p.index)]} if (t.name, p.index) in offsets else {}
                partitions.append({"topic": t.name, "partition": p.index, "leader": p.leader,
                                   "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                                   "replicas": list(p.replicas), "isr": list(p.isr), "adding": list(p.adding),
                                   "removing": list(p.removing), "replica_offsets": reported,
                                   "replica_states": replica_status(p, alive, reported)})
        return json.dumps({"cluster_id": image.cluster_id, "mode": "single broker (kshim serve)",
                           "supervisor": {"pid": None},
                           "controller": {"pid": os.getpid(), "state": "running (in the broker's process)",
                                          "restarts": 0, "image_version": image.version},
                           "brokers": brokers, "partitions": partitions, "deleting": []})

    async def client_properties(self) -> str:
        return json.dumps(self._client_properties)

    async def fault_add(self, rule: str) -> str:
        try:
            spec = json.loads(rule)
            if not isinstance(spec, dict):
                raise FaultError("a rule is a JSON object")
            added = self.faults.add(spec)
        except (ValueError, FaultError) as e:  # FaultError is a ValueError, as is bad JSON
            raise BrokerError(ErrorCode.INVALID_REQUEST, str(e)) from None
        log.info("fault rule added: %s", added)
        return json.dumps({"node": self.broker.node_id, **added})

    async def fault_list(self) -> str:
        return json.dumps([{"node": self.broker.node_id, **r} for r in self.faults.list()])

    async def fault_clear(self, rule_id: int = -1, label: str = "") -> str:
        cleared = self.faults.clear(None if rule_id < 0 else rule_id, label or None)
        if cleared:
            log.info("fault rules cleared: %d", cleared)
        return json.dumps({"node": self.broker.node_id, "cleared": cleared})

    async def request_log_read(self, since: int = 0, limit: int = 1000) -> str:
        entries, dropped = self.requests.since(since, limit)
        entries = [{**e, "node": self.broker.node_id} for e in entries]
        return json.dumps({"node": self.broker.node_id, "entries": entries, "dropped": dropped,
                           "last": self.requests.seq, "capacity": self.requests.capacity})

    async def share_in_flight(self, group: str) -> str:
        found = self.share_in_flight_of(group) if self.share_in_flight_of is not None else []
        return json.dumps([{**p, "node": self.broker.node_id} for p in found])

    async def telemetry_read(self) -> str:
        instances = self.telemetry() if self.telemetry is not None else []
        return json.dumps([{"node": self.broker.node_id, **i} for i in instances])

    async def handle(self, request: m.Operation) -> m.Reply:
        return m.Reply(0, await m.invoke({m.Server.BROKER: self}, request))

    async def compact_now(self, topic: str, partition: int) -> str:
        rm = self.broker.replica_manager
        replicas = [p for p in rm.replicas() if p.topic == topic and partition in (-1, p.index)]
        if topic not in self.broker.topics:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic!r}")
        out = []
        for p, result in await rm.cleaner.clean_now(r for r in replicas if r.log_config.compact):
            entry: dict = {"topic": p.topic, "partition": p.index, "node": self.broker.node_id,
                           "leader": p.is_leader}
            if isinstance(result, str):  # why the partition was not cleaned
                entry["error"] = result
            else:
                entry.update(cleaned_to=result.end_offset, records_read=result.records_read,
                             records_kept=result.records_kept, bytes_read=result.bytes_read,
                             bytes_written=result.bytes_written, segments_written=result.groups,
                             map_bytes_read=result.map_bytes_read, seconds=round(result.seconds, 3))
            out.append(entry)
        for p in replicas:
            if not p.log_config.compact:
                out.append({"topic": p.topic, "partition": p.index, "node": self.broker.node_id,
                            "error": "cleanup.policy has no compact"})
        return json.dumps(out)


def replica_states(broker: AdminHost) -> list[dict]:
    """Every replica hosted here, for the console."""
    return [{"topic": p.topic, "partition": p.index, "node": broker.node_id, "leader": p.leader_id,
             "is_leader": p.is_leader, "leader_epoch": p.leader_epoch, "isr": list(p.isr),
             "replicas": list(p.replicas), "log_start_offset": p.log_start_offset,
             "last_stable_offset": p.last_stable_offset, "high_watermark": p.high_watermark,
             "log_end_offset": p.log_end_offset}
            for p in sorted(broker.replica_manager.replicas(), key=lambda r: (r.topic, r.index))]


async def serve(broker: AdminHost, data_dir: Path, metrics: Callable[[], bytes] | None = None,
                faults: FaultRules | None = None, requests: RequestLog | None = None,
                share_in_flight: Callable[[str], list[dict]] | None = None,
                telemetry: Callable[[], list[dict]] | None = None,
                client_properties: Mapping[str, str] | None = None, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
    """Serve the admin socket until cancelled (a path too long for a unix socket: not served, logged)."""
    path = socket_path(data_dir)
    try:
        rpc.check_socket_path(path)
    except (BrokerError, ValueError, OSError) as e:
        log.warning("no admin socket (`kshim ctl compact`, `fault` and `requests` cannot reach this broker): %s", e)
        task_status.started()
        return
    try:
        path.unlink()  # a leftover of a killed broker (the data dir lock says none is running)
    except FileNotFoundError:
        pass
    admin = BrokerAdmin(broker, metrics, faults, requests, share_in_flight, telemetry, client_properties)
    await rpc.RpcServer(admin.handle).serve(path, task_status=task_status)
