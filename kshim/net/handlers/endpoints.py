"""Where a client should reach a broker: on the listener the client came in on, as Kafka does
(a client on the SASL_SSL listener is told every broker's SASL_SSL endpoint).

A broker registers the address of its inter-broker listener; its other listeners sit at the same offset
from their configured ports as that one (a cluster offsets every port by the broker's index), so a
broker's endpoint on listener L is this broker's L port plus the difference of the registered ports,
at L's advertised host (advertised.listeners) when it has one.

Not a handler module (no NN_ prefix): the registry does not load it.
"""
from __future__ import annotations

from kshim.cluster.image import BrokerInfo
from kshim.net.handlers import RequestContext


def endpoint(ctx: RequestContext, broker: BrokerInfo) -> tuple[str, int]:
    security = ctx.security
    if security is None or not ctx.broker.config.security.listeners:
        return broker.host, broker.port
    listener = security.listener
    host = ctx.broker.config.security.advertised_hosts.get(listener.name, listener.host)
    return host, listener.port + (broker.port - ctx.broker.config.port)
