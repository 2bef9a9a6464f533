"""The controller client of a broker process: the control-plane RPC over the controller's socket.

`run()` is the broker's session: connect, register (a new broker epoch and the current image),
then heartbeat in a loop. Each heartbeat is a long-poll that carries this broker's replica offsets
and returns as soon as the controller publishes an image newer than the one applied here, so
images arrive without delay and idle heartbeats go out every HEARTBEAT_WAIT_MS. STALE_BROKER_EPOCH
(fenced: the broker was paused past the session timeout) means register again.

If the controller goes away (it died; its supervisor restarts it from its state on disk), the
broker keeps serving with its last image and reconnects every BACKOFF_MAX_S at most. Once back, it
resumes its session with a heartbeat under its current epoch, which the restarted controller
accepts (no fencing, no leadership move); it registers anew only if the controller refuses that
epoch. Meanwhile `call` fails fast with NOT_CONTROLLER (retriable: clients refresh their metadata,
where `controller_id` is -1 while `connected` is false, and try again), and the outage is logged
once when it starts and once when it ends, not per request.

`call` sends an operation on the same connection (requests are multiplexed, see
kshim.controller.rpc); an operation that publishes returns once the broker has applied the image
version the controller answered with, so the caller sees its change in effect.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio

from kshim.cluster.image import MetadataImage
from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.controller.client import ControllerClient
from kshim.errors import BrokerError
from kshim.replica.partition import Partition
from wire.errors import ErrorCode



class ImageSink(Protocol):
    """The broker this client serves (a protocol: the broker's layer does not import the cluster's)."""
    @property
    def image(self) -> MetadataImage: ...

    async def install_image(self, image: MetadataImage) -> None: ...

    def replicas(self) -> list[Partition]: ...

    async def wait_for_image(self, version: int, timeout_s: float = 30.0) -> None: ...

log = logging.getLogger("kshim.cluster.remote")

HEARTBEAT_WAIT_MS = 250  # how long the controller holds an idle heartbeat
HEARTBEAT_GRACE_S = 5.0  # a heartbeat with no answer this long after its wait: the link is dead
CALL_TIMEOUT_S = 30.0
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 0.5  # a restarted controller is back within a second or two: find it soon
ERROR_RETRY_S = 0.2  # after an unexpected error answer to a heartbeat

R = TypeVar("R")


class RemoteControllerClient(ControllerClient):
    def __init__(self, socket_path: Path, node_id: int, *, heartbeat_wait_ms: int = HEARTBEAT_WAIT_MS,
                 call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.socket_path = Path(socket_path)
        self.node_id = node_id
        self.heartbeat_wait_ms = heartbeat_wait_ms
        self.call_timeout_s = call_timeout_s
        self.broker: ImageSink | None = None
        self.broker_epoch = 0
        self.stopping = False  # set by shutdown(): the session is not renewed
        self.registrations = 0  # how many times this broker registered (tests, logs)
        self.sessions = 0  # how many times it connected and registered or resumed its session
        self._connection: rpc.RpcConnection | None = None
        self._state = ""

    def attach(self, broker: ImageSink) -> None:
        """The broker whose images this client applies (and waits for, after each change)."""
        self.broker = broker

    @property
    def connected(self) -> bool:
        return self._connection is not None

    # ------------------------------------------------------------------ the session
    async def run(self, host: str, port: int, pid: int, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Register and heartbeat forever, reconnecting when the controller goes away.
        task_status is started once after the first registration."""
        started = False
        backoff = BACKOFF_MIN_S
        while True:
            try:
                async with rpc.connect(self.socket_path) as connection:
                    resumed = await self._resume(connection)
                    if self.stopping:
                        await anyio.sleep_forever()
                    if not resumed:
                        await self._register(connection, host, port, pid)
                    self._connection = connection
                    self.sessions += 1
                    self._set_state("connected", "%s with the controller at %s (epoch %d)",
                                    "resumed the session" if resumed else "registered", self.socket_path,
                                    self.broker_epoch)
                    backoff = BACKOFF_MIN_S
                    if not started:
                        started = True
                        task_status.started()
                    await self._heartbeats(connection, host, port, pid)
            except (OSError, TimeoutError) as e:  # RpcConnectionError is an OSError
                self._set_state("unreachable", "controller at %s unreachable (%s); serving with image %d, "
                                "retrying", self.socket_path, e, self._image_version())
            except BrokerError as e:  # registration refused: try again, as if the controller were away
                self._set_state("refused", "the controller refused to register this broker: %s %s; retrying",
                                e.code.name, e.message)
            finally:
                self._connection = None
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _resume(self, connection: rpc.RpcConnection) -> bool:
        """After a reconnect: go on under the current epoch if the controller (restarted, with its
        state from disk) still counts it; False if this broker must register."""
        if self.broker_epoch == 0:
            return False
        try:
            image = await connection.call(
                m.Heartbeat(self.node_id, self.broker_epoch, self._image_version(), 0, self._offsets()),
                self.call_timeout_s)
        except BrokerError as e:
            if e.code != ErrorCode.STALE_BROKER_EPOCH:
                raise
            return False
        if image is not None and self.broker is not None:
            await self.broker.install_image(image)
        return True

    async def _register(self, connection: rpc.RpcConnection, host: str, port: int, pid: int) -> None:
        result = await connection.call(m.Register(self.node_id, host, port, pid), self.call_timeout_s)
        self.broker_epoch = result.broker_epoch
        self.registrations += 1
        if self.broker is not None:
            await self.broker.install_image(result.image)

    async def _heartbeats(self, connection: rpc.RpcConnection, host: str, port: int, pid: int) -> None:
        while True:
            try:
                image = await self.heartbeat(connection)
            except BrokerError as e:
                if e.code != ErrorCode.STALE_BROKER_EPOCH:
                    log.warning("heartbeat refused: %s %s", e.code.name, e.message)
                    await anyio.sleep(ERROR_RETRY_S)
                    continue
                if self.stopping:  # down after its controlled shutdown, as asked: no new session
                    await anyio.sleep_forever()
                log.warning("fenced by the controller (%s): registering again", e.message)
                await self._register(connection, host, port, pid)
                log.info("registered again (epoch %d)", self.broker_epoch)
                continue
            if image is not None and self.broker is not None:
                await self.broker.install_image(image)

    async def heartbeat(self, connection: rpc.RpcConnection) -> MetadataImage | None:
        """One heartbeat long-poll: a newer image, or None (tests override this to stop heartbeats)."""
        return await connection.call(
            m.Heartbeat(self.node_id, self.broker_epoch, self._image_version(), self.heartbeat_wait_ms,
                        self._offsets()),
            self.heartbeat_wait_ms / 1000 + HEARTBEAT_GRACE_S)

    def _offsets(self) -> tuple[m.ReplicaOffsets, ...]:
        if self.broker is None:
            return ()
        return tuple(m.ReplicaOffsets(r.topic, r.index, r.log_end_offset, r.high_watermark)
                     for r in self.broker.replicas())

    def _image_version(self) -> int:
        return self.broker.image.version if self.broker is not None else 0

    def _set_state(self, state: str, message: str, *args: Any) -> None:
        """Log once per change of state, not at every retry."""
        if state != self._state:
            self._state = state
            (log.info if state == "connected" else log.warning)(message, *args)

    async def shutdown(self, timeout_s: float) -> None:
        """Controlled shutdown: tell the controller this broker stops (it moves leaderships now and
        does not fence the broker when it returns), and register no more; a controller that does
        not answer within timeout_s is not waited for. The image the controller publishes is not
        waited for either: a broker marked down gets no more images (its heartbeat is refused),
        so waiting for it took the whole timeout, and the broker closes next anyway."""
        self.stopping = True
        if not self.broker_epoch:
            return
        with anyio.move_on_after(timeout_s):
            try:
                await self._answer(m.ShutdownBroker(self.node_id, self.broker_epoch))
            except BrokerError as e:
                log.info("controlled shutdown not acknowledged: %s", e.message)

    # ------------------------------------------------------------------ the ControllerClient
    async def call(self, request: m.Operation[R]) -> R:
        reply = await self._answer(request)
        if request.PUBLISHES:
            await self._applied(reply.version)
        return reply.result

    async def _answer(self, request: m.Operation[R]) -> m.Reply[R]:
        """The controller's reply: its result, and the version of the image that has its effect."""
        connection = self._connection
        if connection is None:
            raise BrokerError(ErrorCode.NOT_CONTROLLER, "the controller is not reachable; retry later")
        try:
            return await connection.answer(request, self.call_timeout_s)
        except TimeoutError:
            raise BrokerError(ErrorCode.REQUEST_TIMED_OUT,
                              f"the controller did not answer within {self.call_timeout_s:.0f}s") from None
        except rpc.RpcConnectionError:
            raise BrokerError(ErrorCode.NOT_CONTROLLER, "the connection to the controller closed; retry") from None

    async def _applied(self, version: int) -> None:
        if self.broker is not None:
            try:
                await self.broker.wait_for_image(version, self.call_timeout_s)
            except TimeoutError:
                raise BrokerError(ErrorCode.REQUEST_TIMED_OUT,
                                  f"metadata version {version} did not reach this broker in time") from None


__all__ = ["RemoteControllerClient", "HEARTBEAT_WAIT_MS"]
