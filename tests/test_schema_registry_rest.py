"""The schema registry's REST mapping in process (kshim.schema_registry.rest): paths, methods,
content types, error bodies and basic auth, over the in-memory store of
tests/test_schema_registry_store.py (compat_tests/test_schema_registry.py drives a real process)."""
from __future__ import annotations

import base64
import json
from typing import Any

import anyio
import pytest

from kshim.console.http import HttpRequest
from kshim.schema_registry.registry import Registry
from kshim.schema_registry.rest import CONTENT_TYPE, RestApi
from tests.test_schema_registry_store import V1, V2, MemoryStore

pytestmark = pytest.mark.unit


def call(api: RestApi, method: str, target: str, body: Any = None, headers: dict[str, str] | None = None,
         raw: bytes | None = None) -> tuple[int, Any]:
    path, _, query = target.partition("?")
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    response = anyio.run(api, HttpRequest(method, path, query, {"content-type": CONTENT_TYPE, **(headers or {})}, data))
    assert response.content_type == CONTENT_TYPE
    try:
        return response.status, json.loads(response.body)
    except ValueError:
        return response.status, response.body.decode()


@pytest.fixture
def api() -> RestApi:
    return RestApi(Registry(MemoryStore()))


def test_paths_and_answers(api):
    assert call(api, "GET", "/") == (200, {})
    assert call(api, "POST", "/subjects/a%2Fb/versions", V1) == (200, {"id": 1})  # an encoded slash in a subject
    assert call(api, "GET", "/subjects") == (200, ["a/b"])
    assert call(api, "GET", "/subjects?subjectPrefix=x") == (200, [])
    latest = call(api, "GET", "/subjects/a%2Fb/versions/latest")[1]
    assert latest.keys() == {"subject", "version", "id", "schema"} and (latest["subject"], latest["id"]) == ("a/b", 1)
    assert json.loads(latest["schema"]) == call(api, "GET", "/schemas/ids/1/schema")[1]  # the raw schema
    assert call(api, "GET", "/schemas/ids/1/subjects") == (200, ["a/b"])
    assert call(api, "GET", "/schemas/ids/1")[1].keys() == {"schema"}  # AVRO: no schemaType, no references
    assert call(api, "POST", "/subjects/a%2Fb", V1)[1]["version"] == 1
    assert call(api, "POST", "/compatibility/subjects/a%2Fb/versions", V2) == (200, {"is_compatible": True})
    assert call(api, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call(api, "PUT", "/config/a%2Fb", {"compatibility": "full"}) == (200, {"compatibility": "FULL"})
    assert call(api, "DELETE", "/config/a%2Fb") == (200, {"compatibilityLevel": "FULL"})
    assert call(api, "GET", "/mode") == (200, {"mode": "READWRITE"})
    assert call(api, "GET", "/schemas") == (200, [call(api, "GET", "/subjects/a%2Fb/versions/1")[1]])
    assert call(api, "GET", "/v1/metadata/id")[0] == 200


@pytest.mark.parametrize("method,target,status,code", [
    ("GET", "/nothing", 404, 404), ("GET", "/subjects/a/versions/1/extra", 404, 404),
    ("PATCH", "/subjects", 405, 405), ("POST", "/schemas/types", 405, 405), ("DELETE", "/mode", 405, 405),
    ("GET", "/schemas/ids/abc", 404, 40403), ("GET", "/schemas/ids/99999999999", 404, 40403),
    ("GET", "/subjects/none/versions", 404, 40401), ("GET", "/subjects/none/versions/latest", 404, 40401),
    ("GET", "/subjects/none/versions/x", 422, 42202), ("GET", "/config/none", 404, 40408),
    ("GET", "/mode/none", 404, 40409),
])
def test_unknown_things_get_confluents_error_bodies(api, method, target, status, code):
    got_status, body = call(api, method, target)
    assert (got_status, body["error_code"]) == (status, code) and body["message"]


@pytest.mark.parametrize("raw,headers,code", [
    (b"{", {}, 422), (b"\xff\xfe", {}, 422), (b"[" * 100_000, {}, 422),
    (b'{"schema": "\\"int\\""}', {"content-type": "text/plain"}, 415),
])
def test_bad_bodies(api, raw, headers, code):
    status, body = call(api, "POST", "/subjects/s/versions", raw=raw, headers=headers)
    assert (status, body["error_code"]) == (code, code)


def test_basic_auth_asks_the_authenticator():
    asked: list[tuple[str, str]] = []

    async def authenticate(user: str, password: str) -> bool:
        asked.append((user, password))
        return (user, password) == ("alice", "pw:with:colons")

    api = RestApi(Registry(MemoryStore()), authenticate)

    def basic(text: bytes) -> dict[str, str]:
        return {"authorization": "Basic " + base64.b64encode(text).decode()}

    assert call(api, "GET", "/subjects")[0] == 401
    assert call(api, "GET", "/subjects", headers={"authorization": "Basic !!!"})[0] == 401
    assert call(api, "GET", "/subjects", headers={"authorization": "Bearer x"})[0] == 401
    assert call(api, "GET", "/subjects", headers=basic(b"no-colon"))[0] == 401
    assert call(api, "GET", "/subjects", headers=basic(b"alice:wrong"))[0] == 401
    assert call(api, "GET", "/subjects", headers=basic(b"alice:pw:with:colons")) == (200, [])
    assert asked == [("alice", "wrong"), ("alice", "pw:with:colons")]


def test_serve_refuses_to_start_without_the_schema_libraries(monkeypatch, tmp_path, capsys):
    """Checked by the command before the broker starts: the registry's own modules import them."""
    import kshim.schema_registry as package
    from kshim.cli import main
    monkeypatch.setattr(package, "LIBRARIES", ("avro", "no_such_library_kshim", "no_such_parent.child"))
    assert main(["serve", "--schema-registry", "--data-dir", str(tmp_path / "data")]) == 2
    assert "--schema-registry needs no_such_library_kshim, no_such_parent.child: pip install 'kshim[schema-registry]'" \
        in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # refused before anything started
