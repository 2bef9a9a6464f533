"""The control plane of `kshim serve --brokers N` as real processes: the supervisor, the controller
process it restarts, and brokers that outlive neither.

- SIGKILL the supervisor: every broker and the controller exit within seconds (parent-death
  signal and watchdog pipe), and a new serve on the same data dir and ports starts.
- `ctl kill controller`: the supervisor restarts it within seconds (status shows the new pid);
  an idempotent confluent-kafka producer keeps producing through it with no loss and no
  duplicate (its producer id came from its broker's block), and a new transactional producer
  can initialise once it is back.
- A leader killed while the controller is down is fenced by the restarted controller once its
  grace period passes, a new leader is elected and every acknowledged record is readable.
- CreateTopics while the controller is down: NOT_CONTROLLER (retriable), Metadata reports no
  controller (-1), the outage is logged once per broker, and kafka-python's admin client
  succeeds once the controller is back.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import anyio
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition as CTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.cluster import Cluster, pid_exists, run_ctl, running
from compat_tests.kshim_process import wait_until
from compat_tests.raw_kafka import RawConnection
from compat_tests.test_cluster_ctl import create_topic
from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.ctl.status import command as ctl_command
from wire.errors import ErrorCode

EXIT_DEADLINE_S = 10.0  # children gone after the supervisor dies (it takes well under a second)
RESTART_DEADLINE_S = 10.0  # the controller back (it takes 1-2 s on an idle machine)
FENCE_DEADLINE_S = 20.0  # session timeout + grace after a restart + a loaded machine
CREATE_TOPICS, METADATA = 19, 3


def controller(cluster: Cluster) -> dict:
    return cluster.status()["controller"]


def kill_controller(cluster: Cluster) -> int:
    """`ctl kill controller`, then wait until a new controller answers; the new pid."""
    old = controller(cluster)["pid"]
    result = run_ctl(cluster.data_dir, "kill", "controller")
    assert result.returncode == 0, result.stderr
    assert f"killed the controller (pid {old})" in result.stdout
    start = time.monotonic()
    new = wait_until(lambda: (c := controller(cluster))["state"] == "running" and c["pid"] != old and c,
                     RESTART_DEADLINE_S, message="the controller restarted")
    print(f"controller restarted in {time.monotonic() - start:.2f}s")
    assert not pid_exists(old) and new["restarts"] >= 1
    return new["pid"]


def partition_if_known(cluster: Cluster, topic: str) -> dict | None:
    """Partition 0 of topic, or None while the controller does not answer (status has no partitions)."""
    return next((p for p in cluster.status()["partitions"] if p["topic"] == topic and p["partition"] == 0), None)


def consume_all(bootstrap: str, topic: str, count: int, isolation: str = "read_uncommitted") -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{time.monotonic()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": isolation})
    try:
        consumer.assign([CTopicPartition(topic, 0, 0)])
        got: list[bytes] = []

        def more() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
            return len(got) >= count

        wait_until(more, 30, interval=0, message=f"{count} records from {topic}")
        while (msg := consumer.poll(0.5)) is not None:  # and nothing more
            if not msg.error():
                got.append(msg.value())
        return got
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------ tests
def test_killing_the_supervisor_takes_every_child_with_it(tmp_path):
    data_dir = tmp_path / "c"
    first = Cluster(data_dir, 2)
    try:
        first.start()
        children = first.children()
        assert len(children) == 3 and all(pid_exists(p) for p in children)
        first.process.kill()  # SIGKILL: the supervisor stops nothing itself
        wait_until(lambda: not any(pid_exists(p) for p in children), EXIT_DEADLINE_S,
                   message="the brokers and the controller to exit")
    finally:
        first.kill_everything()
    # the ports and the data dir are free again: a new serve starts on them, with the old data
    with running(Cluster(data_dir, 2, base_port=first.base_port)) as again:
        assert [b["alive"] for b in again.status()["brokers"]] == [True, True]
        assert not set(again.children()) & set(children)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(Cluster(tmp_path_factory.mktemp("cp"), 3)) as c:
        yield c


def test_idempotent_producer_goes_on_through_a_controller_restart(cluster):
    create_topic(cluster, "through", 1, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 60000})
    errors: list = []
    sent = 0
    stop = threading.Event()

    def produce() -> None:
        nonlocal sent
        while not stop.is_set() and sent < 5000:
            try:
                producer.produce("through", str(sent).encode(),
                                 on_delivery=lambda err, msg: err and errors.append(err))
                sent += 1
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
            time.sleep(0.002)

    producer.produce("through", b"first")  # its producer id comes from broker's block: before the kill
    assert producer.flush(30) == 0
    thread = threading.Thread(target=produce)
    thread.start()
    try:
        wait_until(lambda: sent >= 200, 30, message="producing")
        kill_controller(cluster)
        at_restart = sent
        wait_until(lambda: sent >= at_restart + 200, 30, message="producing after the restart")
    finally:
        stop.set()
        thread.join(30)
    assert producer.flush(60) == 0 and not errors, errors
    values = consume_all(cluster.bootstrap, "through", sent + 1)
    assert values == [b"first"] + [str(i).encode() for i in range(sent)]  # no loss, no duplicate, in order

    # a producer that needs a new id (transactional: through its coordinator) after the restart
    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "after-restart"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("through", b"committed")
    txn.commit_transaction(30)
    assert consume_all(cluster.bootstrap, "through", sent + 2, "read_committed")[-1] == b"committed"


def test_a_leader_killed_while_the_controller_is_down_is_replaced_once_it_is_back(cluster):
    create_topic(cluster, "orphaned", 1, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(100):
        producer.produce("orphaned", f"v{i}".encode())
    assert producer.flush(30) == 0
    wait_until(lambda: cluster.partition("orphaned")["isr"] == cluster.partition("orphaned")["replicas"], 20,
               message="every replica in sync")
    before = cluster.partition("orphaned")
    leader = before["leader"]
    old_controller = controller(cluster)["pid"]

    async def both() -> None:
        # one connection to the supervisor: the leader dies milliseconds after the controller, long
        # before a new controller process is up (it takes a Python start-up at least)
        async with rpc.connect(cluster.data_dir / "supervisor.sock") as conn:
            await conn.call(m.KillController(), 30)
            await conn.call(m.NodeCommand(m.NodeAction.KILL, leader), 30)

    anyio.run(both)
    after = wait_until(lambda: (p := partition_if_known(cluster, "orphaned")) and p["leader"] not in (leader, -1) and p,
                       FENCE_DEADLINE_S, message="a new leader")
    assert after["leader_epoch"] > before["leader_epoch"]
    status = cluster.status()
    assert status["controller"]["pid"] != old_controller  # elected by the restarted controller
    assert not cluster.broker(leader)["alive"]
    log = (cluster.data_dir / "controller" / "controller.log").read_text()
    assert f"broker {leader} fenced" in log.split(f"controller (pid {status['controller']['pid']}) serving")[1]
    assert consume_all(cluster.bootstrap, "orphaned", 100) == [f"v{i}".encode() for i in range(100)]
    assert run_ctl(cluster.data_dir, "start", str(leader)).returncode == 0


def _outage_lines(cluster: Cluster) -> int:
    return sum(p.read_text().count("unreachable") for p in cluster.data_dir.glob("broker-*/broker.log"))


def test_create_topics_while_the_controller_is_down_is_retriable(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    outages = _outage_lines(cluster)
    try:
        assert admin.describe_cluster()["controller_id"] >= 0
        body = {"topics": [{"name": "while-down", "num_partitions": 1, "replication_factor": 3, "assignments": [],
                            "configs": []}], "timeout_ms": 5000, "validate_only": False}
        with RawConnection(f"127.0.0.1:{cluster.base_port}") as conn:
            # in-process (the request `kshim ctl kill controller` sends): it returns once the
            # controller is reaped, with no ctl process to end before the requests go out (CI once
            # saw the restarted controller answer them, the first creating the topic)
            assert ctl_command(cluster.data_dir, "kill", "controller").startswith("killed the controller")
            answers = [conn.request(CREATE_TOPICS, 5, body).topics[0].error_code for _ in range(5)]
            metadata = conn.request(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                                  "include_cluster_authorized_operations": False,
                                                  "include_topic_authorized_operations": False})
        # a new controller takes a Python start-up at least, far longer than these requests
        assert set(answers) == {ErrorCode.NOT_CONTROLLER}, answers
        assert metadata.controller_id == -1
        # the admin client retries (it waits while Metadata reports no controller) and succeeds
        admin.create_topics([NewTopic("while-down", 1, 3)])
        assert "while-down" in {p["topic"] for p in cluster.status()["partitions"]}
    finally:
        admin.close()
    wait_until(lambda: controller(cluster)["state"] == "running", RESTART_DEADLINE_S, message="controller back")
    # the outage is logged once per broker, however many requests it refused
    assert _outage_lines(cluster) - outages == 3
    logs = "".join(p.read_text() for p in cluster.data_dir.glob("broker-*/broker.log"))
    assert "Traceback" not in logs


# ------------------------------------------------------------------------------------------ each lifeline alone
_PARENT = r"""
import os, subprocess, sys, time
fds = [int(a) for a in sys.argv[2:]]
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), *sys.argv[2:]], pass_fds=fds)
print(child.pid, flush=True)
time.sleep(120)
"""
_SIGNAL_ONLY = r"""
import sys, time
from kshim.cluster import lifeline
assert lifeline.die_with_parent(int(sys.argv[1]))
print("armed", flush=True)
time.sleep(120)  # no watchdog: only the parent-death signal can end this
"""
_WATCHDOG_ONLY = r"""
import sys, anyio
from kshim.cluster import lifeline
print("armed", flush=True)
anyio.run(lifeline.watch, int(sys.argv[2]))  # no prctl: only the pipe's EOF ends this
"""


@pytest.mark.parametrize("child, with_pipe", [(_SIGNAL_ONLY, False), (_WATCHDOG_ONLY, True)],
                         ids=["parent-death signal", "watchdog pipe"])
def test_each_lifeline_alone_ends_the_child(child, with_pipe):
    """The supervisor is a stand-in here: a parent killed with SIGKILL (signal), or the write end of
    the pipe closed (watchdog; this test holds it, so the parent staying alive proves the pipe did it)."""
    read_fd, write_fd = os.pipe() if with_pipe else (None, None)
    fds = [str(read_fd)] if read_fd is not None else []
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, child, *fds], stdout=subprocess.PIPE, text=True,
                              pass_fds=[read_fd] if read_fd is not None else [])
    try:
        if read_fd is not None:
            os.close(read_fd)
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "armed"  # the child's own line, through the same pipe
        assert pid_exists(grandchild)
        if write_fd is not None:
            os.close(write_fd)
        else:
            parent.kill()
        wait_until(lambda: not pid_exists(grandchild), EXIT_DEADLINE_S, message="the child to exit")
        assert parent.poll() is None or write_fd is None
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait(10)
        if parent.stdout:
            parent.stdout.close()
