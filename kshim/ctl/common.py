"""What every `kshim ctl` command shares: its error, the client ids it introduces itself with,
error-code names and plain-text tables."""
from __future__ import annotations

from typing import Any

from wire.errors import ErrorCode

# the client id each command's Kafka connections send, so a broker's logs tell them apart
GROUPS_CLIENT_ID = "kshim-ctl-groups"
TXNS_CLIENT_ID = "kshim-ctl-txns"
SCRAM_CLIENT_ID = "kshim-ctl-scram"


class CtlError(Exception):
    """What to tell the user; ctl exits 1."""


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def error_text(code: int, message: str | None = None) -> str:
    return f"{error_name(code)}: {message}" if message else error_name(code)


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def cell_text(v: Any) -> str:
    return "-" if v is None or v == "" else str(v)
