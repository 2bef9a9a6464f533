"""The BrokerServer (broker plus coordinators) of a broker a test opened, made once per broker."""
from __future__ import annotations

import weakref

from kshim.broker import Broker
from kshim.net.broker_server import BrokerServer

_nodes: "weakref.WeakKeyDictionary[Broker, BrokerServer]" = weakref.WeakKeyDictionary()


def served(broker: Broker) -> BrokerServer:
    node = _nodes.get(broker)
    if node is None:
        node = _nodes[broker] = BrokerServer(broker)
    return node
