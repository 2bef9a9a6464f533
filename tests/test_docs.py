"""The docs state what the code does: the protocol table matches the handler registry."""
from pathlib import Path

from kshim.net import protocol_table

ROOT = Path(__file__).resolve().parent.parent


def test_protocol_table_matches_registry():
    doc = (ROOT / "docs" / "protocol.md").read_text()
    start, end = doc.index(protocol_table.BEGIN), doc.index(protocol_table.END) + len(protocol_table.END)
    assert doc[start:end] == protocol_table.render(), "regenerate with `python -m kshim.net.protocol_table`"


def test_every_served_version_exists_in_kafka_specs():
    from kshim.net.handlers import load_handlers
    from wire.codec import message

    for key, handler in load_handlers().items():
        for kind in ("request", "response"):
            lo, hi = message(key, kind).versions
            assert lo <= handler.min_version <= handler.max_version <= hi, (key, kind)


def test_every_api_kshim_does_not_serve_says_why():
    unserved = {key for key, _ in protocol_table.unserved()}
    assert unserved == set(protocol_table.NOT_SERVED), \
        "an API of Kafka's specs is neither served nor given a reason in protocol_table.NOT_SERVED (or one listed is served)"
