"""A broker whose data directory fills up (docs/robustness.md, "Full disks"), on a real small
filesystem: a 24 MiB tmpfs mounted for the test (needs root, as CI runs). Producers get
KAFKA_STORAGE_ERROR, the broker keeps answering, nothing acknowledged is lost or torn, and once
DeleteRecords frees whole segments, appends go on at the next offset."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaConnectionError, KafkaError, KafkaStorageError
from kafka.structs import TopicPartition

from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import RawConnection, consume_all

DISK_MB = 24
VALUE = b"x" * 4096
MAX_SENDS = DISK_MB * 1024 * 1024 // len(VALUE) * 2  # the disk is full long before this
DEADLINE_S = 30


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_full_disk_fails_produce_and_deleting_records_makes_room(small_disk: Path):
    broker = KshimProcess(small_disk / "data").start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
        admin.create_topics([NewTopic("t", 1, 1, topic_configs={"segment.bytes": str(1 << 20)})])
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, retries=0, linger_ms=0,
                                 request_timeout_ms=10_000, max_in_flight_requests_per_connection=1)
        acked: list[int] = []
        failure = None
        for i in range(MAX_SENDS):
            try:
                acked.append(producer.send("t", key=b"%d" % i, value=VALUE, partition=0).get(timeout=15).offset)
            except KafkaStorageError as e:
                failure = e
                break
        assert failure is not None, f"{len(acked)} records of 4 KiB fit on a {DISK_MB} MiB disk"
        assert acked == list(range(len(acked))), "offsets are contiguous up to the failure"
        with RawConnection(broker.bootstrap) as conn:  # the broker still answers
            assert conn.api_versions(3).error_code == 0
        # another failure is answered the same way, without tearing the log
        with pytest.raises(KafkaStorageError):
            producer.send("t", value=VALUE, partition=0).get(timeout=15)
        # the controller's metadata store is on the same disk: a topic cannot be created either
        with pytest.raises(KafkaError) as refused:
            admin.create_topics([NewTopic("while-full", 1, 1)])
        assert not isinstance(refused.value, KafkaConnectionError), refused.value

        keep_from = len(acked) - 100
        admin.delete_records({TopicPartition("t", 0): keep_from})
        after = wait_until(lambda: _send(producer), DEADLINE_S, message="an append once segments were deleted")
        assert after == len(acked), "appends go on at the next offset"
        got = [(r.offset, r.value) for r in consume_all(broker.bootstrap, "t", 0)]
        assert [o for o, _ in got] == list(range(keep_from, len(acked) + 1))
        assert all(v == VALUE for _, v in got[:-1]) and got[-1][1] == b"after"
        producer.close()
        admin.close()
        assert broker.terminate() == 0
        broker.start()  # the log opens again, whole
        assert [r.offset for r in consume_all(broker.bootstrap, "t", 0)] == list(range(keep_from, len(acked) + 1))
    finally:
        broker.kill()


def _send(producer: KafkaProducer) -> int | None:
    try:
        return producer.send("t", value=b"after", partition=0).get(timeout=15).offset
    except KafkaStorageError:
        return None
