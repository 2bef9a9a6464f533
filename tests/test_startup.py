"""What `kshim serve` loads at start (docs/benchmarks.md, "Start time"): `import kshim.cli` leaves
out what a run may not need, each loaded where it is used (tests/test_layers.py LAZY_IMPORTS says
why): cryptography (TLS listeners), prometheus_client (the first /metrics scrape), kshim ctl's
commands and clients, importlib.metadata (--version; the crc32c package's __init__ asks it for
its version, so wire.crc loads the extension itself). The broker a plain serve builds loads no
coordinator until one is used or it leads a partition of the coordinator's internal topic, and
no cleaning code until a compacted log is looked at. Checked in a fresh interpreter, by module
names, not by time."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DEFERRED = ("cryptography", "prometheus_client", "kshim.ctl.", "kshim.security.tls", "importlib.metadata",
            "kshim.console", "kshim.schema_registry", "crc32c",
            "ctypes.util")  # find_library runs ldconfig in a subprocess: libc is reached with CDLL(None)
ALLOWED = {"kshim.ctl.common"}  # CtlError, which the console sources catch (it imports wire.errors only)


def loaded_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_import_kshim_cli_leaves_out_what_serve_may_not_need():
    loaded = loaded_after("import kshim.cli")
    assert "kshim.broker" in loaded  # the check sees what was imported
    assert [m for m in loaded if m.startswith(DEFERRED) and m not in ALLOWED] == []


# loaded on first use (kshim.net.broker_server, kshim.replica.cleaning), not by a plain serve's start
UNTIL_USED = ("kshim.coordinator.", "re2", "kshim.log.cleaner", "kshim.replica.cleaner_process",
              "concurrent.futures.process", "multiprocessing")

# the broker as `kshim serve` builds it (kshim.cli._serve): its data dir opened, BrokerServer and
# Server made, the handler index read
BUILD_SERVE = """
import kshim.cli
from pathlib import Path
from kshim.broker import BrokerConfig
from kshim.net.broker_server import BrokerServer
from kshim.net.handlers import load_handlers
from kshim.net.server import Server
from kshim.standalone import open_standalone
broker = open_standalone(BrokerConfig(data_dir=Path({data_dir!r})))
node = BrokerServer(broker)
Server(node)
load_handlers()
at_start = sorted(sys.modules)
"""


def deferred(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(UNTIL_USED)]


def test_the_serve_path_leaves_out_what_serve_may_not_need(tmp_path: Path):
    """What `kshim serve` imports once its broker is built, not only at the import of kshim.cli."""
    loaded = loaded_after(BUILD_SERVE.format(data_dir=str(tmp_path)) + "broker.close()")
    assert "kshim.net.server" in loaded and "kshim.observability.telemetry" in loaded
    assert [m for m in loaded if m.startswith(DEFERRED) and m not in ALLOWED] == []
    assert deferred(loaded) == []


def run_json(code: str) -> object:
    """What `code`, run in a fresh interpreter, prints as JSON on its last line."""
    out = subprocess.run([sys.executable, "-c", f"import sys, json\n{code}"], capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_a_coordinator_loads_on_first_use_and_at_a_restart_that_leads_its_topic(tmp_path: Path):
    """The group coordinator loads with the first request that needs it (here FindCoordinator's
    first step: its topic created); after a restart the broker leads `__consumer_offsets`, so it
    loads at start, before any request, to load the committed offsets. That they are served after
    a restart: tests/test_groups.py::test_offsets_are_durable_across_reopen and, with clients,
    compat_tests/test_groups.py::test_kafka_python_commit_survives_restart; that a transaction
    prepared before a restart completes with no request:
    tests/test_transactions.py::test_timeout_aborts_and_a_restarted_coordinator_finishes_what_it_prepared."""
    build = BUILD_SERVE.format(data_dir=str(tmp_path))
    at_start, after_use = run_json(build + "import anyio\n"
                                           "anyio.run(node.groups.runtime.ensure)\n"  # what FindCoordinator does first
                                           "broker.close()\n"
                                           "print(json.dumps([at_start, sorted(sys.modules)]))")
    assert deferred(at_start) == []
    assert "kshim.coordinator.groups.coordinator" in after_use
    assert "kshim.coordinator.transactions.coordinator" not in after_use  # each coordinator on its own use

    at_restart, loading = run_json(build + "loading = sorted(node.groups.runtime.loading)\n"
                                           "broker.close()\n"
                                           "print(json.dumps([at_start, loading]))")
    assert "kshim.coordinator.groups.coordinator" in at_restart  # loaded before node.groups was read
    assert "kshim.coordinator.transactions.coordinator" not in at_restart
    assert loading  # the partitions it leads, to be loaded by its task


def test_the_pytest_plugin_loads_no_broker_code():
    loaded = loaded_after("import kshim.testing.plugin")
    assert [m for m in loaded if m.startswith(("kshim.", "wire"))] == ["kshim.log", "kshim.log.ephemeral", "kshim.testing",
                                                                      "kshim.testing.plugin"]


def test_placeholder_helps_match_the_commands():
    from kshim import cli
    from kshim.cluster import broker_process
    from kshim.controller import service
    from kshim.ctl import commands
    assert (cli.CTL_HELP, cli.BROKER_HELP, cli.CONTROLLER_HELP) == (commands.HELP, broker_process.HELP, service.HELP)


def test_serve_loads_no_cluster_process_code():
    """`kshim serve` (one broker) parses without the cluster's broker and controller processes."""
    loaded = loaded_after("from kshim import cli\ncli.build_parser('serve').parse_args(['serve'])")
    assert not {"kshim.cluster.broker_process", "kshim.controller.service"} & set(loaded)
    everything = loaded_after("from kshim import cli\ncli.build_parser(None)")
    assert {"kshim.cluster.broker_process", "kshim.controller.service", "kshim.ctl.commands"} <= set(everything)


def test_the_crc_is_the_packages():
    import crc32c

    from wire.crc import crc32c as ours
    data = b"123456789" * 100
    assert ours(data) == crc32c.crc32c(data) and ours(b"123456789") == 0xE3069283


def test_the_handler_index_imports_no_handler_and_matches_what_each_declares():
    """ApiVersions is answered from the index; each handler module is imported on its API's first
    request (kshim.net.handlers.load_handlers)."""
    loaded = loaded_after("from kshim.net.handlers import load_handlers\nassert len(load_handlers()) > 60")
    assert [m for m in loaded if m.startswith("kshim.net.handlers.") and m.rsplit(".", 1)[1][:2].isdigit()] == []

    import importlib

    from kshim.net.handlers import load_handlers
    for key, handler in load_handlers().items():
        module = importlib.import_module(handler.module)
        assert (module.API_KEY, module.VERSIONS) == (key, (handler.min_version, handler.max_version))
        assert handler.handle is module.handle
