"""`kshim serve --schema-registry` as a real process, driven by confluent-kafka's SchemaRegistryClient
and its Avro, JSON Schema and Protobuf serializers (records round-trip through the broker), and by
plain HTTP where the client hides the answer: compatibility levels, soft and permanent deletes,
modes, error bodies, ids kept across a restart and a kill -9 (and never reused, even once
compaction dropped a deleted schema's records), basic auth on a SASL broker."""
from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import KshimProcess, wait_until
from kshim.testing import free_port_block

REGISTRY = ("--schema-registry", "--schema-registry-port", "0")
USER_V1 = {"type": "record", "name": "User", "namespace": "kshim.test",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
# BACKWARD-compatible with v1: the new field has a default
USER_V2 = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "email", "type": "string", "default": ""}]}
# not BACKWARD-compatible with v1: a new field without a default
USER_BAD = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "phone", "type": "string"}]}


def registry_url(proc: KshimProcess) -> str:
    return proc.ready_line.split("; schema registry ", 1)[1].split()[0].rstrip("/")


def avro(schema: dict) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def http(url: str, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None,
         raw: bytes | None = None) -> tuple[int, Any]:
    """(status, JSON answer) of one request; error statuses too."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/vnd.schemaregistry.v1+json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text.startswith(b"{") else text


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> Iterator[KshimProcess]:
    proc = KshimProcess(tmp_path_factory.mktemp("sr"), *REGISTRY).start()
    yield proc
    code = proc.terminate()
    assert code == 0, "kshim did not shut down cleanly:\n" + proc.logs()


@pytest.fixture
def client(registry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry_url(registry)})


def round_trip(proc: KshimProcess, topic: str, serializer, deserializer, values: list[Any]) -> list[Any]:
    """Produce the values serialized through the registry, consume and deserialize them."""
    producer = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value=serializer(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[Any] = []

    def read() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE)))
        return len(got) >= len(values)

    try:
        wait_until(read, timeout=30, interval=0, message=f"{len(values)} records on {topic}")
    finally:
        consumer.close()
    return got


def test_avro_records_round_trip_through_the_registry(registry, client):
    values = [{"name": f"user-{i}", "age": 20 + i} for i in range(5)]
    serializer = AvroSerializer(client, json.dumps(USER_V1))
    got = round_trip(registry, "avro-users", serializer, AvroDeserializer(client), values)
    assert got == values
    latest = client.get_latest_version("avro-users-value")
    assert latest.version == 1 and latest.schema.schema_type == "AVRO"
    assert json.loads(latest.schema.schema_str) == json.loads(client.get_schema(latest.schema_id).schema_str)
    # the same schema again, and under another subject: the same id
    assert client.register_schema("avro-users-value", avro(USER_V1)) == latest.schema_id
    assert client.register_schema("avro-other-value", avro(USER_V1)) == latest.schema_id
    status, versions = http(f"{registry_url(registry)}/schemas/ids/{latest.schema_id}/versions")
    assert status == 200 and versions == [{"subject": "avro-other-value", "version": 1},
                                          {"subject": "avro-users-value", "version": 1}]


def test_json_schema_records_round_trip(registry, client):
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
              "properties": {"id": {"type": "integer"}, "item": {"type": "string"}}, "required": ["id"]}
    values = [{"id": i, "item": f"thing-{i}"} for i in range(3)]
    got = round_trip(registry, "json-orders", JSONSerializer(json.dumps(schema), client),
                     JSONDeserializer(json.dumps(schema), schema_registry_client=client), values)
    assert got == values
    assert client.get_latest_version("json-orders-value").schema.schema_type == "JSON"


def _protobuf_class():
    """A generated-looking message class, built from a descriptor (no protoc needed)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    proto = descriptor_pb2.FileDescriptorProto(name="kshim_test/point.proto", package="kshim.test", syntax="proto3")
    msg = proto.message_type.add(name="Point")
    for number, name in ((1, "x"), (2, "y")):
        msg.field.add(name=name, number=number, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    msg.field.add(name="label", number=3, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kshim.test.Point"))


def test_protobuf_records_round_trip(registry, client):
    point = _protobuf_class()
    values = [point(x=i, y=-i, label=f"p{i}") for i in range(3)]
    serializer = ProtobufSerializer(point, client, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(point, {"use.deprecated.format": False})
    got = round_trip(registry, "proto-points", serializer, deserializer, values)
    assert got == values
    latest = client.get_latest_version("proto-points-value")
    assert latest.schema.schema_type == "PROTOBUF" and "message Point" in latest.schema.schema_str
    # ?format=serialized: the FileDescriptorProto, base64, as Confluent serves it
    from google.protobuf import descriptor_pb2
    status, answer = http(f"{registry_url(registry)}/schemas/ids/{latest.schema_id}?format=serialized")
    assert status == 200 and answer["schemaType"] == "PROTOBUF"
    parsed = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(answer["schema"]))
    assert [m.name for m in parsed.message_type] == ["Point"]


def test_compatibility_levels_refuse_an_incompatible_schema_with_409(registry, client):
    subject = "compat-value"
    client.register_schema(subject, avro(USER_V1))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, avro(USER_BAD))  # the default level: BACKWARD
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert client.get_versions(subject) == [1]
    url = registry_url(registry)
    status, answer = http(f"{url}/compatibility/subjects/{subject}/versions/latest?verbose=true", "POST",
                          {"schema": json.dumps(USER_BAD)})
    assert status == 200 and answer["is_compatible"] is False and "phone" in " ".join(answer["messages"])
    assert client.test_compatibility(subject, avro(USER_V2)) is True
    # FORWARD: a reader of v1 must read v2 data; dropping a field without a default breaks it
    assert client.set_compatibility(subject, "FORWARD") == {"compatibility": "FORWARD"}
    assert client.get_compatibility(subject) == "FORWARD"
    dropped = {**USER_V1, "fields": USER_V1["fields"][:1]}
    with pytest.raises(SchemaRegistryError) as forward:
        client.register_schema(subject, avro(dropped))
    assert forward.value.error_code == 409
    client.set_compatibility(subject, "NONE")
    assert client.register_schema(subject, avro(USER_BAD)) > 0
    assert client.get_versions(subject) == [1, 2]
    # FULL_TRANSITIVE: checked against every version, not only the latest
    client.set_compatibility(subject, "FULL_TRANSITIVE")
    with pytest.raises(SchemaRegistryError):
        client.register_schema(subject, avro(dropped))
    status, answer = http(f"{url}/config/{subject}", "PUT", {"compatibility": "SIDEWAYS"})
    assert (status, answer["error_code"]) == (422, 42203)
    status, answer = http(f"{url}/config/never-configured")
    assert (status, answer["error_code"]) == (404, 40408)
    assert http(f"{url}/config/never-configured?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})


def test_soft_then_permanent_delete(registry, client):
    url, subject = registry_url(registry), "deleting-value"
    # a schema no other test registers: its id is held by this subject alone
    first = client.register_schema(subject, avro({**USER_V1, "name": "Deleting"}))
    client.register_schema(subject, avro({**USER_V2, "name": "Deleting"}))
    status, answer = http(f"{url}/subjects/{subject}?permanent=true", "DELETE")
    assert (status, answer["error_code"]) == (404, 40405)  # soft first
    assert client.delete_version(subject, 1) == 1
    assert client.get_versions(subject) == [2]
    status, answer = http(f"{url}/subjects/{subject}/versions/1")
    assert (status, answer["error_code"]) == (404, 40402)
    assert http(f"{url}/subjects/{subject}/versions/1?deleted=true")[1]["id"] == first
    assert client.delete_subject(subject) == [2]
    assert subject not in client.get_subjects()
    assert http(f"{url}/subjects?deleted=true")[1].count(subject) == 1
    status, answer = http(f"{url}/subjects/{subject}", "DELETE")
    assert (status, answer["error_code"]) == (404, 40404)
    assert http(f"{url}/schemas/ids/{first}")[0] == 200  # a soft-deleted schema is still served by id
    assert client.delete_subject(subject, permanent=True) == [1, 2]
    status, answer = http(f"{url}/subjects/{subject}/versions")
    assert (status, answer) == (404, {"error_code": 40401, "message": f"Subject '{subject}' not found."})
    status, answer = http(f"{url}/schemas/ids/{first}")
    assert (status, answer["error_code"]) == (404, 40403)  # no other subject held it


def test_modes_readonly_and_import(registry, client):
    url, subject = registry_url(registry), "mode-value"
    assert http(f"{url}/mode/{subject}", "PUT", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, avro(USER_V1))
    assert refused.value.error_code == 42205
    assert http(f"{url}/mode/{subject}") == (200, {"mode": "READONLY"})
    assert http(f"{url}/mode/{subject}", "PUT", {"mode": "SLEEPY"})[1]["error_code"] == 42204
    # IMPORT: the id and version come from the request (a migration from another registry)
    assert http(f"{url}/mode/{subject}", "PUT", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    status, answer = http(f"{url}/subjects/{subject}/versions", "POST",
                          {"schema": json.dumps(USER_V1), "id": 5000, "version": 7})
    assert (status, answer) == (200, {"id": 5000})
    assert http(f"{url}/subjects/{subject}/versions/7")[1]["id"] == 5000
    status, answer = http(f"{url}/subjects/{subject}/versions", "POST",
                          {"schema": json.dumps(USER_V2), "id": 5000, "version": 8})
    assert (status, answer["error_code"]) == (422, 42207)  # the id holds another schema
    assert http(f"{url}/mode/{subject}", "DELETE") == (200, {"mode": "IMPORT"})
    assert http(f"{url}/mode/{subject}?defaultToGlobal=true") == (200, {"mode": "READWRITE"})
    # ids go on past an imported one
    assert client.register_schema("after-import-value", avro(USER_V2)) > 5000
    status, answer = http(f"{url}/mode", "PUT", {"mode": "IMPORT"})
    assert (status, answer["error_code"]) == (422, 42205)  # subjects exist: only with ?force=true


def test_error_bodies_and_limits(registry):
    url = registry_url(registry)
    assert http(f"{url}/") == (200, {})
    assert http(f"{url}/schemas/types")[1] == ["AVRO", "JSON", "PROTOBUF"]
    assert http(f"{url}/nowhere") == (404, {"error_code": 404, "message": "HTTP 404 Not Found"})
    assert http(f"{url}/subjects", "PUT", {})[0] == 405
    status, answer = http(f"{url}/subjects/x/versions", "POST", raw=b"{not json")
    assert (status, answer["error_code"]) == (422, 422)
    status, answer = http(f"{url}/subjects/x/versions", "POST", {"schema": "{\"type\": \"recordz\"}"})
    assert (status, answer["error_code"]) == (422, 42201)
    status, answer = http(f"{url}/subjects/x/versions/0")
    assert (status, answer["error_code"]) == (422, 42202)
    status, answer = http(f"{url}/subjects/x/versions", "POST", {"schema": "\"int\""},
                          headers={"Content-Type": "text/plain"})
    assert status == 415
    assert _head_only(url, 9 * 1024 * 1024).startswith(b"HTTP/1.1 413 ")  # the body limit
    assert _head_only(url, 1024).startswith(b"HTTP/1.1 ") and not _head_only(url, 1024).startswith(b"HTTP/1.1 413")
    assert http(f"{url}/schemas/ids/99999") == (404, {"error_code": 40403, "message": "Schema 99999 not found"})


def _head_only(url: str, length: int) -> bytes:
    """The answer's status line to a POST announcing `length` body bytes, before any is sent."""
    host, port = url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST /subjects/x/versions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {length}\r\n"
                     "Content-Type: application/json\r\n\r\n".encode())
        if length <= 1024:
            sock.sendall(b" " * length)
        return sock.recv(64)


def _schema(n: int) -> Schema:
    return avro({"type": "record", "name": f"R{n}", "fields": [{"name": "f", "type": "int"}]})


def _ctl_compact(proc: KshimProcess) -> None:
    out = subprocess.run([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(proc.data_dir), "compact",
                          "_schemas"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ids_survive_a_restart_and_kill_9_and_are_never_reused(tmp_path):
    proc = KshimProcess(tmp_path / "data", *REGISTRY).start()
    try:
        client = SchemaRegistryClient({"url": registry_url(proc)})
        ids = {f"s{n}-value": client.register_schema(f"s{n}-value", _schema(n)) for n in range(6)}
        assert sorted(ids.values()) == list(range(1, 7))
        # the highest id deleted for good, and compaction left nothing of its records: still never reused
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        _set_topic_configs(admin, {"segment.bytes": "1024", "delete.retention.ms": "0",
                                   "min.cleanable.dirty.ratio": "0.01"})
        client.delete_subject("s5-value")
        client.delete_subject("s5-value", permanent=True)
        del ids["s5-value"]
        for n in range(20):  # later records roll the segments past the deleted schema's
            client.set_compatibility(f"filler-{n}", "NONE")

        def tombstone_compacted() -> bool:
            _ctl_compact(proc)
            return b"s5-value" not in _schemas_keys(proc.bootstrap)

        wait_until(tombstone_compacted, timeout=30, interval=0.2, message="s5-value compacted away")
        for stop in (proc.terminate, proc.kill):
            stop()
            proc.start()
            client = SchemaRegistryClient({"url": registry_url(proc)})
            assert {s: client.get_latest_version(s).schema_id for s in ids} == ids
            for s, schema_id in ids.items():
                assert client.get_schema(schema_id).schema_str == client.get_latest_version(s).schema.schema_str
        assert client.register_schema("new-value", _schema(99)) == 7  # not 6: that one was given once
    finally:
        proc.kill()


def _alter(name: str, value: str):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def _set_topic_configs(admin: AdminClient, configs: dict[str, str]) -> None:
    resource = ConfigResource("topic", "_schemas", incremental_configs=[_alter(k, v) for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _schemas_keys(bootstrap: str) -> bytes:
    """Every key on `_schemas` now, joined: what compaction left."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "peek", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    consumer.subscribe(["_schemas"])
    keys = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "no end of _schemas within 10 s"
            if msg.error():
                break  # the partition's end
            keys.append(msg.key() or b"")
    finally:
        consumer.close()
    return b"\n".join(keys)


@pytest.fixture
def sasl_registry(tmp_path) -> Iterator[KshimProcess]:
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\nalice:alice-secret\n")
    proc = KshimProcess(tmp_path / "data", "--listeners", "SASL_PLAINTEXT://127.0.0.1:0", "--sasl-users", str(users),
                        "--inter-broker-user", "admin", *REGISTRY).start()
    yield proc
    proc.kill()


def test_basic_auth_against_the_broker_users(sasl_registry):
    url = registry_url(sasl_registry)
    status, answer = http(f"{url}/subjects")
    assert (status, answer["error_code"]) == (401, 401)
    wrong = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:wrong"})
    with pytest.raises(SchemaRegistryError) as refused:
        wrong.get_subjects()
    assert refused.value.http_status_code == 401
    client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:alice-secret"})
    assert client.register_schema("secure-value", avro(USER_V1)) == 1
    assert client.get_subjects() == ["secure-value"]
    # a SCRAM credential stored at run time (kshim ctl scram) is a user too
    added = subprocess.run([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(sasl_registry.data_dir), "scram",
                            "add", "bob", "--mechanism", "SCRAM-SHA-256", "--password-stdin"],
                           input="bob-secret\n", capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stdout + added.stderr
    bob = SchemaRegistryClient({"url": url, "basic.auth.user.info": "bob:bob-secret"})
    assert bob.get_subjects() == ["secure-value"]
    with pytest.raises(SchemaRegistryError) as wrong_bob:
        SchemaRegistryClient({"url": url, "basic.auth.user.info": "bob:alice-secret"}).get_subjects()
    assert wrong_bob.value.http_status_code == 401


def test_a_cluster_keeps_serving_when_the_schemas_leader_dies(tmp_path):
    """--brokers 3: `_schemas` has 3 replicas; killing its leader, the registry writes to the new one."""
    with running(Cluster(tmp_path / "cluster", 3, *REGISTRY)) as cluster:
        client = SchemaRegistryClient({"url": registry_url(cluster.process)})
        first = client.register_schema("c-value", _schema(1))
        before = cluster.partition("_schemas")
        assert len(before["replicas"]) == 3 and before["leader"] >= 0, before
        assert run_ctl(cluster.data_dir, "kill", str(before["leader"])).returncode == 0
        second = client.register_schema("c-value", avro({"type": "record", "name": "R1", "fields": [
            {"name": "f", "type": "int"}, {"name": "g", "type": "int", "default": 0}]}))
        assert second == first + 1
        assert cluster.partition("_schemas")["leader"] != before["leader"]
        assert client.get_versions("c-value") == [1, 2]
        assert run_ctl(cluster.data_dir, "start", str(before["leader"])).returncode == 0


def test_https_with_the_brokers_tls_certificate(tmp_path):
    proc = KshimProcess(tmp_path / "data", "--listeners", "SSL://127.0.0.1:0", "--tls-dev", *REGISTRY).start()
    try:
        url = registry_url(proc)
        assert url.startswith("https://127.0.0.1:")
        ca = next(line for line in proc.output if "clients trust the CA in" in line).rsplit(" ", 1)[1]
        client = SchemaRegistryClient({"url": url, "ssl.ca.location": ca})
        assert client.register_schema("tls-value", avro(USER_V1)) == 1
        with pytest.raises(Exception):  # plain HTTP on the HTTPS port gets no answer
            urllib.request.urlopen(url.replace("https://", "http://") + "/subjects", timeout=10)
    finally:
        proc.kill()


def _protobuf_with_an_import():
    """Two .proto files, the second importing the first: its serializer registers the first as a reference."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    f = descriptor_pb2.FieldDescriptorProto
    common = descriptor_pb2.FileDescriptorProto(name="kshim_test/money.proto", package="kshim.common", syntax="proto3")
    money = common.message_type.add(name="Money")
    money.field.add(name="currency", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    money.field.add(name="cents", number=2, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    order = descriptor_pb2.FileDescriptorProto(name="kshim_test/order.proto", package="kshim.orders", syntax="proto3",
                                               dependency=["kshim_test/money.proto"])
    msg = order.message_type.add(name="Order")
    msg.field.add(name="id", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    msg.field.add(name="total", number=2, type=f.TYPE_MESSAGE, type_name=".kshim.common.Money",
                  label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(common)
    pool.Add(order)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("kshim.orders.Order")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("kshim.common.Money")))


def test_protobuf_with_an_imported_file_registers_it_as_a_reference(registry, client):
    order, money = _protobuf_with_an_import()
    values = [order(id=f"o{i}", total=money(currency="EUR", cents=100 * i)) for i in range(3)]
    serializer = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    got = round_trip(registry, "proto-orders", serializer, ProtobufDeserializer(order, {"use.deprecated.format": False}),
                     values)
    assert got == values
    latest = client.get_latest_version("proto-orders-value")
    assert [(ref.name, ref.subject) for ref in latest.schema.references] == [
        ("kshim_test/money.proto", "kshim_test/money.proto")]
    url = registry_url(registry)
    assert http(f"{url}/subjects/kshim_test%2Fmoney.proto/versions/1/referencedby") == (200, [latest.schema_id])


def test_a_taken_registry_port_stops_the_start_with_a_message(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = KshimProcess(tmp_path / "data", "--schema-registry", "--schema-registry-port", str(port))
        with pytest.raises(RuntimeError):
            proc.start()
        assert proc.proc is not None and proc.proc.wait(30) == 1
        assert f"the schema registry cannot listen on 127.0.0.1:{port}" in proc.logs(), proc.logs()


def test_a_sasl_cluster_serves_the_registry_with_basic_auth(tmp_path):
    """--brokers 2 with SASL_PLAINTEXT only: the registry reaches the brokers as the inter-broker user
    and checks basic credentials on a broker's SASL listener: the next broker's while broker 0 is down."""
    users = tmp_path / "users"
    users.write_text("admin:admin-secret\nalice:alice-secret\n")
    base = free_port_block(2)
    with running(Cluster(tmp_path / "cluster", 2, "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{base}",
                         "--sasl-users", str(users), "--inter-broker-user", "admin", *REGISTRY,
                         base_port=base)) as cluster:
        url = registry_url(cluster.process)
        assert http(f"{url}/subjects")[0] == 401
        client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:alice-secret"})
        assert client.register_schema("sasl-cluster-value", _schema(1)) == 1
        assert cluster.partition("_schemas")["replicas"] and client.get_subjects() == ["sasl-cluster-value"]
        assert run_ctl(cluster.data_dir, "kill", "0").returncode == 0
        admin = {"Authorization": "Basic " + base64.b64encode(b"admin:admin-secret").decode()}  # not cached yet
        wrong = {"Authorization": "Basic " + base64.b64encode(b"admin:nope").decode()}
        assert http(f"{url}/subjects", headers=admin) == (200, ["sasl-cluster-value"])
        assert http(f"{url}/subjects", headers=wrong)[0] == 401
        assert run_ctl(cluster.data_dir, "start", "0").returncode == 0
