"""PROTOBUF schemas: .proto text or a base64 FileDescriptorProto, compiled by protoc itself.

Input: the .proto text the Java client sends, or base64 of a serialized FileDescriptorProto (what
confluent-kafka-python's ProtobufSerializer registers). A descriptor is first printed as .proto
text (protobuf_render), so both forms go through one path: protoc, in-process through
grpcio-tools, compiles the text with the references written beside it under their import paths,
and google/protobuf/*.proto, confluent/meta.proto, confluent/type/decimal.proto (and google/type/*
when googleapis-common-protos is installed) are built in without references. protoc's own errors
become InvalidSchema.

canonical(): the compiled descriptor printed as .proto text (types fully qualified);
formatted("serialized"): base64 of the compiled FileDescriptorProto.

Compatibility: Confluent's protobuf SchemaDiff, pairwise, original = previous (writer), update =
self (reader). Incompatible: PACKAGE_CHANGED, MESSAGE_REMOVED, FIELD_KIND_CHANGED (scalar/message/
map), FIELD_SCALAR_KIND_CHANGED (outside the wire-compatible groups int32/int64/uint32/uint64/bool/
enum, sint32/sint64, string/bytes, fixed32/sfixed32, fixed64/sfixed64), FIELD_NAMED_TYPE_CHANGED,
FIELD_NUMERIC_LABEL_CHANGED, REQUIRED_FIELD_ADDED/REMOVED, ONEOF_FIELD_REMOVED,
MULTIPLE_FIELDS_MOVED_TO_ONEOF, FIELD_MOVED_TO_EXISTING_ONEOF. Compatible (not reported): fields,
messages, enums and enum constants added or removed, renames, oneofs added or removed as a whole.
Not done: custom options of a base64 descriptor given as a reference are dropped (the schema's
own are kept); proto2 groups in extend blocks are rejected; normalize=True only orders fields,
enum values and imports.
"""

from __future__ import annotations

import ast
import base64
import binascii
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc_tools
from google.protobuf import descriptor_pb2, descriptor_pool, message
from grpc_tools import _protoc_compiler

from kshim.schema_registry.types.base import InvalidSchema, Schema
from kshim.schema_registry.types.protobuf_render import UnsupportedDescriptor, render, scalar_name

MAIN_FILE = "default"  # Confluent's name for the schema's own file
_B64 = re.compile(r"[A-Za-z0-9+/=\s]+")
FDP = descriptor_pb2.FieldDescriptorProto


def _include_paths() -> list[bytes]:
    paths = [Path(__file__).parent / "proto", Path(grpc_tools.__file__).parent / "_proto"]
    try:  # google/type/*.proto ship with googleapis-common-protos (confluent-kafka[protobuf])
        import google.type as gtype

        paths.extend(Path(p).parent.parent for p in gtype.__path__)
    except ImportError:
        pass
    return [str(p).encode() for p in paths]


_INCLUDES = _include_paths()


def _safe_name(name: str) -> str:
    parts = name.split("/")
    if name == MAIN_FILE:
        raise InvalidSchema(f"invalid reference name {name!r}: the schema's own file has that name")
    if not name or name.startswith("/") or "\\" in name or "\0" in name or any(p in ("", ".", "..") for p in parts):
        raise InvalidSchema(f"invalid reference name {name!r}: expected a relative import path like other.proto")
    return name


def _descriptor_from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    s = text.strip()
    if not s or not _B64.fullmatch(s):
        return None
    try:
        raw = base64.b64decode("".join(s.split()), validate=True)
        fdp = descriptor_pb2.FileDescriptorProto()
        fdp.ParseFromString(raw)
    except (binascii.Error, ValueError, message.DecodeError):
        return None
    return fdp


def _as_text(text: str, what: str) -> str:
    fdp = _descriptor_from_base64(text)
    if fdp is None:
        return text
    try:
        return render(fdp)
    except (UnsupportedDescriptor, ValueError) as e:
        raise InvalidSchema(f"Invalid {what}: {e}") from e


_SYNTAX = re.compile(r"^\s*(syntax|edition)\s*=", re.M)


def _with_syntax(text: str) -> str:
    """No syntax line means proto2 (for Confluent too); saying so on line 1 keeps protoc from
    logging a warning to the process's stderr for every such schema, and line numbers unchanged."""
    return text if _SYNTAX.search(text) else 'syntax = "proto2"; ' + text


def _compile(text: str, references: Mapping[str, str]) -> list[descriptor_pb2.FileDescriptorProto]:
    """protoc on the schema and its references: the imports' descriptors, then the main file's."""
    with tempfile.TemporaryDirectory(prefix="kshim-proto-") as d:
        for name, ref_text in references.items():
            path = Path(d, _safe_name(name))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_with_syntax(_as_text(ref_text, f"reference {name!r}")), encoding="utf-8")
        Path(d, MAIN_FILE).write_text(_with_syntax(text), encoding="utf-8")
        try:
            generated = _protoc_compiler.get_protos(MAIN_FILE.encode(), [d.encode(), *_INCLUDES])
        except _protoc_compiler.ProtocErrors as e:
            raise InvalidSchema("Invalid schema: " + "; ".join(_error_text(x) for x in e.errors())) from e
    # protoc lists imports before their importers: keep that order, the main file last
    files = [_serialized_descriptor(code) for _, code in generated]
    files.sort(key=lambda f: f.name == MAIN_FILE)
    return files


def _error_text(err: object) -> str:
    def s(v: object) -> str:
        return v.decode(errors="replace") if isinstance(v, bytes) else str(v)

    line = int(getattr(err, "line", -1))
    col = int(getattr(err, "column", -1))
    where = f"{s(getattr(err, 'filename', ''))}:{line + 1}:{col + 1}" if line >= 0 else s(getattr(err, "filename", ""))
    return f"{where}: {s(getattr(err, 'message', err))}"


def _serialized_descriptor(code: bytes) -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto protoc embeds in the Python module it generated:
    get_protos compiles in memory with structured errors, but hands back generated code."""
    for node in ast.walk(ast.parse(code)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            fdp = descriptor_pb2.FileDescriptorProto()
            fdp.ParseFromString(node.args[0].value)
            return fdp
    raise InvalidSchema("Invalid schema: protoc gave no descriptor")  # a grpcio-tools we do not know


def _pool(files: list[descriptor_pb2.FileDescriptorProto]) -> descriptor_pool.DescriptorPool | None:
    """A pool of the compiled files, so custom options print by name; None if it will not build."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    pending = list(files)
    try:
        while pending:  # imports before their importers
            ready = [f for f in pending if all(d in added for d in f.dependency)]
            if not ready:
                return None
            for f in ready:
                pool.Add(f)
                added.add(f.name)
            pending = [f for f in pending if f.name not in added]
    except Exception:  # upb raises TypeError/ValueError variants on a file it rejects
        return None
    return pool


def _normalized(fdp: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    out = descriptor_pb2.FileDescriptorProto()
    out.CopyFrom(fdp)

    def by_number(items: Any) -> None:  # a repeated field of descriptors, in place
        ordered = sorted(items, key=lambda x: x.number)
        del items[:]
        items.extend(ordered)

    def sort_message(m: descriptor_pb2.DescriptorProto) -> None:
        by_number(m.field)
        for n in m.nested_type:
            sort_message(n)
        for e in m.enum_type:
            sort_enum(e)

    def sort_enum(e: descriptor_pb2.EnumDescriptorProto) -> None:
        by_number(e.value)

    for m in out.message_type:
        sort_message(m)
    for e in out.enum_type:
        sort_enum(e)
    public = {fdp.dependency[i] for i in fdp.public_dependency}
    weak = {fdp.dependency[i] for i in fdp.weak_dependency}
    deps = sorted(fdp.dependency)
    del out.dependency[:], out.public_dependency[:], out.weak_dependency[:]
    out.dependency.extend(deps)
    out.public_dependency.extend(i for i, d in enumerate(deps) if d in public)
    out.weak_dependency.extend(i for i, d in enumerate(deps) if d in weak)
    return out


class ProtobufSchema:
    schema_type = "PROTOBUF"

    def __init__(self, files: list[descriptor_pb2.FileDescriptorProto], normalize: bool) -> None:
        self.descriptor = _normalized(files[-1]) if normalize else files[-1]
        self.files = [*files[:-1], self.descriptor]
        try:
            self._canonical = render(self.descriptor, _pool(files))
        except UnsupportedDescriptor as e:
            raise InvalidSchema(f"Invalid schema: {e}") from e

    def canonical(self) -> str:
        return self._canonical

    def formatted(self, fmt: str | None) -> str:
        if fmt == "serialized":
            return base64.standard_b64encode(self.descriptor.SerializeToString()).decode("ascii")
        return self._canonical

    def compatibility_errors(self, previous: Schema) -> list[str]:
        if not isinstance(previous, ProtobufSchema):
            return ["Incompatible because of different schema type"]
        diff = _Diff(_types(previous.files), _types(self.files))
        diff.compare_files(previous.descriptor, self.descriptor)
        errors: list[str] = []
        for kind, path in diff.differences:
            if kind in _INCOMPATIBLE:
                text = f'{{errorType:"{kind}", description:"{_INCOMPATIBLE[kind].format(path=path)}"}}'
                if text not in errors:  # a message reached from two fields reports once
                    errors.append(text)
        return errors


def _descriptor_as_text(fdp: descriptor_pb2.FileDescriptorProto, references: Mapping[str, str]) -> str:
    """A registered descriptor as .proto text, its custom options (confluent.field_meta...) kept:
    they print by name only from a pool that has the descriptor's imports, so compile those first."""
    stub = 'syntax = "proto3";\n' + "".join(f'import "{d}";\n' for d in fdp.dependency if '"' not in d)
    imports = [f for f in _compile(stub, references) if f.name != MAIN_FILE] if fdp.dependency else []
    own = descriptor_pb2.FileDescriptorProto()
    own.CopyFrom(fdp)
    own.name = MAIN_FILE  # the descriptor itself too: options it defines and uses in one file
    pool = _pool([*imports, own])
    try:
        return render(fdp, pool)
    except (UnsupportedDescriptor, ValueError) as e:
        raise InvalidSchema(f"Invalid schema: {e}") from e


def parse_protobuf(text: str, references: Mapping[str, str], *, normalize: bool) -> ProtobufSchema:
    try:
        fdp = _descriptor_from_base64(text)
        source = text if fdp is None else _descriptor_as_text(fdp, references)
        files = _compile(source, references)
    except OSError as e:  # a reference name the file system will not take
        raise InvalidSchema(f"Invalid schema: {e}") from e
    return ProtobufSchema(files, normalize)


# --- compatibility: Confluent's protobuf SchemaDiff rules over descriptors ---------------------------

_INCOMPATIBLE = {
    "PACKAGE_CHANGED": "The package at '{path}' in the reader schema does not match the package in the writer schema",
    "MESSAGE_REMOVED": "The reader schema is missing a MESSAGE type at path '{path}' in the writer schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{path}' in the reader schema does not match the writer schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{path}' in the reader schema does not "
    "match its kind in the writer schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{path}' in the reader schema does not "
    "match its type in the writer schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{path}' in the reader schema does "
    "not match its label in the writer schema",
    "REQUIRED_FIELD_ADDED": "A required field at path '{path}' in the reader schema is missing in the writer schema",
    "REQUIRED_FIELD_REMOVED": "The reader schema is missing a required field at path: '{path}' in the writer schema",
    "ONEOF_FIELD_REMOVED": "The reader schema is missing a oneof field at path '{path}' in the writer schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{path}' in the reader schema are "
    "outside a oneof in the writer schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{path}' in the reader schema is outside an "
    "existing oneof in the writer schema",
}

# wire-compatible scalar groups (protobuf's "updating a message type" rules); enums count as int32
_SCALAR_KIND = {
    "int32": "GENERAL_NUMBER", "int64": "GENERAL_NUMBER", "uint32": "GENERAL_NUMBER",
    "uint64": "GENERAL_NUMBER", "bool": "GENERAL_NUMBER", "sint32": "SIGNED_NUMBER",
    "sint64": "SIGNED_NUMBER", "string": "STRING_OR_BYTES", "bytes": "STRING_OR_BYTES",
    "fixed32": "FIXED32", "sfixed32": "FIXED32", "fixed64": "FIXED64", "sfixed64": "FIXED64",
    "float": "FLOAT", "double": "DOUBLE",
}


@dataclass
class _TypeInfo:
    proto: descriptor_pb2.DescriptorProto | descriptor_pb2.EnumDescriptorProto
    package: str
    is_map: bool = False


def _types(files: list[descriptor_pb2.FileDescriptorProto]) -> dict[str, _TypeInfo]:
    """Every message and enum of the schema and its imports by full name (".pkg.Outer.Inner")."""
    types: dict[str, _TypeInfo] = {}

    def walk(messages: list[descriptor_pb2.DescriptorProto], enums: list[descriptor_pb2.EnumDescriptorProto],
             prefix: str, package: str) -> None:
        for m in messages:
            types[f"{prefix}.{m.name}"] = _TypeInfo(m, package, m.options.map_entry)
            walk(list(m.nested_type), list(m.enum_type), f"{prefix}.{m.name}", package)
        for e in enums:
            types[f"{prefix}.{e.name}"] = _TypeInfo(e, package)

    for f in files:
        walk(list(f.message_type), list(f.enum_type), f".{f.package}" if f.package else "", f.package)
    return types


def _label(f: descriptor_pb2.FieldDescriptorProto, in_oneof: bool, proto3: bool) -> str | None:
    """The label as Confluent's parsed model has it: none for oneof members and proto3 plain fields."""
    if in_oneof:
        return None
    if f.label == FDP.LABEL_REPEATED:
        return "REPEATED"
    if f.label == FDP.LABEL_REQUIRED:
        return "REQUIRED"
    return "OPTIONAL" if (f.proto3_optional or not proto3) else None


@dataclass
class _Diff:
    original: dict[str, _TypeInfo]
    update: dict[str, _TypeInfo]
    differences: list[tuple[str, str]] = field(default_factory=list)
    _seen: set[tuple[str, str]] = field(default_factory=set)
    proto3: tuple[bool, bool] = (False, False)

    def add(self, kind: str, path: list[str]) -> None:
        self.differences.append((kind, "#/" + "/".join(path)))

    def compare_files(self, o: descriptor_pb2.FileDescriptorProto, u: descriptor_pb2.FileDescriptorProto) -> None:
        self.proto3 = (o.syntax == "proto3", u.syntax == "proto3")
        if o.package != u.package:
            self.add("PACKAGE_CHANGED", [])
        op = f".{o.package}" if o.package else ""
        up = f".{u.package}" if u.package else ""
        self.compare_types(list(o.message_type), list(o.enum_type), list(u.message_type), list(u.enum_type), op, up, [])

    def compare_types(self, om: list[descriptor_pb2.DescriptorProto], oe: list[descriptor_pb2.EnumDescriptorProto],
                      um: list[descriptor_pb2.DescriptorProto], ue: list[descriptor_pb2.EnumDescriptorProto],
                      oscope: str, uscope: str, path: list[str]) -> None:
        omsg = {m.name: (i, m) for i, m in enumerate(x for x in om if not x.options.map_entry)}
        umsg = {m.name: (i, m) for i, m in enumerate(x for x in um if not x.options.map_entry)}
        for name in sorted(omsg.keys() | umsg.keys()):
            if name not in umsg:
                self.add("MESSAGE_REMOVED", path + [name])
            elif name not in omsg:
                self.add("MESSAGE_ADDED", path + [name])
            else:
                (oi, o), (ui, u) = omsg[name], umsg[name]
                self.compare_message(o, u, f"{oscope}.{name}", f"{uscope}.{name}", path + [name])
                if oi != ui:  # compatible: message indexes are those of the writer's schema id
                    self.add("MESSAGE_MOVED", path + [name])
        oenum = {e.name: e for e in oe}
        uenum = {e.name: e for e in ue}
        for name in sorted(oenum.keys() | uenum.keys()):
            if name not in uenum:
                self.add("ENUM_REMOVED", path + [name])
            elif name not in oenum:
                self.add("ENUM_ADDED", path + [name])
            else:
                onum = {v.number: v.name for v in oenum[name].value}
                unum = {v.number: v.name for v in uenum[name].value}
                for n in sorted(onum.keys() | unum.keys()):
                    kind = ("ENUM_CONST_REMOVED" if n not in unum else "ENUM_CONST_ADDED" if n not in onum
                            else "ENUM_CONST_CHANGED" if onum[n] != unum[n] else "")
                    if kind:
                        self.add(kind, path + [name, str(n)])

    def compare_message(self, o: descriptor_pb2.DescriptorProto, u: descriptor_pb2.DescriptorProto,
                        ofull: str, ufull: str, path: list[str]) -> None:
        if (ofull, ufull) in self._seen:  # recursive types: compared once
            return
        self._seen.add((ofull, ufull))
        obytag, ooneof = _fields(o)
        ubytag, uoneof = _fields(u)
        oneofs_o = set(ooneof.values())
        oneofs_u = set(uoneof.values())
        # a oneof deleted whole (no member survives anywhere) is compatible
        deleted = {n for n in oneofs_o - oneofs_u if not any(t in ubytag for t, on in ooneof.items() if on == n)}
        for name in sorted(oneofs_u):
            members = [t for t, on in uoneof.items() if on == name]
            groups = {f"oneof:{ooneof[t]}" if t in ooneof else f"field:{t}" for t in members if t in obytag}
            moved_in = sum(1 for t in members if t in obytag and t not in ooneof)
            if len(groups) > 1:  # fields once independent are now mutually exclusive
                self.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF",
                         path + [name])
        for name in sorted(oneofs_o ^ oneofs_u):
            self.add("ONEOF_REMOVED" if name in oneofs_o else "ONEOF_ADDED", path + [name])
        for tag in sorted(obytag.keys() | ubytag.keys()):
            of, uf = obytag.get(tag), ubytag.get(tag)
            if uf is None:
                assert of is not None
                if tag in ooneof:
                    if ooneof[tag] not in deleted:
                        self.add("ONEOF_FIELD_REMOVED", path + [ooneof[tag], str(tag)])
                else:
                    req = of.label == FDP.LABEL_REQUIRED
                    self.add("REQUIRED_FIELD_REMOVED" if req else "FIELD_REMOVED", path + [str(tag)])
            elif of is None:
                if tag in uoneof:
                    self.add("ONEOF_FIELD_ADDED", path + [uoneof[tag], str(tag)])
                else:
                    req = uf.label == FDP.LABEL_REQUIRED
                    self.add("REQUIRED_FIELD_ADDED" if req else "FIELD_ADDED", path + [str(tag)])
            else:
                if tag in ooneof and tag not in uoneof:
                    self.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", path + [str(tag)])
                where = path + ([uoneof[tag], str(tag)] if tag in uoneof else [str(tag)])
                if of.name != uf.name:
                    self.add("FIELD_NAME_CHANGED", where)
                self.compare_field_types(
                    _label(of, tag in ooneof, self.proto3[0]), _label(uf, tag in uoneof, self.proto3[1]),
                    of, uf, where)
        self.compare_types(list(o.nested_type), list(o.enum_type), list(u.nested_type), list(u.enum_type),
                           ofull, ufull, path)

    def _kind(self, f: descriptor_pb2.FieldDescriptorProto, types: dict[str, _TypeInfo]) -> str:
        if scalar_name(f) is not None or f.type == FDP.TYPE_ENUM:
            return "SCALAR"
        info = types.get(f.type_name)
        return "MAP" if info is not None and info.is_map else "MESSAGE"

    def compare_field_types(self, olabel: str | None, ulabel: str | None, of: descriptor_pb2.FieldDescriptorProto,
                            uf: descriptor_pb2.FieldDescriptorProto, path: list[str]) -> None:
        okind, ukind = self._kind(of, self.original), self._kind(uf, self.update)
        if okind != ukind:
            self.add("FIELD_KIND_CHANGED", path)
        elif okind == "SCALAR":
            oscalar = _SCALAR_KIND.get(scalar_name(of) or "int32")  # an enum reads as int32
            uscalar = _SCALAR_KIND.get(scalar_name(uf) or "int32")
            if oscalar != uscalar:
                self.add("FIELD_SCALAR_KIND_CHANGED", path)
            elif olabel is not None and ulabel is not None and olabel != ulabel:
                text = oscalar == "STRING_OR_BYTES"
                self.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED" if text else "FIELD_NUMERIC_LABEL_CHANGED", path)
        elif okind == "MAP":
            oe, ue = self.original[of.type_name].proto, self.update[uf.type_name].proto
            assert isinstance(oe, descriptor_pb2.DescriptorProto) and isinstance(ue, descriptor_pb2.DescriptorProto)
            for i in (0, 1):  # key, then value
                self.compare_field_types(None, None, oe.field[i], ue.field[i], path)
        else:
            self.compare_message_types(of.type_name, uf.type_name, path)

    def compare_message_types(self, oname: str, uname: str, path: list[str]) -> None:
        oinfo, uinfo = self.original.get(oname), self.update.get(uname)
        if oinfo is None or uinfo is None:
            if oname != uname:
                self.add("FIELD_NAMED_TYPE_CHANGED", path)
            return
        olocal = oname[len(oinfo.package) + 2:] if oinfo.package else oname[1:]
        ulocal = uname[len(uinfo.package) + 2:] if uinfo.package else uname[1:]
        if olocal != ulocal:
            self.add("FIELD_NAMED_TYPE_CHANGED", path)
            return
        assert isinstance(oinfo.proto, descriptor_pb2.DescriptorProto)
        assert isinstance(uinfo.proto, descriptor_pb2.DescriptorProto)
        sub = _Diff(self.original, self.update, [], self._seen, self.proto3)
        sub.compare_message(oinfo.proto, uinfo.proto, oname, uname, olocal.split("."))
        self.differences.extend(sub.differences)
        if any(kind in _INCOMPATIBLE for kind, _ in sub.differences):
            self.add("FIELD_NAMED_TYPE_CHANGED", path)


def _fields(m: descriptor_pb2.DescriptorProto) -> tuple[dict[int, descriptor_pb2.FieldDescriptorProto], dict[int, str]]:
    """Fields by number, and the real (not proto3-optional synthetic) oneof of each member."""
    synthetic = {f.oneof_index for f in m.field if f.proto3_optional}
    by_tag = {f.number: f for f in m.field}
    oneof = {f.number: m.oneof_decl[f.oneof_index].name for f in m.field
             if f.HasField("oneof_index") and f.oneof_index not in synthetic}
    return by_tag, oneof

