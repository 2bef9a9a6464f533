"""Client quotas with the Apache Kafka Java Admin client (kafka-clients 4.x): alterClientQuotas
and describeClientQuotas against a real kshim process, and the errors a Java user sees for bad
input (enforcement is measured with librdkafka in test_quotas.py). Each step batches its admin
operations into one JVM run (see compat_tests/java_client.py)."""
from __future__ import annotations

import uuid

import pytest

from compat_tests.java_client import JavaClient, build


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-client"))


def entries(result) -> dict:
    return {tuple(sorted(e["entity"].items())): e["values"] for e in result.one("quotas")["entries"]}


def test_java_admin_alters_and_describes_client_quotas(java, kshim):
    user = f"j-{uuid.uuid4().hex[:6]}"
    done = java.run("admin", kshim.bootstrap,
                    "alter-quota", f"user={user},client-id=<default>", "producer_byte_rate=1048576",
                    "request_percentage=12.5", ",",
                    "alter-quota", f"user={user}", "consumer_byte_rate=2048", ",",
                    "alter-quota", "client-id=java-app", "producer_byte_rate=4096", "validate-only", ",",
                    "describe-quotas", f"user={user}", ",",
                    "describe-quotas", "strict", f"user={user}", ",",
                    "describe-quotas", f"user={user}", "client-id=<default>", ",",
                    "describe-quotas", "client-id=java-app")
    assert [line["type"] for line in done.of("quota-altered")] == ["quota-altered"] * 3
    described = done.of("quotas")
    assert {tuple(sorted(e["entity"].items())): e["values"] for e in described[0]["entries"]} == {
        (("client-id", "<default>"), ("user", user)): {"producer_byte_rate": 1048576.0, "request_percentage": 12.5},
        (("user", user),): {"consumer_byte_rate": 2048.0}}
    assert [e["entity"] for e in described[1]["entries"]] == [{"user": user}]
    assert [e["entity"] for e in described[2]["entries"]] == [{"client-id": "<default>", "user": user}]
    assert described[3]["entries"] == []  # validate-only stored nothing

    removed = java.run("admin", kshim.bootstrap, "alter-quota", f"user={user}", "consumer_byte_rate=-", ",",
                       "describe-quotas", "strict", f"user={user}")
    assert entries(removed) == {}


def test_java_admin_gets_kafkas_errors(java, kshim):
    bad = java.run("admin", kshim.bootstrap,
                   "alter-quota", "group=g", "producer_byte_rate=1", ",",
                   "alter-quota", "client-id=c", "no_such_rate=1", ",",
                   "alter-quota", "client-id=c", "consumer_byte_rate=0", ",",
                   "alter-quota", "client-id=c", "consumer_byte_rate=1.5", ",",
                   "alter-quota", "ip=127.0.0.1", "producer_byte_rate=100", ",",
                   "describe-quotas", "group")
    errors = bad.of("quota-error")
    assert [e["error"] for e in errors[:5]] == ["InvalidRequestException"] * 5
    assert "Unhandled client quota entity type: group" in errors[0]["message"]
    assert "Invalid configuration key no_such_rate" in errors[1]["message"]
    assert "must be greater than 0" in errors[2]["message"]
    assert "cannot be a fractional value" in errors[3]["message"]
    assert errors[5]["error"] == "UnsupportedVersionException"
