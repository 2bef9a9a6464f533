"""The controller in the broker's own process: a single-broker kshim calls it directly.

The broker is registered as a listener, so every image the controller publishes is applied
before the call that caused it returns.
"""
from __future__ import annotations

from typing import TypeVar

from kshim.controller import messages as m
from kshim.controller.client import ControllerClient
from kshim.controller.controller import Controller

R = TypeVar("R")


class LocalControllerClient(ControllerClient):
    def __init__(self, controller: Controller, node_id: int) -> None:
        self.controller = controller
        self.node_id = node_id
        self.broker_epoch = 0

    def register(self, host: str, port: int, pid: int) -> None:
        self.broker_epoch = self.controller.register_broker(self.node_id, host, port, pid)

    async def call(self, request: m.Operation[R]) -> R:
        return await m.invoke({m.Server.CONTROLLER: self.controller}, request)
