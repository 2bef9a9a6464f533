"""Client quotas: the model (entities, keys, filters, precedence), the controller's storage, the
AlterClientQuotas / DescribeClientQuotas handlers, and the rate and throttle arithmetic of the
QuotaManager (Kafka's Rate over samples, throttle = (rate - quota) / quota * window)."""
from __future__ import annotations

import importlib

import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.cluster.image import ClientQuota, QuotaEntityPart
from kshim.configs import quotas
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.net.quota_manager import QuotaManager, Rate, Throttle, client_of
from kshim.standalone import open_standalone
from tests.nodes import served
from wire import codec
from wire.errors import ErrorCode
from wire.headers import RequestHeader

describe_quotas = importlib.import_module("kshim.net.handlers.48_describe_client_quotas")
alter_quotas = importlib.import_module("kshim.net.handlers.49_alter_client_quotas")
produce = importlib.import_module("kshim.net.handlers.00_produce")

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


# ---------------------------------------------------------------- the model
@pytest.mark.parametrize("pairs, message", [
    ([], "Invalid empty client quota entity"),
    ([("group", "g")], "Unhandled client quota entity type: group"),
    ([("user", "a"), ("user", "b")], "duplicate entity entry user"),
    ([("user", "")], "Empty user not supported"),
    ([("ip", "10.0.0.1"), ("user", "a")], "IP entity should not be combined"),
    ([("ip", "not-an-address")], "not-an-address is not a valid IP"),
])
def test_invalid_entities_are_invalid_request(pairs, message):
    with pytest.raises(BrokerError, match=message) as e:
        quotas.entity_of(pairs)
    assert e.value.code == ErrorCode.INVALID_REQUEST


def test_entities_are_canonical_whatever_the_order():
    assert quotas.entity_of([("user", "u"), ("client-id", None)]) == \
        quotas.entity_of([("client-id", None), ("user", "u")])
    assert quotas.entity_of([("ip", None)]) == (QuotaEntityPart("ip", None),)


@pytest.mark.parametrize("pairs, key, value, message", [
    ([("user", "u")], "connection_creation_rate", 1.0, "Invalid configuration key"),
    ([("ip", None)], "producer_byte_rate", 1.0, "Invalid configuration key"),
    ([("client-id", "c")], "no_such_rate", 1.0, "Invalid configuration key"),
    ([("client-id", "c")], "producer_byte_rate", 0.0, "must be greater than 0"),
    ([("client-id", "c")], "request_percentage", -5.0, "must be greater than 0"),
    ([("client-id", "c")], "consumer_byte_rate", 10.5, "cannot be a fractional value"),
    ([("client-id", "c")], "producer_byte_rate", 1e30, "too large"),
    ([("ip", "::1")], "connection_creation_rate", 2.0 ** 31, "too large"),
])
def test_invalid_keys_and_values_are_invalid_request(pairs, key, value, message):
    with pytest.raises(BrokerError, match=message) as e:
        quotas.alter({}, quotas.entity_of(pairs), {key: value})
    assert e.value.code == ErrorCode.INVALID_REQUEST


def test_alter_sets_and_removes():
    entity = quotas.entity_of([("user", "u")])
    assert quotas.alter({"producer_byte_rate": 5.0}, entity, {"request_percentage": 12.5, "producer_byte_rate": None,
                                                              "consumer_byte_rate": None}) == {"request_percentage": 12.5}


def _q(pairs, **values) -> ClientQuota:
    return ClientQuota(quotas.entity_of(pairs), {k: float(v) for k, v in values.items()})


ALL = [
    _q([("user", "alice")], producer_byte_rate=1),
    _q([("user", None)], producer_byte_rate=2),
    _q([("user", "alice"), ("client-id", "app")], producer_byte_rate=3),
    _q([("user", "alice"), ("client-id", None)], producer_byte_rate=4),
    _q([("client-id", "app")], producer_byte_rate=5),
    _q([("client-id", None)], producer_byte_rate=6),
    _q([("ip", "127.0.0.1")], connection_creation_rate=7),
    _q([("ip", None)], connection_creation_rate=8),
]


def _described(components, strict=False) -> list[int]:
    flt = quotas.parse_filter(components, strict)
    return sorted(int(v) for q in quotas.describe(ALL, flt) for v in q.values.values())


def test_describe_filters_match_as_kafka_does():
    assert _described([]) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert _described([], strict=True) == []
    assert _described([("user", EXACT, "alice")]) == [1, 3, 4]
    assert _described([("user", EXACT, "alice")], strict=True) == [1]
    assert _described([("user", DEFAULT, None)]) == [2]
    assert _described([("user", SPECIFIED, None)]) == [1, 2, 3, 4]
    assert _described([("user", SPECIFIED, None)], strict=True) == [1, 2]
    assert _described([("user", EXACT, "alice"), ("client-id", DEFAULT, None)]) == [4]
    assert _described([("client-id", SPECIFIED, None)], strict=True) == [5, 6]
    assert _described([("ip", SPECIFIED, None)]) == [7, 8]
    assert _described([("user", EXACT, "nobody")]) == []


@pytest.mark.parametrize("components, code, message", [
    ([("group", EXACT, "g")], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("", EXACT, "g")], ErrorCode.INVALID_REQUEST, "Invalid empty entity type"),
    ([("user", EXACT, None)], ErrorCode.INVALID_REQUEST, "MATCH_TYPE_EXACT"),
    ([("user", DEFAULT, "x")], ErrorCode.INVALID_REQUEST, "MATCH_TYPE_DEFAULT"),
    ([("user", SPECIFIED, "x")], ErrorCode.INVALID_REQUEST, "MATCH_TYPE_SPECIFIED"),
    ([("user", 7, None)], ErrorCode.INVALID_REQUEST, "Unknown match type 7"),
    ([("user", DEFAULT, None), ("user", SPECIFIED, None)], ErrorCode.INVALID_REQUEST, "more than once"),
    ([("ip", SPECIFIED, None), ("user", SPECIFIED, None)], ErrorCode.INVALID_REQUEST, "IP filter component"),
])
def test_bad_filters(components, code, message):
    with pytest.raises(BrokerError, match=message) as e:
        quotas.parse_filter(components, False)
    assert e.value.code == code


def test_precedence_from_user_and_client_down_to_the_default_client():
    """Kafka's eight levels, each removed in turn; the tags say who shares the budget."""
    table = {q.entity: q.values for q in ALL}
    table[quotas.entity_of([("user", None), ("client-id", "app")])] = {"producer_byte_rate": 9.0}
    table[quotas.entity_of([("user", None), ("client-id", None)])] = {"producer_byte_rate": 10.0}
    order = [
        ([("user", "alice"), ("client-id", "app")], 3.0, ("alice", "app")),
        ([("user", "alice"), ("client-id", None)], 4.0, ("alice", "app")),
        ([("user", "alice")], 1.0, ("alice", "")),
        ([("user", None), ("client-id", "app")], 9.0, ("alice", "app")),
        ([("user", None), ("client-id", None)], 10.0, ("alice", "app")),
        ([("user", None)], 2.0, ("alice", "")),
        ([("client-id", "app")], 5.0, ("", "app")),
        ([("client-id", None)], 6.0, ("", "app")),
    ]
    for pairs, value, tags in order:
        assert quotas.resolve_quota(table, "producer_byte_rate", "alice", "app") == (value, *tags)
        del table[quotas.entity_of(pairs)]
    assert quotas.resolve_quota(table, "producer_byte_rate", "alice", "app") is None
    assert quotas.resolve_quota({quotas.entity_of([("client-id", None)]): {"consumer_byte_rate": 1.0}},
                                "producer_byte_rate", "alice", "app") is None  # another key


# ---------------------------------------------------------------- rates and throttle times
def test_a_new_rate_counts_the_whole_window():
    rate = Rate(samples=11, window_ms=1000)
    rate.record(10_000, now_ms=0)
    assert rate.window_size_ms(0) == 10_000  # samples - 1 full windows at least
    assert rate.measure(0) == 1000.0
    rate.record(500, now_ms=10_500)
    assert rate.window_size_ms(10_500) == 10_500


def test_throttle_time_is_the_excess_over_the_quota_times_the_window():
    manager = QuotaManager(samples=11, window_s=1)
    manager.update([_q([("client-id", "slow")], producer_byte_rate=1000)])
    assert manager.record("producer_byte_rate", "ANONYMOUS", "slow", 10_000, now_ms=0) == 0  # exactly the quota
    # 11,000 bytes over 10 s: 1100/s, 10% over: wait 10% of the window
    assert manager.record("producer_byte_rate", "ANONYMOUS", "slow", 1000, now_ms=0) == 1000
    assert manager.record("producer_byte_rate", "ANONYMOUS", "other", 10 ** 9, now_ms=0) == 0  # no quota
    # the server bounds request_percentage's throttle by one window
    manager.update([_q([("user", None)], request_percentage=10)])
    assert manager.record("request_percentage", "ANONYMOUS", "x", 1000.0, now_ms=0, max_throttle_ms=1000) == 1000


def test_a_greedy_client_that_waits_its_throttle_times_gets_the_quota():
    """Simulated: a producer sends 20 KiB requests back to back, waiting each throttle time out;
    past the first window its rate is the quota's."""
    quota = 200 * 1024
    manager = QuotaManager(samples=11, window_s=1)
    manager.update([_q([("client-id", "p")], producer_byte_rate=quota)])
    now, sent, start_ms, start_sent = 0, 0, None, 0
    while now < 120_000:
        if start_ms is None and now >= 30_000:
            start_ms, start_sent = now, sent
        manager_throttle = manager.record("producer_byte_rate", "ANONYMOUS", "p", 20 * 1024, now)
        sent += 20 * 1024
        now += max(manager_throttle, 5)  # 5 ms a request at least
    assert start_ms is not None
    measured = (sent - start_sent) / ((now - start_ms) / 1000)
    assert quota * 0.9 <= measured <= quota * 1.1, measured


def test_idle_rates_are_dropped():
    manager = QuotaManager(samples=2, window_s=1)
    manager.update([_q([("client-id", None)], producer_byte_rate=1000)])
    for i in range(100):
        manager.record("producer_byte_rate", "ANONYMOUS", f"client-{i}", 1, now_ms=0)
    assert len(manager._rates) == 100
    manager.record("producer_byte_rate", "ANONYMOUS", "late", 1, now_ms=manager.SWEEP_INTERVAL_MS)
    assert len(manager._rates) == 1


def test_the_user_is_anonymous_until_a_principal_is_known():
    header = RequestHeader(0, 9, 1, "app", 0)

    class WithPrincipal:
        def __init__(self, principal):
            self.header, self.principal = header, principal

    assert client_of(RequestContext(None, header, "t:0", {})) == ("ANONYMOUS", "app")  # type: ignore[arg-type]
    assert client_of(WithPrincipal("User:alice")) == ("alice", "app")
    assert client_of(WithPrincipal(None)) == ("ANONYMOUS", "app")


@pytest.mark.anyio
async def test_a_mute_delays_the_next_request():
    import anyio
    throttle = Throttle()
    throttle.mute(0)
    with anyio.fail_after(0.05):
        await throttle.wait()
    throttle.mute(200)
    started = anyio.current_time()
    await throttle.wait()
    assert anyio.current_time() - started >= 0.19


# ---------------------------------------------------------------- controller and handlers
@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    yield b
    b.close()


async def call(broker: Broker, module, version: int, body: dict, client_id: str = "test"):
    key = module.API_KEY
    req = codec.decode(key, version, "request", codec.encode(key, version, "request", body), exact=True)
    ctx = RequestContext(served(broker), RequestHeader(key, version, 1, client_id, 0), "test:0", {})
    resp = await module.handle(ctx, req)
    if not isinstance(resp, dict):
        resp = await resp
    return codec.decode(key, version, "response", codec.encode(key, version, "response", resp), exact=True), ctx


def _entry(pairs, ops):
    return {"entity": [{"entity_type": t, "entity_name": n} for t, n in pairs],
            "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops]}


async def _alter(broker, *entries, validate_only=False, version=1):
    resp, _ = await call(broker, alter_quotas, version, {"entries": list(entries), "validate_only": validate_only})
    return [(e.error_code, e.error_message) for e in resp.entries]


async def _describe(broker, components=(), strict=False, version=1):
    resp, _ = await call(broker, describe_quotas, version, {
        "components": [{"entity_type": t, "match_type": m, "match": s} for t, m, s in components], "strict": strict})
    if resp.error_code:
        return resp.error_code, resp.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry["values"]}
            for entry in resp.entries}


@pytest.mark.anyio
@pytest.mark.parametrize("version", [0, 1])
async def test_alter_then_describe(broker, version):
    results = await _alter(broker,
                           _entry([("user", "alice"), ("client-id", None)], [("producer_byte_rate", 1024.0),
                                                                             ("request_percentage", 50.0)]),
                           _entry([("client-id", "app")], [("consumer_byte_rate", 2048.0)]),
                           _entry([("group", "g")], [("producer_byte_rate", 1.0)]),
                           _entry([("ip", "10.1.2.3")], [("producer_byte_rate", 1.0)]),
                           _entry([("user", "bob")], [("producer_byte_rate", 5.0), ("producer_byte_rate", 6.0)]),
                           version=version)
    assert [code for code, _ in results] == [0, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
                                             ErrorCode.INVALID_REQUEST]
    assert "Unhandled client quota entity type: group" in results[2][1]
    assert "Duplicate quota key producer_byte_rate" in results[4][1]
    assert await _describe(broker, version=version) == {
        (("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0, "request_percentage": 50.0},
        (("client-id", "app"),): {"consumer_byte_rate": 2048.0},
    }
    assert await _describe(broker, [("user", EXACT, "alice")], strict=True) == {}
    assert await _describe(broker, [("group", SPECIFIED, None)]) == (
        ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group")
    # remove one key, then the last: the entity goes
    assert await _alter(broker, _entry([("client-id", None), ("user", "alice")], [("request_percentage", None)]),
                        _entry([("client-id", "app")], [("consumer_byte_rate", None)])) == [(0, None), (0, None)]
    assert await _describe(broker) == {(("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0}}


@pytest.mark.anyio
async def test_validate_only_changes_nothing_and_quotas_survive_a_restart(tmp_path):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert await _alter(broker, _entry([("user", None)], [("producer_byte_rate", 10.0)]),
                            validate_only=True) == [(0, None)]
        assert await _alter(broker, _entry([("user", None)], [("producer_byte_rate", 0.5)]),
                            validate_only=True) == [(ErrorCode.INVALID_REQUEST,
                                                     "producer_byte_rate cannot be a fractional value.")]
        assert await _describe(broker) == {}
        assert await _alter(broker, _entry([("user", None)], [("producer_byte_rate", 10.0)]),
                            _entry([("user", None)], [("consumer_byte_rate", 10.0)])) == [
            (0, None), (ErrorCode.INVALID_REQUEST, "Ignoring duplicate entity {user=<default>}")]
    finally:
        broker.close()
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        assert await _describe(broker) == {(("user", None),): {"producer_byte_rate": 10.0}}
    finally:
        broker.close()


@pytest.mark.anyio
async def test_produce_over_its_quota_answers_a_throttle_time_and_mutes(broker):
    from wire.records import encode_batch
    await _alter(broker, _entry([("client-id", "slow")], [("producer_byte_rate", 100.0)]))
    batch = encode_batch([(None, b"x" * 2000)])

    async def send(client_id):
        body = {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": "q", "partition_data": [{"index": 0, "records": batch}]}]}
        return await call(broker, produce, 9, body, client_id=client_id)

    resp, ctx = await send("slow")
    # 2000-odd bytes over a 10 s window is 200 B/s: 100% over a 100 B/s quota, 10 s to wait
    assert 9_000 <= resp.throttle_time_ms <= 11_000
    assert resp.responses[0].partition_responses[0].error_code == 0  # the records are in
    assert ctx.throttle.until > 0
    resp, ctx = await send("fast")
    assert resp.throttle_time_ms == 0 and ctx.throttle.until == 0


def test_connection_creation_rate_per_address_with_the_default_address_below_it():
    manager = QuotaManager(samples=11, window_s=1)
    manager.update([_q([("ip", "10.0.0.1")], connection_creation_rate=1), _q([("ip", None)], connection_creation_rate=2)])
    # 10 connections in the first window are 1 a second: allowed; the 11th waits (at most a window)
    assert [manager.connection_throttle("10.0.0.1", 0) for _ in range(10)] == [0] * 10
    assert manager.connection_throttle("10.0.0.1", 0) == 1000
    assert manager.connection_throttle("10.0.0.1", 0) == 1000  # a refused one was not counted
    assert manager.connection_throttle("10.0.0.1", 1000) > 0  # 11 in a window counted as 10 s
    assert manager.connection_throttle("10.0.0.1", 11_000) == 0  # 11 in 11 s
    assert [manager.connection_throttle("10.0.0.2", 0) for _ in range(21)].count(0) == 20  # the default
    manager.update([])
    assert manager.connection_throttle("10.0.0.1", 0) == 0


def test_controller_mutation_rate_is_a_token_bucket():
    manager = QuotaManager(samples=11, window_s=1)
    manager.update([_q([("client-id", "admin")], controller_mutation_rate=2)])
    # a burst of 11 windows x 2 = 22 partitions; the request that overdraws is still allowed
    assert manager.record_mutation("ANONYMOUS", "admin", 20, 0, strict=True) == (True, 0)
    assert manager.record_mutation("ANONYMOUS", "admin", 6, 0, strict=True) == (True, 2000)  # 4 short at 2/s
    assert manager.record_mutation("ANONYMOUS", "admin", 1, 1000, strict=True) == (False, 1000)
    assert manager.record_mutation("ANONYMOUS", "admin", 1, 1000, strict=False) == (True, 1500)  # permissive
    assert manager.record_mutation("ANONYMOUS", "admin", 1, 2500, strict=True) == (True, 500)
    assert manager.record_mutation("ANONYMOUS", "other", 100, 0, strict=True) == (True, 0)  # no quota


@pytest.mark.anyio
async def test_create_topics_past_the_mutation_quota_is_throttling_quota_exceeded(broker):
    create_topics = importlib.import_module("kshim.net.handlers.19_create_topics")
    await _alter(broker, _entry([("client-id", "test")], [("controller_mutation_rate", 1.0)]))

    def topic(name, partitions):
        return {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}

    resp, ctx = await call(broker, create_topics, 7, {"topics": [topic("m1", 12), topic("m2", 1)],
                                                       "timeout_ms": 1000, "validate_only": False})
    # 11 tokens: m1 overdraws to -1 and is created; m2 finds the bucket empty
    assert [(t.name, t.error_code) for t in resp.topics] == [("m1", 0), ("m2", ErrorCode.THROTTLING_QUOTA_EXCEEDED)]
    assert 0 < resp.throttle_time_ms <= 1000 and ctx.throttle.until > 0  # the bucket refills while the topics are made
    assert "m2" not in broker.topics
