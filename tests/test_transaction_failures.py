"""Transactions when things go wrong inside one broker: markers or offset commits that do not get
COMMITTED, reloads of the coordinator's partition, commits from producers that know only the group
id. (Each was a bug found in review; in-process, replication stalled by hand.)"""
from __future__ import annotations

import anyio
import pytest

from kshim.broker import BrokerConfig
from kshim.coordinator.transactions import TxnState
from kshim.coordinator.transactions.markers import write_here
from kshim.replica.partition import FollowerState
from tests.test_transactions import add, coordinated, data, end, init, settle, standalone_topic
from tests.waiting import wait_until
from wire.errors import ErrorCode
from tests.nodes import served


def stall_replication(p):
    """An in-sync follower that stopped fetching (paused / isolated, not yet out of the ISR)."""
    p.isr = (p.node_id, 99)
    p.followers = {99: FollowerState(log_end_offset=p.log_end_offset)}


@pytest.mark.anyio
async def test_a_marker_not_committed_is_not_reported_written(tmp_path):
    broker, p = await standalone_topic(tmp_path)
    try:
        assert not p.append(data(7, 0, b"x")).error
        stall_replication(p)
        codes = await write_here(broker.replica_manager, 7, 0, True, 0, [("t", 0)], timeout_s=0.3)
        marker_offset = p.log_end_offset - 1
        assert p.high_watermark <= marker_offset  # the marker is not COMMITTED ...
        assert codes[("t", 0)] != ErrorCode.NONE, codes  # ... so it is not reported written
    finally:
        broker.close()


async def open_transaction(broker, p, tid: str = "tx") -> int:
    """A transaction of `tid` with one record on partition `p`, the coordinator running: its producer id."""
    await coordinated(broker, tid)
    pid = (await init(broker, tid)).producer_id
    assert await add(broker, tid, pid, 0) == ErrorCode.NONE
    assert not p.append(data(pid, 0, b"v")).error
    return pid


@pytest.mark.anyio
async def test_a_transaction_stays_prepared_until_its_markers_are_committed(tmp_path, monkeypatch):
    import kshim.coordinator.transactions.markers as markers
    monkeypatch.setattr(markers, "REQUEST_TIMEOUT_S", 0.1)
    attempts: list[dict] = []  # each marker attempt's answers
    real_write_here = markers.write_here

    async def counted_write_here(*args, **kwargs):
        attempts.append(codes := await real_write_here(*args, **kwargs))
        return codes

    monkeypatch.setattr(markers, "write_here", counted_write_here)
    broker, p = await standalone_topic(tmp_path)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(served(broker).transactions.run)
            pid = await open_transaction(broker, p)
            stall_replication(p)            # follower in the ISR, not fetching
            assert await end(broker, "tx", pid, 0, True) == ErrorCode.NONE
            await wait_until(lambda: len(attempts) >= 3, message="three marker attempts")
            assert all(codes[("t", 0)] == ErrorCode.REQUEST_TIMED_OUT for codes in attempts), attempts
            assert served(broker).transactions.txns["tx"].state == TxnState.PREPARE_COMMIT
            assert p.last_stable_offset == 0

            async def follower_fetches() -> None:  # replication resumes: the follower takes what is new
                while True:
                    p.record_follower_fetch(99, fetched := p.log_end_offset, 0)
                    await wait_until(lambda: p.log_end_offset > fetched, timeout_s=60, message="new records")

            tg.start_soon(follower_fetches)
            await settle(broker, "tx", TxnState.COMPLETE_COMMIT)
            assert p.last_stable_offset == p.high_watermark == p.log_end_offset
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_a_reload_during_marker_writes_still_completes_the_transaction(tmp_path, monkeypatch):
    broker, p = await standalone_topic(tmp_path)
    coord = served(broker).transactions
    gate = anyio.Event()
    real_write = coord.markers.write
    writes: list[bool] = []

    async def slow_write(*args, **kwargs):  # e.g. a partition whose leader is down for a while
        writes.append(True)
        await gate.wait()
        return await real_write(*args, **kwargs)

    monkeypatch.setattr(coord.markers, "write", slow_write)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(coord.run)
            pid = await open_transaction(broker, p)
            assert await end(broker, "tx", pid, 0, True) == ErrorCode.NONE
            await wait_until(lambda: writes, message="the marker write started")
            # a state write of ANOTHER transactional id of the same __transaction_state partition
            # timed out in wait_committed: _persist reloads the partition
            coord.runtime.reload(coord.runtime.partition_of("tx"))
            assert "tx" not in coord.txns
            await wait_until(lambda: "tx" in coord.txns, message="the run loop reloads")
            assert coord.txns["tx"].state == TxnState.PREPARE_COMMIT
            gate.set()               # the markers now go through
            await settle(broker, "tx", TxnState.COMPLETE_COMMIT)
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_an_unexpected_error_ending_a_transaction_is_logged_and_the_end_tried_again(tmp_path, monkeypatch,
                                                                                         caplog):
    """The completion (markers, then CompleteCommit) runs as a plain task: an error anywhere in it,
    even before the markers, must be logged and retried, not end the task silently with the
    transaction left prepared (found in review)."""
    from kshim.coordinator.transactions import coordinator as coordinator_module
    monkeypatch.setattr(coordinator_module, "COMPLETION_RETRY_S", 0.01)
    broker, p = await standalone_topic(tmp_path)
    coord = served(broker).transactions
    real_epoch = coord.coordinator_epoch
    failures = [RuntimeError("an unexpected failure")]

    def failing_once(transactional_id):
        if failures:
            raise failures.pop()
        return real_epoch(transactional_id)

    monkeypatch.setattr(coord, "coordinator_epoch", failing_once)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(coord.run)
            pid = await open_transaction(broker, p)
            assert await end(broker, "tx", pid, 0, True) == ErrorCode.NONE
            await settle(broker, "tx", TxnState.COMPLETE_COMMIT)
            assert not failures  # it did fail once
            assert "ending transaction tx failed" in caplog.text
            assert p.last_stable_offset == p.log_end_offset  # the marker is there
            tg.cancel_scope.cancel()
    finally:
        broker.close()


async def offsets_setup(tmp_path):
    from tests.test_groups import find
    broker, p = await standalone_topic(tmp_path)
    assert (await find(broker, "g")).coordinators[0].error_code == ErrorCode.NONE
    served(broker).groups.load_pending()
    index = served(broker).groups.partition_of("g")
    return broker, p, broker.partition("__consumer_offsets", index), index


@pytest.mark.anyio
async def test_txn_offsets_are_unstable_from_their_append(tmp_path):
    from kshim.coordinator.groups.offsets_format import OffsetEntry
    broker, p, o, index = await offsets_setup(tmp_path)
    try:
        async with anyio.create_task_group() as tg:
            stall_replication(o)
            end_before = o.log_end_offset
            tg.start_soon(served(broker).groups.write, "g", [(("t", 0), OffsetEntry(100, -1, "", 0))], (5, 0))
            await wait_until(lambda: o.log_end_offset > end_before, message="TxnOffsetCommit appended")
            # ... and waiting for the ISR
            code, out = served(broker).groups.fetch("g", [("t", 0)], require_stable=True)
            # a consumer taking over waits for the transaction instead of reading "no offset"
            assert out[0][2] == ErrorCode.UNSTABLE_OFFSET_COMMIT, out
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_an_abort_marker_drops_txn_offsets_appended_before_it(tmp_path):
    """TxnOffsetCommit (offset X) waits for the HW; the transaction is aborted (timeout / fence)
    and its marker (Y > X) written to [t-0, offsets-N]; one follower fetch moves both HWs."""
    from kshim.coordinator.groups.offsets_format import OffsetEntry
    broker, p, o, index = await offsets_setup(tmp_path)
    try:
        assert not p.append(data(5, 0, b"v")).error
        async with anyio.create_task_group() as tg:
            stall_replication(p)
            stall_replication(o)
            ends = (p.log_end_offset, o.log_end_offset)
            tg.start_soon(served(broker).groups.write, "g", [(("t", 0), OffsetEntry(100, -1, "", 0))], (5, 0))
            await wait_until(lambda: o.log_end_offset > ends[1], message="TxnOffsetCommit appended")
            assert 5 in served(broker).groups.pending_txn
            ends = (p.log_end_offset, o.log_end_offset)
            tg.start_soon(write_here, broker.replica_manager, 5, 1, False, 0, [("t", 0), ("__consumer_offsets", index)], 5.0)
            await wait_until(lambda: p.log_end_offset > ends[0] and o.log_end_offset > ends[1],
                             message="markers appended")
            # one replica fetch request covering both partitions
            p.record_follower_fetch(99, p.log_end_offset, 0)
            o.record_follower_fetch(99, o.log_end_offset, 0)
            # dropped: not left pending for producer 5's next COMMIT to apply
            await wait_until(lambda: 5 not in served(broker).groups.pending_txn, message="the offsets dropped")
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_txn_offset_commit_with_only_the_group_id_is_accepted(tmp_path):
    import importlib
    from tests.test_groups import call_awaiting, joined, sync
    txn_offset_commit = importlib.import_module("kshim.net.handlers.28_txn_offset_commit")
    broker, p, o, index = await offsets_setup(tmp_path)
    try:
        group = served(broker).groups.get_group("g", create=True)
        member_id, _ = joined(group, served(broker).groups.clock())
        sync(group, served(broker).groups.clock(), member_id, 1, [(member_id, b"x")])
        await coordinated(broker, "tx")  # a transaction that has the group (the broker verifies the commit)
        pid = (await init(broker, "tx")).producer_id
        assert await served(broker).transactions.add_partitions(
            "tx", pid, 0, {("__consumer_offsets", index)}) == ErrorCode.NONE
        body = {"transactional_id": "tx", "group_id": "g", "producer_id": pid, "producer_epoch": 0,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
        # Java's sendOffsetsToTransaction(offsets, "g") / librdkafka's consumer_group_metadata_new("g")
        resp = await call_awaiting(broker, txn_offset_commit, 3, body)
        assert resp.topics[0].partitions[0].error_code == ErrorCode.NONE  # Kafka: accepted
    finally:
        broker.close()


@pytest.mark.anyio
async def test_read_uncommitted_with_the_hw_limit_is_not_held_by_open_transactions(tmp_path):
    broker, p = await standalone_topic(tmp_path)
    try:
        p.uncommitted_reads_to_hw = True   # kshim.uncommitted.read.limit=high-watermark
        assert not p.append(data(1, 0, b"open txn")).error
        assert not p.append(data(2, 0, b"plain", transactional=False)).error
        # Kafka: read_uncommitted reads to the high watermark, open transactions or not
        assert p.read_bound(0) == p.high_watermark == 2, (p.read_bound(0), p.high_watermark)
    finally:
        broker.close()
