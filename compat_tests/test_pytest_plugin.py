"""The kshim pytest plugin (kshim.testing.plugin) as a user runs it: pytest on examples/pytest_kshim,
in a directory outside this project (none of its conftest applies), loading the plugin by name."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kshim.testing import KshimBroker, KshimCluster

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "pytest_kshim" / "test_with_kshim.py"


def processes_using(directory: Path) -> list[int]:
    """PIDs whose command line names the directory (the brokers the plugin started there)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(directory) in proc.joinpath("cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_the_example_suite_passes_with_the_plugin(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # -p no:kshim: where kshim is installed its entry point registers the plugin as "kshim"; this
    # run loads this checkout's plugin by module name instead, once
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:kshim", "-p", "kshim.testing.plugin",
                          "-p", "no:cacheprovider",
                          "--basetemp", str(tmp_path / "basetemp"), str(tmp_path / EXAMPLE.name)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout
    assert not processes_using(tmp_path / "basetemp"), "a broker the plugin started is still running"


def test_the_plugin_is_registered_as_a_pytest11_entry_point():
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.entry-points.pytest11]\nkshim = "kshim.testing.plugin"' in text


def test_a_broker_starts_and_stops_cleanly_in_its_own_directory(tmp_path):
    started = time.monotonic()
    with KshimBroker(tmp_path / "b", "--partitions", "2") as broker:
        assert broker.bootstrap.startswith("127.0.0.1:") and broker.ready_s <= time.monotonic() - started
        assert broker.faults.list() == []
    assert broker.stop() == 0  # stopped on leaving the block: a second stop finds it gone, exit code 0
    assert not (tmp_path / "b" / "broker.sock").exists()


def test_a_cluster_starts_on_free_ports_and_stops_cleanly(tmp_path):
    with KshimCluster(tmp_path / "c", 2) as cluster:
        assert len(cluster.bootstrap.split(",")) == 2
        assert [r["node"] for r in cluster.faults.add("drop", api="Metadata", count=1)] == [0, 1]
    assert cluster.stop() == 0 and not processes_using(tmp_path / "c")
