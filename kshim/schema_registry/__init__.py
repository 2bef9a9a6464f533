"""A Confluent-compatible Schema Registry served beside the broker (`kshim serve --schema-registry`,
docs/schema-registry.md). A Kafka client of the broker, as Confluent's is: its state is the
compacted `_schemas` topic, written in Confluent's key/value JSON formats (`records.py`) and read
back into memory (`state.py`) by `kafka_store.py`; `registry.py` holds the operations and their
rules, `rest.py` the REST API over the console's small HTTP server, `service.py` wires them.
Parsing and compatibility per schema type live in `types/`."""
from __future__ import annotations

import importlib.util

# what the schema types parse with (pyproject.toml's schema-registry extra), by import name
LIBRARIES = ("avro", "jsonschema", "google.protobuf", "grpc_tools")


def missing_libraries() -> list[str]:
    """The libraries of the `schema-registry` extra that are not installed: `kshim serve
    --schema-registry` refuses to start without them, before the broker starts (the registry's
    modules import them)."""
    return [name for name in LIBRARIES if not _installed(name)]


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a dotted name whose parent is missing
        return False
