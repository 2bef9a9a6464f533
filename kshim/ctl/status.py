"""`kshim ctl status` and the node commands (kill, start, pause, resume, isolate, heal, and
`kill controller`): each is one request to the cluster's supervisor over <data-dir>/supervisor.sock."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio

from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.ctl import brokers_admin
from kshim.ctl.common import CtlError, text_table
from kshim.errors import BrokerError

SOCKET_NAME = "supervisor.sock"
TIMEOUT_S = 60.0  # `start` waits for the broker to register
CONTROLLER = "controller"  # `kshim ctl kill controller`


async def request(data_dir: Path, message: Any) -> Any:
    """Send one request to the cluster's supervisor. CtlError when it is not running or refuses."""
    path = Path(data_dir) / SOCKET_NAME
    try:
        return await rpc.call_once(path, message, TIMEOUT_S)
    except BrokerError as e:
        raise CtlError(e.message) from None
    except TimeoutError:
        raise CtlError(f"the supervisor at {path} did not answer within {TIMEOUT_S:.0f}s") from None
    except rpc.RpcConnectionError as e:
        raise CtlError(f"the supervisor at {path} closed the connection: {e}") from None
    except (FileNotFoundError, ConnectionRefusedError):
        raise CtlError(f"no kshim is running with data in {data_dir} (nothing answers on {path}, nor on "
                       f"{Path(data_dir) / brokers_admin.SOCKET_NAME})") from None
    except OSError as e:
        raise CtlError(f"cannot reach the supervisor at {path}: {e}") from None


def status(data_dir: Path) -> dict[str, Any]:
    """The cluster status (for scripts and tests); a single `kshim serve` answers on its admin socket."""
    if not (Path(data_dir) / SOCKET_NAME).exists() and (Path(data_dir) / brokers_admin.SOCKET_NAME).exists():
        return json.loads(brokers_admin.call(Path(data_dir) / brokers_admin.SOCKET_NAME, m.BrokerStatus(), node=0))
    return json.loads(anyio.run(request, data_dir, m.Status()))


def command(data_dir: Path, name: str, node: int | str) -> str:
    """Run a node command (kill, start, pause, resume, isolate, heal, or kill controller); what was done."""
    if not (Path(data_dir) / SOCKET_NAME).exists() and (Path(data_dir) / brokers_admin.SOCKET_NAME).exists():
        raise CtlError(f"`{name}` needs a cluster (`kshim serve --brokers N`); {data_dir} holds a single "
                       f"`kshim serve`, whose process is yours to signal")
    if node == CONTROLLER:
        return anyio.run(request, data_dir, m.KillController())
    assert isinstance(node, int)
    return anyio.run(request, data_dir, m.NodeCommand(m.NodeAction(name), node))


def format_table(s: dict[str, Any]) -> str:
    yes = {True: "yes", False: "no"}
    ctl = s["controller"]
    lines = [f"cluster {s['cluster_id'] or '?'}  supervisor pid {s.get('supervisor', {}).get('pid') or '-'}  "
             f"controller pid {ctl['pid']} ({ctl.get('state', '?')}, {ctl.get('restarts', 0)} restarts)  "
             f"metadata version {ctl.get('image_version', '?')}", ""]
    rows = [["BROKER", "ADDRESS", "PID", "ALIVE", "ISOLATED", "EPOCH", "PROCESS"]]
    for b in s["brokers"]:
        rows.append([str(b["id"]), f"{b['host']}:{b['port']}", str(b["pid"]), yes[b["alive"]], yes[b["isolated"]],
                     str(b.get("epoch", "")), b.get("process", "")])
    lines.append(text_table(rows))
    lines.append("")
    if not s["partitions"]:
        lines.append("no topics")
    else:
        rows = [["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "REPLICA STATES (node:state/lag)",
                 "OFFSETS (node:log end/high watermark)"]]
        for p in s["partitions"]:
            offsets = " ".join(f"{node}:{o['log_end_offset']}/{o['high_watermark']}"
                               for node, o in sorted(p["replica_offsets"].items(), key=lambda kv: int(kv[0])))
            rows.append([p["topic"], str(p["partition"]), str(p["leader"]) if p["leader"] >= 0 else "none",
                         str(p["leader_epoch"]), ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])),
                         _states(p.get("replica_states", {})), offsets or "-"])
        lines.append(text_table(rows))
    if s.get("deleting"):
        lines += ["", text_table([["DELETING TOPIC", "PARTITION", "NODE", "TOPIC ID"]] + [
            [d["topic"], str(d["partition"]), str(d["node"]), d["topic_id"]] for d in s["deleting"]])]
    return "\n".join(lines)


def _states(states: dict[str, dict[str, Any]]) -> str:
    """node:state/lag for each replica: lag in records behind the leader's log end (? unknown);
    an online replica out of the ISR is shown as out-of-sync."""
    out = []
    for node, st in sorted(states.items(), key=lambda kv: int(kv[0])):
        state = "out-of-sync" if st["state"] == "online" and not st["in_sync"] else st["state"]
        out.append(f"{node}:{state}/{'?' if st['lag'] is None else st['lag']}")
    return " ".join(out) or "-"


def main(args: argparse.Namespace) -> int:
    try:
        if args.ctl_command == "status":
            s = status(args.data_dir)
            print(format_table(s) if args.table else json.dumps(s, indent=2))
        else:
            done = command(args.data_dir, args.ctl_command, args.node)
            print(json.dumps({"command": args.ctl_command, "node": args.node, "result": done}) if args.json else done)
    except CtlError as e:
        print(f"kshim ctl: {e}", file=sys.stderr)
        return 1
    return 0
