"""The Kafka-protocol side of `kshim ctl groups` and `kshim ctl txns`: connections to brokers with
their API versions negotiated (ApiVersions), the Metadata request, and where the brokers are
(--bootstrap HOST:PORT[,...], else the controller of the cluster in --data-dir), with the
credentials kshim.ctl.security decides."""
from __future__ import annotations

from typing import Any

import anyio

from kshim.ctl.common import CtlError
from kshim.ctl.status import status
from kshim.replication.client import BrokerConnection, ClientSecurity
from wire.errors import ErrorCode

REQUEST_TIMEOUT_S = 10.0
COORDINATOR_WAIT_S = 10.0  # FindCoordinator retries COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS this long
API_VERSIONS, METADATA, FIND_COORDINATOR = 18, 3, 10
METADATA_VERSIONS = (1, 12)  # the versions metadata() below speaks
RETRIABLE_COORDINATOR = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}

Versions = dict[int, tuple[int, int]]  # API key -> (lowest, highest) version a command speaks
_PLAINTEXT = ClientSecurity()  # no TLS, no SASL
# a connection the broker closed: reported as a ConnectionError, as a refused one is
STREAM_ENDED = (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError)


class Broker:
    """A connection to one broker with the API versions negotiated."""

    def __init__(self, host: str, port: int, client_id: str, wanted: Versions,
                 security: ClientSecurity | None = None) -> None:
        self.host, self.port = host, port
        # explicit: None would mean the process's inter-broker settings, which ctl has none of
        self.conn = BrokerConnection(host, port, client_id, security or _PLAINTEXT)
        self.wanted = wanted
        self.versions: dict[int, int] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def open(self) -> None:
        try:
            await self.conn.connect(REQUEST_TIMEOUT_S)
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                resp = await self.conn.request(API_VERSIONS, 0, {})
        except STREAM_ENDED:
            # e.g. a PLAINTEXT request on a TLS listener, which the broker closes
            raise ConnectionError("the broker closed the connection (does its listener want TLS or SASL? "
                                  "see --command-config)") from None
        served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        for api, (lo, hi) in self.wanted.items():
            if api in served and max(lo, served[api][0]) <= min(hi, served[api][1]):
                self.versions[api] = min(hi, served[api][1])

    async def request(self, api: int, body: dict) -> tuple[int, Any]:
        """(version used, response)."""
        if api not in self.versions:
            raise CtlError(f"broker {self.address} serves no version of API {api} this tool speaks")
        version = self.versions[api]
        try:
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                return version, await self.conn.request(api, version, body)
        except STREAM_ENDED:
            raise ConnectionError("the broker closed the connection") from None

    async def close(self) -> None:
        try:
            await self.conn.aclose()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass


class Pool:
    """Connections to the brokers one command asks, opened on first use."""

    def __init__(self, client_id: str, wanted: Versions, security: ClientSecurity | None = None) -> None:
        self.brokers: dict[tuple[str, int], Broker] = {}
        self.client_id, self.wanted, self.security = client_id, wanted, security

    async def get(self, host: str, port: int) -> Broker:
        key = (host, port)
        if key not in self.brokers:
            b = Broker(host, port, self.client_id, self.wanted, self.security)
            try:
                await b.open()
            except BaseException:
                await b.close()
                raise
            self.brokers[key] = b
        return self.brokers[key]

    async def drop(self, host: str, port: int) -> None:
        b = self.brokers.pop((host, port), None)
        if b is not None:
            await b.close()

    async def close(self) -> None:
        for b in self.brokers.values():
            await b.close()
        self.brokers.clear()


def failure_text(e: BaseException) -> str:
    if isinstance(e, CtlError):
        return str(e)  # it already says what failed
    if isinstance(e, TimeoutError):
        return f"no answer within {REQUEST_TIMEOUT_S:.0f}s"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


async def metadata(b: Broker, topics: list[str] | None) -> Any:
    body = {"topics": [{"name": t} for t in topics] if topics is not None else [],
            "allow_auto_topic_creation": False}
    return (await b.request(METADATA, body))[1]


async def connect_any(pool: Pool, addresses: list[tuple[str, int]]) -> Broker:
    failures = []
    for host, port in addresses:
        try:
            return await pool.get(host, port)
        except (OSError, TimeoutError, ConnectionError, CtlError) as e:
            failures.append(f"{host}:{port}: {failure_text(e)}")
    raise CtlError("no broker answered: " + "; ".join(failures))


def parse_addresses(text: str) -> list[tuple[str, int]]:
    out = []
    for part in text.split(","):
        part = part.strip()
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise CtlError(f"--bootstrap wants HOST:PORT[,HOST:PORT...], got {text!r}")
        out.append((host.strip("[]"), int(port)))
    return out


def cluster_brokers(data_dir) -> list[dict]:
    """The brokers the status of data_dir lists ([] if it cannot be had)."""
    try:
        return status(data_dir)["brokers"]
    except CtlError:
        return []


def brokers_down(data_dir) -> dict[int, str]:
    """Brokers of the cluster in data_dir whose process cannot answer now (paused, killed), and why,
    from its supervisor: asking them would only wait for a timeout. {} if that is unknown."""
    down = {}
    for b in cluster_brokers(data_dir):
        process = b.get("process", "running")
        if process not in ("running", "external"):
            down[b["id"]] = process
    return down


def addresses_from_cluster(data_dir) -> list[tuple[str, int]]:
    try:
        s = status(data_dir)
    except CtlError as e:
        raise CtlError(f"{e}; for any other Kafka cluster give --bootstrap HOST:PORT") from None
    brokers = sorted(s["brokers"], key=lambda b: not b.get("alive", True))
    if not brokers:
        raise CtlError(f"the cluster in {data_dir} has no brokers")
    return [(b["host"], b["port"]) for b in brokers]
