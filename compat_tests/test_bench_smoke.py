"""The benchmark commands still run (docs/benchmarks.md): a short run of bench/throughput.py against
kshim in ephemeral mode and librdkafka's mock side by side prints its table, and so does
bench/share_groups.py (share consumers against a classic group); the restart row (a few hundred
partitions here) prints its own. Benchmarks stay
benchmarks: no speed is asserted here, only that the command works and reports every column."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOCK = ROOT.parent / "shared" / "peers" / "mock_broker.py"


def test_the_throughput_benchmark_runs_and_prints_its_table():
    peer = ["--peer-mock"] if MOCK.is_file() else []
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "throughput.py"), *peer, "--ephemeral",
                          "--messages", "2000", "--value-size", "256", "--timeout", "60", "--startup-timeout", "60",
                          "--restart-partitions", "200", "--floor-mb", "5"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    header = next(line for line in lines if line.startswith("target"))
    for column in ("produce MB/s", "consume MB/s", "cpu s/200MB prod", "cpu s/200MB cons"):
        assert column in header
    assert any(line.startswith("kshim ") for line in lines)
    if peer:
        assert any(line.startswith("ratio ") for line in lines)
    assert "kshim log ephemeral (tmpfs)" in run.stdout
    assert "| partitions | sigterm_s | clean_ready_s |" in run.stdout  # the restart row (bench/restart.py)
    assert "| sendfile |" in run.stdout and "| pread+send |" in run.stdout  # the floor (bench/loopback_floor.py)


def test_the_transactions_benchmark_runs_and_prints_its_table(tmp_path):
    """bench/transactions_v2.py: kshim v2, kshim v1 and (when present) the mock side by side, one
    short measurement each, prints its markdown table and JSON. No rate is asserted."""
    targets = "kshim v2,kshim v1" + (",mock" if MOCK.is_file() else "")
    out = tmp_path / "txn.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "transactions_v2.py"), "--seconds", "1",
                          "--sizes", "1,100", "--targets", targets, "--json", str(out)],
                         capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    header = next(line for line in run.stdout.splitlines() if line.startswith("| records/txn"))
    for target in targets.split(","):
        assert f" {target} " in header
    if MOCK.is_file():
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
