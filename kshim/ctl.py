"""`kshim ctl --data-dir D <command>`: look at and disturb a running `kshim serve --brokers N` cluster.

Every command but `groups` and `txns` is one request to the controller over
<data-dir>/controller.sock. Process commands (kill, start, pause, resume) are carried out by the
controller, on the processes it started: ctl itself never signals anything. `groups` and `txns`
ask the brokers with the Kafka protocol (found through the controller, or --bootstrap for a single
broker or any Kafka cluster).

    status [--table]   JSON (or a table): brokers, partitions, leaders, ISRs, replica offsets
    kill NODE          SIGKILL the broker: it stays down until `start`
    start NODE         start a stopped broker again on its data dir; returns once it registered
    pause NODE         SIGSTOP: it stops heartbeating and is fenced after the session timeout
    resume NODE        SIGCONT: it registers again
    isolate NODE       replication traffic to and from it is dropped, while it stays up
    heal NODE          end the isolation
    groups [--bootstrap HOST:PORT] [--group ID] [--table]
                       consumer groups: state, members, assignments, committed offsets, lag
    txns [--bootstrap HOST:PORT] [--state STATE]... [--producers TOPIC] [--json]
                       transactions: coordinator, state, producer, running time, partitions;
                       --producers TOPIC: each partition's producers and open transactions
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio

from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.errors import BrokerError

SOCKET_NAME = "controller.sock"
TIMEOUT_S = 60.0  # `start` waits for the broker to register


class CtlError(Exception):
    """What to tell the user; ctl exits 1."""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("ctl", help="control a running cluster (kshim serve --brokers N)",
                       description="Inspect and disturb a running `kshim serve --brokers N` cluster through its "
                                   "controller.", epilog=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=Path("kshim-data"),
                   help="the cluster's data dir, as given to serve (default ./kshim-data)")
    commands = p.add_subparsers(dest="ctl_command", required=True, metavar="COMMAND")
    status = commands.add_parser("status", help="brokers and partitions as JSON",
                                 description="Print the cluster's brokers and partitions as JSON.")
    status.add_argument("--table", action="store_true", help="a human-readable table instead of JSON")
    helps = {"kill": "SIGKILL a broker", "start": "start a stopped broker again",
             "pause": "SIGSTOP a broker", "resume": "SIGCONT a paused broker",
             "isolate": "cut a broker's replication traffic", "heal": "restore a broker's replication traffic"}
    for name, text in helps.items():
        c = commands.add_parser(name, help=text, description=text + ".")
        c.add_argument("node", type=int, metavar="NODE", help="the broker's node id")
    from kshim import ctl_groups, ctl_txns
    ctl_groups.add_parser(commands)
    ctl_txns.add_parser(commands)
    return p


async def request(data_dir: Path, message: Any) -> Any:
    """Send one request to the cluster's controller. CtlError when it is not running or refuses."""
    path = Path(data_dir) / SOCKET_NAME
    try:
        return await rpc.call_once(path, message, TIMEOUT_S)
    except BrokerError as e:
        raise CtlError(e.message) from None
    except TimeoutError:
        raise CtlError(f"the controller at {path} did not answer within {TIMEOUT_S:.0f}s") from None
    except rpc.RpcConnectionError as e:
        raise CtlError(f"the controller at {path} closed the connection: {e}") from None
    except (FileNotFoundError, ConnectionRefusedError):
        raise CtlError(f"no kshim cluster is running with data in {data_dir} (nothing answers on {path})") from None
    except OSError as e:
        raise CtlError(f"cannot reach the controller at {path}: {e}") from None


def status(data_dir: Path) -> dict[str, Any]:
    """The cluster status (for scripts and tests)."""
    return json.loads(anyio.run(request, data_dir, m.Status()))


def command(data_dir: Path, name: str, node_id: int) -> str:
    """Run a node command (kill, start, pause, resume, isolate, heal); what was done."""
    return anyio.run(request, data_dir, m.NodeCommand(m.NodeAction(name), node_id))


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def format_table(s: dict[str, Any]) -> str:
    yes = {True: "yes", False: "no"}
    ctl = s["controller"]
    lines = [f"cluster {s['cluster_id']}  controller pid {ctl['pid']}  metadata version {ctl.get('image_version', '?')}",
             ""]
    rows = [["BROKER", "ADDRESS", "PID", "ALIVE", "ISOLATED", "EPOCH", "PROCESS"]]
    for b in s["brokers"]:
        rows.append([str(b["id"]), f"{b['host']}:{b['port']}", str(b["pid"]), yes[b["alive"]], yes[b["isolated"]],
                     str(b.get("epoch", "")), b.get("process", "")])
    lines.append(text_table(rows))
    lines.append("")
    if not s["partitions"]:
        lines.append("no topics")
    else:
        rows = [["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "OFFSETS (node:log end/high watermark)"]]
        for p in s["partitions"]:
            offsets = " ".join(f"{node}:{o['log_end_offset']}/{o['high_watermark']}"
                               for node, o in sorted(p["replica_offsets"].items(), key=lambda kv: int(kv[0])))
            rows.append([p["topic"], str(p["partition"]), str(p["leader"]) if p["leader"] >= 0 else "none",
                         str(p["leader_epoch"]), ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])),
                         offsets or "-"])
        lines.append(text_table(rows))
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    if args.ctl_command == "groups":
        from kshim import ctl_groups
        return ctl_groups.main(args)
    if args.ctl_command == "txns":
        from kshim import ctl_txns
        return ctl_txns.main(args)
    try:
        if args.ctl_command == "status":
            s = status(args.data_dir)
            print(format_table(s) if args.table else json.dumps(s, indent=2))
        else:
            print(command(args.data_dir, args.ctl_command, args.node))
    except CtlError as e:
        print(f"kshim ctl: {e}", file=sys.stderr)
        return 1
    return 0
