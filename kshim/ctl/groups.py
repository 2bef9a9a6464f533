"""`kshim ctl groups`: consumer groups, their members and assignments, committed offsets and lag.

Groups live on their coordinators (brokers), not in the controller, so this asks the brokers with
the Kafka protocol, as Kafka's kafka-consumer-groups.sh does:

- Metadata (3) on a bootstrap broker: every broker, and the leaders of the group's partitions;
- ListGroups (16) on every broker: which groups exist (skipped with --group);
- FindCoordinator (10) per group, DescribeGroups (15) on its coordinator: state, protocol,
  members; a classic consumer's assignment bytes are decoded (ConsumerProtocolAssignment);
- OffsetFetch (9) on the coordinator: committed offsets;
- ListOffsets (2) on each partition's leader, timestamp latest and isolation read_uncommitted
  (the high watermark, what Kafka's tools call the log end offset): lag = log end - committed.

The brokers come from --bootstrap HOST:PORT[,HOST:PORT...] (any kshim or Kafka broker), else from
the controller of the cluster in --data-dir (`kshim serve --brokers N`). Through --data-dir ctl
connects over the inter-broker listener as the brokers do (its TLS and SASL user); with
--bootstrap, --command-config FILE gives the client properties (kshim.ctl.security). Versions are negotiated
with ApiVersions. A group whose coordinator cannot be found or answers with an error is shown
with that error; the other groups are still shown. KIP-848 ("consumer" type) groups, which
DescribeGroups does not describe, are described with ConsumerGroupDescribe (API 69), and share
groups (KIP-932, "share" type) with ShareGroupDescribe (API 77): state, epochs, members and the
partitions each member shares (a share group commits no offsets: OffsetFetch is not asked).
With --data-dir, each share group also shows its in-flight records per share partition: every
broker's admin socket (ShareInFlight) answers for the share partitions it leads (start offset,
window end, records available, acquired, acknowledged and archived); --bootstrap alone has no
admin sockets to ask.
"""
from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path
from typing import Any

import anyio

from kshim.controller import messages as ops
from kshim.ctl import brokers_admin
from kshim.ctl.brokers import (COORDINATOR_WAIT_S, FIND_COORDINATOR, METADATA, METADATA_VERSIONS,
                               REQUEST_TIMEOUT_S, RETRIABLE_COORDINATOR, Broker, Pool, addresses_from_cluster,
                               brokers_down, cluster_brokers, connect_any, failure_text, metadata,
                               parse_addresses)
from kshim.ctl.common import GROUPS_CLIENT_ID, CtlError, cell_text, error_name, error_text, text_table
from kshim.ctl.security import add_command_config, from_command_config, from_data_dir
from kshim.replication.client import ClientSecurity
from wire.errors import ErrorCode

END_OFFSETS = "ListOffsets latest, isolation read_uncommitted (the high watermark), asked of each partition's leader"

LIST_GROUPS, DESCRIBE_GROUPS, OFFSET_FETCH, LIST_OFFSETS = 16, 15, 9, 2
CONSUMER_GROUP_DESCRIBE = 69  # KIP-848 groups
SHARE_GROUP_DESCRIBE = 77  # KIP-932 share groups
# the versions this module can speak, per API; the highest one the broker serves too is used
OUR_VERSIONS = {METADATA: METADATA_VERSIONS, LIST_GROUPS: (0, 5), FIND_COORDINATOR: (0, 6),
                DESCRIBE_GROUPS: (0, 5), OFFSET_FETCH: (2, 9), LIST_OFFSETS: (1, 9), CONSUMER_GROUP_DESCRIBE: (0, 0),
                SHARE_GROUP_DESCRIBE: (1, 1)}


# ------------------------------------------------------------------------- consumer protocol
def decode_assignment(data: bytes | None) -> dict[str, list[int]]:
    """ConsumerProtocolAssignment (versions 0-3, never flexible): version int16, then topics
    [name string, partitions [int32]], then user_data bytes (ignored). {} for empty bytes (a member
    without an assignment yet). ValueError when the bytes are not that."""
    if not data:
        return {}
    data = bytes(data)
    try:
        (version,), pos = struct.unpack_from(">h", data, 0), 2
        if version < 0:
            raise ValueError(f"assignment version {version}")
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: dict[str, list[int]] = {}
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if length < 0 or pos + length > len(data):
                raise ValueError("bad topic name")
            name = data[pos:pos + length].decode("utf-8")
            pos += length
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            parts = list(struct.unpack_from(f">{max(n, 0)}i", data, pos))
            pos += 4 * max(n, 0)
            out.setdefault(name, []).extend(parts)
        return {t: sorted(p) for t, p in out.items()}
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"undecodable assignment: {e}") from None


def encode_assignment(assignment: dict[str, list[int]], version: int = 0) -> bytes:
    """The inverse of decode_assignment (for tests)."""
    out = struct.pack(">hi", version, len(assignment))
    for topic, parts in assignment.items():
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(parts)}i", len(parts), *parts)
    return out + struct.pack(">i", -1)


# ---------------------------------------------------------------------------------- requests
async def list_groups(b: Broker) -> list[dict]:
    version, resp = await b.request(LIST_GROUPS, {"states_filter": [], "types_filter": []})
    if resp.error_code:
        raise CtlError(f"ListGroups on {b.address}: {error_name(resp.error_code)}")
    return [{"group_id": g.group_id, "protocol_type": g.protocol_type,
             "state": g.get("group_state") if version >= 4 else None,
             "group_type": g.get("group_type") if version >= 5 else None} for g in resp.groups]


async def find_coordinator(b: Broker, group_id: str) -> tuple[int, str, int]:
    """(node id, host, port); CtlError with the error after retrying the retriable ones."""
    code = None
    # the codec refuses a non-ignorable field of the other versions: send the one this version has
    body = ({"key_type": 0, "coordinator_keys": [group_id]} if b.versions.get(FIND_COORDINATOR, 0) >= 4
            else {"key_type": 0, "key": group_id})
    with anyio.move_on_after(COORDINATOR_WAIT_S):
        while True:
            version, resp = await b.request(FIND_COORDINATOR, body)
            if version >= 4:
                answer = resp.coordinators[0] if resp.coordinators else None
                if answer is None:
                    raise CtlError("FindCoordinator: empty answer")
            else:
                answer = resp
            code = answer.error_code
            if code == ErrorCode.NONE:
                return answer.node_id, answer.host, answer.port
            if code not in RETRIABLE_COORDINATOR:
                raise CtlError("FindCoordinator: " + error_text(code, answer.get("error_message")))
            await anyio.sleep(0.2)
    last = f" (last answer {error_name(code)})" if code is not None else ""
    raise CtlError(f"FindCoordinator: no coordinator within {COORDINATOR_WAIT_S:.0f}s{last}")


async def offset_fetch(b: Broker, group_id: str) -> list[dict]:
    # v8+ asks by groups, earlier versions by group_id (the codec refuses the other versions' field)
    body = ({"groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": None}]}
            if b.versions.get(OFFSET_FETCH, 0) >= 8 else {"group_id": group_id, "topics": None})
    version, resp = await b.request(OFFSET_FETCH, {"require_stable": False, **body})
    if version >= 8:
        g = resp.groups[0]
        code, topics = g.error_code, g.topics
    else:
        code, topics = resp.error_code, resp.topics
    if code:
        raise CtlError("OffsetFetch: " + error_name(code))
    rows = []
    for t in topics:
        for p in t.partitions:
            rows.append({"topic": t.name, "partition": p.partition_index,
                         "committed": p.committed_offset if p.committed_offset >= 0 else None,
                         "metadata": p.metadata, "error": error_name(p.error_code) if p.error_code else None})
    return rows


async def end_offsets(pool: Pool, bootstrap: Broker, partitions: set[tuple[str, int]],
                      brokers: dict[int, tuple[str, int]], down: dict[int, str] | None = None
                      ) -> dict[tuple[str, int], tuple[int | None, str | None]]:
    """(topic, partition) -> (log end offset, error), asking each partition's leader (not those `down`)."""
    down = down or {}
    out: dict[tuple[str, int], tuple[int | None, str | None]] = {}
    if not partitions:
        return out
    topics = sorted({t for t, _ in partitions})
    try:
        md = await metadata(bootstrap, topics)
    except (CtlError, OSError, TimeoutError, ConnectionError) as e:
        return {tp: (None, f"Metadata: {failure_text(e)}") for tp in partitions}
    brokers = {**brokers, **{br.node_id: (br.host, br.port) for br in md.brokers}}
    by_leader: dict[int, list[tuple[str, int]]] = {}
    leaders: dict[tuple[str, int], int] = {}
    for t in md.topics:
        for p in t.partitions:
            leaders[(t.name, p.partition_index)] = p.leader_id
        if t.error_code:
            for tp in partitions:
                if tp[0] == t.name:
                    out[tp] = (None, f"Metadata: {error_name(t.error_code)}")
    for tp in partitions:
        if tp in out:
            continue
        leader = leaders.get(tp, -1)
        if leader < 0 or leader not in brokers:
            out[tp] = (None, "no leader" if tp in leaders else "unknown partition")
        elif leader in down:
            out[tp] = (None, f"its leader, broker {leader}, is {down[leader]}")
        else:
            by_leader.setdefault(leader, []).append(tp)
    for leader, tps in by_leader.items():
        host, port = brokers[leader]
        topics_body: dict[str, list] = {}
        for t, p in sorted(tps):
            topics_body.setdefault(t, []).append({"partition_index": p, "current_leader_epoch": -1,
                                                  "timestamp": -1})
        try:
            b = await pool.get(host, port)
            _, resp = await b.request(LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": 0, "timeout_ms": int(REQUEST_TIMEOUT_S * 1000),
                "topics": [{"name": t, "partitions": ps} for t, ps in topics_body.items()]})
        except (CtlError, OSError, TimeoutError, ConnectionError) as e:
            await pool.drop(host, port)
            for tp in tps:
                out[tp] = (None, f"ListOffsets on broker {leader}: {failure_text(e)}")
            continue
        for t in resp.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                out[tp] = (p.offset, None) if p.error_code == 0 else \
                    (None, f"ListOffsets on broker {leader}: {error_name(p.error_code)}")
        for tp in tps:
            out.setdefault(tp, (None, f"ListOffsets on broker {leader}: no answer for the partition"))
    return out


# --------------------------------------------------------------------------------- the report
async def collect(addresses: list[tuple[str, int]], group: str | None = None,
                  down: dict[int, str] | None = None, security: ClientSecurity | None = None) -> dict[str, Any]:
    """The report (see the module docstring) from the brokers reachable through `addresses`;
    `down`: brokers known not to answer (node id -> why, from the cluster's supervisor), not asked;
    `security`: TLS and SASL of the connections (None: PLAINTEXT)."""
    pool = Pool(GROUPS_CLIENT_ID, OUR_VERSIONS, security)
    try:
        return await _collect(pool, addresses, group, down or {})
    finally:
        with anyio.CancelScope(shield=True):
            await pool.close()


async def _collect(pool: Pool, addresses: list[tuple[str, int]], group: str | None,
                   down: dict[int, str]) -> dict[str, Any]:
    bootstrap = await connect_any(pool, addresses)
    md = await metadata(bootstrap, [])
    brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
    errors: list[str] = []

    # which groups: ListGroups on every broker (each lists the groups it coordinates), all at once,
    # so brokers that do not answer cost one timeout, not one each
    listed: dict[str, dict] = {}
    if group is not None:
        listed[group] = {"group_id": group, "protocol_type": None, "state": None, "group_type": None}
    else:
        answers: dict[int, list[dict]] = {}

        async def ask(node: int, host: str, port: int) -> None:
            try:
                answers[node] = await list_groups(await pool.get(host, port))
            except (CtlError, OSError, TimeoutError, ConnectionError) as e:
                await pool.drop(host, port)
                errors.append(f"broker {node} ({host}:{port}) did not list its groups: {failure_text(e)}")
        for node in sorted(down):  # also once fenced, when Metadata no longer names it
            errors.append(f"broker {node} is {down[node]}: the groups it coordinates are not listed")
        async with anyio.create_task_group() as tg:
            for node, (host, port) in sorted(brokers.items()):
                if node not in down:
                    tg.start_soon(ask, node, host, port)
        for node in sorted(answers):
            for g in answers[node]:
                listed.setdefault(g["group_id"], g)

    groups = []
    for group_id in sorted(listed):
        groups.append(await _describe(pool, bootstrap, brokers, listed[group_id], down))

    # end offsets of every partition shown, from the partitions' leaders
    wanted = {(o["topic"], o["partition"]) for g in groups for o in g["offsets"]}
    ends = await end_offsets(pool, bootstrap, wanted, brokers, down)
    for g in groups:
        for o in g["offsets"]:
            end, error = ends.get((o["topic"], o["partition"]), (None, "no end offset"))
            o["log_end_offset"] = end
            o["lag"] = end - o["committed"] if end is not None and o["committed"] is not None else None
            if error and not o["error"]:
                o["error"] = error
            # the documented key order
            ordered = {k: o[k] for k in ("topic", "partition", "committed", "log_end_offset", "lag", "metadata",
                                          "error")}
            o.clear()
            o.update(ordered)
    return {"brokers": [{"node_id": n, "host": h, "port": p} for n, (h, p) in sorted(brokers.items())],
            "end_offsets": END_OFFSETS, "errors": errors, "groups": groups}


async def _describe(pool: Pool, bootstrap: Broker, brokers: dict, listed: dict, down: dict[int, str]
                    ) -> dict[str, Any]:
    group_id = listed["group_id"]
    out: dict[str, Any] = {"group_id": group_id, "state": listed.get("state"),
                           "group_type": listed.get("group_type"), "protocol_type": listed.get("protocol_type"),
                           "protocol": None, "coordinator": None, "members": [], "offsets": [], "error": None}
    try:
        node, host, port = await find_coordinator(bootstrap, group_id)
    except (CtlError, OSError, TimeoutError, ConnectionError) as e:
        out["error"] = failure_text(e)
        return out
    out["coordinator"] = {"node_id": node, "host": host, "port": port}
    if node in down:
        out["error"] = f"its coordinator, broker {node} ({host}:{port}), is {down[node]}"
        return out
    try:
        coordinator = await pool.get(host, port)
        _, resp = await coordinator.request(DESCRIBE_GROUPS, {"groups": [group_id],
                                                              "include_authorized_operations": False})
    except (CtlError, OSError, TimeoutError, ConnectionError) as e:
        await pool.drop(host, port)
        out["error"] = f"DescribeGroups on broker {node}: {failure_text(e)}"
        return out
    if out["state"] is None:  # --group: what the coordinator's ListGroups says of it (its type, v5+)
        try:
            mine = [g for g in await list_groups(coordinator) if g["group_id"] == group_id]
        except (CtlError, OSError, TimeoutError, ConnectionError):
            mine = []
        if mine:
            out.update(state=mine[0]["state"], group_type=mine[0]["group_type"],
                       protocol_type=mine[0]["protocol_type"])
    d = resp.groups[0]
    problems = []
    if out["group_type"] == "share":
        out["error"] = "; ".join(await _describe_share_group(coordinator, group_id, out)) or None
        return out
    if out["group_type"] == "consumer" and (d.error_code or d.group_state == "Dead"):
        # KIP-848: DescribeGroups does not describe these (Kafka answers GROUP_ID_NOT_FOUND, kshim
        # Dead); ConsumerGroupDescribe (API 69) does, where the broker serves it
        problems += await _describe_consumer_group(coordinator, group_id, out)
    elif d.error_code:
        problems.append("DescribeGroups: " + error_text(d.error_code, d.get("error_message")))
    else:
        out.update(state=d.group_state, protocol_type=d.protocol_type, protocol=d.protocol_data or None)
        for mem in d.members:
            member: dict[str, Any] = {"member_id": mem.member_id, "group_instance_id": mem.get("group_instance_id"),
                                      "client_id": mem.client_id, "host": mem.client_host, "assignment": None}
            if d.protocol_type == "consumer":
                try:
                    member["assignment"] = decode_assignment(mem.member_assignment)
                except ValueError as e:
                    member["assignment_error"] = str(e)
            else:  # another protocol (connect, ...): its bytes are not ours to read
                member["assignment_bytes"] = len(mem.member_assignment or b"")
            out["members"].append(member)
    try:
        offsets = await offset_fetch(coordinator, group_id)
    except (CtlError, OSError, TimeoutError, ConnectionError) as e:
        if not isinstance(e, CtlError):
            await pool.drop(host, port)
        problems.append(str(e) if isinstance(e, CtlError) else f"OffsetFetch on broker {node}: {failure_text(e)}")
        offsets = []
    # partitions assigned but never committed are shown too, without a committed offset
    known = {(o["topic"], o["partition"]) for o in offsets}
    for mem in out["members"]:
        for topic, parts in (mem["assignment"] or {}).items():
            for p in parts:
                if (topic, p) not in known:
                    known.add((topic, p))
                    offsets.append({"topic": topic, "partition": p, "committed": None, "metadata": "",
                                    "error": None})
    out["offsets"] = sorted(offsets, key=lambda o: (o["topic"], o["partition"]))
    out["error"] = "; ".join(problems) or None
    return out


async def _describe_consumer_group(coordinator: Broker, group_id: str, out: dict[str, Any]) -> list[str]:
    """Members and assignments of a KIP-848 group; returns problems to report."""
    if CONSUMER_GROUP_DESCRIBE not in coordinator.versions:
        out["note"] = "a KIP-848 consumer group: the broker serves no ConsumerGroupDescribe, members are not shown"
        return []
    try:
        _, resp = await coordinator.request(CONSUMER_GROUP_DESCRIBE, {"group_ids": [group_id]})
    except (OSError, TimeoutError, ConnectionError) as e:
        return [f"ConsumerGroupDescribe: {failure_text(e)}"]
    d = resp.groups[0]
    if d.error_code:
        return ["ConsumerGroupDescribe: " + error_text(d.error_code, d.get("error_message"))]
    out.update(state=d.group_state, protocol=d.assignor_name)
    for mem in d.members:
        out["members"].append({
            "member_id": mem.member_id, "group_instance_id": mem.get("instance_id"), "client_id": mem.client_id,
            "host": mem.client_host, "member_epoch": mem.member_epoch,
            "assignment": {tp.topic_name: sorted(tp.partitions) for tp in mem.assignment.topic_partitions}})
    return []


async def _describe_share_group(coordinator: Broker, group_id: str, out: dict[str, Any]) -> list[str]:
    """Members and assignments of a share group (several members may share a partition); returns
    problems to report."""
    if SHARE_GROUP_DESCRIBE not in coordinator.versions:
        out["note"] = "a share group: the broker serves no ShareGroupDescribe, members are not shown"
        return []
    try:
        _, resp = await coordinator.request(SHARE_GROUP_DESCRIBE, {"group_ids": [group_id],
                                                                   "include_authorized_operations": False})
    except (OSError, TimeoutError, ConnectionError) as e:
        return [f"ShareGroupDescribe: {failure_text(e)}"]
    d = resp.groups[0]
    if d.error_code:
        return ["ShareGroupDescribe: " + error_text(d.error_code, d.get("error_message"))]
    out.update(state=d.group_state, protocol=d.assignor_name, group_epoch=d.group_epoch)
    for mem in d.members:
        out["members"].append({
            "member_id": mem.member_id, "group_instance_id": None, "client_id": mem.client_id,
            "host": mem.client_host, "member_epoch": mem.member_epoch,
            "subscribed_topics": sorted(mem.subscribed_topic_names),
            "assignment": {tp.topic_name: sorted(tp.partitions) for tp in mem.assignment.topic_partitions}})
    return []


# ------------------------------------------------------------------------------- entry points
def groups(data_dir=None, bootstrap: str | None = None, group: str | None = None,
           command_config=None) -> dict[str, Any]:
    """The report, for scripts and tests. CtlError when no broker can be asked."""
    down: dict[int, str] = {}
    security = None
    if command_config is not None:
        bootstrap, security = from_command_config(command_config, bootstrap)
    if bootstrap:
        addresses = parse_addresses(bootstrap)
    elif data_dir is not None:
        down = brokers_down(data_dir)
        # a paused broker would cost the bootstrap a timeout: the others first (it stays, last, in
        # case the supervisor's view is stale)
        every = addresses_from_cluster(data_dir)
        status_ports = {b["port"]: b["id"] for b in cluster_brokers(data_dir)}
        addresses = sorted(every, key=lambda a: status_ports.get(a[1]) in down)
        if command_config is None:
            security = from_data_dir(data_dir, down)  # the inter-broker listener's identity
    else:
        raise CtlError("give --bootstrap HOST:PORT, or --data-dir of a running `kshim serve [--brokers N]`")
    try:
        report = anyio.run(collect, addresses, group, down, security)
    except (OSError, TimeoutError, ConnectionError) as e:
        raise CtlError(failure_text(e)) from None
    if data_dir is not None and not bootstrap:
        for g in report["groups"]:
            if g.get("group_type") == "share":
                g["in_flight"] = share_in_flight(Path(data_dir), g["group_id"], down)
    return report


def share_in_flight(data_dir: Path, group_id: str, down: dict[int, str]) -> list[dict]:
    """The share partitions of `group_id`, from the admin socket of every running broker (each
    answers for the partitions it leads)."""
    rows: list[dict] = []
    for node, path in brokers_admin.broker_sockets(data_dir).items():
        if node in down:
            continue
        try:
            rows += json.loads(brokers_admin.call(path, ops.ShareInFlight(group_id), REQUEST_TIMEOUT_S, node))
        except CtlError as e:
            rows.append({"node": node, "error": str(e)})
    return sorted(rows, key=lambda r: (r.get("topic", ""), r.get("partition", -1), r["node"]))


def add_parser(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "groups", help="consumer and share groups: members, assignments, committed offsets, lag",
        description="List consumer groups with state, protocol, members, assignments, committed offsets and "
                    "lag per partition, asking the brokers (their coordinators) with the Kafka protocol. "
                    "The brokers are found through --bootstrap, else through the controller of the cluster "
                    "in --data-dir. Lag = log end offset (ListOffsets latest, read_uncommitted: the high "
                    "watermark) - committed offset.")
    p.add_argument("--bootstrap", metavar="HOST:PORT",
                   help="any broker of the cluster (kshim or Kafka); comma-separated for several; wins over --data-dir")
    add_command_config(p)
    p.add_argument("--group", metavar="ID", help="show this group only")
    p.add_argument("--table", action="store_true", help="a human-readable table instead of JSON")
    p.add_argument("--json", action="store_true", help="JSON (the default)")
    return p


def format_table(report: dict[str, Any]) -> str:
    lines = []
    for e in report["errors"]:
        lines.append(f"error: {e}")
    if not report["groups"]:
        lines.append("no groups found on the brokers that answered" if report["errors"] else "no groups")
    for g in report["groups"]:
        if lines:
            lines.append("")
        c = g["coordinator"]
        where = f"{c['node_id']} ({c['host']}:{c['port']})" if c else "-"
        protocol = f"{cell_text(g['protocol_type'])}/{cell_text(g['protocol'])}"
        head = f"GROUP {g['group_id']}  state {cell_text(g['state'])}  protocol {protocol}  coordinator {where}"
        if g.get("group_type"):
            head += f"  type {g['group_type']}"
        lines.append(head)
        if g["error"]:
            lines.append(f"  error: {g['error']}")
        if g.get("note"):
            lines.append(f"  note: {g['note']}")
        if g["members"]:
            rows = [["MEMBER", "CLIENT", "HOST", "ASSIGNMENT"]]
            for m in g["members"]:
                if m["assignment"] is not None:
                    assigned = " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(m["assignment"].items()))
                else:
                    assigned = m.get("assignment_error") or f"({m.get('assignment_bytes', 0)} bytes)"
                rows.append([m["member_id"], cell_text(m["client_id"]), cell_text(m["host"]), assigned or "-"])
            lines.extend("  " + line for line in text_table(rows).splitlines())
        elif not g.get("note"):
            lines.append("  no members")
        if g["offsets"]:
            rows = [["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "METADATA", "ERROR"]]
            for o in g["offsets"]:
                rows.append([o["topic"], str(o["partition"]), cell_text(o["committed"]), cell_text(o["log_end_offset"]),
                             cell_text(o["lag"]), cell_text(o["metadata"]), cell_text(o["error"])])
            lines.extend("  " + line for line in text_table(rows).splitlines())
        elif g.get("group_type") != "share":
            lines.append("  no committed offsets")
        if g.get("in_flight"):
            rows = [["TOPIC", "PARTITION", "LEADER", "START", "END", "AVAILABLE", "ACQUIRED", "ACKNOWLEDGED",
                     "ARCHIVED"]]
            for r in g["in_flight"]:
                if "error" in r:
                    rows.append(["-", "-", str(r["node"]), r["error"], "", "", "", "", ""])
                    continue
                rows.append([r["topic"], str(r["partition"]), str(r["node"]), str(r["start_offset"]),
                             str(r["end_offset"]), str(r["available"]), str(r["acquired"]),
                             str(r["acknowledged"]), str(r["archived"])])
            lines.extend("  " + line for line in text_table(rows).splitlines())
    lines.append("")
    lines.append(f"log end: {report['end_offsets']}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    try:
        report = groups(args.data_dir, args.bootstrap, args.group, args.command_config)
    except CtlError as e:
        print(f"kshim ctl groups: {e}", file=sys.stderr)
        return 1
    print(format_table(report) if args.table else json.dumps(report, indent=2))
    for problem in report["errors"]:  # the report is partial: say which brokers were not heard, and fail
        print(f"kshim ctl groups: {problem}", file=sys.stderr)
    return 1 if report["errors"] else 0
