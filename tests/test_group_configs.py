"""Group configs (the GROUP config resource, Kafka 4): validation against the broker's group
settings, DescribeConfigs / AlterConfigs / IncrementalAlterConfigs / ListConfigResources on GROUP
resources, persistence by the controller, and `group_config`, the typed read the coordinators use."""
from __future__ import annotations

import pytest

from kshim.configs import GroupSettings, InvalidConfig, group_config
from kshim.configs.groups import GROUP_CONFIGS, validate_group
from tests.test_admin_handlers import (alter_configs, broker, call, describe_configs, incr, incr_resource,  # noqa: F401
                                       list_config_resources, reopen)
from wire.errors import ErrorCode

GROUP = 32
SET, DELETE, APPEND = 0, 1, 2


class Image:
    def __init__(self, configs):
        self.group_configs = configs


def test_group_config_falls_back_to_the_broker_settings():
    settings = GroupSettings(share_record_lock_duration_ms=20_000)
    c = group_config(Image({}), "g", settings)
    assert (c.share_record_lock_duration_ms, c.share_session_timeout_ms, c.share_delivery_count_limit) == (20_000, 45_000, 5)
    assert (c.share_auto_offset_reset, c.share_isolation_level, c.read_committed) == ("latest", "read_uncommitted", False)
    c = group_config(Image({"g": {"share.isolation.level": "read_committed", "share.auto.offset.reset": "EARLIEST",
                                  "share.delivery.count.limit": "3"}}), "g", settings)
    assert (c.read_committed, c.share_auto_offset_reset, c.share_delivery_count_limit) == (True, "earliest", 3)
    c = group_config(Image({"g": {"share.auto.offset.reset": "by_duration:P1DT2H3M4.5S"}}), "g")
    assert c.auto_offset_reset_duration_ms() == ((24 + 2) * 60 + 3) * 60_000 + 4500


def test_group_config_clamps_to_this_brokers_bounds():
    """Kafka's GroupConfig.evaluate: an override set under wider bounds applies within this broker's."""
    narrow = GroupSettings(share_max_record_lock_duration_ms=40_000)
    c = group_config(Image({"g": {"share.record.lock.duration.ms": "55000"}}), "g", narrow)
    assert c.share_record_lock_duration_ms == 40_000


@pytest.mark.parametrize("overrides, message", [
    ({"share.session.timeout.ms": "44999"}, "greater than or equal to group.share.min.session.timeout.ms"),
    ({"share.session.timeout.ms": "60001"}, "less than or equal to group.share.max.session.timeout.ms"),
    ({"share.record.lock.duration.ms": "999"}, "outside"),
    ({"share.record.lock.duration.ms": "14000"}, "group.share.min.record.lock.duration.ms"),
    ({"share.delivery.count.limit": "11"}, "group.share.max.delivery.count.limit"),
    ({"consumer.session.timeout.ms": "46000", "consumer.heartbeat.interval.ms": "15000"}, None),
    ({"share.heartbeat.interval.ms": "15000", "share.session.timeout.ms": "45000"}, None),
    ({"share.isolation.level": "READ_COMMITTED"}, "not one of"),
    ({"share.auto.offset.reset": "by_duration:PT"}, "ISO-8601"),
    ({"share.auto.offset.reset": "by_duration:-PT1S"}, "ISO-8601"),
    ({"share.auto.offset.reset": "none"}, "not one of"),
    ({"streams.num.standby.replicas": "1"}, "no streams groups"),
    ({"share.assignment.interval.ms": "0"}, "never batched"),
    ({"no.such.config": "1"}, "Unknown group config name: no.such.config"),
])
def test_validate_group(overrides, message):
    if message is None:
        assert validate_group(overrides) == overrides
        return
    with pytest.raises(InvalidConfig, match=message):
        validate_group(overrides)


def test_session_must_exceed_heartbeat():
    settings = GroupSettings(share_min_session_timeout_ms=5000)
    with pytest.raises(InvalidConfig, match="share.session.timeout.ms must be greater than share.heartbeat.interval.ms"):
        validate_group({"share.session.timeout.ms": "5000"}, settings)


async def describe(broker, name, keys=None):
    resp = await call(broker, describe_configs, 4, {"resources": [
        {"resource_type": GROUP, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": True})
    return resp.results[0]


@pytest.mark.anyio
async def test_describe_alter_and_persist_group_configs(broker):
    r = await describe(broker, "g")
    assert r.error_code == 0
    by_name = {c.name: c for c in r.configs}
    assert set(by_name) == set(GROUP_CONFIGS)
    assert (by_name["share.record.lock.duration.ms"].value, by_name["share.record.lock.duration.ms"].config_source) \
        == ("30000", 5)
    assert by_name["share.auto.offset.reset"].config_type == 2 and by_name["share.auto.offset.reset"].documentation

    [r] = await incr(broker, incr_resource(GROUP, "g", ("share.auto.offset.reset", SET, "earliest"),
                                           ("share.record.lock.duration.ms", SET, "20000")))
    assert (r.error_code, r.error_message) == (0, None)
    r = await describe(broker, "g", ["share.record.lock.duration.ms"])
    [c] = r.configs
    assert (c.value, c.config_source, [(s.value, s.source) for s in c.synonyms]) == \
        ("20000", 8, [("20000", 8), ("30000", 5)])
    assert group_config(broker.image, "g").share_auto_offset_reset == "earliest"

    resp = await call(broker, list_config_resources, 1, {"resource_types": [GROUP]})
    assert [(x.resource_type, x.resource_name) for x in resp.config_resources] == [(GROUP, "g")]

    [r] = await incr(broker, incr_resource(GROUP, "g", ("share.record.lock.duration.ms", DELETE, None)))
    assert r.error_code == 0
    assert broker.image.group_configs == {"g": {"share.auto.offset.reset": "earliest"}}
    again = reopen(broker)  # the controller kept them
    try:
        assert again.image.group_configs == {"g": {"share.auto.offset.reset": "earliest"}}
        resp = await call(again, alter_configs, 2, {"resources": [
            {"resource_type": GROUP, "resource_name": "g", "configs": []}], "validate_only": False})
        assert resp.responses[0].error_code == 0
        assert again.image.group_configs == {}  # AlterConfigs replaces the whole set
    finally:
        again.close()


@pytest.mark.anyio
async def test_group_config_errors(broker):
    cases = [
        (incr_resource(GROUP, "g", ("share.session.timeout.ms", SET, "1000")), ErrorCode.INVALID_CONFIG),
        (incr_resource(GROUP, "g", ("share.session.timeout.ms", APPEND, "50000")), ErrorCode.INVALID_CONFIG),
        (incr_resource(GROUP, "g", ("nope", DELETE, None)), ErrorCode.INVALID_CONFIG),
        (incr_resource(GROUP, "", ("share.session.timeout.ms", SET, "50000")), ErrorCode.INVALID_REQUEST),
    ]
    for case, code in cases:
        [r] = await incr(broker, case)
        assert r.error_code == code, case
        assert r.error_message
    [r] = await incr(broker, incr_resource(GROUP, "g", ("share.session.timeout.ms", SET, "50000")), validate_only=True)
    assert r.error_code == 0 and broker.image.group_configs == {}
    assert (await describe(broker, "")).error_code == ErrorCode.INVALID_REQUEST
