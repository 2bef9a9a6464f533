"""A broker that stops cleanly (Controller.shutdown_broker, Kafka's controlled shutdown) is down at
once, hands its leaderships to live in-sync replicas, and its next registration fences no one, even
for a controller restarted from the store meanwhile."""
from __future__ import annotations

import logging

from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.store import MetadataStore


def test_a_clean_stop_is_not_fenced_at_the_next_start(tmp_path, caplog):
    path = tmp_path / "m.sqlite"
    controller = Controller(MetadataStore(path), ControllerConfig())
    epoch = controller.register_broker(0, "127.0.0.1", 9092, pid=100)
    controller.create_topic("t", 2, 1)
    before = controller.image.topics["t"].partitions
    controller.shutdown_broker(0, epoch)
    assert not controller.image.brokers[0].alive
    assert controller.image.topics["t"].partitions == before  # the only replica: it stays leader
    controller.close()

    caplog.set_level(logging.INFO, logger="kshim.controller")
    restarted = Controller(MetadataStore(path), ControllerConfig())
    assert not restarted.image.brokers[0].alive  # known to be down: no session to wait for
    restarted.register_broker(0, "127.0.0.1", 9092, pid=101)
    after = restarted.image.topics["t"].partitions
    assert [(p.leader, p.leader_epoch) for p in after] == [(p.leader, p.leader_epoch) for p in before]
    assert "fenced" not in caplog.text and "leader -1" not in caplog.text
    restarted.close()


def test_a_killed_broker_is_still_fenced_when_it_comes_back(tmp_path, caplog):
    controller = Controller(MetadataStore(tmp_path / "m.sqlite"), ControllerConfig())
    controller.register_broker(0, "127.0.0.1", 9092, pid=100)
    caplog.set_level(logging.WARNING, logger="kshim.controller")
    controller.register_broker(0, "127.0.0.1", 9092, pid=101)  # no shutdown: the old one was killed
    assert "broker 0 fenced: restarted" in caplog.text
    controller.close()


def test_a_clean_stop_moves_leaderships_to_live_in_sync_replicas(tmp_path):
    controller = Controller(MetadataStore(tmp_path / "m.sqlite"), ControllerConfig())
    epochs = {n: controller.register_broker(n, "127.0.0.1", 9092 + n, pid=100 + n) for n in range(2)}
    controller.create_topic("t", 4, 2)
    led = [p.index for p in controller.image.topics["t"].partitions if p.leader == 0]
    assert led
    controller.shutdown_broker(1, epochs[1] + 1)  # an old incarnation's: nothing happens
    assert controller.image.brokers[1].alive
    controller.shutdown_broker(0, epochs[0])
    parts = controller.image.topics["t"].partitions
    assert all(parts[i].leader == 1 for i in led) and all(p.leader == 1 for p in parts)
    controller.close()


def test_a_clean_stop_leaves_the_isr_where_another_in_sync_replica_is_alive(tmp_path):
    """As Kafka's controller does for a broker in controlled shutdown: the others commit without
    it, and the stopped replica, which misses what they write, can no longer be elected over them
    (a restart of the whole cluster elects from the ISR)."""
    controller = Controller(MetadataStore(tmp_path / "m.sqlite"), ControllerConfig())
    epochs = {n: controller.register_broker(n, "127.0.0.1", 9092 + n, pid=100 + n) for n in range(3)}
    controller.create_topic("t", 3, 3)
    controller.create_topic("alone", 1, 1)
    solo = controller.image.topics["alone"].partitions[0]
    controller.shutdown_broker(1, epochs[1])
    parts = controller.image.topics["t"].partitions
    assert all(1 not in p.isr and sorted(p.isr) == [0, 2] and p.leader in (0, 2) for p in parts)
    assert controller.image.topics["alone"].partitions[0].isr == solo.isr  # no one else to take it
    controller.shutdown_broker(0, epochs[0])
    controller.shutdown_broker(2, epochs[2])  # the last in-sync replica alive keeps its place
    assert all(tuple(p.isr) == (2,) and p.leader == 2 for p in controller.image.topics["t"].partitions)
    controller.close()


def test_a_cluster_stopped_cleanly_starts_again_without_an_election(tmp_path, caplog):
    """The brokers stop one after the other, each leaving the ISRs to the ones still up; the last
    keeps its leaderships. Brokers that register before it leave its partitions as they are
    (offline until it returns, no leader -1 and no new epoch), and its return is no election."""
    path = tmp_path / "m.sqlite"
    controller = Controller(MetadataStore(path), ControllerConfig())
    epochs = {n: controller.register_broker(n, "127.0.0.1", 9092 + n, pid=100 + n) for n in range(2)}
    controller.create_topic("t", 2, 2)
    controller.shutdown_broker(1, epochs[1])
    controller.shutdown_broker(0, epochs[0])
    before = controller.image.topics["t"].partitions
    assert all(p.leader == 0 and tuple(p.isr) == (0,) for p in before)
    controller.close()
    caplog.set_level(logging.INFO, logger="kshim.controller")
    restarted = Controller(MetadataStore(path), ControllerConfig())
    restarted.register_broker(1, "127.0.0.1", 9093, pid=201)
    restarted.register_broker(0, "127.0.0.1", 9092, pid=200)
    after = restarted.image.topics["t"].partitions
    assert [(p.leader, p.leader_epoch) for p in after] == [(p.leader, p.leader_epoch) for p in before]
    assert "leader -1" not in caplog.text and "fenced" not in caplog.text
    restarted.close()
