"""`kshim ctl scram add|list|delete`: the cluster's SCRAM users, with the Kafka protocol, as
`kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[...]' --entity-type users` does:

- add USER --mechanism M: AlterUserScramCredentials (51) with one upsertion: a random salt and the
  salted password (PBKDF2 with M's hash, --iterations rounds) computed here, so the password never
  travels; the broker keeps only what SCRAM needs (RFC 5802's StoredKey and ServerKey). Adding a
  credential that exists replaces it (a new password, or new iterations).
- list [USER...]: DescribeUserScramCredentials (50): per user its mechanisms and iterations; salts
  and keys never leave the broker. Users given to `kshim serve --sasl-users` are not listed (nor does
  Kafka list the users of its JAAS file).
- delete USER --mechanism M: AlterUserScramCredentials with one deletion.

Any broker answers: it asks the controller, and answers once it has applied the new metadata (the
other brokers have it within a heartbeat). The broker comes from --bootstrap HOST:PORT[,...] (with
--command-config FILE for credentials), else from the `kshim serve` (one broker or --brokers N) in
--data-dir, over its inter-broker listener as the inter-broker user (kshim.ctl.security). Altering
needs ALTER on the cluster and listing DESCRIBE, when an authorizer is on.
"""
from __future__ import annotations

import argparse
import getpass
import json
import secrets
import sys
from pathlib import Path
from typing import Any

import anyio

from kshim.ctl.brokers import Pool, connect_any, failure_text
from kshim.ctl.common import SCRAM_CLIENT_ID, CtlError, error_text, text_table
from kshim.ctl.security import add_command_config, targets
from kshim.replication.client import ClientSecurity
from kshim.security.sasl import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_NAMES, SCRAM_TYPES, salted_password
from wire.errors import ErrorCode

DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
WANTED = {DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0), ALTER_USER_SCRAM_CREDENTIALS: (0, 0)}
DEFAULT_ITERATIONS = MIN_ITERATIONS  # kafka-configs' default, and the least a broker accepts
SALT_BYTES = 32
FAILURES = (OSError, TimeoutError, ConnectionError)


async def _ask(addresses: list[tuple[str, int]], security: ClientSecurity | None, api: int, body: dict) -> Any:
    pool = Pool(SCRAM_CLIENT_ID, WANTED, security)
    try:
        broker = await connect_any(pool, addresses)
        return (await broker.request(api, body))[1]
    finally:
        with anyio.CancelScope(shield=True):
            await pool.close()


def _run(addresses: list[tuple[str, int]], security: ClientSecurity | None, api: int, body: dict) -> Any:
    try:
        return anyio.run(_ask, addresses, security, api, body)
    except FAILURES as e:
        raise CtlError(failure_text(e)) from None


def _alter(data_dir: Path | None, bootstrap: str | None, command_config: Path | None, body: dict) -> None:
    resp = _run(*targets(data_dir, bootstrap, command_config), ALTER_USER_SCRAM_CREDENTIALS, body)
    for r in resp.results:
        if r.error_code == ErrorCode.RESOURCE_NOT_FOUND:
            mechanism = SCRAM_NAMES[body["deletions"][0]["mechanism"]]
            raise CtlError(f"{r.user} has no {mechanism} credential")
        if r.error_code:
            raise CtlError(f"{r.user}: {error_text(r.error_code, r.error_message)}")


def add(user: str, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, data_dir: Path | None = None,
        bootstrap: str | None = None, command_config: Path | None = None) -> dict[str, Any]:
    """Set USER's credential for MECHANISM (scripts and tests); CtlError if refused."""
    if not password:
        raise CtlError("the password is empty")
    salt = secrets.token_bytes(SALT_BYTES)
    _alter(data_dir, bootstrap, command_config, {"deletions": [], "upsertions": [{
        "name": user, "mechanism": SCRAM_TYPES[mechanism], "iterations": iterations, "salt": salt,
        "salted_password": salted_password(mechanism, password, salt, iterations)}]})
    return {"user": user, "mechanism": mechanism, "iterations": iterations, "action": "set"}


def delete(user: str, mechanism: str, data_dir: Path | None = None, bootstrap: str | None = None,
           command_config: Path | None = None) -> dict[str, Any]:
    """Delete USER's credential for MECHANISM; CtlError if it has none, or if refused."""
    _alter(data_dir, bootstrap, command_config, {
        "deletions": [{"name": user, "mechanism": SCRAM_TYPES[mechanism]}], "upsertions": []})
    return {"user": user, "mechanism": mechanism, "action": "deleted"}


def describe(users: list[str] | None = None, data_dir: Path | None = None, bootstrap: str | None = None,
             command_config: Path | None = None) -> dict[str, Any]:
    """{"users": [{"user", "credentials": [{"mechanism", "iterations"}]}], "errors": [...]}: every user
    with a credential, or those named (a named user with none is an error, the others still shown).
    CtlError when the request as a whole fails."""
    resp = _run(*targets(data_dir, bootstrap, command_config), DESCRIBE_USER_SCRAM_CREDENTIALS,
                {"users": [{"name": u} for u in users] if users else None})
    if resp.error_code:
        raise CtlError(error_text(resp.error_code, resp.error_message))
    found, errors = [], []
    for r in resp.results:
        if r.error_code == ErrorCode.RESOURCE_NOT_FOUND:
            errors.append(f"{r.user} has no SCRAM credential")
        elif r.error_code:
            errors.append(f"{r.user}: {error_text(r.error_code, r.error_message)}")
        else:
            found.append({"user": r.user, "credentials": [
                {"mechanism": SCRAM_NAMES.get(c.mechanism, f"mechanism {c.mechanism}"), "iterations": c.iterations}
                for c in sorted(r.credential_infos, key=lambda c: c.mechanism)]})
    return {"users": sorted(found, key=lambda u: u["user"]), "errors": errors}


def format_table(report: dict[str, Any]) -> str:
    rows = [["USER", "MECHANISM", "ITERATIONS"]]
    for u in report["users"]:
        rows += [[u["user"], c["mechanism"], str(c["iterations"])] for c in u["credentials"]]
    return text_table(rows) if len(rows) > 1 else "no SCRAM users"


# ------------------------------------------------------------------------------- entry points
def _iterations(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number, got {text!r}") from None


def add_parser(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "scram", help="SCRAM users: add, list, delete",
        description="Add, list and delete the cluster's SCRAM users with the Kafka protocol "
                    "(AlterUserScramCredentials, DescribeUserScramCredentials), as kafka-configs.sh "
                    "--entity-type users does: the salted password is computed here, the password never "
                    "travels. Any broker answers; clients authenticate with the new credential on every "
                    "broker once it has the new metadata. Connects over the inter-broker listener of the "
                    "`kshim serve` in --data-dir, or to --bootstrap (docs/security.md).")
    sub = p.add_subparsers(dest="scram_command", required=True, metavar="ACTION")
    mechanisms = sorted(SCRAM_TYPES)
    a = sub.add_parser("add", help="set a user's credential for a mechanism (replacing one it has)",
                       description="Set USER's SCRAM credential for --mechanism, replacing one it has. "
                                   "The password comes from --password, --password-stdin (its first line) "
                                   "or, on a terminal, a prompt.")
    a.add_argument("user", metavar="USER")
    a.add_argument("--mechanism", required=True, choices=mechanisms, type=str.upper)
    given = a.add_mutually_exclusive_group()
    given.add_argument("--password", metavar="P",
                       help="the password; visible to other local users in the process list: prefer --password-stdin")
    given.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    a.add_argument("--iterations", type=_iterations, default=DEFAULT_ITERATIONS,
                   help=f"PBKDF2 iterations, {MIN_ITERATIONS}..{MAX_ITERATIONS} (default {DEFAULT_ITERATIONS})")
    lst = sub.add_parser("list", help="users with SCRAM credentials: mechanism, iterations",
                         description="List the SCRAM users (all, or those named) with each mechanism they "
                                     "have a credential for and its iterations. A named user with none is "
                                     "an error (exit 1); the others are still listed.")
    lst.add_argument("users", nargs="*", metavar="USER")
    d = sub.add_parser("delete", help="delete a user's credential for a mechanism",
                       description="Delete USER's SCRAM credential for --mechanism: clients can no longer "
                                   "authenticate with it.")
    d.add_argument("user", metavar="USER")
    d.add_argument("--mechanism", required=True, choices=mechanisms, type=str.upper)
    for c in (a, lst, d):
        c.add_argument("--bootstrap", metavar="HOST:PORT",
                       help="any broker (kshim or Kafka), comma-separated for several; wins over --data-dir")
        add_command_config(c)
        c.add_argument("--json", action="store_true", help="JSON instead of text")
    return p


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return args.password
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if sys.stdin.isatty():
        return getpass.getpass(f"password of {args.user}: ")
    raise CtlError("give the password with --password-stdin (or --password)")


def main(args: argparse.Namespace) -> int:
    where = {"data_dir": args.data_dir, "bootstrap": args.bootstrap, "command_config": args.command_config}
    try:
        if args.scram_command == "add":
            done = add(args.user, args.mechanism, _password(args), args.iterations, **where)
            text = f"{done['user']}: {done['mechanism']} credential set ({done['iterations']} iterations)"
        elif args.scram_command == "delete":
            done = delete(args.user, args.mechanism, **where)
            text = f"{done['user']}: {done['mechanism']} credential deleted"
        else:
            done = describe(args.users, **where)
            text = format_table(done)
    except CtlError as e:
        print(f"kshim ctl scram: {e}", file=sys.stderr)
        return 1
    print(json.dumps(done, indent=2) if args.json else text)
    for error in done.get("errors", ()):
        print(f"kshim ctl scram: {error}", file=sys.stderr)
    return 1 if done.get("errors") else 0
