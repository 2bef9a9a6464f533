#!/usr/bin/env python3
"""The broker's own CPU per transaction, in one process, without clients or sockets: a standalone
broker (a data dir on /dev/shm where there is one) and its handlers called in turn, as a v1 client
drives them: AddPartitionsToTxn for --partitions partitions, one Produce per partition (a
transactional batch of --records 100-byte records, encoded beforehand, outside the clock), EndTxn
(commit), then the event loop runs until the coordinator has written the markers and
CompleteCommit. Prints process CPU per cycle and its parts: each handler (request decoding
included, response encoding not) and the completion. With --v2, as a transactions v2 client
(KIP-890, the Java client's protocol): no AddPartitionsToTxn, Produce v12 (the leader's
verification adds the partition), EndTxn v5 (every end bumps the epoch).

The client benchmarks (bench/transactions.py, bench/transactions_v2.py) wait on round trips,
client timers and the other process sharing the cores; this one moves only with the broker's code,
so it can show a change of a few percent. It measures no round trip and no socket work.

    python bench/txn_cycle.py [--records 1] [--partitions 4] [--cycles 2000] [--v2]
    python bench/txn_cycle.py --checkout ../before --checkout . [--rounds 2]

With --checkout (repeatable), each checkout's own kshim (its directory first on the path, with
this interpreter) runs the same measurement in turn, --rounds times. Numbers: docs/benchmarks.md
("The broker's CPU per transaction").
"""
from __future__ import annotations

import argparse
import collections
import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARMUP = 50


def measure(records_per_batch: int, partitions: int, cycles: int, v2: bool = False) -> str:
    import anyio

    from kshim.broker import BrokerConfig
    from kshim.coordinator.transactions import TxnState
    from kshim.net.broker_server import BrokerServer
    from kshim.net.handlers import RequestContext
    from kshim.standalone import open_standalone
    from wire import codec, records
    from wire.headers import RequestHeader

    handlers = {name: importlib.import_module(f"kshim.net.handlers.{name}") for name in (
        "10_find_coordinator", "22_init_producer_id", "24_add_partitions_to_txn", "00_produce", "26_end_txn")}
    spent: collections.Counter = collections.Counter()

    async def call(server, name: str, version: int, body: dict, timed: bool = True):
        module = handlers[name]
        frame = codec.encode(module.API_KEY, version, "request", body)
        ctx = RequestContext(server, RequestHeader(module.API_KEY, version, 1, "bench", 0), "bench:0", {})
        started = time.process_time()
        req = codec.decode(module.API_KEY, version, "request", frame, exact=True)
        resp = await module.handle(ctx, req)
        if not isinstance(resp, dict):
            resp = await resp
        if timed:
            spent[name.split("_", 1)[1]] += time.process_time() - started
        return resp

    async def run() -> str:
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        with tempfile.TemporaryDirectory(dir=shm) as d:
            broker = open_standalone(BrokerConfig(data_dir=Path(d)))
            try:
                await broker.create_topic("t", partitions)
                server = BrokerServer(broker)
                coordinator = server.transactions
                async with anyio.create_task_group() as tg:
                    tg.start_soon(coordinator.run)
                    await call(server, "10_find_coordinator", 4, {"key_type": 1, "coordinator_keys": ["tx"]}, False)
                    coordinator.runtime.load_pending()
                    init = await call(server, "22_init_producer_id", 4, {
                        "transactional_id": "tx", "transaction_timeout_ms": 60_000, "producer_id": -1,
                        "producer_epoch": -1}, False)
                    pid = init["producer_id"]
                    value = b"x" * 100
                    # v2: every EndTxn bumps the epoch, and sequences start again at 0 with each
                    batches = [[records.encode_batch([(None, value)] * records_per_batch, producer_id=pid,
                                                     producer_epoch=c if v2 else 0,
                                                     base_sequence=0 if v2 else c * records_per_batch,
                                                     transactional=True) for _ in range(partitions)]
                               for c in range(WARMUP + cycles)]
                    add = {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
                           "v3_and_below_producer_epoch": 0,
                           "v3_and_below_topics": [{"name": "t", "partitions": list(range(partitions))}]}
                    end = {"transactional_id": "tx", "producer_id": pid, "producer_epoch": 0, "committed": True}
                    started = 0.0
                    for c in range(WARMUP + cycles):
                        if c == WARMUP:
                            spent.clear()
                            started = time.process_time()
                        if v2:
                            end["producer_epoch"] = c
                        else:
                            await call(server, "24_add_partitions_to_txn", 3, add)
                        for p in range(partitions):
                            resp = await call(server, "00_produce", 12 if v2 else 9, {
                                "transactional_id": "tx", "acks": -1, "timeout_ms": 5000,
                                "topic_data": [{"name": "t", "partition_data": [
                                    {"index": p, "records": batches[c][p]}]}]})
                            code = resp["responses"][0]["partition_responses"][0]["error_code"]
                            if code:
                                raise SystemExit(f"Produce answered error {code}")
                        if (await call(server, "26_end_txn", 5 if v2 else 3, end))["error_code"]:
                            raise SystemExit("EndTxn failed")
                        waited = time.process_time()
                        for _ in range(10_000):  # the completion is a task on this loop
                            if coordinator.txns["tx"].state == TxnState.COMPLETE_COMMIT:
                                break
                            await anyio.sleep(0)
                        else:
                            raise SystemExit("the transaction did not complete")
                        spent["completion"] += time.process_time() - waited
                    total = time.process_time() - started
                    tg.cancel_scope.cancel()
            finally:
                broker.close()
        parts = ", ".join(f"{k} {1e6 * v / cycles:.0f}" for k, v in spent.items())
        return (f"{1e6 * total / cycles:.0f} us CPU per transaction ({'v2, ' if v2 else ''}{partitions} partitions, "
                f"{records_per_batch} records per batch; {parts})")

    return anyio.run(run)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1, help="records per batch (default 1)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions per transaction (default 4)")
    parser.add_argument("--cycles", type=int, default=2000, help="transactions measured (default 2000)")
    parser.add_argument("--v2", action="store_true", help="as a transactions v2 client (Produce v12, EndTxn v5)")
    parser.add_argument("--checkout", type=Path, action="append", default=[],
                        help="measure this checkout's kshim (repeatable; alternated)")
    parser.add_argument("--rounds", type=int, default=2, help="with --checkout: measurements of each (default 2)")
    args = parser.parse_args()
    if not 1 <= args.records <= 10_000 or not 1 <= args.partitions <= 100 or not 1 <= args.cycles <= 1_000_000:
        parser.error("--records 1..10000, --partitions 1..100, --cycles 1..1000000")
    if args.v2 and args.cycles + WARMUP > 32_000:
        parser.error("--v2: --cycles up to 31950 (an epoch per transaction: past 32766 comes a new producer id)")
    if not args.checkout:
        print(measure(args.records, args.partitions, args.cycles, args.v2))
        return 0
    argv = [sys.executable, os.path.abspath(__file__), "--records", str(args.records),
            "--partitions", str(args.partitions), "--cycles", str(args.cycles)] + (["--v2"] if args.v2 else [])
    for _ in range(args.rounds):
        for checkout in args.checkout:
            env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
            done = subprocess.run(argv, env=env, cwd=checkout, capture_output=True, text=True, timeout=600)
            print(f"{checkout}: {(done.stdout.strip() or done.stderr.strip()[-300:])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
