"""The share-group offset APIs (KIP-932) through their handlers on a standalone broker:
DescribeShareGroupOffsets, AlterShareGroupOffsets (only while the group is empty) and
DeleteShareGroupOffsets; a member leaving releases its records; DeleteGroups deletes the state."""
from __future__ import annotations

import importlib

import pytest

from tests.test_share_fetch import CONFIGS, acquired, append, broker, fetch_body, running  # noqa: F401
from tests.test_share_groups import coordinated, hb
from tests.test_groups import call_awaiting
from wire.errors import ErrorCode

share_fetch = importlib.import_module("kshim.net.handlers.78_share_fetch")
describe = importlib.import_module("kshim.net.handlers.90_describe_share_group_offsets")
alter = importlib.import_module("kshim.net.handlers.91_alter_share_group_offsets")
delete = importlib.import_module("kshim.net.handlers.92_delete_share_group_offsets")
delete_groups = importlib.import_module("kshim.net.handlers.42_delete_groups")


def described(resp) -> dict:
    return {(t.topic_name, p.partition_index): (p.error_code, p.start_offset, p.lag)
            for g in resp.groups for t in g.topics for p in t.partitions}


@pytest.mark.anyio
async def test_describe_alter_and_delete_share_group_offsets(broker):  # noqa: F811
    await broker.create_topic("t", 1)
    tid = broker.topics["t"].topic_id
    append(broker, "t", b"a", b"b", b"c", b"d")
    async with running(broker) as node:
        await coordinated(broker, "g")
        assert (await hb(broker, "g", "m1", 0, ["t"])).error_code == 0
        await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, max_records=2))
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 1, acks=[(0, 1, 1)]))
        assert [p.acknowledge_error_code for t in resp.responses for p in t.partitions] == [0]
        resp = await call_awaiting(broker, describe, 1, {"groups": [{"group_id": "g", "topics": None}]})
        assert described(resp) == {("t", 0): (0, 2, 2)}
        resp = await call_awaiting(broker, describe, 1, {"groups": [
            {"group_id": "g", "topics": [{"topic_name": "t", "partitions": [0, 3]}]}, {"group_id": "nope", "topics": None}]})
        assert described(resp) == {("t", 0): (0, 2, 2), ("t", 3): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)}
        assert resp.groups[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        body = {"group_id": "g", "topics": [{"topic_name": "t", "partitions": [{"partition_index": 0, "start_offset": 0}]}]}
        assert (await call_awaiting(broker, alter, 0, body)).error_code == ErrorCode.NON_EMPTY_GROUP
        assert (await hb(broker, "g", "m1", -1)).error_code == 0  # m1 leaves: its records are released
        await node.share.expire_due()
        resp = await call_awaiting(broker, alter, 0, body)
        assert (resp.error_code, resp.responses[0].partitions[0].error_code) == (0, 0)
        assert node.share_coordinator.states[("g", tid, 0)].start_offset == 0
        # a new member reads from the altered offset again, every record a first delivery
        assert acquired(await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m2"))) == [(0, 3, 1)]
        resp = await call_awaiting(broker, delete, 0, {"group_id": "g", "topics": [{"topic_name": "t"}, {"topic_name": "x"}]})
        assert [(t.topic_name, t.error_code) for t in resp.responses] == \
            [("t", 0), ("x", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert ("g", tid, 0) not in node.share_coordinator.states
        # DeleteGroups deletes the share state first
        await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m3"))
        assert ("g", tid, 0) in node.share_coordinator.states
        resp = await call_awaiting(broker, delete_groups, 2, {"groups_names": ["g"]})
        assert resp.results[0].error_code == 0
        assert ("g", tid, 0) not in node.share_coordinator.states
