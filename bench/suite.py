#!/usr/bin/env python3
"""Issue 18's rows in one command: every benchmark, side by side with a peer, one summary table.

    python bench/suite.py [--peer HOST:PORT] [--json results.json] [--quick]

Runs, each as its own script (each prints its full table on the way; see docs/benchmarks.md):
- throughput, durable log and `--ephemeral`, 1 KiB records; small records (100 B); the CPU per
  200 MB each side spent, and the kernel's own floor for it (bench/throughput.py); the client's
  own produce ceiling against a broker that only acknowledges (bench/null_broker.py);
- 1,000 partitions against 4, kshim's own ratio (bench/throughput.py --partitions);
- latency at 2,000 and 20,000 records/s, produce-to-ack and end-to-end (bench/latency.py);
- acks=all against acks=1 on a 3-broker cluster with RF 3, throughput and p99 at 2,000 records/s
  (bench/replication.py; kshim alone: the target is relative to kshim's own acks=1);
- transactions of 1, 100 and 1000 records (bench/transactions.py);
- 10,000 partitions: creation, a sampled produce, restarts (bench/restart.py; kshim alone);
- small requests per second, ApiVersions, Metadata, FindCoordinator, Heartbeat and OffsetCommit,
  pipelined, one at a time and over 64 connections, from a raw client (bench/requests.py).
The peer is librdkafka's mock broker started by each script (`--peer-mock`) unless `--peer` names a
running broker. The summary gives each row's figure, the peer's, the ratio and the issue's target;
`--json` writes it with every script's own JSON. `--quick` runs each briefly (the CI smoke: it
checks that the command runs and prints its table, never a speed; 100 partitions stand for 1,000
and for the restart's 10,000). Exit 1 if a script failed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg: str) -> None:
    print("[suite %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def run_script(name: str, argv: list[str], out: str, timeout: float) -> dict | None:
    """Run bench/<name> with --json out; its output goes to ours. None if it failed."""
    cmd = [sys.executable, os.path.join(HERE, name), *argv, "--json", out]
    log(" ".join(cmd[1:]))
    try:
        done = subprocess.run(cmd, timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"{name}: no result within {timeout:.0f} s")
        return None
    try:
        with open(out) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = None
    if done.returncode != 0:
        log(f"{name}: exit status {done.returncode}")
        return None if doc is None else {**doc, "failed": True}
    return doc


def throughput_best(doc: dict | None, name: str) -> dict | None:
    for t in (doc or {}).get("targets", []):
        if t["name"] == name:
            return t.get("best")
    return None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt(v, spec: str = ".2f", unit: str = "") -> str:
    return "-" if v is None else format(v, spec) + unit


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", metavar="HOST:PORT", help="a running peer broker instead of librdkafka's mock")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--quick", action="store_true", help="brief runs: the command works, the figures mean nothing")
    ap.add_argument("--restart-partitions", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, help="repetitions per script (best of N)")
    args = ap.parse_args(argv)
    peer = ["--peer", args.peer] if args.peer else ["--peer-mock"]
    q = args.quick
    repeat = ["--repeat", "1" if q else str(args.repeat)]
    msgs = ["--messages", "2000" if q else "200000"]
    work = tempfile.mkdtemp(prefix="kshim-suite-")
    docs: dict[str, dict | None] = {}
    limit = 300 if q else 3600

    def tp(key: str, extra: list[str]) -> None:
        docs[key] = run_script("throughput.py", [*peer, *repeat, *msgs, "--restart-partitions", "0", *extra],
                               os.path.join(work, key + ".json"), limit)

    tp("durable", ["--floor-mb", "5" if q else "100", "--ceiling"])
    tp("ephemeral", ["--ephemeral", "--floor-mb", "0"])
    tp("small", ["--ephemeral", "--floor-mb", "0", "--value-size", "100", "--ceiling"])
    tp("p4", ["--partitions", "4", "--linger-ms", "5", "--floor-mb", "0"])
    many = 100 if q else 1000  # quick: the row runs, a topic of 1,000 partitions takes half a minute to make
    tp("p1000", ["--partitions", str(many), "--linger-ms", "5", "--floor-mb", "0"])
    docs["latency"] = run_script("latency.py", [*peer, *repeat, "--seconds", "1" if q else "5", "--ephemeral"],
                                 os.path.join(work, "latency.json"), limit)
    docs["replication"] = run_script("replication.py", [*repeat, *(["--messages", "2000", "--latency-messages", "400"]
                                                                   if q else [])],
                                     os.path.join(work, "replication.json"), limit)
    docs["transactions"] = run_script("transactions.py", [*peer, *repeat, "--no-idempotent",
                                                          *(["--seconds", "0.5", "--records", "3000"] if q else [])],
                                      os.path.join(work, "transactions.json"), limit)
    docs["restart"] = run_script("restart.py", ["--partitions", "100" if q else str(args.restart_partitions)],
                                 os.path.join(work, "restart.json"), limit)
    docs["requests"] = run_script("requests.py", [*(["--peer", args.peer] if args.peer else []),
                                                  *(["--quick"] if q else repeat)],
                                  os.path.join(work, "requests.json"), limit)

    rows: list[tuple[str, str, str, str, str]] = []  # row, kshim, peer, ratio, target

    def add(row: str, k, p, r, target: str, spec: str = ".1f", unit: str = "") -> None:
        rows.append((row, fmt(k, spec, unit), fmt(p, spec, unit), fmt(r, ".2f", "x"), target))

    for key, label in (("durable", "durable log, 1 KiB"), ("ephemeral", "ephemeral, 1 KiB"),
                       ("small", "ephemeral, 100 B")):
        k, p = throughput_best(docs[key], "kshim"), throughput_best(docs[key], "peer")
        for phase, target in (("produce", ">= 1.0x"), ("consume", ">= 1.2x")):
            kv = k and k[phase]["mb_s"]
            pv = p and p[phase]["mb_s"]
            add(f"{phase} MB/s, {label}", kv, pv, ratio(kv, pv), target)
    for key, label in (("durable", "durable log, 1 KiB"), ("small", "ephemeral, 100 B")):
        k, p, c = (throughput_best(docs[key], name) for name in ("kshim", "peer", "ceiling"))
        cv = c and c["produce"]["mb_s"]
        kv, pv = ratio(k and k["produce"]["mb_s"], cv), ratio(p and p["produce"]["mb_s"], cv)
        add(f"produce, share of the client's ceiling (a broker that only acknowledges), {label}", kv, pv,
            ratio(kv, pv), "(ceiling: %s MB/s, bench/null_broker.py)" % fmt(cv, ".0f"), ".2f")
    k, p = throughput_best(docs["durable"], "kshim"), throughput_best(docs["durable"], "peer")
    for phase, target in (("produce", "<= 0.2 s"), ("consume", "<= 0.05 s")):
        kv = k and k[phase].get("cpu_per_200mb")
        pv = p and p[phase].get("cpu_per_200mb")
        add(f"broker CPU s per 200 MB {phase}d, durable", kv, pv, ratio(kv, pv), target, ".3f")
    for key, label in (("durable", "durable log"), ("ephemeral", "ephemeral")):
        k, p = throughput_best(docs[key], "kshim"), throughput_best(docs[key], "peer")
        for who in ("client", "broker"):
            kv = k and k["produce"].get(f"{who}_cores")
            pv = p and p["produce"].get(f"{who}_cores")
            add(f"{who} CPU cores while producing, {label}", kv, pv, None,
                "(the 2 cores shared: client + broker near 2 is the machine's limit)", ".2f")
    floor = (docs["durable"] or {}).get("floor")
    if floor:
        add("kernel floor: CPU s per 200 MB sent (sendfile) / received", floor["sendfile"]["sender_s"],
            floor["sendfile"]["receiver_s"], None, "(no broker: the first column is the send, the second the receive)",
            ".3f")
        page = floor.get("pagecache")
        if page:
            add("kernel floor: CPU s per 200 MB written into new page-cache pages, fresh / just-freed memory",
                page["fresh"]["cpu_s"], page["recycled"]["cpu_s"], None,
                "(no broker: the durable log pays the first column for every byte stored, the mock neither)", ".3f")
    k4, k1000 = throughput_best(docs["p4"], "kshim"), throughput_best(docs["p1000"], "kshim")
    p4, p1000 = throughput_best(docs["p4"], "peer"), throughput_best(docs["p1000"], "peer")
    kv = ratio(k1000 and k1000["produce"]["mb_s"], k4 and k4["produce"]["mb_s"])
    pv = ratio(p1000 and p1000["produce"]["mb_s"], p4 and p4["produce"]["mb_s"])
    add(f"produce at {many:,} partitions / at 4", kv, pv, None, ">= 0.8x at 1,000 (kshim's own)", ".2f")
    for rate, by in ((docs["latency"] or {}).get("best") or {}).items():
        k, p = by.get("kshim"), by.get("peer")
        for key, what in (("ack_p50_ms", "produce-to-ack p50"), ("ack_p99_ms", "produce-to-ack p99"),
                          ("e2e_p50_ms", "end-to-end p50"), ("e2e_p99_ms", "end-to-end p99")):
            kv, pv = k and k[key], p and p[key]
            add(f"{what} ms at {rate}/s", kv, pv, ratio(kv, pv), "<= 1.2x", ".2f")
    rep = docs["replication"]
    if rep:
        b, lat = rep["best"], rep["best_latency"]
        add("acks=all / acks=1 MB/s, RF 3 (kshim's own)", b["all"]["mb_s"], b["1"]["mb_s"],
            ratio(b["all"]["mb_s"], b["1"]["mb_s"]), ">= 0.5x")
        add(f"acks=all / acks=1 p99 ms at {rep['latency_rate']}/s, RF 3", lat["all"]["p99_ms"], lat["1"]["p99_ms"],
            ratio(lat["all"]["p99_ms"], lat["1"]["p99_ms"]), "<= 2x", ".2f")
    txn = docs["transactions"]
    if txn:
        targets = {t["name"]: t for t in txn.get("targets", [])}
        other = targets.get("mock") or targets.get("peer") or {}
        for size in (1, 100, 1000):
            k = ((targets.get("kshim") or {}).get("best") or {}).get(f"txn {size}")
            p = (other.get("best") or {}).get(f"txn {size}")
            kv, pv = k and k.get("txns_s"), p and p.get("txns_s")
            add(f"transactions/s, {size} records each", kv, pv, ratio(kv, pv), ">= 0.8x", ".0f")
    restart = docs["restart"]
    if restart:
        add(f"create {restart['partitions']} partitions, CreateTopics of 1,000, s", restart.get("create_s"), None, None,
            "< 30 s at 10,000", ".2f")
        add(f"a record into each of 500 sampled of {restart['partitions']} partitions, read back",
            1.0 if restart.get("sample_ok") else 0.0, None, None, "1 = yes", ".0f")
        add(f"ready after a clean stop, {restart['partitions']} partitions, s", restart["clean_ready_s"], None, None,
            "< 5 s", ".2f")
        add(f"SIGTERM to exit, {restart['partitions']} partitions, s", restart["sigterm_s"], None, None, "< 2 s", ".2f")
        add(f"ready after kill -9, {restart['partitions']} partitions, s", restart["dirty_ready_s"], None, None,
            "serves while the tails recover", ".2f")
        add(f"first ack after kill -9 (its partition recovered first), {restart['partitions']} partitions, s",
            restart.get("dirty_serve_s"), None, None, "serves while the tails recover", ".2f")
        add("records intact after clean and kill -9 restarts", 1.0 if restart["records_ok"] else 0.0, None, None,
            "1 = yes", ".0f")
    for row in (docs["requests"] or {}).get("best", []):
        kv, pv = row.get("kshim"), row.get("mock", row.get("peer"))
        add(f"requests/s, {row['api']}, {row['mode']}", kv, pv, ratio(kv, pv), "(issue 34: per-request cost)", ",.0f")

    print()
    print("issue 18 summary (%s; peer: %s)" % ("quick run: figures mean nothing" if q else "best of %d" % args.repeat,
                                              args.peer or "librdkafka's mock"))
    print("| row | kshim | peer | ratio | target |")
    print("|---|---:|---:|---:|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    failed = [k for k, d in docs.items() if d is None or d.get("failed")]
    if failed:
        print("failed: " + ", ".join(failed))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": [dict(zip(("row", "kshim", "peer", "ratio", "target"), r)) for r in rows],
                       "scripts": docs, "failed": failed}, f, indent=2, sort_keys=True, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
