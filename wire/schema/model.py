"""The shape of a Kafka message schema: fields with version ranges, as Kafka's JSON specs state them.

The generated module `messages.py` is built from these two tuples; the codec turns them into
construct parsers per (api, version).
"""
from __future__ import annotations

from typing import NamedTuple

MAX_VERSION = 0x7FFF
Versions = tuple[int, int]  # inclusive range; (1, 0) means "no version"
NO_VERSIONS: Versions = (1, 0)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()  # no explicit default in the spec: the type's zero value applies


class Field(NamedTuple):
    name: str  # snake_case of the Kafka name
    type: str  # int8..int64, uint16, float64, bool, string, bytes, records, uuid, struct, []<scalar>, []struct
    versions: Versions
    nullable: Versions = NO_VERSIONS
    tagged: Versions = NO_VERSIONS
    tag: int | None = None
    default: object = MISSING
    fields: tuple[Field, ...] = ()  # members of a struct or of an array's struct elements
    ignorable: bool = False  # may be dropped silently when set in a version that lacks it
    map_key: bool = False  # the key of its array's elements (the spec's "mapKey")
    entity_type: str | None = None  # what the value names: "topicName", "brokerId", "groupId", ...


class Message(NamedTuple):
    name: str
    api_key: int
    kind: str  # "request" or "response"
    versions: Versions
    flexible: Versions
    fields: tuple[Field, ...]


def in_range(version: int, r: Versions) -> bool:
    return r[0] <= version <= r[1]
