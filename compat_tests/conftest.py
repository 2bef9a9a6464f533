"""Fixtures: a real kshim process per test module (or per test, for restart tests)."""
from __future__ import annotations

import gc
import re
import uuid

import pytest

from compat_tests.kshim_process import KshimProcess


@pytest.fixture(autouse=True)
def _collect_clients():
    """confluent-kafka clients caught in reference cycles (a delivery callback that closes over its
    producer, a traceback's frames) live on until the collector runs, retrying brokers that are gone
    and logging every second; collect them as each test ends."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def kshim(tmp_path_factory):
    """A broker shared by a module's tests; each test uses its own topic names."""
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-data"), "--partitions", "3").start()
    yield proc
    code = proc.terminate()
    assert code == 0, "kshim did not shut down cleanly:\n" + proc.logs()


@pytest.fixture
def fresh_kshim(tmp_path):
    """A broker of a test's own, for tests that restart or kill it."""
    proc = KshimProcess(tmp_path / "kshim-data", "--partitions", "3").start()
    yield proc
    proc.kill()


@pytest.fixture
def topic_name(request) -> str:
    return f"{re.sub(r'[^a-zA-Z0-9._-]', '-', request.node.name[:40])}-{uuid.uuid4().hex[:8]}"
