"""The schema registry's schema types: parsing, canonical text, references and the pairwise
BACKWARD rules, with pairs taken from Confluent's documentation and its test suites.

`compatible(new, old)` is BACKWARD: can a reader using `new` read data written with `old`?
FORWARD is the same call with the arguments swapped.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import descriptor_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kshim.schema_registry.types import SCHEMA_TYPES, InvalidSchema, Schema, parse


def avro(obj: Any, refs: dict[str, Any] | None = None) -> Schema:
    return parse("AVRO", json.dumps(obj), {k: json.dumps(v) for k, v in (refs or {}).items()})


def js(obj: Any, refs: dict[str, Any] | None = None) -> Schema:
    return parse("JSON", json.dumps(obj), {k: json.dumps(v) for k, v in (refs or {}).items()})


def proto(text: str, refs: dict[str, str] | None = None) -> Schema:
    return parse("PROTOBUF", text, refs or {})


def kinds(new: Schema, old: Schema) -> list[str]:
    """The errorType of each BACKWARD incompatibility, in order."""
    return [e.split("errorType:", 1)[1][1:].split(e.split("errorType:", 1)[1][0], 1)[0]
            for e in new.compatibility_errors(old)]


def test_interface() -> None:
    assert SCHEMA_TYPES == ("AVRO", "JSON", "PROTOBUF")
    for kind, text in (("AVRO", '"string"'), ("JSON", '{"type":"string"}'), ("PROTOBUF", 'syntax = "proto3";')):
        s = parse(kind, text)
        assert isinstance(s, Schema) and s.schema_type == kind
        assert s.formatted(None) == s.canonical() == s.formatted("no-such-format")
    with pytest.raises(InvalidSchema, match="unknown schema type"):
        parse("XML", "<a/>")


def test_schema_types_differ_is_incompatible() -> None:
    assert avro("string").compatibility_errors(js({"type": "string"})) == [
        "Incompatible because of different schema type"]


# --- AVRO -------------------------------------------------------------------------------------------

RECORD = {"type": "record", "name": "User", "namespace": "com.acme",
          "fields": [{"name": "id", "type": "int"}]}


def with_fields(*fields: dict[str, Any]) -> dict[str, Any]:
    return {**RECORD, "fields": [*RECORD["fields"], *fields]}


def test_avro_parse_and_canonical() -> None:
    assert avro("string").canonical() == '"string"'
    assert avro({"type": "string"}).canonical() == '"string"'
    spaced = json.dumps(RECORD, indent=4)
    assert parse("AVRO", spaced).canonical() == avro(RECORD).canonical()  # whitespace is not the schema
    doc = {**RECORD, "doc": "a user", "fields": [{"name": "id", "type": "int", "default": 0, "doc": "x"}]}
    text = avro(doc).canonical()
    assert '"doc":"a user"' in text and '"default":0' in text  # not the Parsing Canonical Form
    assert '": ' not in text and ", " not in text  # compact


@pytest.mark.parametrize("text", [
    "{", "[1]", "123", "null", '"NoSuchType"', '{"type":"record"}', '{"type":"record","name":"R"}',
    '{"type":"enum","name":"E","symbols":["A","A"]}', '{"type":"fixed","name":"F","size":-1}',
    '{"type":"record","name":"R","fields":[{"name":"a","type":"nope"}]}', '{"type":"map"}',
    # defaults of the wrong type (Confluent validates defaults of new schemas)
    '{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}',
    '{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":null}]}',
    '{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"enum","name":"E","symbols":["A"]},"default":"B"}]}',
    '{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"int"},"default":[1,"2"]}]}',
])
def test_avro_invalid(text: str) -> None:
    with pytest.raises(InvalidSchema):
        parse("AVRO", text)


def test_avro_valid_defaults() -> None:
    for field_type, default in (("int", 1), ("double", 1), ("string", "x"), (["null", "string"], None),
                                (["null", "string"], "x"), ({"type": "map", "values": "long"}, {"a": 1}),
                                ({"type": "fixed", "name": "F", "size": 2}, "\u0000\u0001"), ("boolean", False)):
        avro({**RECORD, "fields": [{"name": "f", "type": field_type, "default": default}]})


def test_avro_references_resolve_by_full_name() -> None:
    address = {"type": "record", "name": "Address", "namespace": "com.acme",
               "fields": [{"name": "city", "type": "string"}]}
    user = with_fields({"name": "home", "type": "com.acme.Address"}, {"name": "work", "type": "Address"})
    with pytest.raises(InvalidSchema):
        avro(user)  # the named type exists only through the reference
    s = avro(user, {"com.acme.Address": address})
    assert '"type":"com.acme.Address"' in s.canonical() and "city" not in s.canonical()
    resolved = s.formatted("resolved")
    assert '"city"' in resolved and avro(json.loads(resolved)).canonical() == resolved
    # transitive references in any order
    country = {"type": "enum", "name": "Country", "namespace": "com.acme", "symbols": ["NL", "DE"]}
    address2 = {**address, "fields": [*address["fields"], {"name": "country", "type": "Country"}]}
    avro(user, {"com.acme.Address": address2, "com.acme.Country": country})


def test_avro_normalize() -> None:
    # the canonical text already writes names one way (avro resolves namespaces when parsing)...
    a = {"type": "record", "name": "R", "namespace": "n", "fields": [{"name": "x", "type": "int"}]}
    b = {"type": "record", "name": "n.R", "fields": [{"type": "int", "name": "x"}]}
    assert avro(a).canonical() == avro(b).canonical()
    # ...but keeps custom properties in their order: normalize sorts them and qualifies names
    c = {"type": "record", "name": "R", "namespace": "n", "fields": [{"name": "x", "type": "int"}], "p": 1, "q": 2}
    d = {"type": "record", "name": "R", "namespace": "n", "fields": [{"name": "x", "type": "int"}], "q": 2, "p": 1}
    assert avro(c).canonical() != avro(d).canonical()
    normal = parse("AVRO", json.dumps(c), normalize=True).canonical()
    assert normal == parse("AVRO", json.dumps(d), normalize=True).canonical()
    assert '"name":"n.R"' in normal and "namespace" not in normal


@pytest.mark.parametrize("new, old, errors", [
    # Confluent docs, "Compatibility types": BACKWARD allows deleting fields and adding optional ones
    (with_fields({"name": "email", "type": "string", "default": ""}), RECORD, []),
    (with_fields({"name": "email", "type": "string"}), RECORD, ["READER_FIELD_MISSING_DEFAULT_VALUE"]),
    (RECORD, with_fields({"name": "email", "type": "string"}), []),  # field removed: backward ok
    (with_fields({"name": "n", "type": ["null", "string"], "default": None}), RECORD, []),
    # type promotions of the Avro spec: int -> long/float/double, string <-> bytes; not back
    ({**RECORD, "fields": [{"name": "id", "type": "long"}]}, RECORD, []),
    ({**RECORD, "fields": [{"name": "id", "type": "double"}]}, RECORD, []),
    (RECORD, {**RECORD, "fields": [{"name": "id", "type": "long"}]}, ["TYPE_MISMATCH"]),
    ({**RECORD, "fields": [{"name": "id", "type": "string"}]}, RECORD, ["TYPE_MISMATCH"]),
    ("bytes", "string", []),
    # enums: a reader with more symbols reads old data; one with fewer does not
    ({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}, {"type": "enum", "name": "E", "symbols": ["A", "B"]}, []),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, {"type": "enum", "name": "E", "symbols": ["A", "B"]},
     ["MISSING_ENUM_SYMBOLS"]),
    # unions: the reader's union must cover every writer branch
    (["null", "string", "int"], ["null", "string"], []),
    (["null", "string"], ["null", "string", "int"], ["MISSING_UNION_BRANCH"]),
    ({**RECORD, "name": "Other"}, RECORD, ["NAME_MISMATCH"]),
    ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, ["FIXED_SIZE_MISMATCH"]),
])
def test_avro_compatibility(new: Any, old: Any, errors: list[str]) -> None:
    assert kinds(avro(new), avro(old)) == errors


def test_avro_message_names_the_field() -> None:
    [error] = avro(with_fields({"name": "email", "type": "string"})).compatibility_errors(avro(RECORD))
    assert "'email'" in error and "/fields/1" in error and "no default value" in error


# --- JSON ---------------------------------------------------------------------------------------------

CLOSED = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
OPEN = {"type": "object", "properties": {"a": {"type": "string"}}}


def props(base: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {**base, "properties": {**base["properties"], **more}}


def test_json_parse_and_canonical() -> None:
    assert js({"type": "string"}).canonical() == '{"type":"string"}'
    assert parse("JSON", '{ "b": 1,\n "a": {"type": "string"} }').canonical() == '{"b":1,"a":{"type":"string"}}'
    assert parse("JSON", '{"b":1,"a":2}', normalize=True).canonical() == '{"a":2,"b":1}'
    assert parse("JSON", "true").canonical() == "true"


@pytest.mark.parametrize("text", [
    "{", "[]", "1", '"string"', '{"type":"foo"}', '{"minLength":-1}', '{"required":"a"}',
    '{"$ref":"other.json"}', '{"properties":{"a":{"$ref":"#/definitions/missing"}}}',
    '{"$schema":"https://json-schema.org/draft/2020-12/schema","type":12}',
    '{"$schema":"http://json-schema.org/draft-04/schema#","exclusiveMinimum":3}',
])
def test_json_invalid(text: str) -> None:
    with pytest.raises(InvalidSchema):
        parse("JSON", text)


def test_json_draft_from_schema_keyword() -> None:
    # draft-04's boolean exclusiveMinimum, 2020-12's prefixItems: each valid in its own draft
    parse("JSON", '{"$schema":"http://json-schema.org/draft-04/schema#","minimum":1,"exclusiveMinimum":true}')
    js({"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": [{"type": "string"}]})


def test_json_references() -> None:
    address = {"$id": "https://acme.com/address.json", "type": "object",
               "properties": {"city": {"type": "string"}}}
    user = {"type": "object", "properties": {"home": {"$ref": "address.json"},
                                             "work": {"$ref": "https://acme.com/address.json"}}}
    s = js(user, {"address.json": address})
    assert s.canonical() == json.dumps(user, separators=(",", ":"))
    # compatibility looks through $ref into the referenced schema
    changed = {**address, "properties": {"city": {"type": "integer"}}}
    assert kinds(js(user, {"address.json": changed}), s) == ["TYPE_CHANGED", "TYPE_CHANGED"]  # home, work
    # a relative $ref in a schema with an $id resolves against it, and still finds the reference
    with_id = {"$id": "https://acme.com/schemas/user.json", **user}
    js(with_id, {"address.json": address})  # home: .../schemas/address.json, work: the reference's $id
    js({"$ref": "address.json#/properties/city"}, {"address.json": address})
    recursive = {"definitions": {"node": {"type": "object", "properties": {"next": {"$ref": "#/definitions/node"}}}},
                 "$ref": "#/definitions/node"}
    assert js(recursive).compatibility_errors(js(recursive)) == []


@pytest.mark.parametrize("new, old, errors", [
    # Confluent's docs, "JSON Schema compatibility rules": open vs closed content models
    (props(CLOSED, b={"type": "integer"}), CLOSED, []),  # optional property added, closed: ok
    (CLOSED, props(CLOSED, b={"type": "integer"}), ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]),
    (props(OPEN, b={"type": "integer"}), OPEN, ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]),
    (OPEN, props(OPEN, b={"type": "integer"}), []),  # removed from an open model: ok
    (props(OPEN, b={}), OPEN, []),  # a property that accepts anything
    ({**props(CLOSED, b={"type": "integer"}), "required": ["b"]}, CLOSED,
     ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"]),
    ({**props(CLOSED, b={"type": "integer", "default": 0}), "required": ["b"]}, CLOSED, []),
    # partially open: the new property must fit additionalProperties' schema
    (props({**OPEN, "additionalProperties": {"type": "string"}}, b={"type": "string"}),
     {**OPEN, "additionalProperties": {"type": "string"}}, []),
    (props({**OPEN, "additionalProperties": {"type": "string"}}, b={"type": "integer"}),
     {**OPEN, "additionalProperties": {"type": "string"}},
     ["TYPE_CHANGED", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"]),
    # required
    ({**CLOSED, "required": ["a"]}, CLOSED, ["REQUIRED_ATTRIBUTE_ADDED"]),
    (CLOSED, {**CLOSED, "required": ["a"]}, []),
    # additionalProperties
    (OPEN, CLOSED, []),
    (CLOSED, OPEN, ["ADDITIONAL_PROPERTIES_REMOVED"]),
    ({**OPEN, "additionalProperties": {"type": "string"}}, OPEN, ["ADDITIONAL_PROPERTIES_NARROWED"]),
    # types: number reads integers, not the other way; a union reads each of its types
    ({"type": "number"}, {"type": "integer"}, []),
    ({"type": "integer"}, {"type": "number"}, ["TYPE_NARROWED"]),
    ({"type": "string"}, {"type": "integer"}, ["TYPE_CHANGED"]),
    ({"type": ["string", "null"]}, {"type": "string"}, []),
    ({"type": "string"}, {"type": ["string", "null"]}, ["TYPE_CHANGED"]),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "string"}, []),
    ({"oneOf": [{"type": "string"}]}, {"oneOf": [{"type": "string"}, {"type": "integer"}]}, ["SUM_TYPE_NARROWED"]),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"oneOf": [{"type": "string"}, {"type": "integer"}]}, []),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"anyOf": [{"type": "string"}, {"type": "integer"}]},
     ["COMBINED_TYPE_CHANGED"]),
    ({"allOf": [{"type": "string"}, {"maxLength": 4}]}, {"allOf": [{"type": "string"}]}, ["PRODUCT_TYPE_EXTENDED"]),
    # enum and const
    ({"enum": ["a", "b", "c"]}, {"enum": ["a", "b"]}, []),
    ({"enum": ["a"]}, {"enum": ["a", "b"]}, ["ENUM_ARRAY_NARROWED"]),
    ({"enum": ["a", "c"]}, {"enum": ["a", "b"]}, ["ENUM_ARRAY_CHANGED"]),
    ({"const": 1}, {"const": 2}, ["ENUM_ARRAY_CHANGED"]),
    # string and number bounds: loosening reads old data, tightening does not
    ({"type": "string", "maxLength": 10}, {"type": "string", "maxLength": 5}, []),
    ({"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 10}, ["MAX_LENGTH_DECREASED"]),
    ({"type": "string", "minLength": 1}, {"type": "string"}, ["MIN_LENGTH_ADDED"]),
    ({"type": "string"}, {"type": "string", "pattern": "^a"}, []),
    ({"type": "string", "pattern": "^b"}, {"type": "string", "pattern": "^a"}, ["PATTERN_CHANGED"]),
    ({"type": "number", "maximum": 5}, {"type": "number", "maximum": 10}, ["MAXIMUM_DECREASED"]),
    ({"type": "number", "minimum": 0}, {"type": "number", "minimum": 5}, []),
    ({"type": "number", "multipleOf": 2}, {"type": "number", "multipleOf": 4}, []),
    ({"type": "number", "multipleOf": 4}, {"type": "number", "multipleOf": 2}, ["MULTIPLE_OF_EXPANDED"]),
    # arrays
    ({"type": "array", "items": {"type": "number"}}, {"type": "array", "items": {"type": "integer"}}, []),
    ({"type": "array", "items": {"type": "string"}}, {"type": "array", "items": {"type": "integer"}}, ["TYPE_CHANGED"]),
    ({"type": "array", "maxItems": 2}, {"type": "array", "maxItems": 3}, ["MAX_ITEMS_DECREASED"]),
    ({"type": "array", "uniqueItems": True}, {"type": "array"}, ["UNIQUE_ITEMS_ADDED"]),
    ({"type": "array", "items": [{"type": "string"}], "additionalItems": False},
     {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False},
     ["ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"]),
    # dependencies: a reader may drop or narrow them, not add or extend them
    ({**OPEN, "dependencies": {"a": ["b"]}}, OPEN, ["DEPENDENCY_ARRAY_ADDED"]),
    (OPEN, {**OPEN, "dependencies": {"a": ["b"]}}, []),
    ({**OPEN, "dependencies": {"a": ["b", "c"]}}, {**OPEN, "dependencies": {"a": ["b"]}}, ["DEPENDENCY_ARRAY_EXTENDED"]),
    ({**OPEN, "dependencies": {"a": ["b"]}}, {**OPEN, "dependencies": {"a": ["b", "c"]}}, []),
    ({**OPEN, "dependencies": {"a": {"required": ["b"]}}}, OPEN, ["DEPENDENCY_SCHEMA_ADDED"]),
    # a type beside a combiner or enum is one more allOf member (as everit reads it): changes to it count
    ({**props(OPEN, a={"type": "integer"}), "oneOf": [{"required": ["a"]}]},
     {**OPEN, "oneOf": [{"required": ["a"]}]}, ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"]),
    ({**OPEN, "oneOf": [{"required": ["a"]}]}, {**OPEN, "oneOf": [{"required": ["a"]}]}, []),
    ({"type": "string", "enum": ["a", "b"]}, {"type": "string", "enum": ["a"]}, []),
    ({"type": "string", "enum": ["a"]}, {"type": "string", "enum": ["a", "b"]}, ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"]),
    # nested: a property's own change is reported at its path
    (props(OPEN, a={"type": "integer"}), OPEN, ["TYPE_CHANGED"]),
    ({"not": {"type": "string"}}, {"not": {"type": "string"}}, []),
    (True, {"type": "string"}, []),  # the empty schema reads anything
])
def test_json_compatibility(new: Any, old: Any, errors: list[str]) -> None:
    assert kinds(js(new), js(old)) == errors


def test_json_message_has_path() -> None:
    [error] = js(props(OPEN, a={"type": "integer"})).compatibility_errors(js(OPEN))
    assert "#/properties/a" in error and "TYPE_CHANGED" in error


# --- PROTOBUF -----------------------------------------------------------------------------------------

ORDER = """syntax = "proto3";
package acme.v1;

import "google/protobuf/timestamp.proto";

message Order {
  string id = 1;
  int32 quantity = 2;
  google.protobuf.Timestamp at = 3;
  map<string, string> tags = 4;
  oneof payment {
    string card = 5;
    string iban = 6;
  }
  Status status = 7;
  enum Status {
    NEW = 0;
    DONE = 1;
  }
}
"""


def order(old: str, new: str) -> Schema:
    assert old in ORDER, old
    return proto(ORDER.replace(old, new))


def test_protobuf_text_and_descriptor_are_one_schema() -> None:
    text = proto(ORDER)
    assert text.canonical().startswith('syntax = "proto3";\npackage acme.v1;\n')
    assert proto(text.canonical()).canonical() == text.canonical()  # a fixpoint
    assert proto(ORDER.replace("\n  ", "\n      ")).canonical() == text.canonical()
    serialized = text.formatted("serialized")
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized))
    assert [m.name for m in fdp.message_type] == ["Order"] and fdp.package == "acme.v1"
    # what confluent-kafka-python registers: base64 of the FileDescriptorProto
    fdp.name = "order.proto"
    from_client = proto(base64.b64encode(fdp.SerializeToString()).decode())
    assert from_client.canonical() == text.canonical()
    assert from_client.compatibility_errors(text) == [] and text.compatibility_errors(from_client) == []


def test_protobuf_builtin_imports_and_references() -> None:
    proto('syntax = "proto3"; import "google/protobuf/any.proto"; import "google/protobuf/struct.proto";'
          'import "confluent/meta.proto"; import "confluent/type/decimal.proto"; import "google/type/date.proto";'
          'message M { google.protobuf.Any a = 1; confluent.type.Decimal d = 2 [(confluent.field_meta).doc = "x"];'
          ' google.type.Date day = 3; }')
    customer = 'syntax = "proto3";\npackage acme.v1;\nimport "acme/address.proto";\nmessage Customer { Address home = 1; }\n'
    address = 'syntax = "proto3";\npackage acme.v1;\nmessage Address { string city = 1; }\n'
    with pytest.raises(InvalidSchema, match="address.proto"):
        proto(customer)
    s = proto(customer, {"acme/address.proto": address})
    assert 'import "acme/address.proto";' in s.canonical() and ".acme.v1.Address home = 1;" in s.canonical()
    # a reference given as a serialized descriptor, as the Python client registers them
    ref_fdp = descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(proto(address).formatted("serialized")))
    as_b64 = base64.b64encode(ref_fdp.SerializeToString()).decode()
    assert proto(customer, {"acme/address.proto": as_b64}).canonical() == s.canonical()
    # a change inside the referenced message is seen through the field
    changed = address.replace("string city", "int64 city")
    assert kinds(proto(customer, {"acme/address.proto": changed}), s) == [
        "FIELD_SCALAR_KIND_CHANGED", "FIELD_NAMED_TYPE_CHANGED"]


def test_protobuf_nested_message_order_survives() -> None:
    # clients name a nested message by its index in nested_type, where protoc also puts map entries
    text = ('syntax = "proto3";\nmessage A {\n  message X { int32 x = 1; }\n  map<string, int32> m = 1;\n'
            '  message Y { int32 y = 1; }\n  map<string, X> n = 2;\n  message Z { int32 z = 1; }\n  int32 last = 3;\n}\n')

    def nested(s: Schema) -> list[str]:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(s.formatted("serialized")))
        return [n.name for n in fdp.message_type[0].nested_type]

    original = proto(text)
    assert nested(original) == ["X", "MEntry", "Y", "NEntry", "Z"]
    assert nested(proto(original.canonical())) == nested(original)
    assert proto(original.canonical()).canonical() == original.canonical()


def test_protobuf_descriptor_keeps_custom_options() -> None:
    text = proto('syntax = "proto3";\nimport "confluent/meta.proto";\nmessage M {\n'
                 '  option (confluent.message_meta) = { doc: "a message" };\n'
                 '  string s = 1 [(confluent.field_meta) = { tags: "PII" }];\n}\n')
    assert '(confluent.field_meta) = { tags: "PII" }' in text.canonical()
    assert '(confluent.message_meta) = { doc: "a message" }' in text.canonical()
    assert proto(text.formatted("serialized")).canonical() == text.canonical()


EXOTIC = """syntax = "proto2";
package p;
import "google/protobuf/descriptor.proto";
extend google.protobuf.FieldOptions { optional string tag = 50001; }
message A {
  extensions 100 to 199;
  optional double d = 1 [default = inf];
  optional float f = 2 [default = -1.5e10];
  optional bytes b = 3 [default = "\\x00\\xff\\"q"];
  optional string s = 4 [default = "h\u00e9llo\\n", (tag) = "x"];
  repeated int32 p = 5 [packed = true];
  optional E e = 6 [default = NEG];
  enum E { option allow_alias = true; NEG = -1; ZERO = 0; ALIAS = 0 [deprecated = true]; reserved 5 to 10, 20; }
  extend A { optional int32 ext = 100; }
  oneof o { int32 x = 7; }
  reserved "gone";
}
service S { option deprecated = true; rpc M(A) returns (A) { option idempotency_level = NO_SIDE_EFFECTS; }
            rpc N(stream A) returns (stream A); }
"""


GROUPS = """syntax = "proto2";
message A {
  message X { optional int32 x = 1; }
  optional group G = 1 { optional int32 x = 2; repeated group H = 3 { optional string s = 4; } }
  message Y { optional int32 y = 1; }
  oneof o { group K = 5 { optional int32 k = 6; } }
}
"""


@pytest.mark.parametrize("text", [EXOTIC, GROUPS, 'edition = "2023";\nmessage A { int32 a = 1 [features.field_presence = IMPLICIT]; }\n'])
def test_protobuf_canonical_round_trips(text: str) -> None:
    # the printer covers what protoc accepts: text and descriptor give one canonical text
    s = proto(text)
    assert proto(s.canonical()).canonical() == s.canonical()
    assert proto(s.formatted("serialized")).canonical() == s.canonical()
    assert proto(s.canonical()).formatted("serialized") == s.formatted("serialized")  # the same descriptor


def test_protobuf_what_the_python_client_registers() -> None:
    # ProtobufSerializer registers DESCRIPTOR.serialized_pb of the message's file, base64
    from google.protobuf import struct_pb2

    s = proto(base64.b64encode(struct_pb2.DESCRIPTOR.serialized_pb).decode())
    assert "message Struct {" in s.canonical() and "map<string, .google.protobuf.Value> fields = 1;" in s.canonical()
    assert "enum NullValue {" in s.canonical() and "json_name" not in s.canonical()  # only chosen ones print
    chosen = proto('syntax = "proto3";\nmessage M {\n  string a_b = 1 [json_name = "x"];\n  string c_d = 2;\n}\n')
    assert 'string a_b = 1 [json_name = "x"];' in chosen.canonical() and "string c_d = 2;" in chosen.canonical()


@pytest.mark.parametrize("text", [
    "message {", 'syntax = "proto3"; message A { Foo f = 1; }', 'syntax = "proto3"; message A { int32 a = 1; int32 b = 1; }',
    'import "missing.proto";', 'syntax = "proto4";', 'syntax = "proto3"; message A { required int32 a = 1; }',
    "AAAA####", 'syntax = "proto3"; enum E { A = 1; }',
])
def test_protobuf_invalid(text: str) -> None:
    with pytest.raises(InvalidSchema):
        proto(text)


def test_protobuf_invalid_references() -> None:
    for name in ("../etc/passwd", "/abs.proto", "a//b.proto", "", "default"):
        with pytest.raises(InvalidSchema):
            proto('syntax = "proto3";', {name: 'syntax = "proto3";'})


def test_protobuf_proto2_and_no_syntax() -> None:
    s = proto('message A { optional int32 x = 1 [default = 5]; required string s = 2; repeated bytes b = 3; }')
    assert s.canonical().startswith('syntax = "proto2";')
    assert "optional int32 x = 1 [default = 5];" in s.canonical() and "required string s = 2;" in s.canonical()
    assert proto(s.canonical()).canonical() == s.canonical()


@pytest.mark.parametrize("old, new, errors", [
    # compatible per Confluent's protobuf rules
    ("  Status status = 7;\n", "  Status status = 7;\n  string note = 8;\n", []),  # field added
    ("  int32 quantity = 2;\n", "", []),  # field removed
    ("  string id = 1;", "  string order_id = 1;", []),  # renamed: same number
    ("  int32 quantity = 2;", "  int64 quantity = 2;", []),  # int32/int64/uint*/bool are one wire group
    ("  string id = 1;", "  bytes id = 1;", []),
    ("  Status status = 7;", "  int32 status = 7;", []),  # an enum reads as an int32
    ("    DONE = 1;\n", "    DONE = 1;\n    CANCELLED = 2;\n", []),  # enum constant added
    ("message Order {", "message Extra { int32 x = 1; }\n\nmessage Order {", []),  # message added, moved
    ("  oneof payment {\n    string card = 5;\n    string iban = 6;\n  }\n", "", []),  # whole oneof removed
    ("  oneof payment {\n    string card = 5;\n    string iban = 6;\n  }\n",
     "  oneof payment {\n    string card = 5;\n    string iban = 6;\n    string cash = 9;\n  }\n", []),
    # incompatible
    ("  int32 quantity = 2;", "  string quantity = 2;", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("  int32 quantity = 2;", "  sint32 quantity = 2;", ["FIELD_SCALAR_KIND_CHANGED"]),  # zigzag on the wire
    ("  int32 quantity = 2;", "  double quantity = 2;", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("  string id = 1;", "  google.protobuf.Timestamp id = 1;", ["FIELD_KIND_CHANGED"]),
    ("  google.protobuf.Timestamp at = 3;", "  Order at = 3;", ["FIELD_NAMED_TYPE_CHANGED"]),
    ("  map<string, string> tags = 4;", "  map<string, int32> tags = 4;", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("  int32 quantity = 2;", "  repeated int32 quantity = 2;", []),  # proto3 plain -> repeated: Confluent allows
    ("  int32 quantity = 2;", "  int32 quantity = 12;", []),  # renumbered = removed + added: allowed...
    ("package acme.v1;", "package acme.v2;", ["PACKAGE_CHANGED"]),
    ("  oneof payment {\n    string card = 5;\n    string iban = 6;\n  }\n",
     "  oneof payment {\n    string card = 5;\n  }\n", ["ONEOF_FIELD_REMOVED"]),
    ("  string id = 1;\n  int32 quantity = 2;\n",
     "  oneof ident {\n    string id = 1;\n    int32 quantity = 2;\n  }\n", ["MULTIPLE_FIELDS_MOVED_TO_ONEOF"]),
    ("  string id = 1;\n", "", []),
])
def test_protobuf_compatibility(old: str, new: str, errors: list[str]) -> None:
    assert kinds(order(old, new), proto(ORDER)) == errors


def test_protobuf_renumbered_field_changes_type_at_the_number() -> None:
    # renumbering to a number another field had: the reader decodes that number with its own type
    new = order("  string id = 1;\n  int32 quantity = 2;", "  string id = 2;\n  int32 quantity = 1;")
    assert kinds(new, proto(ORDER)) == ["FIELD_SCALAR_KIND_CHANGED", "FIELD_SCALAR_KIND_CHANGED"]


def test_protobuf_message_removed_and_required() -> None:
    two = 'syntax = "proto2";\nmessage A { optional int32 x = 1; }\nmessage B { optional int32 y = 1; }\n'
    one = 'syntax = "proto2";\nmessage A { optional int32 x = 1; }\n'
    assert kinds(proto(one), proto(two)) == ["MESSAGE_REMOVED"]
    assert kinds(proto(two), proto(one)) == []
    req = 'syntax = "proto2";\nmessage A { optional int32 x = 1; required int32 r = 2; }\nmessage B { optional int32 y = 1; }\n'
    assert kinds(proto(req), proto(two)) == ["REQUIRED_FIELD_ADDED"]
    assert kinds(proto(two), proto(req)) == ["REQUIRED_FIELD_REMOVED"]
    assert kinds(proto(two.replace("optional int32 x", "repeated int32 x")), proto(two)) == [
        "FIELD_NUMERIC_LABEL_CHANGED"]


def test_protobuf_message_has_path() -> None:
    [error] = order("  int32 quantity = 2;", "  string quantity = 2;").compatibility_errors(proto(ORDER))
    assert "#/Order/2" in error


def test_protobuf_normalize() -> None:
    a = 'syntax = "proto3";\nmessage A {\n  int32 b = 2;\n  int32 a = 1;\n}\n'
    b = 'syntax = "proto3";\nmessage A {\n  int32 a = 1;\n  int32 b = 2;\n}\n'
    assert proto(a).canonical() != proto(b).canonical()
    assert parse("PROTOBUF", a, normalize=True).canonical() == parse("PROTOBUF", b, normalize=True).canonical()


# --- fuzz: anything that is not a schema is InvalidSchema, never another exception ---------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["string", "int", "record", "object", "array", "fields", "type", "name", "items"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "name", "fields", "items", "values", "symbols", "properties", "required",
                         "additionalProperties", "$ref", "enum", "size", "default", "oneOf", "x"]),
        inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["AVRO", "JSON"]), doc=_json_values)
def test_fuzz_json_based_types(kind: str, doc: Any) -> None:
    try:
        s = parse(kind, json.dumps(doc))
    except InvalidSchema:
        return
    assert parse(kind, s.canonical()).canonical() == s.canonical()
    assert isinstance(s.compatibility_errors(s), list)


_proto_tokens = st.sampled_from([
    'syntax = "proto3";', 'syntax = "proto2";', "message", "enum", "A", "B", "{", "}", "=", ";", "1", "2",
    "int32", "string", "repeated", "optional", "oneof", "map<string,int32>", "import", '"x.proto"', "package", "p.q",
    "reserved", "option", "[", "]", "deprecated", "true", "(", ")", "service", "rpc", "returns", "\x00", "é",
])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tokens=st.lists(_proto_tokens, max_size=25), noise=st.binary(max_size=40))
def test_fuzz_protobuf(tokens: list[str], noise: bytes) -> None:
    for text in (" ".join(tokens), base64.b64encode(noise).decode()):
        try:
            s = proto(text)
        except InvalidSchema:
            continue
        assert proto(s.canonical()).canonical() == s.canonical()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(SCHEMA_TYPES), name=st.text(max_size=12), ref=st.text(max_size=30) | _json_values.map(json.dumps),
       text=st.sampled_from(['"string"', '{"type":"object","properties":{"a":{"$ref":"x"}}}', 'syntax = "proto3"; import "x";',
                             '{"type":"record","name":"R","fields":[{"name":"a","type":"x"}]}']))
def test_fuzz_references(kind: str, name: str, ref: str, text: str) -> None:
    try:
        parse(kind, text, {name: ref, "x": ref})
    except InvalidSchema:
        pass


def test_avro_text_keeps_java_avros_key_order():
    """What GET /schemas/ids/{id} answers reads as Confluent's does: Java Avro's Schema.toString()
    order (a record's type and name first; a field's name before its type)."""
    text = parse("AVRO", json.dumps({"fields": [{"default": 1, "type": "int", "name": "a"}], "name": "R",
                                     "type": "record"})).canonical()
    assert text == '{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":1}]}'
