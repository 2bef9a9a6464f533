"""The API handlers: one module per Kafka API, named `NN_name.py` by api key.

Each module opens with its behaviour notes and declares `API_KEY`, `VERSIONS` (inclusive min,
max) and `async def handle(ctx, request) -> response | None | Awaitable[response]`:
- a mapping is the response body (absent fields take the schema's defaults);
- None means no response (acks=0 produce);
- an awaitable lets the connection go on reading while the response completes later; responses
  still leave in request order.

The ApiVersions answer is built from this registry, so only what is implemented is advertised.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Union

from construct import Container

from kshim.broker import Broker
from kshim.configs.security import ANONYMOUS
from kshim.coordinator.groups import GroupCoordinator
from kshim.coordinator.share_partitions.manager import SharePartitionManager
from kshim.coordinator.transactions import TransactionCoordinator
from kshim.net.broker_server import BrokerServer
from kshim.net.quota_manager import Throttle
from kshim.net.security import ConnectionSecurity
from wire.headers import RequestHeader

Response = Union[Mapping[str, Any], None, Awaitable[Mapping[str, Any]]]


@dataclass(slots=True)
class RequestContext:
    node: BrokerServer  # the broker and its coordinators
    header: RequestHeader
    peer: str  # "host:port" of the client, for logs
    supported: Mapping[int, tuple[int, int]]  # api key -> (min, max) served, for ApiVersions
    principal: str = ANONYMOUS  # Kafka's form, "User:alice": from SASL or the TLS client certificate (ACLs read it)
    security: ConnectionSecurity | None = None  # the connection's listener and SASL state
    throttle: Throttle = field(default_factory=Throttle)  # the connection's quota mute (handlers/throttling.py)
    quota_exempt: bool = False  # a handler sets it for replication traffic: no request_percentage charge

    @property
    def broker(self) -> Broker:
        return self.node.broker

    @property
    def groups(self) -> GroupCoordinator:
        return self.node.groups

    @property
    def transactions(self) -> TransactionCoordinator:
        return self.node.transactions

    @property
    def share(self) -> SharePartitionManager:
        return self.node.share

    @property
    def version(self) -> int:
        return self.header.api_version


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Callable[[RequestContext, Container], Awaitable[Response]]

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_MODULE = re.compile(r"^(\d\d)_\w+$")


def load_handlers() -> dict[int, Handler]:
    """Import every `NN_name` module of this package and index it by api key."""
    registry: dict[int, Handler] = {}
    for info in pkgutil.iter_modules(__path__):
        if not _MODULE.match(info.name):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        lo, hi = module.VERSIONS
        if module.API_KEY in registry:
            raise RuntimeError(f"two handlers for api key {module.API_KEY}")
        registry[module.API_KEY] = Handler(module.API_KEY, info.name[3:], lo, hi, module.handle)
    return registry


def supported_versions(registry: Mapping[int, Handler]) -> dict[int, tuple[int, int]]:
    return {k: (h.min_version, h.max_version) for k, h in sorted(registry.items())}
