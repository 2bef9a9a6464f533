"""Compaction on a 3-broker cluster (`kshim serve --brokers 3`): every replica cleans its own log,
a cleaned log still serves follower fetches, and a deposed leader holding records the new leader
never had truncates them through OffsetForLeaderEpoch against a cleaned log.

The records are checked in each broker's own segment files: the replicas must agree with what
acks=all acknowledged, whatever each one's cleaning did.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import wait_until
from compat_tests.test_compaction import produce as produce_to
from compat_tests.test_failover import partitions_of
from wire.records import decode_records, iter_batches

pytestmark = pytest.mark.process
TOPIC = "compacted-replicated"
KEYS = 50
DEADLINE_S = 60.0


def produce(bootstrap: str, records: list[tuple[bytes, bytes]], acks: str = "all") -> dict[int, tuple]:
    """{offset: (key, value)} of the acknowledged records (all of them must be)."""
    return produce_to(bootstrap, records, TOPIC, acks=acks, **{
        "enable.idempotence": acks == "all", "message.timeout.ms": 30000,
        "batch.num.messages": 50})  # small batches: segments of 8 KiB roll


def on_disk(cluster: Cluster, node: int) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every data record in a broker's replica, from its segment files."""
    out = []
    for seg in sorted((cluster.data_dir / f"broker-{node}" / f"{TOPIC}-0").glob("*.log")):
        data = seg.read_bytes()
        for pos, h in iter_batches(data, strict=False):
            if not h.is_control:
                out.extend((r.offset, r.key, r.value) for r in decode_records(data[pos:pos + h.size]))
    return out


def active_base(cluster: Cluster, node: int) -> int:
    return max(int(f.name[:20]) for f in (cluster.data_dir / f"broker-{node}" / f"{TOPIC}-0").glob("*.log"))


def compact(cluster: Cluster) -> list[dict]:
    result = run_ctl(cluster.data_dir, "compact", TOPIC)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def in_sync(cluster: Cluster, nodes: int = 3) -> dict:
    return wait_until(lambda: (p := partitions_of(cluster.status(), TOPIC)[0]) and p["leader"] >= 0
                      and len(p["isr"]) == nodes and p, DEADLINE_S, interval=0.2, message=f"{nodes} replicas in sync")


def replicas_at(cluster: Cluster, end: int) -> None:
    wait_until(lambda: all(max((o for o, _, _ in on_disk(cluster, n)), default=-1) >= end - 1 for n in range(3)),
               DEADLINE_S, interval=0.2, message=f"every replica holding offsets up to {end}")


def check_replica(records: list[tuple[int, bytes, bytes]], acked: dict[int, tuple], cleaned_below: int) -> None:
    """What a replica of a compacted log holds: records only as acknowledged, at their offsets, in
    order; below its cleaned offset one per key (the latest written there); above, everything."""
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    for o, k, v in records:
        assert acked.get(o) == (k, v), f"offset {o}: {(k, v)} was never acknowledged there ({acked.get(o)})"
    latest = {}
    for o in sorted(acked):
        if o < cleaned_below:
            latest[acked[o][0]] = o
    assert sorted(o for o in offsets if o < cleaned_below) == sorted(latest.values())
    assert [o for o in offsets if o >= cleaned_below] == [o for o in sorted(acked) if o >= cleaned_below]


def updates(start: int, n: int) -> list[tuple[bytes, bytes]]:
    return [(f"key-{i % KEYS}".encode(), f"value-{i}".encode() + b"." * 40) for i in range(start, start + n)]


def test_replicas_clean_their_own_logs_serve_followers_and_truncate_after_a_leader_change(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3, "--log-cleaner-backoff-ms", "3600000")) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
        admin.create_topics([NewTopic(TOPIC, 1, 3, config={"cleanup.policy": "compact", "segment.bytes": "8192",
                                                            "min.insync.replicas": "2"})])[TOPIC].result(30)
        in_sync(cluster)
        acked = produce(cluster.bootstrap, updates(0, 3000))
        replicas_at(cluster, max(acked) + 1)

        # every replica cleans its own log, leader and followers alike
        rows = compact(cluster)
        assert sorted(r["node"] for r in rows) == [0, 1, 2], rows
        for n in range(3):
            check_replica(on_disk(cluster, n), acked, active_base(cluster, n))
            assert len(on_disk(cluster, n)) < 1000  # cleaned: 3,000 updates of 50 keys

        # the leader, cut from its followers, takes acks=1 records they never get; then it dies and
        # a follower becomes leader and writes other records at those offsets
        old = partitions_of(cluster.status(), TOPIC)[0]
        leader = old["leader"]
        assert run_ctl(cluster.data_dir, "isolate", str(leader)).returncode == 0
        port = next(b["port"] for b in cluster.status()["brokers"] if b["id"] == leader)
        divergent = produce(f"127.0.0.1:{port}", [(b"key-0", f"divergent-{i}".encode()) for i in range(20)], acks="1")
        assert min(divergent) == max(acked) + 1
        assert run_ctl(cluster.data_dir, "kill", str(leader)).returncode == 0
        new = wait_until(lambda: (p := partitions_of(cluster.status(), TOPIC)[0])["leader"] not in (leader, -1) and p,
                         DEADLINE_S, interval=0.2, message="a new leader")
        assert new["leader_epoch"] > old["leader_epoch"]
        assert run_ctl(cluster.data_dir, "heal", str(leader)).returncode == 0
        others = ",".join(f"127.0.0.1:{b['port']}" for b in cluster.status()["brokers"] if b["id"] != leader)
        acked.update(produce(others, updates(3000, 1500)))
        assert min(divergent) in acked  # the new leader wrote over the offsets the old one had taken

        # the old leader comes back: it truncates what the new leader never had and catches up,
        # fetching from a leader whose log is cleaned (gaps) and cleaned again now
        compact_live = run_ctl(cluster.data_dir, "compact", TOPIC)  # the dead broker is reported, not fatal
        assert compact_live.returncode in (0, 1), compact_live.stderr
        assert run_ctl(cluster.data_dir, "start", str(leader)).returncode == 0
        in_sync(cluster)
        replicas_at(cluster, max(acked) + 1)
        rows = compact(cluster)
        assert sorted(r["node"] for r in rows) == [0, 1, 2], rows
        for n in range(3):
            records = on_disk(cluster, n)
            assert not [r for r in records if r[2].startswith(b"divergent")], f"broker {n} kept divergent records"
            check_replica(records, acked, active_base(cluster, n))
            assert max(o for o, _, _ in records) == max(acked)

        # a replica rebuilt from nothing copies the leader's cleaned log, gaps and all
        follower = next(n for n in range(3) if n != partitions_of(cluster.status(), TOPIC)[0]["leader"])
        assert run_ctl(cluster.data_dir, "kill", str(follower)).returncode == 0
        wait_until(lambda: not cluster.broker(follower)["alive"], DEADLINE_S, interval=0.2, message="follower down")
        leader_now = partitions_of(cluster.status(), TOPIC)[0]["leader"]
        for f in (cluster.data_dir / f"broker-{follower}" / f"{TOPIC}-0").iterdir():
            f.unlink()
        (cluster.data_dir / f"broker-{follower}" / f"{TOPIC}-0").rmdir()
        assert run_ctl(cluster.data_dir, "start", str(follower)).returncode == 0
        in_sync(cluster)
        wait_until(lambda: on_disk(cluster, follower) == on_disk(cluster, leader_now), DEADLINE_S, interval=0.2,
                   message="the rebuilt replica holding exactly the leader's records")
        assert len(on_disk(cluster, follower)) < len(acked)  # it got the cleaned log, not every update
        del admin
