"""The schema types of the built-in Schema Registry: AVRO, JSON (JSON Schema) and PROTOBUF.

Each type parses the text a client registers, gives the text the registry stores and compares
(`canonical`), the renderings of `GET ...?format=` (`formatted`), and the pairwise BACKWARD rule
of Confluent Schema Registry (`compatibility_errors`). The registry itself (levels, transitivity,
subjects, ids) builds on these and lives beside this package.
"""

from __future__ import annotations

from collections.abc import Mapping

from kshim.schema_registry.types.avro import parse_avro
from kshim.schema_registry.types.base import InvalidSchema, Schema
from kshim.schema_registry.types.jsonschema import parse_json
from kshim.schema_registry.types.protobuf import parse_protobuf

__all__ = ["SCHEMA_TYPES", "InvalidSchema", "Schema", "parse"]

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


def parse(
    schema_type: str,
    text: str,
    references: Mapping[str, str] = {},  # noqa: B006 - read only
    *,
    normalize: bool = False,
) -> Schema:
    """Parse `text` as `schema_type` ("AVRO" when the registration leaves it out).

    `references` maps each reference name (Avro: the name the registration gives, the
    referenced types resolve by their own full names; JSON: the $ref URL or file name;
    Protobuf: the import path) to the referenced schema's text, transitive ones included.
    Raises InvalidSchema for anything that is not a valid schema of that type.
    """
    kind = (schema_type or "AVRO").upper()
    if not isinstance(text, str):
        raise InvalidSchema(f"the schema must be a string, not {type(text).__name__}")
    for name, ref_text in references.items():
        if not isinstance(name, str) or not isinstance(ref_text, str):
            raise InvalidSchema("references must map names to schema texts")
    if kind == "AVRO":
        return parse_avro(text, references, normalize=normalize)
    if kind == "JSON":
        return parse_json(text, references, normalize=normalize)
    if kind == "PROTOBUF":
        return parse_protobuf(text, references, normalize=normalize)
    raise InvalidSchema(f"unknown schema type {schema_type!r}: expected one of {', '.join(SCHEMA_TYPES)}")
