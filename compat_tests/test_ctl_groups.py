"""`kshim ctl groups`: consumer groups as the brokers describe them, run as a real subprocess.

Against a real single broker (found with --bootstrap): a confluent-kafka group of 2 members over 4
partitions is shown Stable with both members, assignments covering the partitions, committed
offsets and the lag after more records are produced; `--table` prints it; a group whose consumers
closed is Empty and keeps its offsets. Against a 3-broker cluster the brokers are found through
the controller in --data-dir. Every wait has a deadline.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import Cluster, running
from compat_tests.kshim_process import wait_until
from kshim.ctl.groups import decode_assignment, encode_assignment

FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 60000}
DEADLINE_S = 60.0  # a loaded CI machine (2 cores) once took more than 30 s to settle the group


def ctl_groups(*args: str, data_dir=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kshim", "ctl"]
    if data_dir is not None:
        cmd += ["--data-dir", str(data_dir)]
    return subprocess.run([*cmd, "groups", *args], capture_output=True, text=True, timeout=60)


def report(*args: str, data_dir=None) -> dict:
    result = ctl_groups(*args, data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def find(rep: dict, group: str) -> dict | None:
    return next((g for g in rep["groups"] if g["group_id"] == group), None)


def create_topic(bootstrap: str, name: str, partitions: int, replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication_factor)])[name].result(15)


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(per_partition * partitions):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(15) == 0


def consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "log_level": 3, "client.id": f"ctl-test-{group}", **FAST})
    c.subscribe([topic])
    return c


def consume_all(consumers: list[Consumer], end: int, partitions: int) -> None:
    """Poll every consumer in turn until, between them, they are assigned every partition and
    positioned at its end (records redelivered after a rebalance are simply read again)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        for c in consumers:
            c.poll(0.05)
        positions = {tp.partition: tp.offset for c in consumers for tp in c.position(c.assignment())}
        if sorted(positions) == list(range(partitions)) and all(o == end for o in positions.values()) and \
                all(c.assignment() for c in consumers):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {DEADLINE_S} s: positions {positions}, assignments "
                                 f"{[[tp.partition for tp in c.assignment()] for c in consumers]}")


def commit_ends(consumers: list[Consumer], topic: str, end: int) -> None:
    """Each member commits `end` for the partitions it holds now. A rebalance between reading and
    committing makes a commit fail or land for fewer partitions: callers check and call again."""
    for c in consumers:
        held = [TopicPartition(topic, tp.partition, end) for tp in c.assignment()]
        if held:
            try:
                c.commit(offsets=held, asynchronous=False)
            except KafkaException:
                pass  # REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION: the caller's wait retries


def test_assignment_codec_round_trip():
    assert decode_assignment(b"") == {}
    assert decode_assignment(encode_assignment({"a": [3, 1], "b": []}, version=3)) == {"a": [1, 3], "b": []}
    with pytest.raises(ValueError):
        decode_assignment(b"\x00\x00\x00\x00\x00\x05")


def test_no_brokers_is_a_clear_error(tmp_path):
    result = ctl_groups(data_dir=tmp_path)
    assert result.returncode == 1
    assert "--bootstrap" in result.stderr and "Traceback" not in result.stderr


def test_stable_group_members_assignments_offsets_and_lag(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, 4)
    produce(kshim.bootstrap, topic_name, 10, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumers = [consumer(kshim.bootstrap, group, topic_name) for _ in range(2)]
    try:
        try:
            consume_all(consumers, 10, 4)
        except AssertionError as e:  # what the coordinator did meanwhile
            raise AssertionError(f"{e}\nbroker log:\n" + "\n".join(kshim.logs().splitlines()[-40:])) from None
        commit_ends(consumers, topic_name, 10)
        produce(kshim.bootstrap, topic_name, 2, 4)  # 2 more per partition: lag 2 each

        seen: list[dict | None] = [None]

        def stable():
            for c in consumers:  # keep both members alive and in the group meanwhile
                c.poll(0.01)
            g = seen[0] = find(report("--bootstrap", kshim.bootstrap), group)
            if g and g["state"] == "Stable" and len(g["members"]) == 2 and \
                    [o["committed"] for o in g["offsets"]] == [10] * 4:
                return g
            if g and g["state"] == "Stable" and [o["committed"] for o in g["offsets"]] != [10] * 4:
                commit_ends(consumers, topic_name, 10)  # a rebalance took the commit; commit again
            return None

        try:
            g = wait_until(stable, DEADLINE_S, interval=0.2, message="the group Stable with 2 members")
        except AssertionError as e:
            raise AssertionError(f"{e}; ctl groups last showed {seen[0]}") from None
        assert g["protocol_type"] == "consumer" and g["protocol"] and g["error"] is None
        assert g["coordinator"]["port"] == int(kshim.bootstrap.rsplit(":", 1)[1])
        assigned = [(topic_name, p) for m in g["members"] for p in m["assignment"].get(topic_name, [])]
        assert sorted(assigned) == [(topic_name, p) for p in range(4)]  # each partition once
        assert all(m["client_id"] == f"ctl-test-{group}" and m["host"] and m["member_id"] for m in g["members"])
        assert [(o["topic"], o["partition"], o["committed"], o["log_end_offset"], o["lag"]) for o in g["offsets"]] \
            == [(topic_name, p, 10, 12, 2) for p in range(4)]
        assert "read_uncommitted" in report("--bootstrap", kshim.bootstrap)["end_offsets"]

        # --group shows only that group; --table prints it for humans
        only = report("--bootstrap", kshim.bootstrap, "--group", group)
        assert [x["group_id"] for x in only["groups"]] == [group]
        table = ctl_groups("--bootstrap", kshim.bootstrap, "--group", group, "--table")
        assert table.returncode == 0, table.stderr
        assert f"GROUP {group}" in table.stdout and "Stable" in table.stdout and "LAG" in table.stdout
        assert all(m["member_id"] in table.stdout for m in g["members"])
        assert "read_uncommitted" in table.stdout
    finally:
        for c in consumers:
            c.close()


def test_group_without_members_is_empty_with_offsets(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, 4)
    produce(kshim.bootstrap, topic_name, 5, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumer(kshim.bootstrap, group, topic_name)
    try:
        consume_all([c], 5, 4)
        c.commit(asynchronous=False)
    finally:
        c.close()  # leaves the group
    g = wait_until(lambda: (x := find(report("--bootstrap", kshim.bootstrap, "--group", group), group))
                   and x["state"] == "Empty" and x, DEADLINE_S, interval=0.2, message="the group Empty")
    assert g["members"] == []
    assert [(o["partition"], o["committed"], o["log_end_offset"], o["lag"]) for o in g["offsets"]] == \
        [(p, 5, 5, 0) for p in range(4)]
    table = ctl_groups("--bootstrap", kshim.bootstrap, "--table")
    assert table.returncode == 0, table.stderr
    assert f"GROUP {group}  state Empty" in table.stdout and "no members" in table.stdout


def test_cluster_brokers_found_through_the_data_dir(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3)) as cluster:
        topic = f"t-{uuid.uuid4().hex[:8]}"
        create_topic(cluster.bootstrap, topic, 4, 3)
        produce(cluster.bootstrap, topic, 3, 4)
        group = f"g-{uuid.uuid4().hex[:8]}"
        c = consumer(cluster.bootstrap, group, topic)
        try:
            consume_all([c], 3, 4)
            c.commit(asynchronous=False)

            def stable():
                c.poll(0.01)
                g = find(report(data_dir=cluster.data_dir), group)
                return g if g and g["state"] == "Stable" and g["offsets"] and \
                    all(o["lag"] == 0 for o in g["offsets"]) else None

            g = wait_until(stable, DEADLINE_S, interval=0.2, message="the group Stable in ctl groups")
        finally:
            c.close()
        rep = report(data_dir=cluster.data_dir)
        assert [b["node_id"] for b in rep["brokers"]] == [0, 1, 2] and rep["errors"] == []
        assert g["coordinator"]["node_id"] in (0, 1, 2)
        assert g["members"][0]["assignment"] == {topic: [0, 1, 2, 3]}
        assert [(o["partition"], o["committed"], o["log_end_offset"]) for o in g["offsets"]] == \
            [(p, 3, 3) for p in range(4)]


def test_kip848_group_members_and_assignments(kshim, topic_name):
    """A `group.protocol=consumer` group is described through ConsumerGroupDescribe."""
    create_topic(kshim.bootstrap, topic_name, 4)
    produce(kshim.bootstrap, topic_name, 5, 4)
    group = f"g848-{uuid.uuid4().hex[:8]}"
    consumers = []
    for _ in range(2):
        c = Consumer({"bootstrap.servers": kshim.bootstrap, "group.id": group, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3,
                      "client.id": f"ctl-test-{group}"})
        c.subscribe([topic_name])
        consumers.append(c)
    try:
        def described():
            for c in consumers:
                c.poll(0.05)
            g = find(report("--bootstrap", kshim.bootstrap, "--group", group), group)
            members = g["members"] if g else []
            covered = sorted(p for m in members for p in (m["assignment"] or {}).get(topic_name, []))
            return g if len(members) == 2 and covered == [0, 1, 2, 3] and g["state"] == "Stable" else None

        g = wait_until(described, DEADLINE_S, interval=0.2, message="the KIP-848 group Stable with 2 members")
        assert g["group_type"] == "consumer" and g["error"] is None
        assert all(len(m["assignment"][topic_name]) == 2 and m["member_epoch"] > 0 for m in g["members"])
    finally:
        for c in consumers:
            c.close()
