"""A 3-broker cluster whose replication runs over a SASL_SSL inter-broker listener (SCRAM-SHA-512,
the cluster's development CA), with a PLAINTEXT listener beside it: clients on either listener
see their own listener's endpoints, the cluster survives a leader's SIGKILL, and `kshim ctl groups`
connects over the inter-broker listener."""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.cluster import Cluster, free_port_block, run_ctl, running
from compat_tests.kshim_process import wait_until
from compat_tests.raw_kafka import METADATA, RawConnection

pytestmark = pytest.mark.process


def test_replication_over_sasl_ssl_survives_a_leader_sigkill(tmp_path, topic_name):
    base = free_port_block(6)
    cluster = Cluster(tmp_path / "cluster", 3, "--listeners",
                      f"PLAINTEXT://127.0.0.1:{base},SASL_SSL://127.0.0.1:{base + 3}",
                      "--inter-broker-listener", "SASL_SSL", "--inter-broker-user", "broker",
                      "--sasl-user", "broker:broker-secret", "--sasl-user", "alice:alice-secret", "--tls-dev",
                      base_port=base)
    with running(cluster):
        ca = next(line.split(" in ", 1)[1] for line in cluster.process.output if line.startswith("kshim tls-dev:"))
        secure = {"bootstrap.servers": ",".join(f"127.0.0.1:{base + 3 + i}" for i in range(3)),
                  "security.protocol": "SASL_SSL", "ssl.ca.location": ca, "sasl.mechanism": "SCRAM-SHA-512",
                  "sasl.username": "alice", "sasl.password": "alice-secret"}
        # each listener advertises its own ports
        with RawConnection(cluster.bootstrap.split(",")[0]) as conn:
            md = conn.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})
        assert sorted(b.port for b in md.brokers) == [base, base + 1, base + 2]

        p = Producer({**secure, "acks": "all", "enable.idempotence": True})
        for i in range(200):
            p.produce(topic_name, value=f"a{i}".encode())
        assert p.flush(60) == 0
        # the group's first commit while all three brokers live: __consumer_offsets is created then,
        # with its replication factor of 3 (as in Kafka, its creation would wait for the third broker)
        c = Consumer({**secure, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic_name, 0, 0)])
        got: list[bytes] = []
        wait_until(lambda: got.extend(m.value() for m in c.consume(500, 0.5) if m.error() is None)
                   or len(got) >= 200, 60, message="the first records")
        c.commit(asynchronous=False)
        # the followers caught up over SASL_SSL, the only address brokers know each other by
        before = wait_until(lambda: (lambda part: len(part["isr"]) == 3 and part)(cluster.partition(topic_name)),
                            60, message="a full ISR")
        result = run_ctl(cluster.data_dir, "kill", str(before["leader"]))
        assert result.returncode == 0, result.stderr
        wait_until(lambda: cluster.partition(topic_name)["leader"] not in (before["leader"], -1), 60,
                   message="a new leader")
        for i in range(200):
            p.produce(topic_name, value=f"b{i}".encode())
        assert p.flush(60) == 0
        wait_until(lambda: got.extend(m.value() for m in c.consume(500, 0.5) if m.error() is None)
                   or len(got) >= 400, 60, message="every acknowledged record")
        c.commit(asynchronous=False)  # the group coordinator moved off the killed broker if it was there
        c.close()
        assert sorted(got) == sorted([f"a{i}".encode() for i in range(200)] + [f"b{i}".encode() for i in range(200)])
        result = run_ctl(cluster.data_dir, "start", str(before["leader"]))
        assert result.returncode == 0, result.stderr
        wait_until(lambda: len(cluster.partition(topic_name)["isr"]) == 3, 60,
                   message="the restarted broker back in the ISR, over SASL_SSL")
        # kshim ctl reaches the brokers over the SASL_SSL inter-broker listener, as the inter-broker user
        # (with every broker up: ctl reports a killed one and exits 1)
        result = run_ctl(cluster.data_dir, "groups")
        assert result.returncode == 0 and f"g-{topic_name}" in result.stdout, result.stdout + result.stderr
        assert sorted(b["port"] for b in json.loads(result.stdout)["brokers"]) == [base + 3, base + 4, base + 5]
        assert "broker-secret" not in cluster.process.logs() and "alice-secret" not in cluster.process.logs()
