"""Transactions inside one broker: the aborted transaction index, a partition's last stable offset
and aborted list (also after a restart, a crash and a truncation), and the coordinator's state
machine through its handlers (a standalone broker, requests through the codec)."""
from __future__ import annotations

import importlib

import anyio
import pytest

from kshim.broker import BrokerConfig
from kshim.log.txnindex import ENTRY_SIZE, AbortedTxn, TxnIndex
from kshim.standalone import open_standalone
from kshim.coordinator.transactions import TxnState
from tests.test_groups import call_awaiting
from tests.waiting import wait_until
from wire import records
from wire.errors import ErrorCode
from tests.nodes import served

find_coordinator = importlib.import_module("kshim.net.handlers.10_find_coordinator")
init_producer_id = importlib.import_module("kshim.net.handlers.22_init_producer_id")
add_partitions = importlib.import_module("kshim.net.handlers.24_add_partitions_to_txn")
end_txn = importlib.import_module("kshim.net.handlers.26_end_txn")
describe_txns = importlib.import_module("kshim.net.handlers.65_describe_transactions")
list_txns = importlib.import_module("kshim.net.handlers.66_list_transactions")
describe_producers = importlib.import_module("kshim.net.handlers.61_describe_producers")


def aborted(partition, fetch_offset: int, upper_bound: int) -> list[dict]:
    """The aborted transactions a read_committed fetch of [fetch_offset, upper_bound) names."""
    return [{"producer_id": t.producer_id, "first_offset": t.first_offset}
            for t in partition.log.aborted_between(fetch_offset, upper_bound)]


# ---------------------------------------------------------------------------------- the index
def test_txn_index_survives_reopen_and_ignores_a_torn_tail(tmp_path):
    stem = str(tmp_path / "00000000000000000000")
    index = TxnIndex(stem)
    index.append(AbortedTxn(7, 0, 5, 6))
    index.append(AbortedTxn(8, 3, 9, 10))
    index.append(AbortedTxn(8, 3, 9, 10))  # a replay: ignored
    with open(stem + ".txnindex", "ab") as f:
        f.write(b"\x00\x00\x01")  # a torn entry
    again = TxnIndex(stem)
    assert again.entries == [AbortedTxn(7, 0, 5, 6), AbortedTxn(8, 3, 9, 10)]
    assert (tmp_path / "00000000000000000000.txnindex").stat().st_size == 2 * ENTRY_SIZE
    found: list = []
    assert again.collect(6, 9, found)  # complete: nothing aborted later can start before 9
    assert found == [AbortedTxn(8, 3, 9, 10)]
    found = []
    assert not again.collect(0, 12, found) and len(found) == 2  # a later segment may hold more
    again.truncate_from(9)
    assert TxnIndex(stem).entries == [AbortedTxn(7, 0, 5, 6)]


# ---------------------------------------------------------------------------------- a partition
def data(pid: int, seq: int, *values: bytes, epoch: int = 0, transactional: bool = True) -> bytes:
    return records.encode_batch([(None, v) for v in values], producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq, transactional=transactional)


async def standalone_topic(tmp_path, name: str = "t"):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    await broker.create_topic(name, 1)
    return broker, broker.partition(name, 0)


@pytest.mark.anyio
async def test_last_stable_offset_and_aborted_list_follow_markers(tmp_path):
    broker, p = await standalone_topic(tmp_path)
    try:
        assert not p.append(data(1, 0, b"a0", b"a1")).error         # offsets 0-1, txn of producer 1
        assert not p.append(data(2, 0, b"b0")).error                # 2, txn of producer 2
        assert not p.append(data(3, 0, b"plain", transactional=False)).error  # 3
        assert p.last_stable_offset == 0 and p.high_watermark == 4
        assert p.read(0, 1 << 20, 1) == b""
        assert not p.append_marker(1, 0, False, 0).error            # 4: abort producer 1
        assert p.last_stable_offset == 2
        assert aborted(p, 0, 5) == [{"producer_id": 1, "first_offset": 0}]
        assert not p.append_marker(2, 0, True, 0).error             # 5: commit producer 2
        assert p.last_stable_offset == 6 == p.log_end_offset
        assert aborted(p, 5, 6) == [] and aborted(p, 2, 6) != []  # its marker is at 4
        # a zombie's data or marker with an older epoch is refused
        assert not p.append_marker(1, 1, False, 0).error            # 6: producer 1 now at epoch 1
        assert p.append(data(1, 0, b"late")).error == ErrorCode.INVALID_PRODUCER_EPOCH
        assert p.append_marker(1, 0, True, 0).error == ErrorCode.INVALID_PRODUCER_EPOCH
        assert p.append_marker(1, 1, True, -1).error == ErrorCode.NONE
        assert not p.append_marker(2, 0, True, 3).error
        assert p.append_marker(2, 0, True, 2).error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        assert not p.append(data(4, 0, b"open")).error
        open_at = p.log_end_offset - 1
    finally:
        broker.close()
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))  # a clean restart: snapshot + index files
    try:
        p = broker.partition("t", 0)
        assert p.last_stable_offset == open_at
        assert aborted(p, 0, open_at) == [{"producer_id": 1, "first_offset": 0}]
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_crash_rebuilds_producer_state_and_the_aborted_index_from_the_log(tmp_path):
    broker, p = await standalone_topic(tmp_path)
    p.append(data(1, 0, b"x"))
    p.append_marker(1, 0, False, 0)
    p.append(data(2, 0, b"y"))
    p.log.flush()
    (p.directory / "00000000000000000000.txnindex").unlink()  # as if the crash lost the index write
    # no broker.close(): no clean-shutdown marker, no producer state snapshot, as after SIGKILL
    reopened = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        q = reopened.partition("t", 0)
        assert q.last_stable_offset == 2  # producer 2's transaction is still open
        assert aborted(q, 0, 3) == [{"producer_id": 1, "first_offset": 0}]
        q.truncate_to(1)  # the marker goes: producer 1's transaction is open again
        assert q.last_stable_offset == 0 and aborted(q, 0, 1) == []
    finally:
        reopened.close()


# ---------------------------------------------------------------------------------- the coordinator
async def coordinated(broker, tid: str) -> None:
    resp = await call_awaiting(broker, find_coordinator, 4, {"key_type": 1, "coordinator_keys": [tid]})
    assert resp.coordinators[0].error_code == ErrorCode.NONE
    served(broker).transactions.runtime.load_pending()
    assert served(broker).transactions.check(tid) == ErrorCode.NONE


async def init(broker, tid: str, timeout_ms: int = 60_000, version: int = 4):
    return await call_awaiting(broker, init_producer_id, version, {
        "transactional_id": tid, "transaction_timeout_ms": timeout_ms, "producer_id": -1, "producer_epoch": -1})


async def add(broker, tid: str, pid: int, epoch: int, topic: str = "t", version: int = 3):
    resp = await call_awaiting(broker, add_partitions, version, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    return resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


async def end(broker, tid: str, pid: int, epoch: int, committed: bool, version: int = 3):
    resp = await call_awaiting(broker, end_txn, version, {
        "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": committed})
    return resp.error_code


async def settle(broker, tid: str, state: TxnState) -> None:
    await wait_until(lambda: served(broker).transactions.txns[tid].state == state, message=f"{tid} {state.name}")


@pytest.mark.anyio
async def test_init_add_end_and_fencing(tmp_path):
    broker, p = await standalone_topic(tmp_path)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(served(broker).transactions.run)
            await coordinated(broker, "tx")
            first = await init(broker, "tx")
            assert first.error_code == ErrorCode.NONE and first.producer_epoch == 0
            pid = first.producer_id
            assert await add(broker, "tx", pid, 0) == ErrorCode.NONE
            assert await add(broker, "tx", pid, 0, topic="missing") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert await add(broker, "tx", pid + 1, 0) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
            assert not p.append(data(pid, 0, b"v")).error
            assert p.last_stable_offset == 0
            assert await end(broker, "tx", pid, 0, True) == ErrorCode.NONE
            await settle(broker, "tx", TxnState.COMPLETE_COMMIT)
            assert p.last_stable_offset == p.log_end_offset == 2  # the record and the COMMIT marker
            assert await end(broker, "tx", pid, 0, True) == ErrorCode.NONE  # a retry
            assert await end(broker, "tx", pid, 0, False) == ErrorCode.INVALID_TXN_STATE

            # an open transaction, then a new instance: aborted with a bumped epoch, fenced
            assert await add(broker, "tx", pid, 0) == ErrorCode.NONE
            assert not p.append(data(pid, 1, b"zombie")).error
            assert (await init(broker, "tx")).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
            await settle(broker, "tx", TxnState.COMPLETE_ABORT)
            second = await init(broker, "tx")
            assert (second.error_code, second.producer_id, second.producer_epoch) == (ErrorCode.NONE, pid, 2)
            assert await add(broker, "tx", pid, 0) == ErrorCode.PRODUCER_FENCED
            assert await add(broker, "tx", pid, 0, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
            assert await end(broker, "tx", pid, 1, True) == ErrorCode.PRODUCER_FENCED
            assert aborted(p, 0, p.log_end_offset) == [{"producer_id": pid, "first_offset": 2}]

            described = await call_awaiting(broker, describe_txns, 0, {"transactional_ids": ["tx", "nope"]})
            states = {s.transactional_id: s for s in described.transaction_states}
            assert states["tx"].transaction_state == "Empty" and states["tx"].producer_epoch == 2
            assert states["nope"].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            listed = await call_awaiting(broker, list_txns, 1, {"state_filters": ["Empty", "Bogus"],
                                                                  "producer_id_filters": [], "duration_filter": -1})
            assert [t.transactional_id for t in listed.transaction_states] == ["tx"]
            assert listed.unknown_state_filters == ["Bogus"]
            producers = await call_awaiting(broker, describe_producers, 0, {"topics": [{"name": "t", "partition_indexes": [0]}]})
            (entry,) = producers.topics[0].partitions[0].active_producers
            assert (entry.producer_id, entry.producer_epoch, entry.current_txn_start_offset) == (pid, 1, -1)
            assert (await init(broker, "tx", timeout_ms=0)).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_timeout_aborts_and_a_restarted_coordinator_finishes_what_it_prepared(tmp_path):
    broker, p = await standalone_topic(tmp_path)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(served(broker).transactions.run)
            await coordinated(broker, "slow")
            pid = (await init(broker, "slow", timeout_ms=100)).producer_id
            assert await add(broker, "slow", pid, 0) == ErrorCode.NONE
            p.append(data(pid, 0, b"left open"))
            await settle(broker, "slow", TxnState.COMPLETE_ABORT)
            assert served(broker).transactions.txns["slow"].producer_epoch == 1  # fenced
            assert p.last_stable_offset == p.log_end_offset
            tg.cancel_scope.cancel()
        # PrepareCommit written, markers not yet: a restart must finish the commit
        await coordinated(broker, "half")
        pid = (await init(broker, "half")).producer_id
        assert await add(broker, "half", pid, 0) == ErrorCode.NONE
        p.append(data(pid, 0, b"half"))
        meta = served(broker).transactions.txns["half"]
        assert await served(broker).transactions._persist(meta.but(state=TxnState.PREPARE_COMMIT)) == ErrorCode.NONE
        assert p.last_stable_offset < p.log_end_offset
    finally:
        broker.close()
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        async with anyio.create_task_group() as tg:
            # the broker's background work only, no request: it leads __transaction_state, so it
            # loads the transaction coordinator, which finishes the commit (kshim.net.broker_server)
            tg.start_soon(served(broker).run)
            await wait_until(lambda: broker.partition("t", 0).last_stable_offset == broker.partition("t", 0).log_end_offset,
                             message="the prepared commit completed")
            assert served(broker).transactions.txns["half"].state == TxnState.COMPLETE_COMMIT
            p = broker.partition("t", 0)
            assert [a["first_offset"] for a in aborted(p, 0, p.log_end_offset)] == [0]  # "slow"
            tg.cancel_scope.cancel()
    finally:
        broker.close()


# ---------------------------------------------------------------------------------- transactions v2
produce = importlib.import_module("kshim.net.handlers.00_produce")


async def send(broker, tid: str, batch: bytes, version: int) -> int:
    resp = await call_awaiting(broker, produce, version, {
        "transactional_id": tid, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]})
    return resp.responses[0].partition_responses[0].error_code


async def end_v5(broker, tid: str, pid: int, epoch: int, committed: bool) -> tuple[int, int, int]:
    resp = await call_awaiting(broker, end_txn, 5, {
        "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": committed})
    return resp.error_code, resp.producer_id, resp.producer_epoch


@pytest.mark.anyio
async def test_v1_writes_are_verified_so_a_late_retry_opens_no_transaction(tmp_path):
    broker, p = await standalone_topic(tmp_path)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(served(broker).transactions.run)
            await coordinated(broker, "v1")
            pid = (await init(broker, "v1")).producer_id
            # no AddPartitionsToTxn: refused, in the code each Produce version knows
            assert await send(broker, "v1", data(pid, 0, b"x"), 10) == ErrorCode.INVALID_TXN_STATE
            assert await send(broker, "v1", data(pid, 0, b"x"), 11) == ErrorCode.TRANSACTION_ABORTABLE
            assert await send(broker, "v1", data(pid + 7, 0, b"x"), 11) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
            assert await add(broker, "v1", pid, 0) == ErrorCode.NONE
            assert await send(broker, "v1", data(pid, 0, b"a"), 11) == ErrorCode.NONE
            assert await send(broker, "v1", data(pid, 1, b"b"), 11) == ErrorCode.NONE  # open here: not asked again
            assert await end(broker, "v1", pid, 0, False) == ErrorCode.NONE
            await settle(broker, "v1", TxnState.COMPLETE_ABORT)
            # the retry of a batch of the aborted transaction arrives late: refused, nothing hangs
            assert await send(broker, "v1", data(pid, 2, b"late"), 11) == ErrorCode.TRANSACTION_ABORTABLE
            assert p.last_stable_offset == p.log_end_offset
            assert p.producers.get(pid).txn_first_offset == -1
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_sibling_batch_appended_during_verification_does_not_make_the_answer_stale(tmp_path):
    """Two requests of one transaction verified at once (the Java producer keeps 5 in flight): the
    first one's append changes the producer's entry while the second one's question is out. That
    is no stale answer, the transaction is open at this epoch; a marker written meanwhile is."""
    broker, p = await standalone_topic(tmp_path)
    verifier = served(broker).transactions.verifier
    try:
        assert not p.append(data(5, 0, b"a")).error  # producer 5's previous transaction, epoch 0: committed
        assert not p.append_marker(5, 0, True, 0).error

        def answering_after(change):
            async def verify_once(tid, producer_id, producer_epoch, partitions, add):
                assert not change().error  # what happens on the partition while the question is out
                return dict.fromkeys(partitions, ErrorCode.NONE)
            return verify_once

        # the next transaction (epoch 1, transactions v2): a sibling request's batch lands first
        verifier._verify_once = answering_after(lambda: p.append(data(5, 0, b"b", epoch=1)))
        assert await verifier.verify("tid", 5, 1, {("t", 0)}, add=True) == ({("t", 0): ErrorCode.NONE}, set())
        # an abort marker for that transaction written while a later question is out: stale
        verifier._verify_once = answering_after(lambda: p.append_marker(5, 1, False, 0))
        assert await verifier.verify("tid", 5, 1, {("t", 0)}, add=True) == ({("t", 0): ErrorCode.NONE}, {("t", 0)})
    finally:
        broker.close()


@pytest.mark.anyio
async def test_v2_adds_partitions_implicitly_and_bumps_the_epoch_at_every_end(tmp_path):
    broker, p = await standalone_topic(tmp_path)
    coordinator = served(broker).transactions
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(coordinator.run)
            await coordinated(broker, "v2")
            pid = (await init(broker, "v2")).producer_id
            assert await send(broker, "v2", data(pid, 0, b"a"), 12) == ErrorCode.NONE  # no AddPartitionsToTxn
            meta = coordinator.txns["v2"]
            assert (meta.state, meta.partitions, meta.tv2) == (TxnState.ONGOING, frozenset({("t", 0)}), True)
            assert await end_v5(broker, "v2", pid, 0, True) == (ErrorCode.NONE, pid, 1)
            assert await end_v5(broker, "v2", pid, 0, True) in {(ErrorCode.NONE, pid, 1),  # a retry of the end
                                                                 (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)}
            await settle(broker, "v2", TxnState.COMPLETE_COMMIT)
            assert await end_v5(broker, "v2", pid, 0, True) == (ErrorCode.NONE, pid, 1)
            marker = p.producers.get(pid)
            assert marker.epoch == 1 and marker.txn_first_offset == -1  # the COMMIT marker carries the new epoch
            # the next transaction: epoch 1, sequence from 0 again
            assert await send(broker, "v2", data(pid, 0, b"b", epoch=1), 12) == ErrorCode.NONE
            assert await send(broker, "v2", data(pid, 1, b"c", epoch=1), 12) == ErrorCode.NONE
            assert await end_v5(broker, "v2", pid, 1, False) == (ErrorCode.NONE, pid, 2)
            await settle(broker, "v2", TxnState.COMPLETE_ABORT)
            # the late retry of the aborted transaction's batch carries the old epoch: refused
            assert await send(broker, "v2", data(pid, 2, b"late", epoch=1), 12) == ErrorCode.INVALID_PRODUCER_EPOCH
            assert p.last_stable_offset == p.log_end_offset
            # an abort with nothing written (its produce failed verification) bumps the epoch too
            assert await end_v5(broker, "v2", pid, 2, False) == (ErrorCode.NONE, pid, 3)
            assert await end_v5(broker, "v2", pid, 3, True) == (ErrorCode.INVALID_TXN_STATE, -1, -1)
            assert await end_v5(broker, "v2", pid, 1, True) == (ErrorCode.PRODUCER_FENCED, -1, -1)
            # an exhausted epoch: the markers take the last epoch, the client a new producer id
            meta = coordinator.txns["v2"]
            assert await coordinator._persist(meta.but(producer_epoch=32766)) == ErrorCode.NONE
            assert await send(broker, "v2", data(pid, 0, b"d", epoch=32766), 12) == ErrorCode.NONE
            code, new_pid, new_epoch = await end_v5(broker, "v2", pid, 32766, True)
            assert (code, new_epoch) == (ErrorCode.NONE, 0) and new_pid != pid
            await settle(broker, "v2", TxnState.COMPLETE_COMMIT)
            assert p.producers.get(pid).epoch == 32767 and p.last_stable_offset == p.log_end_offset
            assert await end_v5(broker, "v2", pid, 32766, True) == (ErrorCode.NONE, new_pid, 0)  # a retry
            assert await send(broker, "v2", data(new_pid, 0, b"e"), 12) == ErrorCode.NONE
            assert await end_v5(broker, "v2", new_pid, 0, True) == (ErrorCode.NONE, new_pid, 1)
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_v2_first_write_after_a_commit_outlasts_the_markers_written_meanwhile(tmp_path, monkeypatch):
    """Right after a v2 commit the next transaction's first write is asked while the markers are
    still being written (CONCURRENT_TRANSACTIONS, asked again): the marker landing between the
    questions is the previous transaction's and must not refuse the write (the Java client failed
    with INVALID_TXN_STATE on it)."""
    broker, p = await standalone_topic(tmp_path)
    coordinator = served(broker).transactions
    try:
        async with anyio.create_task_group() as tg:
            await coordinated(broker, "next")
            pid = (await init(broker, "next")).producer_id
            assert await send(broker, "next", data(pid, 0, b"a"), 12) == ErrorCode.NONE
            # the coordinator's loop is not running yet: the commit is prepared, its marker not written
            assert await end_v5(broker, "next", pid, 0, True) == (ErrorCode.NONE, pid, 1)
            assert coordinator.txns["next"].state == TxnState.PREPARE_COMMIT
            verifier = coordinator.verifier
            real = verifier._verify_once
            answers = []

            async def markers_written_meanwhile(*args, **kwargs):
                codes = await real(*args, **kwargs)
                answers.append(set(codes.values()))
                if len(answers) == 1:  # the first question: now the commit marker reaches the partition
                    tg.start_soon(coordinator.run)
                    await settle(broker, "next", TxnState.COMPLETE_COMMIT)
                return codes

            monkeypatch.setattr(verifier, "_verify_once", markers_written_meanwhile)
            assert await send(broker, "next", data(pid, 0, b"b", epoch=1), 12) == ErrorCode.NONE
            assert answers == [{ErrorCode.CONCURRENT_TRANSACTIONS}, {ErrorCode.NONE}]
            assert coordinator.txns["next"].state == TxnState.ONGOING
            assert p.producers.get(pid).txn_first_offset >= 0  # the new transaction is open on the partition
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_add_partitions_right_after_a_commit_waits_for_its_markers(tmp_path):
    """A client's next transaction begins while the last one's markers are still being written:
    its AddPartitionsToTxn waits for that (up to CONCURRENT_WAIT_S) and succeeds, where it would
    have got CONCURRENT_TRANSACTIONS and backed off; past the bound it still gets that error."""
    from kshim.coordinator.transactions import coordinator as coordinator_module
    broker, p = await standalone_topic(tmp_path)
    coordinator = served(broker).transactions
    try:
        async with anyio.create_task_group() as tg:
            await coordinated(broker, "quick")
            pid = (await init(broker, "quick")).producer_id
            assert await add(broker, "quick", pid, 0) == ErrorCode.NONE
            assert not p.append(data(pid, 0, b"a")).error
            # the coordinator's loop is not running yet: the commit is prepared, its marker not written
            assert await end(broker, "quick", pid, 0, True) == ErrorCode.NONE
            assert coordinator.txns["quick"].state == TxnState.PREPARE_COMMIT
            started = anyio.current_time()
            assert await add(broker, "quick", pid, 0) == ErrorCode.CONCURRENT_TRANSACTIONS  # nothing completes it
            assert anyio.current_time() - started >= coordinator_module.CONCURRENT_WAIT_S * 0.9

            answers = []

            async def next_transaction() -> None:
                answers.append(await add(broker, "quick", pid, 0))
            tg.start_soon(next_transaction)
            await anyio.wait_all_tasks_blocked()
            assert answers == []  # waiting on the previous transaction's end
            tg.start_soon(coordinator.run)  # the markers are written, then CompleteCommit
            await wait_until(lambda: answers, message="AddPartitionsToTxn answered")
            assert answers == [ErrorCode.NONE]
            assert coordinator.txns["quick"].state == TxnState.ONGOING
            assert p.producers.get(pid).txn_first_offset < 0  # the commit marker landed first
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_txn_offset_commit_is_verified_and_v5_adds_the_group(tmp_path):
    from kshim.coordinator.groups import OFFSETS_TOPIC
    from tests.test_groups import find
    txn_offset_commit = importlib.import_module("kshim.net.handlers.28_txn_offset_commit")
    broker, p = await standalone_topic(tmp_path)
    coordinator = served(broker).transactions
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(coordinator.run)
            assert (await find(broker, "g")).coordinators[0].error_code == ErrorCode.NONE
            served(broker).groups.load_pending()
            await coordinated(broker, "offsets")
            pid = (await init(broker, "offsets")).producer_id

            async def commit(version: int, epoch: int = 0) -> int:
                resp = await call_awaiting(broker, txn_offset_commit, version, {
                    "transactional_id": "offsets", "group_id": "g", "producer_id": pid, "producer_epoch": epoch,
                    "generation_id": -1, "member_id": "", "group_instance_id": None,
                    "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                            "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
                return resp.topics[0].partitions[0].error_code

            assert await commit(4) == ErrorCode.INVALID_TXN_STATE  # no AddOffsetsToTxn first
            assert await commit(5) == ErrorCode.NONE               # v2: the group joins the transaction
            group_partition = (OFFSETS_TOPIC, served(broker).groups.partition_of("g"))
            assert coordinator.txns["offsets"].partitions == frozenset({group_partition})
            assert await end_v5(broker, "offsets", pid, 0, True) == (ErrorCode.NONE, pid, 1)
            await settle(broker, "offsets", TxnState.COMPLETE_COMMIT)
            assert await commit(5) == ErrorCode.PRODUCER_FENCED  # the ended transaction's epoch
            # transactional records without a transactional id: refused as Kafka does, nothing appended
            end_offset = p.log_end_offset
            resp = await call_awaiting(broker, produce, 11, {
                "transactional_id": None, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": data(pid, 0, b"x", epoch=1)}]}]})
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            assert p.log_end_offset == end_offset
            tg.cancel_scope.cancel()
    finally:
        broker.close()
