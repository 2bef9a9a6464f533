"""docs/configs.md's broker config table, written from the one table (kshim.configs.catalog):
`python -m kshim.configs.docgen` rewrites the part between its markers; tests/test_server_properties.py
fails when the page and the table differ."""
from __future__ import annotations

import sys
from pathlib import Path

from kshim.configs.catalog import TABLE, Entry
from kshim.configs.kafka43 import KAFKA_BROKER_CONFIGS

BEGIN = "<!-- broker config table: written by `python -m kshim.configs.docgen` from kshim/configs/catalog.py -->"
END = "<!-- end of the broker config table -->"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "configs.md"

def _cell(text: str | None) -> str:
    return "" if text is None else text.replace("|", "\\|").replace("\n", " ")


def _what(entry: Entry) -> str:
    how = entry.why[:1].upper() + entry.why[1:]
    if entry.kind == "served" and entry.option:
        how = f"{how.rstrip('.')} (`{entry.option}`)."
    if not how.endswith("."):
        how += "."
    if entry.kind == "refused" and not entry.refuse_default:
        how += " Accepted at Kafka's default."
    return how


def table() -> str:
    lines = ["| name | type | Kafka's default | kshim | what kshim does |", "|---|---|---|---|---|"]
    for name in sorted(TABLE):
        entry, kafka = TABLE[name], KAFKA_BROKER_CONFIGS.get(name)
        kind = kafka.type.lower() if kafka else ""
        if kafka is None or kafka.default is None:
            default = ""
        else:
            default = f"`{_cell(kafka.default)}`" if kafka.default else '""'
        lines.append(f"| `{name}` | {kind} | {default} | {entry.kind} | {_cell(_what(entry))} |")
    return "\n".join(lines)


def rewritten(page: str) -> str:
    """`page` with the text between the markers replaced by the current table."""
    head, sep, rest = page.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"docs/configs.md lacks the markers {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> int:
    page = PAGE.read_text()
    new = rewritten(page)
    if new != page:
        PAGE.write_text(new)
        print(f"rewrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
