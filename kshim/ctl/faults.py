"""Fault rules and request logs of running brokers, from Python and from `kshim ctl`.

Python (blocking calls; usable from tests, inside an event loop or not):

    from kshim.ctl.faults import FaultClient, RequestLogClient
    faults = FaultClient("kshim-data")            # the --data-dir of `kshim serve [--brokers N]`
    faults.add("error", api="Produce", topic="orders", partition=0, error="NOT_LEADER_OR_FOLLOWER", count=2)
    faults.add("delay", api="Fetch", delay_ms=200, duration_ms=60_000, broker=1)
    faults.list(); faults.clear()
    log = RequestLogClient("kshim-data")
    log.read(api="Produce")                       # entries (dicts) of every broker's request log

Rules are those of kshim.observability.faults (actions error, delay, drop, timeout; matched by api, topic,
partition, client_id; bounded by after, count, duration_ms). Without `broker=`, a call goes to every
broker (each holds its own rules and log, and numbers them itself).

`kshim ctl fault add ACTION [--api ...] [--broker N]`, `fault list`, `fault clear [ID]`,
`kshim ctl requests [--follow] [--api ...] [--client-id ...] [--broker N]` do the same and print
JSON lines.

Network faults between two brokers of a cluster (their replication traffic, both ways):
`faults.partition(0, 1)`, `faults.latency(0, 1, 200)`, `faults.loss(0, 1, 20)`, `faults.heal(0, 1)`,
and `kshim ctl net partition|latency|loss|heal A B`. Each is a pair of rules matching the other
broker's replica fetcher (client id kshim-replica-N), labelled net:A-B.
"""
from __future__ import annotations

import argparse
import builtins
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

from kshim.controller import messages as m
from kshim.ctl import brokers_admin
from kshim.ctl.common import CtlError
from kshim.observability.faults import MAX_DURATION_MS, net_label, replica_client_id

FOLLOW_INTERVAL_S = 0.2
NET_DEFAULT_DURATION_MS = MAX_DURATION_MS  # a network fault lasts until healed, at most a day


class FaultClient:
    def __init__(self, data_dir: str | Path, timeout_s: float = brokers_admin.DEFAULT_TIMEOUT_S) -> None:
        self.data_dir = Path(data_dir)
        self.timeout_s = timeout_s

    def add(self, action: str, *, api: str | int | None = None, topic: str | None = None,
            partition: int | None = None, client_id: str | None = None, error: str | int | None = None,
            delay_ms: int | None = None, after: int = 0, count: int | None = None,
            duration_ms: int | None = None, probability: float | None = None, label: str | None = None,
            broker: int | None = None) -> list[dict[str, Any]]:
        """Add the rule on every broker (or `broker`); the rules as stored, one per broker, with their ids."""
        spec = {k: v for k, v in dict(action=action, api=api, topic=topic, partition=partition,
                                      client_id=client_id, error=error, delay_ms=delay_ms, after=after,
                                      count=count, duration_ms=duration_ms, probability=probability,
                                      label=label).items() if v is not None}
        return [json.loads(brokers_admin.call(path, m.FaultAdd(json.dumps(spec)), self.timeout_s, node))
                for node, path in brokers_admin.select(self.data_dir, broker).items()]

    def list(self, broker: int | None = None) -> builtins.list[dict[str, Any]]:
        """The live rules of every broker (or `broker`), with how often each matched and applied."""
        return [rule for node, path in brokers_admin.select(self.data_dir, broker).items()
                for rule in json.loads(brokers_admin.call(path, m.FaultList(), self.timeout_s, node))]

    def clear(self, rule_id: int | None = None, broker: int | None = None, label: str | None = None) -> int:
        """Remove rule `rule_id` (each broker numbers its own), the rules labelled `label`, or every
        rule; how many were removed."""
        request = m.FaultClear(-1 if rule_id is None else rule_id, label or "")
        return sum(json.loads(brokers_admin.call(path, request, self.timeout_s, node))["cleared"]
                   for node, path in brokers_admin.select(self.data_dir, broker).items())

    # network faults between two brokers: their replication traffic (each one's fetches from the
    # other), both ways; rules on both brokers labelled net:A-B, until `heal` or duration_ms
    def partition(self, a: int, b: int, *, duration_ms: int = NET_DEFAULT_DURATION_MS
                  ) -> builtins.list[dict[str, Any]]:
        """Cut replication between brokers a and b (each drops the other's fetch connections)."""
        return self._net(a, b, dict(action="drop", duration_ms=duration_ms))

    def latency(self, a: int, b: int, delay_ms: int, *, duration_ms: int = NET_DEFAULT_DURATION_MS
                ) -> builtins.list[dict[str, Any]]:
        """Every replication request between a and b is answered delay_ms late."""
        return self._net(a, b, dict(action="delay", delay_ms=delay_ms, duration_ms=duration_ms))

    def loss(self, a: int, b: int, percent: float, *, duration_ms: int = NET_DEFAULT_DURATION_MS
             ) -> builtins.list[dict[str, Any]]:
        """That share of the replication requests between a and b is lost (its connection dropped)."""
        return self._net(a, b, dict(action="drop", probability=percent / 100, duration_ms=duration_ms))

    def heal(self, a: int | None = None, b: int | None = None) -> int:
        """End the network faults between a and b, or every network fault; how many rules went."""
        if a is not None and b is not None:
            return self.clear(label=net_label(a, b))
        return sum(self.clear(rule_id=r["id"], broker=r["node"]) for r in self.list()
                   if str(r.get("label", "")).startswith("net:"))

    def _net(self, a: int, b: int, rule: dict[str, Any]) -> builtins.list[dict[str, Any]]:
        if a == b:
            raise CtlError("a network fault needs two different brokers")
        targets = brokers_admin.select(self.data_dir, None)
        missing = [n for n in (a, b) if n not in targets]
        if missing:
            raise CtlError(f"no broker {missing[0]} under {self.data_dir} (brokers: {', '.join(map(str, targets))})")
        self.clear(label=net_label(a, b))  # one network fault per pair: the new one replaces the old
        out = []
        for here, there in ((a, b), (b, a)):
            spec = {**rule, "client_id": replica_client_id(there), "label": net_label(a, b)}
            out.append(json.loads(brokers_admin.call(targets[here], m.FaultAdd(json.dumps(spec)), self.timeout_s,
                                                     here)))
        return out


class RequestLogClient:
    def __init__(self, data_dir: str | Path, timeout_s: float = brokers_admin.DEFAULT_TIMEOUT_S) -> None:
        self.data_dir = Path(data_dir)
        self.timeout_s = timeout_s
        self._seen: dict[int, int] = {}  # node -> last seq read by follow()

    def read(self, *, api: str | int | None = None, client_id: str | None = None, broker: int | None = None,
             since: int = 0) -> list[dict[str, Any]]:
        """Every entry the brokers hold (or `broker`'s, numbered after `since`), filtered, oldest first
        per broker."""
        out: list[dict[str, Any]] = []
        for node, path in brokers_admin.select(self.data_dir, broker).items():
            out.extend(e for e in self._read_all(node, path, since) if _wanted(e, api, client_id))
        return out

    def mark(self) -> None:
        """Remember where each broker's log ends now: `new()` gives what comes after."""
        for node, path in brokers_admin.select(self.data_dir, None).items():
            page = json.loads(brokers_admin.call(path, m.RequestLogRead(0, 0), self.timeout_s, node))
            self._seen[node] = page["last"]

    def new(self, *, api: str | int | None = None, client_id: str | None = None, broker: int | None = None
            ) -> list[dict[str, Any]]:
        """Entries added since the last `mark()` or `new()` (all of them the first time)."""
        out: list[dict[str, Any]] = []
        for node, path in brokers_admin.select(self.data_dir, broker).items():
            entries = self._read_all(node, path, self._seen.get(node, 0))
            if entries:
                self._seen[node] = entries[-1]["seq"]
            out.extend(e for e in entries if _wanted(e, api, client_id))
        return out

    def _read_all(self, node: int, path: Path, since: int) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        while True:
            page = json.loads(brokers_admin.call(path, m.RequestLogRead(since, 1000), self.timeout_s, node))
            entries.extend(page["entries"])
            if not page["entries"] or page["entries"][-1]["seq"] >= page["last"]:
                return entries
            since = page["entries"][-1]["seq"]


def _wanted(entry: dict[str, Any], api: str | int | None, client_id: str | None) -> bool:
    if api is not None and str(api).lower() not in (entry["api"].lower(), str(entry["api_key"])):
        return False
    return client_id is None or entry["client_id"] == client_id


# ---------------------------------------------------------------------------------------- kshim ctl
def add_parsers(commands: Any) -> None:
    fault = commands.add_parser("fault", help="inject request faults into brokers (add, list, clear)",
                                description="Fault rules of the brokers' requests (docs/faults.md).")
    actions = fault.add_subparsers(dest="fault_command", required=True, metavar="SUBCOMMAND")
    add = actions.add_parser("add", help="add a rule", description="Add a fault rule on every broker, or --broker N.")
    add.add_argument("action", choices=["error", "delay", "drop", "timeout"],
                     help="error: answer with --error, unhandled; delay: answer --delay-ms late; drop: close the "
                          "connection unhandled; timeout: handle, withhold the answer --delay-ms (default 60000), "
                          "close the connection")
    add.add_argument("--api", help="API name or key (Produce, Fetch, Metadata, 0, ...); default: any")
    add.add_argument("--topic", help="only requests naming this topic")
    add.add_argument("--partition", type=int, help="only requests naming this partition of --topic")
    add.add_argument("--client-id", help="only requests from this client id")
    add.add_argument("--error", help="the error code to answer (NOT_LEADER_OR_FOLLOWER, 6, ...)")
    add.add_argument("--delay-ms", type=int, help="delay (delay) or hold (timeout) of the answer")
    add.add_argument("--after", type=int, default=0, help="let this many matching requests through first")
    add.add_argument("--count", type=int, help="faults before the rule ends (default 1 unless --duration-ms)")
    add.add_argument("--duration-ms", type=int, help="the rule ends this long after it was added")
    add.add_argument("--probability", type=float, help="fault only this share (0..1] of the matching requests")
    add.add_argument("--label", help="a name to clear the rule by (`fault clear --label`)")
    add.add_argument("--broker", type=int, help="only this broker (node id); default: every broker")
    lst = actions.add_parser("list", help="the live rules, one JSON line each")
    lst.add_argument("--broker", type=int, help="only this broker")
    clear = actions.add_parser("clear", help="remove a rule (by id) or all of them")
    clear.add_argument("rule_id", type=int, nargs="?", help="the rule's id (default: every rule)")
    clear.add_argument("--label", help="only the rules with this label")
    clear.add_argument("--broker", type=int, help="only this broker")
    for p in (add, lst, clear):
        p.add_argument("--json", action="store_true", help="JSON output (the default for this command)")
    net = commands.add_parser("net", help="network faults between two brokers' replication traffic",
                              description="Faults of the replication traffic between two brokers, both ways: "
                                          "each broker's fetches from the other are dropped (partition), "
                                          "delayed (latency) or dropped at random (loss). They last until "
                                          "`net heal` or --duration-ms (at most a day).")
    kinds = net.add_subparsers(dest="net_command", required=True, metavar="SUBCOMMAND")
    for name, text in (("partition", "cut replication between A and B"),
                       ("latency", "delay replication between A and B by --ms"),
                       ("loss", "lose --percent of the replication requests between A and B")):
        k = kinds.add_parser(name, help=text, description=text + ".")
        k.add_argument("a", type=int, metavar="A", help="a broker's node id")
        k.add_argument("b", type=int, metavar="B", help="another broker's node id")
        if name == "latency":
            k.add_argument("--ms", type=int, required=True, help="added to every answer")
        if name == "loss":
            k.add_argument("--percent", type=float, required=True, help="share of requests lost, (0, 100]")
        k.add_argument("--duration-ms", type=int, default=NET_DEFAULT_DURATION_MS, help="ends by itself after this")
        k.add_argument("--json", action="store_true", help="JSON output (the default for this command)")
    heal = kinds.add_parser("heal", help="end the network faults between A and B, or all")
    heal.add_argument("a", type=int, nargs="?", metavar="A")
    heal.add_argument("b", type=int, nargs="?", metavar="B")
    heal.add_argument("--json", action="store_true", help="JSON output (the default for this command)")
    requests = commands.add_parser("requests", help="the brokers' request logs, as JSON lines",
                                   description="Print the requests the brokers answered (API, version, client id, "
                                               "partitions, errors, latency, fault rule) as JSON lines.")
    requests.add_argument("--follow", "-f", action="store_true", help="keep printing new requests until Ctrl-C")
    requests.add_argument("--api", help="only this API (name or key)")
    requests.add_argument("--client-id", help="only this client id")
    requests.add_argument("--broker", type=int, help="only this broker")
    requests.add_argument("--json", action="store_true", help="JSON output (the default for this command)")


def main_fault(args: argparse.Namespace) -> int:
    client = FaultClient(args.data_dir)
    if args.fault_command == "add":
        rules = client.add(args.action, api=args.api, topic=args.topic, partition=args.partition,
                           client_id=args.client_id, error=args.error, delay_ms=args.delay_ms, after=args.after,
                           count=args.count, duration_ms=args.duration_ms, probability=args.probability,
                           label=args.label, broker=args.broker)
        _print_lines(rules)
    elif args.fault_command == "list":
        _print_lines(client.list(args.broker))
    else:
        _print_lines([{"cleared": client.clear(args.rule_id, args.broker, args.label)}])
    return 0


def main_net(args: argparse.Namespace) -> int:
    client = FaultClient(args.data_dir)
    if args.net_command == "heal":
        if (args.a is None) != (args.b is None):
            raise CtlError("net heal takes two brokers, or none (every network fault)")
        _print_lines([{"cleared": client.heal(args.a, args.b)}])
    elif args.net_command == "partition":
        _print_lines(client.partition(args.a, args.b, duration_ms=args.duration_ms))
    elif args.net_command == "latency":
        _print_lines(client.latency(args.a, args.b, args.ms, duration_ms=args.duration_ms))
    else:
        _print_lines(client.loss(args.a, args.b, args.percent, duration_ms=args.duration_ms))
    return 0


def main_requests(args: argparse.Namespace, sleep: Callable[[float], None] = time.sleep) -> int:
    log = RequestLogClient(args.data_dir)
    _print_lines(log.new(api=args.api, client_id=args.client_id, broker=args.broker))
    if not args.follow:
        return 0
    try:
        while True:
            sleep(FOLLOW_INTERVAL_S)
            _print_lines(log.new(api=args.api, client_id=args.client_id, broker=args.broker))
    except KeyboardInterrupt:
        return 0


def _print_lines(items: Any) -> None:
    for item in items:
        print(json.dumps(item))
    sys.stdout.flush()
