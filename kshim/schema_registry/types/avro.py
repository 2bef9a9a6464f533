"""AVRO schemas, parsed and checked by Apache's own `avro` library.

Checked: the text is JSON and a valid Avro schema (names, enum symbols, unions, fixed sizes,
logical types as avro accepts them); a primitive such as `"string"` is a schema too. Named types
of the references resolve by their full names, as in Confluent (the reference's own name in the
registration is only a label). Compatibility is avro's ReaderWriterCompatibilityChecker, a port
of the Java SchemaCompatibility that Confluent's AvroSchema.isBackwardCompatible runs: reader =
the new schema, writer = the previous one; the messages follow Confluent's
`{errorType:'...', description:'...', additionalInfo:'...'}`.

canonical(): the parsed schema as compact JSON with docs, defaults and other properties kept,
referenced types written by name (Confluent stores Schema.toString() the same way).
formatted("resolved"): the same with the referenced types written out in place.
Field defaults must be of their field's type (Confluent parses new schemas with
validateDefaults; a union's default may match any branch, as Java Avro 1.10+ accepts).
Not done: normalize=True is our own stable form (full names, keys sorted), not byte-equal to Confluent's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import avro.compatibility
import avro.errors
import avro.name
import avro.schema

from kshim.schema_registry.types.base import InvalidSchema, Schema

# Confluent's Difference descriptions, "%s" filled with the side: reader = new, writer = previous
_DESCRIPTIONS = {
    "FIXED_SIZE_MISMATCH": "The size of FIXED type field at path '{path}' in the reader schema "
    "does not match with the writer schema",
    "TYPE_MISMATCH": "The type (path '{path}') of a field in the reader schema does not match "
    "with the writer schema",
    "NAME_MISMATCH": "The name of the schema has changed (path '{path}')",
    "MISSING_ENUM_SYMBOLS": "The reader schema is missing enum symbols '{info}' at path '{path}' "
    "in the writer schema",
    "MISSING_UNION_BRANCH": "The reader schema is missing a type inside a union field at path "
    "'{path}' in the writer schema",
    "READER_FIELD_MISSING_DEFAULT_VALUE": "The field '{info}' at path '{path}' in the reader "
    "schema has no default value and is missing in the writer schema",
}


def _load(obj: Any, names: avro.name.Names) -> avro.schema.Schema:
    try:
        return avro.schema.make_avsc_object(obj, names)
    except Exception as e:  # avro raises several types (and TypeError/KeyError on odd shapes)
        raise InvalidSchema(f"Invalid schema: {e}") from e


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidSchema(f"Invalid {what}: not JSON: {e}") from e


def _reference_names(references: Mapping[str, str]) -> tuple[avro.name.Names, list[avro.schema.Schema]]:
    """Parse the references in an order where each one's named types exist before its users.

    The registry passes transitive references but not necessarily in dependency order, so this
    retries the ones naming a type not yet known until no more progress is made.
    """
    pending = [(name, _json(text, f"reference {name!r}")) for name, text in references.items()]
    done: list[Any] = []
    while pending:
        failed: list[tuple[str, Any]] = []
        last_error = ""
        for name, obj in pending:
            names = avro.name.Names()
            for prior in done:  # a fresh Names: a failed parse may have left half its types in one
                avro.schema.make_avsc_object(prior, names)
            try:
                avro.schema.make_avsc_object(obj, names)
                done.append(obj)
            except Exception as e:
                failed.append((name, obj))
                last_error = f"reference {name!r}: {e}"
        if len(failed) == len(pending):
            raise InvalidSchema(f"Invalid schema: {last_error}")
        pending = failed
    names = avro.name.Names()
    return names, [avro.schema.make_avsc_object(obj, names) for obj in done]


class AvroSchema:
    schema_type = "AVRO"

    def __init__(self, parsed: avro.schema.Schema, references: list[avro.schema.Schema], normalize: bool) -> None:
        self.parsed = parsed
        self._references = references
        self._canonical = self._dump(inline_references=False, normalize=normalize)

    def _dump(self, *, inline_references: bool, normalize: bool) -> str:
        names = avro.name.Names()
        if not inline_references:
            # to_json writes a type it has already seen by name: mark the referenced ones seen
            seen = avro.name.Names()
            for ref in self._references:
                ref.to_json(seen)
            names.names = dict(seen.names)
        obj = self.parsed.to_json(names)
        if normalize:
            return json.dumps(_full_names(obj, None), sort_keys=True, separators=(",", ":"))
        return json.dumps(_java_order(obj), separators=(",", ":"))

    def canonical(self) -> str:
        return self._canonical

    def formatted(self, fmt: str | None) -> str:
        if fmt == "resolved":
            return self._dump(inline_references=True, normalize=False)
        return self._canonical

    def compatibility_errors(self, previous: Schema) -> list[str]:
        if not isinstance(previous, AvroSchema):
            return ["Incompatible because of different schema type"]
        try:
            result = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(
                self.parsed, previous.parsed
            )
        except RecursionError:  # Confluent answers an unexpected failure the same way
            return ["Unexpected exception during compatibility check: the schemas nest too deeply"]
        if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
            return []
        # avro merges the details of several incompatibilities into sets: pair them only when one
        kinds = [str(i.name).upper() for i in result.incompatibilities] or ["INCOMPATIBLE"]
        paths = sorted(result.locations)
        infos = sorted(result.messages)
        errors = []
        for kind in kinds:
            path = paths[0] if len(kinds) == 1 and paths else ", ".join(paths)
            info = infos[0] if len(kinds) == 1 and infos else "; ".join(infos)
            description = _DESCRIPTIONS.get(kind, "").format(path=path, info=info)
            errors.append(f"{{errorType:'{kind}', description:'{description}', additionalInfo:'{info}'}}")
        return errors


def _full_names(obj: Any, namespace: str | None) -> Any:
    """normalize=True: every name fully qualified and no namespace keys, so the same schema
    written with or without namespaces gives one text."""
    if isinstance(obj, list):
        return [_full_names(o, namespace) for o in obj]
    if isinstance(obj, str):
        if obj in avro.name.PRIMITIVE_TYPES or "." in obj or not namespace:
            return obj
        return f"{namespace}.{obj}"
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    if out.get("type") in ("record", "error", "enum", "fixed") and "name" in out:
        name = str(out["name"])
        ns = out.pop("namespace", namespace)
        full = name if "." in name or not ns else f"{ns}.{name}"
        out["name"] = full
        namespace = full.rpartition(".")[0] or None
    if "fields" in out:
        out["fields"] = [{**f, "type": _full_names(f.get("type"), namespace)} for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = _full_names(out[key], namespace)
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = _full_names(out["type"], namespace)
    return out


def _valid_value(schema: avro.schema.Schema, value: Any) -> bool:
    """Java Avro's Schema.isValidValue: may this JSON value be a default of this type?"""
    t = schema.type
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t in ("int", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if t in ("float", "double"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t in ("string", "bytes", "fixed"):
        return isinstance(value, str)
    if isinstance(schema, avro.schema.EnumSchema):
        return isinstance(value, str) and value in schema.symbols
    if isinstance(schema, avro.schema.ArraySchema):
        return isinstance(value, list) and all(_valid_value(schema.items, v) for v in value)
    if isinstance(schema, avro.schema.MapSchema):
        return isinstance(value, dict) and all(_valid_value(schema.values, v) for v in value.values())
    if isinstance(schema, avro.schema.UnionSchema):  # Java since 1.10: any branch
        return any(_valid_value(s, value) for s in schema.schemas)
    if isinstance(schema, avro.schema.RecordSchema):
        return isinstance(value, dict) and all(
            _valid_value(f.type, value[f.name]) if f.name in value else f.has_default for f in schema.fields)
    return True


def _check_defaults(schema: avro.schema.Schema, seen: set[int]) -> None:
    """Confluent parses a new schema with validateDefaults: a default must be of its field's type."""
    if id(schema) in seen:
        return
    seen.add(id(schema))
    if isinstance(schema, avro.schema.RecordSchema):
        for f in schema.fields:
            if f.has_default and not _valid_value(f.type, f.default):
                raise InvalidSchema(f"Invalid default for field {f.name}: {json.dumps(f.default)} "
                                    f"not a {json.dumps(f.type.to_json())}")
            _check_defaults(f.type, seen)
    for child in (getattr(schema, "items", None), getattr(schema, "values", None), *getattr(schema, "schemas", ())):
        if isinstance(child, avro.schema.Schema):
            _check_defaults(child, seen)


def parse_avro(text: str, references: Mapping[str, str], *, normalize: bool) -> AvroSchema:
    names, refs = _reference_names(references)
    obj = _json(text, "schema")
    try:
        parsed = _load(obj, names)
        _check_defaults(parsed, set())
    except RecursionError as e:
        raise InvalidSchema("Invalid schema: nested too deeply") from e
    return AvroSchema(parsed, refs, normalize)


# the key order of Java Avro's Schema.toString(), which Confluent's registry stores and answers
# (the Python library writes a field's "type" before its "name")
_SCHEMA_KEYS = ("type", "name", "namespace", "doc", "fields", "symbols", "items", "values", "size", "default")
_FIELD_KEYS = ("name", "type", "doc", "default", "order")


def _java_order(schema: Any) -> Any:
    if isinstance(schema, list):  # a union
        return [_java_order(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = _keys_first(schema, _SCHEMA_KEYS)
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = _java_order(out["type"])
    for key in ("items", "values"):
        if key in out:
            out[key] = _java_order(out[key])
    if isinstance(out.get("fields"), list):
        out["fields"] = [_field_order(f) for f in out["fields"]]
    return out


def _field_order(field: Any) -> Any:
    if not isinstance(field, dict):
        return field
    out = _keys_first(field, _FIELD_KEYS)
    if "type" in out:
        out["type"] = _java_order(out["type"])
    return out


def _keys_first(obj: dict[str, Any], first: tuple[str, ...]) -> dict[str, Any]:
    out = {k: obj[k] for k in first if k in obj}
    out.update((k, v) for k, v in obj.items() if k not in out)
    return out

