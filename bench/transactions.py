#!/usr/bin/env python3
"""Transactional produce and read_committed read-back: kshim vs. a peer broker, in ONE run.

For every target (kshim and/or a peer) and every workload, on a fresh topic per target,
workload and repetition, with confluent-kafka:

  txn N    a transactional producer (its own transactional.id) runs begin_transaction /
           N x produce() / commit_transaction() until --records records or --seconds have
           passed (whichever first; whole transactions only): transactions/s, records/s and
           p50/p99 of commit_transaction() latency (the call: flushing the transaction's
           records, then EndTxn and its answer). records/s counts every record produced.
           Default sizes 1, 100 and 1000 records of 100-byte values (--sizes, --value-size).
  mixed N  the same with every --abort-every'th transaction (default every 2nd) aborted; its
           records are flushed to the broker first (librdkafka would otherwise drop unsent
           records locally and the abort would prove nothing).
  idempotent  the baseline: the same --records with enable.idempotence and no transactions
           (bench/throughput.py's produce phase); its latency column is not a commit latency,
           so it is left out of the table (--json has the delivery latency).

After each producer, a read_committed consumer (bench/throughput.py's consume phase: assign from
offset 0, large fetches, no group) reads the topic back and reports records/s. It first waits
(bounded) until every partition is stable (last stable offset == high watermark: the markers of
the last transaction are written; they are written after commit_transaction() returns), then
reads to the end. The count must be exactly the committed records: a mismatch is an error
(exit 1), except one known, verified peer limit: librdkafka's mock writes markers but has no
read_committed filtering (LSO == high watermark, no aborted-transaction list in Fetch), so on the
mock a mixed run reads the aborted records too; when it reads exactly committed + aborted that is
reported as "aborted visible" and no read figure or ratio is given for it.

Records are spread over the partitions at random (sticky partitioning off, as keyed records
would be): a transaction of 100 or more writes to every partition, so it ends with one marker per
partition. The transaction rate of small transactions is bound by round trips (AddPartitionsToTxn,
Produce, EndTxn, and the broker's own state writes and markers), not by bytes.

Targets (as bench/throughput.py): kshim started here (`python -m kshim serve`, stopped by PID),
or --kshim HOST:PORT; --peer-mock starts bench/mock_cluster.py --brokers 1 (librdkafka's mock,
stopped by PID), --peer HOST:PORT takes any Kafka bootstrap. Only 127.0.0.1.

    python bench/transactions.py --peer-mock --repeat 3 [--json results.json]

Prints one table per workload: kshim, peer and the ratio kshim/peer (best of --repeat; produce
and read picked independently). --json FILE writes every repetition. Exit status: 0 when every
phase succeeded and every count matched, 1 otherwise, 2 on bad usage.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import traceback
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition, libversion
from confluent_kafka import version as client_version

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import (  # noqa: E402  (the sibling script's building blocks)
    MIB, MOCK_BROKER, ClientErrors, PhaseError, consume_phase, deliveries, ensure_topic, fmt, log, make_values,
    parse_bootstrap, percentile, produce_phase, producer_conf, start_kshim, start_mock, wait_tcp,
)

COLUMNS = [  # header, key in a phase result, format
    ("txn/s", "txns_s", ",.0f"),
    ("records/s", "records_s", ",.0f"),
    ("commit p50 ms", "commit_p50_ms", ".2f"),
    ("commit p99 ms", "commit_p99_ms", ".2f"),
    ("read records/s", "read_records_s", ",.0f"),
]
UNSUPPORTED = "aborted visible"


def left(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise PhaseError("deadline hit")
    return remaining


def open_producer(target: dict, topic: str, args, extra: dict) -> "tuple[Producer, dict, int]":
    state, on_delivery = deliveries()
    conf = producer_conf(args, target["bootstrap"], ClientErrors(target["name"] + " producer"))
    # sticky.partitioning.linger.ms 0: records spread over the partitions at random, as keyed ones
    # would be (a transaction of 100 writes to every partition), and evenly enough that the mock,
    # which keeps ~5 MB per partition, still holds all of --records
    conf.update({"client.id": "kshim-bench-txn", "acks": "-1", "enable.idempotence": True,
                 "sticky.partitioning.linger.ms": 0, "on_delivery": on_delivery})
    conf.update(extra)
    producer = Producer(conf)
    nparts = ensure_topic(producer, topic, target["kind"], args, target["bootstrap"], time.monotonic() + 60)
    return producer, state, nparts


def transactions(producer: Producer, topic: str, size: int, abort_every: int, args, values, state: dict) -> dict:
    """begin / produce x size / commit (or flush + abort, every `abort_every`th if not 0)
    until --records or --seconds; bounded by --timeout."""
    deadline = time.monotonic() + args.timeout
    producer.init_transactions(left(deadline))
    commit_lat, abort_lat = [], []
    produced = committed = txns = 0
    pool = len(values)
    t0 = time.perf_counter()
    stop = t0 + args.seconds
    while produced + size <= args.records and (txns == 0 or time.perf_counter() < stop):
        producer.begin_transaction()
        for i in range(produced, produced + size):
            while True:
                try:
                    producer.produce(topic, values[i % pool])
                    break
                except BufferError:
                    producer.poll(0.05)
                    left(deadline)
        produced += size
        producer.poll(0)
        if state["errors"]:
            raise PhaseError("delivery failed: %s" % state["first_error"])
        aborting = abort_every and txns % abort_every == abort_every - 1
        if aborting:
            if producer.flush(left(deadline)):
                raise PhaseError("records of a transaction to abort not delivered in time")
            t = time.perf_counter()
            producer.abort_transaction(left(deadline))
            abort_lat.append(time.perf_counter() - t)
        else:
            t = time.perf_counter()
            producer.commit_transaction(left(deadline))
            commit_lat.append(time.perf_counter() - t)
            committed += size
        txns += 1
    elapsed = time.perf_counter() - t0
    producer.poll(0)
    if state["delivered"] != produced or state["errors"]:
        raise PhaseError("%d of %d records delivered, %d failed (%s)"
                         % (state["delivered"], produced, state["errors"], state["first_error"]))
    commit_lat.sort()
    abort_lat.sort()
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    return {"txns": txns, "records": produced, "committed_records": committed, "aborted_txns": len(abort_lat),
            "seconds": elapsed, "txns_s": txns / elapsed, "records_s": produced / elapsed,
            "commit_p50_ms": ms(percentile(commit_lat, 0.5)), "commit_p99_ms": ms(percentile(commit_lat, 0.99)),
            "abort_p50_ms": ms(percentile(abort_lat, 0.5)), "abort_p99_ms": ms(percentile(abort_lat, 0.99))}


def wait_stable(bootstrap: str, topic: str, nparts: int, deadline: float) -> float:
    """Wait until every partition's last stable offset reaches its high watermark: the markers
    of the last transaction are written (after commit_transaction() returned). Seconds waited."""
    t0 = time.monotonic()
    clients = {iso: Consumer({"bootstrap.servers": bootstrap, "group.id": "kshim-bench-wm", "isolation.level": iso})
               for iso in ("read_committed", "read_uncommitted")}
    try:
        while True:
            ends = {iso: [c.get_watermark_offsets(TopicPartition(topic, p), timeout=left(deadline), cached=False)[1]
                          for p in range(nparts)] for iso, c in clients.items()}
            if ends["read_committed"] == ends["read_uncommitted"]:
                return time.monotonic() - t0
            if time.monotonic() + 0.01 >= deadline:
                raise PhaseError("partitions not stable at the deadline: LSO %s, high watermark %s"
                                 % (ends["read_committed"], ends["read_uncommitted"]))
            time.sleep(0.01)
    finally:
        for c in clients.values():
            c.close()


def run_phase(target: dict, topic: str, phase: dict, args, values) -> dict:
    label = "%s %s" % (target["name"], phase["name"])
    txn_id = "kshim-bench-" + uuid.uuid4().hex[:12]  # one per run
    extra = {} if phase["size"] is None else {
        "transactional.id": txn_id, "transaction.timeout.ms": int(args.timeout * 1000) + 30000}
    producer, state, nparts = open_producer(target, topic, args, extra)
    try:
        if phase["size"] is None:
            # one record first, outside the clock: the idempotent producer's id is acquired by then
            producer.produce(topic, values[0])
            if producer.flush(min(30.0, args.timeout)) or state["delivered"] != 1:
                raise PhaseError("%s: warm-up record not delivered (%s)" % (label, state["first_error"]))
            state.update(delivered=0, t_last=None)
            state["latencies"].clear()
            res = produce_phase(producer, topic, argparse.Namespace(**{**vars(args), "messages": args.records}),
                                values, state)
            res = {"records": res["messages"] + 1, "committed_records": res["messages"] + 1,
                   "records_s": res["msgs_s"], "seconds": res["seconds"], "delivery_p50_ms": res["p50_ms"],
                   "delivery_p99_ms": res["p99_ms"]}
        else:
            res = transactions(producer, topic, phase["size"], phase["abort_every"], args, values, state)
    except KafkaException as e:
        producer.purge()
        raise PhaseError("%s: %s" % (label, e))
    finally:
        producer.flush(1)
        del producer
    res["transactional_id"] = txn_id if phase["size"] else None
    res["settle_s"] = wait_stable(target["bootstrap"], topic, nparts, time.monotonic() + args.timeout)
    read = consume_phase(target["bootstrap"], topic, nparts, res["committed_records"], args, label)
    res.update(topic=topic, read_records=read["messages"], read_records_s=read["msgs_s"], read_seconds=read["seconds"])
    expected, got = res["committed_records"], read["messages"]
    if got == expected:
        res["check"] = "ok"
    elif target["kind"] == "mock" and phase["abort_every"] and got == res["records"]:
        res["check"] = UNSUPPORTED
        res["read_records_s"] = None
    else:
        res["check"] = "MISMATCH"
    log("%s: %s txn/s, %.0f records/s, commit p50/p99 %s/%s ms; read %d of %d committed records (%s), %.0f/s"
        % (label, fmt(res.get("txns_s"), ".0f"), res["records_s"], fmt(res.get("commit_p50_ms"), ".2f"),
           fmt(res.get("commit_p99_ms"), ".2f"), got, expected, res["check"], read["msgs_s"]))
    return res


def best(reps: list) -> "dict | None":
    if not reps:
        return None
    produce = max(reps, key=lambda r: r["records_s"])
    read = max(reps, key=lambda r: r["read_records_s"] or 0)
    return {**produce, "read_records_s": read["read_records_s"], "check": ", ".join(sorted({r["check"] for r in reps}))}


def table(phase: dict, targets: list) -> str:
    rows = [["target"] + [c[0] for c in COLUMNS] + ["read check"]]
    bests = {}
    for t in targets:
        b = bests[t["name"]] = t["best"].get(phase["name"])
        if b is None:
            rows.append([t["name"], "FAILED"] + ["-"] * len(COLUMNS))
        else:
            rows.append([t["name"]] + [fmt(b.get(key), spec) for _, key, spec in COLUMNS]
                        + ["%s (%d/%d)" % (b["check"], b["read_records"], b["committed_records"])])
    if len(targets) == 2:
        k, p = bests[targets[0]["name"]], bests[targets[1]["name"]]
        ratio = lambda key: k and p and k.get(key) and p.get(key) and k[key] / p[key]  # noqa: E731
        phase["ratios"] = {key: ratio(key) or None for _, key, _ in COLUMNS}
        rows.append(["ratio"] + [fmt(phase["ratios"][key], ".2f") + ("x" if phase["ratios"][key] else "")
                                 for _, key, _ in COLUMNS] + [""])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join([r[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(r[1:], widths[1:])])
                     for r in rows)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kshim", metavar="HOST:PORT", help="use a running kshim instead of starting one")
    ap.add_argument("--no-kshim", action="store_true", help="leave kshim out")
    ap.add_argument("--kshim-arg", action="append", default=[], help="extra argument for the started 'kshim serve'")
    ap.add_argument("--ephemeral", action="store_true",
                    help="start kshim with --ephemeral (its log on tmpfs, deleted at exit) instead of a data dir")
    peer = ap.add_mutually_exclusive_group()
    peer.add_argument("--peer", metavar="HOST:PORT[,...]", help="peer Kafka bootstrap")
    peer.add_argument("--peer-mock", action="store_true", help="start %s --brokers 1 as the peer" % MOCK_BROKER)
    ap.add_argument("--sizes", default="1,100,1000", help="records per transaction, comma-separated (default 1,100,1000)")
    ap.add_argument("--mixed-size", type=int, default=100, help="records per transaction of the mixed run (default 100)")
    ap.add_argument("--abort-every", type=int, default=2, help="mixed run: abort every Nth transaction (default 2)")
    ap.add_argument("--no-idempotent", action="store_true", help="leave out the idempotent, non-transactional baseline")
    ap.add_argument("--records", type=int, default=100000, help="records per run at most (default 100000)")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds per transactional run at most (default 2)")
    ap.add_argument("--value-size", type=int, default=100, help="value bytes (default 100)")
    ap.add_argument("--partitions", type=int, default=4, help="partitions per topic (default 4)")
    ap.add_argument("--linger-ms", type=float, default=5, help="producer linger.ms (default 5)")
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--repeat", type=int, default=1, help="runs per target and workload, best of N (default 1)")
    ap.add_argument("--timeout", type=float, default=60.0, help="deadline per phase, seconds (default 60)")
    ap.add_argument("--startup-timeout", type=float, default=30.0, help="deadline for a started broker (default 30)")
    ap.add_argument("--json", metavar="FILE", help="write every repetition as JSON to FILE")
    args = ap.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        args.kshim = args.kshim and parse_bootstrap(args.kshim, "--kshim")
        args.peer = args.peer and parse_bootstrap(args.peer, "--peer")
    except ValueError as e:
        ap.error(str(e))
    if min(args.sizes + [args.mixed_size, args.abort_every, args.records, args.value_size, args.partitions,
                         args.repeat]) <= 0 or args.seconds <= 0 or args.timeout <= 0:
        ap.error("sizes, counts, --seconds and --timeout must be positive")
    if max(args.sizes + [args.mixed_size]) > args.records:
        ap.error("--records must hold at least one transaction of every size")
    if args.no_kshim and not (args.peer or args.peer_mock) or args.kshim and args.no_kshim:
        ap.error("nothing to benchmark, or --kshim with --no-kshim")
    # what throughput.py's building blocks read
    args.acks, args.batch_size, args.buffer_mb, args.poll_every = "-1", MIB, 64, 64
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # unwind through `finally`: the brokers are stopped
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    phases = [{"name": "txn %d" % n, "size": n, "abort_every": 0} for n in args.sizes]
    phases.append({"name": "mixed %d" % args.mixed_size, "size": args.mixed_size, "abort_every": args.abort_every})
    if not args.no_idempotent:
        phases.append({"name": "idempotent", "size": None, "abort_every": 0})
    run_id = time.strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:6]
    targets = ([] if args.no_kshim else [{"name": "kshim", "kind": "kshim", "bootstrap": args.kshim}]) + (
        [{"name": "mock" if args.peer_mock else "peer", "kind": "mock" if args.peer_mock else "peer",
          "bootstrap": args.peer}] if args.peer or args.peer_mock else [])
    for t in targets:
        t.update(reps=[], best={}, error=None, pid=None, topics={
            (ph["name"], r): "btx-%s-%s-%s-r%d" % (t["name"], run_id, ph["name"].replace(" ", ""), r)
            for ph in phases for r in range(args.repeat)})
    workdir = tempfile.mkdtemp(prefix="kshim-txn-bench-")
    values = make_values(args.value_size)
    procs = []
    try:
        for t in targets:
            try:
                if t["kind"] == "kshim" and not t["bootstrap"]:
                    mp, t["bootstrap"] = start_kshim(args, workdir)
                elif t["kind"] == "mock":
                    mp, t["bootstrap"] = start_mock(args, workdir, list(t["topics"].values()))
                else:
                    wait_tcp(t["bootstrap"], time.monotonic() + args.startup_timeout)
                    continue
                procs.append(mp)
                t["pid"] = mp.pid
            except PhaseError as e:
                t["error"] = "startup: %s" % e
                log("%s FAILED: %s" % (t["name"], t["error"]))
        # repetitions outermost, targets innermost: drift on a shared machine hits both alike
        for rep in range(args.repeat):
            for ph in phases:
                for t in targets:
                    if t["error"]:
                        continue
                    try:
                        res = run_phase(t, t["topics"][(ph["name"], rep)], ph, args, values)
                    except (PhaseError, KafkaException) as e:
                        t["error"] = "%s, run %d: %s" % (ph["name"], rep + 1, e)
                        log("%s FAILED: %s" % (t["name"], t["error"]))
                        continue
                    t["reps"].append({"phase": ph["name"], "rep": rep + 1, **res})
    except BaseException as e:
        traceback.clear_frames(e.__traceback__)  # clients go before their brokers
        raise
    finally:
        for mp in reversed(procs):
            log("stopping %s (pid %d)" % (mp.name, mp.pid))
            mp.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    for t in targets:
        t["best"] = {ph["name"]: best([r for r in t["reps"] if r["phase"] == ph["name"]]) for ph in phases}
    print("\n%s B values, %d partitions, acks=all, linger.ms=%g, best of %d; run: up to %d records or %g s; "
          "commit = commit_transaction() call; read = read_committed consumer from offset 0"
          % (args.value_size, args.partitions, args.linger_ms, args.repeat, args.records, args.seconds))
    for t in targets:
        print("  %-6s %s%s" % (t["name"], t["bootstrap"], " (started here, pid %d)" % t["pid"] if t["pid"] else ""))
    for ph in phases:
        what = {None: "idempotent producer, no transactions"}.get(
            ph["size"], "every transaction committed" if not ph["abort_every"] else
            "1 in %d transactions aborted (its records flushed first)" % ph["abort_every"])
        print("\n== %s: %s ==\n%s" % (ph["name"], what, table(ph, targets)))
    mismatches = ["%s %s run %d: read %d, expected %d" % (t["name"], r["phase"], r["rep"], r["read_records"],
                                                         r["committed_records"])
                  for t in targets for r in t["reps"] if r["check"] == "MISMATCH"]
    notes = [("%s FAILED: %s" % (t["name"], t["error"])) for t in targets if t["error"]] + \
        ["COUNT MISMATCH: " + m for m in mismatches]
    if any(r["check"] == UNSUPPORTED for t in targets for r in t["reps"]):
        notes.append("'%s': the mock has no read_committed filtering; its read-back of the mixed run returned "
                     "the aborted records too, so it has no read figure there" % UNSUPPORTED)
    print("\n" + "\n".join(notes) if notes else "")
    ok = not mismatches and not any(t["error"] for t in targets)
    if args.json:
        doc = {"run_id": run_id, "ok": ok, "params": {k: v for k, v in vars(args).items() if k not in ("json",)},
               "env": {"python": platform.python_version(), "confluent_kafka": client_version(),
                       "librdkafka": libversion()[0], "cpus": os.cpu_count(), "platform": platform.platform()},
               "phases": phases,
               "targets": [{k: t[k] for k in ("name", "kind", "bootstrap", "pid", "error", "reps", "best")}
                           for t in targets]}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True, default=str)
        log("wrote %s" % args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
