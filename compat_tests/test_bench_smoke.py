"""The benchmark commands still run (docs/benchmarks.md): bench/suite.py --quick, issue 18's one
command (throughput durable and ephemeral, small records, 1,000 partitions, latency at fixed rates,
acks=all on RF 3, transactions, a restart of 100 partitions, the kernel's floor, small requests
per second from a raw client), side by
side with librdkafka's mock, prints every table and its summary, and so does bench/share_groups.py
(share consumers against a classic group), and bench/txn_cycle.py (a transaction through the
handlers, in one process). Benchmarks stay
benchmarks: no speed is asserted here, only that the command works and reports every column."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_suite_runs_every_row_and_prints_its_summary(tmp_path):
    """bench/suite.py --quick: issue 18's one command, each script briefly, side by side with the mock
    (bench/mock_cluster.py: librdkafka's mock cluster from the confluent-kafka the tests install)."""
    out = tmp_path / "suite.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "suite.py"), "--quick", "--json", str(out)],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = run.stdout
    header = next(line for line in text.splitlines() if line.startswith("target"))
    for column in ("produce MB/s", "consume MB/s", "cpu s/200MB prod", "cpu s/200MB cons"):
        assert column in header  # bench/throughput.py's table
    assert "kshim log ephemeral (tmpfs)" in text
    assert "| sendfile |" in text and "| pread+send |" in text  # the floor (bench/loopback_floor.py)
    assert "| fresh |" in text and "| recycled |" in text  # the page-cache floor (bench/pagecache_floor.py)
    assert "| records/s | target | ack p50 ms |" in text  # bench/latency.py
    assert "| partitions | sigterm_s | clean_ready_s |" in text  # bench/restart.py
    assert "| api | mode | kshim req/s | mock req/s | ratio kshim/mock |" in text  # bench/requests.py
    summary = json.loads(out.read_text())["summary"]
    rows = {r["row"] for r in summary}
    for row in ("produce MB/s, durable log, 1 KiB", "consume MB/s, ephemeral, 100 B",
                "broker CPU s per 200 MB produced, durable", "produce at 100 partitions / at 4",
                "end-to-end p99 ms at 20000/s", "acks=all / acks=1 MB/s, RF 3 (kshim's own)",
                "transactions/s, 1000 records each", "SIGTERM to exit, 100 partitions, s",
                "create 100 partitions, CreateTopics of 1,000, s",
                "a record into each of 500 sampled of 100 partitions, read back",
                "kernel floor: CPU s per 200 MB written into new page-cache pages, fresh / just-freed memory",
                "produce, share of the client's ceiling (a broker that only acknowledges), durable log, 1 KiB"):
        assert row in rows, sorted(rows)
    assert "| row | kshim | peer | ratio | target |" in text
    ceiling = next(r for r in summary if r["row"].startswith("produce, share of the client's ceiling") and
                   "1 KiB" in r["row"])
    assert ceiling["kshim"] != "-" and "ceiling: -" not in ceiling["target"], ceiling  # bench/null_broker.py ran
    per_request = {r["row"]: r for r in summary if r["row"].startswith("requests/s, ")}  # bench/requests.py
    for api in ("ApiVersions v0", "Metadata v1", "FindCoordinator v2", "Heartbeat v3", "OffsetCommit v7"):
        for mode in ("pipelined, 64 in flight", "one at a time, 1 connection", "64 connections, 1 at a time each"):
            row = per_request[f"requests/s, {api}, {mode}"]
            assert row["kshim"] != "-" and row["peer"] != "-" and row["ratio"] != "-", row


def test_the_transactions_benchmark_runs_and_prints_its_table(tmp_path):
    """bench/transactions_v2.py: kshim v2, kshim v1 and the mock (behind its relay for the Java
    client) side by side, one short measurement each, prints its markdown table and JSON. No rate
    is asserted."""
    targets = "kshim v2,kshim v1,mock"
    out = tmp_path / "txn.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "transactions_v2.py"), "--seconds", "1",
                          "--sizes", "1,100", "--targets", targets, "--json", str(out)],
                         capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    header = next(line for line in run.stdout.splitlines() if line.startswith("| records/txn"))
    for target in targets.split(","):
        assert f" {target} " in header
    assert "kshim v2 / mock" in header
    rows = [line for line in run.stdout.splitlines() if line.startswith("| 1 ") or line.startswith("| 100 ")]
    assert len(rows) == 2 and "failed" not in "".join(rows), run.stdout
    print(run.stdout)


def test_the_share_group_benchmark_runs_and_prints_its_table(tmp_path):
    """bench/share_groups.py: share consumers (confluent-kafka's ShareConsumer and the raw loop)
    against a classic group on the same topic, side by side; a table row and a JSON entry each."""
    out = tmp_path / "share.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "share_groups.py"), "--records", "2000",
                          "--deadline", "60", "--startup-timeout", "60", "--json", str(out)],
                         capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    print(run.stdout)
    assert "| mode | records/s | / classic |" in run.stdout
    for mode in ("classic", "share", "share-raw"):
        assert any(line.startswith(f"| {mode} |") for line in run.stdout.splitlines()), mode
    assert set(json.loads(out.read_text())["best"]) == {"classic", "share", "share-raw"}


def test_the_transaction_cycle_benchmark_runs_and_prints_its_parts():
    """bench/txn_cycle.py: a standalone broker's handlers driven through whole transactions in
    one process; it fails (exit status) if any answer carries an error or a transaction does not
    complete, and prints the CPU per transaction and per part."""
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "txn_cycle.py"), "--cycles", "30", "--records", "10"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    print(run.stdout)
    line = run.stdout.strip()
    assert "us CPU per transaction (4 partitions, 10 records per batch;" in line
    for part in ("add_partitions_to_txn", "produce", "end_txn", "completion"):
        assert f"{part} " in line, part
