"""`--config-file server.properties` and `--override NAME=VALUE`: Kafka's broker configs applied
to a `kshim serve` (or `kshim broker`) command line, by the one table (kshim.configs.catalog).

The file is read first, then the overrides over it, as kafka-server-start.sh does. Every name is
looked up in the table: a served one sets its route (an option of the command line, a topic
default, a group setting, a BrokerConfig field, a security setting); a no-op one is type-checked
and logged; a refused one stops the start with a message naming it. An option given on the
command line and the same setting by its Kafka name must agree: a conflict is an error, never a
silent choice.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from kshim.configs.catalog import INTERNAL_DEFAULTS, LEFTOVERS, Entry, lookup
from kshim.configs.definitions import BROKER_CONFIGS, TYPES, InvalidConfig
from kshim.configs.options import CLUSTER_ONLY
from kshim.configs.kafka43 import KAFKA_BROKER_CONFIGS
from kshim.configs.properties import PropertiesError, parse_properties

log = logging.getLogger("kshim.configs")

STANDARD_AUTHORIZER_CLASSES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",)


class ConfigError(ValueError):
    """A config kshim cannot start with: the message names it and says why."""


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kafka broker configs (docs/configs.md)")
    group.add_argument("--config-file", type=Path, default=None, metavar="server.properties",
                       help="Kafka broker configs in Kafka's own file format; every name is served, a "
                            "documented no-op, or refused at start (docs/configs.md)")
    group.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                       help="one Kafka broker config, over the file's (repeatable), as "
                            "kafka-server-start.sh's --override")


def gather(config_file: Path | None, overrides: list[str]) -> dict[str, str]:
    """The file's configs with the overrides over them."""
    props: dict[str, str] = {}
    if config_file is not None:
        try:
            text = config_file.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise ConfigError(f"cannot read --config-file: {e}") from None
        try:
            props.update(parse_properties(text, str(config_file)))
        except PropertiesError as e:
            raise ConfigError(str(e)) from None
    for item in overrides:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ConfigError(f"--override wants NAME=VALUE, got {item!r}")
        props[name.strip()] = value.strip()
    return props


def explicit_dests(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The argparse destinations the command line gives (not defaulted)."""
    suppressed: list[tuple[argparse.Action, Any]] = []
    for action in parser._actions:  # argparse has no public way to ask what was given
        if action.dest not in ("help", "command"):
            suppressed.append((action, action.default))
            action.default = argparse.SUPPRESS
    try:
        return set(vars(parser.parse_args(argv)))
    finally:
        for action, default in suppressed:
            action.default = default


def check_type(name: str, raw: str) -> None:
    """A value of a Kafka config kshim does not otherwise parse (a no-op), checked by Kafka's type
    and validator, so that a typo is caught as Kafka catches it."""
    kafka = KAFKA_BROKER_CONFIGS.get(name)
    if kafka is None:
        return
    value = raw.strip()
    valid = kafka.valid or ""
    if valid.startswith("in:"):
        allowed = valid[3:].split(",")
        items = [v.strip() for v in value.split(",") if v.strip()] if kafka.type == "LIST" else [value]
        bad = [item for item in items if item not in allowed]
        if bad:
            raise ConfigError(f"{name}={raw}: {', '.join(bad)} is not one of {', '.join(allowed)}")
        return
    if valid == "nonempty" and not value:
        raise ConfigError(f"{name} must not be empty")
    try:
        number = TYPES[kafka.type].parse(value)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: not a valid {kafka.type.lower()}") from None
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        return  # a string, list or boolean: typed, no range
    if valid.startswith(">="):
        if number < float(valid[2:]):
            raise ConfigError(f"{name}={raw}: must be at least {valid[2:]}")
    elif ".." in valid:
        lo, hi = valid.split("..", 1)
        if not float(lo) <= number <= float(hi):
            raise ConfigError(f"{name}={raw}: must be within {lo} and {hi}")


def at_default(name: str, raw: str) -> bool:
    """Is `raw` Kafka's default for `name` (so a refused config asks for what kshim does anyway)?"""
    kafka = KAFKA_BROKER_CONFIGS.get(name)
    if kafka is None:
        return raw.strip().lower() == INTERNAL_DEFAULTS.get(name)
    default, value = kafka.default, raw.strip()
    if default is None:
        return value == ""
    if kafka.type == "LIST":
        return [v.strip() for v in value.split(",") if v.strip()] == [v.strip() for v in default.split(",") if v.strip()]
    if kafka.type in ("INT", "SHORT", "LONG", "DOUBLE"):
        try:
            return float(value) == float(default)
        except ValueError:
            return False
    if kafka.type == "BOOLEAN":
        return value.lower() == default.lower()
    return value == default


def apply(args: argparse.Namespace, props: Mapping[str, str], explicit: set[str], cluster: bool) -> None:
    """Sets `props` onto `args` (a serve's or a broker's parsed command line): ConfigError when a
    name is refused, a value is bad or a command-line option disagrees. Leaves on args:
    topic_properties (topic defaults by broker name), broker_fields (BrokerConfig fields),
    security_properties (kshim.security.properties), static_configs (every given name, as
    DescribeConfigs reports them) and passed_on (what a cluster's brokers get as --override)."""
    args.topic_properties = dict(getattr(args, "topic_properties", {}) or {})
    args.broker_fields = dict(getattr(args, "broker_fields", {}) or {})
    args.security_properties = dict(getattr(args, "security_properties", {}) or {})
    args.static_configs = dict(getattr(args, "static_configs", {}) or {})
    args.passed_on = list(getattr(args, "passed_on", []) or [])
    noops = []
    specials = []
    for name, raw in props.items():
        entry = lookup(name)
        if entry.kind == "refused":
            if entry.refuse_default or not at_default(name, raw):
                raise ConfigError(f"{name}={raw}: not supported: {entry.why}")
            args.static_configs[name] = raw
            args.passed_on.append(f"{name}={raw}")
            continue
        if entry.kind == "no-op":
            check_type(name, raw)
            noops.append(entry)
            args.static_configs[name] = raw
            args.passed_on.append(f"{name}={raw}")
            continue
        if entry.route != "topic-default":
            check_type(name, raw)
        args.static_configs[name] = raw
        if entry.route == "special":
            specials.append(name)
        else:
            _serve(args, entry, name, raw, props, explicit, cluster)
    for name in sorted(specials, key=list(_SPECIAL).index):  # listeners before what refers to them
        _SPECIAL[name](args, name, props[name], props, explicit)
    for entry in noops:
        level = logging.WARNING if entry.name in LEFTOVERS else logging.INFO  # Kafka warns of unknown names
        log.log(level, "config %s=%s accepted with no effect: %s", entry.name, props[entry.name], entry.why)


def _set_option(args: argparse.Namespace, entry: Entry, name: str, value: object, explicit: set[str]) -> None:
    assert entry.target is not None
    if entry.target in explicit:
        given = getattr(args, entry.target)
        if given != value:
            raise ConfigError(f"{entry.option} {_shown(given)} and {name}={_shown(value)} disagree: give one of them")
        return
    setattr(args, entry.target, value)


def _shown(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _converted(entry: Entry, name: str, raw: str) -> object:
    try:
        return entry.convert(raw) if entry.convert is not None else raw
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: not a valid value") from None


def _serve(args: argparse.Namespace, entry: Entry, name: str, raw: str, props: Mapping[str, str],
           explicit: set[str], cluster: bool) -> None:
    if entry.route == "option":
        value = _converted(entry, name, raw)
        if entry.target in CLUSTER_ONLY and not cluster:
            _single_broker(name, entry, value)
        else:
            _set_option(args, entry, name, value, explicit)
    elif entry.route == "topic-default":  # kshim's own range (segment.bytes down to 14), not Kafka's
        try:
            BROKER_CONFIGS[name].parse(raw.strip())
        except InvalidConfig as e:
            raise ConfigError(e.message) from None
        args.topic_properties[name] = raw.strip()
        args.passed_on.append(f"{name}={raw}")
    elif entry.route == "group":
        args.group_setting = [*getattr(args, "group_setting", []), f"{name}={raw.strip()}"]
        args.passed_on.append(f"{name}={raw}")
    elif entry.route == "field":
        assert entry.target is not None
        args.broker_fields[entry.target] = _converted(entry, name, raw)
        args.passed_on.append(f"{name}={raw}")
    elif entry.route == "security":
        args.security_properties[name] = raw


# ------------------------------------------------------------ options that only a cluster has
def _single_broker(name: str, entry: Entry, value: object) -> None:
    """A cluster-only option by its Kafka name on one broker: nothing to set (no followers to time
    out, no broker sessions), but a replication factor above 1 cannot be had."""
    if entry.target == "replication_factor" and value != 1:
        raise ConfigError(f"{name}={value}: a single broker holds one replica of each partition "
                          f"(a cluster: --brokers N)")


# ------------------------------------------------------------ names served by meaning
def _controller_listeners(props: Mapping[str, str]) -> set[str]:
    return {n.strip().upper() for n in props.get("controller.listener.names", "").split(",") if n.strip()}


def _listener_items(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _listeners(args, name, raw, props, explicit) -> None:
    controller = _controller_listeners(props)
    kept = [item for item in _listener_items(raw) if item.split("://", 1)[0].upper() not in controller]
    if not kept:
        raise ConfigError(f"listeners={raw}: no listener for clients (only the controller's {', '.join(controller)})")
    value = ",".join(kept)
    if "listeners" in explicit and args.listeners != value:
        raise ConfigError(f"--listeners {args.listeners} and listeners={value} disagree: give one of them")
    if {"host", "port"} & explicit:
        first = kept[0].split("://", 1)[1]
        host, _, port = first.rpartition(":")
        if (host.strip("[]") or "127.0.0.1", int(port)) != (args.host, args.port):
            raise ConfigError(f"--host {args.host} --port {args.port} and listeners={value} disagree: "
                              "give one of them")
    args.listeners = value


def _advertised(args, name, raw, props, explicit) -> None:
    """The host each listener advertises; its port must be the one it listens on. Without
    --listeners (one PLAINTEXT listener on --host/--port) the broker's one advertised host."""
    listeners = {item.split("://", 1)[0].upper(): item for item in _listener_items(args.listeners or "")}
    controller = _controller_listeners(props)
    hosts: dict[str, str] = {}
    for item in _listener_items(raw):
        lname, _, address = item.partition("://")
        lname = lname.upper()
        if lname in controller:
            continue
        host, _, port = address.rpartition(":")
        bound = listeners.get(lname)
        if bound is None and not listeners and lname == "PLAINTEXT":
            bound = f"PLAINTEXT://{args.host}:{args.port}"
        if bound is None:
            raise ConfigError(f"advertised.listeners names {lname}, which is not in listeners")
        listened = bound.rpartition(":")[2]
        if listened != port and listened != "0":
            raise ConfigError(f"advertised.listeners={raw}: {lname} advertises port {port} but listens on "
                              f"{listened}: kshim advertises the ports it listens on")
        if host.strip("[]"):
            hosts[lname] = host.strip("[]")
    if not listeners:
        if hosts:
            args.broker_fields["advertised_host"] = hosts["PLAINTEXT"]
        return
    args.advertised_hosts = hosts


def _log_dirs(args, name, raw, props, explicit) -> None:
    if name == "log.dir" and "log.dirs" in props:
        return  # log.dirs wins, as in Kafka
    dirs = [Path(d.strip()) for d in raw.split(",") if d.strip()]
    if not dirs:
        raise ConfigError(f"{name} names no directory")
    if getattr(args, "ephemeral", False):
        raise ConfigError(f"{name}: --ephemeral keeps its data in its own directory")
    if "log_dirs" in explicit or "data_dir" in explicit:
        given = getattr(args, "log_dirs", None) or [getattr(args, "data_dir", None)]
        if [Path(d) for d in given if d is not None] != dirs:
            raise ConfigError(f"--data-dir/--log-dirs and {name}={raw} disagree: give one of them")
        return
    args.log_dirs = dirs
    if getattr(args, "data_dir", None) is None:
        args.data_dir = dirs[0]  # kshim's metadata beside the first, as Kafka keeps meta.properties there


def _node_id(args, name, raw, props, explicit) -> None:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: not a number") from None
    other = "broker.id" if name == "node.id" else "node.id"
    if other in props and props[other].strip() != raw.strip():
        raise ConfigError(f"node.id={props['node.id']} and broker.id={props['broker.id']} disagree")
    if args.command == "broker":
        if value != args.node_id:
            raise ConfigError(f"{name}={value}: a cluster numbers its brokers itself (this one is {args.node_id})")
        return
    if getattr(args, "brokers", None) is not None:
        raise ConfigError(f"{name}: a cluster (--brokers) numbers its brokers 0..N-1 itself")
    if value < 0:
        raise ConfigError(f"{name}={value}: kshim needs a node id of 0 or more")
    args.broker_fields["node_id"] = value


def _authorizer(args, name, raw, props, explicit) -> None:
    value = raw.strip()
    if value and value not in STANDARD_AUTHORIZER_CLASSES and value != "kafka.security.authorizer.AclAuthorizer":
        raise ConfigError(f"{name}={value}: kshim's authorizer is Kafka's StandardAuthorizer "
                          f"({STANDARD_AUTHORIZER_CLASSES[0]}); no other class can be loaded")
    if value == "kafka.security.authorizer.AclAuthorizer":
        raise ConfigError(f"{name}={value}: AclAuthorizer kept ACLs in ZooKeeper and is gone in Kafka 4; "
                          f"use {STANDARD_AUTHORIZER_CLASSES[0]}")
    enabled = bool(value)
    if "authorizer" in explicit and args.authorizer != enabled:
        raise ConfigError(f"--authorizer and {name}={value} disagree: give one of them")
    args.authorizer = enabled


def _roles(args, name, raw, props, explicit) -> None:
    roles = {r.strip().lower() for r in raw.split(",") if r.strip()}
    want = {"broker"} if args.command == "broker" else {"broker", "controller"}
    if args.command == "broker" and roles == {"broker", "controller"}:
        return  # a cluster's broker process gets its supervisor's file
    if roles != want:
        raise ConfigError(f"{name}={raw}: `kshim serve` runs the broker and its controller in one process "
                          f"(process.roles=broker,controller); a cluster of broker processes: --brokers N")


def _inter_broker_protocol(args, name, raw, props, explicit) -> None:
    if "inter.broker.listener.name" in props:
        raise ConfigError("inter.broker.listener.name and security.inter.broker.protocol: give only one (as Kafka)")
    if "inter_broker_listener" in explicit:
        if args.inter_broker_listener != raw.strip():
            raise ConfigError(f"--inter-broker-listener and {name}={raw} disagree: give one of them")
        return
    if raw.strip() != "PLAINTEXT" or args.listeners:
        args.inter_broker_listener = raw.strip()


_HOUR_MS, _MINUTE_MS = 3_600_000, 60_000
# a coarse unit and the ms name it stands for; finer forms given win, as in Kafka
_UNITS = {"log.retention.hours": ("log.retention.ms", _HOUR_MS, ("log.retention.ms", "log.retention.minutes")),
          "log.retention.minutes": ("log.retention.ms", _MINUTE_MS, ("log.retention.ms",)),
          "log.roll.hours": ("log.roll.ms", _HOUR_MS, ("log.roll.ms",)),
          "log.roll.jitter.hours": ("log.roll.jitter.ms", _HOUR_MS, ("log.roll.jitter.ms",))}


def _unit(args, name, raw, props, explicit) -> None:
    target, factor, finer = _UNITS[name]
    if any(f in props for f in finer):
        return
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: not a number") from None
    args.topic_properties[target] = str(value * factor if value >= 0 else -1)
    args.passed_on.append(f"{target}={args.topic_properties[target]}")


def _controller_names(args, name, raw, props, explicit) -> None:
    if "listeners" not in props:
        raise ConfigError(f"{name}={raw}: the controller's listeners are named in listeners, which is not given")


def _rebalance_protocols(args, name, raw, props, explicit) -> None:
    protocols = {p.strip().lower() for p in raw.split(",") if p.strip()}
    unknown = protocols - {"classic", "consumer", "share", "streams"}
    if unknown:
        raise ConfigError(f"{name}={raw}: unknown protocol {', '.join(sorted(unknown))}")
    if not {"classic", "consumer"} <= protocols:
        raise ConfigError(f"{name}={raw}: kshim always serves classic and consumer groups; the list must name both")


_SPECIAL: dict[str, Callable[..., None]] = {
    "listeners": _listeners, "advertised.listeners": _advertised, "log.dirs": _log_dirs, "log.dir": _log_dirs,
    "node.id": _node_id, "broker.id": _node_id, "authorizer.class.name": _authorizer, "process.roles": _roles,
    "security.inter.broker.protocol": _inter_broker_protocol, "controller.listener.names": _controller_names,
    "group.coordinator.rebalance.protocols": _rebalance_protocols,
    **{name: _unit for name in _UNITS},
}
