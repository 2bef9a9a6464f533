"""The network layer: the anyio server, the sans-IO connection core, one handler module per API,
and BrokerServer, which wires the broker and its coordinators together (docs/architecture.md)."""
