"""Transactions v2 (KIP-890) on `kshim serve --brokers 3`, with the transaction coordinator on another
broker than the partition leader, so the leader verifies writes over AddPartitionsToTxn v5:

- a produce retry that arrives after its transaction was aborted is refused (classic protocol:
  TRANSACTION_ABORTABLE / INVALID_TXN_STATE; v2: INVALID_PRODUCER_EPOCH, the abort bumped the epoch)
  and leaves no hanging transaction: the last stable offset is the high watermark (raw requests, the
  "late retry" being the same bytes sent again);
- `kshim ctl txns --abort TXN_ID` ends a transaction its producer left open: read_committed moves
  on and the producer is fenced;
- the Java client 4.3 uses transactions v2 at transaction.version 2 (Produce v13, EndTxn v5, no
  AddPartitionsToTxn) and the classic protocol once the feature is downgraded to 1, read back
  correctly by a read_committed consumer either way.

The exactly-once copies under broker kills are test_java_eos.py (Java, v2) and
test_transactions_cluster.py (librdkafka, which only speaks the classic protocol).
"""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.java_client import JavaClient, build
from compat_tests.kshim_process import wait_until
from compat_tests.raw_kafka import RawConnection, list_offsets_latest
from compat_tests.test_transactions_cluster import create_topics, read_committed, seal, txn_coordinator
from kshim.ctl.faults import RequestLogClient
from wire import records
from wire.errors import ErrorCode

PRODUCE, ADD_PARTITIONS, END_TXN, INIT_PRODUCER_ID, DESCRIBE_PRODUCERS, DESCRIBE_TXNS = 0, 24, 26, 22, 61, 65


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(Cluster(tmp_path_factory.mktemp("txnv2") / "cluster", 3, "--replica-lag-time-max-ms", "3000")) as c:
        yield c


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-client"))


def address(cluster: Cluster, node: int) -> str:
    return f"127.0.0.1:{cluster.base_port + node}"


def elsewhere(cluster: Cluster, leader: int, prefix: str) -> str:
    """A transactional id its coordinator places on another broker than `leader`."""
    for i in range(64):
        tid = f"{prefix}-{i}"
        if txn_coordinator(cluster, tid) != leader:
            return tid
    raise AssertionError(f"every {prefix}-* is coordinated by broker {leader}")


def produce(conn: RawConnection, tid: str, topic: str, batch: bytes, version: int) -> int:
    response = conn.request(PRODUCE, version, {
        "transactional_id": tid, "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return response.responses[0].partition_responses[0].error_code


def txn_state(conn: RawConnection, tid: str) -> str:
    return conn.request(DESCRIBE_TXNS, 0, {"transactional_ids": [tid]}).transaction_states[0].transaction_state


def open_txn_offset(conn: RawConnection, topic: str, producer_id: int) -> int:
    response = conn.request(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    found = [p for p in response.topics[0].partitions[0].active_producers if p.producer_id == producer_id]
    return found[0].current_txn_start_offset if found else -1


@pytest.mark.parametrize("protocol", ["classic", "v2"])
def test_a_produce_retried_after_its_transaction_was_aborted_is_refused(cluster, topic_name, protocol):
    create_topics(cluster, topic_name, partitions=1)
    leader = cluster.partition(topic_name)["leader"]
    tid = elsewhere(cluster, leader, f"late-{protocol}-{topic_name}")
    coordinator = txn_coordinator(cluster, tid)
    with RawConnection(address(cluster, coordinator)) as coord, RawConnection(address(cluster, leader)) as lead:
        def init() -> tuple[int, int]:
            def answered():
                r = coord.request(INIT_PRODUCER_ID, 5, {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                                        "producer_id": -1, "producer_epoch": -1})
                return (r.producer_id, r.producer_epoch) if r.error_code == 0 else None
            return wait_until(answered, 20, message=f"InitProducerId {tid}")

        pid, epoch = init()
        batch = records.encode_batch([(None, b"doomed")], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                     transactional=True)
        # a write before the transaction has the partition: refused, nothing opened
        assert produce(lead, tid, topic_name, batch, 11) == ErrorCode.TRANSACTION_ABORTABLE
        assert produce(lead, tid, topic_name, batch, 10) == ErrorCode.INVALID_TXN_STATE
        if protocol == "classic":
            added = coord.request(ADD_PARTITIONS, 3, {
                "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": topic_name, "partitions": [0]}]})
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
            assert produce(lead, tid, topic_name, batch, 11) == ErrorCode.NONE
            ended = coord.request(END_TXN, 4, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                               "committed": False})
            assert ended.error_code == 0
        else:
            assert produce(lead, tid, topic_name, batch, 12) == ErrorCode.NONE  # the leader's question added it
            ended = coord.request(END_TXN, 5, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                               "committed": False})
            assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
        wait_until(lambda: txn_state(coord, tid) == "CompleteAbort", 20, message="the abort completed")
        assert open_txn_offset(lead, topic_name, pid) == -1

        # the late retry: the batch already appended (a duplicate answer would do no harm either) is
        # refused in a new batch of the same aborted transaction
        late = records.encode_batch([(None, b"late")], producer_id=pid, producer_epoch=epoch, base_sequence=1,
                                    transactional=True)
        code = produce(lead, tid, topic_name, late, 12 if protocol == "v2" else 11)
        assert code == (ErrorCode.INVALID_PRODUCER_EPOCH if protocol == "v2" else ErrorCode.TRANSACTION_ABORTABLE)
        assert open_txn_offset(lead, topic_name, pid) == -1  # no hanging transaction
    high_watermark = list_offsets_latest(address(cluster, leader), topic_name, 0)
    assert list_offsets_latest(address(cluster, leader), topic_name, 1) == high_watermark  # the LSO is not held back


def set_transaction_version(cluster: Cluster, level: int) -> None:
    with RawConnection(address(cluster, 0)) as conn:  # UpdateFeatures, as kafka-features.sh sends it
        response = conn.request(57, 1, {"timeout_ms": 10000, "validate_only": False, "feature_updates": [
            {"feature": "transaction.version", "max_version_level": level, "upgrade_type": 1 if level == 2 else 2}]})
        assert response.error_code == 0, response

    def everywhere() -> bool:
        for node in range(3):
            with RawConnection(address(cluster, node)) as conn:
                finalized = {f.name: f.max_version_level for f in conn.api_versions(4).finalized_features}
            if finalized.get("transaction.version", 0) != level:
                return False
        return True
    wait_until(everywhere, 20, message=f"transaction.version {level} on every broker")


def test_the_java_client_follows_the_finalized_transaction_version(cluster, java, topic_name):
    create_topics(cluster, topic_name, partitions=3)
    log = RequestLogClient(cluster.data_dir)
    used = {}
    try:
        for level in (2, 1):
            set_transaction_version(cluster, level)
            log.mark()
            run = java.run("txn", cluster.bootstrap, f"java-{level}-{topic_name}", topic_name,
                           "commit:4,abort:3,commit:2", timeout=90)
            assert [t["outcome"] for t in run.of("txn")] == ["commit", "abort", "commit"]
            used[level] = {(e["api"], e["version"]) for e in log.new() if e["api"] in
                           ("Produce", "EndTxn", "AddPartitionsToTxn") and not e["client_id"].startswith(("kshim-verify-", "kshim-txn-"))}  # not the brokers' own
    finally:
        set_transaction_version(cluster, 2)
    assert {("EndTxn", 5), ("Produce", 13)} <= used[2] and not any(api == "AddPartitionsToTxn" for api, _ in used[2])
    assert ("AddPartitionsToTxn", 3) in used[1] and ("EndTxn", 4) in used[1] and ("Produce", 11) in used[1]
    seal(cluster.bootstrap, topic_name)
    values = read_committed(cluster.bootstrap, topic_name)
    assert sorted(v.decode() for v in values) == sorted(f"commit-{s}-{i}" for _ in (1, 2) for s, n in ((0, 4), (2, 2))
                                                         for i in range(n))


def test_ctl_aborts_a_transaction_left_open(cluster, topic_name):
    create_topics(cluster, topic_name, partitions=1)
    leader = address(cluster, cluster.partition(topic_name)["leader"])
    tid = f"left-open-{topic_name}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "log_level": 3})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"never committed")
    assert producer.flush(30) == 0
    assert list_offsets_latest(leader, topic_name, 1) < list_offsets_latest(leader, topic_name, 0)  # held back

    done = run_ctl(cluster.data_dir, "txns", "--abort", tid)
    assert done.returncode == 0, done.stderr
    assert "was Ongoing" in done.stdout and "aborted and fenced" in done.stdout
    wait_until(lambda: list_offsets_latest(leader, topic_name, 1) == list_offsets_latest(leader, topic_name, 0), 20,
               message="read_committed past the aborted transaction")
    with pytest.raises(KafkaException) as fenced:
        producer.commit_transaction(30)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].txn_requires_abort()
    seal(cluster.bootstrap, topic_name, partitions=1)
    assert read_committed(cluster.bootstrap, topic_name, partitions=1) == []
    missing = run_ctl(cluster.data_dir, "txns", "--abort", f"nobody-{topic_name}")
    assert missing.returncode == 1 and "not found" in missing.stderr
