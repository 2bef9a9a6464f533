"""Kafka's primitive wire types as construct classes.

Every decoder here is bounded: a declared length or count larger than the bytes that are left is a
`DecodeError`, never an allocation. The classes stay small on purpose: a message codec is a tree of
them, built once per (api, version) and cached by `wire.codec`.
"""
from __future__ import annotations

import functools
import operator
import os
import struct
import uuid as _uuid
from typing import Any

import construct as c
from construct import stream_read, stream_tell, stream_write, stream_size

ZERO_UUID = _uuid.UUID(int=0)


class DecodeError(c.ConstructError):
    """The bytes do not form a valid message of the expected schema."""


class EncodeError(ValueError):
    """An object to encode does not fit its schema: a key that is no field, a missing key field, or
    a non-ignorable field set in a version that lacks it. A bug in the code that built the object.

    `where` is the static schema path ("ProduceResponse v9: responses[].partition_responses[]");
    arrays fill in element indices, innermost first, as the error unwinds.
    """

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where = where
        self.problem = problem
        self.indices: list[int] = []  # outermost first

    def __str__(self) -> str:
        parts = self.where.split("[]")
        filled = [parts[0]]
        for i, part in enumerate(parts[1:]):
            filled.append(f"[{self.indices[i]}]" if i < len(self.indices) else "[]")
            filled.append(part)
        return f"{''.join(filled)}: {self.problem}"


class ViewStream:
    """A read-only stream over a buffer whose reads are memoryview slices: no copies.

    Decoding a produce request this way leaves each partition's records as a view into the
    request frame, so a writable frame (bytearray) lets the broker patch batches in place.
    """

    __slots__ = ("_view", "_pos")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._view = data if isinstance(data, memoryview) else memoryview(data)
        self._pos = 0

    def read(self, n: int = -1) -> memoryview:
        start = self._pos
        end = len(self._view) if n < 0 else min(start + n, len(self._view))
        self._pos = end
        return self._view[start:end]

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._view))[whence]
        self._pos = max(0, min(base + offset, len(self._view)))
        return self._pos


class FileRecords:
    """Record bytes still in their files: parts are bytes or (fd, position, length) regions.

    A fetch read hands these out instead of copying the records, so a plaintext connection can
    os.sendfile them (zero copy) and a TLS one can pread them. The object owns its descriptors
    (duplicates of the segment files', valid after a segment is deleted) and closes them once.
    """

    __slots__ = ("parts", "size", "__weakref__")
    open_fds = 0  # descriptors held by every FileRecords not closed yet (a reader bounds them)

    def __init__(self, parts: list[bytes | tuple[int, int, int]]) -> None:
        self.parts = parts
        self.size = sum(len(p) if isinstance(p, bytes) else p[2] for p in parts)
        FileRecords.open_fds += sum(1 for p in parts if not isinstance(p, bytes))

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        """The bytes by copy; ValueError if a file shrank under us (a response must never be corrupt)."""
        out = []
        for part in self.parts:
            if isinstance(part, bytes):
                out.append(part)
                continue
            fd, pos, n = part
            data = os.pread(fd, n, pos)
            if len(data) != n:  # pread of a regular file is short only at its end
                raise ValueError(f"records file shrank: {len(data)} of {n} bytes at {pos}")
            out.append(data)
        return b"".join(out)

    def close(self) -> None:
        parts, self.parts = self.parts, []
        for part in parts:
            if not isinstance(part, bytes):
                FileRecords.open_fds -= 1
                os.close(part[0])

    def __del__(self) -> None:  # a backstop: every path that drops a response closes it itself
        self.close()


class GatherStream:
    """A write-only stream that keeps large writes by reference instead of copying them.

    Encoding a fetch response into it leaves each partition's records as its own chunk, so the
    response goes to the socket with one scatter-gather send and no copy of the records.
    """

    BIG = 32 * 1024

    def __init__(self, head: bytes = b"") -> None:
        self.chunks: list[bytes | bytearray | memoryview] = []
        self._small = bytearray(head)
        self.size = len(head)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        n = len(data)
        if n >= self.BIG or isinstance(data, FileRecords):
            if self._small:
                self.chunks.append(self._small)
                self._small = bytearray()
            self.chunks.append(data)
        else:
            self._small += data
        self.size += n
        return n

    def tell(self) -> int:
        return self.size

    def finish(self) -> list[bytes | bytearray | memoryview]:
        if self._small:
            self.chunks.append(self._small)
            self._small = bytearray()
        return self.chunks


def _remaining(stream: Any, path: str) -> int:
    return stream_size(stream) - stream_tell(stream, path)


class _Fixed(c.Construct):
    """A fixed-width big-endian number, via one precompiled struct.Struct."""

    def __init__(self, fmt: str) -> None:
        super().__init__()
        self._s = struct.Struct(">" + fmt)
        self._size = self._s.size

    def _parse(self, stream, context, path):
        return self._s.unpack(stream_read(stream, self._size, path))[0]

    def _build(self, obj, stream, context, path):
        stream_write(stream, self._s.pack(obj), self._size, path)
        return obj

    def _sizeof(self, context, path):
        return self._size


Int8, Int16, Int32, Int64 = _Fixed("b"), _Fixed("h"), _Fixed("i"), _Fixed("q")
UInt16, Float64 = _Fixed("H"), _Fixed("d")


class _Bool(c.Construct):
    def _parse(self, stream, context, path):
        return stream_read(stream, 1, path) != b"\x00"

    def _build(self, obj, stream, context, path):
        stream_write(stream, b"\x01" if obj else b"\x00", 1, path)
        return obj


Bool = _Bool()


def read_uvarint(stream: Any, path: str = "") -> int:
    result = shift = 0
    for _ in range(5):  # 32-bit unsigned varint: at most 5 bytes
        b = stream_read(stream, 1, path)[0]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise DecodeError("unsigned varint longer than 5 bytes", path=path)


def uvarint_at(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """An unsigned varint (LEB128) of at most max_bytes at pos in a buffer: (value, the position
    after it). 5 bytes: Kafka's 32-bit ones; 10: protobuf's 64-bit ones."""
    result = shift = 0
    for _ in range(max_bytes):
        if pos >= len(buf):
            raise DecodeError("truncated unsigned varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise DecodeError(f"unsigned varint longer than {max_bytes} bytes")


def encode_uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _UVarInt(c.Construct):
    def _parse(self, stream, context, path):
        return read_uvarint(stream, path)

    def _build(self, obj, stream, context, path):
        data = encode_uvarint(obj)
        stream_write(stream, data, len(data), path)
        return obj


UVarInt = _UVarInt()


class _VarInt(c.Construct):
    """Signed zigzag varint (used in record headers and a few fields)."""

    def _parse(self, stream, context, path):
        n = result = shift = 0
        for n in range(10):
            b = stream_read(stream, 1, path)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
        raise DecodeError("varint longer than 10 bytes", path=path)

    def _build(self, obj, stream, context, path):
        data = encode_uvarint((obj << 1) ^ (obj >> 63))
        stream_write(stream, data, len(data), path)
        return obj


VarInt = _VarInt()


class _Uuid(c.Construct):
    def _parse(self, stream, context, path):
        return _uuid.UUID(bytes=bytes(stream_read(stream, 16, path)))

    def _build(self, obj, stream, context, path):
        raw = (obj or ZERO_UUID).bytes
        stream_write(stream, raw, 16, path)
        return obj


Uuid = _Uuid()


class _Length(c.Construct):
    """Reads the length prefix of a string, bytes or array and checks it against what is left.

    Classic encodings use int16 (strings) or int32 (bytes, arrays) with -1 for null; compact
    encodings use an unsigned varint of length + 1 with 0 for null.
    """

    def __init__(self, compact: bool, wide: bool) -> None:
        super().__init__()
        self.compact = compact
        self.fixed = Int32 if wide else Int16  # classic encodings only

    def read(self, stream: Any, path: str, nullable: bool, unit: int = 1) -> int | None:
        n = read_uvarint(stream, path) - 1 if self.compact else self.fixed._parse(stream, None, path)
        if n < 0:
            if n == -1 and nullable:
                return None
            raise DecodeError(f"negative length {n} for a non-nullable field", path=path)
        if n * unit > _remaining(stream, path):
            raise DecodeError(f"declared length {n} exceeds the {_remaining(stream, path)} bytes left", path=path)
        return n

    def write(self, stream: Any, path: str, n: int | None) -> None:
        if self.compact:
            data = encode_uvarint(0 if n is None else n + 1)
            stream_write(stream, data, len(data), path)
        else:
            self.fixed._build(-1 if n is None else n, stream, None, path)


class String(c.Construct):
    def __init__(self, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.length = _Length(compact, wide=False)
        self.nullable = nullable

    def _parse(self, stream, context, path):
        n = self.length.read(stream, path, self.nullable)
        if n is None:
            return None
        try:
            return str(stream_read(stream, n, path), "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"invalid UTF-8 in string: {e}", path=path) from None

    def _build(self, obj, stream, context, path):
        if obj is None:
            if not self.nullable:
                raise c.ConstructError("null for a non-nullable string", path=path)
            self.length.write(stream, path, None)
            return obj
        data = obj.encode("utf-8")
        self.length.write(stream, path, len(data))
        stream_write(stream, data, len(data), path)
        return obj


class Bytes(c.Construct):
    """bytes and records: kept as the exact bytes that came (a records blob stays opaque).

    With `view=True` (records) a parse returns whatever the stream read, a memoryview into the
    frame when decoding from a ViewStream; plain bytes fields are copied out as bytes.
    """

    def __init__(self, compact: bool, nullable: bool, view: bool = False) -> None:
        super().__init__()
        self.length = _Length(compact, wide=True)
        self.nullable = nullable
        self.view = view

    def _parse(self, stream, context, path):
        n = self.length.read(stream, path, self.nullable)
        if n is None:
            return None
        data = stream_read(stream, n, path)
        return data if self.view else bytes(data)

    def _build(self, obj, stream, context, path):
        if obj is None:
            if not self.nullable:
                raise c.ConstructError("null for non-nullable bytes", path=path)
            self.length.write(stream, path, None)
            return obj
        self.length.write(stream, path, len(obj))
        if isinstance(obj, FileRecords) and not isinstance(stream, GatherStream):
            obj = obj.read()  # a plain stream (io.BytesIO) takes bytes: file regions are read here
        stream.write(obj)  # any bytes-like: bytes, bytearray, a memoryview into a frame or log read
        return obj


class Array(c.Construct):
    def __init__(self, element: c.Construct, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.element = element
        self.length = _Length(compact, wide=True)
        self.nullable = nullable

    def _parse(self, stream, context, path):
        # Every element takes at least one byte, so a count beyond the bytes left is a lie.
        n = self.length.read(stream, path, self.nullable)
        if n is None:
            return None
        parse = self.element._parse
        return [parse(stream, context, path) for _ in range(n)]

    def _build(self, obj, stream, context, path):
        if obj is None:
            if not self.nullable:
                raise c.ConstructError("null for a non-nullable array", path=path)
            self.length.write(stream, path, None)
            return obj
        self.length.write(stream, path, len(obj))
        build = self.element._build
        try:
            for item in obj:
                build(item, stream, context, path)
        except EncodeError as e:  # name the element: found by identity, only on this error path
            e.indices.insert(0, next(i for i, x in enumerate(obj) if x is item))
            raise
        return obj


_CONTAINER_METHODS = frozenset(n for n in dir(c.Container) if not n.startswith("__"))
_MISSING_FIELD = object()


class Fields(c.Container):
    """What decoding gives: a construct Container whose fields read as attributes at a dict's
    speed. A Container's `obj.name` first fails the normal lookup (an AttributeError raised and
    caught inside the interpreter), then runs its Python `__getattr__`: ~0.6 us, seven times per
    Heartbeat a handler reads. Here the item is looked up first. Names of the Container's methods
    (`values`, `items`, `get`...) still give the method, as they do on a Container; a missing
    field still raises AttributeError."""
    __slots__ = ()

    def __getattribute__(self, name: str, _get=dict.get, _methods=_CONTAINER_METHODS,
                         _missing=_MISSING_FIELD, _attribute=object.__getattribute__) -> Any:
        if name in _methods:
            return _attribute(self, name)
        value = _get(self, name, _missing)
        if value is _missing:
            return _attribute(self, name)  # a slot or special attribute, else AttributeError -> __getattr__
        return value


def _reduce_fields(self: Fields) -> tuple:
    # pickled and copied as the class of the same names (a class made at run time has no import path)
    return _restore_fields, (type(self)._names, dict(self))


def _restore_fields(names: tuple[str, ...], items: dict[str, Any]) -> Fields:
    obj = fields_class(names)()
    obj.update(items)
    return obj


@functools.cache
def fields_class(names: tuple[str, ...]) -> type[Fields]:
    """Fields for a struct whose fields are `names` (what the generated decoders of wire.codegen
    make): each field a property that reads the item in C (`operator.itemgetter`) and the type's
    attribute lookup dict's own, in C. A field read takes ~45 ns instead of Fields' ~190, and a
    method call (`.get`) ~60 instead of ~200: a handler reads a dozen of them per request. Names
    of the Container's methods still give the method; a name that is no field of the struct still
    raises AttributeError; setting an attribute sets the item (Container's __setattr__)."""
    attrs: dict[str, Any] = {"__slots__": (), "__getattribute__": dict.__getattribute__, "_names": names,
                             "__reduce__": _reduce_fields}
    for name in names:
        if name.isidentifier() and not name.startswith("__") and name not in _CONTAINER_METHODS:
            attrs[name] = property(operator.itemgetter(name))
    return type("Fields", (Fields,), attrs)
