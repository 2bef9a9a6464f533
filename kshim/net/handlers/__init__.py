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
import sys
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Union

from construct import Container

from kshim.broker import Broker
from kshim.net.broker_server import BrokerServer
from kshim.net.quota_manager import Throttle
from kshim.security.config import ANONYMOUS
from kshim.security.session import ConnectionSecurity
from wire.headers import RequestHeader

if TYPE_CHECKING:  # built on first use (kshim.net.broker_server)
    from kshim.coordinator.groups import GroupCoordinator
    from kshim.coordinator.share_partitions.manager import SharePartitionManager
    from kshim.coordinator.transactions import TransactionCoordinator

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
    module: str  # imported on the first request of this API (see load_handlers)

    @property
    def handle(self) -> Callable[[RequestContext, Container], Awaitable[Response]]:
        # an import runs to its end without yielding to the event loop, so concurrent first
        # requests find the module whole; later calls are a sys.modules lookup (without
        # import_module's own checks: a few us a request)
        module = sys.modules.get(self.module)
        return (module if module is not None else importlib.import_module(self.module)).handle

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_MODULE = re.compile(r"^(\d\d)_\w+$")
_API_KEY = re.compile(r"^API_KEY = (\d+) *(?:#.*)?$", re.M)
_VERSIONS = re.compile(r"^VERSIONS = \((\d+), (\d+)\) *(?:#.*)?$", re.M)


def load_handlers() -> dict[int, Handler]:
    """Every `NN_name` module of this package, indexed by api key, none of them imported: the
    index reads their `API_KEY` and `VERSIONS` lines from the source (ApiVersions' answer needs
    only those), and a module is imported on its API's first request (Handler.handle). Importing
    all 68 at start was a tenth of a broker's start-to-ready CPU (docs/benchmarks.md, "Start
    time"); tests/test_startup.py checks the index against the imported modules."""
    registry: dict[int, Handler] = {}
    for info in pkgutil.iter_modules(__path__):
        if not _MODULE.match(info.name):
            continue
        source = (Path(__file__).parent / f"{info.name}.py").read_text(encoding="utf-8")
        key, versions = _API_KEY.search(source), _VERSIONS.search(source)
        if key is None or versions is None:
            raise RuntimeError(f"handler {info.name} lacks a literal API_KEY = N or VERSIONS = (min, max) line")
        api_key = int(key.group(1))
        if api_key in registry:
            raise RuntimeError(f"two handlers for api key {api_key}")
        registry[api_key] = Handler(api_key, info.name[3:], int(versions.group(1)), int(versions.group(2)),
                                    f"{__name__}.{info.name}")
    return registry


def supported_versions(registry: Mapping[int, Handler]) -> dict[int, tuple[int, int]]:
    return {k: (h.min_version, h.max_version) for k, h in sorted(registry.items())}
