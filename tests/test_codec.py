"""Tests of the message codec (`wire.codec`) and the generated schema (`wire.schema.messages`).

- the committed `messages.py` is exactly what the generator makes from Kafka's JSON specs, and it
  agrees with those specs as read by a small independent reader here;
- every version of every request and response round-trips with schema-driven pseudo-random values;
- bytes made by an independent encoder (kafka-python) decode, and kafka-python decodes ours;
- decoding is bounded and fails only with `DecodeError`, whatever the input.
"""
from __future__ import annotations

import io
import json
import random
import time
import uuid
from pathlib import Path

import pytest

from wire import codec
from wire.codec import decode, encode
from wire.primitives import DecodeError, encode_uvarint, read_uvarint
from wire.schema.messages import MESSAGES
from wire.schema.model import MAX_VERSION, MISSING, in_range

ROOT = Path(__file__).resolve().parents[1]
SPEC_DIR = ROOT.parent / "shared" / "kafka-protocol" / "message-4.3"
needs_specs = pytest.mark.skipif(
    not SPEC_DIR.is_dir(), reason=f"needs ../shared: Kafka JSON message specs not found at {SPEC_DIR}"
)

ALL_VERSIONS = [
    (api, kind, v)
    for (api, kind), m in sorted(MESSAGES.items())
    for v in range(m.versions[0], m.versions[1] + 1)
]


def _flexible(api: int, kind: str, version: int) -> bool:
    return in_range(version, MESSAGES[(api, kind)].flexible)


def _plain(obj):
    """Decoded containers and lists as plain dicts and lists, for == against expected values."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------------
# Schema: the committed module is what the generator makes, and it agrees with the JSON specs.
# --------------------------------------------------------------------------------------------

def _strip_comments(text: str) -> str:
    """Drop // comments anywhere outside JSON strings (a scanner, unlike the generator's regex)."""
    out: list[str] = []
    i, n, in_str = 0, len(text), False
    while i < n:
        ch = text[i]
        if in_str:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            out.append(ch)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _versions(s: str | None) -> tuple[int, int]:
    if s is None or s == "none":
        return (1, 0)
    s = s.strip()
    if s.endswith("+"):
        return (int(s[:-1]), MAX_VERSION)
    lo, sep, hi = s.partition("-")
    return (int(lo), int(hi)) if sep else (int(lo), int(lo))


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            prev, nxt = name[i - 1], name[i + 1:i + 2]
            if prev.islower() or prev.isdigit() or (prev.isupper() and nxt.islower()):
                out.append("_")
        out.append(ch.lower())
    return "".join(out)


_JSON_SCALARS = {"int8", "int16", "int32", "int64", "uint16", "float64", "bool", "string", "bytes",
                 "records", "uuid"}


def _expected_default(raw, kind: str):
    if raw is None:
        return MISSING
    if isinstance(raw, str) and raw.strip() == "null":
        return None
    if kind == "bool":
        return raw if isinstance(raw, bool) else raw.strip().lower() == "true"
    if kind in ("int8", "int16", "int32", "int64", "uint16"):
        return raw if isinstance(raw, int) else int(raw.strip(), 0)
    return raw if kind not in ("float64",) else float(raw)


def _json_field(f: dict, common: dict[str, list]) -> tuple:
    t = f["type"]
    sub = f.get("fields") or []
    if t.startswith("[]"):
        elem = t[2:]
        kind = t if elem in _JSON_SCALARS else "[]struct"
        if kind == "[]struct" and not sub:
            sub = common[elem]
    elif t in _JSON_SCALARS:
        kind = t
    else:
        kind = "struct"
        sub = sub or common[t]
    tagged = _versions(f.get("taggedVersions"))
    return (
        _snake(f["name"]), kind, _versions(f.get("versions")), _versions(f.get("nullableVersions")),
        tagged, None if f.get("tag") is None else int(f["tag"]), _expected_default(f.get("default"), kind),
        tuple(_json_field(s, common) for s in sub),
        f.get("ignorable", False), f.get("mapKey", False), f.get("entityType"),
    )


def _model_field(f) -> tuple:
    return (f.name, f.type, f.versions, f.nullable, f.tagged, f.tag, f.default,
            tuple(_model_field(s) for s in f.fields), f.ignorable, f.map_key, f.entity_type)


def _read_specs() -> dict:
    specs = {}
    for path in sorted(SPEC_DIR.glob("*.json")):
        spec = json.loads(_strip_comments(path.read_text(encoding="utf-8")))
        if spec.get("type") in ("request", "response") and "apiKey" in spec and spec.get("validVersions") != "none":
            specs[(spec["apiKey"], spec["type"])] = spec
    return specs


@needs_specs
def test_generated_module_is_up_to_date():
    from wire.schema.generate import generate

    committed = (ROOT / "wire" / "schema" / "messages.py").read_text(encoding="utf-8")
    assert generate(SPEC_DIR) == committed, (
        "wire/schema/messages.py is stale: run `python -m wire.schema.generate ../shared/kafka-protocol/message-4.3`"
    )


@needs_specs
def test_schema_agrees_with_json_specs():
    specs = _read_specs()
    assert set(specs) == set(MESSAGES)
    for key, spec in specs.items():
        m = MESSAGES[key]
        assert (m.name, m.api_key, m.kind) == (spec["name"], key[0], key[1])
        assert m.versions == _versions(spec["validVersions"]), m.name
        assert m.flexible == _versions(spec.get("flexibleVersions")), m.name
        common = {s["name"]: s.get("fields", []) for s in spec.get("commonStructs", [])}
        expected = tuple(_json_field(f, common) for f in spec["fields"])
        actual = tuple(_model_field(f) for f in m.fields)
        assert actual == expected, m.name


def test_schema_sanity():
    """Facts the codec relies on, whatever the spec version: tags unique, tagged only when flexible."""
    def walk(fields, msg):
        tags = [f.tag for f in fields if f.tag is not None]
        assert len(tags) == len(set(tags)), msg.name
        for f in fields:
            assert f.versions[0] <= f.versions[1] or f.versions == (1, 0), (msg.name, f.name)
            if f.tag is not None:
                assert msg.flexible[0] <= f.tagged[0], (msg.name, f.name)
            assert bool(f.fields) == (f.type in ("struct", "[]struct")), (msg.name, f.name)
            walk(f.fields, msg)

    assert len(MESSAGES) > 100
    for m in MESSAGES.values():
        assert m.kind in ("request", "response")
        walk(m.fields, m)


# --------------------------------------------------------------------------------------------
# Round trip of every version of every message.
# --------------------------------------------------------------------------------------------

_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_STRINGS = ["", "t", "topic-0", "__consumer_offsets", "ünïcødé", "主题-🚀", "é" * 40, "a.b_c-D"]
_ZERO = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0, "bool": False,
         "uuid": uuid.UUID(int=0), "string": "", "bytes": b""}


def _gen_scalar(rng: random.Random, t: str):
    if t in _INT_RANGES:
        bits = _INT_RANGES[t]
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return rng.choice([lo, hi, 0, -1, 1, rng.randint(lo, hi), rng.randint(max(lo, -1000), min(hi, 1000))])
    if t == "uint16":
        return rng.choice([0, 65535, rng.randint(0, 65535)])
    if t == "float64":
        return rng.choice([0.0, -1.5, 1e300, rng.uniform(-1e6, 1e6)])
    if t == "bool":
        return rng.random() < 0.5
    if t == "uuid":
        return rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))])
    if t == "string":
        if rng.random() < 0.5:
            return rng.choice(_STRINGS)
        return "".join(rng.choice("abcXYZ09-_.ßø世界🎉") for _ in range(rng.randint(0, 12)))
    if t in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 24))
    raise AssertionError(f"unknown scalar type {t}")


def _default_of(f, version: int):
    """What decode yields for an absent tagged field."""
    nullable = in_range(version, f.nullable)
    if f.type == "struct":
        return None  # the codec's convention: an absent tagged struct decodes as None
    if f.type.startswith("[]"):
        return None if nullable and f.default is None else []
    if f.default is not MISSING:
        return f.default
    if f.type == "records":
        return None if nullable else b""
    return _ZERO[f.type]


def _gen_field(rng: random.Random, f, version: int, flexible: bool, depth: int):
    """(value to encode, value expected from decode) for one field."""
    if in_range(version, f.nullable) and rng.random() < 0.25:
        return None, None
    t = f.type
    if t == "struct":
        return _gen_struct(rng, f.fields, version, flexible, depth + 1)
    if t.startswith("[]"):
        n = rng.randint(0, 3 if depth < 2 else 1)
        if t == "[]struct":
            pairs = [_gen_struct(rng, f.fields, version, flexible, depth + 1) for _ in range(n)]
            return [p[0] for p in pairs], [p[1] for p in pairs]
        items = [_gen_scalar(rng, t[2:]) for _ in range(n)]
        return items, list(items)
    v = _gen_scalar(rng, t)
    return v, v


def _gen_struct(rng: random.Random, fields, version: int, flexible: bool, depth: int = 0):
    value, expected = {}, {}
    for f in fields:
        if not in_range(version, f.versions):
            if rng.random() < 0.1:  # another version's field is dropped: any value if ignorable, else its default
                value[f.name] = (_gen_field(rng, f, f.versions[0], flexible, depth)[0] if f.ignorable
                                 else _default_of(f, f.versions[0]))
            continue
        if flexible and in_range(version, f.tagged):
            r = rng.random()
            if r < 0.3:  # absent: decode fills the default
                expected[f.name] = _default_of(f, version)
                continue
            if r < 0.5 and f.type != "struct":  # explicitly the default: not written, same result
                value[f.name] = expected[f.name] = _default_of(f, version)
                continue
        value[f.name], expected[f.name] = _gen_field(rng, f, version, flexible, depth)
    return value, expected


SAMPLES_PER_VERSION = 4


@pytest.mark.parametrize("api,kind,version", ALL_VERSIONS, ids=[f"{a}-{k}-v{v}" for a, k, v in ALL_VERSIONS])
def test_round_trip(api, kind, version):
    msg = MESSAGES[(api, kind)]
    flexible = _flexible(api, kind, version)
    for i in range(SAMPLES_PER_VERSION):
        rng = random.Random(f"{api}/{kind}/{version}/{i}")
        value, expected = _gen_struct(rng, msg.fields, version, flexible)
        data = encode(api, version, kind, value)
        decoded = decode(api, version, kind, data, exact=True)
        assert _plain(decoded) == expected, f"{msg.name} v{version} sample {i}"
        # the encoding is canonical: what we decode encodes to the same bytes
        assert encode(api, version, kind, decoded) == data
        if data:
            with pytest.raises(DecodeError):
                decode(api, version, kind, data + b"\x00", exact=True)


@pytest.mark.parametrize("api,kind,version", ALL_VERSIONS, ids=[f"{a}-{k}-v{v}" for a, k, v in ALL_VERSIONS])
def test_empty_object_encodes_to_defaults(api, kind, version):
    """Building from {} fills every field with its default; the result decodes exactly."""
    data = encode(api, version, kind, {})
    decoded = decode(api, version, kind, data, exact=True)
    for f in MESSAGES[(api, kind)].fields:
        if in_range(version, f.versions) and f.type not in ("struct",):
            expected = _default_of(f, version)
            if f.type.startswith("[]") and not (in_range(version, f.nullable) and f.default is None):
                expected = []
            assert decoded[f.name] == expected, f.name


def test_round_trip_covers_tagged_and_null_and_non_ascii():
    """The generator above really exercises the interesting cases (guards against a silent no-op)."""
    seen = {"tagged_set": 0, "null": 0, "non_ascii": 0, "nested": 0}

    def walk(fields, value, version, flexible):
        for f in fields:
            if f.name not in value or not in_range(version, f.versions):
                continue
            v = value[f.name]
            if flexible and in_range(version, f.tagged) and v != _default_of(f, version):
                seen["tagged_set"] += 1
            if v is None:
                seen["null"] += 1
            if isinstance(v, str) and not v.isascii():
                seen["non_ascii"] += 1
            if f.type == "struct" and v is not None:
                seen["nested"] += 1
                walk(f.fields, v, version, flexible)
            if f.type == "[]struct" and v:
                seen["nested"] += 1
                for item in v:
                    walk(f.fields, item, version, flexible)

    for api, kind, version in ALL_VERSIONS:
        msg = MESSAGES[(api, kind)]
        flexible = _flexible(api, kind, version)
        for i in range(SAMPLES_PER_VERSION):
            value, _ = _gen_struct(random.Random(f"{api}/{kind}/{version}/{i}"), msg.fields, version, flexible)
            walk(msg.fields, value, version, flexible)
    assert all(n > 50 for n in seen.values()), seen


def test_nullable_struct_uses_marker_byte():
    """Nullable struct fields carry an int8 marker: -1 for null, 1 before a present struct."""
    body = encode(75, 0, "request", {"topics": [], "response_partition_limit": 7, "cursor": None})
    assert body == b"\x01" + b"\x00\x00\x00\x07" + b"\xff" + b"\x00"
    body = encode(75, 0, "request", {"topics": [], "cursor": {"topic_name": "t", "partition_index": 3}})
    assert body == b"\x01" + b"\x00\x00\x07\xd0" + b"\x01" + b"\x02t" + b"\x00\x00\x00\x03\x00" + b"\x00"
    assert decode(75, 0, "request", body, exact=True).cursor == {"topic_name": "t", "partition_index": 3}


def test_unknown_tags_are_skipped_and_known_tags_in_any_order():
    # ApiVersions v3 response: error 0, no api keys, throttle 0, then tags 3 (zk ready), 99 (unknown), 1.
    tags = [(3, b"\x01"), (99, b"\xde\xad"), (1, b"\x00\x00\x00\x00\x00\x00\x00\x05")]
    body = b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00" + encode_uvarint(len(tags))
    for tag, raw in tags:
        body += encode_uvarint(tag) + encode_uvarint(len(raw)) + raw
    d = decode(18, 3, "response", body, exact=True)
    assert d.zk_migration_ready is True and d.finalized_features_epoch == 5
    assert d.supported_features == [] and d.finalized_features == []


def test_unsupported_version_and_api():
    with pytest.raises(codec.UnsupportedVersion):
        codec.codec(18, 99, "request")
    with pytest.raises(codec.UnsupportedVersion):
        codec.codec(9999, 0, "request")


# --------------------------------------------------------------------------------------------
# Interoperability with an independent implementation: kafka-python.
# --------------------------------------------------------------------------------------------

# Plain imports: kafka-python is a test dependency, and if it moves these internals the tests
# below must fail loudly rather than be skipped.
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse  # noqa: E402
from kafka.protocol.admin import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse  # noqa: E402
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest  # noqa: E402
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse  # noqa: E402
from kafka.protocol.metadata import MetadataRequest, MetadataResponse  # noqa: E402
from kafka.protocol.old import admin as old_admin  # noqa: E402
from kafka.protocol.old import api_versions as old_api_versions  # noqa: E402
from kafka.protocol.old import fetch as old_fetch  # noqa: E402
from kafka.protocol.old import list_offsets as old_list_offsets  # noqa: E402
from kafka.protocol.old import metadata as old_metadata  # noqa: E402
from kafka.protocol.old import produce as old_produce  # noqa: E402
from kafka.protocol.producer import ProduceRequest, ProduceResponse  # noqa: E402

U1 = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
RECORDS = bytes(range(61)) + "ünï".encode()


def _kp_bytes(obj) -> bytes:
    return bytes(obj.encode())


# ---- requests: kafka-python encodes, we decode --------------------------------------------

def test_kp_api_versions_requests():
    assert decode(18, 0, "request", _kp_bytes(old_api_versions.ApiVersionsRequest_v0()), exact=True) == {}
    for v, req in [
        (3, old_api_versions.ApiVersionsRequest_v3(client_software_name="kafka-pythön", client_software_version="3.0")),
        (3, ApiVersionsRequest[3](client_software_name="kafka-pythön", client_software_version="3.0")),
        (4, ApiVersionsRequest[4](client_software_name="kafka-pythön", client_software_version="3.0")),
    ]:
        d = decode(18, v, "request", _kp_bytes(req), exact=True)
        assert d == {"client_software_name": "kafka-pythön", "client_software_version": "3.0"}


def test_kp_metadata_requests():
    d = decode(3, 0, "request", _kp_bytes(old_metadata.MetadataRequest_v0(topics=["a", "主题"])), exact=True)
    assert d.topics == [{"name": "a"}, {"name": "主题"}]
    d = decode(3, 1, "request", _kp_bytes(old_metadata.MetadataRequest_v1(topics=None)), exact=True)
    assert d.topics is None
    req = old_metadata.MetadataRequest_v8(topics=["x"], allow_auto_topic_creation=False,
                                          include_cluster_authorized_operations=True,
                                          include_topic_authorized_operations=False)
    d = decode(3, 8, "request", _kp_bytes(req), exact=True)
    assert d == {"topics": [{"name": "x"}], "allow_auto_topic_creation": False,
                 "include_cluster_authorized_operations": True, "include_topic_authorized_operations": False}

    T = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest[9](topics=[T(name="t-ü"), T(name="b")], allow_auto_topic_creation=True,
                             include_cluster_authorized_operations=True, include_topic_authorized_operations=True)
    d = decode(3, 9, "request", _kp_bytes(req), exact=True)
    assert d == {"topics": [{"name": "t-ü"}, {"name": "b"}], "allow_auto_topic_creation": True,
                 "include_cluster_authorized_operations": True, "include_topic_authorized_operations": True}

    req = MetadataRequest[12](topics=[T(topic_id=U1, name=None), T(name="x")], allow_auto_topic_creation=False,
                              include_topic_authorized_operations=True)
    d = decode(3, 12, "request", _kp_bytes(req), exact=True)
    assert d.topics[0] == {"topic_id": U1, "name": None}
    assert d.topics[1].name == "x" and d.topics[1].topic_id == uuid.UUID(int=0)
    assert d.allow_auto_topic_creation is False and d.include_topic_authorized_operations is True
    d = decode(3, 12, "request", _kp_bytes(MetadataRequest[12](topics=None)), exact=True)
    assert d.topics is None


def _produce_topics(cls):
    TD = cls.TopicProduceData
    PD = TD.PartitionProduceData
    return [TD(name="t1", partition_data=[PD(index=0, records=RECORDS), PD(index=7, records=None)]),
            TD(name="ü", partition_data=[])]


def test_kp_produce_requests():
    req = old_produce.ProduceRequest_v3(transactional_id=None, required_acks=-1, timeout=1500,
                                        topics=[("t1", [(0, RECORDS), (3, b"")])])
    d = decode(0, 3, "request", _kp_bytes(req), exact=True)
    assert d == {"transactional_id": None, "acks": -1, "timeout_ms": 1500,
                 "topic_data": [{"name": "t1", "partition_data": [{"index": 0, "records": RECORDS},
                                                                   {"index": 3, "records": b""}]}]}
    for v in (9, 11):  # flexible
        req = ProduceRequest[v](transactional_id="tx-ö", acks=1, timeout_ms=30000, topic_data=_produce_topics(ProduceRequest))
        d = decode(0, v, "request", _kp_bytes(req), exact=True)
        assert d.transactional_id == "tx-ö" and d.acks == 1 and d.timeout_ms == 30000
        assert _plain(d.topic_data) == [
            {"name": "t1", "partition_data": [{"index": 0, "records": RECORDS}, {"index": 7, "records": None}]},
            {"name": "ü", "partition_data": []},
        ]


def test_kp_fetch_requests():
    req = old_fetch.FetchRequest_v4(replica_id=-1, max_wait_time=500, min_bytes=1, max_bytes=52428800,
                                    isolation_level=1, topics=[("t", [(0, 42, 1048576), (1, 0, 10)])])
    d = decode(1, 4, "request", _kp_bytes(req), exact=True)
    assert d.replica_id == -1 and d.max_wait_ms == 500 and d.isolation_level == 1
    assert _plain(d.topics) == [{"topic": "t", "partitions": [
        {"partition": 0, "fetch_offset": 42, "partition_max_bytes": 1048576},
        {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 10}]}]

    FT, FP, FG = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition, FetchRequest.ForgottenTopic
    req = FetchRequest[12](
        cluster_id="clüster", replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1000, isolation_level=0,
        session_id=5, session_epoch=-1,
        topics=[FT(topic="t", partitions=[FP(partition=2, current_leader_epoch=4, fetch_offset=99,
                                             last_fetched_epoch=3, log_start_offset=-1, partition_max_bytes=512)])],
        forgotten_topics_data=[FG(topic="old", partitions=[1, 2])], rack_id="rack-1")
    d = decode(1, 12, "request", _kp_bytes(req), exact=True)
    assert d.cluster_id == "clüster"
    assert (d.replica_id, d.max_wait_ms, d.session_id, d.session_epoch, d.rack_id) == (-1, 100, 5, -1, "rack-1")
    assert _plain(d.topics) == [{"topic": "t", "partitions": [
        {"partition": 2, "current_leader_epoch": 4, "fetch_offset": 99, "last_fetched_epoch": 3,
         "log_start_offset": -1, "partition_max_bytes": 512}]}]
    assert _plain(d.forgotten_topics_data) == [{"topic": "old", "partitions": [1, 2]}]

    # v12 without the tagged cluster id: decode fills the default (null)
    req = FetchRequest[12](replica_id=-1, max_wait_ms=1, min_bytes=1, max_bytes=1, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[], rack_id="")
    assert decode(1, 12, "request", _kp_bytes(req), exact=True).cluster_id is None

    # v17: topic ids, tagged replica state (struct) and tagged replica directory id
    dir_id = uuid.UUID(int=12345)
    req = FetchRequest[17](
        replica_state=FetchRequest.ReplicaState(replica_id=3, replica_epoch=77), max_wait_ms=1, min_bytes=1,
        max_bytes=1, isolation_level=0, session_id=0, session_epoch=-1,
        topics=[FT(topic_id=U1, partitions=[FP(partition=0, current_leader_epoch=-1, fetch_offset=5,
                                                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=9,
                                                replica_directory_id=dir_id)])],
        forgotten_topics_data=[FG(topic_id=U1, partitions=[])], rack_id="")
    d = decode(1, 17, "request", _kp_bytes(req), exact=True)
    assert d.replica_state == {"replica_id": 3, "replica_epoch": 77}
    assert d.topics[0].topic_id == U1 and d.topics[0].partitions[0].replica_directory_id == dir_id
    assert d.forgotten_topics_data == [{"topic_id": U1, "partitions": []}]


def test_kp_list_offsets_requests():
    req = old_list_offsets.ListOffsetsRequest_v1(replica_id=-1, topics=[("t", [(0, -1), (1, -2)])])
    d = decode(2, 1, "request", _kp_bytes(req), exact=True)
    assert _plain(d) == {"replica_id": -1, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "timestamp": -1}, {"partition_index": 1, "timestamp": -2}]}]}

    LT = ListOffsetsRequest.ListOffsetsTopic
    LP = LT.ListOffsetsPartition
    req = ListOffsetsRequest[6](replica_id=-1, isolation_level=1, topics=[
        LT(name="ü", partitions=[LP(partition_index=4, current_leader_epoch=2, timestamp=1700000000000)])])
    d = decode(2, 6, "request", _kp_bytes(req), exact=True)
    assert _plain(d) == {"replica_id": -1, "isolation_level": 1, "topics": [{"name": "ü", "partitions": [
        {"partition_index": 4, "current_leader_epoch": 2, "timestamp": 1700000000000}]}]}


def test_kp_create_topics_requests():
    req = old_admin.CreateTopicsRequest_v3(
        create_topic_requests=[("t", 3, 2, [], [("cleanup.policy", "compact"), ("x", None)])],
        timeout=5000, validate_only=True)
    d = decode(19, 3, "request", _kp_bytes(req), exact=True)
    assert _plain(d) == {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 2, "assignments": [],
                                     "configs": [{"name": "cleanup.policy", "value": "compact"},
                                                 {"name": "x", "value": None}]}],
                         "timeout_ms": 5000, "validate_only": True}

    CT = CreateTopicsRequest.CreatableTopic
    RA, TC = CT.CreatableReplicaAssignment, CT.CreatableTopicConfig
    req = CreateTopicsRequest[5](topics=[
        CT(name="tö", num_partitions=-1, replication_factor=-1,
           assignments=[RA(partition_index=0, broker_ids=[1, 2, 3])],
           configs=[TC(name="retention.ms", value="1000"), TC(name="n", value=None)])],
        timeout_ms=60000, validate_only=False)
    d = decode(19, 5, "request", _kp_bytes(req), exact=True)
    assert _plain(d) == {"topics": [{"name": "tö", "num_partitions": -1, "replication_factor": -1,
                                     "assignments": [{"partition_index": 0, "broker_ids": [1, 2, 3]}],
                                     "configs": [{"name": "retention.ms", "value": "1000"},
                                                 {"name": "n", "value": None}]}],
                         "timeout_ms": 60000, "validate_only": False}


def test_kp_describe_topic_partitions_nullable_struct():
    for cursor in (None, DescribeTopicPartitionsRequest.Cursor(topic_name="c", partition_index=9)):
        req = DescribeTopicPartitionsRequest[0](topics=[DescribeTopicPartitionsRequest.TopicRequest(name="a")],
                                                response_partition_limit=100, cursor=cursor)
        d = decode(75, 0, "request", _kp_bytes(req), exact=True)
        assert d.response_partition_limit == 100 and d.topics == [{"name": "a"}]
        assert d.cursor == (None if cursor is None else {"topic_name": "c", "partition_index": 9})


# ---- responses: we encode, kafka-python decodes --------------------------------------------

def test_kp_decodes_api_versions_responses():
    keys = [{"api_key": 0, "min_version": 3, "max_version": 11}, {"api_key": 18, "min_version": 0, "max_version": 4}]
    r = old_api_versions.ApiVersionsResponse_v0.decode(encode(18, 0, "response", {"error_code": 0, "api_keys": keys}))
    assert r.error_code == 0 and [tuple(k) for k in r.api_keys] == [(0, 3, 11), (18, 0, 4)]

    body = encode(18, 3, "response", {
        "error_code": 0, "api_keys": keys, "throttle_time_ms": 12,
        "supported_features": [{"name": "metadata.version", "min_version": 1, "max_version": 20}],
        "finalized_features_epoch": 7,
        "finalized_features": [{"name": "metadata.version", "max_version_level": 20, "min_version_level": 20}],
        "zk_migration_ready": True,
    })
    r = ApiVersionsResponse[3].decode(body)
    assert r.error_code == 0 and r.throttle_time_ms == 12
    assert [(k.api_key, k.min_version, k.max_version) for k in r.api_keys] == [(0, 3, 11), (18, 0, 4)]
    assert [(f.name, f.min_version, f.max_version) for f in r.supported_features] == [("metadata.version", 1, 20)]
    assert r.finalized_features_epoch == 7 and r.zk_migration_ready is True
    assert [(f.name, f.max_version_level) for f in r.finalized_features] == [("metadata.version", 20)]
    r = old_api_versions.ApiVersionsResponse_v3.decode(encode(18, 3, "response", {"api_keys": keys}))
    assert r.error_code == 0 and len(r.api_keys) == 2


def _metadata_response(version: int) -> dict:
    return {
        "throttle_time_ms": 5,
        "brokers": [{"node_id": 1, "host": "hôst-1", "port": 9092, "rack": None},
                    {"node_id": 2, "host": "h2", "port": 9093, "rack": "r2"}],
        "cluster_id": "clüster-id", "controller_id": 1,
        "topics": [{"error_code": 0, "name": "t-ü", "topic_id": U1, "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 4,
                                    "replica_nodes": [1, 2], "isr_nodes": [1], "offline_replicas": [2]}],
                    "topic_authorized_operations": -2147483648}],
    }


def test_kp_decodes_metadata_responses():
    r = old_metadata.MetadataResponse_v1.decode(encode(3, 1, "response", _metadata_response(1)))
    assert [tuple(b) for b in r.brokers] == [(1, "hôst-1", 9092, None), (2, "h2", 9093, "r2")]
    assert r.controller_id == 1
    (t,) = r.topics
    assert t[0] == 0 and t[1] == "t-ü" and t[2] is False
    assert [tuple(p) for p in t[3]] == [(0, 0, 1, [1, 2], [1])]

    for v in (9, 12):
        r = MetadataResponse[v].decode(encode(3, v, "response", _metadata_response(v)))
        assert r.throttle_time_ms == 5 and r.cluster_id == "clüster-id" and r.controller_id == 1
        assert [(b.node_id, b.host, b.port, b.rack) for b in r.brokers] == [(1, "hôst-1", 9092, None), (2, "h2", 9093, "r2")]
        (t,) = r.topics
        assert (t.error_code, t.name, t.is_internal) == (0, "t-ü", False)
        if v >= 10:
            assert t.topic_id == U1
        (p,) = t.partitions
        assert (p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes),
                list(p.offline_replicas)) == (0, 1, 4, [1, 2], [1], [2])


def _produce_response(version: int) -> dict:
    return {
        "responses": [{"name": "t1", "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 1234567890123, "log_append_time_ms": -1,
             "log_start_offset": 0, "record_errors": [{"batch_index": 2, "batch_index_error_message": "bäd"}],
             "error_message": None},
            {"index": 1, "error_code": 6, "base_offset": -1, "error_message": "NOT_LEADER",
             "current_leader": {"leader_id": 3, "leader_epoch": 9} if version >= 10 else None},
        ]}],
        "throttle_time_ms": 0,
        # not ignorable, as current_leader: Kafka (and the codec) refuse them in the versions before 10
        "node_endpoints": [{"node_id": 3, "host": "b3", "port": 9094, "rack": None}] if version >= 10 else [],
    }


def test_kp_decodes_produce_responses():
    r = old_produce.ProduceResponse_v5.decode(encode(0, 5, "response", _produce_response(5)))
    (topic,) = r.topics
    assert topic[0] == "t1"
    assert [tuple(p) for p in topic[1]] == [(0, 0, 1234567890123, -1, 0), (1, 6, -1, -1, -1)]

    for v in (9, 10, 11):
        r = ProduceResponse[v].decode(encode(0, v, "response", _produce_response(v)))
        (topic,) = r.responses
        p0, p1 = topic.partition_responses
        assert (p0.index, p0.base_offset, p0.error_message) == (0, 1234567890123, None)
        assert [(e.batch_index, e.batch_index_error_message) for e in p0.record_errors] == [(2, "bäd")]
        assert (p1.index, p1.error_code, p1.error_message) == (1, 6, "NOT_LEADER")
        if v >= 10:
            assert (p1.current_leader.leader_id, p1.current_leader.leader_epoch) == (3, 9)
            assert [(n.node_id, n.host, n.port, n.rack) for n in r.node_endpoints] == [(3, "b3", 9094, None)]


def _fetch_response(version: int) -> dict:
    return {
        # session_id, preferred_read_replica and current_leader are not ignorable: set only where they exist
        "throttle_time_ms": 1, "error_code": 0, "session_id": 77 if version >= 7 else 0,
        "responses": [{"topic": "t", "topic_id": U1, "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 100, "last_stable_offset": 90,
             "log_start_offset": 0, "aborted_transactions": [{"producer_id": 5, "first_offset": 10}],
             "preferred_read_replica": -1, "records": RECORDS,
             "current_leader": {"leader_id": 2, "leader_epoch": 8} if version >= 12 else None},
            {"partition_index": 1, "error_code": 1, "high_watermark": -1, "last_stable_offset": -1,
             "log_start_offset": -1, "aborted_transactions": None, "records": None,
             "preferred_read_replica": 3 if version >= 11 else -1},
        ]}],
    }


def test_kp_decodes_fetch_responses():
    r = old_fetch.FetchResponse_v4.decode(encode(1, 4, "response", _fetch_response(4)))
    assert r.throttle_time_ms == 1
    (topic,) = r.topics
    assert topic[0] == "t"
    p0, p1 = topic[1]
    assert tuple(p0[:4]) == (0, 0, 100, 90) and [tuple(a) for a in p0[4]] == [(5, 10)]
    assert (p1[0], p1[1], p1[4]) == (1, 1, None)

    for v in (12, 13, 16):
        r = FetchResponse[v].decode(encode(1, v, "response", _fetch_response(v)))
        assert (r.throttle_time_ms, r.error_code, r.session_id) == (1, 0, 77)
        (topic,) = r.responses
        assert (topic.topic_id == U1) if v >= 13 else (topic.topic == "t")
        p0, p1 = topic.partitions
        assert (p0.partition_index, p0.high_watermark, p0.last_stable_offset) == (0, 100, 90)
        assert [(a.producer_id, a.first_offset) for a in p0.aborted_transactions] == [(5, 10)]
        assert bytes(p0.records) == RECORDS
        assert (p0.current_leader.leader_id, p0.current_leader.leader_epoch) == (2, 8)
        assert p1.aborted_transactions is None and p1.preferred_read_replica == 3 and p1.records is None


def test_kp_decodes_create_topics_response():
    body = encode(19, 5, "response", {"throttle_time_ms": 0, "topics": [
        {"name": "tö", "error_code": 0, "error_message": None, "topic_config_error_code": 0, "num_partitions": 3,
         "replication_factor": 1, "configs": [{"name": "retention.ms", "value": "1000", "read_only": False,
                                               "config_source": 5, "is_sensitive": False},
                                              {"name": "secret", "value": None, "read_only": True,
                                               "config_source": 4, "is_sensitive": True}]},
        {"name": "bad", "error_code": 36, "error_message": "exists", "topic_config_error_code": 41,
         "num_partitions": -1, "replication_factor": -1, "configs": None}]})
    r = CreateTopicsResponse[5].decode(body)
    t0, t1 = r.topics
    assert (t0.name, t0.error_code, t0.error_message, t0.num_partitions) == ("tö", 0, None, 3)
    assert [(c.name, c.value, c.read_only, c.config_source, c.is_sensitive) for c in t0.configs] == [
        ("retention.ms", "1000", False, 5, False), ("secret", None, True, 4, True)]
    assert (t1.name, t1.error_code, t1.error_message, t1.topic_config_error_code, t1.configs) == (
        "bad", 36, "exists", 41, None)


def test_kp_decodes_describe_topic_partitions_response():
    for cursor in (None, {"topic_name": "next", "partition_index": 4}):
        body = encode(75, 0, "response", {"throttle_time_ms": 0, "topics": [
            {"error_code": 0, "name": "t", "topic_id": U1, "is_internal": False, "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1],
                 "isr_nodes": [1], "eligible_leader_replicas": None, "last_known_elr": [2],
                 "offline_replicas": []}], "topic_authorized_operations": 0}], "next_cursor": cursor})
        r = DescribeTopicPartitionsResponse[0].decode(body)
        (t,) = r.topics
        assert t.name == "t" and t.topic_id == U1
        assert list(t.partitions[0].last_known_elr) == [2] and t.partitions[0].eligible_leader_replicas is None
        if cursor is None:
            assert r.next_cursor is None
        else:
            assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("next", 4)


# --------------------------------------------------------------------------------------------
# Bounded decoding: lies about lengths, truncation, long varints, bad UTF-8, fuzzing.
# --------------------------------------------------------------------------------------------

def _quick_decode_error(api, version, kind, data, limit=0.5):
    start = time.perf_counter()
    with pytest.raises(DecodeError):
        decode(api, version, kind, data, exact=True)
    assert time.perf_counter() - start < limit


def test_huge_array_count_is_rejected_without_allocating():
    # Metadata v1 request: topics is an int32-counted array.
    _quick_decode_error(3, 1, "request", b"\x7f\xff\xff\xff")
    _quick_decode_error(3, 1, "request", b"\x7f\xff\xff\xff" + b"\x00\x01a" * 10)
    # ApiVersions v0 response: error code, then the api keys array with a 2**31-1 count
    _quick_decode_error(18, 0, "response", b"\x00\x00\x7f\xff\xff\xff\x00\x00\x00\x00\x00\x00")
    # compact (varint) count: 2**32 - 2 elements declared in Metadata v12
    _quick_decode_error(3, 12, "request", b"\xff\xff\xff\xff\x0f" + b"\x00" * 20)
    # []int32 array that claims more elements than fit (4 bytes each is not assumed, 1 byte is)
    _quick_decode_error(3, 12, "request", encode_uvarint(1_000_000) + b"\x00" * 100)


def test_lengths_beyond_the_data_are_rejected():
    # classic string (FindCoordinator v0 key): int16 length 1000, 3 bytes
    _quick_decode_error(10, 0, "request", b"\x03\xe8abc")
    # compact string (ApiVersions v3 client software name): length 100, 3 bytes
    _quick_decode_error(18, 3, "request", encode_uvarint(101) + b"abc")
    # bytes (Produce v3 records): int32 length 2**31-1
    body = b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x03\xe8" + b"\x00\x00\x00\x01" + b"\x00\x01t"
    body += b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff" + b"xyz"
    _quick_decode_error(0, 3, "request", body)
    # compact bytes (Produce v9 records): varint length 2**32-2
    body = b"\x00" + b"\x00\x01" + b"\x00\x00\x03\xe8" + b"\x02" + b"\x02t" + b"\x02" + b"\x00\x00\x00\x00"
    _quick_decode_error(0, 9, "request", body + b"\xff\xff\xff\xff\x0f" + b"xyz")
    # a tagged field whose size runs past the end
    _quick_decode_error(18, 3, "response", b"\x00\x00\x01\x00\x00\x00\x00" + b"\x01\x03\xff\xff\x03\x01")


def test_negative_lengths():
    _quick_decode_error(10, 0, "request", b"\xff\xff")  # null for a non-nullable string
    _quick_decode_error(3, 1, "request", b"\xff\xff\xff\xfe")  # -2 for a nullable array
    _quick_decode_error(3, 0, "request", b"\xff\xff\xff\xff")  # null array in v0, where it is not nullable
    assert decode(3, 1, "request", b"\xff\xff\xff\xff", exact=True).topics is None


def test_truncated_input_always_raises_decode_error():
    for api, kind, version in [(0, "request", 3), (0, "request", 9), (1, "request", 12), (3, "response", 12),
                               (1, "response", 13), (18, "response", 3), (19, "request", 5), (75, "request", 0)]:
        msg = MESSAGES[(api, kind)]
        for i in range(3):
            value, _ = _gen_struct(random.Random(f"trunc/{api}/{i}"), msg.fields, version, _flexible(api, kind, version))
            data = encode(api, version, kind, value)
            for cut in range(len(data)):
                with pytest.raises(DecodeError):
                    decode(api, version, kind, data[:cut])


def test_varint_longer_than_five_bytes():
    with pytest.raises(DecodeError):
        read_uvarint(io.BytesIO(b"\x80\x80\x80\x80\x80\x01"))
    assert read_uvarint(io.BytesIO(b"\xff\xff\xff\xff\x0f")) == 0xFFFFFFFF
    # as an array count, a string length and a tag count
    _quick_decode_error(3, 12, "request", b"\x80\x80\x80\x80\x80\x01")
    _quick_decode_error(18, 3, "request", b"\x81\x80\x80\x80\x80\x00")
    _quick_decode_error(18, 3, "request", b"\x01\x01" + b"\x80\x80\x80\x80\x80\x80\x00")


def test_invalid_utf8():
    _quick_decode_error(18, 3, "request", b"\x03\xff\xfe\x01\x00")  # compact string
    _quick_decode_error(3, 1, "request", b"\x00\x00\x00\x01\x00\x02\xc3\x28")  # classic string in an array
    _quick_decode_error(10, 0, "request", b"\x00\x03\xed\xa0\x80")  # an encoded surrogate is not UTF-8


def test_trailing_bytes_only_rejected_when_exact():
    data = encode(18, 3, "request", {"client_software_name": "a", "client_software_version": "b"})
    assert decode(18, 3, "request", data + b"junk").client_software_name == "a"
    with pytest.raises(DecodeError):
        decode(18, 3, "request", data + b"junk", exact=True)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[pos % len(b)] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[pos % len(b)] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE])
        elif op == 2:
            b[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:
            del b[pos:pos + rng.randint(1, 8)]
        elif op == 4:
            b = b[:pos]
        elif op == 5:
            b[pos:pos + 5] = rng.choice([b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\x80\x80\x80\x80\x80\x80",
                                         b"\xff\xff", b"\xff\xff\xff\xff"])
        else:
            b[pos:pos] = b[rng.randrange(len(b) + 1):][:rng.randint(1, 16)]
    return bytes(b)


@pytest.mark.parametrize("api,version", [(0, 9), (1, 12), (3, 12)], ids=["produce-v9", "fetch-v12", "metadata-v12"])
def test_fuzz_decode_raises_only_decode_error(api, version):
    rng = random.Random(f"fuzz/{api}/{version}")
    msg = MESSAGES[(api, "request")]
    seeds = [encode(api, version, "request", _gen_struct(random.Random(f"fuzz-seed/{api}/{i}"), msg.fields,
                                                          version, True)[0]) for i in range(8)]
    ok = bad = 0
    start = time.perf_counter()
    for i in range(1500):
        if i % 10 == 0:
            data = rng.randbytes(rng.randint(0, 64))
        else:
            data = _mutate(rng, rng.choice(seeds))
        try:
            decode(api, version, "request", data, exact=bool(i % 2))
            ok += 1
        except DecodeError:
            bad += 1
    assert ok + bad == 1500 and bad > 500
    assert time.perf_counter() - start < 10
