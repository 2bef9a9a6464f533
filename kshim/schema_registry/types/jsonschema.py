"""JSON schemas (JSON Schema documents), validated by `jsonschema`, compared by Confluent's rules.

Checked: the text is JSON, an object or a boolean, and a valid schema for its draft
(`Draft*Validator.check_schema`, the draft named by `$schema`, draft-07 by default); every `$ref`
resolves, through `referencing`, against the document itself, the references by their names (and
their own `$id`s), and the drafts' meta-schemas. No remote fetching.

canonical(): compact json.dumps of the parsed document, keys in their order (Confluent stores
Jackson's compact rendering); normalize=True sorts the keys.

Compatibility: Confluent's JSON SchemaDiff (strict policy), pairwise, original = previous
(writer), update = self (reader), on the keywords most schemas use: type (TYPE_CHANGED, number to
integer TYPE_NARROWED, a type becoming a union SUM_TYPE_EXTENDED), properties against the content
model (open: additionalProperties absent or true; closed: false; partially open: a schema or
patternProperties), required, additionalProperties, dependencies (arrays and schemas),
min/maxProperties, items (one schema or a tuple, additionalItems), min/maxItems, uniqueItems, enum
and const, string min/maxLength and pattern, number bounds and multipleOf, allOf/anyOf/oneOf
(criterion and subschemas matched one to one), not, $ref (compared through). Difference names are
Confluent's. A schema object mixing a type with enum, const, not or combiners is their allOf, as
everit reads it. Not done: unevaluated*, contains, propertyNames, if/then/else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urljoin

import jsonschema
import jsonschema.exceptions
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as SPECIFICATIONS

from kshim.schema_registry.types.base import InvalidSchema, Schema

if TYPE_CHECKING:
    from referencing._core import Resolver

# Confluent's SchemaDiff.COMPATIBLE_CHANGES_STRICT: every other difference is incompatible
COMPATIBLE = frozenset("""
ID_CHANGED DESCRIPTION_CHANGED TITLE_CHANGED DEFAULT_CHANGED SCHEMA_REMOVED TYPE_EXTENDED
MAX_LENGTH_INCREASED MAX_LENGTH_REMOVED MIN_LENGTH_DECREASED MIN_LENGTH_REMOVED PATTERN_REMOVED
MAXIMUM_INCREASED MAXIMUM_REMOVED MINIMUM_DECREASED MINIMUM_REMOVED EXCLUSIVE_MAXIMUM_INCREASED
EXCLUSIVE_MAXIMUM_REMOVED EXCLUSIVE_MINIMUM_DECREASED EXCLUSIVE_MINIMUM_REMOVED MULTIPLE_OF_REDUCED
MULTIPLE_OF_REMOVED REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED
DEPENDENCY_ARRAY_NARROWED DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED MAX_PROPERTIES_INCREASED
MAX_PROPERTIES_REMOVED MIN_PROPERTIES_DECREASED MIN_PROPERTIES_REMOVED ADDITIONAL_PROPERTIES_ADDED
ADDITIONAL_PROPERTIES_EXTENDED UNEVALUATED_PROPERTIES_ADDED UNEVALUATED_PROPERTIES_EXTENDED
PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL MAX_ITEMS_INCREASED MAX_ITEMS_REMOVED
MIN_ITEMS_DECREASED MIN_ITEMS_REMOVED MAX_CONTAINS_INCREASED MAX_CONTAINS_REMOVED MIN_CONTAINS_DECREASED
MIN_CONTAINS_REMOVED UNIQUE_ITEMS_REMOVED ADDITIONAL_ITEMS_ADDED ADDITIONAL_ITEMS_EXTENDED
UNEVALUATED_ITEMS_ADDED UNEVALUATED_ITEMS_EXTENDED ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
ITEM_ADDED_TO_CLOSED_CONTENT_MODEL ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL ENUM_ARRAY_EXTENDED COMBINED_TYPE_EXTENDED
PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED NOT_TYPE_NARROWED
""".split())

_OBJECT_KW = {"properties", "required", "additionalProperties", "patternProperties", "minProperties",
              "maxProperties", "dependencies", "dependentRequired", "dependentSchemas", "propertyNames"}
_ARRAY_KW = {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"}
_STRING_KW = {"minLength", "maxLength", "pattern", "format"}
_NUMBER_KW = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
_COMBINERS = ("allOf", "anyOf", "oneOf")


def _load(text: str, what: str) -> Any:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidSchema(f"Invalid {what}: not JSON: {e}") from e
    if not isinstance(obj, (dict, bool)):
        raise InvalidSchema(f"Invalid {what}: a JSON schema is an object or a boolean, not {type(obj).__name__}")
    try:
        validator = jsonschema.validators.validator_for(obj, default=jsonschema.Draft7Validator)
        validator.check_schema(cast(Any, obj))  # booleans are schemas too
    except jsonschema.exceptions.SchemaError as e:
        raise InvalidSchema(f"Invalid {what}: {e.message} at {'/'.join(map(str, e.absolute_path)) or '#'}") from e
    except RecursionError as e:
        raise InvalidSchema(f"Invalid {what}: nested too deeply") from e
    return obj


def _resource(obj: Any) -> referencing.Resource[Any]:
    return referencing.Resource.from_contents(obj, default_specification=referencing.jsonschema.DRAFT7)


def _refs(obj: Any) -> list[str]:
    found: list[str] = []
    stack = [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
            stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default", "examples"))
        elif isinstance(node, list):
            stack.extend(node)
    return found


class JsonSchema:
    schema_type = "JSON"

    def __init__(self, document: Any, resolver: Resolver[Any], normalize: bool) -> None:
        self.document = document
        self.resolver = resolver
        self._canonical = json.dumps(document, separators=(",", ":"), sort_keys=normalize, ensure_ascii=False)

    def canonical(self) -> str:
        return self._canonical

    def formatted(self, fmt: str | None) -> str:
        return self._canonical  # Confluent has no other JSON format

    def compatibility_errors(self, previous: Schema) -> list[str]:
        if not isinstance(previous, JsonSchema):
            return ["Incompatible because of different schema type"]
        ctx = _Context()
        try:
            ctx.compare(_Node(previous.document, previous.resolver), _Node(self.document, self.resolver), [])
        except RecursionError:
            return ['{errorType:"TYPE_CHANGED", description:"the schemas nest too deeply to compare"}']
        errors = []
        for kind, path in ctx.differences:
            if kind not in COMPATIBLE:
                text = f"{{errorType:\"{kind}\", description:\"{kind.replace('_', ' ').capitalize()} at path '{path}'\"}}"
                if text not in errors:
                    errors.append(text)
        return errors


def parse_json(text: str, references: Mapping[str, str], *, normalize: bool) -> JsonSchema:
    document = _load(text, "schema")
    resources = [(name, _resource(_load(ref, f"reference {name!r}"))) for name, ref in references.items()]
    try:
        root = _resource(document)
        base = root.id() or ""
        # a reference answers to its name, to that name relative to the schema's $id (a relative
        # $ref in a schema with an $id resolves there), and to its own $id (crawl)
        named = [(uri, resource) for name, resource in resources for uri in {name, urljoin(base, name)}]
        registry: referencing.Registry[Any] = SPECIFICATIONS.with_resources(named)
        registry = registry.with_resource(base, root).crawl()
        resolver = registry.resolver(base_uri=base)
        for ref in _refs(document):  # Confluent's parser fails on a $ref it cannot resolve
            resolver.lookup(ref)
    except referencing.exceptions.Unresolvable as e:
        raise InvalidSchema(f"Invalid schema: cannot resolve $ref {e}") from e
    except (referencing.exceptions.Unretrievable, ValueError, TypeError, AttributeError) as e:
        raise InvalidSchema(f"Invalid schema: {e}") from e
    return JsonSchema(document, resolver, normalize)


# --- compatibility ------------------------------------------------------------------------------


@dataclass
class _Node:
    """A schema with the resolver its $refs resolve against."""

    schema: Any
    resolver: Resolver[Any]

    def deref(self) -> _Node:
        node = self
        for _ in range(64):  # a chain of $refs, not a cycle
            if not (isinstance(node.schema, dict) and isinstance(node.schema.get("$ref"), str)):
                return node
            try:
                resolved = node.resolver.lookup(node.schema["$ref"])
            except referencing.exceptions.Unresolvable:
                return _Node(True, node.resolver)
            node = _Node(resolved.contents, resolved.resolver)
        return _Node(True, node.resolver)

    def sub(self, schema: Any) -> _Node:
        return _Node(schema, self.resolver)

    def get(self, key: str, default: Any = None) -> Any:
        return self.schema.get(key, default) if isinstance(self.schema, dict) else default

    def kind(self) -> str:
        s = self.schema
        if s is False:
            return "false"
        if not isinstance(s, dict):
            return "empty"
        if len(_parts(s)) > 1 or any(c in s for c in _COMBINERS) or (
                isinstance(s.get("type"), list) and len(s["type"]) != 1):
            return "combined"
        for key in ("enum", "const", "not"):
            if key in s:
                return key
        t = s.get("type")
        t = t[0] if isinstance(t, list) else t
        if isinstance(t, str):
            return "number" if t == "integer" else t
        keys = set(s)
        for kind, kws in (("object", _OBJECT_KW), ("array", _ARRAY_KW), ("string", _STRING_KW), ("number", _NUMBER_KW)):
            if keys & kws:
                return kind
        return "empty"

    def combined(self) -> tuple[str, list[_Node]]:
        """(criterion, subschemas); a type list is anyOf the single types, as everit reads it."""
        s = self.schema
        parts = _parts(s)
        if len(parts) > 1:
            return "allOf", [self.sub(p) for p in parts]
        if isinstance(s.get("type"), list) and len(s["type"]) != 1 and not any(c in s for c in _COMBINERS):
            return "anyOf", [self.sub({**s, "type": t}) for t in s["type"]]
        present = [c for c in _COMBINERS if c in s]
        if len(present) == 1:
            return present[0], [self.sub(x) for x in s[present[0]]]
        return "allOf", [self.sub({c: s[c]}) for c in present]


_SEPARATE = ("enum", "const", "not", *_COMBINERS)


def _parts(s: dict[str, Any]) -> list[Any]:
    """The schemas everit (Confluent's validator) makes of one object: the typed one, then one for
    each of enum, const, not and every combiner; more than one is their allOf."""
    rest = {k: v for k, v in s.items() if k not in _SEPARATE}
    typed = "type" in rest or bool(set(rest) & (_OBJECT_KW | _ARRAY_KW | _STRING_KW | _NUMBER_KW))
    return ([rest] if typed else []) + [{k: s[k]} for k in _SEPARATE if k in s]


def _is_open(n: _Node, pattern_key: str | None) -> bool:
    extra = n.get("additionalProperties" if pattern_key else "additionalItems", True)
    if extra is not True and extra != {}:
        return False
    return not (pattern_key and n.get(pattern_key))


def _partial(n: _Node, prop: str | None) -> _Node | None:
    """The schema a partially open content model gives an undeclared property."""
    if prop is not None:
        for pattern, schema in (n.get("patternProperties") or {}).items():
            try:
                if re.search(pattern, prop):
                    return n.sub(schema)
            except re.error:
                continue
    extra = n.get("additionalProperties" if prop is not None else "additionalItems", True)
    return n.sub(extra) if isinstance(extra, dict) and extra else None


def _number_change(ctx: _Context, key: str, prefix: str, o: Any, u: Any, path: list[str]) -> None:
    if o == u:
        return
    if o is None or isinstance(o, bool):
        ctx.add(f"{prefix}_ADDED", path + [key])
    elif u is None or isinstance(u, bool):
        ctx.add(f"{prefix}_REMOVED", path + [key])
    elif o < u:
        ctx.add(f"{prefix}_INCREASED", path + [key])
    elif o > u:
        ctx.add(f"{prefix}_DECREASED", path + [key])


@dataclass
class _Context:
    differences: list[tuple[str, str]] = field(default_factory=list)
    on_stack: set[tuple[int, int]] = field(default_factory=set)

    def add(self, kind: str, path: list[str]) -> None:
        self.differences.append((kind, "#/" + "/".join(path)))

    def sub(self) -> _Context:
        return _Context([], self.on_stack)

    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.differences)

    def trial(self, o: _Node, u: _Node, path: list[str]) -> _Context:
        sub = self.sub()
        sub.compare(o, u, path)
        return sub

    def compare(self, original: _Node | None, update: _Node | None, path: list[str]) -> None:
        if original is None or update is None:
            if original is not None or update is not None:
                self.add("SCHEMA_ADDED" if original is None else "SCHEMA_REMOVED", path)
            return
        o, u = original.deref(), update.deref()
        key = (id(o.schema), id(u.schema))
        if key in self.on_stack:  # a recursive pair already being compared: assume compatible
            return
        self.on_stack.add(key)
        try:
            self._compare_types(o, u, path)
        finally:
            self.on_stack.discard(key)

    def _one_compatible(self, trials: Iterator[_Context], several: bool, widened: str, path: list[str]) -> bool:
        """Take the first compatible trial's differences (and `widened` when it was one of
        `several`); the trials after it are not run. False if none is compatible."""
        for trial in trials:
            if trial.compatible():
                self.differences.extend(trial.differences)
                if several:
                    self.add(widened, path)
                return True
        return False

    def _compare_types(self, o: _Node, u: _Node, path: list[str]) -> None:
        ok, uk = o.kind(), u.kind()
        if ok != "combined" and uk == "combined":
            criterion, subs = u.combined()
            if (len(subs) == 1 or criterion in ("anyOf", "oneOf")) and self._one_compatible(
                    (self.trial(o, s, path) for s in subs), len(subs) > 1, "SUM_TYPE_EXTENDED", path):
                return
        elif ok == "combined" and uk != "combined":
            criterion, subs = o.combined()
            if (len(subs) == 1 or criterion == "allOf") and self._one_compatible(
                    (self.trial(s, u, path) for s in subs), len(subs) > 1, "PRODUCT_TYPE_NARROWED", path):
                return
        if ok != uk:
            if ok == "false" or uk == "empty":
                return
            self.add("TYPE_CHANGED", path)
            return
        for key, kind in (("$id", "ID"), ("title", "TITLE"), ("description", "DESCRIPTION"), ("default", "DEFAULT")):
            if o.get(key) != u.get(key):
                self.add(f"{kind}_CHANGED", path)
        compare: Callable[[_Node, _Node, list[str]], None] | None = getattr(self, f"_{ok}", None)
        if compare is not None:
            compare(o, u, path)

    def _string(self, o: _Node, u: _Node, path: list[str]) -> None:
        _number_change(self, "maxLength", "MAX_LENGTH", o.get("maxLength"), u.get("maxLength"), path)
        _number_change(self, "minLength", "MIN_LENGTH", o.get("minLength"), u.get("minLength"), path)
        op, up = o.get("pattern"), u.get("pattern")
        if op != up:
            kind = "PATTERN_ADDED" if op is None else "PATTERN_REMOVED" if up is None else "PATTERN_CHANGED"
            self.add(kind, path + ["pattern"])

    def _number(self, o: _Node, u: _Node, path: list[str]) -> None:
        for key, prefix in (("maximum", "MAXIMUM"), ("minimum", "MINIMUM"),
                            ("exclusiveMaximum", "EXCLUSIVE_MAXIMUM"), ("exclusiveMinimum", "EXCLUSIVE_MINIMUM")):
            _number_change(self, key, prefix, o.get(key), u.get(key), path)
        om, um = o.get("multipleOf"), u.get("multipleOf")
        if om != um:
            if om is None or um is None:
                self.add("MULTIPLE_OF_ADDED" if om is None else "MULTIPLE_OF_REMOVED", path + ["multipleOf"])
            elif om and Decimal(str(um)) % Decimal(str(om)) == 0:
                self.add("MULTIPLE_OF_EXPANDED", path + ["multipleOf"])
            elif um and Decimal(str(om)) % Decimal(str(um)) == 0:
                self.add("MULTIPLE_OF_REDUCED", path + ["multipleOf"])
            else:
                self.add("MULTIPLE_OF_CHANGED", path + ["multipleOf"])
        oint, uint = o.get("type") == "integer", u.get("type") == "integer"
        if oint != uint:
            self.add("TYPE_EXTENDED" if oint else "TYPE_NARROWED", path)

    def _enum(self, o: _Node, u: _Node, path: list[str]) -> None:
        ov, uv = o.get("enum") or [], u.get("enum") or []
        if ov != uv:
            if all(v in uv for v in ov):
                self.add("ENUM_ARRAY_EXTENDED", path + ["enum"])
            elif all(v in ov for v in uv):
                self.add("ENUM_ARRAY_NARROWED", path + ["enum"])
            else:
                self.add("ENUM_ARRAY_CHANGED", path + ["enum"])

    def _const(self, o: _Node, u: _Node, path: list[str]) -> None:
        if o.get("const") != u.get("const"):
            self.add("ENUM_ARRAY_CHANGED", path + ["const"])

    def _not(self, o: _Node, u: _Node, path: list[str]) -> None:
        trial = self.trial(u.sub(u.get("not")), o.sub(o.get("not")), path + ["not"])
        self.add("NOT_TYPE_NARROWED" if trial.compatible() else "NOT_TYPE_EXTENDED", path + ["not"])

    def _combined(self, o: _Node, u: _Node, path: list[str]) -> None:
        (oc, osubs), (uc, usubs) = o.combined(), u.combined()
        if oc != uc:
            extended = (uc == "anyOf" or (len(osubs) == 1 and len(usubs) == 1)
                        or (len(osubs) == 1 and uc == "oneOf") or (len(usubs) == 1 and oc == "allOf"))
            self.add("COMBINED_TYPE_EXTENDED" if extended else "COMBINED_TYPE_CHANGED", path)
            if not extended:
                return
        if len(osubs) < len(usubs):
            self.add("PRODUCT_TYPE_EXTENDED" if uc == "allOf" else "SUM_TYPE_EXTENDED", path)
        elif len(osubs) > len(usubs):
            self.add("SUM_TYPE_NARROWED" if oc in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED", path)
        # which original subschema each update subschema can stand for: then a maximum matching
        edges: dict[int, dict[int, list[tuple[str, str]]]] = {}
        for i, os_ in enumerate(osubs):
            for j, us in enumerate(usubs):
                trial = self.trial(os_, us, path + [f"{oc}/{i}"])
                if trial.compatible():
                    edges.setdefault(i, {})[j] = trial.differences
        match: dict[int, int] = {}  # update index -> original index

        def augment(i: int, seen: set[int]) -> bool:
            for j in edges.get(i, {}):
                if j not in seen:
                    seen.add(j)
                    if j not in match or augment(match[j], seen):
                        match[j] = i
                        return True
            return False

        for i in range(len(osubs)):
            augment(i, set())
        for j, i in match.items():
            self.differences.extend(edges[i][j])
        if len(match) < min(len(osubs), len(usubs)):
            self.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED", path)

    def _object(self, o: _Node, u: _Node, path: list[str]) -> None:
        oprops: dict[str, Any] = o.get("properties") or {}
        uprops: dict[str, Any] = u.get("properties") or {}
        oreq, ureq = set(o.get("required") or []), set(u.get("required") or [])
        for name in oprops:
            if name in uprops and (name in oreq) != (name in ureq):
                if name in oreq:
                    self.add("REQUIRED_ATTRIBUTE_REMOVED", path + ["required", name])
                elif isinstance(uprops[name], dict) and "default" in uprops[name]:
                    self.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", path + ["required", name])
                else:
                    self.add("REQUIRED_ATTRIBUTE_ADDED", path + ["required", name])
        for name in sorted(oprops.keys() | uprops.keys()):
            where = path + ["properties", name]
            if name not in uprops:
                self._property_removed(u, o.sub(oprops[name]), name, where)
            elif name not in oprops:
                self._property_added(o, u.sub(uprops[name]), name in ureq, name, where)
            else:
                self.compare(o.sub(oprops[name]), u.sub(uprops[name]), where)
        self._dependencies(o, u, path + ["dependencies"])
        oa, ua = o.get("additionalProperties", True), u.get("additionalProperties", True)
        self._extra_change(o, u, oa, ua, path + ["additionalProperties"], "ADDITIONAL_PROPERTIES")
        _number_change(self, "maxProperties", "MAX_PROPERTIES", o.get("maxProperties"), u.get("maxProperties"), path)
        _number_change(self, "minProperties", "MIN_PROPERTIES", o.get("minProperties"), u.get("minProperties"), path)

    def _extra_change(self, o: _Node, u: _Node, old: Any, new: Any, where: list[str], rule: str) -> None:
        """additionalProperties or additionalItems (`rule`): opened or closed (false), a schema
        where there was none (NARROWED) or none where there was one (EXTENDED), or both compared."""
        if (old is not False) != (new is not False):
            self.add(f"{rule}_ADDED" if new is not False else f"{rule}_REMOVED", where)
        elif isinstance(old, dict) != isinstance(new, dict):
            self.add(f"{rule}_NARROWED" if isinstance(new, dict) else f"{rule}_EXTENDED", where)
        elif isinstance(old, dict) and isinstance(new, dict):
            self.compare(o.sub(old), u.sub(new), where)

    def _dependencies(self, o: _Node, u: _Node, path: list[str]) -> None:
        """dependencies (draft-07) or dependentRequired/dependentSchemas (2019-09 on)."""
        def split(n: _Node) -> tuple[dict[str, list[Any]], dict[str, Any]]:
            both = {**(n.get("dependencies") or {}), **(n.get("dependentRequired") or {}),
                    **(n.get("dependentSchemas") or {})}
            arrays = {k: v for k, v in both.items() if isinstance(v, list)}
            return arrays, {k: v for k, v in both.items() if not isinstance(v, list)}

        (oarr, osch), (uarr, usch) = split(o), split(u)
        for key in sorted(oarr.keys() | uarr.keys()):
            if key not in uarr:
                self.add("DEPENDENCY_ARRAY_REMOVED", path + [key])
            elif key not in oarr:
                self.add("DEPENDENCY_ARRAY_ADDED", path + [key])
            elif set(oarr[key]) != set(uarr[key]):
                kind = ("EXTENDED" if set(uarr[key]) >= set(oarr[key]) else
                        "NARROWED" if set(uarr[key]) <= set(oarr[key]) else "CHANGED")
                self.add(f"DEPENDENCY_ARRAY_{kind}", path + [key])
        for key in sorted(osch.keys() | usch.keys()):
            if key not in usch:
                self.add("DEPENDENCY_SCHEMA_REMOVED", path + [key])
            elif key not in osch:
                self.add("DEPENDENCY_SCHEMA_ADDED", path + [key])
            else:
                self.compare(o.sub(osch[key]), u.sub(usch[key]), path + [key])

    def _property_removed(self, u: _Node, old: _Node, name: str, where: list[str]) -> None:
        if _is_open(u, "patternProperties"):
            self.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", where)
            return
        partial = _partial(u, name)
        if partial is not None:
            self._partially_open(old, partial, where, "REMOVED")
        elif old.schema is False:
            self.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", where)
        else:
            self.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", where)

    def _partially_open(self, before: _Node, after: _Node, where: list[str], change: str) -> None:
        """A property ADDED or REMOVED where patternProperties match its name: the change is
        compared against the matching pattern's schema, and said covered or not."""
        trial = self.trial(before, after, where)
        self.differences.extend(trial.differences)
        covered = "IS" if trial.compatible() else "NOT"
        self.add(f"PROPERTY_{change}_{covered}_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", where)

    def _property_added(self, o: _Node, new: _Node, required: bool, name: str, where: list[str]) -> None:
        has_default = isinstance(new.schema, dict) and "default" in new.schema
        if _is_open(o, "patternProperties"):
            if new.deref().kind() == "empty":
                self.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", where)
            elif required:
                kind = "REQUIRED_PROPERTY_WITH_DEFAULT" if has_default else "REQUIRED_PROPERTY"
                self.add(f"{kind}_ADDED_TO_OPEN_CONTENT_MODEL", where)
            else:
                self.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", where)
            return
        partial = _partial(o, name)
        if partial is not None:
            self._partially_open(partial, new, where, "ADDED")
        if required:
            kind = "REQUIRED_PROPERTY_WITH_DEFAULT" if has_default else "REQUIRED_PROPERTY"
            self.add(f"{kind}_ADDED_TO_UNOPEN_CONTENT_MODEL", where)
        else:
            self.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", where)

    def _array(self, o: _Node, u: _Node, path: list[str]) -> None:
        (oall, otuple, oextra), (uall, utuple, uextra) = _items(o), _items(u)
        self.compare(o.sub(oall) if oall is not None else None, u.sub(uall) if uall is not None else None,
                     path + ["items"])
        for i in range(max(len(otuple), len(utuple))):
            where = path + [f"items/{i}"]
            if i < len(otuple) and i < len(utuple):
                self.compare(o.sub(otuple[i]), u.sub(utuple[i]), where)
            elif i < len(otuple):
                self._item_change(u, uextra, o.sub(otuple[i]), "REMOVED", where)
            else:
                self._item_change(o, oextra, u.sub(utuple[i]), "ADDED", where)
        self._extra_change(o, u, oextra, uextra, path + ["additionalItems"], "ADDITIONAL_ITEMS")
        _number_change(self, "maxItems", "MAX_ITEMS", o.get("maxItems"), u.get("maxItems"), path)
        _number_change(self, "minItems", "MIN_ITEMS", o.get("minItems"), u.get("minItems"), path)
        ou, uu = bool(o.get("uniqueItems")), bool(u.get("uniqueItems"))
        if ou != uu:
            self.add("UNIQUE_ITEMS_REMOVED" if ou else "UNIQUE_ITEMS_ADDED", path + ["uniqueItems"])

    def _item_change(self, other: _Node, extra: Any, item: _Node, change: str, where: list[str]) -> None:
        """A tuple item only one side has, judged by the other side's content model for extra items."""
        if extra is True or extra == {}:
            if change == "ADDED" and item.deref().kind() == "empty":
                self.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", where)
            else:
                self.add(f"ITEM_{change}_{'TO' if change == 'ADDED' else 'FROM'}_OPEN_CONTENT_MODEL", where)
        elif isinstance(extra, dict):
            pair = (item, other.sub(extra)) if change == "REMOVED" else (other.sub(extra), item)
            trial = self.trial(pair[0], pair[1], where)
            self.differences.extend(trial.differences)
            self.add(f"ITEM_{change}_{'IS' if trial.compatible() else 'NOT'}_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                     where)
        elif change == "ADDED":
            self.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL", where)
        elif item.schema is False:
            self.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", where)
        else:
            self.add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", where)


def _items(n: _Node) -> tuple[Any, list[Any], Any]:
    """(schema of every item or None, tuple item schemas, schema of items past the tuple)."""
    if isinstance(n.get("prefixItems"), list):  # 2019-09/2020-12
        return None, n.get("prefixItems"), n.get("items", True)
    items = n.get("items")
    if isinstance(items, list):
        return None, items, n.get("additionalItems", True)
    return items, [], n.get("additionalItems", True)
