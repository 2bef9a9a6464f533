#!/usr/bin/env python3
"""Transactions v2 (KIP-890) against v1, and against librdkafka's mock broker, in ONE run.

The Java client 4.3 (the one client that speaks transactions v2: librdkafka stays on the classic
protocol) runs committed transactions of N records for --seconds on a fresh topic per target and
size (compat_tests/java/KshimClient.java `txn-bench`: begin, N sends, flush, commitTransaction;
the flush works around a Java client race on v2: docs/benchmarks.md, "Transactions v2 with the
Java client"):

  kshim v2   `kshim serve` (transaction.version 2, the default): Produce v13 adds the partition
             through the leader's verification, EndTxn v5 bumps the epoch; no AddPartitionsToTxn
  kshim v1   `kshim serve --transaction-version 1`: AddPartitionsToTxn, Produce v11 (verified
             against the coordinator's state), EndTxn v4
  mock       bench/mock_cluster.py --brokers 1 --java-compat (librdkafka's mock, behind its relay
             for the Java client): it finalizes no transaction.version, so the Java client uses
             v1 there too

Reported per target and size: transactions/s, records/s, commitTransaction p50/p99 (ms). Each JVM
starts once per measurement; its start-up and initTransactions are outside the timed loop.
The targets are started here and stopped by PID.

    python bench/transactions_v2.py [--seconds 5] [--sizes 1,100,1000] [--repeat 1] [--json results.json]
                                    [--peer HOST:PORT]   # also any other broker (Java client, v2 if it finalizes it)

The table is markdown (one row per size, one column per target, and each kshim target's ratio to
the mock); --json writes every measurement.

Exit status: 0 when every measurement ran, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from throughput import (  # noqa: E402  (the sibling script's building blocks)
    MOCK_BROKER, ManagedProcess, PhaseError, log, start_announced, start_kshim,
)

from compat_tests.java_client import build  # noqa: E402

TARGETS = ("kshim v2", "kshim v1", "mock")


def start_mock(args, workdir: str, topics: list[str]) -> "tuple[ManagedProcess, str]":
    """The mock with --java-compat: its own ApiVersions v3+ answer is unreadable to the Java client."""
    argv = [sys.executable, MOCK_BROKER, "--brokers", "1", "--java-compat"]
    for t in topics:
        argv += ["--topic", "%s:%d" % (t, args.partitions)]
    return start_announced("mock", argv, workdir, args)


def measure(java, bootstrap: str, topic: str, seconds: float, size: int) -> dict:
    result = java.run("txn-bench", bootstrap, f"bench-{uuid.uuid4().hex[:8]}", topic, seconds, size,
                      timeout=seconds + 90)
    return result.one("txn-bench")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="timed loop per measurement (default 5)")
    p.add_argument("--sizes", default="1,100,1000",
                   help="records per transaction, comma-separated (default 1,100,1000)")
    p.add_argument("--repeat", type=int, default=1, help="measurements per target and size; best kept (default 1)")
    p.add_argument("--partitions", type=int, default=3, help="partitions of each topic (default 3)")
    p.add_argument("--startup-timeout", type=float, default=60.0)
    p.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of {', '.join(TARGETS)}")
    p.add_argument("--json", help="write every measurement to this file")
    p.add_argument("--peer", metavar="HOST:PORT", help="also measure this running broker (its topics are created by "
                   "the client: auto-creation, or make them beforehand: txnv2-SIZE-REPEAT)")
    args = p.parse_args(argv)
    args.ephemeral = False  # start_kshim (bench/throughput.py): a data dir in the work dir
    sizes = [int(s) for s in args.sizes.split(",")]
    targets = [t for t in TARGETS if t in args.targets.split(",")] + (["peer"] if args.peer else [])
    workdir = tempfile.mkdtemp(prefix="kshim-bench-txnv2-")
    java = build(Path(workdir) / "java")
    runs: list[dict] = []
    ok = True
    for target in targets:
        topics = [f"txnv2-{n}-{i}" for n in sizes for i in range(args.repeat)]
        where = os.path.join(workdir, target.replace(" ", "-"))
        os.makedirs(where)
        if target == "peer":
            proc, bootstrap = None, args.peer
        elif target == "mock":
            args.kshim_arg = []
            proc, bootstrap = start_mock(args, where, topics)
        else:
            args.kshim_arg = ["--no-console"] + (["--transaction-version", "1"] if target == "kshim v1" else [])
            proc, bootstrap = start_kshim(args, where)
        try:
            for n in sizes:
                for i in range(args.repeat):
                    try:
                        r = measure(java, bootstrap, f"txnv2-{n}-{i}", args.seconds, n)
                    except (AssertionError, PhaseError, OSError) as e:
                        log(f"{target}, {n} records/txn: {e}")
                        ok = False
                        continue
                    r.update(target=target, size=n, txns_s=r["txns"] / r["seconds"],
                             records_s=r["records"] / r["seconds"])
                    runs.append(r)
                    log(f"{target}, {n} records/txn: {r['txns_s']:,.0f} txn/s")
        finally:
            if proc is not None:
                proc.stop()
    best = {}
    for r in runs:
        key = (r["target"], r["size"])
        if key not in best or r["txns_s"] > best[key]["txns_s"]:
            best[key] = r
    print(f"Java client (transactions v2 where the broker finalizes it), {args.seconds:g} s per measurement, "
          f"best of {args.repeat}; transactions/s (commitTransaction p50 ms)\n")
    ratios = [t for t in targets if t.startswith("kshim") and "mock" in targets]
    print("| records/txn | " + " | ".join(targets) + "".join(f" | {t} / mock" for t in ratios) + " |")
    print("|---:|" + "---:|" * (len(targets) + len(ratios)))
    for n in sizes:
        cells = []
        for target in targets:
            r = best.get((target, n))
            cells.append("failed" if r is None else f"{r['txns_s']:,.0f} ({r['commit_p50_ms']:.1f})")
        for target in ratios:
            r, m = best.get((target, n)), best.get(("mock", n))
            cells.append(f"{r['txns_s'] / m['txns_s']:.2f}x" if r and m and m["txns_s"] else "-")
        print(f"| {n} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "time": time.time()}, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
