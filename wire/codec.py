"""Message codecs: the schema of one (api, version, request|response) turned into a construct tree.

`codec(api_key, version, kind)` builds the tree once and caches it. Parsing yields a
`construct.Container` (a dict with attribute access) keyed by snake_case field names.

Building takes a mapping per struct and is strict about what it is given, so a misspelt field
fails where it is written instead of going out as its default (`EncodeError` names the message,
version, path and key):
- A key must be a field of that struct in SOME version of the message: handlers build one dict
  for every version, so a field the version lacks is fine, and is dropped when the spec marks it
  ignorable or its value is the field's default. A non-ignorable field set to anything else in a
  version without it is an error, as in Kafka's generated code (the client would lose a fact).
- An absent field takes the schema's default, so handlers only write the fields they mean;
  except the keys of array elements, which have no sensible default: in an element of an array,
  a field the spec marks `mapKey`, a string naming a topic (`entityType: topicName`) and an int32
  partition number (`partition_index`, `partition`, `partition_id`, `index`) must be present
  in the versions that have them (None where the version makes them nullable). Tagged fields
  always default.
The cost on the hot path is one C-level `issuperset` per struct (1-3% of encoding a 100-partition
produce or fetch response): only a key that is neither this version's field nor another version's
ignorable one takes the per-key check, and a missing key is found only once its primitive fails.

Tagged fields (flexible versions) that the schema knows are decoded into the container; unknown
tags are skipped, as Kafka does.

`decode`, `encode` and `encode_into` run straight-line code that wire.codegen generates from this
tree at first use (the tree's walk was ~30% of the broker's CPU on a single-record produce); the
tree stays the reference (`decode_reference`, `encode_into_reference`) and the source of every
strict encoding error: the generated encoder reruns it on anything unusual.
"""
from __future__ import annotations

import io
import struct
from functools import lru_cache
from typing import Any, Mapping

import construct as c
from construct import Container, stream_read, stream_write

from wire import codegen
from wire.primitives import (
    ZERO_UUID, Array, Bool, Bytes, DecodeError, EncodeError, Fields, FileRecords, Float64, GatherStream, Int8, Int16, Int32,
    Int64, String, UInt16, Uuid, ViewStream, encode_uvarint, read_uvarint,
)
from wire.schema.messages import MESSAGES
from wire.schema.model import MISSING, Field, Message, in_range

_FIXED = {"int8": Int8, "int16": Int16, "int32": Int32, "int64": Int64, "uint16": UInt16,
          "float64": Float64, "bool": Bool, "uuid": Uuid}
_ZERO: dict[str, Any] = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0,
                         "bool": False, "uuid": ZERO_UUID, "string": "", "bytes": b""}


class UnsupportedVersion(KeyError):
    pass


def _scalar(ftype: str, flexible: bool, nullable: bool) -> c.Construct:
    if ftype in _FIXED:
        return _FIXED[ftype]
    if ftype == "string":
        return String(flexible, nullable)
    return Bytes(flexible, nullable, view=ftype == "records")


def _default(f: Field, version: int) -> Any:
    nullable = in_range(version, f.nullable)
    if f.type.startswith("[]"):
        return None if nullable and f.default is None else []
    if f.type == "struct":
        return None  # built from the struct's own field defaults
    if f.default is not MISSING:
        return f.default
    if f.type == "records":
        return None if nullable else b""
    return _ZERO[f.type]


def _is_default(f: Field, value: Any) -> bool:
    """Whether a value of a field its version lacks carries nothing, so dropping it loses nothing."""
    if value is None:
        return True
    if f.type.startswith("[]") or f.type == "records":
        return len(value) == 0
    if f.type == "struct":
        members = {m.name: m for m in f.fields}
        return all(k in members and _is_default(members[k], v) for k, v in value.items())
    return bool(value == (_ZERO[f.type] if f.default is MISSING else f.default))


_PARTITION_KEYS = frozenset({"partition_index", "partition", "partition_id", "index"})


def _is_key(f: Field) -> bool:
    """A field of an array element with no sensible default (the module docstring has the rule)."""
    return (f.map_key or (f.type == "string" and f.entity_type == "topicName")
            or (f.type == "int32" and f.name in _PARTITION_KEYS))


class _Required:
    """The default of a field that has none: building an object without it is an error."""

    def __repr__(self) -> str:
        return "REQUIRED"


_REQUIRED = _Required()


class KStruct(c.Construct):
    """A struct of versioned fields, with a tagged-field section in flexible versions.

    `where` names the struct for errors: "ProduceResponse v9: responses[].partition_responses[]".
    """

    struct_kind = "struct"  # how wire.codegen tells the struct constructs apart
    required = _REQUIRED

    def __init__(self, fields: tuple[Field, ...], version: int, flexible: bool, where: str,
                 element: bool = False) -> None:
        super().__init__()
        self.flexible = flexible
        self.where = where
        self.regular: list[tuple[str, c.Construct, Any]] = []
        self.tagged: dict[int, tuple[str, c.Construct, Any]] = {}
        self.absent: dict[str, Field] = {}  # fields of other versions
        sep = "." if ":" in where else ": "  # "Message vN: a[].b"
        for f in fields:
            if not in_range(version, f.versions):
                self.absent[f.name] = f
                continue
            con = _field_construct(f, version, flexible, f"{where}{sep}{f.name}")
            if in_range(version, f.tagged):
                self.tagged[f.tag] = (f.name, con, _default(f, version))  # type: ignore[index]
            else:
                self.regular.append((f.name, con, _REQUIRED if element and _is_key(f) else _default(f, version)))
        self.tag_order = sorted(self.tagged)
        self.names = [n for n, _, _ in self.regular] + [self.tagged[t][0] for t in self.tag_order]
        self.present = frozenset(self.names)
        # keys that need no look at their value: this version's fields and other versions' ignorable ones
        self.quiet = self.present | {n for n, f in self.absent.items() if f.ignorable}
        self.builders = [(n, con._build, default) for n, con, default in self.regular]  # bound once: hot path

    def _parse(self, stream: Any, context: Any, path: str) -> Container:
        obj = Fields()
        for name, con, _ in self.regular:
            obj[name] = con._parse(stream, context, path)
        if self.flexible:
            for name, _, default in self.tagged.values():
                obj[name] = default
            for _ in range(read_uvarint(stream, path)):
                tag = read_uvarint(stream, path)
                size = read_uvarint(stream, path)
                raw = stream_read(stream, size, path)
                known = self.tagged.get(tag)
                if known is not None:
                    obj[known[0]] = known[1]._parse(ViewStream(raw), context, path)
        return obj

    def _build(self, obj: Mapping[str, Any], stream: Any, context: Any, path: str) -> Mapping[str, Any]:
        if not self.quiet.issuperset(obj):
            self._check_absent(obj)
        get = obj.get
        try:
            for name, build, default in self.builders:
                build(get(name, default), stream, context, path)
        except EncodeError:
            raise
        except Exception:  # a primitive cannot write _REQUIRED: no look at keys until something fails
            self._check_required(obj)
            raise
        if self.flexible:
            chunks = []
            for tag in self.tag_order:
                name, con, default = self.tagged[tag]
                value = get(name, MISSING)
                if value is MISSING or value == default:
                    continue  # tagged fields are written only when they differ from the default
                sub = io.BytesIO()
                con._build(value, sub, context, path)
                data = sub.getvalue()
                chunks.append(encode_uvarint(tag) + encode_uvarint(len(data)) + data)
            head = encode_uvarint(len(chunks))
            stream_write(stream, head, len(head), path)
            for chunk in chunks:
                stream_write(stream, chunk, len(chunk), path)
        return obj

    def _check_required(self, obj: Mapping[str, Any]) -> None:
        for name, _, default in self.builders:
            if default is _REQUIRED and name not in obj:
                raise EncodeError(self.where, f"missing key {name!r}: a key of its array's elements has no default")

    def _check_absent(self, obj: Mapping[str, Any]) -> None:
        """The keys outside this version's fields: each must be a field of another version, and
        ignorable or at its default."""
        for key in obj:
            if key in self.quiet:
                continue
            f = self.absent.get(key)
            if f is None:
                import difflib  # here: only a misspelt key needs it, and it is a start's import
                known = sorted(self.present | self.absent.keys())
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (fields: {', '.join(known)})"
                raise EncodeError(self.where, f"unknown key {key!r}{hint}")
            if not f.ignorable and not _is_default(f, obj[key]):
                raise EncodeError(self.where, f"{key!r} = {obj[key]!r} is set, but this version lacks the field "
                                              f"(versions {f.versions[0]}-{f.versions[1]}) and it is not ignorable")


class _DefaultStruct(c.Adapter):
    """A non-array struct field: a missing value builds from the struct's own defaults."""

    struct_kind = "default"

    def _decode(self, obj, context, path):
        return obj

    def _encode(self, obj, context, path):
        return {} if obj is None else obj


class _NullableStruct(c.Construct):
    """A struct field in its nullable versions: an int8 marker, -1 for null, 1 then the struct."""

    struct_kind = "nullable"

    def __init__(self, subcon: c.Construct) -> None:
        super().__init__()
        self.subcon = subcon

    def _parse(self, stream, context, path):
        if Int8._parse(stream, context, path) < 0:
            return None
        return self.subcon._parse(stream, context, path)

    def _build(self, obj, stream, context, path):
        if obj is None:
            stream_write(stream, b"\xff", 1, path)
            return obj
        stream_write(stream, b"\x01", 1, path)
        return self.subcon._build(obj, stream, context, path)


def _field_construct(f: Field, version: int, flexible: bool, where: str) -> c.Construct:
    nullable = in_range(version, f.nullable)
    if f.type == "struct":
        struct = KStruct(f.fields, version, flexible, where)
        return _NullableStruct(struct) if nullable else _DefaultStruct(struct)
    if f.type.startswith("[]"):
        elem = f.type[2:]
        element = (KStruct(f.fields, version, flexible, where + "[]", element=True) if elem == "struct"
                   else _scalar(elem, flexible, False))
        return Array(element, flexible, nullable)
    return _scalar(f.type, flexible, nullable)


def message(api_key: int, kind: str) -> Message:
    return MESSAGES[(api_key, kind)]


def is_flexible(api_key: int, version: int) -> bool:
    return in_range(version, MESSAGES[(api_key, "request")].flexible)


@lru_cache(maxsize=None)
def codec(api_key: int, version: int, kind: str) -> KStruct:
    """The construct for one message body, built once per (api, version, kind)."""
    try:
        msg = MESSAGES[(api_key, kind)]
    except KeyError:
        raise UnsupportedVersion(f"unknown api key {api_key}") from None
    if not in_range(version, msg.versions):
        raise UnsupportedVersion(f"{msg.name} v{version} is outside {msg.versions}")
    return KStruct(msg.fields, version, in_range(version, msg.flexible), f"{msg.name} v{version}")


def decode_reference(api_key: int, version: int, kind: str, data: bytes | memoryview, *,
                     exact: bool = False) -> Container:
    """`decode` by walking the construct tree: the reference the generated code must match."""
    stream = ViewStream(data)
    try:
        obj = codec(api_key, version, kind)._parse(stream, None, "(body)")
    except DecodeError:
        raise
    except c.ConstructError as e:  # includes construct's StreamError for short input
        raise DecodeError(str(e)) from None
    if exact and stream.tell() != len(data):
        raise DecodeError(f"{len(data) - stream.tell()} trailing bytes after the body")
    return obj


def encode_into_reference(api_key: int, version: int, kind: str, obj: Mapping[str, Any], stream: Any) -> None:
    """`encode_into` by walking the construct tree: the reference, and every strict error's source."""
    codec(api_key, version, kind)._build(obj, stream, None, "(body)")


@lru_cache(maxsize=None)  # generated at first use of each (api, version, kind), never at import: start-up
def _decoder(api_key: int, version: int, kind: str) -> Any:
    return codegen.decoder(codec(api_key, version, kind), f"{api_key}/{version}/{kind} decode")


@lru_cache(maxsize=None)
def _encoder(api_key: int, version: int, kind: str) -> Any:
    return codegen.encoder(codec(api_key, version, kind), f"{api_key}/{version}/{kind} encode")


def decode(api_key: int, version: int, kind: str, data: bytes | memoryview, *, exact: bool = False) -> Container:
    """Parse a body. With exact=True, trailing bytes are an error.

    No bytes are copied for records fields: they come back as memoryviews into `data`
    (writable when `data` is a bytearray), so the caller keeps `data` alive while it uses them.
    Runs the generated code of wire.codegen; `decode_reference` is the tree it must match.
    """
    view = data if isinstance(data, memoryview) else memoryview(data)
    try:
        obj, end = _decoder(api_key, version, kind)(view)
    except (struct.error, IndexError) as e:  # reads past the end
        raise DecodeError(f"short input: {e}") from None
    except UnicodeDecodeError as e:
        raise DecodeError(f"invalid UTF-8 in string: {e}") from None
    if exact and end != len(view):
        raise DecodeError(f"{len(view) - end} trailing bytes after the body")
    return obj


def encode(api_key: int, version: int, kind: str, obj: Mapping[str, Any]) -> bytes:
    stream = io.BytesIO()
    encode_into(api_key, version, kind, obj, stream)
    return stream.getvalue()


def encode_into(api_key: int, version: int, kind: str, obj: Mapping[str, Any], stream: Any) -> None:
    """Encode into any writable stream (io.BytesIO, wire.primitives.GatherStream).

    Runs the generated code; on any exception nothing has been written and the tree reruns,
    so every strict error is the tree's own."""
    try:
        parts = _encoder(api_key, version, kind)(obj)
        if not isinstance(stream, GatherStream):
            parts = [p.read() if isinstance(p, FileRecords) else p for p in parts]
    except Exception:
        encode_into_reference(api_key, version, kind, obj, stream)
        return
    for part in parts:
        stream.write(part)
