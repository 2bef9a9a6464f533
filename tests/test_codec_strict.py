"""The encoder's strictness (wire.codec): a misspelt or misplaced field fails where it is written.

Handlers return one plain dict for every version, so a field of another version is accepted and
dropped when it is ignorable or at its default; anything else is an EncodeError naming the
message, version, path and key.
"""
from __future__ import annotations

import importlib
import uuid

import pytest

from tests.test_admin_handlers import broker, call, create, new_topic  # noqa: F401 (fixture)
from wire.codec import decode, encode
from wire.errors import ErrorCode
from wire.primitives import EncodeError
from wire.schema.messages import MESSAGES
from wire.schema.model import in_range

PRODUCE, FETCH = 0, 1
list_offsets = importlib.import_module("kshim.net.handlers.02_list_offsets")


def produce_response(**partition: object) -> dict:
    return {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 7}, {"index": 1, **partition}]}]}


def test_misspelt_key_raises_naming_message_version_path_and_key():
    with pytest.raises(EncodeError) as e:
        encode(PRODUCE, 9, "response", produce_response(eror_code=3))
    assert str(e.value) == ("ProduceResponse v9: responses[0].partition_responses[1]: "
                            "unknown key 'eror_code' (did you mean 'error_code'?)")
    with pytest.raises(EncodeError, match=r"^FetchResponse v4: unknown key 'sesion_id'"):
        encode(FETCH, 4, "response", {"sesion_id": 0})


def test_key_of_another_version_is_accepted():
    # log_start_offset is v5+ (ignorable), session_id v7+ (not ignorable, but at its default 0)
    with_other = produce_response(error_code=6, log_start_offset=12)
    assert encode(PRODUCE, 3, "response", with_other) == encode(PRODUCE, 3, "response", produce_response(error_code=6))
    assert encode(FETCH, 4, "response", {"session_id": 0, "responses": []}) == \
        encode(FETCH, 4, "response", {"responses": []})
    decoded = decode(PRODUCE, 5, "response", encode(PRODUCE, 5, "response", with_other), exact=True)
    assert decoded.responses[0].partition_responses[1].log_start_offset == 12  # and written where it exists


def test_non_ignorable_field_set_in_a_version_lacking_it_raises():
    with pytest.raises(EncodeError) as e:
        encode(FETCH, 6, "response", {"session_id": 77})
    assert str(e.value).startswith("FetchResponse v6: 'session_id' = 77 is set, but this version lacks the field")
    element = {"partition_index": 3, "preferred_read_replica": 2}  # v11+, not ignorable
    with pytest.raises(EncodeError, match=r"^FetchResponse v10: responses\[0\]\.partitions\[1\]: "
                                          r"'preferred_read_replica' = 2"):
        encode(FETCH, 10, "response", {"responses": [{"topic": "t", "partitions": [{"partition_index": 0}, element]}]})
    # a struct of another version counts as default only when all its members are
    leader = {"leader_id": -1, "leader_epoch": -1}
    encode(PRODUCE, 9, "response", produce_response(current_leader=leader))
    with pytest.raises(EncodeError, match="'current_leader'"):
        encode(PRODUCE, 9, "response", produce_response(current_leader={**leader, "leader_epoch": 4}))


def test_ignorable_field_is_dropped_silently():
    # in the element, log_start_offset (v5+) is ignorable: v3 (Kafka 4's oldest) drops it
    dropped = encode(PRODUCE, 3, "response", produce_response(log_start_offset=99))
    assert dropped == encode(PRODUCE, 3, "response", produce_response())
    # a topic id in a version that names topics: FetchResponse's topic_id is ignorable
    assert encode(FETCH, 12, "response", {"responses": [{"topic": "t", "topic_id": uuid.uuid4(), "partitions": []}]}) \
        == encode(FETCH, 12, "response", {"responses": [{"topic": "t", "partitions": []}]})


def test_missing_array_element_key_raises_but_other_fields_default():
    with pytest.raises(EncodeError, match=r"^ProduceResponse v9: responses\[0\]\.partition_responses\[1\]: "
                                          r"missing key 'index'"):
        encode(PRODUCE, 9, "response", {"responses": [{"name": "t", "partition_responses": [{"index": 0}, {}]}]})
    with pytest.raises(EncodeError, match=r"^ProduceResponse v9: responses\[0\]: missing key 'name'"):
        encode(PRODUCE, 9, "response", {"responses": [{"partition_responses": []}]})
    body = decode(PRODUCE, 9, "response", encode(PRODUCE, 9, "response", produce_response()), exact=True)
    assert (body.responses[0].partition_responses[1].base_offset, body.throttle_time_ms) == (0, 0)


_KEY_VALUES = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "string": "k", "uuid": uuid.UUID(int=1)}


def _keys(fields, version):
    """The fields of an array element that must be present in this version (wire.codec's rule)."""
    from wire.codec import _is_key
    return [f for f in fields if in_range(version, f.versions) and not in_range(version, f.tagged) and _is_key(f)]


def _element_key_cases():
    """(api, kind, version, object without one key, that key) for every key of every element."""
    def walk(fields, version, wrap):
        for f in fields:
            if not in_range(version, f.versions) or in_range(version, f.tagged) or not f.fields:
                continue
            if f.type == "struct":
                yield from walk(f.fields, version, lambda inner, f=f: wrap({f.name: inner}))
                continue
            keys = _keys(f.fields, version)
            full = {k.name: _KEY_VALUES[k.type] for k in keys}
            for k in keys:
                yield wrap({f.name: [{n: v for n, v in full.items() if n != k.name}]}), k
            yield from walk(f.fields, version, lambda inner, f=f, full=full: wrap({f.name: [{**full, **inner}]}))

    for (api, kind), msg in MESSAGES.items():
        for version in range(msg.versions[0], msg.versions[1] + 1):
            for obj, key in walk(msg.fields, version, lambda inner: inner):
                yield api, kind, version, obj, key


def test_every_element_key_of_every_message_is_required():
    """The codec finds a missing key when the field's primitive cannot write the placeholder: true of
    every key type in every message, which this walks."""
    cases = list(_element_key_cases())
    assert len(cases) > 500
    assert {(key.type, in_range(version, key.nullable)) for _, _, version, _, key in cases} == {
        ("int8", False), ("int16", False), ("int32", False), ("string", False), ("string", True), ("uuid", False)}
    for api, kind, version, obj, key in cases:
        with pytest.raises(EncodeError, match=f"missing key '{key.name}'"):
            encode(api, version, kind, obj)


@pytest.mark.anyio
@pytest.mark.parametrize("version", range(1, 12))
async def test_list_offsets_answers_encode_in_every_version(broker, version):  # noqa: F811
    """v1-3 have no leader_epoch: the handler leaves it out rather than send a non-default one."""
    await create(broker, new_topic("lo", 1))
    resp = await call(broker, list_offsets, version, {"replica_id": -1, "topics": [
        {"name": "lo", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    p = resp.topics[0].partitions[0]
    assert (p.error_code, p.offset) == (0, 0)
    assert p.get("leader_epoch", None) == (broker.partition("lo", 0).leader_epoch if version >= 4 else None)


@pytest.mark.anyio
@pytest.mark.parametrize("version", [8, 9, 10, 11])
async def test_list_offsets_special_timestamps_by_version(broker, version):  # noqa: F811
    """-5 (latest tiered, v9+) and -6 (earliest pending upload, v11+): offset, timestamp and epoch -1
    with no tiered storage; in an older version UNSUPPORTED_VERSION; -7 is no special timestamp."""
    await create(broker, new_topic("lo-special", 1))
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "lo-special", "partitions": [
        {"partition_index": 0, "timestamp": -5}, {"partition_index": 0, "timestamp": -6},
        {"partition_index": 0, "timestamp": -7}, {"partition_index": 0, "timestamp": -4}]}]}
    if version >= 10:
        body["timeout_ms"] = 1000
    parts = (await call(broker, list_offsets, version, body)).topics[0].partitions
    got = [(p.error_code, p.offset, p.timestamp, p.leader_epoch) for p in parts]
    none = (0, -1, -1, -1)
    assert got[0] == (none if version >= 9 else (ErrorCode.UNSUPPORTED_VERSION, -1, -1, -1))
    assert got[1] == (none if version >= 11 else (ErrorCode.UNSUPPORTED_VERSION, -1, -1, -1))
    assert got[2] == (ErrorCode.INVALID_REQUEST, -1, -1, -1)
    assert got[3][:3] == (0, 0, -1)  # -4: the log start offset
