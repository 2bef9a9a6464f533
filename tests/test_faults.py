"""Fault rules (kshim.observability.faults), the error answers built for them from the schemas
(kshim.net.request_shape) and the request log (kshim.observability.requestlog)."""
from __future__ import annotations

import uuid

import pytest

from kshim.net.handlers import load_handlers, supported_versions
from kshim.net.request_shape import error_response, request_partitions, response_errors
from kshim.observability.faults import MAX_RULES, FaultError, FaultRules, api_key_of
from kshim.observability.requestlog import RequestLog
from wire import codec
from wire.errors import ErrorCode
from wire.schema.model import in_range


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def orders(partition: int = 0):
    return lambda: [("orders", partition)]


def test_an_error_rule_fails_count_requests_then_is_gone():
    rules = FaultRules()
    rules.add({"action": "error", "api": "Produce", "topic": "orders", "partition": 0,
               "error": "NOT_LEADER_OR_FOLLOWER", "count": 2})
    assert rules.match(1, "c", orders()) is None  # Fetch: another api
    assert rules.match(0, "c", orders(1)) is None  # another partition
    hits = [rules.match(0, "c", orders()) for _ in range(3)]
    assert [h.error_code if h else None for h in hits] == [ErrorCode.NOT_LEADER_OR_FOLLOWER, 6, None]
    assert rules.list() == [] and not rules


def test_after_lets_requests_through_first_answer_once_and_fail_the_retry():
    rules = FaultRules()
    rules.add({"action": "drop", "api": 0, "after": 1, "count": 1})
    assert rules.match(0, None, orders()) is None
    assert rules.match(0, None, orders()).action == "drop"
    assert rules.match(0, None, orders()) is None


def test_a_duration_rule_ends_on_time_and_a_rule_without_bounds_ends_after_one_fault():
    clock = Clock()
    rules = FaultRules(clock)
    rules.add({"action": "delay", "api": "fetch", "delay_ms": 200, "duration_ms": 1000})
    for _ in range(5):
        assert rules.match(1, None, orders()).delay_ms == 200
    assert rules.list()[0]["remaining_ms"] == 1000
    clock.now += 1.0
    assert rules.match(1, None, orders()) is None and rules.list() == []
    rules.add({"action": "drop"})
    assert rules.list()[0]["count"] == 1
    assert rules.match(18, "x", lambda: []) is not None and not rules


def test_client_id_and_topic_filters():
    rules = FaultRules()
    rules.add({"action": "drop", "client_id": "me", "topic": "orders", "count": 10})
    asked: list[int] = []

    def parts():
        asked.append(1)
        return [("other", 0), ("orders", 3)]
    assert rules.match(0, "you", parts) is None and not asked  # the walk is skipped when the client differs
    assert rules.match(0, "me", parts) is not None
    assert rules.match(0, "me", lambda: [("other", 0)]) is None


def test_probability_faults_a_share_and_count_counts_only_faults():
    import random
    rules = FaultRules(rng=random.Random(7))
    rules.add({"action": "drop", "probability": 0.25, "count": 1000})
    hits = sum(rules.match(1, "kshim-replica-1", orders()) is not None for _ in range(2000))
    assert 400 < hits < 600 and rules.list()[0]["applied"] == hits


def test_clear_by_label():
    rules = FaultRules()
    rules.add({"action": "drop", "label": "net:0-1", "count": 5})
    keep = rules.add({"action": "drop", "label": "net:0-2", "count": 5})
    assert rules.clear(label="net:0-1") == 1 and [r["id"] for r in rules.list()] == [keep["id"]]


def test_clear_one_or_all():
    rules = FaultRules()
    ids = [rules.add({"action": "drop", "count": 5})["id"] for _ in range(3)]
    assert rules.clear(ids[1]) == 1 and [r["id"] for r in rules.list()] == [ids[0], ids[2]]
    assert rules.clear() == 2 and rules.list() == []


@pytest.mark.parametrize("spec, why", [
    ({"action": "explode"}, "action must be"),
    ({"action": "error"}, "needs the error code"),
    ({"action": "error", "error": "NONE"}, "other than NONE"),
    ({"action": "error", "error": "NO_SUCH_THING"}, "unknown error code"),
    ({"action": "delay"}, "needs delay_ms"),
    ({"action": "delay", "delay_ms": 10**9}, "delay_ms must be within"),
    ({"action": "drop", "count": 0}, "count must be within"),
    ({"action": "drop", "duration_ms": 10**12}, "duration_ms must be within"),
    ({"action": "drop", "partition": 0}, "needs its topic"),
    ({"action": "drop", "api": "Frobnicate"}, "unknown API"),
    ({"action": "drop", "colour": "red"}, "unknown rule fields"),
    ({"action": "drop", "error": 6}, "only goes with action error"),
    ({"action": "drop", "probability": 0}, "probability must be within"),
    ({"action": "drop", "probability": 1.5}, "probability must be within"),
])
def test_bad_rules_are_refused_with_a_reason(spec, why):
    with pytest.raises(FaultError, match=why):
        FaultRules().add(spec)


def test_rules_per_broker_are_bounded():
    rules = FaultRules()
    for _ in range(MAX_RULES):
        rules.add({"action": "drop", "count": 1})
    with pytest.raises(FaultError, match="clear some"):
        rules.add({"action": "drop"})


def test_api_names():
    assert api_key_of("Produce") == 0 and api_key_of("offsetcommit") == 8 and api_key_of("3") == 3


def _sample(fields, version):
    """A request with one element in every list, so every echo path of the error answer is taken."""
    out = {}
    for f in fields:
        if not in_range(version, f.versions):
            continue
        if f.type == "[]struct":
            out[f.name] = [_sample(f.fields, version)]
        elif f.type == "struct":
            out[f.name] = _sample(f.fields, version)
        elif f.type == "[]int32":
            out[f.name] = [3]
        elif f.type == "[]string":
            out[f.name] = ["g1"]
        elif f.type == "string":
            out[f.name] = "orders" if f.entity_type == "topicName" else "x"
        elif f.type.startswith("int") or f.type == "uint16":
            out[f.name] = 3 if f.name in ("partition", "partition_index", "index") else 1
        elif f.type == "uuid":
            out[f.name] = uuid.UUID(int=5)
        elif f.type in ("records", "bytes"):
            out[f.name] = b""
        elif f.type == "bool":
            out[f.name] = False
        elif f.type == "float64":
            out[f.name] = 0.0
    return out


# DescribeLogDirs v1-2 has no error field outside its log dirs: Kafka's own error answer loses the code there too
NO_ERROR_FIELD = {(35, 1), (35, 2)}
SERVED = [(k, v) for k, (lo, hi) in supported_versions(load_handlers()).items() for v in range(lo, hi + 1)
          if (k, v) not in NO_ERROR_FIELD]


@pytest.mark.parametrize("api_key, version", SERVED, ids=lambda x: str(x))
def test_every_served_request_has_an_error_answer_that_carries_the_code(api_key, version):
    body = codec.decode(api_key, version, "request",
                        codec.encode(api_key, version, "request", _sample(codec.message(api_key, "request").fields, version)))
    answer = error_response(api_key, version, body, ErrorCode.NOT_LEADER_OR_FOLLOWER, "injected")
    decoded = codec.decode(api_key, version, "response", codec.encode(api_key, version, "response", answer))
    assert response_errors(api_key, version, decoded) == [ErrorCode.NOT_LEADER_OR_FOLLOWER]


def test_error_answer_echoes_topics_and_partitions():
    request = {"acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": 0, "records": b""}, {"index": 2, "records": b""}]}]}
    answer = error_response(0, 9, request, 6)
    assert [(t["name"], p["index"], p["error_code"]) for t in answer["responses"] for p in t["partition_responses"]] \
        == [("orders", 0, 6), ("orders", 2, 6)]
    fetch = {"max_wait_ms": 1, "min_bytes": 1, "topics": [{"topic_id": uuid.UUID(int=9), "partitions": [
        {"partition": 4, "fetch_offset": 0}]}], "forgotten_topics_data": [
        {"topic_id": uuid.UUID(int=8), "partitions": [1]}]}
    assert request_partitions(1, 13, fetch, {uuid.UUID(int=9): "orders"}.get) == [("orders", 4)]


def test_request_log_is_a_bounded_ring_read_by_sequence():
    log = RequestLog(3)
    for i in range(5):
        log.record(api_key=0, version=9, client_id=f"c{i}", correlation_id=i, peer="p",
                   partitions=[("orders", i)], errors=[6] if i == 4 else [], started=0.0)
    entries, dropped = log.since(0)
    assert [e["seq"] for e in entries] == [3, 4, 5] and dropped == 2
    assert entries[-1]["errors"] == ["NOT_LEADER_OR_FOLLOWER"] and entries[0]["partitions"] == ["orders/2"]
    assert log.since(4) == ([entries[-1]], 0) and log.since(5) == ([], 0)
    many = RequestLog(2)
    many.record(api_key=1, version=12, client_id=None, correlation_id=1, peer="p",
                partitions=[("t", i) for i in range(1000)], errors=[], started=0.0)
    [entry], _ = many.since(0)
    assert len(entry["partitions"]) == 64 and entry["partitions_total"] == 1000
    assert len(many._entries[0][7]) == 64  # kept bounded, not just shown so
    off = RequestLog(0)
    off.record(api_key=0, version=9, client_id=None, correlation_id=1, peer="p", partitions=[], errors=[], started=0)
    assert not off.enabled and off.since(0) == ([], 0)
