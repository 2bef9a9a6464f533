"""What a first hour with kshim runs into: `kshim --version`, `kshim ctl` against a single
`kshim serve`, `--json` everywhere, output piped into a reader that goes away, a killed or paused
broker in `ctl status` and `ctl groups`, and clean restarts that log nothing alarming."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import KshimProcess, wait_until


def kshim_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kshim", *args], capture_output=True, text=True, timeout=60)


def test_version():
    out = kshim_cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("kshim 0.")


def test_ctl_status_of_a_single_serve(kshim):
    producer = KafkaProducer(bootstrap_servers=kshim.bootstrap)
    producer.send("first-hour-status", b"x", partition=1).get(20)
    producer.close()
    out = run_ctl(kshim.data_dir, "status", "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert [(b["id"], b["alive"], b["port"]) for b in s["brokers"]] == [(0, True, kshim.port)]
    p1 = next(p for p in s["partitions"] if p["topic"] == "first-hour-status" and p["partition"] == 1)
    assert p1["leader"] == 0 and p1["replica_offsets"]["0"]["log_end_offset"] == 1
    table = run_ctl(kshim.data_dir, "status", "--table")
    assert table.returncode == 0 and "first-hour-status" in table.stdout
    refused = run_ctl(kshim.data_dir, "kill", "0", "--json")
    assert refused.returncode == 1 and "needs a cluster" in refused.stderr and "Traceback" not in refused.stderr


def test_ctl_groups_with_the_data_dir_of_a_single_serve(kshim):
    out = run_ctl(kshim.data_dir, "groups", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["brokers"][0]["port"] == kshim.port


def test_no_traceback_when_the_reader_of_the_output_goes_away(kshim):
    proc = subprocess.Popen([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(kshim.data_dir), "status"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before the command has written anything: its first write fails with EPIPE
    stderr = proc.stderr.read()
    assert proc.wait(60) == 0 and stderr == ""


def test_no_ctl_target_is_one_clear_line(tmp_path):
    out = run_ctl(tmp_path, "status")
    assert out.returncode == 1 and "no kshim is running" in out.stderr and len(out.stderr.splitlines()) == 1


def test_clean_restart_of_a_single_serve_logs_no_fencing(tmp_path):
    broker = KshimProcess(tmp_path / "data", "--partitions", "2").start()
    try:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        producer.send("restarted", b"x").get(20)
        producer.close()
        assert broker.terminate() == 0
        broker.output.clear()
        broker.start()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        assert producer.send("restarted", b"y", partition=0).get(20).offset >= 0
        producer.close()
        assert broker.terminate() == 0
    finally:
        broker.kill()
    logs = broker.logs()
    assert "fenced" not in logs and "WARNING" not in logs and "leader -1" not in logs, logs


def test_cluster_killed_broker_paused_coordinator_and_clean_restart(tmp_path):
    data = tmp_path / "cluster"
    with running(Cluster(data, 2)) as cluster:
        # a killed broker is down in `ctl status` at once, not after the session timeout
        killed = run_ctl(data, "kill", "1", "--json")
        assert killed.returncode == 0 and json.loads(killed.stdout)["node"] == 1
        assert not cluster.broker(1)["alive"]
        assert run_ctl(data, "start", "1").returncode == 0
        wait_until(lambda: cluster.broker(1)["alive"], message="broker 1 back")

        # a group whose coordinator is paused: ctl groups names the broker, fast, and fails
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic("paused-coordinator", 1, 2)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        producer.send("paused-coordinator", b"x").get(20)
        producer.close()
        consumer = KafkaConsumer("paused-coordinator", bootstrap_servers=cluster.bootstrap, group_id="g-paused",
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        # one poll long enough for the whole rebalance: kafka-python 3.0.12 never applies an
        # assignment whose rejoin (its metadata arriving after the first join) was in flight when
        # an earlier poll's timeout ran out, and the consumer then waits forever
        wait_until(lambda: consumer.poll(5000), message="the record, through the group")
        consumer.commit()  # the group keeps its offsets after its member leaves: it is listed
        consumer.close()
        report = json.loads(run_ctl(data, "groups").stdout)
        [group] = [g for g in report["groups"] if g["group_id"] == "g-paused"]
        node = group["coordinator"]["node_id"]
        assert run_ctl(data, "pause", str(node)).returncode == 0
        try:
            started = time.monotonic()
            out = run_ctl(data, "groups", "--table")
            assert time.monotonic() - started < 10  # ctl waits for no request timeout (10 s)
            assert out.returncode == 1 and f"broker {node}" in out.stderr and "paused" in out.stderr
            assert "no groups\n" not in out.stdout and "Traceback" not in out.stderr
        finally:
            assert run_ctl(data, "resume", str(node)).returncode == 0
        # a healthy cluster stops: every replica back in sync (a partition whose only in-sync replica
        # is down is rightly leaderless, leader -1, until that replica returns)
        wait_until(lambda: all(len(p["isr"]) == len(p["replicas"]) for p in cluster.status()["partitions"]),
                   timeout=60, message="every replica in sync again")
    process_logs = [data / "controller" / "controller.log", data / "broker-0" / "broker.log",
                    data / "broker-1" / "broker.log"]
    logs_before = {p: p.read_text() for p in process_logs}
    with running(Cluster(data, 2, base_port=cluster.base_port)) as again:
        wait_until(lambda: all(b["alive"] for b in again.status()["brokers"]), message="both brokers back")
    for path, before in logs_before.items():
        after = path.read_text()[len(before):]
        assert "fenced" not in after and "leader -1" not in after, f"{path}:\n{after}"

