"""Java's .properties format, as Kafka reads server.properties (java.util.Properties.load): one
`key=value`, `key: value` or `key value` per logical line; `#` and `!` start comments; a line
ending in an odd number of backslashes continues on the next (its leading blanks dropped); the
escapes \\t \\n \\r \\f \\uXXXX, and a backslash before any other character keeps that character.
The last of a repeated key wins, as in Java. No library for it is both small and kept up, and
the format is this page."""
from __future__ import annotations

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"


class PropertiesError(ValueError):
    """A malformed line (a bad \\u escape): the message names the source and line."""


def _logical_lines(text: str):
    """(first physical line number, logical line) pairs, continuations joined."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, line = i + 1, lines[i].lstrip(_BLANK)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_BLANK)
            i += 1
        if _continues(line):  # a continuation at the end of the file ends the value
            line = line[:-1]
        yield start, line


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _unescape(text: str, where: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(f"{where}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped '=', ':' or blank; blanks and one separator follow it."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _BLANK:
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(_BLANK)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANK)
    return key, rest


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """The key/value pairs of `text`, in file order (a repeated key keeps its last value)."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        where = f"{source} line {number}"
        out[_unescape(key, where)] = _unescape(value, where)
    return out
