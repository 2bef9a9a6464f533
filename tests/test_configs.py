"""The config table and resolver: typed values, ranges and choices, precedence with its sources,
and the broker's settings reaching the controller and DescribeConfigs."""
from __future__ import annotations

import importlib

import pytest

from kshim.broker import BrokerConfig
from kshim.configs import BROKER_CONFIGS, TOPIC_CONFIGS, BrokerLevel, InvalidConfig, Source, resolve, validate
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.store import MetadataStore
from kshim.net.handlers import RequestContext
from kshim.log.log import Log, LogConfig
from kshim.standalone import open_standalone
from wire import codec
from wire.errors import ErrorCode
from wire.headers import RequestHeader
from tests.nodes import served

TOPIC, BROKER = 2, 4


def test_defaults_resolve_to_typed_values():
    config = resolve({})
    assert config["retention.ms"] == 7 * 24 * 3600 * 1000
    assert config["min.insync.replicas"] == 1
    assert config["unclean.leader.election.enable"] is False
    assert config["cleanup.policy"] == ("delete",)
    assert config["message.timestamp.type"] == "CreateTime"
    assert config.log_config() == LogConfig()  # flush.* defaults mean "never force a flush"
    assert all(r.source == Source.DEFAULT_CONFIG for r in config.entries.values())


def test_overrides_are_typed():
    config = resolve({"segment.bytes": "2000000", "flush.ms": "250", "unclean.leader.election.enable": "TRUE"})
    assert config["segment.bytes"] == 2000000 and config["unclean.leader.election.enable"] is True
    assert (config.log_config().segment_bytes, config.log_config().flush_ms) == (2000000, 250)


def test_values_are_read_as_kafka_reads_them_trimmed_and_lists_split_at_commas_with_blanks():
    """ConfigDef trims every value and splits a list at commas with the blanks around them, so
    `kafka-configs --add-config 'cleanup.policy=[compact, delete]'` is both policies."""
    config = resolve(validate({"cleanup.policy": "compact, delete", "compression.type": " lz4 ",
                               "segment.bytes": " 2000000 ", "unclean.leader.election.enable": " true"}))
    assert config["cleanup.policy"] == ("compact", "delete")
    assert config["compression.type"] == "lz4" and config["segment.bytes"] == 2000000
    assert config["unclean.leader.election.enable"] is True
    assert resolve(validate({"cleanup.policy": " delete ,compact "}))["cleanup.policy"] == ("delete", "compact")


@pytest.mark.parametrize("name, value, message", [
    ("no.such.config", "1", "unknown topic config 'no.such.config'"),
    ("retention.ms", "soon", "invalid value for retention.ms: value 'soon' is not a number"),
    ("retention.ms", "-2", "invalid value for retention.ms: value -2 is outside [-1, 9223372036854775807]"),
    ("retention.ms", "1_000", "invalid value for retention.ms: value '1_000' is not a number"),
    ("cleanup.policy", "compact, compact",
     "invalid value for cleanup.policy: value 'compact, compact' is not one of compact, delete"),
    ("cleanup.policy", "compact, ,delete",
     "invalid value for cleanup.policy: value 'compact, ,delete' is not one of compact, delete"),
    ("segment.bytes", "13", "invalid value for segment.bytes: value 13 is outside [14, 2147483647]"),
    ("segment.bytes", "2147483648", "invalid value for segment.bytes: value 2147483648 is outside [14, 2147483647]"),
    ("min.insync.replicas", "0", "invalid value for min.insync.replicas: value 0 is outside [1, 2147483647]"),
    ("cleanup.policy", "compress", "invalid value for cleanup.policy: value 'compress' is not one of compact, delete"),
    ("cleanup.policy", "delete,delete",
     "invalid value for cleanup.policy: value 'delete,delete' is not one of compact, delete"),
    ("cleanup.policy", "compact,", "invalid value for cleanup.policy: value 'compact,' is not one of compact, delete"),
    ("min.cleanable.dirty.ratio", "1.5", "invalid value for min.cleanable.dirty.ratio: value 1.5 is outside [0, 1]"),
    ("max.compaction.lag.ms", "0",
     "invalid value for max.compaction.lag.ms: value 0 is outside [1, 9223372036854775807]"),
    ("kshim.commit.quorum", "all", "invalid value for kshim.commit.quorum: value 'all' is not one of isr, majority"),
    ("unclean.leader.election.enable", "yes",
     "invalid value for unclean.leader.election.enable: value 'yes' is not true or false"),
])
def test_invalid_configs_answer_invalid_config_with_a_message(name, value, message):
    with pytest.raises(InvalidConfig) as e:
        validate({name: value})
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_CONFIG, message)


def test_validate_keeps_valid_values_and_drops_deletions():
    assert validate({"retention.ms": "-1", "segment.bytes": "1048576", "cleanup.policy": "delete", "flush.ms": None}) == \
        {"retention.ms": "-1", "segment.bytes": "1048576", "cleanup.policy": "delete"}
    with pytest.raises(InvalidConfig, match="unknown topic config 'nope'"):
        validate({"nope": None})  # a deletion still names a known config


def test_topic_override_then_broker_setting_then_default():
    config = resolve({"retention.ms": "1000"}, {"log.retention.ms": "2000", "min.insync.replicas": "2"})
    retention, mir, segment = (config.entries[n] for n in ("retention.ms", "min.insync.replicas", "segment.bytes"))
    assert (retention.value, retention.source) == (1000, Source.DYNAMIC_TOPIC_CONFIG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "1000", Source.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "2000", Source.STATIC_BROKER_CONFIG),
        ("retention.ms", TOPIC_CONFIGS["retention.ms"].default, Source.DEFAULT_CONFIG)]
    assert (mir.value, mir.raw, mir.source) == (2, "2", Source.STATIC_BROKER_CONFIG)
    assert (segment.value, segment.source) == (1 << 30, Source.DEFAULT_CONFIG)
    # a broker setting equal to the default (cluster brokers are always given one) reports as the default
    same = resolve({}, {"min.insync.replicas": "1"}).entries["min.insync.replicas"]
    assert (same.source, [s.source for s in same.synonyms]) == (Source.DEFAULT_CONFIG, [Source.DEFAULT_CONFIG])
    # a broker setting under a topic config's own name is not its broker name: ignored
    assert resolve({}, {"retention.ms": "5"}).entries["retention.ms"].source == Source.DEFAULT_CONFIG


def test_every_entry_is_complete():
    for definition in [*TOPIC_CONFIGS.values(), *BROKER_CONFIGS.values()]:
        assert definition.doc and "\n" not in definition.doc
        if definition.default is not None:
            definition.parse(definition.default)  # every default passes its own validator
    # Kafka's CONFIGS_WITH_NO_SERVER_DEFAULTS are the only topic configs without a broker synonym
    assert {n for n, d in TOPIC_CONFIGS.items() if not d.synonym} == {
        "remote.storage.enable", "remote.log.copy.disable", "remote.log.delete.on.disable",
        "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
    assert all(d.dynamic for d in TOPIC_CONFIGS.values())
    # every broker synonym is a broker config of the same type and default, dynamic except kshim's own
    for d in TOPIC_CONFIGS.values():
        if d.synonym:
            b = BROKER_CONFIGS[d.synonym]
            assert (b.type, b.default, b.validator) == (d.type, d.default, d.validator)
            assert b.dynamic == (not d.name.startswith("kshim."))
    assert not any(BROKER_CONFIGS[n].dynamic for n in ("num.partitions", "node.id", "log.dirs"))


@pytest.mark.parametrize("setting", [None, "false", "true"])
def test_controller_elects_by_the_brokers_unclean_setting(tmp_path, setting):
    defaults = {} if setting is None else {"unclean.leader.election.enable": setting}
    controller = Controller(MetadataStore(tmp_path / "m.sqlite"), ControllerConfig(topic_defaults=defaults))
    epochs = {n: controller.register_broker(n, "127.0.0.1", 9092 + n) for n in range(3)}
    controller.create_topic("t", 1, 3)
    p = controller.image.topics["t"].partitions[0]
    controller.alter_partition(p.leader, epochs[p.leader], "t", 0, p.leader_epoch, p.partition_epoch, [p.leader])
    controller.fence(p.leader)
    after = controller.image.topics["t"].partitions[0]
    if setting == "true":
        assert after.leader not in (-1, p.leader) and after.isr == (after.leader,)
    else:
        assert after.leader == -1 and after.isr == (p.leader,)
    controller.close()


async def _call(broker, module_name: str, version: int, body: dict):
    module = importlib.import_module(f"kshim.net.handlers.{module_name}")
    req = codec.decode(module.API_KEY, version, "request", codec.encode(module.API_KEY, version, "request", body))
    resp = await module.handle(RequestContext(served(broker), RequestHeader(module.API_KEY, version, 1, "t", 0), "t:0", {}), req)
    return codec.decode(module.API_KEY, version, "response",
                        codec.encode(module.API_KEY, version, "response", resp))


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_describe_and_create_report_the_brokers_settings(tmp_path):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path, topic_defaults={"min.insync.replicas": "2",
                                                                              "message.max.bytes": "5000"}))
    try:
        created = await _call(broker, "19_create_topics", 7, {"timeout_ms": 1000, "validate_only": True, "topics": [
            {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": [{"name": "retention.ms", "value": "60000"}]}]})
        answered = {c.name: (c.value, c.config_source) for c in created.topics[0].configs}
        assert answered["retention.ms"] == ("60000", Source.DYNAMIC_TOPIC_CONFIG)
        assert answered["min.insync.replicas"] == ("2", Source.STATIC_BROKER_CONFIG)
        assert answered["segment.bytes"] == (TOPIC_CONFIGS["segment.bytes"].default, Source.DEFAULT_CONFIG)
        assert broker.topics == {}

        await broker.create_topic("t", 1, {})
        assert broker.partition("t", 0).min_insync_replicas == 2
        assert broker.partition("t", 0).max_message_bytes == 5000
        described = await _call(broker, "32_describe_configs", 4, {
            "resources": [{"resource_type": TOPIC, "resource_name": "t",
                           "configuration_keys": ["min.insync.replicas", "max.message.bytes"]}],
            "include_synonyms": True, "include_documentation": False})
        entries = {c.name: c for c in described.results[0].configs}
        mir = entries["min.insync.replicas"]
        assert (mir.value, mir.config_source, mir.read_only) == ("2", Source.STATIC_BROKER_CONFIG, False)
        assert [(s.name, s.value, s.source) for s in entries["max.message.bytes"].synonyms] == [
            ("message.max.bytes", "5000", Source.STATIC_BROKER_CONFIG),
            ("max.message.bytes", "1048588", Source.DEFAULT_CONFIG)]
        described = await _call(broker, "32_describe_configs", 4, {
            "resources": [{"resource_type": BROKER, "resource_name": "", "configuration_keys": ["message.max.bytes"]}],
            "include_synonyms": False, "include_documentation": False})
        [setting] = described.results[0].configs
        assert (setting.value, setting.config_source, setting.read_only) == ("5000", Source.STATIC_BROKER_CONFIG, False)
    finally:
        broker.close()


# ------------------------------------------------------------------ Kafka 4's topic-config surface
@pytest.mark.parametrize("name, value, message", [
    ("compression.type", "brotli", "is not one of producer, uncompressed, gzip, snappy, lz4, zstd"),
    ("compression.gzip.level", "0", "value 0 is outside [1, 9] or -1"),
    ("compression.lz4.level", "18", "value 18 is outside [1, 17]"),
    ("compression.zstd.level", "23", "value 23 is outside [-131072, 22]"),
    ("segment.index.bytes", "3", "value 3 is outside [4, 2147483647]"),
    ("local.retention.ms", "-3", "value -3 is outside [-2, 9223372036854775807]"),
    ("message.timestamp.after.max.ms", "-1", "value -1 is outside [0, 9223372036854775807]"),
    ("leader.replication.throttled.replicas", "0:1,x", "must be '*' or a list of partition:broker pairs"),
    ("remote.storage.enable", "true", "tiered storage is not available in kshim"),
    ("message.format.version", "3.0", "no longer exists: Kafka 4.0 removed it"),
])
def test_new_topic_configs_refuse_bad_values(name, value, message):
    with pytest.raises(InvalidConfig) as e:
        validate({name: value})
    assert e.value.code == ErrorCode.INVALID_CONFIG and message in e.value.message


def test_new_topic_configs_take_kafkas_values():
    ok = {"compression.type": "zstd", "compression.gzip.level": "-1", "compression.zstd.level": "-5",
          "follower.replication.throttled.replicas": "0:1, 1:2", "leader.replication.throttled.replicas": "*",
          "remote.storage.enable": "false", "local.retention.bytes": "-2", "preallocate": "true",
          "message.downconversion.enable": "false", "file.delete.delay.ms": "0", "segment.jitter.ms": "10"}
    assert validate(ok) == ok
    config = resolve({"segment.index.bytes": "4096", "segment.jitter.ms": "50", "index.interval.bytes": "10"})
    log = config.log_config()
    assert (log.segment_index_bytes, log.segment_jitter_ms, log.index_interval_bytes) == (4096, 50, 10)
    assert resolve({})["message.timestamp.after.max.ms"] == 3_600_000  # Kafka 4.0's default (KIP-1030)


def test_dynamic_broker_levels_rank_above_the_command_line():
    level = BrokerLevel.of({"log.retention.ms": "1"}, {"": {"log.retention.ms": "2", "compression.type": "gzip"},
                                                        "0": {"log.retention.ms": "3"}}, node_id=0)
    entry = resolve({}, level).entries["retention.ms"]
    assert (entry.value, entry.source) == (3, Source.DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", "3", Source.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "2", Source.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "1", Source.STATIC_BROKER_CONFIG),
        ("retention.ms", TOPIC_CONFIGS["retention.ms"].default, Source.DEFAULT_CONFIG)]
    other = resolve({}, BrokerLevel.of({}, level_dynamic := {"": {"compression.type": "gzip"}}, node_id=1))
    assert (other["compression.type"], other.entries["compression.type"].source) == (
        "gzip", Source.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert level_dynamic  # the mapping is read, not copied away


@pytest.mark.anyio
async def test_dynamic_broker_configs_apply_persist_and_refuse_bad_ones(tmp_path):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        await broker.create_topic("t", 1, {})
        answer = await _call(broker, "44_incremental_alter_configs", 1, {"validate_only": True, "resources": [
            {"resource_type": BROKER, "resource_name": "", "configs": [
                {"name": "log.retention.ms", "config_operation": 0, "value": "5000"}]}]})
        assert answer.responses[0].error_code == 0 and broker.image.broker_configs == {}
        for name, value, message in [("log.retention.ms", "x", "not a number"), ("num.partitions", "4", "read-only"),
                                     ("no.such", "1", "unknown broker config")]:
            answer = await _call(broker, "44_incremental_alter_configs", 1, {"validate_only": False, "resources": [
                {"resource_type": BROKER, "resource_name": "", "configs": [
                    {"name": name, "config_operation": 0, "value": value}]}]})
            assert answer.responses[0].error_code == ErrorCode.INVALID_CONFIG
            assert message in answer.responses[0].error_message
        answer = await _call(broker, "44_incremental_alter_configs", 1, {"validate_only": False, "resources": [
            {"resource_type": BROKER, "resource_name": "", "configs": [
                {"name": "log.retention.ms", "config_operation": 0, "value": "5000"},
                {"name": "compression.type", "config_operation": 0, "value": "lz4"}]}]})
        assert answer.responses[0].error_code == 0
        assert broker.partition("t", 0).log.config.retention_ms == 5000  # applied to the partition
        assert broker.partition("t", 0).compression_codec == 3
    finally:
        broker.close()
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))  # a restart keeps them
    try:
        assert broker.partition("t", 0).log.config.retention_ms == 5000
        described = await _call(broker, "32_describe_configs", 4, {
            "resources": [{"resource_type": BROKER, "resource_name": "0",
                           "configuration_keys": ["log.retention.ms", "compression.type"]}],
            "include_synonyms": True, "include_documentation": True})
        entries = {c.name: c for c in described.results[0].configs}
        assert (entries["log.retention.ms"].value, entries["log.retention.ms"].config_source) == (
            "5000", Source.DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert not entries["compression.type"].read_only and entries["compression.type"].documentation
        # AlterConfigs replaces the resource's whole set: compression.type goes back to its default
        answer = await _call(broker, "33_alter_configs", 2, {"validate_only": False, "resources": [
            {"resource_type": BROKER, "resource_name": "", "configs": [{"name": "log.retention.ms", "value": "7000"}]}]})
        assert answer.responses[0].error_code == 0
        assert broker.image.broker_configs == {"": {"log.retention.ms": "7000"}}
        assert broker.partition("t", 0).compression_codec is None
    finally:
        broker.close()


def test_an_empty_cleanup_policy_neither_deletes_nor_compacts(tmp_path):
    """cleanup.policy "" (Kafka 4.2+: infinite retention): retention.ms and retention.bytes remove no
    segment, however old or large, where the same topic with `delete` loses them."""
    from wire.records import encode_batch
    overrides = {"retention.ms": "1", "retention.bytes": "0", "segment.bytes": "200"}
    assert validate({"cleanup.policy": ""}) == {"cleanup.policy": ""}
    kept = resolve({**overrides, "cleanup.policy": ""}).log_config()
    assert not kept.compact  # the log cleaner passes it by (it cleans logs with compact only)
    logs = {}
    for policy, config in (("", kept), ("delete", resolve({**overrides, "cleanup.policy": "delete"}).log_config())):
        log = logs[policy] = Log(tmp_path / (policy or "empty"), config)
        for i in range(6):
            log.append(bytearray(encode_batch([(None, b"x" * 100, [], 1_000 + i)])))
        assert len(log.segment_base_offsets) == 6
    try:
        far_future = 10 ** 13
        assert logs[""].apply_retention(far_future) == 0
        assert (logs[""].log_start_offset, logs[""].log_end_offset, len(logs[""].segment_base_offsets)) == (0, 6, 6)
        assert logs["delete"].apply_retention(far_future) > 0
        assert logs["delete"].log_start_offset == 6
    finally:
        for log in logs.values():
            log.close()


def test_segment_index_bytes_rolls_a_segment_whose_index_is_full(tmp_path):
    from wire.records import encode_batch
    log = Log(tmp_path / "p", LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 3))
    for i in range(7):  # one timestamp for all: the time index gets no entry, only the offset index
        log.append(bytearray(encode_batch([(None, b"x" * 20, [], 1_700_000_000_000)])))
    # an index entry per batch after the first; 3 entries fill it, so each segment holds 4 batches
    assert log.segment_base_offsets == [0, 4]
    log.close()


def test_segment_jitter_shortens_segment_ms(tmp_path):
    from kshim.clock import ManualClock
    from wire.records import encode_batch
    clock = ManualClock()
    log = Log(tmp_path / "p", LogConfig(segment_ms=1000, segment_jitter_ms=1000), clock=clock)
    log._roll_jitter_ms = 600  # the draw, fixed: rolls once the segment is older than 400 ms
    log.append(bytearray(encode_batch([(None, b"a")])))
    clock.advance(ms=401)
    log.append(bytearray(encode_batch([(None, b"b")])))
    assert log.segment_base_offsets == [0, 1]
    log.close()


def test_min_compaction_lag_above_max_is_refused_as_kafka_does(tmp_path):
    controller = Controller(MetadataStore(tmp_path / "metadata.sqlite"),
                            ControllerConfig(topic_defaults={"log.cleaner.max.compaction.lag.ms": "60000"}))
    try:
        controller.register_broker(0, "127.0.0.1", 9092)
        with pytest.raises(InvalidConfig, match=r"conflict topic config setting min.compaction.lag.ms \(90000\) > "
                                                r"max.compaction.lag.ms \(60000\)") as refused:
            controller.create_topic("t", 1, 1, {"min.compaction.lag.ms": "90000"})  # against the broker's max
        assert refused.value.code == ErrorCode.INVALID_CONFIG
        controller.create_topic("t", 1, 1, {"min.compaction.lag.ms": "30000"})
        with pytest.raises(InvalidConfig, match="conflict topic config setting"):
            controller.set_topic_configs("t", {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "4000"})
        controller.set_topic_configs("t", {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "5000"})
        assert controller.image.topics["t"].configs == {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "5000"}
    finally:
        controller.close()
