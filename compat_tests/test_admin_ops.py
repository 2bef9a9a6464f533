"""The admin and operations APIs on `kshim serve --brokers 3`, driven by the admin clients of
kafka-python, confluent-kafka and the Java client (compat_tests/java/AdminOps.java): what a user of
each would see, errors included.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import errors as kerrors
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.java_client import JVM_FLAGS, JavaClient, build
from compat_tests.kshim_process import wait_until

FENCE_DEADLINE_S = 20.0  # the session timeout, a session check, and slack for a busy machine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(Cluster(tmp_path_factory.mktemp("cluster"), 3)) as c:
        yield c


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-admin"))


@pytest.fixture
def kadmin(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield admin
    admin.close()


@pytest.fixture
def cadmin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def java_admin(java: JavaClient, bootstrap: str, *ops: list[str]) -> list[dict]:
    """Run AdminOps with the operations `ops` (one JVM); its JSON lines, the final "done" left out."""
    argv: list[str] = []
    for op in ops:
        argv += [*op, ","]
    cmd = [java.java, *JVM_FLAGS, *([f"-Dlog4j2.configurationFile={java.log_config}"] if java.log_config else []),
           "-cp", java.classpath, "AdminOps", bootstrap, *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, f"AdminOps {argv} exited {proc.returncode}:\n{proc.stderr[-3000:]}\n{proc.stdout[-2000:]}"
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines and lines[-1] == {"type": "done"}, proc.stdout
    return lines[:-1]


def create(kadmin: KafkaAdminClient, name: str, partitions: int, replication_factor: int) -> None:
    kadmin.create_topics([NewTopic(name, partitions, replication_factor)])


def replicas(cluster: Cluster, topic: str) -> list[list[int]]:
    return [p["replicas"] for p in sorted((p for p in cluster.status()["partitions"] if p["topic"] == topic),
                                          key=lambda p: p["partition"])]


def confluent_error(future) -> str:
    with pytest.raises(KafkaException) as e:
        future.result(30)
    return e.value.args[0].name()


# ---------------------------------------------------------------- CreatePartitions with assignments

def test_create_partitions_with_explicit_assignments(cluster, kadmin, cadmin, java, topic_name):
    create(kadmin, topic_name, 1, 2)
    kadmin.create_partitions({topic_name: {"count": 2, "assignments": [[2, 0]]}})
    cadmin.create_partitions([NewPartitions(topic_name, 3, replica_assignment=[[1, 2]])])[topic_name].result(30)
    out = java_admin(java, cluster.bootstrap, ["create-partitions", topic_name, "4", "0:1"],
                     ["create-partitions", topic_name, "5", "0:1:2"],  # three replicas where the topic has two
                     ["create-partitions", topic_name, "5", "1:1"],
                     ["create-partitions", topic_name, "5", "1:9"])
    assert [line.get("error") for line in out] == [None] + ["InvalidReplicaAssignmentException"] * 3
    assert "9" in out[3]["message"]
    assert wait_until(lambda: replicas(cluster, topic_name) if len(replicas(cluster, topic_name)) == 4 else None)[1:] == [
        [2, 0], [1, 2], [0, 1]]
    with pytest.raises(kerrors.for_code(39)):  # INVALID_REPLICA_ASSIGNMENT
        kadmin.create_partitions({topic_name: {"count": 6, "assignments": [[0, 1]]}})  # one list for two partitions
    bad = cadmin.create_partitions([NewPartitions(topic_name, 5, replica_assignment=[[3, 0]])])[topic_name]
    assert confluent_error(bad) == "INVALID_REPLICA_ASSIGNMENT"
    assert len(replicas(cluster, topic_name)) == 4


# ---------------------------------------------------------------- ElectLeaders

def election_errors(response) -> dict[tuple[str, int], str | None]:
    """kafka-python's ElectLeaders response: each partition's error class name, None when elected."""
    return {(t.topic, p.partition_id): None if p.error_code == 0 else kerrors.for_code(p.error_code).__name__
            for t in response.replica_election_results for p in t.partition_result}


def error_name(e: KafkaError | None) -> str | None:
    return None if e is None else e.name()


def leader_of(cluster: Cluster, topic: str, index: int = 0) -> int:
    return cluster.partition(topic, index)["leader"]


def test_preferred_election_moves_leadership_back(cluster, kadmin, cadmin, java, topic_name):
    create(kadmin, topic_name, 1, 3)
    preferred = replicas(cluster, topic_name)[0][0]
    # already led by its preferred replica: nothing to do, as each client shows it
    assert election_errors(kadmin.elect_leaders(0, {topic_name: [0]})) == {(topic_name, 0): "ElectionNotNeededError"}
    tp = CTopicPartition(topic_name, 0)
    assert error_name(cadmin.elect_leaders(ElectionType.PREFERRED, [tp]).result(30)[tp]) == "ELECTION_NOT_NEEDED"
    # the preferred replica dies: another leads; while it is down a preferred election cannot help
    assert run_ctl(cluster.data_dir, "kill", str(preferred)).returncode == 0
    wait_until(lambda: leader_of(cluster, topic_name) not in (preferred, -1), timeout=FENCE_DEADLINE_S,
               message="a new leader after the kill")
    out = java_admin(java, cluster.bootstrap, ["elect", "preferred", f"{topic_name}:0"])
    assert out == [{"type": "elected", "results": {f"{topic_name}-0": "PreferredLeaderNotAvailableException"}}]
    # back and caught up (the leader takes it into the ISR again): the election moves leadership
    assert run_ctl(cluster.data_dir, "start", str(preferred)).returncode == 0
    wait_until(lambda: sorted(cluster.partition(topic_name)["isr"]) == [0, 1, 2], timeout=FENCE_DEADLINE_S,
               message="the restarted replica back in the ISR")
    epoch = cluster.partition(topic_name)["leader_epoch"]
    out = java_admin(java, cluster.bootstrap, ["elect", "preferred", f"{topic_name}:0", f"{topic_name}:7"],
                     ["describe-topics", "100", topic_name])
    assert out[0]["results"] == {f"{topic_name}-0": None, f"{topic_name}-7": "UnknownTopicOrPartitionException"}
    assert out[1]["partitions"][0]["leader"] == preferred
    assert leader_of(cluster, topic_name) == preferred and cluster.partition(topic_name)["leader_epoch"] == epoch + 1


def test_unclean_election_of_a_leaderless_partition(cluster, kadmin, cadmin, topic_name):
    create(kadmin, topic_name, 1, 2)
    first, second = replicas(cluster, topic_name)[0]
    assert election_errors(kadmin.elect_leaders(1, {topic_name: [0]})) == {(topic_name, 0): "ElectionNotNeededError"}
    # the follower goes first (it leaves the ISR when fenced), then the leader: no in-sync replica is alive
    assert run_ctl(cluster.data_dir, "kill", str(second)).returncode == 0
    wait_until(lambda: cluster.partition(topic_name)["isr"] == [first], timeout=FENCE_DEADLINE_S)
    assert run_ctl(cluster.data_dir, "kill", str(first)).returncode == 0
    wait_until(lambda: leader_of(cluster, topic_name) == -1, timeout=FENCE_DEADLINE_S)
    try:
        tp = CTopicPartition(topic_name, 0)
        result = cadmin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(30)  # nobody is alive
        assert error_name(result[tp]) == "ELIGIBLE_LEADERS_NOT_AVAILABLE"
        assert run_ctl(cluster.data_dir, "start", str(second)).returncode == 0
        wait_until(lambda: cluster.broker(second)["alive"], timeout=FENCE_DEADLINE_S)
        assert leader_of(cluster, topic_name) == -1  # unclean.leader.election.enable is false
        # a new admin client: the one above keeps asking the broker it took for the controller, now dead
        again = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
        try:
            assert election_errors(again.elect_leaders(1, {topic_name: [0]})) == {(topic_name, 0): None}
        finally:
            again.close()
        assert cluster.partition(topic_name)["leader"] == second and cluster.partition(topic_name)["isr"] == [second]
    finally:
        run_ctl(cluster.data_dir, "start", str(first))
        run_ctl(cluster.data_dir, "start", str(second))
        wait_until(lambda: all(b["alive"] for b in cluster.status()["brokers"]), timeout=FENCE_DEADLINE_S)


# ---------------------------------------------------------------- DescribeTopicPartitions

def test_describe_topic_partitions_pages_through_a_topic(cluster, kadmin, java, topic_name):
    other = topic_name + "-b"
    create(kadmin, topic_name, 5, 2)
    create(kadmin, other, 2, 3)
    seen: list[tuple[str, int]] = []
    cursor = None
    for _ in range(10):
        page = kadmin.describe_topic_partitions([other, topic_name], response_partition_limit=3, cursor=cursor)
        seen += [(t["name"], p["partition_index"]) for t in page["topics"] for p in t["partitions"]]
        assert all(t["error_code"] == 0 for t in page["topics"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [(topic_name, i) for i in range(5)] + [(other, 0), (other, 1)]
    missing = kadmin.describe_topic_partitions([topic_name + "-none"])["topics"]
    assert [(t["name"], t["error_code"]) for t in missing] == [(topic_name + "-none", 3)]  # UNKNOWN_TOPIC_OR_PARTITION
    # the Java client's describeTopics pages with DescribeTopicPartitions (two partitions a response)
    out = java_admin(java, cluster.bootstrap, ["describe-topics", "2", topic_name, other])
    expected = {t: sorted(replicas(cluster, t)) for t in (topic_name, other)}
    got = {line["name"]: sorted(p["replicas"] for p in line["partitions"]) for line in out}
    assert got == expected and [len(line["partitions"]) for line in out] == [5, 2]
    assert all(p["leader"] == p["replicas"][0] for line in out for p in line["partitions"])


# ---------------------------------------------------------------- DescribeLogDirs

def produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=b"x" * 100, key=b"%d" % i, partition=0)
    assert producer.flush(30) == 0


def test_describe_log_dirs_shows_each_brokers_replicas(cluster, kadmin, java, topic_name):
    create(kadmin, topic_name, 2, 2)
    produce(cluster.bootstrap, topic_name, 50)
    holders = replicas(cluster, topic_name)
    out = java_admin(java, cluster.bootstrap, ["log-dirs", "0", "1", "2"])
    assert sorted(line["broker"] for line in out) == [0, 1, 2]
    for line in out:
        assert line["error"] is None and line["path"].startswith(str(cluster.data_dir))
        assert 0 < line["usable_bytes"] <= line["total_bytes"]
        mine = {tp: r for tp, r in line["replicas"].items() if tp.startswith(topic_name + "-")}
        assert sorted(mine) == [f"{topic_name}-{i}" for i, rs in enumerate(holders) if line["broker"] in rs]
        if f"{topic_name}-0" in mine:  # 50 records of 100 bytes, on the leader and its follower alike
            assert mine[f"{topic_name}-0"]["size"] > 50 * 100 and mine[f"{topic_name}-0"]["offset_lag"] == 0
    leader = holders[0][0]
    [answer] = kadmin.describe_log_dirs({topic_name: [0]}, brokers=[leader])
    [log_dir] = answer["log_dirs"]
    assert answer["broker"] == leader and log_dir["error_code"] == 0
    assert log_dir["topics"] == [{"name": topic_name, "partitions": [
        {"partition_index": 0, "partition_size": log_dir["topics"][0]["partitions"][0]["partition_size"],
         "offset_lag": 0, "is_future_key": False}]}]
    assert log_dir["topics"][0]["partitions"][0]["partition_size"] > 50 * 100


# ---------------------------------------------------------------- DescribeQuorum, features

def test_describe_quorum_shows_the_controller_and_the_brokers(cluster, kadmin, java):
    [partition] = kadmin.describe_metadata_quorum()["topics"][0]["partitions"]
    assert partition["error"] is None and partition["leader_id"] == 0 and partition["leader_epoch"] >= 1
    [voter] = partition["current_voters"]
    assert voter["replica_id"] == 0 and voter["log_end_offset"] == partition["high_watermark"]
    observers = partition["observers"]
    assert sorted(o["replica_id"] for o in observers) == [0, 1, 2]
    assert all(0 < o["log_end_offset"] <= partition["high_watermark"] and o["last_fetch_timestamp"] > 0
               for o in observers)
    [java_view] = java_admin(java, cluster.bootstrap, ["quorum"])
    assert (java_view["leader"], java_view["epoch"], java_view["observers"]) == (0, partition["leader_epoch"], 3)
    assert java_view["high_watermark"] >= partition["high_watermark"]
    assert [v["id"] for v in java_view["voters"]] == [0]


def test_features_are_reported_validated_and_updated(cluster, kadmin, java):
    features = kadmin.describe_features()
    assert features["metadata.version"]["supported"] == (30, 30) and features["metadata.version"]["finalized"] == (30, 30)
    assert features["group.version"]["finalized"] == (1, 1) and features["transaction.version"]["finalized"] == (2, 2)
    out = java_admin(java, cluster.bootstrap, ["features"], ["update-feature", "transaction.version", "3", "upgrade"],
                     ["update-feature", "metadata.version", "29", "safe-downgrade"],
                     ["update-feature", "group.version", "0", "safe-downgrade", "validate"], ["features"])
    assert out[0]["supported"] == {"group.version": [0, 1], "metadata.version": [30, 30], "share.version": [0, 1],
                                   "transaction.version": [0, 2]}
    assert out[0]["finalized"] == {"group.version": [1, 1], "metadata.version": [30, 30], "share.version": [1, 1],
                                   "transaction.version": [2, 2]}
    assert [line.get("error") for line in out[1:4]] == ["InvalidUpdateVersionException"] * 2 + [None]
    assert out[4]["finalized"] == out[0]["finalized"]  # validate-only changed nothing
    try:
        kadmin.update_features({"group.version": ("SAFE_DOWNGRADE", 0)})
        def downgraded():
            f = kadmin.describe_features()  # any broker: each applies the change on its own
            return f if f.get("group.version", {}).get("finalized") is None else None

        after = wait_until(downgraded, message="group.version 0 on the brokers")
        assert after["metadata.version"]["finalized_epoch"] > features["metadata.version"]["finalized_epoch"]
        wait_until(lambda: java_admin(java, cluster.bootstrap, ["features"])[0]["finalized"] ==
                   {"metadata.version": [30, 30], "share.version": [1, 1], "transaction.version": [2, 2]},
                   timeout=60, message="the Java client seeing group.version 0")
    finally:
        kadmin.update_features({"group.version": ("UPGRADE", 1)})
    assert kadmin.describe_features()["group.version"]["finalized"] == (1, 1)


# ---------------------------------------------------------------- ListConfigResources

def test_list_config_resources(cluster, kadmin, java, topic_name):
    create(kadmin, topic_name, 1, 1)
    resources = kadmin.list_config_resources()
    assert topic_name in resources["topic"] and resources["broker"] == ["0", "1", "2"]
    out = java_admin(java, cluster.bootstrap, ["list-config-resources"], ["list-config-resources", "BROKER"],
                     ["list-config-resources", "GROUP"])
    assert f"TOPIC:{topic_name}" in out[0]["resources"] and {"BROKER:0", "BROKER:1", "BROKER:2"} <= set(out[0]["resources"])
    assert out[1]["resources"] == ["BROKER:0", "BROKER:1", "BROKER:2"]
    # groups with config overrides (test_share_group_membership.py sets and lists some)
    assert "error" not in out[2] and all(r.startswith("GROUP:") for r in out[2]["resources"])


# ---------------------------------------------------------------- UnregisterBroker

def test_unregister_a_broker_gone_for_good(cluster, kadmin, java, topic_name):
    create(kadmin, topic_name, 1, 3)
    gone = 2
    epoch = cluster.broker(gone)["epoch"]
    assert run_ctl(cluster.data_dir, "kill", str(gone)).returncode == 0
    try:
        wait_until(lambda: not cluster.broker(gone)["alive"], timeout=FENCE_DEADLINE_S, message="broker 2 fenced")
        out = java_admin(java, cluster.bootstrap, ["unregister", str(gone)], ["unregister", "42"])
        assert out[0] == {"type": "unregistered", "broker": gone} and out[1]["error"] == "BrokerIdNotRegisteredException"
        wait_until(lambda: [b["broker_id"] for b in kadmin.describe_cluster()["brokers"]] == [0, 1],
                   message="broker 2 gone from DescribeCluster")
        p = cluster.partition(topic_name)
        assert gone in p["replicas"] and gone not in p["isr"] and p["leader"] != gone
        assert cluster.broker(gone)["epoch"] == 0  # the controller no longer knows it
    finally:
        assert run_ctl(cluster.data_dir, "start", str(gone)).returncode == 0
        wait_until(lambda: any(b["id"] == gone and b["alive"] for b in cluster.status()["brokers"]),
                   timeout=FENCE_DEADLINE_S, message="broker 2 registered again")
    assert cluster.broker(gone)["epoch"] > epoch  # anew, past the epoch it had
