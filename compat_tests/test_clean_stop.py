"""A SIGTERMed `kshim serve` ends as it says: exit code 0, and "stopped cleanly" the last line it
logs, once nothing is left to do (an --ephemeral broker's data is deleted before it); a cluster's
supervisor logs no warning for the exits it asked for, and each broker's log ends with its own
clean stop. (The time from the line to the exit is measured by hand, not here: see the commit.)"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Producer

from compat_tests.cluster import Cluster
from compat_tests.kshim_process import KshimProcess

pytestmark = pytest.mark.process

DEADLINE_S = 30.0


def produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for i in range(10):
        producer.produce(topic, f"r{i}".encode())
    assert producer.flush(DEADLINE_S) == 0


def test_an_ephemeral_broker_deletes_its_data_then_says_it_stopped(topic_name):
    proc = KshimProcess(None)
    try:
        proc.start()
        data = Path(re.search(r"data in (\S+)", proc.ready_line).group(1))
        produce(proc.bootstrap, topic_name)
        assert any(data.rglob(f"{topic_name}-0"))  # its log is there while it runs
        assert proc.terminate() == 0
    finally:
        proc.kill()
    assert proc.output[-1].endswith(" INFO kshim: stopped cleanly"), proc.logs()
    assert not data.exists()


def test_a_cluster_stops_cleanly_with_no_warning(tmp_path, topic_name):
    cluster = Cluster(tmp_path / "cluster", 3)
    try:
        cluster.start()
        produce(cluster.bootstrap, topic_name)
        cluster.stop()  # exit code 0, and no process of it left
    finally:
        cluster.kill_everything()
    lines = cluster.process.output
    assert lines[-1].endswith(" INFO kshim: stopped cleanly"), cluster.process.logs()
    stopping = lines[next(i for i, line in enumerate(lines) if "received SIGTERM" in line):]
    assert not [line for line in stopping if " WARNING " in line or " ERROR " in line], "\n".join(stopping)
    for node in range(3):
        assert sum(f"broker {node} (pid" in line and "stopped with exit code 0" in line for line in stopping) == 1
        broker_log = (tmp_path / "cluster" / f"broker-{node}" / "broker.log").read_text().splitlines()
        assert broker_log[-1].endswith(f"broker {node} stopped cleanly"), broker_log[-5:]
