"""A compacted topic with the Apache Kafka Java client (KshimClient): transactions committed and
aborted by the Java producer, `kshim ctl compact`, then the Java consumer reads the cleaned log
(with its offset gaps) under both isolation levels, and the producer goes on.
"""
from __future__ import annotations

import pytest

from compat_tests.java_client import JavaClient, build
from compat_tests.kshim_process import KshimProcess
from compat_tests.test_compaction import active_base, create, ctl_compact

PLAN = "commit:10,abort:10," * 6 + "commit:10"  # 13 transactions of 10 records, keys unique per step


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-client"))


@pytest.fixture
def broker(tmp_path):
    proc = KshimProcess(tmp_path / "kshim-data", "--log-cleaner-backoff-ms", "3600000").start()
    yield proc
    proc.kill()


def read(java: JavaClient, broker: KshimProcess, topic: str, isolation: str) -> list[tuple[int, str, str]]:
    result = java.run("consume", broker.bootstrap, topic, "-", 0, "--assign", "--until-end",
                      "--isolation", isolation, "--extra-ms", 300)
    assert result.of("extra") == [], f"{isolation}: records past the end offsets"
    return [(r["offset"], r["key"], r["value"]) for r in result.of("record")]


def test_java_transactions_on_a_compacted_topic_after_a_clean(java, broker):
    topic = "java-compacted-txns"
    create(broker, topic, {"segment.bytes": "2048"})
    steps = java.run("txn", broker.bootstrap, "java-compacted", topic, PLAN).of("txn")
    sent = {r["key"]: (r["offset"], s["outcome"]) for s in steps for r in s["records"]}
    committed = sorted((o, k) for k, (o, outcome) in sent.items() if outcome == "commit")
    assert len({o for o, _ in sent.values()}) == 130
    before = read(java, broker, topic, "read_uncommitted")
    assert len(before) == 130  # read_uncommitted sees the aborted records before the clean

    result = ctl_compact(broker, topic)
    assert result.returncode == 0, result.stdout + result.stderr
    base = active_base(broker, topic)
    assert base > 100  # most transactions are in cleaned segments
    uncleaned_aborts = sorted((o, k) for k, (o, outcome) in sent.items() if outcome == "abort" and o >= base)

    # every committed record at the offset it was acknowledged at; no aborted one below the
    # active segment, whatever the isolation level
    got = read(java, broker, topic, "read_committed")
    assert [(o, k) for o, k, _ in got] == committed
    assert all(v.startswith("commit-") for _, _, v in got)
    got = read(java, broker, topic, "read_uncommitted")
    assert [(o, k) for o, k, _ in got] == sorted(committed + uncleaned_aborts)

    # the producer (a new instance of the same transactional id) fences the old one and goes on
    more = java.run("txn", broker.bootstrap, "java-compacted", topic, "abort:3,commit:3").of("txn")
    assert [s["outcome"] for s in more] == ["abort", "commit"]
    got = read(java, broker, topic, "read_committed")
    assert [(o, k) for o, k, _ in got[:len(committed)]] == committed
    assert [o for o, _, _ in got[len(committed):]] == [r["offset"] for r in more[1]["records"]]
