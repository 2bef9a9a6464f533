"""The `kshim ctl` command line: its parser and dispatch (the commands: kshim.ctl's docstring)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import kshim.ctl
from kshim.ctl import compact, faults, groups, scram, status, telemetry, txns
from kshim.ctl.common import CtlError

HELP = "inspect and disturb a running kshim serve: a single broker or a --brokers N cluster"


def add_parser(sub) -> argparse.ArgumentParser:
    assert kshim.ctl.__doc__
    p = sub.add_parser("ctl", help=HELP,
                       description="Inspect and disturb a running `kshim serve`, a single broker or a "
                                   "`--brokers N` cluster.\nkill, start, pause, resume, isolate, heal and net "
                                   "need a cluster; the other commands work on both.",
                       epilog=kshim.ctl.__doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=Path("kshim-data"),
                   help="the data dir given to kshim serve (default ./kshim-data)")
    commands = p.add_subparsers(dest="ctl_command", required=True, metavar="COMMAND")
    status_parser = commands.add_parser("status", help="brokers and partitions as JSON",
                                 description="Print the brokers and partitions as JSON.")
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
    scram.add_parser(commands)
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
    if args.ctl_command == "scram":
        return scram.main(args)
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
