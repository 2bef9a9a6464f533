"""`kshim ctl txns`: transactions as their coordinators describe them; with --producers TOPIC, the
producers each partition's leader knows (how to find a hanging transaction).

Transactions live on their coordinators (brokers), not in the controller, so this asks the brokers
with the Kafka protocol, as Kafka's admin client and kafka-transactions.sh do:

- Metadata (3) on a bootstrap broker: every broker;
- ListTransactions (66, v1 where served) on every broker, merged: each lists the transactional ids
  it coordinates; --state is sent as its state filter;
- FindCoordinator (10, v4+, key type 1) for all ids in one batch (coordinator_keys), then
  DescribeTransactions (65) on each coordinator for its ids: state, producer id and epoch,
  timeout, partitions, and the start time of the open transaction, shown as how long it has been
  running (by this machine's clock).

With --producers TOPIC instead: Metadata for the topic's partition leaders, DescribeProducers (61)
on each leader for its partitions: per producer id its epoch, last sequence and timestamp, the
epoch of the coordinator whose marker it saw last, and the first offset of its open transaction.
The transactional id and state of each producer id come from the ListTransactions answers: a
producer holding an open transaction on a partition while its transactional id is not Ongoing
(or Prepare*), or has no transactional id, is a hanging transaction.

With --abort TXN_ID: end that id's open transaction by hand, as Kafka's Admin.forceTerminateTransaction
(`kafka-transactions.sh force-terminate`) does: DescribeTransactions on its coordinator (the id must
exist), then InitProducerId (22) with the id, asked again while the answer is CONCURRENT_TRANSACTIONS
(the coordinator is writing the abort's markers) until it is NONE. The coordinator aborts the open
transaction with a bumped epoch, so the producer that held it is fenced (its next request gets
PRODUCER_FENCED) and read_committed consumers move past it. An id with no open transaction just
gets its epoch bumped, fencing its producer all the same.

The brokers come from --bootstrap HOST:PORT[,...] (with --command-config FILE for credentials),
else from the controller of the cluster in --data-dir over its inter-broker listener, as for
`ctl groups`. An id or partition that cannot be described is shown with its
error; the others are still shown. Output is a table, or JSON with --json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

import anyio

from kshim.ctl.brokers import (COORDINATOR_WAIT_S, FIND_COORDINATOR, METADATA, METADATA_VERSIONS,
                               RETRIABLE_COORDINATOR, Broker, Pool, connect_any, failure_text, metadata)
from kshim.ctl.common import TXNS_CLIENT_ID, CtlError, cell_text, error_name, error_text, text_table
from kshim.ctl.security import add_command_config, targets
from kshim.replication.client import ClientSecurity
from wire.errors import ErrorCode

INIT_PRODUCER_ID, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 22, 61, 65, 66
TRANSACTION_KEY = 1  # FindCoordinator key type of a transactional id
WANTED = {METADATA: METADATA_VERSIONS, FIND_COORDINATOR: (4, 6),  # v4: batched coordinator_keys
          LIST_TRANSACTIONS: (0, 1), DESCRIBE_TRANSACTIONS: (0, 0), DESCRIBE_PRODUCERS: (0, 0),
          INIT_PRODUCER_ID: (3, 5)}  # v3+: names no producer id (-1): a fresh instance of the id
ABORT_WAIT_S = 30.0  # the abort's markers must be written within this
OPEN_STATES = {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}  # a transaction is running
KNOWN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                "PrepareEpochFence", "Dead")
FAILURES = (CtlError, OSError, TimeoutError, ConnectionError)

Nodes = dict[int, tuple[str, int]]


def _none_if_negative(v: int) -> int | None:
    return v if v >= 0 else None  # the protocol's -1 means "none"


# ---------------------------------------------------------------------------------- requests
async def list_transactions(pool: Pool, brokers: Nodes, states: list[str],
                            errors: list[str]) -> dict[str, dict]:
    """transactional id -> {producer_id, state}, merged over every broker's answer."""
    listed: dict[str, dict] = {}
    unknown: set[str] = set()
    for node, (host, port) in sorted(brokers.items()):
        try:
            b = await pool.get(host, port)
            _, resp = await b.request(LIST_TRANSACTIONS, {"state_filters": states, "producer_id_filters": [],
                                                          "duration_filter": -1})
        except FAILURES as e:
            await pool.drop(host, port)
            errors.append(f"ListTransactions on broker {node} ({host}:{port}): {failure_text(e)}")
            continue
        if resp.error_code:
            errors.append(f"ListTransactions on broker {node}: {error_name(resp.error_code)}")
        unknown.update(resp.unknown_state_filters)
        for t in resp.transaction_states:
            listed.setdefault(t.transactional_id, {"producer_id": t.producer_id, "state": t.transaction_state})
    if unknown:
        errors.append(f"unknown state(s) {', '.join(sorted(unknown))}; Kafka's are {', '.join(KNOWN_STATES)}")
    return listed


async def find_coordinators(b: Broker, ids: list[str]) -> dict[str, tuple[int, str, int] | str]:
    """id -> (node id, host, port) or the error (retriable ones asked again for a while); an id the
    broker did not answer for is missing."""
    out: dict[str, tuple[int, str, int] | str] = {}
    todo = list(ids)
    with anyio.move_on_after(COORDINATOR_WAIT_S):
        while todo:
            _, resp = await b.request(FIND_COORDINATOR, {"key_type": TRANSACTION_KEY, "coordinator_keys": todo})
            retry = []
            for c in resp.coordinators:
                if c.error_code == 0:
                    out[c.key] = (c.node_id, c.host, c.port)
                else:
                    out[c.key] = "FindCoordinator: " + error_text(c.error_code, c.get("error_message"))
                    if c.error_code in RETRIABLE_COORDINATOR:
                        retry.append(c.key)
            todo = retry
            if todo:
                await anyio.sleep(0.2)
    return out


async def ask_broker(pool: Pool, node: int, host: str, port: int, api_key: int, body: dict,
                     items: list[dict]) -> Any | None:
    """One request to one broker; if it fails, every item it was about gets the error and the
    answer is None (the other brokers' items are still shown)."""
    try:
        broker = await pool.get(host, port)
        _, resp = await broker.request(api_key, body)
        return resp
    except FAILURES as e:
        await pool.drop(host, port)
        name = {DESCRIBE_TRANSACTIONS: "DescribeTransactions", DESCRIBE_PRODUCERS: "DescribeProducers"}[api_key]
        for item in items:
            item["error"] = f"{name} on broker {node}: {failure_text(e)}"
        return None


async def describe_transactions(pool: Pool, bootstrap: Broker, listed: dict[str, dict]) -> list[dict]:
    now_ms = time.time_ns() // 1_000_000
    out = {tid: {"transactional_id": tid, "coordinator": None, "state": t["state"], "producer_id": t["producer_id"],
                 "producer_epoch": None, "timeout_ms": None, "start_time_ms": None, "running_ms": None,
                 "partitions": {}, "error": None} for tid, t in listed.items()}
    if not out:
        return []
    try:
        found = await find_coordinators(bootstrap, sorted(out))
    except FAILURES as e:
        found = dict.fromkeys(out, f"FindCoordinator: {failure_text(e)}")
    by_coordinator: dict[tuple[int, str, int], list[str]] = {}
    for tid in out:
        where = found.get(tid, "FindCoordinator: no answer for the id")
        if isinstance(where, str):
            out[tid]["error"] = where
        else:
            out[tid]["coordinator"] = {"node_id": where[0], "host": where[1], "port": where[2]}
            by_coordinator.setdefault(where, []).append(tid)
    for (node, host, port), ids in sorted(by_coordinator.items()):
        resp = await ask_broker(pool, node, host, port, DESCRIBE_TRANSACTIONS, {"transactional_ids": ids},
                                [out[tid] for tid in ids])
        if resp is None:
            continue
        for d in resp.transaction_states:
            t = out.get(d.transactional_id)
            if t is None:
                continue
            if d.error_code:
                t["error"] = f"DescribeTransactions on broker {node}: {error_name(d.error_code)}"
                continue
            start = _none_if_negative(d.transaction_start_time_ms)
            t.update(state=d.transaction_state, producer_id=d.producer_id, producer_epoch=d.producer_epoch,
                     timeout_ms=d.transaction_timeout_ms, start_time_ms=start,
                     running_ms=max(now_ms - start, 0) if start is not None and d.transaction_state in OPEN_STATES
                     else None,
                     partitions={p.topic: sorted(p.partitions) for p in d.topics})
    return [out[tid] for tid in sorted(out)]


async def describe_producers(pool: Pool, bootstrap: Broker, brokers: Nodes, topic: str,
                             owners: dict[int, tuple[str, str]]) -> list[dict]:
    """Per partition of `topic`: its leader and the producers it knows (or the error)."""
    md = await metadata(bootstrap, [topic])
    t = next((t for t in md.topics if t.name == topic), None)
    if t is None or t.error_code:
        raise CtlError(f"topic {topic}: {error_name(t.error_code) if t else 'not in the Metadata answer'}")
    brokers = {**brokers, **{br.node_id: (br.host, br.port) for br in md.brokers}}
    parts = {p.partition_index: {"partition": p.partition_index, "leader": _none_if_negative(p.leader_id),
                                 "error": None, "producers": []} for p in t.partitions}
    by_leader: dict[int, list[int]] = {}
    for index, p in parts.items():
        if p["leader"] is None or p["leader"] not in brokers:
            p["error"] = "no leader"
        else:
            by_leader.setdefault(p["leader"], []).append(index)
    for leader, indexes in sorted(by_leader.items()):
        host, port = brokers[leader]
        resp = await ask_broker(pool, leader, host, port, DESCRIBE_PRODUCERS,
                                {"topics": [{"name": topic, "partition_indexes": sorted(indexes)}]},
                                [parts[i] for i in indexes])
        if resp is None:
            continue
        for rt in resp.topics:
            for rp in rt.partitions:
                entry = parts.get(rp.partition_index)
                if entry is None:
                    continue
                if rp.error_code:
                    entry["error"] = f"DescribeProducers on broker {leader}: " + \
                        error_text(rp.error_code, rp.get("error_message"))
                    continue
                for a in rp.active_producers:
                    tid, state = owners.get(a.producer_id, (None, None))
                    entry["producers"].append({
                        "producer_id": a.producer_id, "producer_epoch": a.producer_epoch,
                        "last_sequence": _none_if_negative(a.last_sequence),
                        "last_timestamp": _none_if_negative(a.last_timestamp),
                        "coordinator_epoch": _none_if_negative(a.coordinator_epoch),
                        "open_txn_start_offset": _none_if_negative(a.current_txn_start_offset),
                        "transactional_id": tid, "transaction_state": state})
    return [parts[i] for i in sorted(parts)]


# --------------------------------------------------------------------------------- the report
async def collect(addresses: list[tuple[str, int]], states: list[str], topic: str | None,
                  security: ClientSecurity | None = None) -> dict[str, Any]:
    """The report (see the module docstring) from the brokers reachable through `addresses`,
    connecting with `security` (None: PLAINTEXT)."""
    pool = Pool(TXNS_CLIENT_ID, WANTED, security)
    try:
        bootstrap = await connect_any(pool, addresses)
        brokers = {b.node_id: (b.host, b.port) for b in (await metadata(bootstrap, [])).brokers}
        errors: list[str] = []
        report: dict[str, Any] = {"brokers": [{"node_id": n, "host": h, "port": p}
                                              for n, (h, p) in sorted(brokers.items())], "errors": errors}
        listed = await list_transactions(pool, brokers, [] if topic else states, errors)
        if topic is not None:
            owners = {t["producer_id"]: (tid, t["state"]) for tid, t in listed.items()}
            report.update(topic=topic, partitions=await describe_producers(pool, bootstrap, brokers, topic, owners))
        else:
            described = await describe_transactions(pool, bootstrap, listed)
            # the state may have moved on since it was listed: keep the filter's promise
            report["transactions"] = [t for t in described if not states or t["error"] or t["state"] in states]
        return report
    finally:
        with anyio.CancelScope(shield=True):
            await pool.close()


async def force_terminate(addresses: list[tuple[str, int]], transactional_id: str,
                          security: ClientSecurity | None = None) -> dict[str, Any]:
    """--abort: see the module docstring. The id's state before, and its producer id and epoch after."""
    pool = Pool(TXNS_CLIENT_ID, WANTED, security)
    try:
        bootstrap = await connect_any(pool, addresses)
        with anyio.move_on_after(ABORT_WAIT_S) as scope:
            while True:
                found = (await find_coordinators(bootstrap, [transactional_id])).get(transactional_id)
                if isinstance(found, str) or found is None:
                    raise CtlError(found or f"FindCoordinator: no answer for {transactional_id}")
                node, host, port = found
                coordinator = await pool.get(host, port)
                _, described = await coordinator.request(DESCRIBE_TRANSACTIONS, {"transactional_ids": [transactional_id]})
                d = described.transaction_states[0]
                if d.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise CtlError(f"transactional id {transactional_id!r} not found on its coordinator (broker {node})")
                if d.error_code:
                    await anyio.sleep(0.2)  # NOT_COORDINATOR, loading...: find it again
                    continue
                before = {"state": d.transaction_state, "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                          "partitions": {p.topic: sorted(p.partitions) for p in d.topics}}
                while True:
                    _, answer = await coordinator.request(INIT_PRODUCER_ID, {
                        "transactional_id": transactional_id, "transaction_timeout_ms": d.transaction_timeout_ms,
                        "producer_id": -1, "producer_epoch": -1})
                    if answer.error_code != ErrorCode.CONCURRENT_TRANSACTIONS:
                        break
                    await anyio.sleep(0.1)  # the abort's markers are being written
                if answer.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    continue
                if answer.error_code:
                    raise CtlError(f"InitProducerId for {transactional_id!r} on broker {node}: "
                                   f"{error_name(answer.error_code)}")
                return {"transactional_id": transactional_id, "coordinator": node, "before": before,
                        "producer_id": answer.producer_id, "producer_epoch": answer.producer_epoch}
        assert scope.cancel_called
        raise CtlError(f"the transaction of {transactional_id!r} was not aborted within {ABORT_WAIT_S:.0f} s")
    finally:
        with anyio.CancelScope(shield=True):
            await pool.close()


def abort(data_dir=None, bootstrap: str | None = None, transactional_id: str = "",
          command_config=None) -> dict[str, Any]:
    """--abort, for scripts and tests. CtlError when it cannot be done."""
    addresses, security = targets(data_dir, bootstrap, command_config)
    try:
        return anyio.run(force_terminate, addresses, transactional_id, security)
    except (OSError, TimeoutError, ConnectionError) as e:
        raise CtlError(failure_text(e)) from None


def txns(data_dir=None, bootstrap: str | None = None, states: list[str] | None = None,
         producers: str | None = None, command_config=None) -> dict[str, Any]:
    """The report, for scripts and tests. CtlError when no broker can be asked."""
    addresses, security = targets(data_dir, bootstrap, command_config)
    try:
        return anyio.run(collect, addresses, states or [], producers, security)
    except (OSError, TimeoutError, ConnectionError) as e:
        raise CtlError(failure_text(e)) from None


# ------------------------------------------------------------------------------------ output
def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    s = ms / 1000
    return f"{s:.1f}s" if s < 60 else f"{int(s // 60)}m{int(s % 60):02d}s" if s < 3600 else \
        f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_table(report: dict[str, Any]) -> str:
    lines = [f"error: {e}" for e in report["errors"]]
    if "topic" in report:
        rows = [["PARTITION", "LEADER", "PRODUCER-ID", "EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP",
                 "COORDINATOR-EPOCH", "TXN-START-OFFSET", "TRANSACTIONAL-ID", "TXN-STATE"]]
        for p in report["partitions"]:
            if p["error"]:
                lines.append(f"error: {report['topic']}-{p['partition']}: {p['error']}")
            for a in p["producers"]:
                rows.append([str(p["partition"]), cell_text(p["leader"]), str(a["producer_id"]), str(a["producer_epoch"]),
                             cell_text(a["last_sequence"]), _time(a["last_timestamp"]), cell_text(a["coordinator_epoch"]),
                             cell_text(a["open_txn_start_offset"]), cell_text(a["transactional_id"]),
                             cell_text(a["transaction_state"])])
        lines.append(f"TOPIC {report['topic']}")
        lines.append(text_table(rows) if len(rows) > 1 else "no producers")
        return "\n".join(lines)
    rows = [["TRANSACTIONAL-ID", "COORDINATOR", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "RUNNING",
             "PARTITIONS", "ERROR"]]
    for t in report["transactions"]:
        parts = " ".join(f"{topic}:{','.join(map(str, ps))}" for topic, ps in sorted(t["partitions"].items()))
        rows.append([t["transactional_id"], cell_text(t["coordinator"] and t["coordinator"]["node_id"]),
                     cell_text(t["state"]), cell_text(t["producer_id"]), cell_text(t["producer_epoch"]), cell_text(t["timeout_ms"]),
                     _duration(t["running_ms"]), parts or "-", cell_text(t["error"])])
    lines.append(text_table(rows) if len(rows) > 1 else "no transactions")
    return "\n".join(lines)


# ------------------------------------------------------------------------------- entry points
def add_parser(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "txns", help="transactions: state, producer, partitions; --producers TOPIC: a topic's producers",
        description="List the cluster's transactional ids with their coordinator, state, producer id and epoch, "
                    "timeout, how long the open transaction has been running and its partitions, asking the "
                    "brokers (ListTransactions on every broker, DescribeTransactions on each id's coordinator). "
                    "--producers TOPIC shows instead the producers each partition's leader knows "
                    "(DescribeProducers), with the start offset of their open transaction: how to find a "
                    "hanging transaction.")
    p.add_argument("--bootstrap", metavar="HOST:PORT",
                   help="any broker (kshim or Kafka), comma-separated for several; wins over --data-dir")
    add_command_config(p)
    p.add_argument("--state", action="append", metavar="STATE", dest="states",
                   help=f"show transactions in this state only; repeatable ({', '.join(KNOWN_STATES)})")
    p.add_argument("--producers", metavar="TOPIC", help="show the producers of every partition of TOPIC instead")
    p.add_argument("--abort", metavar="TXN_ID",
                   help="abort this transactional id's open transaction by hand (as kafka-transactions.sh "
                        "force-terminate): its producer is fenced")
    p.add_argument("--json", action="store_true", help="JSON instead of a table")
    return p


def main(args: argparse.Namespace) -> int:
    if args.producers is not None and args.states:
        print("kshim ctl txns: --state filters transactions, not --producers", file=sys.stderr)
        return 2
    if args.abort is not None:
        if args.producers is not None or args.states:
            print("kshim ctl txns: --abort goes alone (no --state, no --producers)", file=sys.stderr)
            return 2
        try:
            done = abort(args.data_dir, args.bootstrap, args.abort, args.command_config)
        except CtlError as e:
            print(f"kshim ctl txns: {e}", file=sys.stderr)
            return 1
        before = done["before"]
        print(json.dumps(done, indent=2) if args.json else
              f"{done['transactional_id']}: was {before['state']} (producer {before['producer_id']} epoch "
              f"{before['producer_epoch']}); aborted and fenced by its coordinator (broker {done['coordinator']}), "
              f"now producer {done['producer_id']} epoch {done['producer_epoch']}")
        return 0
    try:
        report = txns(args.data_dir, args.bootstrap, args.states, args.producers, args.command_config)
    except CtlError as e:
        print(f"kshim ctl txns: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else format_table(report))
    return 0
