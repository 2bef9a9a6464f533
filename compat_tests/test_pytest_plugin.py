"""The kshim pytest plugin (kshim.testing.plugin) as a user runs it: pytest on examples/pytest_kshim,
in a directory outside this project (none of its conftest applies), loading the plugin by name."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from importlib.metadata import entry_points
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from kshim.testing import KshimBroker, KshimCluster, plugin

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


SPARE_HANDOVER_S = 0.5  # a handed-over spare takes milliseconds; a cold start about a second here

# A collection that lasts as long as a broker's start (a suite of many modules): the plugin started
# a broker when it collected the first test that uses one, so that test finds it ready
SLOW_COLLECTION = """
import time
from kshim.testing import plugin

def pytest_collection_finish(session):
    brokers = session.config.stash[plugin._BROKERS]  # KeyError: no broker was started at collection
    deadline = time.monotonic() + 60
    while not brokers.spare.done() and time.monotonic() < deadline:
        time.sleep(0.05)
"""


def test_the_example_suite_passes_with_the_plugin(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    (tmp_path / "conftest.py").write_text(SLOW_COLLECTION)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # -p no:kshim: where kshim is installed its entry point registers the plugin as "kshim"; this
    # run loads this checkout's plugin by module name instead, once
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:kshim", "-p", "kshim.testing.plugin",
                          "-p", "no:cacheprovider", "--durations=0", "--durations-min=0",
                          "--basetemp", str(tmp_path / "basetemp"), str(tmp_path / EXAMPLE.name)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout
    # the first test's broker started during the collection; the second test's while the first test
    # ran (it lasts over 5 s: its consumer waits out consumer_timeout_ms): each setup only hands a
    # started broker over, no cold start waited for
    setups = {line.split("::")[-1]: float(line.split("s", 1)[0]) for line in out.stdout.splitlines()
              if " setup " in line and "::" in line}
    assert setups["test_produce_and_consume"] < SPARE_HANDOVER_S, out.stdout
    assert setups["test_the_producer_retries_a_not_leader_error"] < SPARE_HANDOVER_S, out.stdout
    assert not processes_using(tmp_path / "basetemp"), "a broker the plugin started is still running"


def test_the_plugin_is_registered_as_a_pytest11_entry_point(pytestconfig):
    """Installed, kshim names its plugin in pytest's entry point group: the entry point loads the
    plugin module with its fixtures, and pytest (which this run was given no -p for) loaded it."""
    entries = [e for e in entry_points(group="pytest11") if e.name == "kshim"]
    assert entries and {e.value for e in entries} == {"kshim.testing.plugin"}, entries
    loaded = entries[0].load()
    assert loaded is plugin
    assert {"kshim_broker", "kshim_cluster", "kshim_faults", "kshim_requests"} <= set(vars(loaded))
    assert pytestconfig.pluginmanager.get_plugin("kshim") is plugin


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


# A fixture broker's CPU seconds from exec to its ready line (docs/benchmarks.md, "Start time"):
# CPU, not wall time, since a loaded machine stretches the wall clock. Generous: it fails a start
# grown far past what bench/start.py measures, not the noise.
READY_CPU_BOUND_S = 2.5


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_fixture_broker_starts_in_bounded_cpu_and_its_lazily_loaded_handlers_answer_first_requests(tmp_path):
    with KshimBroker(tmp_path / "b", "--group-initial-rebalance-delay-ms", "0") as broker:
        assert cpu_s(broker.pid) < READY_CPU_BOUND_S, broker.logs()
        # first requests of several APIs at once, from two clients: each handler module is
        # imported on its API's first request (kshim.net.handlers), none may be seen half loaded
        conf = {"bootstrap.servers": broker.bootstrap}
        errors: list[BaseException] = []

        def describe() -> None:
            try:
                assert AdminClient(conf).describe_cluster(request_timeout=20).result(30).nodes
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        side = threading.Thread(target=describe)
        side.start()
        producer = Producer({**conf, "enable.idempotence": True})
        producer.produce("first", b"v", key=b"k")
        assert producer.flush(30) == 0
        side.join(60)
        assert not side.is_alive() and errors == []
        consumer = Consumer({**conf, "group.id": "g", "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["first"])
            deadline = time.monotonic() + 30
            msg = None
            while msg is None and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is not None and msg.error():
                    msg = None
            assert msg is not None and (msg.key(), msg.value()) == (b"k", b"v")
        finally:
            consumer.close()
