"""The benchmark command still runs (docs/benchmarks.md): a short run of bench/throughput.py against
kshim in ephemeral mode and librdkafka's mock side by side prints its table, and the restart row
(a few hundred partitions here) prints its own. Benchmarks stay
benchmarks: no speed is asserted here, only that the command works and reports every column."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOCK = ROOT.parent / "shared" / "peers" / "mock_broker.py"


def test_the_throughput_benchmark_runs_and_prints_its_table():
    peer = ["--peer-mock"] if MOCK.is_file() else []
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "throughput.py"), *peer, "--ephemeral",
                          "--messages", "2000", "--value-size", "256", "--timeout", "60", "--startup-timeout", "60",
                          "--restart-partitions", "200"],
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
