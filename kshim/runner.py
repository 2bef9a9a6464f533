"""Running a server process's main coroutine, with a plain message when its port is taken."""
from __future__ import annotations

import sys
from typing import Any, Awaitable, Callable

import anyio

from kshim.errors import os_error_behind, refusal_behind


def run_server(main: Callable[..., Awaitable[Any]], *args: Any, name: str, address: str) -> int:
    """anyio.run(main, *args); exit code 1 with one line instead of a traceback when it cannot bind
    or refuses to start (kshim.errors.StartRefused)."""
    try:
        anyio.run(main, *args)
    except Exception as exc:
        refused = refusal_behind(exc)
        if refused is not None:
            print(f"{name}: {refused}", file=sys.stderr)
            return 1
        e = os_error_behind(exc)
        if e is None:
            raise
        print(f"{name}: cannot serve on {address}: {e}", file=sys.stderr)
        return 1
    return 0
