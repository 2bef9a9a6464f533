"""`kshim ctl telemetry [--broker NODE] [--json]`: the client instances each broker knows from
GetTelemetrySubscriptions / PushTelemetry (KIP-714) and the metrics each pushed last, asked of every
broker's admin socket (kshim.cluster.admin). A table by default: one block per client instance
(its id, client id, software, address, subscription, pushes) with one line per metric (name, kind,
the latest value, its attributes); --json prints one JSON object per client instance."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kshim.controller import messages as m
from kshim.ctl import brokers_admin
from kshim.ctl.common import CtlError

MAX_LINES_PER_CLIENT = 200


def add_parser(commands) -> None:
    c = commands.add_parser("telemetry", help="client metrics pushed to the brokers (KIP-714)",
                            description="The client instances that asked for telemetry subscriptions or "
                                        "pushed metrics (KIP-714), and the metrics each pushed last. Clients "
                                        "push once a CLIENT_METRICS subscription matches them (docs/telemetry.md).")
    c.add_argument("--broker", type=int, default=None, help="one broker (default: every broker)")
    c.add_argument("--json", action="store_true", help="one JSON object per client instance")


def read(data_dir, broker: int | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for node, path in brokers_admin.select(data_dir, broker).items():
        out += json.loads(brokers_admin.call(path, m.TelemetryRead(), node=node))
    return out


def _value(point: dict[str, Any]) -> str:
    v = point.get("value")
    text = "-" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))
    if point.get("count") is not None:
        text += f" (count {point['count']})"
    return text


def render(instances: list[dict[str, Any]]) -> str:
    if not instances:
        return "no client instances (clients push once a CLIENT_METRICS subscription matches them)"
    lines = []
    for i in instances:
        software = f"{i['client_software_name']} {i['client_software_version']}".strip() or "-"
        lines.append(f"client instance {i['client_instance_id']}  broker {i['node']}  client id "
                     f"{i['client_id'] or '-'}  {software}  {i['client_source_address']}:{i['client_source_port']}")
        metrics = ",".join(i["requested_metrics"]) or "(none)"
        lines.append(f"  subscription {i['subscription_id']}  metrics {metrics}  every {i['push_interval_ms']} ms  "
                     f"pushes {i['pushes']} ({i['bytes_pushed']} bytes)  last error {i['last_error']}"
                     + ("  terminating" if i["terminating"] else ""))
        rows = []
        for metric in i["metrics"]:
            for point in metric["points"] or [{}]:
                attrs = " ".join(f"{k}={v}" for k, v in sorted(point.get("attributes", {}).items()))
                rows.append((metric["name"], metric["kind"], _value(point), attrs))
        if rows:
            width = max(len(r[0]) for r in rows)
            for name, kind, value, attrs in rows[:MAX_LINES_PER_CLIENT]:
                lines.append(f"    {name:<{width}}  {kind:<9}  {value:>14}  {attrs}".rstrip())
            if len(rows) > MAX_LINES_PER_CLIENT:
                lines.append(f"    ... {len(rows) - MAX_LINES_PER_CLIENT} more (--json shows all)")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    try:
        instances = read(args.data_dir, args.broker)
    except CtlError as e:
        print(f"kshim ctl telemetry: {e}", file=sys.stderr)
        return 1
    if args.json:
        for i in instances:
            print(json.dumps(i))
    else:
        print(render(instances))
    return 0
