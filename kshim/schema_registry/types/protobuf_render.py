"""FileDescriptorProto -> .proto text: the PROTOBUF canonical form.

Confluent stores a Protobuf schema as .proto text printed from its parsed model, whatever the
client sent (text or a serialized descriptor). This prints a descriptor the same way in spirit:
one stable layout, type names fully qualified with a leading dot so the text compiles again to
the same descriptor (protobuf.py relies on that: base64 input is printed, then compiled).
Options are printed from the options messages' set fields; custom options (extensions such as
confluent.field_meta) only when the caller passes a pool that knows them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory, text_format

FDP = descriptor_pb2.FieldDescriptorProto

_SCALARS = {
    FDP.TYPE_DOUBLE: "double", FDP.TYPE_FLOAT: "float", FDP.TYPE_INT64: "int64",
    FDP.TYPE_UINT64: "uint64", FDP.TYPE_INT32: "int32", FDP.TYPE_FIXED64: "fixed64",
    FDP.TYPE_FIXED32: "fixed32", FDP.TYPE_BOOL: "bool", FDP.TYPE_STRING: "string",
    FDP.TYPE_BYTES: "bytes", FDP.TYPE_UINT32: "uint32", FDP.TYPE_SFIXED32: "sfixed32",
    FDP.TYPE_SFIXED64: "sfixed64", FDP.TYPE_SINT32: "sint32", FDP.TYPE_SINT64: "sint64",
}


class UnsupportedDescriptor(ValueError):
    """A descriptor this printer cannot render faithfully (a proto2 group in an extend block)."""


def scalar_name(field: descriptor_pb2.FieldDescriptorProto) -> str | None:
    return _SCALARS.get(field.type)


class Renderer:
    def __init__(self, fdp: descriptor_pb2.FileDescriptorProto, pool: descriptor_pool.DescriptorPool | None) -> None:
        self.fdp = fdp
        self.pool = pool
        self.proto3 = fdp.syntax == "proto3"
        self.editions = fdp.syntax == "editions"
        self.out: list[str] = []
        # map entry types by full name, so a map field prints as map<K, V>
        self.map_entries: dict[str, descriptor_pb2.DescriptorProto] = {}
        # proto2 groups: the field and its message type print as one `group` block
        self.types: dict[str, descriptor_pb2.DescriptorProto] = {}
        self.group_types: set[str] = set()
        self.prefix = f".{fdp.package}" if fdp.package else ""
        self._collect_maps(fdp.message_type, self.prefix)

    def _collect_maps(self, messages: Iterable[descriptor_pb2.DescriptorProto], prefix: str) -> None:
        for m in messages:
            full = f"{prefix}.{m.name}"
            if m.options.map_entry:
                self.map_entries[full] = m
            self.types[full] = m
            self.group_types.update(f.type_name for f in m.field if f.type == FDP.TYPE_GROUP)
            self._collect_maps(m.nested_type, full)

    def render(self) -> str:
        f = self.fdp
        if self.editions:
            self.out.append(f'edition = "{descriptor_pb2.Edition.Name(f.edition).removeprefix("EDITION_")}";')
        else:
            self.out.append(f'syntax = "{f.syntax or "proto2"}";')
        if f.package:
            self.out.append(f"package {f.package};")
        if f.dependency:
            self.out.append("")
            for i, dep in enumerate(f.dependency):
                kind = "public " if i in f.public_dependency else "weak " if i in f.weak_dependency else ""
                self.out.append(f'import {kind}"{dep}";')
        self._option_lines(f.options, "google.protobuf.FileOptions", "")
        for m in f.message_type:
            self.out.append("")
            self._message(m, "", full=f"{self.prefix}.{m.name}")
        for e in f.enum_type:
            self.out.append("")
            self._enum(e, "")
        self._extensions(f.extension, "")
        for s in f.service:
            self.out.append("")
            self.out.append(f"service {s.name} {{")
            self._option_lines(s.options, "google.protobuf.ServiceOptions", "  ")
            for meth in s.method:
                cs = "stream " if meth.client_streaming else ""
                ss = "stream " if meth.server_streaming else ""
                head = f"  rpc {meth.name}({cs}{meth.input_type}) returns ({ss}{meth.output_type})"
                opts = self._options(meth.options, "google.protobuf.MethodOptions")
                if opts:
                    self.out.append(head + " {")
                    self.out.extend(f"    option {o};" for o in opts)
                    self.out.append("  }")
                else:
                    self.out.append(head + ";")
            self.out.append("}")
        return "\n".join(self.out) + "\n"

    # options: typed through the pool when there is one, so custom options print by name
    def _options(self, opts: message.Message, full_name: str) -> list[str]:
        if self.pool is not None:
            try:
                cls = message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full_name))
                typed = cls()
                typed.ParseFromString(opts.SerializeToString())
                opts = typed
            except (KeyError, message.DecodeError):
                pass
        result: list[str] = []
        for fd, value in opts.ListFields():
            if fd.name == "map_entry":
                continue  # printed as the map<K, V> syntax
            name = f"({fd.full_name})" if fd.is_extension else fd.name
            values = list(value) if _repeated(fd) else [value]
            result.extend(f"{name} = {_value(fd, v)}" for v in values)
        return result

    def _option_lines(self, opts: message.Message, full_name: str, indent: str) -> None:
        lines = self._options(opts, full_name)
        if lines:
            if not indent:
                self.out.append("")
            self.out.extend(f"{indent}option {o};" for o in lines)

    def _field(self, field: descriptor_pb2.FieldDescriptorProto, indent: str, in_oneof: bool) -> None:
        group = self.types.get(field.type_name) if field.type == FDP.TYPE_GROUP else None
        if field.type == FDP.TYPE_GROUP and (group is None or field.extendee):
            raise UnsupportedDescriptor(f"field {field.name}: this proto2 group is not supported")
        entry = self.map_entries.get(field.type_name)
        if entry is not None:
            key, val = entry.field[0], entry.field[1]
            type_text = f"map<{self._type(key)}, {self._type(val)}>"
            label = ""
        else:
            type_text = self._type(field)
            label = self._label(field, in_oneof)
        opts = self._options(field.options, "google.protobuf.FieldOptions")
        if field.HasField("default_value"):
            opts.insert(0, f"default = {_default(field)}")
        if field.HasField("json_name") and field.json_name != _json_name(field.name):
            opts.append(f"json_name = {json.dumps(field.json_name)}")
        suffix = f" [{', '.join(opts)}]" if opts else ""
        if group is not None:
            self._message(group, indent, f"{label}group", f" = {field.number}{suffix}", field.type_name)
            return
        self.out.append(f"{indent}{label}{type_text} {field.name} = {field.number}{suffix};")

    def _type(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        return _SCALARS.get(field.type) or field.type_name

    def _label(self, field: descriptor_pb2.FieldDescriptorProto, in_oneof: bool) -> str:
        if field.label == FDP.LABEL_REPEATED:
            return "repeated "
        if in_oneof:
            return ""
        if field.label == FDP.LABEL_REQUIRED:
            return "required "
        if self.editions:
            return ""
        if self.proto3:
            return "optional " if field.proto3_optional else ""
        return "optional "

    def _message(self, m: descriptor_pb2.DescriptorProto, indent: str, keyword: str = "message",
                 tail: str = "", full: str = "") -> None:
        inner = indent + "  "
        self.out.append(f"{indent}{keyword} {m.name}{tail} {{")
        self._option_lines(m.options, "google.protobuf.MessageOptions", inner)
        synthetic = {f.oneof_index for f in m.field if f.proto3_optional}
        printed_oneofs: set[int] = set()
        # protoc adds a map field's entry type to nested_type where the field is declared, and
        # clients address nested messages by index (Confluent's message indexes): print the
        # nested messages declared before each map field before it, so the order comes back
        entry_index = {n.name: i for i, n in enumerate(m.nested_type)
                       if n.options.map_entry or f"{full}.{n.name}" in self.group_types}
        next_nested = 0

        def nested_until(end: int) -> None:
            nonlocal next_nested
            for nested in m.nested_type[next_nested:end]:
                if not nested.options.map_entry and f"{full}.{nested.name}" not in self.group_types:
                    self._message(nested, inner, full=f"{full}.{nested.name}")
            next_nested = max(next_nested, end)

        for field in m.field:
            entry = entry_index.get(field.type_name.rpartition(".")[2])
            if entry is not None and (field.type_name in self.map_entries or field.type_name in self.group_types):
                nested_until(entry)
            if field.HasField("oneof_index") and field.oneof_index not in synthetic:
                idx = field.oneof_index
                if idx in printed_oneofs:
                    continue
                printed_oneofs.add(idx)
                decl = m.oneof_decl[idx]
                self.out.append(f"{inner}oneof {decl.name} {{")
                for o in self._options(decl.options, "google.protobuf.OneofOptions"):
                    self.out.append(f"{inner}  option {o};")
                for member in m.field:
                    if member.HasField("oneof_index") and member.oneof_index == idx:
                        self._field(member, inner + "  ", in_oneof=True)
                self.out.append(f"{inner}}}")
            else:
                self._field(field, inner, in_oneof=False)
        for r in m.reserved_range:  # end exclusive in the descriptor
            self.out.append(f"{inner}reserved {_range(r.start, r.end - 1)};")
        if m.reserved_name:
            self.out.append(f"{inner}reserved {', '.join(json.dumps(n) for n in m.reserved_name)};")
        for x in m.extension_range:
            self.out.append(f"{inner}extensions {_range(x.start, x.end - 1)};")
        nested_until(len(m.nested_type))
        for e in m.enum_type:
            self._enum(e, inner)
        self._extensions(m.extension, inner)
        self.out.append(f"{indent}}}")

    def _enum(self, e: descriptor_pb2.EnumDescriptorProto, indent: str) -> None:
        inner = indent + "  "
        self.out.append(f"{indent}enum {e.name} {{")
        self._option_lines(e.options, "google.protobuf.EnumOptions", inner)
        for v in e.value:
            opts = self._options(v.options, "google.protobuf.EnumValueOptions")
            suffix = f" [{', '.join(opts)}]" if opts else ""
            self.out.append(f"{inner}{v.name} = {v.number}{suffix};")
        for r in e.reserved_range:  # end inclusive for enums
            self.out.append(f"{inner}reserved {_range(r.start, r.end)};")
        if e.reserved_name:
            self.out.append(f"{inner}reserved {', '.join(json.dumps(n) for n in e.reserved_name)};")
        self.out.append(f"{indent}}}")

    def _extensions(self, fields: Iterable[descriptor_pb2.FieldDescriptorProto], indent: str) -> None:
        by_extendee: dict[str, list[descriptor_pb2.FieldDescriptorProto]] = {}
        for f in fields:
            by_extendee.setdefault(f.extendee, []).append(f)
        for extendee, group in by_extendee.items():
            self.out.append("")
            self.out.append(f"{indent}extend {extendee} {{")
            for f in group:
                self._field(f, indent + "  ", in_oneof=False)
            self.out.append(f"{indent}}}")


def _repeated(fd: object) -> bool:
    # protobuf 6.31+ has is_repeated and 7 dropped label; older ones have only label
    flag = getattr(fd, "is_repeated", None)
    return bool(flag) if flag is not None else getattr(fd, "label", 0) == 3  # LABEL_REPEATED


def _json_name(name: str) -> str:
    """protoc's default json_name: underscores dropped, the letter after each upper-cased.
    Descriptors from generated code carry it on every field; only a chosen one is printed."""
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _range(start: int, end: int) -> str:
    if start == end:
        return str(start)
    return f"{start} to {'max' if end >= 536870911 - 1 else end}"


def _value(fd: object, v: object) -> str:
    """An option value as .proto text."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    assert isinstance(fd, FD)
    if fd.type == FD.TYPE_ENUM:
        ev = fd.enum_type.values_by_number.get(int(str(v))) if fd.enum_type is not None else None
        return ev.name if ev is not None else str(v)
    if fd.type == FD.TYPE_BOOL:
        return "true" if v else "false"
    if fd.type == FD.TYPE_STRING:
        return json.dumps(v, ensure_ascii=False)
    if fd.type == FD.TYPE_BYTES:
        assert isinstance(v, bytes)
        return '"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:03o}" for b in v) + '"'
    if fd.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
        assert isinstance(v, message.Message)
        return "{ " + text_format.MessageToString(v, as_one_line=True) + " }"
    return repr(v) if isinstance(v, float) else str(v)


def _default(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.type == FDP.TYPE_STRING:
        return json.dumps(field.default_value, ensure_ascii=False)
    if field.type == FDP.TYPE_BYTES:
        return f'"{field.default_value}"'  # already C-escaped in the descriptor
    return field.default_value


def render(fdp: descriptor_pb2.FileDescriptorProto, pool: descriptor_pool.DescriptorPool | None = None) -> str:
    return Renderer(fdp, pool).render()
