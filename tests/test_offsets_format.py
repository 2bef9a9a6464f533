"""The committed-offset record format of `__consumer_offsets` (kshim/coordinator/groups/offsets_format.py):
the bytes a commit writes are the documented layout, they read back as written, and anything else
(another kind of key, a truncated record, bad UTF-8) reads as None instead of raising."""
from __future__ import annotations

import struct

import pytest

from kshim.coordinator.groups.offsets_format import OffsetEntry, decode_key, decode_value, encode_key, encode_value


def test_the_layout_is_the_documented_one():
    assert encode_key("g", "tópic", 7) == struct.pack(">HH1sH6si", 1, 1, b"g", 6, "tópic".encode(), 7)
    value = encode_value(OffsetEntry(42, 5, "meta", 1_700_000_000_000))
    assert value == struct.pack(">HqiH4sq", 1, 42, 5, 4, b"meta", 1_700_000_000_000)


@pytest.mark.parametrize("group,topic,partition", [("", "", 0), ("grp", "t" * 300, 2**31 - 1), ("é", "x", -1)])
def test_keys_and_values_read_back(group, topic, partition):
    assert decode_key(encode_key(group, topic, partition)) == (group, topic, partition)
    entry = decode_value(encode_value(OffsetEntry(-1, -1, "", -(2**63))))
    assert entry is not None and (entry.offset, entry.leader_epoch, entry.metadata, entry.commit_timestamp) == \
        (-1, -1, "", -(2**63))


def test_other_and_broken_records_read_as_none():
    key = encode_key("group", "topic", 3)
    value = encode_value(OffsetEntry(1, 0, "m", 0))
    for cut in range(len(key)):
        assert decode_key(key[:cut]) is None
    for cut in range(len(value)):
        assert decode_value(value[:cut]) is None
    assert decode_key(b"\x00\x02" + key[2:]) is None  # a key of another version (group metadata)
    assert decode_value(b"\x00\x02" + value[2:]) is None
    assert decode_key(b"\x00\x01\x00\x01\xff" + key[5:]) is None  # not UTF-8


def test_strings_past_an_int16_length_are_refused():
    with pytest.raises(ValueError):
        encode_key("g" * 70_000, "t", 0)
