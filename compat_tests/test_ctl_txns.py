"""`kshim ctl txns`: transactions and producers as the brokers describe them, run as a real subprocess.

Against a real single broker (found with --bootstrap), confluent-kafka transactional producers
leave one transaction Ongoing and commit another: the open one is shown Ongoing with its partition
and a running time, the committed one CompleteCommit; --state filters; `--producers TOPIC` shows
the open transaction's start offset on its partition with its transactional id, which is what a
user looks at to find a hanging transaction; once aborted it is CompleteAbort with nothing open.
Against a 3-broker cluster the brokers are found through the controller in --data-dir and every id
is described by its own coordinator. Every wait has a deadline.
"""
from __future__ import annotations

import json
import subprocess
import sys
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import Cluster, running
from compat_tests.kshim_process import wait_until
from kshim.coordinator.runtime import partition_for

DEADLINE_S = 30.0
# longer than the test's steps on a loaded CI machine (a dozen `kshim ctl` processes): a timeout
# would abort the open transaction with an epoch bump, and the test's own abort then find it fenced
TXN_TIMEOUT_MS = 300_000


def ctl_txns(*args: str, data_dir=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kshim", "ctl"]
    if data_dir is not None:
        cmd += ["--data-dir", str(data_dir)]
    return subprocess.run([*cmd, "txns", *args], capture_output=True, text=True, timeout=60)


def report(*args: str, data_dir=None) -> dict:
    result = ctl_txns(*args, "--json", data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def table(*args: str, data_dir=None) -> str:
    result = ctl_txns(*args, data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    return result.stdout


def find(rep: dict, transactional_id: str) -> dict | None:
    return next((t for t in rep["transactions"] if t["transactional_id"] == transactional_id), None)


def create_topic(bootstrap: str, name: str, partitions: int, replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, replication_factor)])[name].result(DEADLINE_S)


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "log_level": 3,
                  "transaction.timeout.ms": TXN_TIMEOUT_MS})
    p.init_transactions(DEADLINE_S)
    return p


def committed(bootstrap: str, transactional_id: str, topic: str, partition: int) -> None:
    p = txn_producer(bootstrap, transactional_id)
    p.begin_transaction()
    p.produce(topic, b"done", partition=partition)
    p.commit_transaction(DEADLINE_S)


def in_state(rep: dict, expected: dict[str, str]) -> bool:
    return all((t := find(rep, tid)) is not None and t["state"] == state for tid, state in expected.items())


def producers_of(rep: dict, partition: int) -> list[dict]:
    return next(p for p in rep["partitions"] if p["partition"] == partition)["producers"]


def test_ongoing_and_committed_transactions_and_their_producers(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, 2)
    plain = Producer({"bootstrap.servers": kshim.bootstrap, "log_level": 3})
    for v in (b"a", b"b"):
        plain.produce(topic_name, v, partition=1)
    assert plain.flush(DEADLINE_S) == 0  # offsets 0 and 1: the open transaction starts at 2

    open_id, done_id = f"open-{uuid.uuid4().hex[:8]}", f"done-{uuid.uuid4().hex[:8]}"
    open_txn = txn_producer(kshim.bootstrap, open_id)
    open_txn.begin_transaction()
    open_txn.produce(topic_name, b"pending", partition=1)
    assert open_txn.flush(DEADLINE_S) == 0
    committed(kshim.bootstrap, done_id, topic_name, 0)
    aborted = False
    try:
        # the commit completes (markers, then CompleteCommit) after EndTxn has been answered
        rep = wait_until(lambda: (r := report("--bootstrap", kshim.bootstrap)) and
                         in_state(r, {open_id: "Ongoing", done_id: "CompleteCommit"}) and r,
                         DEADLINE_S, interval=0.2, message="Ongoing and CompleteCommit in ctl txns")
        assert rep["errors"] == []
        ongoing, done = find(rep, open_id), find(rep, done_id)
        assert ongoing["partitions"] == {topic_name: [1]} and ongoing["error"] is None
        assert ongoing["timeout_ms"] == TXN_TIMEOUT_MS and ongoing["producer_epoch"] == 0
        assert ongoing["coordinator"]["port"] == kshim.port
        assert 0 <= ongoing["running_ms"] < TXN_TIMEOUT_MS and ongoing["start_time_ms"] > 0
        assert done["partitions"] == {} and done["running_ms"] is None and done["error"] is None
        assert done["producer_id"] != ongoing["producer_id"]

        # --state filters; the table shows what the JSON does
        only = report("--bootstrap", kshim.bootstrap, "--state", "Ongoing")
        assert find(only, open_id) and not find(only, done_id)
        both = report("--bootstrap", kshim.bootstrap, "--state", "Ongoing", "--state", "CompleteCommit")
        assert find(both, open_id) and find(both, done_id)
        text = table("--bootstrap", kshim.bootstrap)
        line = next(x for x in text.splitlines() if x.startswith(open_id))
        assert "Ongoing" in line and f"{topic_name}:1" in line and str(ongoing["producer_id"]) in line
        assert "CompleteCommit" in next(x for x in text.splitlines() if x.startswith(done_id))

        # --producers: the open transaction's first offset, on its partition, with its transactional id
        prod = report("--bootstrap", kshim.bootstrap, "--producers", topic_name)
        assert prod["topic"] == topic_name and [p["partition"] for p in prod["partitions"]] == [0, 1]
        assert all(p["error"] is None and p["leader"] == 0 for p in prod["partitions"])
        [holder] = [a for a in producers_of(prod, 1) if a["producer_id"] == ongoing["producer_id"]]
        assert holder["open_txn_start_offset"] == 2 and holder["last_sequence"] == 0
        assert (holder["transactional_id"], holder["transaction_state"]) == (open_id, "Ongoing")
        assert holder["last_timestamp"] and holder["producer_epoch"] == 0
        [finished] = [a for a in producers_of(prod, 0) if a["producer_id"] == done["producer_id"]]
        assert finished["open_txn_start_offset"] is None and finished["coordinator_epoch"] is not None
        assert finished["transactional_id"] == done_id
        text = table("--bootstrap", kshim.bootstrap, "--producers", topic_name)
        assert "TXN-START-OFFSET" in text and open_id in text
        row = next(x.split() for x in text.splitlines() if open_id in x)
        assert row[:3] == ["1", "0", str(ongoing["producer_id"])] and "2" in row

        # aborted: the partition holds no open transaction any more
        open_txn.abort_transaction(DEADLINE_S)
        aborted = True
        wait_until(lambda: in_state(report("--bootstrap", kshim.bootstrap), {open_id: "CompleteAbort"}),
                   DEADLINE_S, interval=0.2, message="CompleteAbort in ctl txns")
        prod = report("--bootstrap", kshim.bootstrap, "--producers", topic_name)
        [holder] = [a for a in producers_of(prod, 1) if a["producer_id"] == ongoing["producer_id"]]
        assert holder["open_txn_start_offset"] is None
    finally:
        if not aborted:  # leave no open transaction on the module's broker
            open_txn.abort_transaction(DEADLINE_S)


def test_clear_errors(kshim, tmp_path):
    result = ctl_txns(data_dir=tmp_path)  # no cluster there, no --bootstrap
    assert result.returncode == 1 and "--bootstrap" in result.stderr and "Traceback" not in result.stderr
    result = ctl_txns("--bootstrap", kshim.bootstrap, "--producers", f"missing-{uuid.uuid4().hex[:8]}")
    assert result.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in result.stderr
    assert "Traceback" not in result.stderr
    rep = report("--bootstrap", kshim.bootstrap, "--state", "Bogus")
    assert rep["transactions"] == [] and any("unknown state(s) Bogus" in e for e in rep["errors"])


def test_cluster_ids_described_by_their_coordinators(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3)) as cluster:
        topic = f"t-{uuid.uuid4().hex[:8]}"
        create_topic(cluster.bootstrap, topic, 3, 3)
        ids = [f"c{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
        for i, tid in enumerate(ids):
            committed(cluster.bootstrap, tid, topic, i % 3)
        rep = wait_until(lambda: (r := report(data_dir=cluster.data_dir)) and
                         in_state(r, dict.fromkeys(ids, "CompleteCommit")) and r,
                         DEADLINE_S, interval=0.2, message="every id CompleteCommit in ctl txns")
        assert [b["node_id"] for b in rep["brokers"]] == [0, 1, 2] and rep["errors"] == []
        # each id described by its coordinator: the leader of its __transaction_state partition
        state_leaders = {p["partition"]: p["leader"] for p in cluster.status()["partitions"]
                         if p["topic"] == "__transaction_state"}
        assert [(find(rep, tid)["coordinator"]["node_id"], find(rep, tid)["error"]) for tid in ids] == \
            [(state_leaders[partition_for(tid, len(state_leaders))], None) for tid in ids]
        prod = report("--producers", topic, data_dir=cluster.data_dir)
        leaders = {p["partition"]: p["leader"] for p in prod["partitions"]}
        assert leaders == {p["partition"]: p["leader"] for p in cluster.status()["partitions"] if p["topic"] == topic}
        assert sorted(a["transactional_id"] for p in prod["partitions"] for a in p["producers"]) == sorted(ids)
