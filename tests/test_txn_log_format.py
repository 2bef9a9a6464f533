"""The transaction state records of `__transaction_state` (kshim.coordinator.transactions.log_format):
the struct encoder writes exactly what the construct declaration describes, and decode reads it back."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from kshim.coordinator.transactions import log_format
from kshim.coordinator.transactions.state import TxnMetadata, TxnState
from wire import records

pytestmark = pytest.mark.unit

int16 = st.integers(-(1 << 15), (1 << 15) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
names = st.text(max_size=40)

metas = st.builds(
    TxnMetadata, transactional_id=names, producer_id=int64, producer_epoch=int16, timeout_ms=int32,
    state=st.sampled_from(list(TxnState)), partitions=st.frozensets(st.tuples(names, int32), max_size=8),
    start_ms=int64, update_ms=int64, last_producer_id=int64, last_epoch=int16, tv2=st.booleans(),
    next_producer_id=int64)


@settings(max_examples=300, deadline=None)
@given(metas)
def test_the_struct_encoder_writes_the_declared_format_and_decode_reads_it(meta):
    key, value = log_format.encode(meta)
    assert (key, value) == log_format.encode_construct(meta)
    tid, back = log_format.decode(key, value)
    assert tid == meta.transactional_id
    fields = ("producer_id", "producer_epoch", "timeout_ms", "state", "partitions", "start_ms", "update_ms",
              "last_producer_id", "last_epoch", "tv2", "next_producer_id")
    assert [getattr(back, f) for f in fields] == [getattr(meta, f) for f in fields]


def test_a_tombstone_and_a_foreign_key_decode_as_such():
    key, _ = log_format.encode(TxnMetadata("t", 1, 0, 1000))
    assert log_format.decode(key, None) == ("t", None)
    assert log_format.decode(b"\x00\x09junk", b"") is None


@settings(max_examples=300, deadline=None)
@given(metas, st.integers(0, (1 << 62)))
def test_the_batch_encoder_builds_what_wire_records_builds(meta, timestamp):
    key, value = log_format.encode(meta)
    batch = log_format.encode_batch(meta, timestamp)
    assert batch == records.encode_batch([(key, value, (), timestamp)])
    [record] = records.decode_records(batch)
    assert (bytes(record.key), bytes(record.value)) == (key, value)
