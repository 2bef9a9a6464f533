"""`kshim ctl --data-dir D <command>`: look at and disturb a running `kshim serve --brokers N` cluster
(or a single `kshim serve`: status, groups, txns, compact, fault and requests). Every command takes
--json for machine-readable output (JSON is the default of those that print data).

Every command but `groups`, `txns` and `compact` is one request to the supervisor (`kshim serve --brokers N`)
over <data-dir>/supervisor.sock, which asks the controller what it needs. Process commands (kill,
start, pause, resume) are carried out by the supervisor, on the processes it started: ctl itself
never signals anything. `groups` and `txns`
ask the brokers with the Kafka protocol (found through the controller, or --bootstrap for a single
broker or any Kafka cluster).

    status [--table]   JSON (or a table): the controller (pid, state, restarts), brokers,
                       partitions, leaders, ISRs, reassignments under way, each replica's state
                       (online, offline, adding, removing) and lag, replica offsets, replicas
                       still to delete on brokers that are down; a single `kshim serve`
                       answers too (its broker's own view)
    kill NODE          SIGKILL the broker: it stays down until `start`
    kill controller    SIGKILL the controller process: the supervisor restarts it at once
    start NODE         start a stopped broker again on its data dir; returns once it registered
    pause NODE         SIGSTOP: it stops heartbeating and is fenced after the session timeout
    resume NODE        SIGCONT: it registers again
    isolate NODE       replication traffic to and from it is dropped, while it stays up
    heal NODE          end the isolation
    groups [--bootstrap HOST:PORT] [--group ID] [--table]
                       consumer groups: state, members, assignments, committed offsets, lag
    txns [--bootstrap HOST:PORT] [--state STATE]... [--producers TOPIC] [--abort TXN_ID] [--json]
                       transactions: coordinator, state, producer, running time, partitions;
                       --producers TOPIC: each partition's producers and open transactions;
                       --abort TXN_ID: abort its open transaction by hand, fencing its producer
    compact TOPIC [PARTITION]
                       clean a compacted topic's logs now on every broker (also a single
                       `kshim serve`): each broker's <data dir>/broker.sock; JSON per replica
    fault add ACTION [--api API] [--topic T [--partition P]] [--client-id ID] [--error CODE]
              [--delay-ms MS] [--after N] [--count N] [--duration-ms MS] [--broker NODE]
    fault list | fault clear [ID]
                       request fault rules of every broker (or --broker NODE), also a single
                       `kshim serve`: error, delay, drop, timeout (docs/faults.md)
    net partition|latency|loss A B [--ms MS] [--percent P] [--duration-ms MS]; net heal [A B]
                       faults of the replication traffic between brokers A and B, both ways
    requests [--follow] [--api API] [--client-id ID] [--broker NODE]
                       the brokers' request logs as JSON lines: api, version, client id,
                       partitions, errors, latency, the fault rule applied
    telemetry [--broker NODE] [--json]
                       client instances that pushed metrics (KIP-714) and their latest metrics
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kshim.ctl import compact, faults, groups, status, telemetry, txns
from kshim.ctl.common import CtlError


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("ctl", help="control a running cluster (kshim serve --brokers N)",
                       description="Inspect and disturb a running `kshim serve --brokers N` cluster through its "
                                   "controller.", epilog=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=Path("kshim-data"),
                   help="the cluster's data dir, as given to serve (default ./kshim-data)")
    commands = p.add_subparsers(dest="ctl_command", required=True, metavar="COMMAND")
    status_parser = commands.add_parser("status", help="brokers and partitions as JSON",
                                 description="Print the cluster's brokers and partitions as JSON.")
    status_parser.add_argument("--table", action="store_true", help="a human-readable table instead of JSON")
    status_parser.add_argument("--json", action="store_true", help="JSON (the default)")
    helps = {"kill": "SIGKILL a broker", "start": "start a stopped broker again",
             "pause": "SIGSTOP a broker", "resume": "SIGCONT a paused broker",
             "isolate": "cut a broker's replication traffic", "heal": "restore a broker's replication traffic"}
    for name, text in helps.items():
        c = commands.add_parser(name, help=text, description=text + ".")
        if name == "kill":
            c.add_argument("node", type=_node_or_controller, metavar="NODE",
                           help="the broker's node id, or `controller` (the supervisor restarts it)")
        else:
            c.add_argument("node", type=int, metavar="NODE", help="the broker's node id")
        c.add_argument("--json", action="store_true", help="print what was done as a JSON object")
    groups.add_parser(commands)
    txns.add_parser(commands)
    compact.add_parser(commands)
    telemetry.add_parser(commands)
    faults.add_parsers(commands)
    return p


def _node_or_controller(text: str) -> int | str:
    if text == status.CONTROLLER:
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a node id or `controller`, got {text!r}") from None


def main(args: argparse.Namespace) -> int:
    if args.ctl_command == "groups":
        return groups.main(args)
    if args.ctl_command == "txns":
        return txns.main(args)
    if args.ctl_command == "compact":
        return compact.main(args)
    if args.ctl_command == "telemetry":
        return telemetry.main(args)
    if args.ctl_command in ("fault", "requests", "net"):
        run = {"fault": faults.main_fault, "requests": faults.main_requests, "net": faults.main_net}
        try:
            return run[args.ctl_command](args)
        except CtlError as e:
            print(f"kshim ctl {args.ctl_command}: {e}", file=sys.stderr)
            return 1
    return status.main(args)
