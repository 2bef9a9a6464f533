"""The console: one state of the cluster, polled from its Source, served as a page that updates
itself (server-sent events), as JSON, and as Prometheus metrics.

- Every POLL_S: the overview (brokers, controller, partitions) and each live broker's replica
  offsets (log start, last stable offset, high watermark, log end). A broker that does not answer
  in time (paused, killed, starting) shows its last known offsets, marked stale: the log end and
  high watermark of its last heartbeat to the controller (those of `kshim ctl status`), which are
  newer than the console's last answer from it when nobody watched meanwhile.
- Every GROUPS_POLL_S: consumer groups (members, assignments, committed offsets, lag) and
  transactions, asked of the brokers with the Kafka protocol, as `kshim ctl groups` and `kshim
  ctl txns` do, with the inter-broker identity (its listener's TLS and SASL user).
- Polling runs only while someone watches: an event stream is open, or /state or /metrics was
  asked within WATCH_S (each of which refreshes first when the state is older than POLL_S), so
  an unwatched console costs its brokers nothing.
- A change of state wakes every event stream; each sends the newest state only, so a slow
  browser never queues states (memory stays bounded).
- /metrics: the cluster's own gauges, then each broker's metrics with a `broker` label.
- Start-up: prometheus_client loads at the first /metrics, `kshim ctl groups/txns` at the first
  groups poll (someone watches), so a broker nobody looks at loads neither.
"""
from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Mapping

import anyio

from kshim.clock import SYSTEM
from kshim.console.http import HttpRequest, HttpResponse, HttpServer
from kshim.console.page import PAGE
from kshim.console.sources import Source
from kshim.ctl.common import CtlError
from kshim.errors import BrokerError

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from kshim.replication.client import ClientSecurity

log = logging.getLogger("kshim.console")

POLL_S = 0.25
GROUPS_POLL_S = 2.0
GROUPS_TIMEOUT_S = 8.0
KEEPALIVE_S = 15.0
MAX_EVENT_STREAMS = 32
OPEN_TXN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
METRICS_TIMEOUT_S = 2.0
WATCH_S = 10.0


class Console:
    def __init__(self, source: Source, client_properties: Mapping[str, str] | None = None) -> None:
        self.source = source
        self._client_properties = dict(client_properties or {})  # Kafka client properties (a password)
        self._security: tuple[ClientSecurity | None] | None = None  # made from them on first use
        self.state: dict[str, Any] = {"mode": source.mode, "version": 0, "ready": False}
        # the schema registry's subjects and versions, when one runs in this process (set once it started)
        self.schemas: Callable[[], list[dict[str, Any]]] | None = None
        self.version = 0
        self.changed = anyio.Event()
        self.streams = 0
        self._known: dict[int, list[dict[str, Any]]] = {}  # each broker's last answered replica offsets
        self._groups: dict[str, Any] = {"groups": [], "errors": []}
        self._txns: dict[str, Any] = {"transactions": [], "errors": []}
        self._text = ""
        self._last_partitions: list[dict[str, Any]] = []
        self._refreshed = -1.0  # anyio time of the last refresh
        self._watched_until = 0.0
        self._watch = anyio.Event()  # set when someone starts watching an idle console

    # ------------------------------------------------------------------ state
    def set_schemas(self, view: Callable[[], list[dict[str, Any]]]) -> None:
        """The schema registry's subjects and versions, shown from the next refresh on."""
        self.schemas = view

    @property
    def watched(self) -> bool:
        return self.streams > 0 or anyio.current_time() < self._watched_until

    def touch(self) -> None:
        """Someone looks: poll for the next WATCH_S."""
        self._watched_until = anyio.current_time() + WATCH_S
        self._watch.set()
        self._watch = anyio.Event()

    async def _until_watched(self) -> None:
        while not self.watched:
            await self._watch.wait()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._poll_groups)
            while True:
                await self._until_watched()
                await self.refresh()
                await anyio.sleep(POLL_S)

    async def _fresh(self) -> None:
        self.touch()
        if anyio.current_time() - self._refreshed > POLL_S:
            await self.refresh()

    async def refresh(self) -> None:
        self._refreshed = anyio.current_time()
        try:
            overview = await self.source.overview()
        except (BrokerError, OSError, TimeoutError) as e:
            overview = {"error": str(e), "brokers": [], "partitions": []}
        if not overview.get("partitions") and overview.get("controller", {}).get("state") != "running":
            # the controller is down (being restarted): its partitions as last seen, not none at all
            overview["partitions"] = self._last_partitions
        self._last_partitions = overview.get("partitions", [])
        answered: dict[int, list[dict[str, Any]]] = {}

        async def ask(node_id: int) -> None:
            try:
                answered[node_id] = await self.source.replica_states(node_id)
            except (BrokerError, OSError, TimeoutError, ValueError):
                pass

        async with anyio.create_task_group() as tg:
            for b in overview["brokers"]:
                if b.get("process", "running") in ("running", "external"):  # paused: it would not answer
                    tg.start_soon(ask, b["id"])
        self._known.update(answered)
        try:
            faults = await self.source.fault_rules(sorted(answered))  # the brokers that just answered
        except (BrokerError, OSError, TimeoutError):
            faults = None
        state = build_state(self.source, overview, self._known, set(answered), self._groups, self._txns, faults)
        state["schemas"] = self.schemas() if self.schemas is not None else None
        self.publish(state)

    def publish(self, state: dict[str, Any]) -> None:
        text = json.dumps(state, sort_keys=True)
        if text == self._text:
            return
        self._text = text
        self.version += 1
        self.state = {**state, "version": self.version, "time_ms": SYSTEM.wall_ms()}
        self.changed.set()
        self.changed = anyio.Event()

    async def _poll_groups(self) -> None:
        while True:
            await self._until_watched()
            addresses = [(b["host"], b["port"]) for b in self.state.get("brokers", [])
                         if b.get("alive") and b.get("process") in ("running", "external")]
            if addresses:
                from kshim.ctl import groups as ctl_groups  # start-up: see the module docstring
                from kshim.ctl import txns as ctl_txns
                from kshim.ctl.security import client_security
                try:
                    if self._security is None:  # once: it loads the CA file
                        self._security = (client_security(self._client_properties, "the inter-broker identity"),)
                    security = self._security[0]
                except CtlError as e:  # the serve options were checked at start: unlikely, but shown
                    self._groups = {"groups": [], "errors": [str(e)]}
                    self._txns = {"transactions": [], "errors": [str(e)]}
                else:
                    self._groups = await self._ask_kafka(ctl_groups.collect(addresses, security=security), "groups",
                                                         self._groups)
                    self._txns = await self._ask_kafka(ctl_txns.collect(addresses, [], None, security),
                                                       "transactions", self._txns)
            await anyio.sleep(GROUPS_POLL_S)

    async def _ask_kafka(self, call: Any, what: str, last: dict[str, Any]) -> dict[str, Any]:
        try:
            with anyio.fail_after(GROUPS_TIMEOUT_S):
                return await call
        except Exception as e:  # a broker gone meanwhile (ctl's own errors included): asked again later
            problem = f"no answer within {GROUPS_TIMEOUT_S:.0f} s" if isinstance(e, TimeoutError) else \
                f"{type(e).__name__}: {e}"
            # the last answer stays on the page, with why it is not newer
            return {what: last.get(what, []), "errors": [f"{what} not refreshed: {problem}"]}

    async def events(self) -> AsyncIterator[str | None]:
        sent = -1
        while True:
            if self.version != sent:
                sent = self.version
                yield json.dumps(self.state)
            with anyio.move_on_after(KEEPALIVE_S) as scope:
                await self.changed.wait()
            if scope.cancelled_caught:
                yield None

    # ------------------------------------------------------------------ metrics
    async def metrics(self) -> bytes:
        # start-up: prometheus_client loads at the first scrape (see the module docstring)
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import GaugeMetricFamily, Metric
        from prometheus_client.parser import text_string_to_metric_families
        from prometheus_client.samples import Sample
        families: dict[str, Metric] = {}
        up = GaugeMetricFamily("kshim_console_broker_scrape_up", "1 when the broker answered this scrape",
                               labels=["broker"])
        texts: dict[int, str | None] = {}

        async def ask(node_id: int) -> None:
            try:
                with anyio.fail_after(METRICS_TIMEOUT_S):
                    texts[node_id] = await self.source.metrics_text(node_id)
            except (BrokerError, OSError, TimeoutError):
                texts[node_id] = None

        async with anyio.create_task_group() as tg:
            for b in self.state.get("brokers", []):
                if b.get("process", "running") in ("running", "external"):
                    tg.start_soon(ask, b["id"])
                else:
                    texts[b["id"]] = None
        for node_id, text in sorted(texts.items()):
            up.add_metric([str(node_id)], 0 if text is None else 1)
            for family in text_string_to_metric_families(text or ""):
                merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                merged.samples += [Sample(s.name, {**s.labels, "broker": str(node_id)}, s.value, s.timestamp,
                                          s.exemplar) for s in family.samples]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families([*cluster_metrics(self.state), up, *families.values()]))
        return generate_latest(registry)

    # ------------------------------------------------------------------ HTTP
    async def handle(self, request: HttpRequest) -> HttpResponse:
        path = request.path
        if request.method == "POST" and path == "/action":
            return await self._action(request)
        if request.method != "GET":
            return HttpResponse.text("only GET, and POST /action\n", 405)
        if path in ("/", "/index.html"):
            return HttpResponse(200, PAGE.encode(), "text/html; charset=utf-8")
        if path == "/state":
            await self._fresh()
            return HttpResponse.json(self.state)
        if path == "/metrics":
            await self._fresh()
            body = await self.metrics()
            from prometheus_client.exposition import CONTENT_TYPE_LATEST  # loaded by metrics() already
            return HttpResponse(200, body, CONTENT_TYPE_LATEST)
        if path == "/events":
            if self.streams >= MAX_EVENT_STREAMS:
                return HttpResponse.text("too many event streams\n", 503)
            await self._fresh()
            return HttpResponse(events=self._counted_events)
        return HttpResponse.text("not found\n", 404)

    async def _counted_events(self) -> AsyncIterator[str | None]:
        self.streams += 1
        self.touch()
        try:
            async for item in self.events():
                yield item
        finally:
            self.streams -= 1
            self.touch()  # a reload reconnects at once: keep polling meanwhile

    async def _action(self, request: HttpRequest) -> HttpResponse:
        # a JSON body: a cross-site form cannot send one without the browser asking first (CORS)
        if not request.headers.get("content-type", "").startswith("application/json"):
            return HttpResponse.text("send a JSON body (Content-Type: application/json)\n", 415)
        try:
            body = request.json()
            assert isinstance(body, dict)
            if str(body.get("action", "")).startswith("fault-"):
                return await self._fault_action(body)
            action, node = str(body["action"]), body["node"]
            if not (node == "controller" or (isinstance(node, int) and not isinstance(node, bool))):
                raise ValueError(node)
        except (ValueError, KeyError, AssertionError):
            return HttpResponse.json({"ok": False, "message": 'expected {"action": ..., "node": ID}'}, 400)
        if action not in self.source.actions:
            return HttpResponse.json({"ok": False, "message": f"this console offers no action {action!r}"}, 400)
        try:
            message = await self.source.act(action, node)
        except BrokerError as e:
            return HttpResponse.json({"ok": False, "message": e.message}, 409)
        log.info("console: %s", message)
        await self.refresh()
        return HttpResponse.json({"ok": True, "message": message})

    async def _fault_action(self, body: dict[str, Any]) -> HttpResponse:
        """{"action": "fault-add", "rule": {...}, "node": ID or null} (a rule as `kshim ctl fault add`
        takes it, kshim.observability.faults) or {"action": "fault-clear", "id": ID or null, "node": ID or null}."""
        node = body.get("node")
        if node is not None and (not isinstance(node, int) or isinstance(node, bool)):
            return HttpResponse.json({"ok": False, "message": "node is a broker id or null (every broker)"}, 400)
        try:
            if body["action"] == "fault-add":
                rule = body.get("rule")
                if not isinstance(rule, dict):
                    return HttpResponse.json({"ok": False, "message": 'expected {"rule": {...}}'}, 400)
                message = await self.source.fault_add(rule, node)
            elif body["action"] == "fault-clear":
                rule_id = body.get("id")
                if rule_id is not None and (not isinstance(rule_id, int) or isinstance(rule_id, bool)):
                    return HttpResponse.json({"ok": False, "message": "id is a rule id or null (every rule)"}, 400)
                message = await self.source.fault_clear(rule_id, node)
            else:
                return HttpResponse.json({"ok": False, "message": f"no action {body['action']!r}"}, 400)
        except BrokerError as e:
            return HttpResponse.json({"ok": False, "message": e.message}, 409)
        log.info("console: %s", message)
        await self.refresh()
        return HttpResponse.json({"ok": True, "message": message})

    async def serve(self, host: str, port: int, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """The console on host:port (0: a free one) until cancelled; task_status gets the port."""
        async with anyio.create_task_group() as tg:
            # no refresh first: every request refreshes a state older than POLL_S, and building
            # one for 10,000 partitions took a second of the broker's start
            bound = await tg.start(HttpServer(self.handle).serve, host, port)
            tg.start_soon(self.run)
            task_status.started(bound)


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def build_state(source: Source, overview: dict[str, Any], known: dict[int, list[dict[str, Any]]],
                fresh: set[int], groups: dict[str, Any], txns: dict[str, Any],
                faults: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The page's state: the overview, each partition's replicas with their offsets (fresh from
    their broker; for a broker that does not answer, the log end and high watermark the controller
    heard in its last heartbeat, as `kshim ctl status` shows them, else its broker's last answer,
    marked stale), groups and open transactions."""
    by_replica = {(r["topic"], r["partition"], node): r for node, rs in known.items() for r in rs}
    partitions = []
    for p in overview.get("partitions", []):
        replicas = []
        for node in p["replicas"]:
            r = by_replica.get((p["topic"], p["partition"], node))
            reported = p.get("replica_offsets", {}).get(str(node))
            stale = node not in fresh
            entry: dict[str, Any] = {"node": node, "in_isr": node in p["isr"], "is_leader": node == p["leader"],
                                     "stale": stale}
            if r is not None and not (stale and reported is not None):
                entry.update({k: r[k] for k in ("log_start_offset", "last_stable_offset", "high_watermark",
                                                 "log_end_offset")})
            elif reported is not None:
                # a silent broker's last heartbeat: the console may have last asked it long before
                # (it polls only while watched), the heartbeats came until it stopped
                last = r or {}
                same = (last.get("high_watermark"), last.get("log_end_offset")) == \
                    (reported["high_watermark"], reported["log_end_offset"])
                entry.update(log_start_offset=last.get("log_start_offset"),
                             last_stable_offset=last.get("last_stable_offset") if same else None,
                             high_watermark=reported["high_watermark"], log_end_offset=reported["log_end_offset"])
            else:
                entry.update(log_start_offset=None, last_stable_offset=None, high_watermark=None, log_end_offset=None)
            replicas.append(entry)
        partitions.append({"topic": p["topic"], "partition": p["partition"], "leader": p["leader"],
                           "leader_epoch": p["leader_epoch"], "replicas": p["replicas"], "isr": p["isr"],
                           "replica_states": replicas})
    open_txns = [t for t in txns.get("transactions", []) if t.get("state") in OPEN_TXN_STATES or t.get("error")]
    return {
        "mode": source.mode, "ready": True, "actions": list(source.actions), "error": overview.get("error"),
        "cluster_id": overview.get("cluster_id", ""), "controller": overview.get("controller", {}),
        "brokers": overview.get("brokers", []), "partitions": partitions,
        "groups": groups.get("groups", []), "group_errors": groups.get("errors", []),
        "transactions": open_txns, "transaction_count": len(txns.get("transactions", [])),
        "transaction_errors": txns.get("errors", []),
        "faults": faults,  # the brokers' request fault rules (kshim.observability.faults); None when they could not be read
    }


def cluster_metrics(state: dict[str, Any]) -> list[Metric]:
    """The cluster as the controller sees it (Kafka's KafkaController metrics where it has them)."""
    brokers = state.get("brokers", [])
    partitions = state.get("partitions", [])

    from prometheus_client.core import GaugeMetricFamily

    def gauge(name: str, text: str, value: float) -> Metric:
        return GaugeMetricFamily(name, text, value=value)

    return [
        gauge("kafka_controller_kafkacontroller_activebrokercount", "Brokers registered and not fenced",
              sum(1 for b in brokers if b.get("alive"))),
        gauge("kafka_controller_kafkacontroller_fencedbrokercount", "Brokers known to the controller but fenced",
              sum(1 for b in brokers if not b.get("alive"))),
        gauge("kafka_controller_kafkacontroller_globaltopiccount", "Topics",
              len({p["topic"] for p in partitions})),
        gauge("kafka_controller_kafkacontroller_globalpartitioncount", "Partitions", len(partitions)),
        gauge("kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a leader",
              sum(1 for p in partitions if p["leader"] < 0)),
        gauge("kshim_cluster_underreplicated_partitions", "Partitions whose ISR is smaller than their replicas",
              sum(1 for p in partitions if len(p["isr"]) < len(p["replicas"]))),
        gauge("kshim_cluster_consumer_groups", "Consumer groups, as the console last listed them",
              len(state.get("groups", []))),
        gauge("kshim_cluster_open_transactions", "Transactions open (Ongoing or preparing), as last listed",
              len(state.get("transactions", []))),
    ]
