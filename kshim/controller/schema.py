"""Construct codecs derived from type hints, so a control-plane message is declared once, as a
frozen dataclass, and its bytes follow from its fields.

    Int32, Int64          big-endian signed integers (a plain `int` is an Int64)
    bool                  one byte
    float                 a big-endian IEEE 754 double
    str                   UTF-8 behind an int32 length
    uuid.UUID             16 bytes
    an Enum of strings    its value, as a str
    X | None              a one-byte presence flag, then X if present
    tuple[X, ...]         an int32 count, then the items
    dict[K, V]            an int32 count, then key and value pairs in insertion order
    a dataclass           its fields in declaration order (ClassVars are not fields)
    None                  nothing (an operation with no result)

Anything else raises TypeError when its codec is first asked for, which a unit test does for
every registered operation.
"""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
import uuid
from enum import Enum
from typing import Annotated, Any

from construct import (
    Adapter,
    Bytes,
    Construct,
    ConstructError,
    Flag,
    Float64b,
    If,
    Int32sb,
    Int32ub,
    Int64sb,
    PascalString,
    Pass,
    PrefixedArray,
    Struct,
    this,
)

Int32 = Annotated[int, Int32sb]
Int64 = Annotated[int, Int64sb]

String = PascalString(Int32ub, "utf8")


class Nullable(Adapter):
    """None, or a value of `subcon`, behind a presence flag."""

    def __init__(self, subcon: Construct) -> None:
        super().__init__(Struct("present" / Flag, "value" / If(this.present, subcon)))

    def _decode(self, obj, context, path):
        return obj.value if obj.present else None

    def _encode(self, obj, context, path):
        return {"present": obj is not None, "value": obj}


class _Uuid(Adapter):
    def __init__(self) -> None:
        super().__init__(Bytes(16))

    def _decode(self, obj, context, path):
        return uuid.UUID(bytes=bytes(obj))

    def _encode(self, obj, context, path):
        return obj.bytes


class _Tuple(Adapter):
    """A tuple of `subcon` values (a list on the wire, a tuple in the dataclasses)."""

    def __init__(self, subcon: Construct) -> None:
        super().__init__(PrefixedArray(Int32ub, subcon))

    def _decode(self, obj, context, path):
        return tuple(obj)

    def _encode(self, obj, context, path):
        return list(obj)


class _Map(Adapter):
    """A dict as its (key, value) pairs, in insertion order."""

    def __init__(self, key: Construct, value: Construct) -> None:
        super().__init__(PrefixedArray(Int32ub, Struct("key" / key, "value" / value)))

    def _decode(self, obj, context, path):
        return {entry.key: entry.value for entry in obj}

    def _encode(self, obj, context, path):
        return [{"key": k, "value": v} for k, v in obj.items()]


class _EnumValue(Adapter):
    """A member of a str-valued Enum, as its value; an unknown value does not decode (ValueError)."""

    def __init__(self, cls: type[Enum]) -> None:
        super().__init__(String)
        self.cls = cls

    def _decode(self, obj, context, path):
        return self.cls(obj)

    def _encode(self, obj, context, path):
        return self.cls(obj).value


class _Record(Adapter):
    """A dataclass, field by field."""

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls, include_extras=True)
        self.cls = cls
        self.names = [f.name for f in dataclasses.fields(cls)]
        super().__init__(Struct(*(name / codec(hints[name]) for name in self.names)))

    def _decode(self, obj, context, path):
        return self.cls(**{name: obj[name] for name in self.names})

    def _encode(self, obj, context, path):
        if not isinstance(obj, self.cls):
            raise ConstructError(f"expected {self.cls.__name__}, got {type(obj).__name__}")
        return {name: getattr(obj, name) for name in self.names}


@functools.cache
def codec(hint: Any) -> Construct:
    """The codec of values of type `hint` (see the module docstring); TypeError if there is none."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated and args[0] is int and isinstance(args[1], Construct):
        return args[1]
    if hint is None or hint is type(None):
        return Pass
    if hint is bool:
        return Flag
    if hint is float:
        return Float64b
    if hint is int:
        return Int64sb
    if hint is str:
        return String
    if hint is uuid.UUID:
        return _Uuid()
    if origin in (types.UnionType, typing.Union):
        present = [a for a in args if a is not type(None)]
        if len(present) == 1 and len(args) == 2:
            return Nullable(codec(present[0]))
    elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _Tuple(codec(args[0]))
    elif origin is dict:
        return _Map(codec(args[0]), codec(args[1]))
    elif isinstance(hint, type) and issubclass(hint, Enum) and all(isinstance(m.value, str) for m in hint):
        return _EnumValue(hint)
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _Record(hint)
    raise TypeError(f"no control-plane codec for {hint!r}")
