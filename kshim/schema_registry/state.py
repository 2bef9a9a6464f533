"""The registry's state in memory, rebuilt by applying the records of `_schemas` in offset order
(Confluent's lookup cache): subjects and their versions, the schema of each id, configs and modes,
the highest id ever given. Applying is all that changes it; the registry decides what to write.

A schema's identity (for "the same schema gets the same id") is its type, its canonical text and
its references. Soft-deleted versions stay (flagged); a tombstone removes a version, and an id
no version holds any longer is forgotten, but `max_id` keeps counting past it."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kshim.schema_registry import records as r

log = logging.getLogger("kshim.schema_registry")

Identity = tuple[str, str, tuple[r.Reference, ...]]  # (schema type, canonical text, references)


def identity(v: r.SchemaValue) -> Identity:
    return (v.schema_type, v.schema, v.references)


@dataclass
class RegistryState:
    subjects: dict[str, dict[int, r.SchemaValue]] = field(default_factory=dict)  # subject -> version -> value
    configs: dict[str | None, str] = field(default_factory=dict)  # None: the global compatibility level
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0
    holders: dict[int, set[tuple[str, int]]] = field(default_factory=dict)  # id -> (subject, version)s
    ids: dict[Identity, int] = field(default_factory=dict)
    offset: int = 0  # the next offset of `_schemas` to apply

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply the record at `offset`; one this registry cannot read is logged and skipped."""
        self.offset = max(self.offset, offset + 1)
        if key is None:
            return
        try:
            self._apply(r.decode_key(key), value)
        except r.BadRecord as e:
            log.warning("_schemas offset %d skipped: %s", offset, e)

    def _apply(self, key: r.Key, value: bytes | None) -> None:
        if key.keytype == r.SCHEMA:
            assert key.subject is not None and key.version is not None
            self._remove(key.subject, key.version)
            if value is not None:
                v = r.decode_schema(value)
                if (v.subject, v.version) != (key.subject, key.version):
                    raise r.BadRecord(f"value of {v.subject} v{v.version} under key {key.subject} v{key.version}")
                self.subjects.setdefault(v.subject, {})[v.version] = v
                self.holders.setdefault(v.id, set()).add((v.subject, v.version))
                self.ids.setdefault(identity(v), v.id)
                self.max_id = max(self.max_id, v.id)
        elif key.keytype in (r.CONFIG, r.MODE):
            table = self.configs if key.keytype == r.CONFIG else self.modes
            level = None if value is None else r.decode_field(value, "compatibilityLevel" if key.keytype == r.CONFIG
                                                              else "mode")
            if level is None:
                table.pop(key.subject, None)
            else:
                table[key.subject] = level
        elif key.keytype == r.NOOP and value is not None:
            self.max_id = max(self.max_id, r.decode_max_id(value) or 0)
        # DELETE_SUBJECT and CLEAR_SUBJECT: the SCHEMA records written with them say what changed

    def _remove(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        old = versions.pop(version, None) if versions is not None else None
        if old is None:
            return
        if not versions:
            del self.subjects[subject]
        holders = self.holders.get(old.id, set())
        holders.discard((subject, version))
        if not holders:
            self.holders.pop(old.id, None)
        if not holders and self.ids.get(identity(old)) == old.id:
            del self.ids[identity(old)]
            # another id may hold the same schema (imported under its own id): it answers for it now
            same = identity(old)
            for other in (v for vs in self.subjects.values() for v in vs.values()):
                if identity(other) == same:
                    self.ids[same] = other.id
                    break

    # ------------------------------------------------------------------ questions
    def versions(self, subject: str, *, deleted: bool = False) -> list[r.SchemaValue]:
        """The subject's versions, oldest first; soft-deleted ones only with `deleted`."""
        vs = self.subjects.get(subject, {})
        return [vs[n] for n in sorted(vs) if deleted or not vs[n].deleted]

    def by_id(self, schema_id: int) -> r.SchemaValue | None:
        """One version holding the id (its schema, type and references are the id's)."""
        for subject, version in sorted(self.holders.get(schema_id, ())):
            return self.subjects[subject][version]
        return None

    def holders_of(self, schema_id: int, *, deleted: bool = False) -> list[r.SchemaValue]:
        out = [self.subjects[s][v] for s, v in sorted(self.holders.get(schema_id, ()))]
        return [v for v in out if deleted or not v.deleted]

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the live versions whose references name subject/version."""
        ids = {v.id for vs in self.subjects.values() for v in vs.values() if not v.deleted
               and any(ref.subject == subject and ref.version == version for ref in v.references)}
        return sorted(ids)
