"""The controller's logic: topic admin, partition assignment, leader election, ISR changes,
broker liveness, and publishing metadata images.

One controller for a one-machine cluster, and no pretend consensus: its state is a SQLite file,
and every change is written there before it is published. Brokers learn of changes through their
heartbeat long-poll (or, in a single-process broker, through a direct callback).

The Controller is its operations, a module each, over the state they share
(kshim.controller.state: what the controller knows, loaded from the store, and its publishing):
- kshim.controller.brokers: registration, heartbeats and fencing, controlled shutdown, unregistering;
- kshim.controller.elections: the election rules, ElectLeaders, and leaders' ISR changes (AlterPartition);
- kshim.controller.reassignments: partition reassignments (KIP-455);
- kshim.controller.topics: topic creation and deletion, partition assignment, more partitions, topic configs;
- kshim.controller.settings: what elects nothing: dynamic broker, group and client-metrics configs,
  ACLs, SCRAM credentials, client quotas, features, producer id blocks, DescribeQuorum.
"""
from __future__ import annotations

from kshim.controller.brokers import BrokerLifecycle
from kshim.controller.reassignments import Reassignments
from kshim.controller.settings import ClusterSettings
from kshim.controller.state import ControllerConfig
from kshim.controller.topics import TopicAdmin


class Controller(BrokerLifecycle, Reassignments, TopicAdmin, ClusterSettings):
    """Every operation of the controller; a control-plane message calls the method of its name
    (kshim.controller.messages, Server.CONTROLLER)."""


__all__ = ["Controller", "ControllerConfig"]
