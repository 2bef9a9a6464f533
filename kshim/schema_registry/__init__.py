"""A Confluent-compatible Schema Registry served beside the broker (`kshim serve --schema-registry`,
docs/schema-registry.md). A Kafka client of the broker, as Confluent's is: its state is the
compacted `_schemas` topic, written in Confluent's key/value JSON formats (`records.py`) and read
back into memory (`state.py`) by `kafka_store.py`; `registry.py` holds the operations and their
rules, `rest.py` the REST API over the console's small HTTP server, `service.py` wires them.
Parsing and compatibility per schema type live in `types/`."""
