"""The controller in the broker's own process: a single-broker kshim calls it directly.

Every image the controller publishes is applied before the call that caused it returns (also a
call that fails): the broker installs it asynchronously (the replicas it adds are opened off the
event loop, one install at a time); an image published while no call is under way (registration
at start) is applied at once.
"""
from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

import anyio

from kshim.controller import messages as m
from kshim.controller.client import ControllerClient
from kshim.cluster.image import MetadataImage
from kshim.controller.controller import Controller

R = TypeVar("R")


class LocalControllerClient(ControllerClient):
    def __init__(self, controller: Controller, node_id: int) -> None:
        self.controller = controller
        self.node_id = node_id
        self.broker_epoch = 0
        self._apply: Callable[[MetadataImage], None] | None = None
        self._install: Callable[[MetadataImage], Awaitable[None]] | None = None
        self._calls = 0  # calls under way: the images they publish are installed when they return

    def attach(self, apply: Callable[[MetadataImage], None],
               install: Callable[[MetadataImage], Awaitable[None]]) -> None:
        """The broker's image sink: `apply` now (sync), or `install` (async, off-loop opening)."""
        self._apply, self._install = apply, install
        self.controller.listeners.append(self._published)

    def _published(self, image: MetadataImage) -> None:
        self.controller.report_image_version(self.node_id, image.version)  # in-process: it has every image
        if self._calls == 0 and self._apply is not None:
            self._apply(image)

    def register(self, host: str, port: int, pid: int) -> None:
        self.broker_epoch = self.controller.register_broker(self.node_id, host, port, pid)
        self.controller.report_image_version(self.node_id, self.controller.version)

    async def call(self, request: m.Operation[R]) -> R:
        self._calls += 1
        try:
            try:
                return await m.invoke({m.Server.CONTROLLER: self.controller}, request)
            finally:
                # what the call published (a no-op if nothing), also when it failed half-way;
                # through the one install path, never a synchronous apply beside an install
                # under way (two of them opened one replica twice at once)
                if self._install is not None:
                    with anyio.CancelScope(shield=True):
                        await self._install(self.controller.image)
        finally:
            self._calls -= 1
