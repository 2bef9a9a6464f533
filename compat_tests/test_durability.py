"""Durability across restarts, as a user sees it: stop the broker (SIGTERM or SIGKILL), start it
again on the same data dir and port, and check topics, configs, records, offsets and producer state."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import FETCH, RawConnection, consume_all, offsets
from wire.records import HEADER_SIZE, encode_batch

OUT_OF_ORDER_SEQUENCE_NUMBER = 45


# ---------------------------------------------------------------- helpers
def stop(broker: KshimProcess, how: str) -> None:
    if how == "sigterm":
        code = broker.terminate()
        assert code == 0, f"kshim exited with {code} on SIGTERM:\n" + broker.logs()
        assert "Traceback" not in broker.logs(), broker.logs()
    else:
        broker.kill()
        assert broker.proc.returncode == -9


def admin(broker: KshimProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)


def create_topic(broker: KshimProcess, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    a = admin(broker)
    try:
        a.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    finally:
        a.close()


def topic_configs(broker: KshimProcess, name: str) -> dict[str, str]:
    a = admin(broker)
    try:
        described = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    finally:
        a.close()
    return {k: v["value"] for k, v in described["topic"][name].items()}


def partition_count(broker: KshimProcess, name: str) -> int:
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, request_timeout_ms=10000)
    try:
        return len(c.partitions_for_topic(name) or ())
    finally:
        c.close()


def confluent_producer(broker: KshimProcess, **extra) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 2, **extra})


def produce_acked(broker: KshimProcess, records: list[tuple[str, int, bytes, bytes]], **extra) -> dict:
    """Produce (topic, partition, key, value) with confluent-kafka acks=1; returns
    {(topic, partition, offset): (key, value)} of the acknowledged records (all must be)."""
    acked: dict = {}
    errors: list = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[(msg.topic(), msg.partition(), msg.offset())] = (msg.key(), msg.value())

    p = confluent_producer(broker, **extra)
    for topic, partition, key, value in records:
        p.produce(topic, key=key, value=value, partition=partition, on_delivery=report)
        p.poll(0)
    assert p.flush(20) == 0, "records still unacknowledged after 20 s"
    assert not errors, errors
    assert len(acked) == len(records)
    return acked


def stored(broker: KshimProcess, topic: str, partitions: int) -> dict:
    """{(topic, partition, offset): (key, value)} of every record a consumer reads back."""
    out = {}
    for p in range(partitions):
        records = consume_all(broker.bootstrap, topic, p)
        assert [r.offset for r in records] == list(range(records[0].offset if records else 0,
                                                         (records[0].offset if records else 0) + len(records)))
        out.update({(topic, p, r.offset): (r.key, r.value) for r in records})
    return out


def produce_one(broker: KshimProcess, topic: str, partition: int, value: bytes) -> int:
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, request_timeout_ms=10000)
    try:
        return p.send(topic, key=b"after", value=value, partition=partition).get(timeout=15).offset
    finally:
        p.close()


def long_poll_fetch(topic: str, partition: int, offset: int) -> dict:
    """A Fetch v12 body waiting up to 30 s for data at `offset`."""
    return {"replica_id": -1, "max_wait_ms": 30000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "topic_id": None, "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}


def partition_dir(broker: KshimProcess, topic: str, partition: int) -> Path:
    return Path(broker.data_dir) / f"{topic}-{partition}"


def segment_files(broker: KshimProcess, topic: str, partition: int) -> list[Path]:
    return sorted(partition_dir(broker, topic, partition).glob("*.log"))


# ---------------------------------------------------------------- restarts
def test_clean_restart_keeps_topics_configs_and_records(fresh_kshim, topic_name):
    broker = fresh_kshim
    configured, auto = topic_name + "-cfg", topic_name + "-auto"
    configs = {"retention.ms": "86400000", "segment.bytes": "65536", "max.message.bytes": "500000"}
    create_topic(broker, configured, 4, configs)
    records = [(configured, i % 4, f"k{i}".encode(), f"value-{i}".encode() * 10) for i in range(400)]
    records += [(auto, i % 3, None, f"auto-{i}".encode()) for i in range(30)]
    acked = produce_acked(broker, records)
    before = {**stored(broker, configured, 4), **stored(broker, auto, 3)}
    assert before == acked
    ends = {p: offsets(broker.bootstrap, configured, p)[1] for p in range(4)}
    assert sum(ends.values()) == 400

    # a client still connected, with a long-poll fetch waiting, does not hold up a clean shutdown
    waiting = RawConnection(broker.bootstrap)
    waiting.send_request(FETCH, 12, long_poll_fetch(configured, 0, ends[0]))
    stop(broker, "sigterm")
    assert waiting.wait_closed(5)
    waiting.close()
    broker.restart()

    a = admin(broker)
    try:
        assert {configured, auto} <= set(a.list_topics())
    finally:
        a.close()
    assert partition_count(broker, configured) == 4
    assert partition_count(broker, auto) == 3
    assert {k: v for k, v in topic_configs(broker, configured).items() if k in configs} == configs
    assert {**stored(broker, configured, 4), **stored(broker, auto, 3)} == acked
    for p in range(4):
        assert offsets(broker.bootstrap, configured, p) == (0, ends[p])
        assert produce_one(broker, configured, p, b"next") == ends[p]


def test_crash_loses_nothing_acknowledged(fresh_kshim, topic_name):
    broker = fresh_kshim
    configs = {"segment.bytes": "20000", "retention.ms": "86400000"}
    create_topic(broker, topic_name, 3, configs)
    acked: dict = {}
    sent: dict[bytes, bytes] = {}

    def report(err, msg):
        if err is None:
            acked[(msg.topic(), msg.partition(), msg.offset())] = (msg.key(), msg.value())

    p = confluent_producer(broker, **{"message.timeout.ms": 30000})
    i = 0
    deadline = time.monotonic() + 20
    while len(acked) < 600:  # kill the broker in the middle of a stream of produces
        assert time.monotonic() < deadline, f"only {len(acked)} records acknowledged"
        key, value = f"k{i}".encode(), f"crash-{i}".encode() * 5
        sent[key] = value
        try:
            p.produce(topic_name, key=key, value=value, partition=i % 3, on_delivery=report)
            i += 1
        except BufferError:
            pass
        p.poll(0)
    broker.kill()
    p.purge()  # whatever was still in flight is not acknowledged
    p.flush(5)
    acked = dict(acked)  # frozen: nothing can be acknowledged by a dead broker
    del p

    broker.restart()
    assert partition_count(broker, topic_name) == 3
    assert {k: v for k, v in topic_configs(broker, topic_name).items() if k in configs} == configs
    after = stored(broker, topic_name, 3)
    missing = {k: v for k, v in acked.items() if after.get(k) != v}
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {list(missing.items())[:3]}"
    # anything beyond the acknowledged is a record really sent (acked just before the kill), not garbage
    assert all(sent.get(key) == value for key, value in after.values())
    for partition in range(3):
        end = offsets(broker.bootstrap, topic_name, partition)[1]
        assert produce_one(broker, topic_name, partition, b"after-crash") == end


BATCH_RECORDS = 3


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
@pytest.mark.parametrize("damage", ["garbage-appended", "last-batch-truncated", "last-batch-bit-flip"])
def test_corrupt_segment_tail_is_truncated_on_restart(fresh_kshim, topic_name, how, damage):
    broker = fresh_kshim
    create_topic(broker, topic_name, 1)
    batches = [encode_batch([(b"k", f"b{b}-r{r}".encode() * 4) for r in range(BATCH_RECORDS)]) for b in range(10)]
    with RawConnection(broker.bootstrap) as conn:
        for n, batch in enumerate(batches):
            result = conn.produce({(topic_name, 0): batch})
            assert (result[(topic_name, 0)].error_code, result[(topic_name, 0)].base_offset) == (0, n * BATCH_RECORDS)
    expected = [(b"k", f"b{b}-r{r}".encode() * 4) for b in range(10) for r in range(BATCH_RECORDS)]
    stop(broker, how)

    (segment,) = segment_files(broker, topic_name, 0)
    size = segment.stat().st_size
    assert size == sum(map(len, batches))
    if damage == "garbage-appended":
        with open(segment, "ab") as f:
            f.write(b"\xde\xad\xbe\xef" * 100)
        valid_size, kept = size, expected
    elif damage == "last-batch-truncated":
        os.truncate(segment, size - len(batches[-1]) // 2)
        valid_size, kept = size - len(batches[-1]), expected[:-BATCH_RECORDS]
    else:
        with open(segment, "r+b") as f:
            f.seek(size - len(batches[-1]) + HEADER_SIZE + 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x01]))
        valid_size, kept = size - len(batches[-1]), expected[:-BATCH_RECORDS]

    broker.restart()
    end = len(kept)
    assert offsets(broker.bootstrap, topic_name, 0) == (0, end)
    assert [(r.offset, r.key, r.value) for r in consume_all(broker.bootstrap, topic_name, 0)] == \
        [(o, k, v) for o, (k, v) in enumerate(kept)]
    # appends continue right after the last good batch, with no bad bytes left in between
    new = encode_batch([(b"k", b"after-recovery")])
    with RawConnection(broker.bootstrap) as conn:
        result = conn.produce({(topic_name, 0): new})
        assert (result[(topic_name, 0)].error_code, result[(topic_name, 0)].base_offset) == (0, end)
    got = consume_all(broker.bootstrap, topic_name, 0)
    assert [(r.offset, r.value) for r in got[-2:]] == [(end - 1, kept[-1][1]), (end, b"after-recovery")]
    assert segment.stat().st_size == valid_size + len(new)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_idempotent_producer_state_survives_restart(fresh_kshim, topic_name, how):
    broker = fresh_kshim
    create_topic(broker, topic_name, 1)
    tp = (topic_name, 0)

    def batch(pid: int, seq: int, n: int) -> bytes:
        return encode_batch([(b"k", f"seq-{seq + i}".encode()) for i in range(n)],
                            producer_id=pid, producer_epoch=0, base_sequence=seq)

    with RawConnection(broker.bootstrap) as conn:
        init = conn.init_producer_id()
        assert init.error_code == 0
        pid = init.producer_id
        assert conn.produce({tp: batch(pid, 0, 2)})[tp].base_offset == 0
        assert conn.produce({tp: batch(pid, 2, 1)})[tp].base_offset == 2
        ids_before = [pid] + [conn.init_producer_id().producer_id for _ in range(3)]
    assert ids_before == sorted(set(ids_before))

    stop(broker, how)
    broker.restart()

    with RawConnection(broker.bootstrap) as conn:
        new_ids = [conn.init_producer_id().producer_id for _ in range(3)]
        assert min(new_ids) > max(ids_before), (ids_before, new_ids)
        assert new_ids == sorted(set(new_ids))
        # a retry of the last batch is recognised as a duplicate: acknowledged with its offset, not appended
        retry = conn.produce({tp: batch(pid, 2, 1)})[tp]
        assert (retry.error_code, retry.base_offset) == (0, 2)
        assert offsets(broker.bootstrap, topic_name, 0) == (0, 3)
        # a sequence gap is still detected, and the next sequence goes on
        assert conn.produce({tp: batch(pid, 5, 1)})[tp].error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = conn.produce({tp: batch(pid, 3, 1)})[tp]
        assert (nxt.error_code, nxt.base_offset) == (0, 3)
    assert [r.value for r in consume_all(broker.bootstrap, topic_name, 0)] == \
        [f"seq-{i}".encode() for i in range(4)]
    # a real idempotent client works against the restarted broker
    acked = produce_acked(broker, [(topic_name, 0, b"k", b"idempotent-%d" % i) for i in range(5)],
                          **{"enable.idempotence": True, "acks": "all"})
    assert sorted(o for (_, _, o) in acked) == [4, 5, 6, 7, 8]


# ---------------------------------------------------------------- segments, retention, flush
def test_segments_roll_and_retention_deletes_old_ones(fresh_kshim, topic_name):
    broker = fresh_kshim
    create_topic(broker, topic_name, 1, {"segment.bytes": "1024"})
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=0, request_timeout_ms=10000)
    hour_ago = int(time.time() * 1000) - 3600 * 1000
    try:
        for i in range(15):  # one batch each: 10 written an hour ago, then 5 fresh
            ts = hour_ago + i if i < 10 else None
            assert p.send(topic_name, key=b"k", value=b"%03d" % i + b"x" * 300, partition=0,
                          timestamp_ms=ts).get(timeout=15).offset == i
    finally:
        p.close()
    files = segment_files(broker, topic_name, 0)
    assert len(files) >= 5, [f.name for f in files]
    assert files[0].name == "00000000000000000000.log"
    assert offsets(broker.bootstrap, topic_name, 0) == (0, 15)

    a = admin(broker)
    try:
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "600000"})])
    finally:
        a.close()
    # the hour-old segments go at the next housekeeping run (every second); fresh ones stay
    wait_until(lambda: offsets(broker.bootstrap, topic_name, 0)[0] > 0, timeout=15, message="log start to advance")
    start, end = offsets(broker.bootstrap, topic_name, 0)
    assert (start, end) == (10, 15), "exactly the segments holding only hour-old records go"
    bases = [int(f.name[:-4]) for f in segment_files(broker, topic_name, 0)]
    assert min(bases) == 10 and not (partition_dir(broker, topic_name, 0) / files[0].name).exists()
    assert [r.offset for r in consume_all(broker.bootstrap, topic_name, 0)] == list(range(10, 15))
    assert topic_configs(broker, topic_name)["segment.bytes"] == "1024"  # untouched by the alter

    # a tiny retention.ms: everything expires, the log is empty but keeps its end offset
    a = admin(broker)
    try:
        a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "500"})])
    finally:
        a.close()
    wait_until(lambda: offsets(broker.bootstrap, topic_name, 0) == (15, 15), timeout=15, message="all records expiring")
    assert all(int(f.name[:-4]) >= 15 for f in segment_files(broker, topic_name, 0))
    assert produce_one(broker, topic_name, 0, b"fresh") == 15


def test_flush_messages_1_topic_works_and_survives_crash(fresh_kshim, topic_name):
    broker = fresh_kshim
    create_topic(broker, topic_name, 2, {"flush.messages": "1"})
    acked = produce_acked(broker, [(topic_name, i % 2, b"k%d" % i, b"flushed-%d" % i) for i in range(100)])
    assert stored(broker, topic_name, 2) == acked
    stop(broker, "sigkill")
    broker.restart()
    assert topic_configs(broker, topic_name)["flush.messages"] == "1"
    assert stored(broker, topic_name, 2) == acked
    assert produce_one(broker, topic_name, 0, b"more") == 50
