"""server.properties and --override: Java's properties format, every Kafka 4.3 broker config name
classified (served, no-op or refused), and the configs reaching the command line and the broker."""
from __future__ import annotations

import argparse

import pytest

from kshim import cli
from kshim.configs import server_properties
from kshim.configs.broker import BrokerConfig
from kshim.configs.catalog import AUTHORIZER_CONFIGS, INTERNAL_CONFIGS, LEFTOVERS, TABLE, lookup
from kshim.configs.kafka43 import KAFKA_BROKER_CONFIGS
from kshim.configs.properties import PropertiesError, parse_properties
from kshim.configs.resolver import Source, broker_settings


# ------------------------------------------------------------ the file format
def test_properties_separators_comments_and_continuations():
    text = ("# a comment\n! another\n\nnum.partitions=3\nlog.dirs : /tmp/a,\\\n    /tmp/b\n"
            "auto.create.topics.enable false\n  listeners=PLAINTEXT://:9092\nempty=\nkey\\=with\\:seps=v\\u0041\n"
            "num.partitions=4\n")
    assert parse_properties(text) == {
        "num.partitions": "4",  # the last of a repeated key wins, as in Java
        "log.dirs": "/tmp/a,/tmp/b",
        "auto.create.topics.enable": "false",
        "listeners": "PLAINTEXT://:9092",
        "empty": "",
        "key=with:seps": "vA",
    }


def test_properties_even_backslashes_do_not_continue_and_bad_escapes_are_named():
    assert parse_properties("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}
    with pytest.raises(PropertiesError, match="f line 2"):
        parse_properties("a=1\nb=\\u12\n", "f")


# ------------------------------------------------------------ the table
def test_every_kafka_broker_config_is_served_a_no_op_or_refused():
    missing = sorted(set(KAFKA_BROKER_CONFIGS) - set(TABLE))
    assert not missing, f"Kafka 4.3 broker configs kshim does not classify: {missing}"
    for name, entry in TABLE.items():
        assert entry.kind in ("served", "no-op", "refused") and entry.why, name


def test_the_table_names_only_kafka_configs_and_kshim_ones():
    known = {*KAFKA_BROKER_CONFIGS, *AUTHORIZER_CONFIGS, *LEFTOVERS, *INTERNAL_CONFIGS, "log.message.downconversion.enable"}
    foreign = sorted(n for n in TABLE if n not in known and not n.startswith("kshim."))
    assert not foreign, f"in the table but no Kafka 4.3 broker config: {foreign}"


def test_unknown_and_zookeeper_names_are_refused_by_name():
    assert lookup("zookeeper.connect").kind == "refused"
    assert "ZooKeeper" in lookup("zookeeper.connect").why
    assert lookup("num.partiton").kind == "refused"
    assert lookup("listener.name.sasl_ssl.ssl.client.auth").kind == "served"


# ------------------------------------------------------------ applying them to a command line
def _parsed(tmp_path, lines: list[str], *argv: str) -> argparse.Namespace:
    path = tmp_path / "server.properties"
    path.write_text("\n".join(lines) + "\n")
    words = ["serve", "--config-file", str(path), *argv]
    parser = cli.build_parser("serve")
    args = parser.parse_args(words)
    cli._apply_kafka_configs(parser, args, words)
    return args


def test_served_names_set_the_same_settings_as_the_options(tmp_path):
    args = _parsed(tmp_path, ["num.partitions=6", "auto.create.topics.enable=false", "log.retention.hours=2",
                              "log.segment.bytes=1048576", "group.share.record.lock.duration.ms=15000",
                              "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:9093",
                              "controller.listener.names=CONTROLLER", "process.roles=broker,controller",
                              "node.id=1", "num.network.threads=3"])
    assert args.partitions == 6 and args.no_auto_create_topics is True
    assert args.listeners == "PLAINTEXT://127.0.0.1:0"  # the controller's listener is not opened
    assert args.topic_properties == {"log.retention.ms": str(2 * 3600 * 1000), "log.segment.bytes": "1048576"}
    assert args.group_setting == ["group.share.record.lock.duration.ms=15000"]
    assert args.broker_fields["node_id"] == 1
    assert args.static_configs["num.network.threads"] == "3"


def test_advertised_listeners_give_each_listener_its_host(tmp_path):
    args = _parsed(tmp_path, ["listeners=PLAINTEXT://127.0.0.1:9092,DOCKER://127.0.0.1:9094,CONTROLLER://:9093",
                              "controller.listener.names=CONTROLLER",
                              "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,DOCKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
                              "advertised.listeners=PLAINTEXT://localhost:9092,DOCKER://host.docker.internal:9094,"
                              "CONTROLLER://localhost:9093"], "--port", "9092")
    assert args.advertised_hosts == {"PLAINTEXT": "localhost", "DOCKER": "host.docker.internal"}
    assert _parsed(tmp_path, ["advertised.listeners=PLAINTEXT://example.com:9092"]).broker_fields == \
        {"advertised_host": "example.com"}


def test_finer_retention_units_win(tmp_path):
    args = _parsed(tmp_path, ["log.retention.hours=2", "log.retention.minutes=3"])
    assert args.topic_properties == {"log.retention.ms": "180000"}
    args = _parsed(tmp_path, ["log.retention.hours=2", "log.retention.ms=5"])
    assert args.topic_properties == {"log.retention.ms": "5"}


def test_an_option_and_its_kafka_name_must_agree(tmp_path):
    with pytest.raises(server_properties.ConfigError, match="--partitions 2 and num.partitions=6 disagree"):
        _parsed(tmp_path, ["num.partitions=6"], "--partitions", "2")
    assert _parsed(tmp_path, ["num.partitions=6"], "--partitions", "6").partitions == 6
    with pytest.raises(server_properties.ConfigError, match="--port 9093 and listeners=.* disagree"):
        _parsed(tmp_path, ["listeners=PLAINTEXT://127.0.0.1:9092"], "--port", "9093")
    assert _parsed(tmp_path, ["listeners=PLAINTEXT://127.0.0.1:9092"], "--port", "9092").listeners == \
        "PLAINTEXT://127.0.0.1:9092"


@pytest.mark.parametrize("line, words", [
    ("zookeeper.connect=localhost:2181", "ZooKeeper"),
    ("num.partiton=3", "not a Kafka 4.3 broker config"),
    ("process.roles=broker", "one process"),
    ("num.network.threads=abc", "not a valid int"),
    ("offsets.topic.num.partitions=0", "at least 1"),
    ("log.retention.ms=soon", "not a number"),
    ("authorizer.class.name=com.example.MyAuthorizer", "StandardAuthorizer"),
    ("advertised.listeners=PLAINTEXT://example.com:1234", "advertises the ports it listens on"),
])
def test_refused_configs_stop_the_start_with_their_name(tmp_path, line, words):
    with pytest.raises(server_properties.ConfigError) as e:
        _parsed(tmp_path, [line])
    assert line.split("=")[0] in str(e.value) and words in str(e.value)


def test_refused_configs_are_accepted_at_kafkas_default(tmp_path):
    refused = [n for n, e in TABLE.items() if e.kind == "refused" and not e.refuse_default
               and n in KAFKA_BROKER_CONFIGS and KAFKA_BROKER_CONFIGS[n].default not in (None, "")]
    assert refused, "some refused configs are accepted at Kafka's default"
    name = refused[0]
    args = _parsed(tmp_path, [f"{name}={KAFKA_BROKER_CONFIGS[name].default}"])
    assert args.static_configs == {name: KAFKA_BROKER_CONFIGS[name].default}


def test_describe_configs_reports_given_names_as_static_and_the_rest_as_default():
    config = BrokerConfig(static_configs={"num.network.threads": "8", "num.partitions": "1"}, default_partitions=1)
    entries = {r.name: r for r in broker_settings(config)}
    assert set(KAFKA_BROKER_CONFIGS) <= set(entries)
    assert (entries["num.network.threads"].raw, entries["num.network.threads"].source) == \
        ("8", Source.STATIC_BROKER_CONFIG)
    assert entries["num.partitions"].source == Source.STATIC_BROKER_CONFIG  # given, even at the default
    assert entries["num.io.threads"].source == Source.DEFAULT_CONFIG
    assert entries["auto.create.topics.enable"].source == Source.DEFAULT_CONFIG
    # a field kept in another unit is shown in the config's own (minutes, not ms)
    assert entries["offsets.retention.minutes"].raw == "10080"
    assert {r.name: r.raw for r in broker_settings(BrokerConfig(offsets_retention_ms=30 * 60_000))}[
        "offsets.retention.minutes"] == "30"


def test_docs_configs_md_is_the_table():
    from kshim.configs import docgen
    page = docgen.PAGE.read_text()
    assert docgen.rewritten(page) == page, "docs/configs.md differs from the table: python -m kshim.configs.docgen"
