"""The schema types of the built-in Schema Registry: AVRO, JSON (JSON Schema) and PROTOBUF.

Each type parses the text a client registers, gives the text the registry stores and compares
(`canonical`), the renderings of `GET ...?format=` (`formatted`), and the pairwise BACKWARD rule
of Confluent Schema Registry (`compatibility_errors`). The registry itself (levels, transitivity,
subjects, ids) builds on these and lives beside this package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

__all__ = ["SCHEMA_TYPES", "InvalidSchema", "Schema", "parse"]

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


class InvalidSchema(Exception):
    """The schema text does not parse or is not valid for its type (Confluent's 42201)."""


@runtime_checkable
class Schema(Protocol):
    schema_type: str

    def canonical(self) -> str:
        """The text the registry stores and compares: equal schemas give equal strings."""
        ...

    def formatted(self, fmt: str | None) -> str:
        """`GET ...?format=fmt`: None or an unknown format gives canonical()."""
        ...

    def compatibility_errors(self, previous: Schema) -> list[str]:
        """BACKWARD: can a reader using self read data written with previous? [] means yes."""
        ...


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
    # imported here so one type's library missing or slow to import costs only that type
    if kind == "AVRO":
        from kshim.schema_registry.types.avro import parse_avro

        return parse_avro(text, references, normalize=normalize)
    if kind == "JSON":
        from kshim.schema_registry.types.jsonschema import parse_json

        return parse_json(text, references, normalize=normalize)
    if kind == "PROTOBUF":
        from kshim.schema_registry.types.protobuf import parse_protobuf

        return parse_protobuf(text, references, normalize=normalize)
    raise InvalidSchema(f"unknown schema type {schema_type!r}: expected one of {', '.join(SCHEMA_TYPES)}")
