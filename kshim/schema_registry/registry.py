"""The registry's operations and their rules, after Confluent's KafkaSchemaRegistry: each reads
the state in memory, and a change is written to `_schemas` through the store, which returns once
it has read the write back (read-your-write), so the answer reflects what any registry rebuilt
from the topic would hold. Writes go one at a time: an id is the highest given plus one.

Failures are `RegistryError`s carrying Confluent's HTTP status, error code and message."""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Protocol

import anyio

from kshim.schema_registry import records as r
from kshim.schema_registry.state import RegistryState, identity
from kshim.schema_registry.types import SCHEMA_TYPES, InvalidSchema, Schema, parse

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "IMPORT")
DEFAULT_LEVEL, DEFAULT_MODE = "BACKWARD", "READWRITE"
MAX_VERSION = 2**31 - 1
MAX_SUBJECT_CHARS = 1024
MAX_REFERENCES = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def subject_not_found(s: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{s}' not found.")


def version_not_found(v: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {v} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def invalid_schema(message: str) -> RegistryError:
    return RegistryError(422, 42201, message)


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


def bad_body(message: str) -> RegistryError:
    return RegistryError(422, 422, message)


class Store(Protocol):
    state: RegistryState

    async def write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append the records (key, value or None for a tombstone) and return once they are applied."""


class SchemaRequest:
    """A registration, look-up or compatibility test's body, checked."""

    def __init__(self, body: object) -> None:
        if not isinstance(body, dict):
            raise bad_body("the body is not a JSON object")
        schema = body.get("schema")
        if not isinstance(schema, str) or not schema:
            raise invalid_schema("Empty schema" if not schema else "schema is not a string")
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in SCHEMA_TYPES:
            raise invalid_schema(f"Invalid schema type {schema_type!r}: one of {', '.join(SCHEMA_TYPES)}")
        refs = body.get("references") or []
        if not isinstance(refs, list) or len(refs) > MAX_REFERENCES:
            raise bad_body("references is not a list (of at most 1000)")
        references = []
        for ref in refs:
            if not (isinstance(ref, dict) and isinstance(ref.get("name"), str) and isinstance(ref.get("subject"), str)
                    and isinstance(ref.get("version"), int) and not isinstance(ref.get("version"), bool)):
                raise bad_body("a reference wants name, subject and version")
            references.append(r.Reference(ref["name"], ref["subject"], ref["version"]))
        self.schema: str = schema
        self.schema_type: str = schema_type
        self.references = tuple(references)
        self.id = _optional_int(body, "id")
        self.version = _optional_int(body, "version")


def _optional_int(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value or None  # 0: not given (as Confluent's clients send it)
    raise bad_body(f"{name} is not a non-negative integer")


def check_subject(subject: str) -> None:
    if not subject or len(subject) > MAX_SUBJECT_CHARS or _CONTROL.search(subject):
        raise RegistryError(422, 42208, f"Invalid subject {subject!r}")


def parse_version(text: str) -> int | None:
    """A version of a path: a number in [1, 2^31-1], or None for `latest` (and -1)."""
    if text in ("latest", "-1"):
        return None
    if text.isdigit() and 1 <= int(text) <= MAX_VERSION:
        return int(text)
    raise RegistryError(422, 42202, f"The specified version '{text}' is not a valid version id. "
                                    "Allowed values are between [1, 2^31-1] and the string \"latest\"")


class Registry:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._write_lock = anyio.Lock()
        self._parsed: dict[tuple[str, int], Schema] = {}  # (subject, version) -> parsed schema

    @property
    def state(self) -> RegistryState:
        return self.store.state

    # ------------------------------------------------------------------ reading
    def subjects(self, *, deleted: bool = False) -> list[str]:
        return sorted(s for s in self.state.subjects if self.state.versions(s, deleted=deleted))

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        found = self.state.versions(subject, deleted=deleted)
        if not found:
            raise subject_not_found(subject)
        return [v.version for v in found]

    def version(self, subject: str, version_text: str, *, deleted: bool = False) -> r.SchemaValue:
        number = parse_version(version_text)
        live = self.state.versions(subject, deleted=deleted)
        if not live:
            raise subject_not_found(subject)
        if number is None:
            return live[-1]
        for v in live:
            if v.version == number:
                return v
        raise version_not_found(number)

    def schema(self, schema_id: int) -> r.SchemaValue:
        found = self.state.by_id(schema_id)
        if found is None:
            raise schema_not_found(schema_id)
        return found

    def id_versions(self, schema_id: int, *, deleted: bool = False) -> list[r.SchemaValue]:
        self.schema(schema_id)
        return self.state.holders_of(schema_id, deleted=deleted)

    def referenced_by(self, subject: str, version_text: str) -> list[int]:
        v = self.version(subject, version_text)
        return self.state.referenced_by(subject, v.version)

    def level(self, subject: str | None) -> str:
        return self.state.configs.get(subject) or self.state.configs.get(None) or DEFAULT_LEVEL

    def mode(self, subject: str | None) -> str:
        return self.state.modes.get(subject) or self.state.modes.get(None) or DEFAULT_MODE

    def config(self, subject: str | None, *, default_to_global: bool = False) -> str:
        if subject is None or default_to_global:
            return self.level(subject)
        if subject not in self.state.configs:
            raise RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        return self.state.configs[subject]

    def subject_mode(self, subject: str | None, *, default_to_global: bool = False) -> str:
        if subject is None or default_to_global:
            return self.mode(subject)
        if subject not in self.state.modes:
            raise RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")
        return self.state.modes[subject]

    # ------------------------------------------------------------------ schemas
    def resolve(self, references: Iterable[r.Reference], into: dict[str, str], depth: int = 0) -> None:
        """Reference name -> referenced schema text, transitive references included."""
        if depth > 32:
            raise invalid_schema("references nest more than 32 deep (a cycle?)")
        for ref in references:
            live = self.state.versions(ref.subject)
            target = self.state.subjects.get(ref.subject, {}).get(ref.version) if ref.version > 0 else \
                (live[-1] if live else None)
            if target is None:
                raise invalid_schema(f"Invalid schema: reference {ref.name!r} to subject '{ref.subject}' version "
                                     f"{ref.version} not found")
            if ref.name not in into:
                into[ref.name] = target.schema
                self.resolve(target.references, into, depth + 1)

    def _parse(self, schema_type: str, text: str, references: tuple[r.Reference, ...], normalize: bool) -> Schema:
        resolved: dict[str, str] = {}
        self.resolve(references, resolved)
        try:
            return parse(schema_type, text, resolved, normalize=normalize)
        except InvalidSchema as e:
            raise invalid_schema(f"Invalid schema {text[:200]}, details: {e}") from None
        except RecursionError:
            raise invalid_schema("Invalid schema: nested too deep") from None

    def _parsed_version(self, v: r.SchemaValue) -> Schema:
        key = (v.subject, v.version)
        if key not in self._parsed:
            self._parsed[key] = self._parse(v.schema_type, v.schema, v.references, False)
        return self._parsed[key]

    def _errors(self, new: Schema, level: str, against: list[r.SchemaValue]) -> list[str]:
        """Why `new` breaks `level` against the versions given (oldest first)."""
        if level == "NONE" or not against:
            return []
        previous = against if level.endswith("_TRANSITIVE") else against[-1:]
        errors: list[str] = []
        for v in reversed(previous):
            old = self._parsed_version(v)
            if level.startswith(("BACKWARD", "FULL")):
                errors += [f"{e} (version {v.version}, BACKWARD)" for e in new.compatibility_errors(old)]
            if level.startswith(("FORWARD", "FULL")):
                errors += [f"{e} (version {v.version}, FORWARD)" for e in old.compatibility_errors(new)]
        return errors

    def lookup(self, subject: str, body: object, *, normalize: bool = False, deleted: bool = False) -> r.SchemaValue:
        request = SchemaRequest(body)
        if subject not in self.state.subjects:
            raise subject_not_found(subject)
        schema = self._parse(request.schema_type, request.schema, request.references, normalize)
        wanted = (schema.schema_type, schema.canonical(), request.references)
        for v in reversed(self.state.versions(subject, deleted=deleted)):
            if identity(v) == wanted:
                return v
        raise schema_not_found()

    async def register(self, subject: str, body: object, *, normalize: bool = False) -> int:
        check_subject(subject)
        request = SchemaRequest(body)
        async with self._write_lock:
            mode = self.mode(subject)
            if mode == "READONLY":
                raise not_permitted(f"Subject {subject} is in read-only mode")
            if request.id is not None and mode != "IMPORT":
                raise not_permitted(f"Subject {subject} is not in import mode: a schema id cannot be given")
            if mode == "IMPORT" and request.id is None:
                raise not_permitted(f"Subject {subject} is in import mode: the schema id must be given")
            schema = self._parse(request.schema_type, request.schema, request.references, normalize)
            value_identity = (schema.schema_type, schema.canonical(), request.references)
            versions = self.state.versions(subject, deleted=True)
            live = [v for v in versions if not v.deleted]
            if request.id is None:
                for v in reversed(live):
                    if identity(v) == value_identity:
                        return v.id  # registered already: its id, no new version
                errors = self._errors(schema, self.level(subject), live)
                if errors:
                    raise RegistryError(409, 409, f"Schema being registered is incompatible with an earlier "
                                                  f"schema for subject \"{subject}\", details: {errors}")
                schema_id = self.state.ids.get(value_identity) or self.state.max_id + 1
                version = (versions[-1].version + 1) if versions else 1
            else:
                schema_id, version = self._imported(subject, value_identity, request, versions)
                if schema_id < 0:
                    return -schema_id
            value = r.SchemaValue(subject, version, schema_id, value_identity[1], value_identity[0], request.references)
            await self.store.write([(r.encode_key(r.Key(r.SCHEMA, subject, version)), r.encode_schema(value))])
            return schema_id

    def _imported(self, subject: str, wanted: tuple[str, str, tuple[r.Reference, ...]], request: SchemaRequest,
                  versions: list[r.SchemaValue]) -> tuple[int, int]:
        """IMPORT: the id (negative when this exact version is there already) and version given."""
        assert request.id is not None
        held = self.state.by_id(request.id)
        if held is not None and identity(held) != wanted:
            raise RegistryError(422, 42207, "The ID of an imported schema does not match the existing ID")
        version = request.version or ((versions[-1].version + 1) if versions else 1)
        if version > MAX_VERSION:
            parse_version(str(version))  # raises 42202
        for v in versions:
            if v.version == version:
                if identity(v) == wanted and v.id == request.id:
                    return -request.id, version
                raise not_permitted(f"Overwrite new schema with version {version} of subject {subject} "
                                    "is not permitted")
        return request.id, version

    async def test_compatibility(self, subject: str, version_text: str | None, body: object, *,
                                 normalize: bool = False) -> list[str]:
        """Why the schema breaks the subject's level (against one version, or per the level)."""
        request = SchemaRequest(body)
        schema = self._parse(request.schema_type, request.schema, request.references, normalize)
        level = self.level(subject)
        if version_text is None:
            return self._errors(schema, level, self.state.versions(subject))
        against = self.version(subject, version_text)
        return self._errors(schema, level.removesuffix("_TRANSITIVE"), [against])

    # ------------------------------------------------------------------ deleting
    def _writable(self, subject: str) -> None:
        if self.mode(subject) == "READONLY":
            raise not_permitted(f"Subject {subject} is in read-only mode")

    def _tombstones(self, values: list[r.SchemaValue]) -> list[tuple[bytes, bytes | None]]:
        # the highest id first, kept on a NOOP record: compaction may drop the deleted schema's records
        out: list[tuple[bytes, bytes | None]] = [(r.encode_key(r.Key(r.NOOP)), r.encode_max_id(self.state.max_id))]
        for v in values:
            out.append((r.encode_key(r.Key(r.SCHEMA, v.subject, v.version)), None))
            self._parsed.pop((v.subject, v.version), None)
        return out

    def _check_unreferenced(self, values: list[r.SchemaValue]) -> None:
        for v in values:
            if self.state.referenced_by(v.subject, v.version):
                raise RegistryError(422, 42206, f"One or more references exist to the schema "
                                                f"{{subject={v.subject},version={v.version}}}.")

    async def delete_version(self, subject: str, version_text: str, *, permanent: bool = False) -> int:
        number = parse_version(version_text)
        async with self._write_lock:
            self._writable(subject)
            every = self.state.versions(subject, deleted=True)
            if not every:
                raise subject_not_found(subject)
            if number is None:
                live = [v for v in every if not v.deleted]
                target = (live or every)[-1] if permanent else (live[-1] if live else None)
            else:
                target = next((v for v in every if v.version == number), None)
            if target is None:
                raise version_not_found(number if number is not None else "latest")
            if permanent:
                if not target.deleted:
                    raise RegistryError(404, 40407, f"Subject '{subject}' Version {target.version} was not deleted "
                                                    "first before being permanently deleted")
                await self.store.write(self._tombstones([target]))
            else:
                if target.deleted:
                    raise RegistryError(404, 40406, f"Subject '{subject}' Version {target.version} was soft deleted."
                                                    "Set permanent=true to delete permanently")
                self._check_unreferenced([target])
                await self.store.write([(r.encode_key(r.Key(r.SCHEMA, subject, target.version)),
                                         r.encode_schema(_deleted(target)))])
            return target.version

    async def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        async with self._write_lock:
            self._writable(subject)
            every = self.state.versions(subject, deleted=True)
            if not every:
                raise subject_not_found(subject)
            live = [v for v in every if not v.deleted]
            if permanent:
                if live:
                    raise RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being "
                                                    "permanently deleted")
                writes = self._tombstones(every)
                for kind, table in ((r.CONFIG, self.state.configs), (r.MODE, self.state.modes)):
                    if subject in table:
                        writes.append((r.encode_key(r.Key(kind, subject)), None))
                await self.store.write(writes)
                return [v.version for v in every]
            if not live:
                raise RegistryError(404, 40404, f"Subject '{subject}' was soft deleted."
                                                "Set permanent=true to delete permanently")
            self._check_unreferenced(live)
            await self.store.write([(r.encode_key(r.Key(r.SCHEMA, subject, v.version)), r.encode_schema(_deleted(v)))
                                    for v in live])
            return [v.version for v in live]

    # ------------------------------------------------------------------ configs and modes
    async def set_config(self, subject: str | None, body: object) -> str:
        if not isinstance(body, dict):
            raise bad_body("the body is not a JSON object")
        level = body.get("compatibility", body.get("compatibilityLevel"))
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise RegistryError(422, 42203, "Invalid compatibility level. Valid values are none, backward, forward, "
                                            "full, backward_transitive, forward_transitive, and full_transitive")
        if subject is not None:
            check_subject(subject)
        async with self._write_lock:
            await self.store.write([(r.encode_key(r.Key(r.CONFIG, subject)), r.encode_config(subject, level.upper()))])
        return level.upper()

    async def delete_config(self, subject: str | None) -> str:
        async with self._write_lock:
            previous = self.config(subject)
            if subject is None or subject in self.state.configs:
                await self.store.write([(r.encode_key(r.Key(r.CONFIG, subject)), None)])
            return previous

    async def set_mode(self, subject: str | None, body: object, *, force: bool = False) -> str:
        if not isinstance(body, dict):
            raise bad_body("the body is not a JSON object")
        mode = body.get("mode")
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RegistryError(422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, IMPORT and FORWARD.")
        mode = mode.upper()
        if subject is not None:
            check_subject(subject)
        async with self._write_lock:
            if mode == "IMPORT" and not force:
                holding = self.state.versions(subject) if subject is not None else self.subjects()
                if holding:
                    raise not_permitted("Cannot import since found existing subjects")
            await self.store.write([(r.encode_key(r.Key(r.MODE, subject)), r.encode_mode(subject, mode))])
        return mode

    async def delete_mode(self, subject: str) -> str:
        async with self._write_lock:
            previous = self.subject_mode(subject)
            await self.store.write([(r.encode_key(r.Key(r.MODE, subject)), None)])
            return previous


def _deleted(v: r.SchemaValue) -> r.SchemaValue:
    return r.SchemaValue(v.subject, v.version, v.id, v.schema, v.schema_type, v.references, True)
