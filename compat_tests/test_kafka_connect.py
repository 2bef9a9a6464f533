"""Kafka Connect (distributed mode, connect-runtime 4.3) runs on kshim as on Kafka: the worker
creates its three internal topics compacted, file connectors created through its REST API move
lines from a file through a topic into another file, and a restarted worker resumes from the
configs and offsets it stored in kshim, losing and repeating nothing."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from compat_tests import java_client
from compat_tests.connect_worker import ConnectWorker
from compat_tests.kshim_process import KshimProcess, wait_until

INTERNAL = ("connect-configs", "connect-offsets", "connect-status")
DEADLINE_S = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sink_caught_up(bootstrap: str) -> bool:
    """The sink connector's group (connect-file-sink) committed the end offset of every partition."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        committed = admin.list_group_offsets("connect-file-sink").get("connect-file-sink", {})
        ends = consumer.end_offsets(list(committed))
        return bool(committed) and all(committed[tp].offset == ends[tp] for tp in committed)
    finally:
        consumer.close()
        admin.close()


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def broker(tmp_path):
    java_client._require_tool("java")
    b = KshimProcess(tmp_path / "data").start()
    yield b
    b.kill()


def test_a_distributed_worker_runs_file_connectors_and_resumes_after_a_restart(broker, tmp_path):
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    first = [f"line {i}" for i in range(50)]
    source.write_text("".join(f"{line}\n" for line in first))
    worker = ConnectWorker(tmp_path / "connect", broker.bootstrap, free_port())
    try:
        worker.start()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
        try:
            assert set(INTERNAL) <= set(admin.list_topics())
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in INTERNAL])
            policies = {t: described["topic"][t]["cleanup.policy"]["value"] for t in INTERNAL}
            assert policies == {t: "compact" for t in INTERNAL}, policies
        finally:
            admin.close()
        worker.request("POST", "/connectors", {"name": "file-source", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
            "file": str(source), "topic": "lines"}})
        worker.request("POST", "/connectors", {"name": "file-sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "tasks.max": "1",
            "file": str(sink), "topics": "lines"}})
        wait_until(lambda: lines_of(sink) == first, DEADLINE_S, message=f"the sink file holds the {len(first)} lines")
        status = worker.request("GET", "/connectors/file-source/status")
        assert status["connector"]["state"] == "RUNNING" and [t["state"] for t in status["tasks"]] == ["RUNNING"]
        assert worker.stop() in (0, 130, 143), worker.tail()

        # while it is down, more lines arrive; a new worker finds its connectors and offsets in kshim
        more = [f"line {i}" for i in range(50, 80)]
        with source.open("a") as f:
            f.write("".join(f"{line}\n" for line in more))
        worker = ConnectWorker(tmp_path / "connect", broker.bootstrap, worker.rest_port)
        worker.start()
        assert sorted(worker.request("GET", "/connectors")) == ["file-sink", "file-source"]
        wait_until(lambda: len(lines_of(sink)) >= len(first) + len(more), DEADLINE_S,
                   message="the sink file holds the new lines")
        # once the sink committed the end of the topic, nothing more is on its way to the file
        wait_until(lambda: sink_caught_up(broker.bootstrap), DEADLINE_S, message="the sink committed the topic's end")
        assert lines_of(sink) == first + more, "lines lost or repeated across the restart"
    finally:
        worker.kill()
