"""The layers of kshim: which module may import which. Checked by parsing every module of kshim/ and
wire/ with `ast` (no import is executed).

Top to bottom; a module imports its own layer and the layers below it, never a higher one:

    net                 kshim/net/ (server, connection core, handlers, BrokerServer), the broker's
                        metrics and clients' telemetry (kshim/observability/metrics.py, telemetry.py)
    coordinators        kshim/coordinator/ (runtime, groups, transactions)
    replica management  kshim/broker.py, kshim/replica/ (the ReplicaManager, producer id blocks), kshim/replication/
    partition           kshim/replica/partition.py and its parts (partition_checks.py, partition_appends.py,
                        partition_txns.py), kshim/replica/producer_state.py, kshim/configs/
    log                 kshim/log/
    base                kshim/errors.py, kshim/broadcast.py, kshim/clock.py, kshim/sockets.py, kshim/cluster/image.py,
                        kshim/security/ (ACLs, SASL, TLS, a connection's security state, the authorizer's
                        questions), kshim/observability/ (fault rules, request log), the control-plane
                        schema (kshim/controller/messages.py, schema.py) through which a broker asks
                        the controller
    wire                wire/ (imports nothing from kshim)

- The coordinators use the replicas (they read and write their internal topics through the
  broker); the broker does not know the coordinators.
- Within a layer, these do not import each other: the group and the transaction coordinator;
  the broker and replication (which works on the replicas, not on the broker).
- A layered module imports no kshim module outside the layers (the control plane, ctl, ...).
- Nothing imports kshim.net.server, kshim.runner or kshim.cli but the composition roots: kshim/cli.py,
  kshim/__main__.py, kshim/standalone.py, kshim/runner.py, kshim/cluster/broker_process.py,
  kshim/controller/process.py (the supervisor), kshim/controller/service.py (the controller process).
- kshim.ctl (a client of the cluster) imports neither the server nor the handlers.
- Only the composition roots, kshim.net.server, kshim.net.broker_server and the handlers' RequestContext
  import kshim.broker; coordinators, replication and the controller client take a Protocol of
  what they use of it.
- Imports under `if TYPE_CHECKING:` follow the same rules.
- An import of a kshim or wire module inside a function is either listed in LAZY_IMPORTS with
  why it is deferred, or moved to the top of its module: deferring an import to dodge a cycle
  hides a layering bug. (Lazy imports of optional third-party packages, pyspark, are not checked.)

KNOWN_VIOLATIONS lists what breaks these rules today, to be emptied; an entry that no longer
matches an import fails the test too, so the list only shrinks.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LAYERS: list[tuple[str, tuple[str, ...]]] = [  # top to bottom: (name, module prefixes); the longest prefix wins
    ("net", ("kshim.net",
             "kshim.observability.metrics",  # a broker's metrics: fed by the server, read from the replicas when scraped
             "kshim.observability.telemetry")),  # clients' pushed metrics (KIP-714), for the telemetry handlers
    ("coordinators", ("kshim.coordinator",)),
    ("replica management", ("kshim.broker", "kshim.replica", "kshim.replication")),
    ("partition", ("kshim.replica.partition", "kshim.replica.partition_checks", "kshim.replica.partition_appends",
                   "kshim.replica.partition_txns",  # the Partition's parts (kshim.replica.partition's docstring)
                   "kshim.replica.producer_state", "kshim.configs")),  # topic configs map to LogConfig
    ("log", ("kshim.log",)),
    ("base", ("kshim.errors", "kshim.broadcast", "kshim.clock", "kshim.cluster.image",  # leaves every layer shares
              "kshim.security",  # ACLs travel in the image; SASL, TLS, a connection's security state, the authorizer
              "kshim.observability",  # a broker's fault rules and request log, consulted at dispatch
              "kshim.sockets",  # non-blocking sockets: the server's and the broker-to-broker client's
              "kshim.controller.messages", "kshim.controller.schema")),
    ("wire", ("wire",)),
]
INDEPENDENT = [("kshim.coordinator.groups", "kshim.coordinator.transactions"), ("kshim.broker", "kshim.replication")]
ENTRY_POINTS = ("kshim.net.server", "kshim.runner", "kshim.cli")
COMPOSITION_ROOTS = {"kshim.cli", "kshim.__main__", "kshim.standalone", "kshim.runner",
                     "kshim.cluster.broker_process", "kshim.controller.process", "kshim.controller.service"}
NOT_FOR_CTL = ("kshim.net.server", "kshim.net.handlers")
# the Broker object: the composition roots build it, the server and BrokerServer serve it and the
# handlers' RequestContext carries it; everything else sees the few members it needs (a Protocol)
BROKER_USERS = COMPOSITION_ROOTS | {"kshim.net.server", "kshim.net.broker_server", "kshim.net.handlers"}

# (importing module, imported module): why it may break the rules, for now
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}

# (importing module, imported module): imports inside a function that stay, and why
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("kshim.cli", "kshim.net.server"):
        "start-up: `kshim ctl` and `serve --brokers` (the controller process) do not load the server and handlers",
    ("kshim.cli", "kshim.controller.process"): "start-up: only `serve --brokers` runs the controller process",
    ("kshim.cluster.broker_process", "kshim.net.server"):
        "start-up: kshim/cli.py imports this module for its options; only a broker process loads the server",
    ("kshim.cluster.broker_process", "kshim.net.broker_server"): "start-up: as kshim.net.server, with it",
    ("kshim.cli", "kshim.net.broker_server"): "start-up: as kshim.net.server, with it",
    # start-up of `kshim serve` (docs/benchmarks.md, "Start time"); tests/test_startup.py checks what
    # `import kshim.cli` leaves out
    ("kshim.cli", "kshim.ctl.commands"): "start-up: only `kshim ctl` loads ctl's commands (and kshim.ctl's clients)",
    ("kshim.cli", "kshim.cluster.broker_process"): "start-up: only a cluster's `kshim broker` loads its process code",
    ("kshim.cli", "kshim.controller.service"): "start-up: only a cluster's `kshim controller` loads its service",
    ("kshim.cli", "kshim.security.tls"): "start-up: cryptography loads only when a cluster's supervisor makes the --tls-dev CA",
    ("kshim.net.broker_server", "kshim.coordinator.groups"):
        "start-up: a coordinator is built on first use or once this broker leads a partition of its topic",
    ("kshim.net.broker_server", "kshim.coordinator.transactions"): "start-up: as kshim.coordinator.groups",
    ("kshim.net.broker_server", "kshim.coordinator.share_partitions.coordinator"): "start-up: as kshim.coordinator.groups",
    ("kshim.net.broker_server", "kshim.coordinator.share_partitions.manager"): "start-up: as kshim.coordinator.groups",
    ("kshim.net.handlers.00_produce", "kshim.coordinator.transactions.verification"):
        "plain produce loads no transaction code: it comes with the first transactional batch",
    ("kshim.replica.cleaning", "kshim.log.cleaner"): "start-up: the cleaning code loads when a compacted log is first looked at",
    ("kshim.replica.cleaning", "kshim.replica.cleaner_process"): "start-up: as kshim.log.cleaner, with it",
    ("kshim.net.server", "kshim.security.tls"):
        "start-up: cryptography (a sixth of the import time) loads only with an SSL or SASL_SSL listener",
    ("kshim.configs.options", "kshim.security.tls"):
        "start-up: as kshim.net.server's, the TLS material is loaded (checked) only with an SSL or SASL_SSL listener",
    ("kshim.replication.client", "kshim.security.tls"):
        "start-up: as kshim.net.server's, only a TLS inter-broker listener loads cryptography",
    ("kshim.cli", "kshim.console.console"): "start-up: not with --no-console",
    ("kshim.cli", "kshim.schema_registry.service"): "start-up: the schema registry loads only with --schema-registry",
    ("kshim.cli", "kshim.schema_registry"): "start-up: its libraries are checked only with --schema-registry",
    ("kshim.controller.process", "kshim.schema_registry.service"): "start-up: as kshim.cli's, only with --schema-registry",
    ("kshim.schema_registry.service", "kshim.security.tls"):
        "start-up: as kshim.net.server's, cryptography loads only with a TLS listener",
    ("kshim.cli", "kshim.console.sources"): "start-up: as kshim.console.console, with it",
    ("kshim.console.console", "kshim.ctl.groups"):
        "start-up: the console asks the brokers for groups only while someone watches it",
    ("kshim.console.console", "kshim.ctl.txns"): "start-up: as kshim.ctl.groups, with it",
    ("kshim.console.console", "kshim.ctl.security"): "start-up: as kshim.ctl.groups, with it",
    ("kshim.console.sources", "kshim.ctl.faults"):
        "start-up: only a cluster's supervisor reads fault rules over the brokers' sockets; a single serve holds them",
    ("kshim.testing", "kshim.ctl.faults"):
        "the pytest plugin imports kshim.testing in every pytest run: the control-plane messages load with a broker",
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    path: str  # its file, relative to the project root
    line: int
    text: str  # the import statement as written
    target: str  # the kshim or wire module imported
    kind: str  # "module", "function" or "type-checking"

    def __str__(self) -> str:
        where = {"module": "", "function": " (inside a function)", "type-checking": " (under TYPE_CHECKING)"}
        return f"{self.path}:{self.line} `{self.text}`{where[self.kind]}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, tuple[str, str]]:
    """module name -> (path relative to the root, source) for every module of kshim/ and wire/."""
    out = {}
    for package in ("kshim", "wire"):
        for path in sorted((ROOT / package).rglob("*.py")):
            out[module_name(path)] = (str(path.relative_to(ROOT)), path.read_text())
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(module: str, path: str, source: str, known: set[str]) -> list[Import]:
    """The imports of kshim and wire modules in one module, each resolved to the module it loads."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found: list[Import] = []

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST, kind: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            kind = "function"
        if isinstance(node, ast.If) and _is_type_checking(node.test) and kind == "module":
            for child in node.body:
                visit(child, "type-checking")
            for child in node.orelse:
                visit(child, kind)
            return
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from kshim import ctl` loads the module kshim.ctl; `from kshim.ctl import status` too
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in dict.fromkeys(targets):
            resolved = resolve(target) if target.split(".")[0] in ("kshim", "wire") else None
            if resolved is not None and resolved != module:
                found.append(Import(module, path, node.lineno, ast.get_source_segment(source, node) or "",
                                    resolved, kind))
        for child in ast.iter_child_nodes(node):
            visit(child, kind)

    visit(ast.parse(source, path), "module")
    return found


def all_imports(modules: dict[str, tuple[str, str]]) -> list[Import]:
    known = set(modules)
    return [i for name, (path, source) in modules.items() for i in imports(name, path, source, known)]


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int | None:
    """Index in LAYERS (0 is the top), None outside the layers: the layer of the longest prefix that
    names the module (kshim.replica.partition is the partition layer, kshim.replica.manager above it)."""
    matches = [(len(p), index) for index, (_, prefixes) in enumerate(LAYERS) for p in prefixes if under(module, p)]
    return max(matches)[1] if matches else None


def broken_rule(i: Import) -> str | None:
    """Which rule the import breaks, or None."""
    if under(i.module, "wire") and under(i.target, "kshim"):
        return "wire imports nothing from kshim"
    if any(under(i.target, e) for e in ENTRY_POINTS) and i.module not in COMPOSITION_ROOTS:
        return f"only the composition roots ({', '.join(sorted(COMPOSITION_ROOTS))}) import {i.target}"
    if i.target == "kshim.broker" and i.module not in BROKER_USERS:
        return "only the composition roots, the server and the request context use the Broker: take a Protocol"
    if under(i.module, "kshim.ctl") and any(under(i.target, n) for n in NOT_FOR_CTL):
        return "kshim.ctl is a client of the cluster: it imports neither the server nor the handlers"
    mine, theirs = layer_of(i.module), layer_of(i.target)
    if mine is None:
        return None
    if theirs is None:
        return f"the {LAYERS[mine][0]} layer imports only layered modules; {i.target} is outside the layers"
    if theirs < mine:
        return f"the {LAYERS[mine][0]} layer imports the higher {LAYERS[theirs][0]} layer"
    for a, b in INDEPENDENT:
        if (under(i.module, a) and under(i.target, b)) or (under(i.module, b) and under(i.target, a)):
            return f"{a} and {b} do not import each other"
    return None


def violations(found: list[Import]) -> list[str]:
    """Every import that breaks a rule and is not a known violation, and every function-level
    import not listed as lazy on purpose."""
    out = []
    for i in found:
        listed = (i.module, i.target) in KNOWN_VIOLATIONS
        rule = broken_rule(i)
        if rule and not listed:
            out.append(f"{i.module}: {i}: {rule}")
        elif i.kind == "function" and not listed and (i.module, i.target) not in LAZY_IMPORTS:
            out.append(f"{i.module}: {i}: an import inside a function (move it to the top of the module; if that "
                       "makes a cycle, fix the layering; if it saves start-up time, list it in LAZY_IMPORTS)")
    return out


def cycles(found: list[Import]) -> list[list[str]]:
    """Import cycles among modules (strongly connected components of more than one module)."""
    graph: dict[str, set[str]] = {}
    for i in found:
        graph.setdefault(i.module, set()).add(i.target)
        graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


# ----------------------------------------------------------------------------------------- tests
@cache
def project_imports() -> list[Import]:
    return all_imports(sources())


def test_imports_follow_the_layers():
    problems = violations(project_imports())
    assert not problems, "imports that break the layering (see tests/test_layers.py):\n" + "\n".join(problems)


def test_no_import_cycles():
    found = cycles(project_imports())
    assert not found, f"import cycles: {found}"


def test_allowlists_only_shrink():
    found = project_imports()
    breaking = {(i.module, i.target) for i in found if broken_rule(i)}
    stale = sorted(set(KNOWN_VIOLATIONS) - breaking)
    assert not stale, f"fixed, so delete these from KNOWN_VIOLATIONS: {stale}"
    lazy = {(i.module, i.target) for i in found if i.kind == "function"}
    stale = sorted(set(LAZY_IMPORTS) - lazy)
    assert not stale, f"no longer imported inside a function, so delete these from LAZY_IMPORTS: {stale}"


def _check(modules: dict[str, str]) -> list[str]:
    """violations() of made-up modules (module name -> source)."""
    named = {name: (name.replace(".", "/") + ".py", source) for name, source in modules.items()}
    return violations(all_imports(named))


def test_the_checker_names_the_module_and_the_import():
    problems = _check({"kshim.log.segment": "from kshim.replica.partition import Partition\n",
                       "kshim.replica.partition": "import kshim.log.segment\n"})
    assert problems == ["kshim.log.segment: kshim/log/segment.py:1 `from kshim.replica.partition import Partition`: "
                        "the log layer imports the higher partition layer"]


def test_the_checker_sees_type_checking_and_function_imports():
    problems = _check({
        "kshim.replica.partition": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kshim.net.handlers import x\n",
        "kshim.net.handlers": "def f():\n    from kshim.replica.partition import Partition\n",
        "kshim.ctl.status": "from kshim.net.handlers import load_handlers\n",
        "wire.codec": "from kshim.errors import BrokerError\n",
        "kshim.errors": "",
    })
    assert problems == [
        "kshim.replica.partition: kshim/replica/partition.py:3 `from kshim.net.handlers import x` (under TYPE_CHECKING): "
        "the partition layer imports the higher net layer",
        "kshim.net.handlers: kshim/net/handlers.py:2 `from kshim.replica.partition import Partition` (inside a function): an import "
        "inside a function (move it to the top of the module; if that makes a cycle, fix the layering; if it saves "
        "start-up time, list it in LAZY_IMPORTS)",
        "kshim.ctl.status: kshim/ctl/status.py:1 `from kshim.net.handlers import load_handlers`: kshim.ctl is a client "
        "of the cluster: it imports neither the server nor the handlers",
        "wire.codec: wire/codec.py:1 `from kshim.errors import BrokerError`: wire imports nothing from kshim",
    ]
