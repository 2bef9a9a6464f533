"""Calls to brokers' admin sockets (kshim.cluster.admin) with plain blocking sockets, so the Python
API (kshim.ctl.faults) works from any code, inside an event loop or not.

`<data-dir>/broker.sock` is a single `kshim serve` (node 0); `<data-dir>/broker-i/broker.sock`
is broker i of `kshim serve --brokers N`.
"""
from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import TypeVar

from kshim.controller import messages as m
from kshim.ctl.common import CtlError

R = TypeVar("R")
SOCKET_NAME = "broker.sock"  # kshim.cluster.admin.SOCKET_NAME (ctl does not import the broker side)
DEFAULT_TIMEOUT_S = 10.0
_BROKER_DIR = re.compile(r"^broker-(\d+)$")


def broker_sockets(data_dir: Path) -> dict[int, Path]:
    """node id -> admin socket of every broker under data_dir."""
    found: dict[int, Path] = {}
    if (data_dir / SOCKET_NAME).exists():
        found[0] = data_dir / SOCKET_NAME
    for path in sorted(data_dir.glob(f"broker-*/{SOCKET_NAME}")):
        match = _BROKER_DIR.match(path.parent.name)
        if match:
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def select(data_dir: Path, broker: int | None) -> dict[int, Path]:
    """The sockets to call: every broker's, or the one asked for; CtlError naming what is missing."""
    found = broker_sockets(data_dir)
    if not found:
        raise CtlError(f"no broker admin socket under {data_dir} (is a kshim serve running with this --data-dir?)")
    if broker is None:
        return found
    if broker not in found:
        raise CtlError(f"no broker {broker} under {data_dir} (brokers: {', '.join(map(str, found))})")
    return {broker: found[broker]}


def call(path: Path, request: m.Operation[R], timeout_s: float = DEFAULT_TIMEOUT_S, node: int | None = None) -> R:
    """One request to one broker's admin socket; CtlError saying which broker did not answer or refused."""
    who = f"broker {node}" if node is not None else str(path)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            sock.sendall(m.encode_request(1, request))
            size = m.frame_size(_read(sock, m.SIZE_BYTES))
            response = m.decode_response(_read(sock, size))
    except socket.timeout:
        raise CtlError(f"{who} did not answer within {timeout_s:g} s ({path}); is it paused?") from None
    except (ConnectionRefusedError, FileNotFoundError):
        raise CtlError(f"{who} is not running (nothing listens on {path})") from None
    except (OSError, m.FrameError) as e:
        raise CtlError(f"{who}: {e} ({path})") from None
    if response.reply is None:
        raise CtlError(f"{who}: {response.error_code.name}: {response.message}")
    return response.reply.result


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)
