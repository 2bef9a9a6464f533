"""What every schema type shares: the Schema protocol and InvalidSchema (Confluent's 42201)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


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
