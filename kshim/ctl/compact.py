"""`kshim ctl compact TOPIC [PARTITION]`: clean a compacted topic's logs now (deterministic tests,
an operator who wants tombstones gone). Kafka has no API for it, so ctl asks each broker on its local
admin socket (kshim.cluster.admin): `<data-dir>/broker.sock` for `kshim serve`, and
`<data-dir>/broker-i/broker.sock` for every broker of `kshim serve --brokers N` (each cleans its own
replicas, leaders and followers). Prints one JSON object per cleaned replica."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import anyio

from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.ctl.common import CtlError
from kshim.errors import BrokerError

SOCKET_NAME = "broker.sock"  # kshim.cluster.admin.SOCKET_NAME (ctl does not import the broker side)
TIMEOUT_S = 600.0  # a clean of a large log is throttled (--log-cleaner-io-max-bytes-per-second)


def add_parser(commands) -> None:
    c = commands.add_parser("compact", help="clean a compacted topic's logs now",
                            description="Clean the logs of a topic with cleanup.policy compact now, on every "
                                        "broker hosting them, whatever their dirty ratio.")
    c.add_argument("topic")
    c.add_argument("partition", type=int, nargs="?", default=-1, help="one partition (default: all)")
    c.add_argument("--json", action="store_true", help="JSON lines (the default)")


def sockets(data_dir: Path) -> list[Path]:
    found = sorted(data_dir.glob(f"broker-*/{SOCKET_NAME}"))
    if (data_dir / SOCKET_NAME).exists():
        found.insert(0, data_dir / SOCKET_NAME)
    return found


async def compact(data_dir: Path, topic: str, partition: int) -> list[dict]:
    paths = sockets(data_dir)
    if not paths:
        raise CtlError(f"no broker admin socket under {data_dir} (is a kshim serve running with this --data-dir?)")
    out: list[dict] = []
    for path in paths:
        try:
            text = await rpc.call_once(path, m.CompactNow(topic, partition), TIMEOUT_S)
        except (BrokerError, ConnectionError, OSError) as e:
            out.append({"socket": str(path), "error": str(e)})
            continue
        out.extend(json.loads(text))
    return out


def main(args: argparse.Namespace) -> int:
    try:
        results = anyio.run(compact, args.data_dir, args.topic, args.partition)
    except CtlError as e:
        print(f"kshim ctl compact: {e}")
        return 1
    for r in results:
        print(json.dumps(r))
    return 1 if not results or any("error" in r for r in results) else 0
