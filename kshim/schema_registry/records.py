"""Confluent Schema Registry's records on `_schemas`, as its KafkaStore writes them: JSON keys
and values, so a topic written by kshim reads in Confluent's registry and the other way round.

Keys (field order as Confluent's @JsonPropertyOrder, empty fields left out):
  SCHEMA  {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}
  CONFIG  {"keytype":"CONFIG","subject":S,"magic":0}      (no subject: the global config)
  MODE    {"keytype":"MODE","subject":S,"magic":0}
  DELETE_SUBJECT / CLEAR_SUBJECT {"keytype":...,"subject":S,"magic":0}
  NOOP    {"keytype":"NOOP","magic":0}
Values: SchemaValue {"subject","version","id","schemaType","references","schema","deleted"},
ConfigValue {"subject","compatibilityLevel"}, ModeValue {"subject","mode"}; a permanent delete
is a tombstone (no value).

One kshim extension: a NOOP record with the value {"maxId": N}, written before a permanent
delete, so the highest id ever given survives compaction of the deleted schema's records (ids
are never reused). Confluent's reader skips NOOP records without reading their value."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA, CONFIG, MODE, NOOP = "SCHEMA", "CONFIG", "MODE", "NOOP"
DELETE_SUBJECT, CLEAR_SUBJECT = "DELETE_SUBJECT", "CLEAR_SUBJECT"
KEY_TYPES = (SCHEMA, CONFIG, MODE, NOOP, DELETE_SUBJECT, CLEAR_SUBJECT)


class BadRecord(ValueError):
    """A record of `_schemas` this registry cannot read (skipped, as Confluent's reader does)."""


@dataclass(frozen=True)
class Key:
    keytype: str
    subject: str | None = None
    version: int | None = None  # SCHEMA keys only


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = field(default=())
    deleted: bool = False


def _dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def encode_key(key: Key) -> bytes:
    out: dict[str, Any] = {"keytype": key.keytype}
    if key.subject:
        out["subject"] = key.subject
    if key.keytype == SCHEMA:
        out["version"] = key.version
    out["magic"] = 1 if key.keytype == SCHEMA else 0
    return _dumps(out)


def encode_schema(v: SchemaValue) -> bytes:
    out: dict[str, Any] = {"subject": v.subject, "version": v.version, "id": v.id, "schemaType": v.schema_type}
    if v.references:
        out["references"] = [r.to_json() for r in v.references]
    out["schema"] = v.schema
    out["deleted"] = v.deleted
    return _dumps(out)


def encode_config(subject: str | None, level: str) -> bytes:
    return _dumps({**({"subject": subject} if subject else {}), "compatibilityLevel": level})


def encode_mode(subject: str | None, mode: str) -> bytes:
    return _dumps({**({"subject": subject} if subject else {}), "mode": mode})


def encode_max_id(max_id: int) -> bytes:
    return _dumps({"maxId": max_id})


def _object(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRecord(f"{what} is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise BadRecord(f"{what} is not a JSON object")
    return obj


def _int(obj: dict[str, Any], name: str) -> int:
    value = obj.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRecord(f"{name} is not an integer: {value!r}")
    return value


def _str(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise BadRecord(f"{name} is not a string: {value!r}")
    return value


def decode_key(data: bytes) -> Key:
    obj = _object(data, "key")
    keytype = obj.get("keytype")
    if keytype not in KEY_TYPES:
        raise BadRecord(f"unknown keytype {keytype!r}")
    subject = obj.get("subject")
    if subject is not None and not isinstance(subject, str):
        raise BadRecord("subject is not a string")
    if keytype == SCHEMA:
        if obj.get("magic") != 1:
            raise BadRecord(f"SCHEMA key with magic {obj.get('magic')!r}")
        return Key(SCHEMA, _str(obj, "subject"), _int(obj, "version"))
    return Key(keytype, subject or None)


def decode_schema(data: bytes) -> SchemaValue:
    obj = _object(data, "schema value")
    refs = []
    for r in obj.get("references") or []:
        if not isinstance(r, dict):
            raise BadRecord("a reference is not an object")
        refs.append(Reference(_str(r, "name"), _str(r, "subject"), _int(r, "version")))
    schema_type = obj.get("schemaType") or "AVRO"
    if not isinstance(schema_type, str):
        raise BadRecord("schemaType is not a string")
    return SchemaValue(_str(obj, "subject"), _int(obj, "version"), _int(obj, "id"), _str(obj, "schema"),
                       schema_type, tuple(refs), bool(obj.get("deleted", False)))


def decode_field(data: bytes, name: str) -> str | None:
    """A config's compatibilityLevel or a mode's mode (None when the value carries none)."""
    value = _object(data, "value").get(name)
    if value is not None and not isinstance(value, str):
        raise BadRecord(f"{name} is not a string")
    return value


def decode_max_id(data: bytes) -> int | None:
    obj = _object(data, "NOOP value")
    value = obj.get("maxId")
    return value if isinstance(value, int) and not isinstance(value, bool) else None
