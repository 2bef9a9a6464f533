"""Byte code for the methods `dataclasses` writes, kept across runs as a .pyc keeps a module's.

CPython 3.11's dataclasses compiles each generated __init__, __repr__, __eq__, __hash__ and frozen
__setattr__/__delattr__ from source text at every import (`exec` of a string). On this project's
2-core machines that is ~0.5 ms a method, and the ~180 dataclasses a broker imports made it a third
of `kshim serve`'s start (docs/benchmarks.md, "Start time"). The text fully determines the code,
so the code compiled for each text is kept in one marshal file in kshim's __pycache__ and reused;
a text not in the file is compiled as before. The file is written as byte code is: at exit when
new texts were compiled and bytecode writing is on (not with PYTHONDONTWRITEBYTECODE or -B), or
on request (`python -m kshim.dataclass_cache`, which the test suite runs once as it compiles).

Only dataclasses' own `exec` goes through here (a module global that shadows the builtin there),
and with the same flags it had: no `from __future__` flag is inherited, as from dataclasses.py.
"""
from __future__ import annotations

import atexit
import builtins
import dataclasses
import importlib.util
import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

PATH = Path(__file__).parent / "__pycache__" / f"dataclasses.{sys.implementation.cache_tag}.marshal"
# the interpreter's byte code magic: a file from another interpreter build is ignored
MAGIC = importlib.util.MAGIC_NUMBER
MAX_BYTES = 16 << 20  # far above kshim's ~1,000 methods; a larger file is not ours to trust

_codes: dict[str, CodeType] = {}
_new = 0


def _exec(source: Any, globals: dict[str, Any] | None = None, locals: Any = None) -> None:
    global _new
    if isinstance(source, str):
        code = _codes.get(source)
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            _codes[source] = code
            _new += 1
        source = code
    builtins.exec(source, globals, locals)


def _load(path: Path) -> dict[str, CodeType]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES or not data.startswith(MAGIC):
            return {}
        codes = marshal.loads(data[len(MAGIC):])
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(codes, dict):
        return {}
    return {k: v for k, v in codes.items() if isinstance(k, str) and isinstance(v, CodeType)}


def save(path: Path = PATH) -> bool:
    """Write every code known now (beside what the file holds); False when it cannot be written."""
    global _new
    merged = {**_load(path), **_codes}
    import tempfile  # only here: its import costs a start more than the rest of this module
    try:
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".dataclasses-")
        try:
            os.fchmod(fd, 0o644)  # as a .pyc: readable by every user of the install
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + marshal.dumps(merged))
            os.replace(tmp, path)  # concurrent starts: the last complete file wins
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    _new = 0
    return True


def _save_at_exit() -> None:
    if _new and not sys.dont_write_bytecode:
        save()


def install() -> None:
    """Route dataclasses' exec through the cache (once). kshim.cli, the program's entry, calls it
    before it imports the rest of kshim; not kshim/__init__, which the pytest plugin imports in
    every pytest run of a user's project (dataclasses and this file are not for them)."""
    if getattr(dataclasses, "exec", None) is _exec:
        return
    _codes.update(_load(PATH))
    dataclasses.exec = _exec  # type: ignore[attr-defined]
    atexit.register(_save_at_exit)


def main() -> None:
    """Import every kshim module and write the file (the test suite runs this as it compiles)."""
    import pkgutil

    import kshim
    from kshim import dataclass_cache  # the module kshim.cli installs, not this __main__
    dataclass_cache.install()
    for module in pkgutil.walk_packages(kshim.__path__, "kshim."):
        if module.name in ("kshim.__main__", "kshim.dataclass_cache"):
            continue
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional extra (pyspark, playwright...) not installed
            pass
    path = dataclass_cache.PATH
    print(f"{len(dataclass_cache._codes)} dataclass methods in {path}" if dataclass_cache.save()
          else f"cannot write {path}")


if __name__ == "__main__":
    main()
