"""The schema registry as `kshim serve --schema-registry` runs it: its store (a Kafka client of
the broker's inter-broker listener, with the broker's inter-broker identity), the registry, and
the REST API on HOST:PORT (0: a free port), HTTPS when a broker listener has TLS (the first TLS
listener's certificate options), HTTP basic auth against the broker's SASL users when a listener
has SASL.

Basic auth asks the broker: the user and password must pass a SASL exchange (PLAIN, then
SCRAM-SHA-512, then SCRAM-SHA-256) on the broker's SASL listener, so `--sasl-users` and the SCRAM
credentials stored with `kshim ctl scram` both work, checked by the broker's own code. A pair that
passed is remembered for AUTH_CACHE_S (a digest of it, never the password)."""
from __future__ import annotations

import hashlib
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import anyio

from kshim.console.http import HttpServer
from kshim.errors import StartRefused
from kshim.ctl.security import client_security
from kshim.replication.client import CONNECTION_LOST, AuthenticationError, BrokerConnection, ClientSecurity
from kshim.schema_registry.kafka_store import KafkaStore
from kshim.schema_registry.registry import Registry
from kshim.schema_registry.rest import RestApi
from kshim.schema_registry.state import RegistryState
from kshim.security.config import Listener, SecurityConfig

log = logging.getLogger("kshim.schema_registry")

MAX_BODY_BYTES = 8 * 1024 * 1024  # a schema of a few MiB, in JSON (escaped) with its references
AUTH_CACHE_S = 60.0
AUTH_CACHE_ENTRIES = 1024
AUTH_TIMEOUT_S = 10.0
START_TIMEOUT_S = 120.0  # to reach the brokers, create `_schemas` and read it to its end
MECHANISMS = ("PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256")


@dataclass
class RegistryConfig:
    host: str
    port: int  # 0: a free one
    bootstrap: Sequence[tuple[str, int]]  # the brokers' inter-broker listener addresses
    data_dir: Path  # where --tls-dev keeps its files
    security: SecurityConfig | None = None  # the broker's: TLS certificate, SASL users
    brokers: int = 1  # with --brokers N, broker i listens on each listener's port + i: basic auth asks any
    max_body_bytes: int = MAX_BODY_BYTES
    # given, once serving, a view of the subjects and versions (the web console shows it)
    on_ready: Callable[[Callable[[], list[dict[str, Any]]]], None] | None = None


CONSOLE_SUBJECTS = 500  # the console's page lists this many subjects at most


def summary(state: RegistryState) -> list[dict[str, Any]]:
    """Subjects (the first CONSOLE_SUBJECTS) and their versions, soft-deleted ones flagged."""
    return [{"subject": s, "versions": [{"version": v.version, "id": v.id, "type": v.schema_type, "deleted": v.deleted}
                                        for v in state.versions(s, deleted=True)]}
            for s in sorted(state.subjects)[:CONSOLE_SUBJECTS]]


class BrokerAuthenticator:
    """HTTP basic credentials checked with a SASL exchange on a broker listener (the next broker's
    while one does not answer)."""

    def __init__(self, addresses: Sequence[tuple[str, int]], tls: ssl.SSLContext | None) -> None:
        self.addresses, self.tls = list(addresses), tls  # the brokers, asked in turn while one is down
        self._passed: dict[bytes, float] = {}  # digest of (user, password) -> anyio time it expires

    async def __call__(self, user: str, password: str) -> bool:
        digest = hashlib.sha256(f"{len(user)}:{user}:{password}".encode()).digest()
        now = anyio.current_time()
        if self._passed.get(digest, 0.0) > now:
            return True
        for mechanism in MECHANISMS:
            passed = await self._exchange(mechanism, user, password)
            if passed is None:
                return False  # no broker answered
            if not passed:
                continue  # refused: the next mechanism
            if len(self._passed) >= AUTH_CACHE_ENTRIES:
                self._passed = {k: t for k, t in self._passed.items() if t > now}
                if len(self._passed) >= AUTH_CACHE_ENTRIES:
                    self._passed.clear()
            self._passed[digest] = now + AUTH_CACHE_S
            return True
        return False

    async def _exchange(self, mechanism: str, user: str, password: str) -> bool | None:
        """Whether a broker took the credentials with `mechanism`; None if none answered."""
        for host, port in self.addresses:
            conn = BrokerConnection(host, port, "kshim-schema-registry-auth",
                                    ClientSecurity(self.tls, mechanism, user, password))
            try:
                await conn.connect(AUTH_TIMEOUT_S)
            except AuthenticationError:
                return False
            except CONNECTION_LOST as e:
                log.warning("schema registry: cannot check credentials with %s:%d: %s", host, port, e)
                continue
            await conn.aclose()
            return True
        return None


def _sasl_listener(security: SecurityConfig) -> Listener | None:
    inter = security.inter_broker()
    if inter is not None and inter.sasl:
        return inter
    return next((listener for listener in security.listeners if listener.sasl), None)


async def serve(config: RegistryConfig, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; task_status gets the port bound, once `_schemas` was read to its end."""
    security = config.security
    client: ClientSecurity | None = None
    server_tls: ssl.SSLContext | None = None
    authenticate = None
    if security is not None and security.listeners:
        client = client_security(security.client_properties(config.data_dir), "the inter-broker identity")
        if security.needs_tls:
            from kshim.security.tls import client_context, server_context  # loaded by the broker already
            server_tls = server_context(security, config.data_dir)[0]
        sasl = _sasl_listener(security)
        if sasl is not None:
            tls = None
            if sasl.tls:
                tls = client_context(security, sasl, config.data_dir)
            authenticate = BrokerAuthenticator([(sasl.host, sasl.port + i) for i in range(config.brokers)], tls)
    store = KafkaStore(config.bootstrap, client)
    try:
        async with anyio.create_task_group() as tg:
            try:
                with anyio.fail_after(START_TIMEOUT_S):
                    await tg.start(store.run)
            except TimeoutError:
                raise StartRefused(f"the schema registry could not read {store.topic} from the brokers at "
                                   f"{store.bootstrap} within {START_TIMEOUT_S:.0f} s (see the log)") from None
            api = RestApi(Registry(store), authenticate, lambda: store.cluster_id)
            http = HttpServer(api, max_body_bytes=config.max_body_bytes, name="the schema registry",
                              ssl_context=server_tls)
            bound = await tg.start(http.serve, config.host, config.port)
            if config.on_ready is not None:
                config.on_ready(lambda: summary(store.state))
            task_status.started(bound)
    finally:
        await store.aclose()
