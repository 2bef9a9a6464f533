"""Compacted topics (docs/compaction.md) as clients see them: confluent-kafka produces (plain and
transactional), kafka-python and confluent-kafka read back under both isolation levels; `kshim ctl
compact` cleans now so the outcome is deterministic."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError

from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import RawConnection, consume_all
from wire.errors import ErrorCode
from wire.records import CONTROL_ABORT, encode_batch, iter_batches, read_marker

pytestmark = pytest.mark.process
INVALID_RECORD = 87
KEYS, UPDATES = 1000, 100_000


def create(broker: KshimProcess, name: str, configs: dict[str, str]) -> None:
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        a.create_topics([NewTopic(name, 1, 1, topic_configs={"cleanup.policy": "compact", **configs})])
    finally:
        a.close()


def ctl_compact(broker: KshimProcess, topic: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(broker.data_dir), "compact", topic],
                          capture_output=True, text=True, timeout=300)


def produce(broker: KshimProcess | str, records: list[tuple[bytes, bytes | None]], topic: str,
            **conf) -> dict[int, tuple]:
    """confluent-kafka, acks=all unless ``conf`` says otherwise, to partition 0 of ``topic`` on a
    broker (or a bootstrap string): {offset: (key, value)} of every acknowledged record (all must be)."""
    acked: dict[int, tuple] = {}
    errors: list = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = (msg.key(), msg.value())

    bootstrap = broker if isinstance(broker, str) else broker.bootstrap
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 200,
                  "log_level": 3, **conf})
    for key, value in records:
        while True:
            try:
                p.produce(topic, key=key, value=value, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0, "records not delivered within 60 s"
    assert not errors, errors[:3]
    assert len(acked) == len(records)
    return acked


def active_base(broker: KshimProcess, topic: str) -> int:
    return max(int(f.name[:20]) for f in (Path(broker.data_dir) / f"{topic}-0").glob("*.log"))


def check_compacted(acked: dict[int, tuple], read: list, cleaned_below: int) -> None:
    """What a compacted log must hold: every record keeps its offset, key and value; below the
    cleaned offset exactly the latest record of each key written below it; above it everything."""
    for r in read:
        assert acked[r.offset] == (r.key, r.value), r.offset
    below = [r for r in read if r.offset < cleaned_below]
    latest = {acked[o][0]: o for o in sorted(acked) if o < cleaned_below}
    assert sorted(r.offset for r in below) == sorted(latest.values())
    assert [r.offset for r in read if r.offset >= cleaned_below] == [o for o in sorted(acked) if o >= cleaned_below]


@pytest.fixture
def broker(tmp_path):
    proc = KshimProcess(tmp_path / "kshim-data", "--log-cleaner-backoff-ms", "3600000").start()
    yield proc
    proc.kill()


def test_100000_updates_over_1000_keys_compact_to_the_latest_value_per_key(broker):
    topic = "compacted-updates"
    create(broker, topic, {"segment.bytes": "65536", "min.cleanable.dirty.ratio": "0.01"})
    acked = produce(broker, [(f"key-{i % KEYS}".encode(), f"value-{i}".encode()) for i in range(UPDATES)], topic)
    result = ctl_compact(broker, topic)
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"cleaned_to"' in result.stdout
    base = active_base(broker, topic)
    assert base > UPDATES - 10_000  # small segments: the active one holds few records
    read = consume_all(broker.bootstrap, topic, 0, timeout=60)
    check_compacted(acked, read, base)
    assert len(read) <= KEYS + (UPDATES - base)
    final = {}
    for r in read:
        final[r.key] = r.value
    assert final == {f"key-{k}".encode(): f"value-{max(i for i in range(k, UPDATES, KEYS))}".encode()
                     for k in range(KEYS)}


def test_tombstones_disappear_after_delete_retention_ms(broker):
    topic = "compacted-tombstones"
    create(broker, topic, {"segment.bytes": "4096", "delete.retention.ms": "2000"})
    filler = [(b"other", b"x" * 200)] * 60  # rolls the segment past the tombstone
    acked = produce(broker, [(b"gone", b"v1"), (b"kept", b"v1"), (b"gone", None), *filler], topic,
                    **{"batch.num.messages": 1, "max.in.flight": 1})  # one record a batch: segments roll
    assert ctl_compact(broker, topic).returncode == 0
    read = consume_all(broker.bootstrap, topic)
    assert [(r.key, r.value) for r in read if r.key != b"other"] == [(b"kept", b"v1"), (b"gone", None)]
    tombstone_at = next(r.offset for r in read if r.key == b"gone")
    assert acked[tombstone_at] == (b"gone", None)

    def tombstone_gone() -> bool:
        assert ctl_compact(broker, topic).returncode == 0
        return b"gone" not in {r.key for r in consume_all(broker.bootstrap, topic)}

    wait_until(tombstone_gone, timeout=30, interval=0.5, message="the tombstone removed after delete.retention.ms")
    assert [(r.key, r.value) for r in consume_all(broker.bootstrap, topic) if r.key != b"other"] == [(b"kept", b"v1")]


def test_keyless_record_to_a_compacted_topic_is_invalid_record_and_the_rest_succeeds(broker):
    create(broker, "compacted-keys", {})
    plain = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        plain.create_topics([NewTopic("plain-keys", 1, 1)])
    finally:
        plain.close()
    with RawConnection(broker.bootstrap) as conn:
        out = conn.produce({("compacted-keys", 0): encode_batch([(b"k", b"v"), (None, b"no key")]),
                            ("plain-keys", 0): encode_batch([(None, b"fine")])})
    assert out[("compacted-keys", 0)].error_code == INVALID_RECORD
    assert out[("plain-keys", 0)].error_code == 0
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, request_timeout_ms=10000, retries=0)
    try:
        with pytest.raises(KafkaError) as e:
            p.send("compacted-keys", value=b"no key").get(timeout=15)
        assert "InvalidRecord" in type(e.value).__name__ or "INVALID_RECORD" in str(e.value).upper()
        assert p.send("compacted-keys", key=b"k", value=b"ok").get(timeout=15).offset == 0
    finally:
        p.close()


def test_delete_records_of_a_compact_only_topic_is_refused(broker):
    """As Kafka: DeleteRecords on a topic whose cleanup.policy is compact alone fails with
    POLICY_VIOLATION (only the cleaner removes records there) and its earliest offset stays;
    compact,delete deletes as asked."""
    from confluent_kafka.admin import AdminClient, OffsetSpec
    create(broker, "compact-only", {})
    create(broker, "compact-and-delete", {"cleanup.policy": "compact,delete"})
    for topic in ("compact-only", "compact-and-delete"):
        produce(broker, [(f"key-{i}".encode(), b"v") for i in range(10)], topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    answers = {tp.topic: f for tp, f in admin.delete_records([TopicPartition("compact-only", 0, 5),
                                                               TopicPartition("compact-and-delete", 0, 5)]).items()}
    with pytest.raises(KafkaException) as refused:
        answers["compact-only"].result(timeout=20)
    assert refused.value.args[0].code() == ErrorCode.POLICY_VIOLATION
    assert answers["compact-and-delete"].result(timeout=20).low_watermark == 5
    earliest = admin.list_offsets({TopicPartition(t, 0): OffsetSpec.earliest()
                                   for t in ("compact-only", "compact-and-delete")})
    assert {tp.topic: f.result(timeout=20).offset for tp, f in earliest.items()} == \
        {"compact-only": 0, "compact-and-delete": 5}


def test_broker_killed_mid_clean_restarts_consistent(tmp_path):
    broker = KshimProcess(tmp_path / "kshim-data", "--log-cleaner-backoff-ms", "3600000",
                          "--log-cleaner-io-max-bytes-per-second", "300000").start()
    try:
        topic = "compacted-crash"
        create(broker, topic, {"segment.bytes": "200000"})
        acked = produce(broker, [(f"key-{i % 200}".encode(), f"value-{i}".encode() * 4) for i in range(40_000)], topic)
        pdir = Path(broker.data_dir) / f"{topic}-0"
        ctl = subprocess.Popen([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(broker.data_dir), "compact",
                                topic], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: any(pdir.glob("*.cleaned")) or ctl.poll() is not None, timeout=60, interval=0.01,
                       message="a cleaned segment being written")
            assert ctl.poll() is None, "the throttled clean finished before the broker could be killed"
            broker.kill()
        finally:
            ctl.wait(timeout=60)
        broker.start()
        assert not [f for f in pdir.iterdir() if f.name.endswith((".cleaned", ".swap"))]
        read = consume_all(broker.bootstrap, topic, 0, timeout=60)
        for r in read:
            assert acked[r.offset] == (r.key, r.value)
        offsets = [r.offset for r in read]
        assert offsets == sorted(set(offsets))
        latest = {}
        for o in sorted(acked):
            latest[acked[o][0]] = o
        assert set(latest.values()) <= set(offsets)  # at least the latest record of every key
        # and a clean after the restart completes
        result = ctl_compact(broker, topic)
        assert result.returncode == 0, result.stdout + result.stderr
        check_compacted(acked, consume_all(broker.bootstrap, topic, 0, timeout=60), active_base(broker, topic))
    finally:
        broker.kill()


DESTROY_BROKER = -137  # librdkafka's RD_KAFKA_RESP_ERR__DESTROY_BROKER (no name in confluent_kafka)


def watermark(c: Consumer, topic: str) -> tuple[int] | None:
    try:
        return (c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1],)
    except KafkaException as e:
        if e.args[0].code() in (DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
            return None
        raise


def read_confluent(broker: KshimProcess, topic: str, isolation: str, timeout: float = 30.0) -> list[tuple]:
    """(offset, key, value) of every record a confluent-kafka consumer with this isolation level
    reads from the start up to the end it sees (the last stable offset for read_committed)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "log_level": 3})
    try:
        # the high watermark; librdkafka may fail a first request with _DESTROY_BROKER as it
        # retires the bootstrap connection for the broker it learned from Metadata: ask again
        end, = wait_until(lambda: watermark(c, topic), 20, interval=0.2, message=f"the high watermark of {topic}")
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple] = []
        deadline = time.monotonic() + timeout
        while c.position([TopicPartition(topic, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"read {len(out)} records of {topic}, end {end}"
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def markers_on_disk(broker: KshimProcess, topic: str) -> list[tuple[int, bool]]:
    """(offset, committed) of the transaction markers that hold a record, read from the segment
    files (clients never see markers)."""
    found = []
    for seg in sorted((Path(broker.data_dir) / f"{topic}-0").glob("*.log")):
        data = seg.read_bytes()
        for pos, h in iter_batches(data, strict=False):
            if h.is_control and h.records_count:
                found.append((h.base_offset, read_marker(data[pos:pos + h.size]).committed))
    return found


def test_transactions_on_a_compacted_topic_read_right_under_both_isolation_levels(broker):
    """Aborted records go (read_uncommitted no longer sees them), committed transactional records
    compact like any other, markers go once their transaction is empty and delete.retention.ms
    passed, and the producer goes on after the cleaning (its state survived)."""
    topic = "compacted-txns"
    create(broker, topic, {"segment.bytes": "2048", "delete.retention.ms": "2000"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "compacted-txn", "linger.ms": 0,
                  "log_level": 3})
    p.init_transactions(30)
    written: list[tuple[bytes, bytes, bool]] = []

    def txn(records: list[tuple[bytes, bytes]], commit: bool) -> None:
        p.begin_transaction()
        for key, value in records:
            p.produce(topic, key=key, value=value, partition=0)
        assert p.flush(30) == 0
        (p.commit_transaction if commit else p.abort_transaction)(30)
        written.extend((k, v, commit) for k, v in records)

    txn([(b"a", b"a1"), (b"b", b"b1")], commit=True)
    txn([(b"a", b"a-aborted"), (b"c", b"c-aborted")], commit=False)
    txn([(b"a", b"a2")], commit=True)
    txn([(b"d", b"d-aborted")], commit=False)
    for i in range(24):  # committed filler rolls the segments past all of the above
        txn([(b"f", f"f{i}".encode() + b"." * 200)], commit=True)
    aborted = {v for _, v, c in written if not c}
    before = read_confluent(broker, topic, "read_uncommitted")
    assert aborted <= {v for _, _, v in before}  # read_uncommitted sees aborted records until cleaned
    assert len([m for m in markers_on_disk(broker, topic) if not m[1]]) == 2

    assert ctl_compact(broker, topic).returncode == 0
    base = active_base(broker, topic)
    assert base > 12  # the four transactions above are in cleaned segments
    committed = read_confluent(broker, topic, "read_committed")
    uncommitted = read_confluent(broker, topic, "read_uncommitted")
    assert uncommitted == committed  # the aborted records are gone from the log itself
    assert not aborted & {v for _, _, v in committed}
    below = {k: v for _, k, v in committed if _ < base}
    assert below[b"a"] == b"a2" and below[b"b"] == b"b1" and b"c" not in below and b"d" not in below
    assert len([k for o, k, _ in committed if o < base]) == len(below)  # one record per key below
    offsets = [o for o, _, _ in committed]
    assert offsets == sorted(set(offsets)) and [v for _, _, v in committed][-1].startswith(b"f23")

    # markers whose transaction is now empty get a delete horizon at the next clean and go after it
    def abort_markers_gone() -> bool:
        assert ctl_compact(broker, topic).returncode == 0
        return not [m for m in markers_on_disk(broker, topic) if not m[1]]

    wait_until(abort_markers_gone, timeout=30, interval=0.5, message="the abort markers removed")
    assert read_confluent(broker, topic, "read_uncommitted") == committed

    # the same producer goes on: its epoch and sequence survived in what the cleaner kept
    txn([(b"a", b"a3")], commit=True)
    txn([(b"e", b"e-aborted")], commit=False)
    p.flush(10)
    after = read_confluent(broker, topic, "read_committed")
    assert after[:len(committed)] == committed and after[-1][1:] == (b"a", b"a3")
    assert b"e-aborted" in {v for _, _, v in read_confluent(broker, topic, "read_uncommitted")}
