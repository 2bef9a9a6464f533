"""Exactly-once consume-transform-produce with the Apache Kafka Java client (KshimClient `copy`)
on a 3-broker cluster while the consumer group's coordinator, then the transaction coordinator
(the transactional id is chosen so that another broker coordinates it), are SIGKILLed and restarted.
The cluster finalizes transaction.version 2 (the default), so the copy runs transactions v2 (not
asserted here: a check on the brokers' request logs found no EndTxn entries at all and is left for
a later session; test_transactions_v2.py proves the Java client's v2 requests).

test_transactions_cluster.py's librdkafka copy never kills the group coordinator: librdkafka's
send_offsets_to_transaction hangs once its cached group coordinator is gone
(confluentinc/librdkafka#5511). The Java client rediscovers the coordinator, so here it is killed.
"""
from __future__ import annotations

import json
import time

import pytest

from compat_tests.cluster import Cluster, running
from compat_tests.java_client import JavaClient, Running, build
from compat_tests.kshim_process import wait_until
from compat_tests.test_transactions_cluster import (FAILOVER_S, LAG_TIME_MS, SESSION_TIMEOUT_MS, coordinator,
                                                    create_topics, kill, load_input, read_committed, restart,
                                                    seal, transactional_id_elsewhere)

RECORDS = 30_000
PER_TXN = 500          # max.poll.records: the size of most transactions
# pace the copy (1,000 records/s at most, 30 s in all) so both kills land mid-copy: the first
# kill's failover and restart take up to ~20 s on a loaded machine, and with transactions v2 the
# copy itself is no longer slower than the pace (at 100 ms it finished before the second kill)
MIN_TXN_MS = 500
KILLS_AT = (0.3, 0.6)  # fraction of the input committed before each kill
COPY_S = 90.0          # the Java copy's own deadline (its watchdog: COPY_S - 5)


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-client"))


@pytest.fixture
def cluster(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3, "--replica-lag-time-max-ms", str(LAG_TIME_MS),
                         session_timeout_ms=SESSION_TIMEOUT_MS)) as c:
        yield c


def progress(run: Running) -> dict:
    """The copy's last progress line ({"committed": n, "aborts": a, "restarts": r, ...})."""
    last = {"committed": 0}
    for line in run.read_stdout().splitlines():
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue  # a line being written
            if "committed" in obj:
                last = obj
    return last


def wait_committed(run: Running, at: int, timeout: float) -> dict:
    def reached():
        assert run.proc.poll() is None or progress(run)["committed"] >= at, \
            f"the copy exited {run.proc.returncode} early:\n{run.read_stderr()[-3000:]}"
        p = progress(run)
        return p if p["committed"] >= at else None
    return wait_until(reached, timeout, interval=0.05, message=f"the copy to commit {at} records")


def test_java_exactly_once_copy_survives_group_and_transaction_coordinator_kills(cluster, java, topic_name):
    began = time.monotonic()
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    group = f"eos-{topic_name}"
    create_topics(cluster, source, sink)
    tid = transactional_id_elsewhere(cluster, group, f"copy-{topic_name}")
    inputs = load_input(cluster.bootstrap, source, RECORDS)

    run = java.start("copy", cluster.bootstrap, source, sink, group, tid, RECORDS,
                     "--timeout-ms", int((COPY_S - 8) * 1000), "--min-txn-ms", MIN_TXN_MS, timeout=COPY_S,
                     props={"max.poll.records": PER_TXN, "session.timeout.ms": 10000})
    killed: list[tuple[str, int, dict]] = []
    try:
        # 1. the group coordinator, mid-copy: FindCoordinator must name another node, the copy go on
        at = wait_committed(run, int(KILLS_AT[0] * RECORDS), 30)
        group_node = coordinator(cluster, group, 0)
        kill(cluster, group_node)
        wait_until(lambda: coordinator(cluster, group, 0) != group_node, FAILOVER_S,
                   message="the group coordinator failover")
        killed.append(("group coordinator", group_node, at))
        restart(cluster, group_node)

        # 2. the transaction coordinator, on another node (the id was chosen so), mid-copy
        at = wait_committed(run, int(KILLS_AT[1] * RECORDS), 30)
        node = coordinator(cluster, tid, 1)
        assert node != group_node, f"the transaction coordinator moved onto the killed group coordinator {node}"
        kill(cluster, node)
        killed.append(("transaction coordinator", node, at))
        wait_until(lambda: coordinator(cluster, tid, 1) != node, FAILOVER_S,
                   message="the transaction coordinator failover")
        restart(cluster, node)

        result = java.finish(run)
    except AssertionError as e:  # a wait above, or the copy stuck past its deadline: say where and why
        run.kill()  # with a thread dump first, if still running
        last = progress(run) if not run.stdout_file.closed else "(in the message above)"
        client = f"kshim-java-{run.proc.pid}"
        state = cluster.diagnose(client, (tid, group), (source, sink, "__transaction_state", "__consumer_offsets"))
        raise AssertionError(f"{e}\n--- the copy's last progress: {last}\n--- the copy's threads:\n"
                             f"{run.dumped_threads()}\n--- the cluster (client {client}, transactional id {tid}, "
                             f"killed {killed}):\n{state}") from None
    finally:
        run.kill()  # only if still running (a failed wait above)
    done = result.one("done")
    assert done["committed"] == RECORDS, done
    assert all(k[2]["committed"] < RECORDS for k in killed), f"a kill came after the copy finished: {killed}"

    seal(cluster.bootstrap, sink)
    final = read_committed(cluster.bootstrap, sink, timeout=30)
    expected = sorted(b"out-" + v for v in inputs)
    assert len(final) == len(set(final)), f"{len(final) - len(set(final))} duplicates in the output"
    assert sorted(final) == expected, f"output differs: {len(set(expected) - set(final))} missing"
    errors = [(e["kind"], e["error"][:120]) for e in result.of("error")]
    print(f"java exactly-once copy: {RECORDS} records in {done['transactions']} transactions, {done['aborts']} aborts, "
          f"{done['restarts']} producer restarts; killed {[(w, n, a['committed']) for w, n, a in killed]}; "
          f"errors {errors}; {time.monotonic() - began:.1f}s")
