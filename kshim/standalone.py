"""A single-broker kshim: the controller runs in the broker's own process.

Same code path as a cluster, with one broker that is always alive: the controller publishes
images straight to the broker, and every topic has replication factor 1.
"""
from __future__ import annotations

import os

from kshim.broker import Broker, BrokerConfig, warn_without_sasl_users
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.local import LocalControllerClient
from kshim.controller.store import MetadataStore


def open_standalone(config: BrokerConfig) -> Broker:
    """A broker with its own controller, registered at config.port (re-register once bound)."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    store = MetadataStore(config.data_dir / "metadata.sqlite")
    controller = Controller(store, ControllerConfig(
        node_id=config.node_id, default_partitions=config.default_partitions, default_replication_factor=1,
        topic_defaults=config.topic_defaults, max_partitions_per_broker=config.max_partitions_per_broker,
        transaction_version=config.transaction_version))
    client = LocalControllerClient(controller, config.node_id)
    broker = Broker(config, client)
    client.attach(broker.apply_image, broker.install_image)
    warn_without_sasl_users(broker, config.data_dir)  # with the image register() applies

    def controlled_shutdown() -> None:
        # a clean stop is remembered, so the next start fences no one; the closed broker takes no image
        controller.listeners.clear()
        controller.shutdown_local_broker(config.node_id, client.broker_epoch)
    broker.close_hooks.append(controlled_shutdown)
    broker.close_hooks.append(controller.close)
    client.register(config.advertised, config.port, os.getpid())
    return broker


def announce_port(broker: Broker, port: int) -> None:
    """After binding (--port 0 picks one): tell the controller where this broker listens."""
    broker.config.port = port
    client = broker.controller
    assert isinstance(client, LocalControllerClient)
    client.controller.update_address(client.node_id, broker.config.advertised, port)
