"""Generated codecs: straight-line Python per (api, version, kind), compiled at first use.

The construct tree of `wire.codec` walks the schema at run time: a method call per field, a
stream read per primitive. On a single-record produce that walk was ~30% of the broker's event
loop (issue 18). This module reads the same tree once per (api, version, kind) and writes Python
source for it: fixed-width runs become one precompiled `struct.Struct` call on a memoryview and an
offset, nested structs and arrays are inlined loops, and the result is compiled with `exec`.

The tree stays the reference (`wire.codec.decode_reference`, `encode_into_reference`) and the
generated code must agree with it exactly (tests/test_codegen.py checks every message):
- decode returns the same Containers, records as memoryviews into the input and bytes fields as
  bytes, and fails with DecodeError wherever the tree does (a length that is negative for a
  non-nullable field or beyond the bytes left, short input, invalid UTF-8, a long varint);
- encode writes the same bytes. It is strict only through the tree: a struct whose keys are not
  all this version's fields (or other versions' ignorable ones) takes the tree's `_check_absent`,
  and any exception at all (a missing key of an array element, a value out of range, a null where
  none is allowed) discards the generated attempt and reruns the tree, which raises its own error
  with its own message. Nothing is written to the stream before the generated attempt succeeds.
  Records of 32 KiB or more and FileRecords stay separate parts, as GatherStream keeps them.
Tagged fields are rare: decoding one runs generated code over its own slice; encoding a set one
uses the tree's construct for it.
"""
from __future__ import annotations

import io
import struct
import uuid
from typing import Any, Callable

from construct import Container

from wire.primitives import (
    _Bool, _Fixed, _Uuid, Array, Bytes, DecodeError, Fields, FileRecords, GatherStream, String, encode_uvarint, fields_class,
    uvarint_at,
)
from wire.schema.model import MISSING

BIG = GatherStream.BIG


class _Unexpected(Exception):
    """The generated encoder met something only the tree handles (it is rerun)."""


def _uuid_slow(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=raw)


def _uuid_fast(raw: bytes, _new: Any = object.__new__, _set: Any = object.__setattr__, _uuid: Any = uuid.UUID,
               _from: Any = int.from_bytes, _unknown: Any = uuid.SafeUUID.unknown) -> uuid.UUID:
    """uuid.UUID(bytes=raw) without its argument checks (a third of the cost): the same two slots."""
    u = _new(_uuid)
    _set(u, "int", _from(raw, "big"))
    _set(u, "is_safe", _unknown)
    return u


_raw = bytes(range(16))
_fast_ok = (set(getattr(uuid.UUID, "__slots__", ())) == {"int", "is_safe", "__weakref__"}
            and _uuid_fast(_raw) == uuid.UUID(bytes=_raw) and _uuid_fast(_raw).is_safe == uuid.UUID(bytes=_raw).is_safe)
_make_uuid = _uuid_fast if _fast_ok else _uuid_slow  # another Python's UUID may differ inside


def _negative(n: int) -> DecodeError:
    return DecodeError(f"negative length {n} for a non-nullable field")


def _too_long(n: int, left: int) -> DecodeError:
    return DecodeError(f"declared length {n} exceeds the {left} bytes left")


def _tagged_section(ks: Any, obj: Any) -> bytes:
    """The tagged-field section of one struct, exactly as KStruct._build writes it."""
    get = obj.get
    chunks = []
    for tag in ks.tag_order:
        name, con, default = ks.tagged[tag]
        value = get(name, MISSING)
        if value is MISSING or value == default:
            continue
        sub = io.BytesIO()
        con._build(value, sub, None, "(body)")
        data = sub.getvalue()
        chunks.append(encode_uvarint(tag) + encode_uvarint(len(data)) + data)
    return encode_uvarint(len(chunks)) + b"".join(chunks)


_FIXED_FMT = {"b": 1, "h": 2, "i": 4, "q": 8, "H": 2, "d": 8}


def _fixed_code(con: Any) -> str | None:
    """The struct format character of a fixed-width construct, or None."""
    if isinstance(con, _Fixed):
        return con._s.format[-1]
    if isinstance(con, _Bool):
        return "?"
    if isinstance(con, _Uuid):
        return "16s"
    return None


def _struct_of(con: Any) -> tuple[Any, bool] | None:
    """(KStruct, nullable) when con is a struct field: wire.codec's struct classes say which
    they are in `struct_kind` (read here, not imported: wire.codec imports this module)."""
    kind = getattr(con, "struct_kind", None)
    if kind == "struct":
        return con, False
    if kind == "default":
        return con.subcon, False
    if kind == "nullable":
        return con.subcon, True
    return None


class _Source:
    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "_C": Fields, "_UUID": _make_uuid, "_uv": uvarint_at, "_neg": _negative, "_long": _too_long,
            "_DE": DecodeError, "_M": MISSING, "_FR": FileRecords, "_enc_uv": encode_uvarint,
            "_X": _Unexpected, "_BIG": BIG, "_unpack_from": struct.unpack_from, "_pack": struct.pack,
        }
        self.functions: list[list[str]] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value: Any, prefix: str = "_k") -> str:
        name = self.name(prefix)
        self.ns[name] = value
        return name

    def compile(self, entry: str, where: str) -> Callable[..., Any]:
        text = "\n".join("\n".join(f) for f in self.functions) + "\n"
        exec(compile(text, f"<generated {where}>", "exec"), self.ns)
        fn = self.ns[entry]
        fn.source = text  # for debugging: print(fn.source)
        return fn


# ----------------------------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------------------------

class _Decoder:
    def __init__(self, src: _Source) -> None:
        self.src = src

    def _begin(self, name: str) -> list[str]:
        lines = [f"def {name}(mv):", "    pos = 0", "    end = len(mv)"]
        self.src.functions.append(lines)
        return lines

    def function(self, name: str, con: Any) -> None:
        """def name(mv): the value of one construct read from all of mv (a tagged field's slice)."""
        lines = self._begin(name)
        self.value(con, "x", lines, 1)
        lines.append("    return x")

    def top(self, name: str, ks: Any) -> None:
        lines = self._begin(name)
        self.struct(ks, "x", lines, 1)
        lines.append("    return x, pos")

    def length(self, compact: bool, wide: bool, nullable: bool, var: str, lines: list[str], d: int,
               null_line: str) -> str:
        """Read a length into var with the tree's checks; returns the indent of the non-null branch."""
        p = "    " * d
        if compact:
            lines += [f"{p}{var} = mv[pos]", f"{p}if {var} < 128:", f"{p}    pos += 1", f"{p}else:",
                      f"{p}    {var}, pos = _uv(mv, pos)", f"{p}{var} -= 1"]
        else:
            fmt = self.src.const(struct.Struct(">i" if wide else ">h").unpack_from, "_u")
            lines += [f"{p}{var}, = {fmt}(mv, pos)", f"{p}pos += {4 if wide else 2}"]
        lines.append(f"{p}if {var} < 0:")
        if nullable:
            if compact:  # a compact length is at least -1
                lines.append(f"{p}    {null_line}")
            else:
                lines += [f"{p}    if {var} != -1:", f"{p}        raise _neg({var})", f"{p}    {null_line}"]
        else:
            lines.append(f"{p}    raise _neg({var})")
        lines += [f"{p}else:", f"{p}    if {var} > end - pos:", f"{p}        raise _long({var}, end - pos)"]
        return "    " * (d + 1)

    def value(self, con: Any, target: str, lines: list[str], d: int) -> None:
        """Code that reads one construct at pos into target (a local name or a subscript)."""
        p = "    " * d
        code = _fixed_code(con)
        if code is not None:
            s = self.src.const(struct.Struct(">" + code), "_s")
            size = struct.calcsize(">" + code)
            if code == "16s":
                t = self.src.name("t")
                lines += [f"{p}{t}, = {s}.unpack_from(mv, pos)", f"{p}{target} = _UUID({t})", f"{p}pos += 16"]
            else:
                lines += [f"{p}{target}, = {s}.unpack_from(mv, pos)", f"{p}pos += {size}"]
            return
        if isinstance(con, String):
            n = self.src.name("n")
            q = self.length(con.length.compact, False, con.nullable, n, lines, d, f"{target} = None")
            lines += [f"{q}{target} = mv[pos:pos + {n}].tobytes().decode()", f"{q}pos += {n}"]
            return
        if isinstance(con, Bytes):
            n = self.src.name("n")
            q = self.length(con.length.compact, True, con.nullable, n, lines, d, f"{target} = None")
            read = f"mv[pos:pos + {n}]" if con.view else f"mv[pos:pos + {n}].tobytes()"
            lines += [f"{q}{target} = {read}", f"{q}pos += {n}"]
            return
        if isinstance(con, Array):
            n = self.src.name("n")
            q = self.length(con.length.compact, True, con.nullable, n, lines, d, f"{target} = None")
            qd = d + 1
            elem = con.element
            code = _fixed_code(elem)
            if code is not None and code != "16s":  # numbers: one unpack of the whole run
                size = struct.calcsize(">" + code)
                lines += [f"{q}{target} = list(_unpack_from('>%d{code}' % {n}, mv, pos))",
                          f"{q}pos += {size} * {n}"]
                return
            lst = self.src.name("a")
            lines += [f"{q}{lst} = []", f"{q}for _ in range({n}):"]
            e = self.src.name("e")
            sub = _struct_of(elem)
            if sub is not None:
                self.struct(sub[0], e, lines, qd + 1)
            else:
                self.value(elem, e, lines, qd + 1)
            lines += [f"{q}    {lst}.append({e})", f"{q}{target} = {lst}"]
            return
        sub = _struct_of(con)
        if sub is not None:
            ks, nullable = sub
            if nullable:  # an int8 marker: negative for null
                lines += [f"{p}if mv[pos] >= 128:", f"{p}    pos += 1", f"{p}    {target} = None", f"{p}else:",
                          f"{p}    pos += 1"]
                self.struct(ks, target, lines, d + 1)
            else:
                self.struct(ks, target, lines, d)
            return
        raise TypeError(f"no generated decoder for {con!r}")

    def struct(self, ks: Any, target: str, lines: list[str], d: int) -> None:
        p = "    " * d
        o = self.src.name("o")
        names = tuple(name for name, _, _ in ks.regular) + tuple(name for name, _, _ in ks.tagged.values())
        lines.append(f"{p}{o} = {self.src.const(fields_class(names), '_F')}()")
        run: list[tuple[str, str]] = []  # consecutive fixed-width fields: (name, format code)

        def flush() -> None:
            if not run:
                return
            fmt = ">" + "".join(c for _, c in run)
            s = self.src.const(struct.Struct(fmt).unpack_from, "_u")
            if any(c == "16s" for _, c in run):
                tmp = [self.src.name("t") for _ in run]
                lines.append(f"{p}{', '.join(tmp)}, = {s}(mv, pos)")
                for (name, c), t in zip(run, tmp):
                    lines.append(f"{p}{o}[{name!r}] = " + (f"_UUID({t})" if c == "16s" else t))
            else:
                lines.append(f"{p}{', '.join(f'{o}[{name!r}]' for name, _ in run)}, = {s}(mv, pos)")
            lines.append(f"{p}pos += {struct.calcsize(fmt)}")
            run.clear()

        for name, con, _ in ks.regular:
            code = _fixed_code(con)
            if code is not None:
                run.append((name, code))
                continue
            flush()
            self.value(con, f"{o}[{name!r}]", lines, d)
        flush()
        if ks.flexible:
            for name, con, default in ks.tagged.values():
                if isinstance(default, list):  # a fresh list per message (the tree shares one)
                    lines.append(f"{p}{o}[{name!r}] = []")
                elif default is None or isinstance(default, (bool, int, float, str)):
                    lines.append(f"{p}{o}[{name!r}] = {default!r}")
                else:
                    lines.append(f"{p}{o}[{name!r}] = {self.src.const(default)}")
            lines += [f"{p}if mv[pos] == 0:", f"{p}    pos += 1", f"{p}else:"]
            q = p + "    "
            nt, tag, size = self.src.name("nt"), self.src.name("tag"), self.src.name("sz")
            lines += [f"{q}{nt}, pos = _uv(mv, pos)", f"{q}for _ in range({nt}):",
                      f"{q}    {tag}, pos = _uv(mv, pos)", f"{q}    {size}, pos = _uv(mv, pos)",
                      f"{q}    if {size} > end - pos:", f"{q}        raise _long({size}, end - pos)"]
            first = True
            for t, (name, con, _) in ks.tagged.items():
                fn = self.src.name("_tf")
                self.function(fn, con)
                lines += [f"{q}    {'if' if first else 'elif'} {tag} == {t}:",
                          f"{q}        {o}[{name!r}] = {fn}(mv[pos:pos + {size}])"]
                first = False
            lines.append(f"{q}    pos += {size}")
        lines.append(f"{p}{target} = {o}")


def decoder(ks: Any, where: str) -> Callable[[memoryview], tuple[Container, int]]:
    """The generated decoder of one message's tree: fn(memoryview) -> (Container, end offset).

    It raises DecodeError, struct.error, IndexError or UnicodeDecodeError on bad input: the caller
    turns the last three into DecodeError.
    """
    src = _Source()
    _Decoder(src).top("decode", ks)
    return src.compile("decode", where)


# ----------------------------------------------------------------------------------------------
# Encoding
# ----------------------------------------------------------------------------------------------

class _Encoder:
    """Generated code appends to the bytearray `out`; a big or file-backed records value ends
    `out` as a part (a new bytearray follows: a part handed on is never written again)."""

    def __init__(self, src: _Source) -> None:
        self.src = src

    def top(self, name: str, ks: Any) -> None:
        lines = [f"def {name}(obj):", "    parts = []", "    out = bytearray()"]
        self.src.functions.append(lines)
        self.struct(ks, "obj", lines, 1)
        lines += ["    parts.append(out)", "    return parts"]

    def length(self, compact: bool, wide: bool, n: str, lines: list[str], p: str) -> None:
        if compact:
            lines += [f"{p}if {n} < 127:", f"{p}    out.append({n} + 1)", f"{p}else:",
                      f"{p}    out += _enc_uv({n} + 1)"]
        else:
            s = self.src.const(struct.Struct(">i" if wide else ">h").pack, "_p")
            lines.append(f"{p}out += {s}({n})")

    def sized(self, con: Any, v: str, wide: bool, measure: list[str], n: str, lines: list[str], p: str) -> None:
        """A nullable string, bytes or array's null or length (`measure` sets n), then its body
        follows under the else branch."""
        compact = con.length.compact
        lines.append(f"{p}if {v} is None:")
        self.null(compact, wide, con.nullable, lines, p + "    ")
        lines += [f"{p}else:", *measure]
        self.length(compact, wide, n, lines, p + "    ")

    def null(self, compact: bool, wide: bool, nullable: bool, lines: list[str], p: str) -> None:
        if not nullable:
            lines.append(f"{p}raise _X")
        elif compact:
            lines.append(f"{p}out.append(0)")
        else:
            minus_one = b"\xff" * (4 if wide else 2)
            lines.append(f"{p}out += {minus_one!r}")

    def value(self, con: Any, v: str, lines: list[str], d: int) -> None:
        """Code that writes the value in local v."""
        p = "    " * d
        code = _fixed_code(con)
        if code is not None:
            s = self.src.const(struct.Struct(">" + code).pack, "_p")
            arg = f"({v} or _ZU).bytes" if code == "16s" else v
            self.src.ns["_ZU"] = uuid.UUID(int=0)
            lines.append(f"{p}out += {s}({arg})")
            return
        if isinstance(con, String):
            b, n = self.src.name("b"), self.src.name("n")
            self.sized(con, v, False, [f"{p}    {b} = {v}.encode('utf-8')", f"{p}    {n} = len({b})"], n, lines, p)
            lines.append(f"{p}    out += {b}")
            return
        if isinstance(con, Bytes):
            n = self.src.name("n")
            self.sized(con, v, True, [f"{p}    {n} = len({v})"], n, lines, p)
            lines += [f"{p}    if {n} >= _BIG or isinstance({v}, _FR):",
                      f"{p}        parts.append(out)", f"{p}        parts.append({v})", f"{p}        out = bytearray()",
                      f"{p}    else:", f"{p}        out += {v}"]
            return
        if isinstance(con, Array):
            n = self.src.name("n")
            self.sized(con, v, True, [f"{p}    {n} = len({v})"], n, lines, p)
            e = self.src.name("e")
            lines.append(f"{p}    for {e} in {v}:")
            sub = _struct_of(con.element)
            if sub is not None:
                self.struct(sub[0], e, lines, d + 2)
            else:
                self.value(con.element, e, lines, d + 2)
            return
        sub = _struct_of(con)
        if sub is not None:
            ks, nullable = sub
            if nullable:
                lines += [f"{p}if {v} is None:", f"{p}    out.append(255)", f"{p}else:", f"{p}    out.append(1)"]
                self.struct(ks, v, lines, d + 1)
            else:  # _DefaultStruct: None builds from the struct's defaults
                lines += [f"{p}if {v} is None:", f"{p}    {v} = {{}}"]
                self.struct(ks, v, lines, d)
            return
        raise TypeError(f"no generated encoder for {con!r}")

    def struct(self, ks: Any, o: str, lines: list[str], d: int) -> None:
        p = "    " * d
        quiet = self.src.const(ks.quiet, "_q")
        absent = self.src.const(ks._check_absent, "_ca")
        g = self.src.name("g")
        lines += [f"{p}if not {quiet}.issuperset({o}):", f"{p}    {absent}({o})", f"{p}{g} = {o}.get"]
        run: list[tuple[str, str]] = []  # (value expression, format code)

        def get(name: str, default: Any) -> str:
            if default is ks.required:
                return f"{o}[{name!r}]"  # absent: KeyError, and the tree names the key
            if default is None or isinstance(default, (bool, int, float, str)):
                return f"{g}({name!r}, {default!r})"
            return f"{g}({name!r}, {self.src.const(default)})"

        def flush() -> None:
            if not run:
                return
            fmt = ">" + "".join(c for _, c in run)
            s = self.src.const(struct.Struct(fmt).pack, "_p")
            if any(c == "16s" for _, c in run):
                self.src.ns["_ZU"] = uuid.UUID(int=0)
            args = ", ".join(f"({e} or _ZU).bytes" if c == "16s" else e for e, c in run)
            lines.append(f"{p}out += {s}({args})")
            run.clear()

        for name, con, default in ks.regular:
            code = _fixed_code(con)
            if code is not None:
                run.append((get(name, default), code))
                continue
            flush()
            v = self.src.name("v")
            lines.append(f"{p}{v} = {get(name, default)}")
            self.value(con, v, lines, d)
        flush()
        if ks.flexible:
            if not ks.tagged:
                lines.append(f"{p}out.append(0)")
                return
            section = self.src.const(ks, "_ks")
            tests = []
            for tag in ks.tag_order:
                name, _, default = ks.tagged[tag]
                t = self.src.name("v")
                dc = self.src.const(default, "_d")
                lines.append(f"{p}{t} = {g}({name!r}, _M)")
                tests.append(f"({t} is _M or {t} == {dc})")
            lines += [f"{p}if {' and '.join(tests)}:", f"{p}    out.append(0)", f"{p}else:",
                      f"{p}    out += _tagged({section}, {o})"]
            self.src.ns["_tagged"] = _tagged_section


def encoder(ks: Any, where: str) -> Callable[[Any], list[Any]]:
    """The generated encoder of one message's tree: fn(obj) -> parts (bytearrays, and records
    values kept whole). Any exception means: rerun the tree (it raises the right error)."""
    src = _Source()
    _Encoder(src).top("encode", ks)
    return src.compile("encode", where)
