"""The kshim pytest plugin (entry point `pytest11: kshim`; without the package installed, load it
with `-p kshim.testing.plugin` or `pytest_plugins = ["kshim.testing.plugin"]`).

Fixtures:
- `kshim_broker`: a fresh `kshim serve` for the test, on a free port, data in a directory of its
  own; `.bootstrap`, `.faults` (FaultClient), `.requests` (RequestLogClient), `.data_dir`. The
  next test's broker starts in the background while a test runs, and the first one as soon as
  pytest collects a module that names `kshim_broker` (before importing it) or a test that uses it,
  so a test waits for none or for what is left of a start (a cold
  start is bound by Python importing kshim: docs/benchmarks.md, "Start time");
  `--kshim-no-spare` turns that off.
- `kshim_faults`, `kshim_requests`: the broker's fault rules and request log (marked at the test's
  start, so `kshim_requests.new()` gives this test's requests).
- `kshim_cluster`: a 3-broker `kshim serve --brokers 3` shared by the tests of a module (its fault
  rules are cleared after each test that used it).

Their data lives on tmpfs (/dev/shm where there is one: no disk writeback, nothing kept), in a
directory deleted after the broker stops, as `kshim serve --ephemeral` keeps it.
Options: `--kshim-arg=ARG` (repeatable) adds a serve option to every broker the fixtures start;
`--kshim-durable` keeps their data in pytest's temporary directories on disk instead.
"""
from __future__ import annotations

import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from kshim.log.ephemeral import ephemeral_dir  # the standard library only: no broker code
from kshim.testing import KshimBroker, KshimCluster

if TYPE_CHECKING:  # loaded with the first broker (kshim.testing): this module loads in every pytest run
    from kshim.ctl.faults import FaultClient, RequestLogClient


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kshim-arg", action="append", default=[], metavar="ARG",
                     help="an option for every `kshim serve` the kshim fixtures start (repeatable)")
    parser.addoption("--kshim-durable", action="store_true",
                     help="keep the fixtures' broker data in pytest's temporary directories on disk, not on tmpfs")
    parser.addoption("--kshim-no-spare", action="store_true",
                     help="start each test's broker when the test asks for it, not during the test before")


def _data_dir(durable: bool, tmp: pytest.TempPathFactory, name: str) -> Path:
    if durable:
        return tmp.mktemp(name)
    return ephemeral_dir(f"{name}-")


def _discard(data_dir: Path, durable: bool) -> None:
    """An ephemeral data directory goes once its broker stopped (pytest's own are kept)."""
    if not durable:
        shutil.rmtree(data_dir, ignore_errors=True)


def _extra(config: pytest.Config) -> list[str]:
    return list(config.getoption("--kshim-arg"))


class _Brokers:
    """Hands out started brokers, starting the next one in the background (one spare at most)."""

    def __init__(self, config: pytest.Config, tmp_path_factory: pytest.TempPathFactory | None) -> None:
        self.extra = _extra(config)
        self.tmp = tmp_path_factory  # None until the session fixture: only durable brokers need it
        self.durable = config.getoption("--kshim-durable")
        self.spare_wanted = not config.getoption("--kshim-no-spare")
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="kshim-spare")
        self.spare: Future[KshimBroker] | None = None

    def _start(self) -> KshimBroker:
        assert self.tmp is not None or not self.durable
        return KshimBroker(_data_dir(self.durable, self.tmp, "kshim"), *self.extra).start()  # type: ignore[arg-type]

    def prime(self) -> None:
        """Start the first broker now, in the background (see pytest_itemcollected)."""
        if self.spare is None and self.spare_wanted and not self.durable:
            self.spare = self.pool.submit(self._start)

    def take(self) -> KshimBroker:
        broker = self.spare.result() if self.spare is not None else self._start()
        self.spare = self.pool.submit(self._start) if self.spare_wanted else None
        return broker

    def close(self) -> None:
        if self.spare is not None:
            try:
                spare = self.spare.result()
                spare.stop()
                _discard(spare.data_dir, self.durable)
            except Exception:  # a spare that failed to start: nothing to stop, and no test used it
                pass
        self.pool.shutdown()


_BROKERS = pytest.StashKey[_Brokers]()


def _brokers(config: pytest.Config) -> _Brokers:
    if _BROKERS not in config.stash:
        config.stash[_BROKERS] = _Brokers(config, None)
    return config.stash[_BROKERS]


def pytest_collectstart(collector: pytest.Collector) -> None:
    """A test module that names `kshim_broker` starts a broker in the background before pytest
    imports it, so that the broker's start overlaps the module's imports (a Kafka client's, often
    a few tenths of a second), the rest of the collection and the tests before it."""
    if isinstance(collector, pytest.Module):
        try:
            named = "kshim_broker" in collector.path.read_text(errors="replace")
        except OSError:
            return
        if named:
            _brokers(collector.config).prime()


def pytest_itemcollected(item: pytest.Item) -> None:
    """Else the first collected test that uses `kshim_broker` (through a fixture of a conftest,
    say) starts it. A session whose selection drops that test stops the broker at its end."""
    if "kshim_broker" in getattr(item, "fixturenames", ()):
        _brokers(item.config).prime()


def pytest_sessionfinish(session: pytest.Session) -> None:
    brokers = session.config.stash.get(_BROKERS, None)
    if brokers is not None:
        brokers.close()  # the spare (under xdist, a worker that ran no kshim test has one too)
        del session.config.stash[_BROKERS]


@pytest.fixture(scope="session")
def _kshim_brokers(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> _Brokers:
    brokers = _brokers(pytestconfig)
    brokers.tmp = tmp_path_factory
    return brokers


@pytest.fixture
def kshim_broker(_kshim_brokers: _Brokers) -> Iterator[KshimBroker]:
    broker = _kshim_brokers.take()
    try:
        yield broker
    finally:
        code = broker.stop()
        _discard(broker.data_dir, _kshim_brokers.durable)
    assert code == 0, "kshim serve did not stop cleanly:\n" + broker.logs()[-5000:]


@pytest.fixture
def kshim_faults(kshim_broker: KshimBroker) -> FaultClient:
    return kshim_broker.faults


@pytest.fixture
def kshim_requests(kshim_broker: KshimBroker) -> RequestLogClient:
    log = kshim_broker.requests
    log.mark()
    return log


@pytest.fixture(scope="module")
def _kshim_module_cluster(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[KshimCluster]:
    durable = request.config.getoption("--kshim-durable")
    cluster = KshimCluster(_data_dir(durable, tmp_path_factory, "kshim-cluster"), 3, *_extra(request.config)).start()
    try:
        yield cluster
    finally:
        code = cluster.stop()
        _discard(cluster.data_dir, durable)
    assert code == 0, "kshim serve --brokers 3 did not stop cleanly:\n" + cluster.logs()[-5000:]


@pytest.fixture
def kshim_cluster(_kshim_module_cluster: KshimCluster) -> Iterator[KshimCluster]:
    yield _kshim_module_cluster
    _kshim_module_cluster.faults.clear()
