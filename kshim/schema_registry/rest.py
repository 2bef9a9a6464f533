"""Confluent Schema Registry's REST API over the console's HTTP server (kshim.console.http): the
paths, status codes, error codes and bodies of Confluent's resources (SubjectsResource,
SubjectVersionsResource, SchemasResource, ConfigResource, ModeResource, CompatibilityResource,
RootResource), mapped onto `Registry` calls. docs/schema-registry.md lists what is served.

Request bodies are JSON in application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json
or application/json (another type: 415); answers are application/vnd.schemaregistry.v1+json. Every
failure is a body {"error_code": N, "message": "..."}: Confluent's codes for the registry's rules,
422 for a body that is no JSON (or not the JSON wanted), 404 and 405 for unknown paths and methods,
50001/50002 when `_schemas` could not be written. With `auth`, each request needs HTTP basic
credentials the broker accepts (401 otherwise)."""
from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl, unquote

from kshim.console.http import HttpRequest, HttpResponse
from kshim.schema_registry import records as r
from kshim.schema_registry.kafka_store import StoreError
from kshim.schema_registry.registry import Registry, RegistryError
from kshim.schema_registry.types import SCHEMA_TYPES, InvalidSchema, parse

log = logging.getLogger("kshim.schema_registry")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPTED_BODIES = ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json",
                   "application/json", "application/octet-stream")
Authenticate = Callable[[str, str], Awaitable[bool]]


def _json(value: object, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    return HttpResponse(status, json.dumps(value).encode(), CONTENT_TYPE, headers=headers or {})


def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> HttpResponse:
    return _json({"error_code": code, "message": message}, status, headers)


def _flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "false").lower() == "true"


def version_json(v: r.SchemaValue) -> dict[str, Any]:
    """A subject version as Confluent's Schema entity shows it (schemaType left out for AVRO)."""
    out: dict[str, Any] = {"subject": v.subject, "version": v.version, "id": v.id}
    if v.schema_type != "AVRO":
        out["schemaType"] = v.schema_type
    if v.references:
        out["references"] = [ref.to_json() for ref in v.references]
    out["schema"] = v.schema
    return out


class RestApi:
    def __init__(self, registry: Registry, authenticate: Authenticate | None = None,
                 cluster_id: Callable[[], str | None] = lambda: None) -> None:
        self.registry = registry
        self.authenticate = authenticate
        self.cluster_id = cluster_id

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.authenticate is not None and not await self._authorized(request):
            return _error(401, 401, "Unauthorized", {"WWW-Authenticate": 'Basic realm="kshim schema registry"'})
        try:
            return await self._route(request)
        except RegistryError as e:
            return _error(e.status, e.code, e.message)
        except StoreError as e:
            log.warning("schema registry: %s %s: %s", request.method, request.path, e)
            return _error(500, e.code, f"Error while writing to the schemas topic: {e}")
        except Exception:  # a bug, not the client's: Confluent's answer to the unexpected
            log.exception("schema registry: %s %s failed", request.method, request.path)
            return _error(500, 50001, "Internal error in the schema registry")

    async def _authorized(self, request: HttpRequest) -> bool:
        kind, _, encoded = request.headers.get("authorization", "").partition(" ")
        if kind.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        assert self.authenticate is not None
        return bool(sep) and await self.authenticate(user, password)

    def _body(self, request: HttpRequest) -> object:
        kind = request.headers.get("content-type", CONTENT_TYPE).split(";")[0].strip().lower()
        if kind not in ACCEPTED_BODIES:
            raise RegistryError(415, 415, f"HTTP 415 Unsupported Media Type: {kind}")
        try:
            return json.loads(request.body or b"null")
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise RegistryError(422, 422, f"Unrecognized JSON body: {e}") from None

    async def _route(self, request: HttpRequest) -> HttpResponse:
        parts = [unquote(p) for p in request.path.strip("/").split("/")] if request.path.strip("/") else []
        query = dict(parse_qsl(request.query))
        method = request.method
        handler = self._find(parts)
        if handler is None:
            return _error(404, 404, "HTTP 404 Not Found")
        allowed, call = handler
        if method not in allowed:
            return _error(405, 405, "HTTP 405 Method Not Allowed")
        return await call(method, parts, query, request)

    def _find(self, p: list[str]) -> tuple[tuple[str, ...], Callable[..., Awaitable[HttpResponse]]] | None:
        n = len(p)
        if n == 0:
            return ("GET",), self._root
        head = p[0]
        if head == "subjects":
            if n == 1:
                return ("GET",), self._subjects
            if n == 2:
                return ("POST", "DELETE"), self._subject
            if n == 3 and p[2] == "versions":
                return ("GET", "POST"), self._versions
            if n == 4 and p[2] == "versions":
                return ("GET", "DELETE"), self._version
            if n == 5 and p[2] == "versions" and p[4] in ("schema", "referencedby"):
                return ("GET",), self._version_detail
        elif head == "schemas":
            if n == 1:
                return ("GET",), self._schemas
            if n == 2 and p[1] == "types":
                return ("GET",), self._types
            if p[1:2] == ["ids"] and (n == 3 or (n == 4 and p[3] in ("schema", "versions", "subjects"))):
                return ("GET",), self._by_id
        elif head == "config" and n <= 2:
            return ("GET", "PUT", "DELETE"), self._config
        elif head == "mode" and n <= 2:
            return ("GET", "PUT", "DELETE") if n == 2 else ("GET", "PUT"), self._mode
        elif head == "compatibility" and p[1:2] == ["subjects"] and n in (4, 5) and p[3] == "versions":
            return ("POST",), self._compatibility
        elif p == ["contexts"]:
            return ("GET",), self._contexts
        elif p == ["v1", "metadata", "id"]:
            return ("GET",), self._metadata_id
        return None

    # ------------------------------------------------------------------ handlers
    async def _root(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        return _json({})

    async def _contexts(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        return _json(["."])

    async def _metadata_id(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        return _json({"scope": {"path": [], "clusters": {"kafka-cluster": self.cluster_id() or "",
                                                         "schema-registry-cluster": "schema-registry"}}})

    async def _subjects(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        prefix = q.get("subjectPrefix", "")
        return _json([s for s in self.registry.subjects(deleted=_flag(q, "deleted")) if s.startswith(prefix)])

    async def _subject(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        if method == "DELETE":
            return _json(await self.registry.delete_subject(p[1], permanent=_flag(q, "permanent")))
        found = self.registry.lookup(p[1], self._body(req), normalize=_flag(q, "normalize"),
                                     deleted=_flag(q, "deleted"))
        return _json(version_json(found))

    async def _versions(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        if method == "GET":
            return _json(self.registry.versions(p[1], deleted=_flag(q, "deleted")))
        schema_id = await self.registry.register(p[1], self._body(req), normalize=_flag(q, "normalize"))
        return _json({"id": schema_id})

    async def _version(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        if method == "DELETE":
            return _json(await self.registry.delete_version(p[1], p[3], permanent=_flag(q, "permanent")))
        v = self.registry.version(p[1], p[3], deleted=_flag(q, "deleted"))
        return _json(version_json(self._formatted(v, q.get("format"))))

    async def _version_detail(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        if p[4] == "referencedby":
            return _json(self.registry.referenced_by(p[1], p[3]))
        v = self.registry.version(p[1], p[3], deleted=_flag(q, "deleted"))
        return self._raw(self._formatted(v, q.get("format")).schema)

    async def _schemas(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        prefix, latest = q.get("subjectPrefix", ""), _flag(q, "latestOnly")
        out = []
        for subject in self.registry.subjects(deleted=_flag(q, "deleted")):
            if subject.startswith(prefix):
                versions = self.registry.state.versions(subject, deleted=_flag(q, "deleted"))
                out += [version_json(v) for v in (versions[-1:] if latest else versions)]
        return _json(out)

    async def _types(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        return _json(list(SCHEMA_TYPES))

    async def _by_id(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        if not p[2].isdigit() or len(p[2]) > 10:
            raise RegistryError(404, 40403, f"Schema {p[2]} not found")
        schema_id = int(p[2])
        if len(p) == 4 and p[3] == "versions":
            return _json([{"subject": v.subject, "version": v.version}
                          for v in self.registry.id_versions(schema_id, deleted=_flag(q, "deleted"))])
        if len(p) == 4 and p[3] == "subjects":
            return _json(sorted({v.subject for v in self.registry.id_versions(schema_id, deleted=_flag(q, "deleted"))}))
        v = self._formatted(self.registry.schema(schema_id), q.get("format"))
        if len(p) == 4:
            return self._raw(v.schema)
        out = version_json(v)
        for name in ("subject", "version", "id"):
            del out[name]
        return _json(out)

    def _formatted(self, v: r.SchemaValue, fmt: str | None) -> r.SchemaValue:
        if not fmt:
            return v
        resolved: dict[str, str] = {}
        self.registry.resolve(v.references, resolved)
        try:
            text = parse(v.schema_type, v.schema, resolved).formatted(fmt)
        except InvalidSchema as e:
            raise RegistryError(422, 42201, f"Invalid schema: {e}") from None
        return r.SchemaValue(v.subject, v.version, v.id, text, v.schema_type, v.references, v.deleted)

    def _raw(self, text: str) -> HttpResponse:
        return HttpResponse(200, text.encode(), CONTENT_TYPE)

    async def _config(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        subject = p[1] if len(p) == 2 else None
        if method == "GET":
            return _json({"compatibilityLevel": self.registry.config(subject,
                                                                     default_to_global=_flag(q, "defaultToGlobal"))})
        if method == "PUT":
            return _json({"compatibility": await self.registry.set_config(subject, self._body(req))})
        return _json({"compatibilityLevel": await self.registry.delete_config(subject)})

    async def _mode(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        subject = p[1] if len(p) == 2 else None
        if method == "GET":
            return _json({"mode": self.registry.subject_mode(subject, default_to_global=_flag(q, "defaultToGlobal"))})
        if method == "PUT":
            return _json({"mode": await self.registry.set_mode(subject, self._body(req), force=_flag(q, "force"))})
        assert subject is not None
        return _json({"mode": await self.registry.delete_mode(subject)})

    async def _compatibility(self, method: str, p: list[str], q: dict[str, str], req: HttpRequest) -> HttpResponse:
        errors = await self.registry.test_compatibility(p[2], p[4] if len(p) == 5 else None, self._body(req),
                                                        normalize=_flag(q, "normalize"))
        out: dict[str, Any] = {"is_compatible": not errors}
        if _flag(q, "verbose"):
            out["messages"] = errors
        return _json(out)
