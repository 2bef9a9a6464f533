from dataclasses import dataclass

import pytest

from kshim.replica.producer_state import (
    INT32_MAX,
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    INVALID_TXN_STATE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    ProducerStateManager,
    last_sequence,
)


@dataclass
class Hdr:
    producer_id: int = 1000
    producer_epoch: int = 0
    base_sequence: int = 0
    last_offset_delta: int = 0
    max_timestamp: int = 1_000
    records_count: int = 1
    is_transactional: bool = False
    is_control: bool = False


class Log:
    """Tiny fake partition: check, append, update."""

    def __init__(self, state=None):
        self.state = state or ProducerStateManager()
        self.end = self.state.snapshot_offset

    def produce(self, hdr):
        res = self.state.check(hdr)
        if res.is_ok:
            base = self.end
            last = base + hdr.last_offset_delta
            self.state.update(hdr, base, last)
            self.end = last + 1
            return base
        return res


def batch(seq, n=1, pid=1000, epoch=0, **kw):
    return Hdr(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
               last_offset_delta=n - 1, records_count=n, **kw)


def test_in_order_acceptance():
    log = Log()
    assert log.produce(batch(0, 3)) == 0
    assert log.produce(batch(3, 2)) == 3
    assert log.produce(batch(5)) == 5
    assert log.state.snapshot_offset == 6
    assert log.state.get(1000).last_seq == 5


def test_no_producer_id_skips_everything():
    log = Log()
    for _ in range(3):
        assert log.produce(batch(-1, pid=-1, epoch=-1)) is not None
    assert len(log.state) == 0
    assert log.state.snapshot_offset == 3


def test_duplicates_of_last_five_return_original_offsets():
    log = Log()
    bases = [log.produce(batch(i * 2, 2)) for i in range(7)]
    assert bases == [0, 2, 4, 6, 8, 10, 12]
    for i in range(2, 7):
        res = log.state.check(batch(i * 2, 2))
        assert res.is_duplicate
        assert res.base_offset == bases[i]
        assert res.last_offset == bases[i] + 1
    # nothing was appended by the checks
    assert log.end == 14
    # the 6th-oldest is forgotten: no longer a duplicate -> out of order
    res = log.state.check(batch(2, 2))
    assert res.is_error and res.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.state.check(batch(14, 2)).is_ok


def test_duplicate_requires_same_sequence_range():
    log = Log()
    log.produce(batch(0, 3))
    res = log.state.check(batch(0, 2))
    assert res.is_error and res.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_gap_is_out_of_order():
    log = Log()
    log.produce(batch(0))
    res = log.state.check(batch(2))
    assert res.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert res.message


def test_fenced_old_epoch():
    log = Log()
    log.produce(batch(0, epoch=3))
    res = log.state.check(batch(1, epoch=2))
    assert res.is_error and res.error_code == INVALID_PRODUCER_EPOCH
    # even a retry of an old-epoch batch is fenced, never a duplicate
    res = log.state.check(batch(0, epoch=2))
    assert res.error_code == INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_zero():
    log = Log()
    log.produce(batch(0, 5, epoch=0))
    assert log.state.check(batch(0, epoch=1)).is_ok
    res = log.state.check(batch(5, epoch=1))
    assert res.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.produce(batch(0, epoch=1)) == 5
    # old-epoch batch metadata is gone after the bump
    assert log.state.check(batch(0, 5, epoch=0)).error_code == INVALID_PRODUCER_EPOCH
    assert log.state.check(batch(1, epoch=1)).is_ok


def test_unknown_producer_accepts_any_sequence():
    st = ProducerStateManager()
    assert st.check(batch(12345, epoch=7)).is_ok
    assert st.check(batch(INT32_MAX, epoch=0)).is_ok
    log = Log(st)
    assert log.produce(batch(500, epoch=2)) == 0
    assert log.state.check(batch(502, epoch=2)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.produce(batch(501, epoch=2)) == 1


def test_invalid_negative_sequence():
    st = ProducerStateManager()
    assert st.check(batch(-1)).error_code == INVALID_RECORD


def test_sequence_wraps_at_int32_max():
    h = batch(INT32_MAX - 1, 4)
    assert last_sequence(h) == 1
    assert last_sequence(batch(INT32_MAX, 1)) == INT32_MAX
    log = Log()
    log.produce(batch(INT32_MAX - 2, epoch=0))   # unknown producer: any seq
    assert log.produce(batch(INT32_MAX - 1, 4)) == 1  # seqs MAX-1, MAX, 0, 1
    assert log.state.get(1000).last_seq == 1
    assert log.state.check(batch(INT32_MAX - 1, 4)).is_duplicate
    assert log.produce(batch(2)) == 5
    # and a batch ending exactly at MAX is followed by 0
    log2 = Log()
    log2.produce(batch(INT32_MAX - 1, 2))
    assert log2.state.check(batch(INT32_MAX + 1)).is_error
    assert log2.state.check(batch(1)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log2.produce(batch(0)) == 2


def test_multiple_producers_are_independent():
    log = Log()
    log.produce(batch(0, pid=1))
    log.produce(batch(0, pid=2))
    log.produce(batch(1, pid=1))
    assert log.state.check(batch(1, pid=2)).is_ok
    assert log.state.check(batch(2, pid=1)).is_ok
    assert log.state.check(batch(0, pid=2)).base_offset == 1


def test_snapshot_round_trip():
    log = Log()
    for i in range(7):
        log.produce(batch(i, pid=1))
    log.produce(batch(0, 3, pid=2, epoch=4, max_timestamp=99))
    log.produce(batch(0, pid=3, is_transactional=True))
    data = log.state.snapshot()
    st = ProducerStateManager.from_snapshot(data)
    assert st.snapshot_offset == log.state.snapshot_offset == 11
    assert st.snapshot() == data
    assert st.check(batch(6, pid=1)).base_offset == 6
    assert st.check(batch(1, pid=1)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert st.check(batch(7, pid=1)).is_ok
    dup = st.check(batch(0, 3, pid=2, epoch=4))
    assert (dup.base_offset, dup.last_offset, dup.max_timestamp) == (7, 9, 99)
    assert st.check(batch(0, pid=2, epoch=3)).error_code == INVALID_PRODUCER_EPOCH
    assert st.first_unstable_offset() == 10
    assert ProducerStateManager.from_snapshot(ProducerStateManager().snapshot()).producers == {}


def test_snapshot_then_replay_later_batches():
    log = Log()
    log.produce(batch(0))
    snap = log.state.snapshot()
    log.produce(batch(1))
    log.produce(batch(2))
    st = ProducerStateManager.from_snapshot(snap)
    # replay only batches at or after snapshot_offset
    replay = [(batch(0), 0), (batch(1), 1), (batch(2), 2)]
    for h, off in replay:
        if off >= st.snapshot_offset:
            st.update(h, off, off)
    assert st.snapshot() == log.state.snapshot()


@pytest.mark.parametrize("mangle", [
    lambda d: b"",
    lambda d: d[:-1],
    lambda d: d[:10],
    lambda d: b"XXXX" + d[4:],
    lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:],
    lambda d: d + b"\x00",
])
def test_corrupt_snapshot_raises_value_error(mangle):
    log = Log()
    log.produce(batch(0, 2))
    log.produce(batch(2))
    with pytest.raises(ValueError):
        ProducerStateManager.from_snapshot(mangle(log.state.snapshot()))


def test_truncate_after():
    log = Log()
    for i in range(4):
        log.produce(batch(i, pid=1))          # offsets 0..3
    log.produce(batch(0, pid=2))              # offset 4
    log.produce(batch(4, pid=1))              # offset 5
    log.state.truncate_after(4)
    log.end = 4
    assert log.state.snapshot_offset == 4
    assert log.state.get(2) is None           # only batch gone -> producer dropped
    assert log.state.get(1).last_seq == 3
    assert log.state.check(batch(3, pid=1)).base_offset == 3
    assert log.state.check(batch(4, pid=1)).is_ok   # retry of truncated batch is appended again
    assert log.state.check(batch(5, pid=1)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.produce(batch(4, pid=1)) == 4
    log.state.truncate_after(0)
    assert len(log.state) == 0 and log.state.snapshot_offset == 0


def test_truncate_drops_epoch_bump():
    log = Log()
    log.produce(batch(0, epoch=0))
    log.produce(batch(0, epoch=1))            # offset 1, epoch bump
    log.state.truncate_after(1)
    # epoch-1 batch is gone; its previous batches were cleared by the bump,
    # so the producer is forgotten and accepts anything
    assert log.state.get(1000) is None
    assert log.state.check(batch(7, epoch=0)).is_ok


def test_forget_before():
    log = Log()
    log.produce(batch(0, pid=1))   # 0
    log.produce(batch(0, pid=2))   # 1
    log.produce(batch(1, pid=1))   # 2
    log.state.forget_before(2)
    assert log.state.get(2) is None
    assert log.state.get(1) is not None
    assert log.state.check(batch(9, pid=2)).is_ok
    log.state.forget_before(10)
    assert len(log.state) == 0
    assert log.state.snapshot_offset == 10


def test_transaction_state():
    log = Log()
    assert log.produce(batch(0, is_transactional=True)) == 0
    assert log.produce(batch(1, is_transactional=True)) == 1
    assert log.state.first_unstable_offset() == 0
    res = log.state.check(batch(2))
    assert res.error_code == INVALID_TXN_STATE
    marker = Hdr(base_sequence=-1, is_transactional=True, is_control=True)
    assert log.produce(marker) == 2
    assert log.state.first_unstable_offset() is None
    assert log.state.check(batch(2)).is_ok
    # marker truncated away -> transaction open again
    log.state.truncate_after(2)
    assert log.state.first_unstable_offset() == 0
    # fenced marker
    assert log.state.check(Hdr(producer_epoch=-2, base_sequence=-1, is_control=True,
                               is_transactional=True)).error_code == INVALID_PRODUCER_EPOCH


def test_check_batches_validates_set_in_order():
    st = ProducerStateManager()
    st.update(batch(0), 0, 0)
    assert st.check_batches([batch(1), batch(2, 2), batch(4)]).is_ok
    assert st.check_batches([batch(1), batch(3)]).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert st.check_batches([batch(0)]).is_duplicate
    assert st.check_batches([batch(1), batch(0, epoch=1), batch(1, epoch=1)]).is_ok
    assert st.check_batches([batch(1, epoch=1)]).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert st.get(1000).last_seq == 0   # no mutation


def test_remove_expired():
    st = ProducerStateManager()
    st.update(batch(0, pid=1, max_timestamp=1_000), 0, 0)
    st.update(batch(0, pid=2, max_timestamp=50_000), 1, 1)
    st.remove_expired(now_ms=60_000, expiration_ms=30_000)
    assert st.get(1) is None and st.get(2) is not None
