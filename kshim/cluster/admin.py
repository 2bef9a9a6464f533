"""A broker's local admin socket, ``<broker data dir>/broker.sock``: the control-plane RPC
(kshim.controller.rpc, operations served by ``Server.BROKER``) for `kshim ctl` commands that concern
one broker's own replicas and have no Kafka API, today `kshim ctl compact`, and for the console
(kshim.console): the replicas' offsets and the broker's metrics. Served by `kshim serve`
(single broker: ``<data-dir>/broker.sock``) and by each broker process of a cluster
(``<data-dir>/broker-i/broker.sock``). Unix socket only: nothing listens on the network.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable, Mapping, Protocol

import anyio

from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.errors import BrokerError
from kshim.log.cleaner import CleanResult
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

    @property
    def topics(self) -> Mapping[str, object]: ...


class BrokerAdmin:
    def __init__(self, broker: AdminHost, metrics: Callable[[], bytes] | None = None) -> None:
        self.broker = broker
        self.metrics = metrics

    async def replica_states(self) -> str:
        return json.dumps(replica_states(self.broker))

    async def metrics_text(self) -> str:
        if self.metrics is None:
            raise BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR, "this broker keeps no metrics")
        return self.metrics().decode()

    async def handle(self, request: m.Operation) -> m.Reply:
        return m.Reply(0, await m.invoke({m.Server.BROKER: self}, request))

    async def compact_now(self, topic: str, partition: int) -> str:
        rm = self.broker.replica_manager
        replicas = [p for p in rm.replicas() if p.topic == topic and partition in (-1, p.index)]
        if topic not in self.broker.topics:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic!r}")
        out = []
        for p, result in await rm.cleaner.clean_now(r for r in replicas if r.log.config.compact):
            entry: dict = {"topic": p.topic, "partition": p.index, "node": self.broker.node_id,
                           "leader": p.is_leader}
            if isinstance(result, CleanResult):
                entry.update(cleaned_to=result.end_offset, records_read=result.records_read,
                             records_kept=result.records_kept, bytes_read=result.bytes_read,
                             bytes_written=result.bytes_written, segments_written=result.groups,
                             map_bytes_read=result.map_bytes_read, seconds=round(result.seconds, 3))
            else:
                entry["error"] = result
            out.append(entry)
        for p in replicas:
            if not p.log.config.compact:
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


async def serve(broker: AdminHost, data_dir: Path, metrics: Callable[[], bytes] | None = None, *,
                task_status=anyio.TASK_STATUS_IGNORED) -> None:
    """Serve the admin socket until cancelled (a path too long for a unix socket: not served, logged)."""
    path = socket_path(data_dir)
    try:
        rpc.check_socket_path(path)
    except (BrokerError, ValueError, OSError) as e:
        log.warning("no admin socket (`kshim ctl compact` cannot reach this broker): %s", e)
        task_status.started()
        return
    try:
        path.unlink()  # a leftover of a killed broker (the data dir lock says none is running)
    except FileNotFoundError:
        pass
    await rpc.RpcServer(BrokerAdmin(broker, metrics).handle).serve(path, task_status=task_status)
