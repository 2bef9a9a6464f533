"""Where the console's facts come from: a cluster's supervisor, or a single `kshim serve` process.

A Source answers the overview (brokers, the controller, partitions with leader, replicas and ISR,
as `kshim ctl status` shows them), each broker's replica offsets and metrics (its admin socket,
kshim.cluster.admin: ReplicaStates, MetricsText), carries out the node actions, and lists, adds
and clears the brokers' request fault rules (kshim.observability.faults, as `kshim ctl fault` does).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import anyio

from kshim.cluster import admin
from kshim.cluster.image import MetadataImage
from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.ctl.common import CtlError
from kshim.errors import BrokerError
from kshim.observability.faults import FaultError, FaultRules
from wire.errors import ErrorCode

if TYPE_CHECKING:
    from kshim.ctl.faults import FaultClient

BROKER_TIMEOUT_S = 0.75  # a paused broker does not answer: its replicas show their last known state


class Source(Protocol):
    mode: str  # "cluster" or "single"
    actions: tuple[str, ...]  # node actions the console offers

    async def overview(self) -> dict[str, Any]: ...

    async def replica_states(self, node_id: int) -> list[dict[str, Any]]: ...

    async def metrics_text(self, node_id: int) -> str: ...

    async def act(self, action: str, node: int | str) -> str: ...

    # the rules of these brokers (those answering now: a paused one would hold the refresh up)
    async def fault_rules(self, nodes: list[int]) -> list[dict[str, Any]] | None: ...

    async def fault_add(self, spec: dict[str, Any], node: int | None) -> str: ...  # on every broker, or `node`

    async def fault_clear(self, rule_id: int | None, node: int | None) -> str: ...  # a rule of `node`, or all


class SupervisorLike(Protocol):
    """What the cluster source uses of the supervisor's service (kshim.controller.process)."""
    async def status_report(self) -> dict[str, Any]: ...

    async def node_command(self, action: m.NodeAction, node_id: int) -> str: ...

    async def kill_controller(self) -> str: ...


class ClusterSource:
    """`kshim serve --brokers N`: the supervisor's status, and each broker's admin socket."""
    mode = "cluster"
    actions = tuple(a.value for a in m.NodeAction)

    def __init__(self, service: SupervisorLike, broker_dir: Callable[[int], Path]) -> None:
        self.service = service
        self.broker_dir = broker_dir

    async def overview(self) -> dict[str, Any]:
        return await self.service.status_report()

    async def _ask(self, node_id: int, op: m.Operation[str]) -> str:
        return await rpc.call_once(admin.socket_path(self.broker_dir(node_id)), op, BROKER_TIMEOUT_S)

    async def replica_states(self, node_id: int) -> list[dict[str, Any]]:
        return json.loads(await self._ask(node_id, m.ReplicaStates()))

    async def metrics_text(self, node_id: int) -> str:
        return await self._ask(node_id, m.MetricsText())

    async def act(self, action: str, node: int | str) -> str:
        if node == "controller":
            if action != "kill":
                raise BrokerError(ErrorCode.INVALID_REQUEST, "the controller can only be killed (it is restarted)")
            return await self.service.kill_controller()
        if not isinstance(node, int):
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"no node {node!r}")
        try:
            what = m.NodeAction(action)
        except ValueError:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"no action {action!r}") from None
        return await self.service.node_command(what, node)

    # the brokers' admin sockets, as `kshim ctl fault` reaches them (blocking calls: in a worker thread)
    def _faults(self) -> FaultClient:
        from kshim.ctl.faults import FaultClient  # start-up: a single serve keeps its rules in process
        return FaultClient(self.broker_dir(0).parent, BROKER_TIMEOUT_S)

    async def fault_rules(self, nodes: list[int]) -> list[dict[str, Any]] | None:
        client = self._faults()

        def listed() -> list[dict[str, Any]]:
            rules: list[dict[str, Any]] = []
            for node in nodes:
                try:  # a broker that stopped answering meanwhile: the others' rules still show
                    rules += client.list(node)
                except CtlError:
                    continue
            return rules
        return await anyio.to_thread.run_sync(listed)

    async def fault_add(self, spec: dict[str, Any], node: int | None) -> str:
        try:
            added = await anyio.to_thread.run_sync(lambda: self._faults().add(broker=node, **spec))
        except (CtlError, TypeError) as e:
            raise BrokerError(ErrorCode.INVALID_REQUEST, str(e)) from None
        return f"fault rule added on broker(s) {', '.join(str(r['node']) for r in added)}"

    async def fault_clear(self, rule_id: int | None, node: int | None) -> str:
        try:
            cleared = await anyio.to_thread.run_sync(lambda: self._faults().clear(rule_id, node))
        except CtlError as e:
            raise BrokerError(ErrorCode.INVALID_REQUEST, str(e)) from None
        return f"{cleared} fault rule(s) cleared"


class StandaloneSource:
    """A single `kshim serve`: the broker in this process (no node actions: it is the console's host)."""
    mode = "single"
    actions: tuple[str, ...] = ()

    def __init__(self, broker: admin.AdminHost, image: Callable[[], MetadataImage],
                 metrics: Callable[[], bytes], faults: FaultRules | None = None) -> None:
        self.broker = broker
        self.image = image
        self.metrics = metrics
        self.faults = faults if faults is not None else FaultRules()  # the broker's own, in this process

    async def overview(self) -> dict[str, Any]:
        image = self.image()
        return {
            "cluster_id": image.cluster_id,
            "controller": {"pid": os.getpid(), "state": "running", "image_version": image.version},
            "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "pid": b.pid, "alive": b.alive,
                         "isolated": b.isolated, "epoch": b.epoch, "process": "running"}
                        for b in sorted(image.brokers.values(), key=lambda b: b.node_id)],
            "partitions": [{"topic": t.name, "partition": p.index, "leader": p.leader, "leader_epoch": p.leader_epoch,
                            "replicas": list(p.replicas), "isr": list(p.isr), "replica_offsets": {}}
                           for t in sorted(image.topics.values(), key=lambda t: t.name) for p in t.partitions],
        }

    async def replica_states(self, node_id: int) -> list[dict[str, Any]]:
        return admin.replica_states(self.broker)

    async def metrics_text(self, node_id: int) -> str:
        return self.metrics().decode()

    async def act(self, action: str, node: int | str) -> str:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "a single `kshim serve` has no node actions: "
                                                     "run a cluster (--brokers N) to kill, pause or isolate brokers")

    async def fault_rules(self, nodes: list[int]) -> list[dict[str, Any]] | None:
        return [{"node": self.broker.node_id, **r} for r in self.faults.list()]

    async def fault_add(self, spec: dict[str, Any], node: int | None) -> str:
        try:
            rule = self.faults.add(spec)
        except FaultError as e:
            raise BrokerError(ErrorCode.INVALID_REQUEST, str(e)) from None
        return f"fault rule {rule['id']} added"

    async def fault_clear(self, rule_id: int | None, node: int | None) -> str:
        return f"{self.faults.clear(rule_id)} fault rule(s) cleared"
