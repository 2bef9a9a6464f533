"""kshim.dataclass_cache: the dataclass methods' byte code kept across runs behaves exactly as the
methods dataclasses compiles, a bad file is ignored, and a broker's start compiles none."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kshim import dataclass_cache

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def make_classes():
    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 2
        tags: tuple[str, ...] = ()

    @dataclasses.dataclass(slots=True, order=True)
    class Item:
        name: str
        parts: list[int] = dataclasses.field(default_factory=list)

    return Point, Item


def check(Point, Item) -> None:
    p = Point(1)
    assert (p.x, p.y, p.tags) == (1, 2, ()) and p == Point(1, 2) and hash(p) == hash(Point(1, 2))
    assert repr(p) == "make_classes.<locals>.Point(x=1, y=2, tags=())"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3  # type: ignore[misc]
    assert dataclasses.replace(p, y=5) == Point(1, 5)
    a, b = Item("a"), Item("b", [1])
    assert a < b and a.parts == [] and a.parts is not Item("a").parts
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]


def test_cached_methods_behave_as_compiled_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(dataclass_cache, "_codes", {})
    monkeypatch.setattr(dataclass_cache, "_new", 0)
    monkeypatch.setattr(dataclasses, "exec", dataclass_cache._exec, raising=False)
    check(*make_classes())  # compiled, and remembered
    assert dataclass_cache._new > 0
    path = tmp_path / "dc.marshal"
    assert dataclass_cache.save(path) and dataclass_cache._new == 0
    loaded = dataclass_cache._load(path)
    assert loaded.keys() == dataclass_cache._codes.keys()
    monkeypatch.setattr(dataclass_cache, "_codes", loaded)
    check(*make_classes())  # from the file this time: nothing compiled
    assert dataclass_cache._new == 0


@pytest.mark.parametrize("content", [b"", b"garbage", dataclass_cache.MAGIC + b"\x00\x01",
                                     b"\x00\x00\x00\x00" + b"x" * 100])
def test_a_bad_file_is_ignored(tmp_path, content):
    path = tmp_path / "dc.marshal"
    path.write_bytes(content)
    assert dataclass_cache._load(path) == {}
    assert dataclass_cache._load(tmp_path / "missing") == {}


def test_a_file_of_other_values_is_ignored(tmp_path):
    import marshal
    path = tmp_path / "dc.marshal"
    path.write_bytes(dataclass_cache.MAGIC + marshal.dumps({"a": 1, 2: "b"}))
    assert dataclass_cache._load(path) == {}
    path.write_bytes(dataclass_cache.MAGIC + marshal.dumps([1, 2]))
    assert dataclass_cache._load(path) == {}


def test_an_unwritable_place_is_no_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert dataclass_cache.save(blocker / "sub" / "dc.marshal") is False


def test_the_serve_path_compiles_no_dataclass_method():
    """The session compiled the file (conftest); a start then finds every method there."""
    code = ("import kshim.cli, kshim.net.broker_server, kshim.net.server\n"
            "from kshim import dataclass_cache as d\nimport json\nprint(json.dumps([d._new, len(d._codes)]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True)
    new, known = json.loads(out.stdout.splitlines()[-1])
    assert new == 0 and known > 500
