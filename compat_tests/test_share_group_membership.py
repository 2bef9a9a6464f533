"""Share groups' membership (KIP-932, the group half): confluent-kafka's ShareConsumer and the Java
client's KafkaShareConsumer join, get assignments from the simple assignor (three members share a
one-partition topic), show in ShareGroupDescribe / ListGroups / `kshim ctl groups`, leave, and the
group is deleted; GROUP configs through the Java Admin client; on 3 brokers a SIGKILL of the
coordinator keeps the group (its members heartbeat on under their epochs at the new coordinator).
Every wait has a deadline."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import anyio
import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.java_client import JVM_FLAGS, JavaClient, build
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.test_groups import create_topic, produce
from compat_tests.test_groups_cluster import (coordinator_by_status, create_topic as create_replicated_topic,
                                              fully_replicated, kill_coordinator, wait_new_offsets_leader)
from kshim.replication.client import BrokerConnection

SHARE_HEARTBEAT, SHARE_DESCRIBE, LIST_GROUPS, FIND_COORDINATOR = 76, 77, 16, 10


@pytest.fixture(scope="module")
def kshim(tmp_path_factory):
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-data"), "--partitions", "3",
                        "--group-initial-rebalance-delay-ms", "0").start()
    yield proc
    code = proc.terminate()
    assert code == 0, "kshim did not shut down cleanly:\n" + proc.logs()


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java"))


async def _connect(bootstrap: str) -> BrokerConnection:
    """A connection to the first bootstrap broker that answers (one may have been killed)."""
    failure: OSError | None = None
    for address in bootstrap.split(","):
        host, port = address.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "share-test")
        try:
            await conn.connect()
            return conn
        except OSError as e:
            failure = e
    assert failure is not None
    raise failure


async def coordinator_of(bootstrap: str, group: str) -> BrokerConnection:
    conn = await _connect(bootstrap)
    try:
        with anyio.fail_after(30):
            while True:
                found = await conn.request(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
                if not found.error_code:
                    break
                await anyio.sleep(0.2)
    finally:
        await conn.aclose()
    coordinator = BrokerConnection(found.host, found.port, "share-test")
    await coordinator.connect()
    return coordinator


def describe(bootstrap: str, group: str):
    async def run():
        conn = await coordinator_of(bootstrap, group)
        try:
            return (await conn.request(SHARE_DESCRIBE, 1, {"group_ids": [group],
                                                           "include_authorized_operations": False})).groups[0]
        finally:
            await conn.aclose()
    return anyio.run(run)


def share_consumer(bootstrap: str, group: str) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})


def poll_until(consumers, predicate, timeout: float = 30.0, message: str = "the share group"):
    deadline = time.monotonic() + timeout
    while True:
        for c in consumers:
            c.poll(0.05)
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")


def test_confluent_share_consumers_share_a_partition_then_leave(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, 1)
    produce(kshim.bootstrap, topic_name, 3)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    consumers = [share_consumer(kshim.bootstrap, group) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic_name])

        def all_three_share_partition_0():
            d = describe(kshim.bootstrap, group)
            assigned = [[(tp.topic_name, list(tp.partitions)) for tp in m.assignment.topic_partitions]
                        for m in d.members]
            # each member takes the group's new epoch at its next heartbeat: the assignment of the
            # first ones does not change when the third joins, their epoch does a moment later
            settled = {m.member_epoch for m in d.members} == {d.assignment_epoch}
            return d if len(d.members) == 3 and assigned == [[(topic_name, [0])]] * 3 and settled else None

        d = poll_until(consumers, all_three_share_partition_0, message="three members sharing partition 0")
        assert (d.group_state, d.assignor_name) == ("Stable", "simple")

        ctl = run_ctl_groups(kshim.bootstrap, group)
        [g] = ctl["groups"]
        assert (g["group_type"], g["state"], g["protocol"]) == ("share", "Stable", "simple")
        assert sorted(m["assignment"][topic_name] for m in g["members"]) == [[0]] * 3

        consumers.pop().close()
        d = poll_until(consumers, lambda: (d := describe(kshim.bootstrap, group)) and len(d.members) == 2 and d,
                       message="two members after a close")
        assert d.group_state == "Stable"
    finally:
        for c in consumers:
            c.close()
    # close() sends the leave heartbeat (not waiting for the session timeout)
    wait_until(lambda: describe(kshim.bootstrap, group).group_state == "Empty", 15, message="the group Empty")

    admin = AdminClient({"bootstrap.servers": kshim.bootstrap, "log_level": 0})
    admin.delete_consumer_groups([group], request_timeout=15)[group].result(20)
    assert describe(kshim.bootstrap, group).error_code == 69  # GROUP_ID_NOT_FOUND


def run_ctl_groups(bootstrap: str, group: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "kshim", "ctl", "groups", "--bootstrap", bootstrap, "--group", group],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_java_share_consumers_admin_and_group_configs(kshim, java, topic_name):
    create_topic(kshim.bootstrap, topic_name, 2)
    group = f"jsg-{uuid.uuid4().hex[:8]}"
    # ShareGroups is its own main class (compat_tests/java/ShareGroups.java)
    proc = subprocess.run([java.java, *JVM_FLAGS, "-cp", java.classpath, "ShareGroups", kshim.bootstrap, group,
                           topic_name, "2"], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, f"ShareGroups exited {proc.returncode}:\n{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}"
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    by_type: dict[str, list] = {}
    for line in lines:
        by_type.setdefault(line["type"], []).append(line)
    joined, empty = by_type["described"]
    assert joined["state"] == "Stable" and len(joined["members"]) == 2
    assert sorted(tp["partition"] for m in joined["members"] for tp in m["assignment"]) == [0, 1]
    assert {m["epoch"] for m in joined["members"]} == {joined["assignment_epoch"]}
    assert (empty["state"], empty["members"]) == ("Empty", [])
    [listed] = by_type["listed"]
    assert {"group_id": group, "type": "Share", "state": "Stable", "protocol": "share"} in listed["groups"]
    [configs] = by_type["configs"]
    entries = configs["entries"]
    assert entries["share.auto.offset.reset"] == {"value": "earliest", "source": "DYNAMIC_GROUP_CONFIG"}
    assert entries["share.record.lock.duration.ms"] == {"value": "20000", "source": "DYNAMIC_GROUP_CONFIG"}
    assert entries["share.session.timeout.ms"] == {"value": "45000", "source": "DEFAULT_CONFIG"}
    assert by_type["bad-config"] == [{"type": "bad-config", "error": "InvalidConfigurationException"}]


def test_coordinator_failover_keeps_the_share_group(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3, "--replica-lag-time-max-ms", "2000",
                         "--group-initial-rebalance-delay-ms", "0", session_timeout_ms=2000)) as cluster:
        topic = "queue"
        create_replicated_topic(cluster, topic, 2)
        group = f"fsg-{uuid.uuid4().hex[:8]}"
        members = [str(uuid.uuid4()) for _ in range(3)]

        async def beat(conn: BrokerConnection, body: dict):
            """A heartbeat, asked again while the new coordinator still loads (as clients do)."""
            with anyio.fail_after(30):
                while True:
                    r = await conn.request(SHARE_HEARTBEAT, 1, body)
                    if r.error_code not in (14, 15):  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
                        return r
                    await anyio.sleep(0.2)

        async def join() -> dict[str, int]:
            conn = await coordinator_of(cluster.bootstrap, group)
            try:
                epochs = {}
                for m in members:
                    r = await beat(conn, {"group_id": group, "member_id": m, "member_epoch": 0,
                                          "rack_id": None, "subscribed_topic_names": [topic]})
                    assert r.error_code == 0, r
                    epochs[m] = r.member_epoch
                for m in members:  # everyone catches up with the last join
                    r = await beat(conn, {"group_id": group, "member_id": m, "member_epoch": epochs[m],
                                          "rack_id": None, "subscribed_topic_names": None})
                    assert r.error_code == 0, r
                    epochs[m] = r.member_epoch
                return epochs
            finally:
                await conn.aclose()

        epochs = anyio.run(join)
        assert set(epochs.values()) == {3}
        wait_until(lambda: fully_replicated(cluster, "__consumer_offsets"), 20,
                   message="__consumer_offsets replicated on 3 brokers")
        before = describe(cluster.bootstrap, group)
        killed, _, _ = kill_coordinator(cluster, group)
        wait_new_offsets_leader(cluster, group, killed)

        async def heartbeat_at_the_new_coordinator() -> None:
            with anyio.fail_after(30):
                while True:
                    try:
                        conn = await coordinator_of(cluster.bootstrap, group)
                    except OSError:  # the coordinator found was the killed broker: its metadata is not out yet
                        await anyio.sleep(0.2)
                        continue
                    try:
                        r = await conn.request(SHARE_HEARTBEAT, 1, {"group_id": group, "member_id": members[0],
                                                                    "member_epoch": epochs[members[0]], "rack_id": None,
                                                                    "subscribed_topic_names": None})
                    finally:
                        await conn.aclose()
                    if r.error_code in (14, 15, 16):  # loading, not available, not coordinator: not yet
                        await anyio.sleep(0.2)
                        continue
                    assert (r.error_code, r.member_epoch) == (0, 3), r  # known member, same epoch
                    return

        anyio.run(heartbeat_at_the_new_coordinator)
        after = describe(cluster.bootstrap, group)
        assert after.error_code == 0 and after.group_epoch == before.group_epoch
        assert sorted((m.member_id, m.member_epoch, [list(tp.partitions) for tp in m.assignment.topic_partitions])
                      for m in after.members) == \
            sorted((m.member_id, m.member_epoch, [list(tp.partitions) for tp in m.assignment.topic_partitions])
                   for m in before.members)
        assert coordinator_by_status(cluster, group)["leader"] != killed
        result = run_ctl(cluster.data_dir, "start", str(killed))
        assert result.returncode == 0, result.stderr
