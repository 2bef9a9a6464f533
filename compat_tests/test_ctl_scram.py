"""`kshim ctl scram add/list/delete` as a real subprocess against a single `kshim serve` and a
2-broker cluster, each with a PLAINTEXT listener (ctl's, the inter-broker one) and a SASL_PLAINTEXT
one: a user added with ctl authenticates with SCRAM-SHA-256 in confluent-kafka on every broker,
`list` shows it, and once `delete` removed it the client's authentication fails. A SASL listener
without users warns once at start, and no longer once a user exists (stored credentials come with
the first metadata image)."""
from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests.cluster import Cluster, free_port_block, running
from compat_tests.kshim_process import KshimProcess, wait_until

pytestmark = pytest.mark.process

PASSWORD = "alice-secret"
DEADLINE_S = 30.0


def ctl(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(data_dir), "scram", *args],
                          input=stdin, capture_output=True, text=True, timeout=120)


def sasl_addresses(output: list[str]) -> list[str]:
    """The SASL_PLAINTEXT listener of every broker, from the `kshim listener` lines."""
    urls = next(line.split(" ", 2)[2] for line in output if line.startswith("kshim listener SASL_PLAINTEXT://"))
    return [url.split("://", 1)[1] for url in urls.split(",")]


def settings(address: str, password: str = PASSWORD) -> dict:
    return {"bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice", "sasl.password": password, "log_level": 0}


def login(address: str) -> str:
    """"ok" once the broker at `address` answered alice's Metadata request; "refused" once
    librdkafka reported that the broker refused her authentication."""
    errors: list[KafkaError] = []
    admin = AdminClient({**settings(address), "error_cb": errors.append})

    def outcome() -> str | None:
        try:
            admin.list_topics(timeout=0.5)
            return "ok"
        except KafkaException:
            admin.poll(0)  # delivers the errors to error_cb
            return "refused" if any(e.code() == KafkaError._AUTHENTICATION for e in errors) else None

    return wait_until(outcome, DEADLINE_S, message=f"alice's login at {address} to succeed or fail")


@contextmanager
def single(tmp_path: Path) -> Iterator[tuple[Path, list[str], KshimProcess]]:
    proc = KshimProcess(tmp_path / "data", "--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0").start()
    try:
        yield proc.data_dir, sasl_addresses(proc.output), proc
        assert proc.terminate() == 0, proc.logs()
    finally:
        proc.kill()


@contextmanager
def cluster(tmp_path: Path) -> Iterator[tuple[Path, list[str], KshimProcess]]:
    base = free_port_block(4)
    c = Cluster(tmp_path / "cluster", 2, "--listeners",
                f"PLAINTEXT://127.0.0.1:{base},SASL_PLAINTEXT://127.0.0.1:{base + 2}", base_port=base)
    with running(c):
        yield c.data_dir, sasl_addresses(c.process.output), c.process


@pytest.mark.parametrize("kind", [single, cluster], ids=["single", "cluster"])
def test_a_user_added_with_ctl_authenticates_until_deleted(tmp_path, topic_name, kind):
    with kind(tmp_path) as (data_dir, addresses, proc):
        assert login(addresses[0]) == "refused"  # no such user yet
        added = ctl(data_dir, "add", "alice", "--mechanism", "SCRAM-SHA-256", "--password-stdin", stdin=PASSWORD + "\n")
        assert added.returncode == 0, added.stderr
        assert "alice" in added.stdout and PASSWORD not in added.stdout
        for address in addresses:  # every broker, once it applied the new metadata
            wait_until(lambda: login(address) == "ok", DEADLINE_S, message=f"alice authenticated at {address}")
        everyone = ",".join(addresses)
        producer = Producer(settings(everyone))
        producer.produce(topic_name, b"as alice", partition=0)
        assert producer.flush(DEADLINE_S) == 0
        consumer = Consumer({**settings(everyone), "group.id": f"g-{topic_name}"})
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        got = wait_until(lambda: [m for m in consumer.consume(1, 0.5) if m.error() is None], DEADLINE_S,
                         message="alice's record read back")
        consumer.close()
        assert got[0].value() == b"as alice"

        listed = ctl(data_dir, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["users"] == [
            {"user": "alice", "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]}]
        table = ctl(data_dir, "list", "alice").stdout.splitlines()
        assert table[1].split() == ["alice", "SCRAM-SHA-256", "4096"]

        deleted = ctl(data_dir, "delete", "alice", "--mechanism", "SCRAM-SHA-256")
        assert deleted.returncode == 0, deleted.stderr
        for address in addresses:
            wait_until(lambda: login(address) == "refused", DEADLINE_S, message=f"alice refused at {address}")
        empty = ctl(data_dir, "list")
        assert empty.returncode == 0 and empty.stdout.strip() == "no SCRAM users", empty.stdout + empty.stderr
        assert PASSWORD not in proc.logs()


def test_errors_are_one_line_and_exit_1(tmp_path):
    with single(tmp_path) as (data_dir, _, _):
        gone = ctl(data_dir, "delete", "nobody", "--mechanism", "SCRAM-SHA-512")
        assert (gone.returncode, gone.stderr) == (1, "kshim ctl scram: nobody has no SCRAM-SHA-512 credential\n")
        weak = ctl(data_dir, "add", "bob", "--mechanism", "SCRAM-SHA-256", "--password", "pw", "--iterations", "100")
        assert weak.returncode == 1 and weak.stderr.count("\n") == 1, weak.stderr
        assert "UNACCEPTABLE_CREDENTIAL" in weak.stderr and "4096" in weak.stderr
        unknown = ctl(data_dir, "list", "nobody")
        assert (unknown.returncode, unknown.stderr) == (1, "kshim ctl scram: nobody has no SCRAM credential\n")
    nothing = ctl(tmp_path / "nowhere", "list")
    assert nothing.returncode == 1 and nothing.stderr.count("\n") == 1 and "no kshim is running" in nothing.stderr


# -- the start-up warning of a SASL listener without users ---------------------------------------
def no_users_warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if " WARNING " in line and "has no SASL user" in line]


def test_a_sasl_listener_without_users_warns_once_until_a_user_exists(tmp_path):
    proc = KshimProcess(tmp_path / "data", "--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0")
    try:
        proc.start()
        warned = no_users_warnings(proc.logs())
        assert len(warned) == 1, proc.logs()
        assert "listener SASL_PLAINTEXT" in warned[0]
        assert f"kshim ctl --data-dir {proc.data_dir} scram add NAME --mechanism SCRAM-SHA-256" in warned[0]
        added = ctl(proc.data_dir, "add", "alice", "--mechanism", "SCRAM-SHA-256", "--password-stdin", stdin=PASSWORD)
        assert added.returncode == 0, added.stderr
        assert proc.terminate() == 0
        proc.output.clear()
        proc.start()  # the stored credential comes with the first image
        assert proc.terminate() == 0
        assert no_users_warnings(proc.logs()) == [] and "stopped cleanly" in proc.logs(), proc.logs()
    finally:
        proc.kill()


def test_a_cluster_broker_warns_after_its_first_image_only_without_credentials(tmp_path):
    """A cluster's broker has its stored SCRAM credentials only once it registered: each warns in
    its broker.log without any; one restarted after `ctl scram add` does not."""
    base = free_port_block(4)
    c = Cluster(tmp_path / "cluster", 2, "--listeners",
                f"PLAINTEXT://127.0.0.1:{base},SASL_PLAINTEXT://127.0.0.1:{base + 2}", base_port=base)
    with running(c):
        logs = [c.data_dir / f"broker-{i}" / "broker.log" for i in range(2)]
        for log in logs:
            warned = wait_until(lambda: no_users_warnings(log.read_text()), DEADLINE_S, message=f"the warning in {log}")
            assert len(warned) == 1 and f"kshim ctl --data-dir {c.data_dir} scram add" in warned[0]
        added = ctl(c.data_dir, "add", "alice", "--mechanism", "SCRAM-SHA-256", "--password-stdin", stdin=PASSWORD)
        assert added.returncode == 0, added.stderr
        for command in ("kill", "start"):
            done = subprocess.run([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(c.data_dir), command, "1"],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
        # the section of its last start, once it serves: after its first image
        restarted = wait_until(lambda: (lambda last: "listening on" in last and last)(
            logs[1].read_text().rsplit("--- ", 1)[1]), DEADLINE_S, message="broker 1 serving again")
        assert "starting broker 1" in restarted
        assert no_users_warnings(restarted) == []
