"""A cluster broker that starts serves only what it knows: it registers with the
controller and applies the controller's current image before it answers any client, as Kafka's
broker enables request processing only once caught up with the metadata. A broker that answered
Metadata from the empty image of its start would list no broker at all, and librdkafka then drops
its connections to every broker of the cluster.

The controller is held (SIGSTOP) while broker 1 starts, so the window in which a broker could
answer before it caught up is as long as the test needs: a Metadata request sent in it must be
answered only after the controller resumes, and then with every live broker."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from compat_tests.cluster import Cluster, running
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import METADATA, RawConnection

DEADLINE_S = 30.0


def test_a_restarted_broker_answers_metadata_only_once_it_has_caught_up(tmp_path):
    # a long session timeout: the controller held for a while must not fence the other brokers
    with running(Cluster(tmp_path, 3, session_timeout_ms=60_000)) as cluster:
        assert cluster.broker(1)["alive"]
        killed = subprocess.run([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(tmp_path), "kill", "1"],
                                capture_output=True, text=True, timeout=60)
        assert killed.returncode == 0, killed.stderr
        controller = cluster.status()["controller"]["pid"]
        os.kill(controller, signal.SIGSTOP)  # the controller cluster.start() started, held
        starting = subprocess.Popen([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(tmp_path), "start", "1"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            address = f"127.0.0.1:{cluster.base_port + 1}"

            def connected() -> RawConnection | None:
                try:
                    return RawConnection(address, timeout=DEADLINE_S)
                except OSError:
                    return None
            conn = wait_until(connected, DEADLINE_S, message="broker 1 listening again")
            with conn:
                correlation = conn.send_request(METADATA, 1, {"topics": None})
                os.kill(controller, signal.SIGCONT)
                answered, metadata = conn.read_response(METADATA, 1)
            assert answered == correlation
            assert sorted(b.node_id for b in metadata.brokers) == [0, 1, 2]
        finally:
            os.kill(controller, signal.SIGCONT)
            out, err = starting.communicate(timeout=120)
        assert starting.returncode == 0, err


def test_an_ephemeral_broker_killed_and_started_again_says_its_data_is_gone_and_starts_empty():
    from kafka import KafkaConsumer, KafkaProducer
    serve = KshimProcess(None, "--no-console").start()  # --ephemeral
    try:
        producer = KafkaProducer(bootstrap_servers=serve.bootstrap, acks="all")
        producer.send("kept-nowhere", b"x").get(timeout=30)
        producer.close()
        left = serve.ready_line.split("(data in ", 1)[1].split(" (EPHEMERAL")[0]
        assert os.path.isdir(left)
    finally:
        serve.kill()  # SIGKILL: its cleanup never runs
    again = KshimProcess(None, "--no-console").start()
    try:
        said = [ln for ln in again.output if "ephemeral data does not survive a crash" in ln and left in ln]
        assert said, again.logs()
        assert not os.path.exists(left)  # freed: tmpfs holds it in memory otherwise
        consumer = KafkaConsumer(bootstrap_servers=again.bootstrap)
        assert "kept-nowhere" not in consumer.topics()
        consumer.close()
    finally:
        assert again.terminate() == 0
