"""The schema registry's rules in process: Confluent's record formats on `_schemas`, the state
rebuilt from them (ids, tombstones, the kept highest id), and the registry's operations over a
store in memory that applies each write as the topic's reader would (Avro schemas; the other
types' parsing is tests/test_schema_registry_types*)."""
from __future__ import annotations

import json

import anyio
import pytest

from kshim.schema_registry import records as r
from kshim.schema_registry.registry import Registry, RegistryError
from kshim.schema_registry.state import RegistryState

pytestmark = pytest.mark.unit


class MemoryStore:
    """The topic as a list: each write is applied at once, in order, as the reader applies it."""

    def __init__(self, log: list[tuple[bytes, bytes | None]] | None = None) -> None:
        self.log: list[tuple[bytes, bytes | None]] = []
        self.state = RegistryState()
        for key, value in log or []:
            self._append(key, value)

    def _append(self, key: bytes, value: bytes | None) -> None:
        self.state.apply(len(self.log), key, value)
        self.log.append((key, value))

    async def write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in records:
            self._append(key, value)


def record(name: str, *fields: tuple[str, str] | tuple[str, str, object]) -> dict:
    out = []
    for f in fields:
        entry: dict = {"name": f[0], "type": f[1]}
        if len(f) == 3:
            entry["default"] = f[2]
        out.append(entry)
    return {"schema": json.dumps({"type": "record", "name": name, "fields": out})}


V1 = record("User", ("name", "string"))
V2 = record("User", ("name", "string"), ("age", "int", 0))  # BACKWARD and FORWARD with V1
NO_DEFAULT = record("User", ("name", "string"), ("phone", "string"))  # not BACKWARD with V1
OTHER = record("Other", ("x", "long"))


def register(reg: Registry, subject: str, body: dict, **kw) -> int:
    return anyio.run(lambda: reg.register(subject, body, **kw))


def refused(coro_fn) -> RegistryError:
    with pytest.raises(RegistryError) as e:
        anyio.run(coro_fn)
    return e.value


# ---------------------------------------------------------------------- records
def test_keys_and_values_are_confluents_json():
    assert r.encode_key(r.Key(r.SCHEMA, "t-value", 3)) == b'{"keytype":"SCHEMA","subject":"t-value","version":3,"magic":1}'
    assert r.encode_key(r.Key(r.CONFIG)) == b'{"keytype":"CONFIG","magic":0}'
    assert r.encode_key(r.Key(r.MODE, "s")) == b'{"keytype":"MODE","subject":"s","magic":0}'
    assert r.encode_key(r.Key(r.NOOP)) == b'{"keytype":"NOOP","magic":0}'
    value = r.SchemaValue("s", 1, 7, '"int"', "AVRO", (r.Reference("a.proto", "a", 2),), False)
    assert json.loads(r.encode_schema(value)) == {
        "subject": "s", "version": 1, "id": 7, "schemaType": "AVRO",
        "references": [{"name": "a.proto", "subject": "a", "version": 2}], "schema": '"int"', "deleted": False}
    assert list(json.loads(r.encode_schema(value))) == ["subject", "version", "id", "schemaType", "references",
                                                        "schema", "deleted"]
    assert r.decode_schema(r.encode_schema(value)) == value
    assert r.encode_config(None, "FULL") == b'{"compatibilityLevel":"FULL"}'
    assert r.encode_mode("s", "READONLY") == b'{"subject":"s","mode":"READONLY"}'


def test_a_confluent_written_value_without_schema_type_is_avro():
    v = r.decode_schema(b'{"subject":"s","version":1,"id":1,"schema":"\\"int\\"","deleted":false}')
    assert (v.schema_type, v.references, v.deleted) == ("AVRO", (), False)


@pytest.mark.parametrize("key", [b"not json", b"[]", b'{"keytype":"WHAT"}', b'{"keytype":"SCHEMA","subject":"s"}',
                                 b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":0}'])
def test_unreadable_records_are_skipped(key):
    state = RegistryState()
    state.apply(0, key, b'{"subject":"s","version":1,"id":1,"schema":"x"}')
    assert state.subjects == {} and state.offset == 1


# ---------------------------------------------------------------------- state
def test_tombstones_remove_versions_and_the_kept_max_id_outlives_them():
    state = RegistryState()
    key = r.encode_key(r.Key(r.SCHEMA, "s", 1))
    state.apply(0, key, r.encode_schema(r.SchemaValue("s", 1, 9, '"int"')))
    assert state.max_id == 9 and state.by_id(9) is not None
    state.apply(1, r.encode_key(r.Key(r.NOOP)), r.encode_max_id(9))
    state.apply(2, key, None)
    assert state.subjects == {} and state.by_id(9) is None and state.ids == {}
    # compaction removed the schema's record and its tombstone: the NOOP record keeps the id's count
    rebuilt = RegistryState()
    rebuilt.apply(1, r.encode_key(r.Key(r.NOOP)), r.encode_max_id(9))
    assert rebuilt.max_id == 9


# ---------------------------------------------------------------------- registry
def test_the_same_schema_gets_the_same_id_in_any_subject_and_ids_grow():
    reg = Registry(MemoryStore())
    a = register(reg, "a", V1)
    assert register(reg, "a", V1) == a  # again: no new version
    assert reg.versions("a") == [1]
    assert register(reg, "b", V1) == a
    assert register(reg, "a", V2) == a + 1
    assert reg.versions("a") == [1, 2]
    assert [v.subject for v in reg.id_versions(a)] == ["a", "b"]


def test_state_rebuilt_from_the_log_gives_the_same_answers():
    store = MemoryStore()
    reg = Registry(store)
    ids = [register(reg, "a", V1), register(reg, "a", V2), register(reg, "c", OTHER)]
    anyio.run(lambda: reg.delete_subject("c"))
    anyio.run(lambda: reg.delete_subject("c", permanent=True))
    again = Registry(MemoryStore(store.log))
    assert again.subjects() == ["a"]
    assert [again.version("a", str(n)).id for n in (1, 2)] == ids[:2]
    assert register(again, "d", record("New", ("z", "int"))) == ids[2] + 1  # the deleted id is not given again


def test_backward_refuses_a_field_without_default_and_none_allows_it():
    reg = Registry(MemoryStore())
    register(reg, "s", V1)
    e = refused(lambda: reg.register("s", NO_DEFAULT))
    assert (e.status, e.code) == (409, 409) and "phone" in e.message
    anyio.run(lambda: reg.set_config("s", {"compatibility": "none"}))
    assert reg.config("s") == "NONE" and reg.config(None) == "BACKWARD"
    assert register(reg, "s", NO_DEFAULT) > 0


def test_transitive_levels_check_every_version_the_others_only_the_latest():
    reg = Registry(MemoryStore())
    anyio.run(lambda: reg.set_config("s", {"compatibility": "NONE"}))
    register(reg, "s", record("U", ("a", "int")))
    register(reg, "s", record("U", ("a", "int"), ("b", "int", 1)))
    # b without its default: reads v2's data (which has b), not v1's (which lacks it)
    third = record("U", ("a", "int"), ("b", "int"))
    anyio.run(lambda: reg.set_config("s", {"compatibility": "BACKWARD"}))
    assert anyio.run(lambda: reg.test_compatibility("s", None, third)) == []
    anyio.run(lambda: reg.set_config("s", {"compatibility": "BACKWARD_TRANSITIVE"}))
    assert anyio.run(lambda: reg.test_compatibility("s", None, third)) != []
    assert refused(lambda: reg.register("s", third)).code == 409


def test_deletes_soft_before_permanent():
    reg = Registry(MemoryStore())
    register(reg, "s", V1)
    register(reg, "s", V2)
    assert refused(lambda: reg.delete_subject("s", permanent=True)).code == 40405
    assert refused(lambda: reg.delete_version("s", "1", permanent=True)).code == 40407
    assert anyio.run(lambda: reg.delete_version("s", "1")) == 1
    assert refused(lambda: reg.delete_version("s", "1")).code == 40406
    assert reg.versions("s") == [2] and reg.versions("s", deleted=True) == [1, 2]
    with pytest.raises(RegistryError) as e:
        reg.version("s", "1")
    assert e.value.code == 40402
    assert anyio.run(lambda: reg.delete_subject("s")) == [2]
    assert refused(lambda: reg.delete_subject("s")).code == 40404
    assert reg.subjects() == [] and reg.subjects(deleted=True) == ["s"]
    assert anyio.run(lambda: reg.delete_subject("s", permanent=True)) == [1, 2]
    assert refused(lambda: reg.delete_subject("s")).code == 40401
    assert register(reg, "s", V1) == 3  # versions start again; ids do not


def test_modes():
    reg = Registry(MemoryStore())
    anyio.run(lambda: reg.set_mode(None, {"mode": "READONLY"}))
    assert refused(lambda: reg.register("s", V1)).code == 42205
    assert refused(lambda: reg.set_mode(None, {"mode": "nap"})).code == 42204
    anyio.run(lambda: reg.set_mode(None, {"mode": "IMPORT"}))
    assert refused(lambda: reg.register("s", V1)).code == 42205  # IMPORT wants the id
    assert register(reg, "s", {**V1, "id": 40, "version": 3}) == 40
    assert register(reg, "s", {**V1, "id": 40, "version": 3}) == 40  # the same import again
    assert refused(lambda: reg.register("t", {**V2, "id": 40})).code == 42207
    anyio.run(lambda: reg.set_mode(None, {"mode": "READWRITE"}))
    assert refused(lambda: reg.register("s", {**V2, "id": 41})).code == 42205
    assert register(reg, "s", V2) == 41
    assert reg.versions("s") == [3, 4]
    assert refused(lambda: reg.set_mode(None, {"mode": "IMPORT"})).code == 42205  # subjects exist
    anyio.run(lambda: reg.set_mode(None, {"mode": "IMPORT"}, force=True))


@pytest.mark.parametrize("body,code", [
    ("not an object", 422), ({}, 42201), ({"schema": ""}, 42201), ({"schema": "{"}, 42201),
    ({"schema": '"int"', "schemaType": "XML"}, 42201), ({"schema": '"int"', "references": "no"}, 422),
    ({"schema": '"int"', "references": [{"name": "x"}]}, 422),
    ({"schema": '"int"', "references": [{"name": "x", "subject": "gone", "version": 1}]}, 42201),
])
def test_bad_registrations_get_their_error_code(body, code):
    reg = Registry(MemoryStore())
    assert refused(lambda: reg.register("s", body)).code == code
    assert reg.subjects() == []


@pytest.mark.parametrize("text", ["0", "-2", "x", "2147483648", ""])
def test_bad_versions_are_42202(text):
    reg = Registry(MemoryStore())
    register(reg, "s", V1)
    with pytest.raises(RegistryError) as e:
        reg.version("s", text)
    assert e.value.code == 42202


def test_references_resolve_from_subject_versions():
    reg = Registry(MemoryStore())
    register(reg, "address", {"schema": json.dumps({"type": "record", "name": "Address", "namespace": "x",
                                                    "fields": [{"name": "city", "type": "string"}]})})
    body = {"schema": json.dumps({"type": "record", "name": "Person", "namespace": "x",
                                  "fields": [{"name": "home", "type": "x.Address"}]}),
            "references": [{"name": "x.Address", "subject": "address", "version": 1}]}
    person = register(reg, "person", body)
    assert reg.version("person", "latest").references == (r.Reference("x.Address", "address", 1),)
    assert reg.referenced_by("address", "1") == [person]
    assert refused(lambda: reg.delete_subject("address")).code == 42206  # still referenced


def test_an_imported_copy_of_a_schema_answers_for_it_once_the_first_id_is_gone():
    reg = Registry(MemoryStore())
    anyio.run(lambda: reg.set_mode(None, {"mode": "IMPORT"}))
    register(reg, "a", {**V1, "id": 10})
    register(reg, "b", {**V1, "id": 20})  # the same schema under another id, as copied from elsewhere
    anyio.run(lambda: reg.set_mode(None, {"mode": "READWRITE"}))
    assert register(reg, "c", V1) == 10
    for subject in ("a", "c"):  # every holder of id 10
        anyio.run(lambda: reg.delete_subject(subject))
        anyio.run(lambda: reg.delete_subject(subject, permanent=True))
    assert register(reg, "d", V1) == 20
